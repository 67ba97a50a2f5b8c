/*
 * The simulator's calls among members (include/moeccl_sim.h): all-to-all,
 * all-to-allv and the collectives, priced with the tuner's loop
 * (tune/pricing.h) on the members' topology (moeccl_topo_subset: what a
 * communicator split from the cluster's would see).  Members priced: all
 * of them up to PRICE_ALL (or on a communicator's oversubscribed machines,
 * as its tuner does), else a2a_sim's sample: ranks 0 and n-1, SPREAD
 * members spread over the nodes and, for an alltoallv, the HEAVY heaviest
 * senders and receivers.
 */
#include "api/sim_int.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tune/pricing.h"

#define PRICE_ALL 64
#define SPREAD 16
#define HEAVY 8

/* One call's members, their topology and the pricing's memory. */
typedef struct {
  const struct moecclSim* sim;
  const int* ranks; /* [n] the members' cluster ranks */
  int n;
  moeccl_topo_t topo; /* the members' */
  moeccl_sched_t sched;
  moeccl_nic_load_t nic;
  int* sample; /* [n] members priced */
  int nsample;
  unsigned char* seen;            /* [n] */
  double* cpu_us;                 /* [n] per priced member, with machines */
  double* machine_cpu_us;         /* [nmachines] */
  const size_t* bytes;            /* alltoallv: [n * n] */
  size_t *recv, *sdispl, *rdispl; /* [n] one member's column and offsets */
  int* meta_index;                /* [n] */
} sim_call_t;

static void call_free(sim_call_t* c) {
  moeccl_topo_free(&c->topo);
  moeccl_sched_free(&c->sched);
  moeccl_model_nic_free(&c->nic);
  void* arrays[] = {c->sample, c->seen,   c->cpu_us, c->machine_cpu_us,
                    c->recv,   c->sdispl, c->rdispl, c->meta_index};
  for (size_t i = 0; i < sizeof arrays / sizeof arrays[0]; i++) free(arrays[i]);
}

/* Checks the members: ranks of the cluster, none twice. */
static moecclResult_t check_members(const struct moecclSim* sim, const char* fn, const int* ranks,
                                    int n) {
  int N = sim->topo.nranks;
  if (!ranks) return moeccl_error(NULL, moecclInvalidArgument, "%s: ranks is NULL", fn);
  if (n < 1 || n > N)
    return moeccl_error(NULL, moecclInvalidArgument,
                        "%s: n = %d members; the cluster has %d ranks (1 to %d members)", fn, n, N,
                        N);
  int* first = malloc(sizeof(int) * (size_t)N);
  if (!first) return moeccl_error(NULL, moecclSystemError, "%s: out of memory", fn);
  for (int r = 0; r < N; r++) first[r] = -1;
  moecclResult_t rc = moecclSuccess;
  for (int i = 0; i < n && rc == moecclSuccess; i++) {
    if (ranks[i] < 0 || ranks[i] >= N)
      rc = moeccl_error(NULL, moecclInvalidArgument,
                        "%s: ranks[%d] = %d is not a rank of the cluster [0,%d)", fn, i, ranks[i],
                        N);
    else if (first[ranks[i]] >= 0)
      rc = moeccl_error(NULL, moecclInvalidArgument, "%s: ranks[%d] = %d repeats ranks[%d]", fn, i,
                        ranks[i], first[ranks[i]]);
    else first[ranks[i]] = i;
  }
  free(first);
  return rc;
}

/* The members' topology and the members priced (but the heaviest). */
static moecclResult_t call_init(sim_call_t* c, const struct moecclSim* sim, const char* fn,
                                const int* ranks, int n) {
  memset(c, 0, sizeof(*c));
  c->sim = sim, c->ranks = ranks, c->n = n;
  moecclResult_t rc = moeccl_topo_subset(&c->topo, &sim->topo, ranks, n);
  c->sample = malloc(sizeof(int) * (size_t)n);
  c->seen = calloc((size_t)n, 1);
  if (sim->nmachines) {
    c->cpu_us = calloc((size_t)n, sizeof(double));
    c->machine_cpu_us = calloc((size_t)sim->nmachines, sizeof(double));
  }
  if (rc != moecclSuccess || !c->sample || !c->seen ||
      (sim->nmachines && (!c->cpu_us || !c->machine_cpu_us)))
    return moeccl_error(NULL, moecclSystemError, "%s: out of memory", fn);
  if (n <= PRICE_ALL || sim->nmachines) {
    for (int i = 0; i < n; i++)
      c->nsample = moeccl_pricing_sample_add(i, n, c->seen, c->sample, c->nsample);
  } else {
    c->nsample = moeccl_pricing_sample_spread(&c->topo, SPREAD, c->seen, c->sample, 0);
  }
  return moecclSuccess;
}

/* The tuner's floor on oversubscribed machines (tuner.c), over the
 * members: their summed CPU time per machine over its cores. */
static double machine_floor(const moeccl_pricing_t* p, const double* cpu_us, double worst) {
  const sim_call_t* c = p->ctx;
  const struct moecclSim* sim = c->sim;
  for (int m = 0; m < sim->nmachines; m++) c->machine_cpu_us[m] = 0.0;
  for (int i = 0; i < p->nranks; i++)
    c->machine_cpu_us[sim->machine_of[c->ranks[p->ranks[i]]]] += cpu_us[i];
  for (int m = 0; m < sim->nmachines; m++) {
    double bound = sim->machine_cpus[m] > 0 ? c->machine_cpu_us[m] / sim->machine_cpus[m] : 0.0;
    if (bound > worst) worst = bound;
  }
  return worst;
}

static void pricing_init(moeccl_pricing_t* p, sim_call_t* c) {
  memset(p, 0, sizeof(*p));
  p->topo = &c->topo;
  p->sched = &c->sched;
  p->nic = &c->nic;
  p->ranks = c->sample;
  p->nranks = c->nsample;
  p->ctx = c;
  if (c->sim->nmachines) p->cpu_us = c->cpu_us, p->bound = machine_floor;
}

/* A price in microseconds to seconds, or the failure. */
static moecclResult_t result(const char* fn, double us, const char* algo, double* seconds,
                             const char** used) {
  if (us == MOECCL_PRICE_FAILED || us < 0)
    return moeccl_error(
        NULL, us == MOECCL_PRICE_FAILED ? moecclSystemError : moecclInternalError, "%s: %s", fn,
        us == MOECCL_PRICE_FAILED ? "out of memory" : "the model could not price it");
  *seconds = us * 1e-6;
  if (used) *used = algo;
  return moecclSuccess;
}

/* ---- all-to-all(v) ---------------------------------------------------------- */

static size_t pair_bytes(const void* ctx, int src, int dst) {
  const sim_call_t* c = ctx;
  return c->bytes[(size_t)src * (size_t)c->n + (size_t)dst];
}

/* Member rank's part of the alltoallv (elements are bytes). */
static void rank_part(const void* ctx, int rank, moeccl_a2a_desc_t* d) {
  const sim_call_t* c = ctx;
  size_t n = (size_t)c->n, so = 0, ro = 0;
  const size_t* row = &c->bytes[(size_t)rank * n];
  for (size_t p = 0; p < n; p++) {
    c->recv[p] = c->bytes[p * n + (size_t)rank];
    c->sdispl[p] = so, so += row[p];
    c->rdispl[p] = ro, ro += c->recv[p];
  }
  d->send_counts = row, d->send_displs = c->sdispl;
  d->recv_counts = c->recv, d->recv_displs = c->rdispl;
  d->elem_size = 1;
  d->pair_bytes = pair_bytes, d->pair_ctx = c;
}

/* Every member's bytes sent and received add up without overflow (its
 * buffers' extents); recv is n entries of scratch. */
static moecclResult_t check_sums(const char* fn, const size_t* bytes, int n, size_t* recv) {
  memset(recv, 0, sizeof(size_t) * (size_t)n);
  for (int i = 0; i < n; i++) {
    size_t sent = 0;
    const size_t* row = &bytes[(size_t)i * (size_t)n];
    for (int j = 0; j < n; j++)
      if (__builtin_add_overflow(sent, row[j], &sent) ||
          __builtin_add_overflow(recv[j], row[j], &recv[j]))
        return moeccl_error(NULL, moecclInvalidArgument,
                            "%s: the bytes member %d sends or member %d receives overflow a size_t",
                            fn, i, j);
  }
  return moecclSuccess;
}

static moecclResult_t v_init(sim_call_t* c, const char* fn, const size_t* bytes) {
  size_t n = (size_t)c->n;
  c->bytes = bytes;
  c->recv = malloc(n * sizeof(size_t));
  c->sdispl = malloc(n * sizeof(size_t));
  c->rdispl = malloc(n * sizeof(size_t));
  c->meta_index = malloc(n * sizeof(int));
  if (!c->recv || !c->sdispl || !c->rdispl || !c->meta_index)
    return moeccl_error(NULL, moecclSystemError, "%s: out of memory", fn);
  MOECCL_CHECK(check_sums(fn, bytes, c->n, c->recv));
  if (c->nsample < c->n) /* sampled: the heaviest too */
    c->nsample = moeccl_pricing_sample_heavy(bytes, c->n, HEAVY, c->seen, c->sample, c->nsample);
  return moecclSuccess;
}

static moecclResult_t find_a2a(const char* fn, const char* algo, const moeccl_a2a_algo_t** a) {
  *a = NULL;
  if (!algo) return moecclSuccess;
  *a = moeccl_a2a_algo_by_name(algo);
  if (*a && (*a)->schedule) return moecclSuccess;
  return moeccl_error(NULL, moecclInvalidArgument,
                      "%s: unknown algorithm '%s' (direct, pairwise, bruck, hier2, hier3, rail, "
                      "hier2p, railp, hier3p)",
                      fn, algo);
}

static moecclResult_t sim_a2a(moecclSim_t sim, const char* fn, const int* ranks, int n,
                              size_t block, const size_t* bytes, const char* algo, double* seconds,
                              const char** used) {
  MOECCL_CHECK(moeccl_sim_check(sim, fn));
  if (!seconds) return moeccl_error(NULL, moecclInvalidArgument, "%s: seconds is NULL", fn);
  const moeccl_a2a_algo_t* forced;
  MOECCL_CHECK(find_a2a(fn, algo, &forced));
  MOECCL_CHECK(check_members(sim, fn, ranks, n));
  if (!bytes && block > SIZE_MAX / (size_t)n)
    return moeccl_error(NULL, moecclInvalidArgument,
                        "%s: %zu bytes per peer times %d members overflows a size_t", fn, block, n);
  sim_call_t c;
  moecclResult_t rc = call_init(&c, sim, fn, ranks, n);
  int v = bytes != NULL;
  if (rc == moecclSuccess && v) rc = v_init(&c, fn, bytes);
  if (rc != moecclSuccess) return call_free(&c), rc;
  moeccl_a2a_pricing_t call = {.d = {.nranks = n,
                                     .block_bytes = block,
                                     .elem_size = 1,
                                     .window = sim->window,
                                     .topo = &c.topo},
                               .v = v,
                               .meta_index = c.meta_index,
                               .rank_part = v ? rank_part : NULL,
                               .ctx = &c};
  moeccl_pricing_t p;
  pricing_init(&p, &c);
  moeccl_pricing_a2a(&p, &call);
  double us;
  const char* name;
  if (forced) {
    us = moeccl_pricing_price(&p, (int)forced->id);
    name = moeccl_pricing_a2a_runs(forced, &call.d, v);
  } else {
    char line[640];
    int best = moeccl_pricing_cheapest(&p, line, sizeof line, &us);
    if (best == -2) us = MOECCL_PRICE_FAILED;
    else if (best < 0) us = moeccl_pricing_price(&p, MOECCL_A2A_DIRECT), best = MOECCL_A2A_DIRECT;
    name = best >= 0 ? moeccl_a2a_algos[best].name : NULL;
  }
  call_free(&c);
  return result(fn, us, name, seconds, used);
}

MOECCL_EXPORT moecclResult_t moecclSimAlltoAll(moecclSim_t sim, const int* ranks, int n,
                                               size_t bytesPerPeer, const char* algo,
                                               double* seconds, const char** algoUsed) {
  return sim_a2a(sim, "moecclSimAlltoAll", ranks, n, bytesPerPeer, NULL, algo, seconds, algoUsed);
}

MOECCL_EXPORT moecclResult_t moecclSimAlltoAllv(moecclSim_t sim, const int* ranks, int n,
                                                const size_t* bytes, const char* algo,
                                                double* seconds, const char** algoUsed) {
  if (!bytes) return moeccl_error(NULL, moecclInvalidArgument, "moecclSimAlltoAllv: bytes is NULL");
  return sim_a2a(sim, "moecclSimAlltoAllv", ranks, n, 0, bytes, algo, seconds, algoUsed);
}

/* ---- the other collectives ------------------------------------------------- */

static const moeccl_coll_kind_t coll_kinds[moecclSimNumColls] = {
    [moecclSimAllReduce] = MOECCL_COLL_ALLREDUCE,
    [moecclSimAllGather] = MOECCL_COLL_ALLGATHER,
    [moecclSimReduceScatter] = MOECCL_COLL_REDUCE_SCATTER,
    [moecclSimBroadcast] = MOECCL_COLL_BROADCAST,
};

MOECCL_EXPORT moecclResult_t moecclSimCollective(moecclSim_t sim, moecclSimColl_t coll,
                                                 const int* ranks, int n, size_t bytes,
                                                 double* seconds, const char** algoUsed) {
  const char* fn = "moecclSimCollective";
  MOECCL_CHECK(moeccl_sim_check(sim, fn));
  if (!seconds) return moeccl_error(NULL, moecclInvalidArgument, "%s: seconds is NULL", fn);
  if ((int)coll < 0 || coll >= moecclSimNumColls)
    return moeccl_error(NULL, moecclInvalidArgument, "%s: coll %d is not a moecclSimColl_t", fn,
                        (int)coll);
  MOECCL_CHECK(check_members(sim, fn, ranks, n));
  if (bytes > SIZE_MAX / (size_t)n)
    return moeccl_error(NULL, moecclInvalidArgument,
                        "%s: %zu bytes times %d members overflows a size_t", fn, bytes, n);
  if (bytes == 0) { /* the library returns at once */
    *seconds = 0.0;
    if (algoUsed) *algoUsed = "none";
    return moecclSuccess;
  }
  /* elements of the largest of 4, 2 and 1 bytes that divides bytes */
  size_t elem = bytes % 4 == 0 ? 4 : bytes % 2 == 0 ? 2 : 1;
  moeccl_coll_kind_t kind = coll_kinds[coll];
  sim_call_t c;
  moecclResult_t rc = call_init(&c, sim, fn, ranks, n);
  if (rc != moecclSuccess) return call_free(&c), rc;
  moeccl_coll_desc_t d = {.kind = kind,
                          .nranks = n,
                          .root = 0,
                          .count = bytes / elem,
                          .elem_size = elem,
                          .reduce =
                              kind == MOECCL_COLL_ALLREDUCE || kind == MOECCL_COLL_REDUCE_SCATTER,
                          .topo = &c.topo};
  moeccl_pricing_t p;
  pricing_init(&p, &c); /* the root, member 0, is always in the sample */
  moeccl_pricing_coll(&p, &d);
  char line[640];
  double us;
  int best = moeccl_pricing_cheapest(&p, line, sizeof line, &us);
  if (best == -2) us = MOECCL_PRICE_FAILED;
  else if (best < 0) us = moeccl_pricing_price(&p, MOECCL_COLL_DIRECT), best = MOECCL_COLL_DIRECT;
  call_free(&c);
  return result(fn, us, best >= 0 ? moeccl_coll_algos[best].name : NULL, seconds, algoUsed);
}
