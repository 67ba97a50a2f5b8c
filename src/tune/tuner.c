/*
 * Tuner: builds the communicator's topology with its link costs, and picks
 * each call's all-to-all algorithm by pricing every candidate's schedule
 * with the cost model (cost_model.h) in the loop of pricing.c.
 *
 * Link costs come, in order of precedence, from MOECCL_TUNE_FILE, from
 * MOECCL_TOPO_FILE, or from what the transport that carries each class here
 * reports (moeccl_transport_attr, with its own settings applied; its
 * numbers were fitted with a2a_sim --topo to `a2a_perf -a all` sweeps on
 * the development machine, 4 ranks as 2 simulated nodes: shared memory, and
 * ucx or ofi over kernel TCP; on other fabrics give the machine's numbers
 * in MOECCL_TUNE_FILE).  The tuner reads no transport's settings.
 *
 * Consistency: ranks must never disagree on the algorithm of a call.  The
 * topology and costs are checked equal on every rank at init (a hash through
 * the bootstrap); a uniform call is priced on the same sample of ranks on
 * every rank; a v-call is priced as a uniform call of MOECCL_TUNE_V_BYTES per
 * block.  Choices are cached per block size.
 *
 * Device memory: a call whose buffers are device memory is priced on a
 * view of the topology with the device costs (HBM, peer link, copy-engine
 * and kernel launch: the tune file's 'device' line, else measured at
 * creation where a device backend sees a device (probe.h), else H200-class
 * defaults; moeccl_topo_device_view), cached apart from host calls; the
 * device costs are part of the init check.
 *
 * Measured costs (probe.h, MOECCL_TUNE_PROBE): the host copy rate and the
 * device's costs are measured between the two rounds of the init check,
 * where no file gives them, and every rank takes the values agreed from
 * the second round's table.
 */
#include "tune/tuner.h"
#include "comm/bootstrap.h"
#include "base/param.h"
#include "topo/topo.h"
#include "transport/transport.h"
#include "tune/cost_model.h"
#include "tune/pricing.h"
#include "tune/probe.h"

#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#define CACHE_SLOTS 32
#define MAX_SAMPLE 8

typedef struct {
  size_t block; /* per-peer bytes priced */
  int v;        /* an alltoallv (its count exchange priced too) */
  int device;   /* on device buffers (priced with the device view) */
  int algo;     /* chosen id, -1: empty slot */
  int chunks;   /* the pipelined algorithm's chunks priced cheapest */
  unsigned age;
} cache_entry_t;

/* A collective's choice, per call shape. */
typedef struct {
  int kind, root, algo; /* algo -1: empty slot */
  int device;           /* on device buffers */
  size_t count, elem;
  unsigned age;
} coll_entry_t;

struct moeccl_tuner {
  cache_entry_t cache[CACHE_SLOTS];
  coll_entry_t coll_cache[CACHE_SLOTS];
  int coll_last; /* index of the last hit */
  int a2a_last;  /* the same for the all-to-all cache */
  unsigned clock;
  moeccl_sched_t sched;  /* candidates' schedules while pricing */
  moeccl_nic_load_t nic; /* their NIC-mates' loads (moeccl_model_price_nic) */
  size_t v_bytes;        /* MOECCL_TUNE_V_BYTES */
  /* Machines with more ranks than cores (ranks MOECCL_HOSTID puts on
   * separate nodes of one machine, or oversubscribed runs): their ranks'
   * CPU work shares the cores, so a call takes at least the machine's summed
   * CPU time over its cores.  Set only when some machine is oversubscribed
   * and the communicator is small enough to price every rank. */
  int oversubscribed;
  int* machine_of;        /* [nranks] machine index */
  int* machine_cpus;      /* [machines] cores */
  double* machine_cpu_us; /* [machines] scratch while pricing */
  double* rank_cpu_us;    /* [nranks] each rank's CPU time while pricing */
  int* meta_index;        /* [nranks] scratch: members of a count exchange priced */
  int nmachines;
  moeccl_forced_t forced; /* MOECCL_ALGO and the like (forced.c) */
  int last_algo;          /* the previous all-to-all choice, for logging changes */
  int chunks_param;       /* MOECCL_A2A_CHUNKS (0: priced per call) */
  int a2a_chunks;         /* the last pick's chunks */
  int moe_chunks_param;   /* MOECCL_MOE_CHUNKS (0: priced per call) */
  /* comm->topo as calls on device buffers are priced (device_view). */
  moeccl_topo_t dev_topo;
  /* The cost probes this creation runs (probe.h; the same on every rank)
   * and what they gave. */
  int probe_host, probe_device;
  int copy_measured, dev_measured; /* 1: the agreed measurement replaced the cost */
};

#define MAX_MACHINE_PRICED 64 /* ranks priced one by one for the machine bound */

/* Packing copies in host memory (per copy op, GB/s).  The links' costs are
 * the transports' own (moeccl_transport_attr). */
#define HOST_COPY_OVERHEAD_US 0.1
#define HOST_COPY_GBPS 20.0

/* Nodes that share one machine (MOECCL_HOSTID splits it into simulated
 * nodes) reach each other over the loopback interface: the network's bytes
 * are copied by the same cores as shared memory's, through the kernel, at
 * about a fifth of shared memory's rate (a2a_perf -M, 16 MiB per rank, 4
 * ranks on 2 cores: 3.9 ms over shm, 19.3 ms over ofi tcp, 22.6 ms over
 * ucx tcp, 2 runs each).  The network's bandwidth is then shared memory's
 * over this; its latency and overhead stay the transport's. */
#define LOOPBACK_SLOWDOWN 5.0

static uint64_t fnv(uint64_t h, const void* p, size_t n) {
  const unsigned char* b = p;
  for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001b3ULL;
  return h;
}

static uint64_t topo_hash(const moeccl_topo_t* t) {
  uint64_t h = 0xcbf29ce484222325ULL;
  h = fnv(h, t->rank_node, sizeof(int) * (size_t)t->nranks);
  h = fnv(h, t->node_group, sizeof(int) * (size_t)t->nnodes);
  h = fnv(h, t->link, sizeof(t->link));
  h = fnv(h, &t->copy_GBps, sizeof(t->copy_GBps));
  return fnv(h, &t->copy_overhead_us, sizeof(t->copy_overhead_us));
}

/* A split communicator keeps its ranks' nodes, the rails and the link
 * costs of its parent (whose topology may have come from a file that
 * describes the parent's ranks, not the child's), and its groups where they
 * still form consecutive runs of equal size over the child's nodes
 * (moeccl_topo_subset). */
static moecclResult_t inherit_topo(moeccl_comm_t* c) {
  const moeccl_topo_t* p = c->parent_topo;
  moecclResult_t rc = moeccl_topo_subset(c->topo, p, c->parent_ranks, c->nranks);
  if (rc != moecclSuccess) return moeccl_error(c, rc, "topology: cannot build it");
  snprintf(c->topo->source, sizeof(c->topo->source), "split of %.100s", p->source);
  return moecclSuccess;
}

static moecclResult_t build_topo(moeccl_comm_t* c, int* costs_given) {
  if (c->parent_topo) {
    *costs_given = 1;
    return inherit_topo(c);
  }
  uint64_t* node_of = malloc(sizeof(uint64_t) * (size_t)c->nranks);
  if (!node_of) return moeccl_error(c, moecclSystemError, "out of memory");
  for (int r = 0; r < c->nranks; r++) node_of[r] = c->peers[r].host_hash;
  char err[256] = "";
  moecclResult_t rc = moeccl_topo_configure(c->topo, c->nranks, node_of, err, sizeof(err));
  free(node_of);
  if (rc != moecclSuccess)
    return moeccl_error(c, rc, "topology: %s", err[0] ? err : "cannot build it");
  const char* file = moeccl_param_topo_file();
  const char* tune = moeccl_param_tune_file();
  *costs_given = (file && *file) || (tune && *tune);
  return moecclSuccess;
}

/* Whether the communicator's nodes all share one machine. */
static int loopback_network(const moeccl_comm_t* c) {
  return c->topo->nnodes > 1 && c->tuner->nmachines == 1;
}

/* Costs of the classes from what the transports that carry them report
 * (moeccl_transport_attr: within a node shared memory, or the network with
 * MOECCL_SHM_DISABLE=1; between nodes the network transport, one for all
 * ranks, since selection agreed on it, so that a rank alone on its node
 * prices the same).  A class no transport carries keeps the topology's
 * default.  A network between nodes of one machine is its loopback. */
static moecclResult_t transport_defaults(moeccl_comm_t* c) {
  moeccl_topo_t* t = c->topo;
  t->copy_overhead_us = HOST_COPY_OVERHEAD_US, t->copy_GBps = HOST_COPY_GBPS;
  moeccl_transport_attr_t machine = {0};
  if (loopback_network(c)) MOECCL_CHECK(moeccl_transport_attr_machine(c, &machine));
  for (int k = MOECCL_LINK_NODE; k < MOECCL_LINK_NCLASSES; k++) {
    moeccl_transport_attr_t a;
    MOECCL_CHECK(moeccl_transport_attr(c, (moeccl_link_class_t)k, &a));
    if (!a.name) continue;
    t->link[k] = (moeccl_link_t){a.latency_us, a.overhead_us, a.bw_GBps, (double)a.rndv_bytes};
    if (a.network && loopback_network(c)) t->link[k].bw_GBps = machine.bw_GBps / LOOPBACK_SLOWDOWN;
  }
  return moecclSuccess;
}

/* Groups the ranks by machine (peers' machine_hash) with each machine's
 * core count (the union of its ranks' affinity masks, so ranks bound to a
 * core each do not look oversubscribed), and notes whether any machine has
 * more ranks than cores. */
static moecclResult_t machines_init(moeccl_comm_t* c) {
  struct moeccl_tuner* tu = c->tuner;
  int n = c->nranks;
  if (n <= 0 || n > MAX_MACHINE_PRICED) return moecclSuccess; /* large: no machine bound */
  tu->machine_of = malloc(sizeof(int) * (size_t)n);
  tu->machine_cpus = calloc((size_t)n, sizeof(int));
  tu->machine_cpu_us = calloc((size_t)n, sizeof(double));
  tu->rank_cpu_us = calloc((size_t)n, sizeof(double));
  int* count = calloc((size_t)n, sizeof(int));
  if (!tu->machine_of || !tu->machine_cpus || !tu->machine_cpu_us || !tu->rank_cpu_us || !count)
    return free(count), moeccl_error(c, moecclSystemError, "out of memory");
  for (int r = 0; r < n; r++) {
    int m = -1;
    for (int q = 0; q < r && m < 0; q++)
      if (c->peers[q].machine_hash == c->peers[r].machine_hash) m = tu->machine_of[q];
    if (m < 0) m = tu->nmachines++;
    tu->machine_of[r] = m;
    count[m]++;
    if (tu->machine_cpus[m] == 0) tu->machine_cpus[m] = moeccl_machine_cores(c, r);
  }
  for (int m = 0; m < tu->nmachines; m++)
    if (tu->machine_cpus[m] > 0 && count[m] > tu->machine_cpus[m]) tu->oversubscribed = 1;
  free(count);
  return moecclSuccess;
}

/* The device costs, which price calls on device buffers. */
static uint64_t device_hash(uint64_t h, const moeccl_topo_device_t* d) {
  const double v[4] = {d->hbm_GBps, d->link_GBps, d->copy_us, d->launch_us};
  return fnv(h, v, sizeof(v));
}

/* The view of comm->topo that prices calls on device buffers, and its
 * costs in the log: what a user reads to see how device calls are priced. */
static void device_view_init(moeccl_comm_t* c) {
  moeccl_topo_device_view(c->topo, &c->tuner->dev_topo);
  const moeccl_topo_device_t* d = &c->topo->dev;
  if (c->rank != 0) return;
  static const char* const measured[3] = {
      "H200-class defaults, not measured",
      "measured at creation: HBM and copy-engine launch; the peer link and kernel launch are "
      "H200-class defaults",
      "measured at creation: HBM, copy-engine and kernel launch; the peer link is an H200-class "
      "default"};
  INFO(ALGO,
       "device buffers (%s): HBM %.4g GB/s (a copy %.4g GB/s), peer link %.4g GB/s per "
       "direction, copy-engine launch %.3g us, kernel launch %.3g us; the network classes "
       "as above",
       d->given         ? "costs from the file"
       : c->parent_topo ? "the parent communicator's"
                        : measured[c->tuner->dev_measured],
       d->hbm_GBps, d->hbm_GBps / 2.0, d->link_GBps, d->copy_us, d->launch_us);
}

/* Everything a price depends on besides the call: placement, groups,
 * rails, every cost, the direct window and the alltoallv block size. */
static uint64_t pricing_hash(const moeccl_comm_t* c) {
  const moeccl_topo_t* t = c->topo;
  uint64_t h = topo_hash(t);
  h = fnv(h, &t->nrails, sizeof(t->nrails));
  h = fnv(h, &c->a2a_window, sizeof(c->a2a_window));
  h = fnv(h, &c->tuner->chunks_param, sizeof(c->tuner->chunks_param));
  /* Forced algorithms too: a rank that forced another would run another
   * schedule. */
  const moeccl_forced_t* f = &c->tuner->forced;
  h = fnv(h, &f->algo, sizeof(f->algo));
  h = fnv(h, f->coll, sizeof(f->coll));
  h = fnv(h, &f->moe, sizeof(f->moe));
  h = device_hash(h, &t->dev);
  /* Whether costs are measured: the ranks must take the agreed values alike. */
  const int probes[2] = {c->tuner->probe_host, c->tuner->probe_device};
  h = fnv(h, probes, sizeof(probes));
  return fnv(h, &c->tuner->v_bytes, sizeof(c->tuner->v_bytes));
}

/* Which cost probes this creation runs (probe.h): MOECCL_TUNE_PROBE's, but
 * none of a cost a file gives, none for a split communicator (it inherits
 * its parent's costs) or a single rank (nothing to choose).  Every rank
 * decides alike (pricing_hash checks the outcome), whatever devices it
 * sees: a rank without one measures nothing and takes the agreed costs. */
static void probes_init(moeccl_comm_t* c) {
  const char* p = moeccl_param_tune_probe();
  int all = !p || !*p || !strcasecmp(p, "all");
  int on = c->nranks > 1 && !c->parent_topo;
  c->tuner->probe_host = on && !c->topo->copy_given && (all || !strcasecmp(p, "host"));
  c->tuner->probe_device = on && !c->topo->dev.given && (all || !strcasecmp(p, "device"));
}

/* Whether calls on device buffers may run here: some peer is reached by
 * a device (stream) transport, whose setup already made this rank's
 * device context current (it registered host memory with the device).  A
 * rank without one measures no device, so that a program on host memory
 * on a GPU machine gets no context on a device it never uses. */
static int uses_device(const moeccl_comm_t* c) {
  for (int p = 0; c->peer_stream_transport && p < c->nranks; p++)
    if (c->peer_stream_transport[p] != 0xff) return 1;
  return 0;
}

/* The probes, right after the first round (entered_ns: when each rank
 * entered it), so that the ranks of a machine copy at once. */
static void probes_run(moeccl_comm_t* c, const int64_t* entered_ns, moeccl_probe_t* mine) {
  memset(mine, 0, sizeof(*mine));
  if (c->tuner->probe_host) moeccl_probe_host(moeccl_probe_host_start(c, entered_ns), mine);
  if (c->tuner->probe_device && uses_device(c)) moeccl_probe_device(mine);
  TRACE(ALGO,
        "rank %d: probes: host %.0f bytes copied in %.3g ms of the window; device HBM %.4g GB/s, "
        "copy %.3g us, launch %.3g us",
        c->rank, mine->host_bytes, mine->host_ready_s * 1e3, mine->dev_hbm_GBps, mine->dev_copy_us,
        mine->dev_launch_us);
}

/* The agreed measurements (the same on every rank) in place of the
 * defaults; a cost nobody measured keeps its value. */
static moecclResult_t probes_apply(moeccl_comm_t* c, const moeccl_probe_t* all) {
  struct moeccl_tuner* tu = c->tuner;
  if (!tu->probe_host && !tu->probe_device) return moecclSuccess;
  double copy = 0.0;
  moeccl_probe_dev_t d = {0};
  if (moeccl_probe_agree(c, all, &copy, &d) != moecclSuccess)
    return moeccl_error(c, moecclSystemError, "out of memory");
  moeccl_topo_t* t = c->topo;
  if (tu->probe_host && copy > 0) t->copy_GBps = copy, tu->copy_measured = 1;
  if (tu->probe_device && d.hbm_GBps > 0 && d.copy_us > 0) {
    t->dev.hbm_GBps = d.hbm_GBps, t->dev.copy_us = d.copy_us;
    if (d.launch_us > 0) t->dev.launch_us = d.launch_us;
    tu->dev_measured = d.launch_us > 0 ? 2 : 1;
  }
  return moecclSuccess;
}

/* Where the copy costs come from, for the log. */
static const char* copy_source(const moeccl_comm_t* c) {
  if (c->tuner->copy_measured)
    return "measured at creation by every rank of a machine at once; the slowest machine's";
  if (c->topo->copy_given) return "from the file";
  if (c->parent_topo) return "the parent communicator's";
  if (c->tuner->probe_host) return "default: the probe measured nothing";
  return "default, not measured";
}

moecclResult_t moeccl_tuner_init(moeccl_comm_t* c) {
  c->tuner = calloc(1, sizeof(*c->tuner));
  c->topo = calloc(1, sizeof(*c->topo));
  if (!c->tuner || !c->topo) return moeccl_error(c, moecclSystemError, "out of memory");
  for (int i = 0; i < CACHE_SLOTS; i++) c->tuner->cache[i].algo = -1;
  for (int i = 0; i < CACHE_SLOTS; i++) c->tuner->coll_cache[i].algo = -1;
  moeccl_forced_read(c, &c->tuner->forced);
  c->tuner->last_algo = -1;
  c->tuner->meta_index = malloc(sizeof(int) * (size_t)c->nranks);
  if (!c->tuner->meta_index) return moeccl_error(c, moecclSystemError, "out of memory");
  c->tuner->v_bytes = moeccl_param_tune_v_bytes();
  c->tuner->chunks_param = (int)moeccl_param_a2a_chunks();
  c->tuner->moe_chunks_param = (int)moeccl_param_moe_chunks();
  c->a2a_window = (int)moeccl_param_a2a_window();
  if (c->a2a_window < 0) c->a2a_window = 0;
  int costs_given = 0;
  moecclResult_t built = build_topo(c, &costs_given);
  probes_init(c);
  if (c->tuner->probe_host) moeccl_probe_host_prepare();

  /* First round: whether every rank built a topology, rails per rank
   * (cores came with the peer table), and when it entered (the host
   * probe's window starts after the last rank of each machine did). */
  struct {
    int32_t ok, rails;
    int64_t entered_ns;
  }* all = calloc((size_t)c->nranks, sizeof(*all));
  int64_t* entered = calloc((size_t)c->nranks, sizeof(int64_t));
  if (!all || !entered)
    return free(all), free(entered), moeccl_error(c, moecclSystemError, "out of memory");
  all[c->rank].ok = built == moecclSuccess;
  all[c->rank].rails = built == moecclSuccess ? c->topo->nrails : 0;
  all[c->rank].entered_ns = moeccl_probe_clock_ns();
  moecclResult_t rc = moeccl_bootstrap_allgather(c->boot, all, sizeof(*all));
  int failed = -1;
  for (int r = 0; rc == moecclSuccess && r < c->nranks; r++) {
    if (!all[r].ok && failed < 0) failed = r;
    /* Rails found by hwloc may differ between machines: all take the least. */
    if (all[r].ok && all[r].rails < c->topo->nrails) c->topo->nrails = all[r].rails;
  }
  if (rc == moecclSuccess && failed < 0) rc = machines_init(c);
  for (int r = 0; r < c->nranks; r++) entered[r] = all[r].entered_ns;
  free(all);
  /* Second round's entries: the pricing hash and what the probes found. */
  struct {
    uint64_t hash;
    moeccl_probe_t probe;
  }* round2 = calloc((size_t)c->nranks, sizeof(*round2));
  if (!round2) rc = moeccl_error(c, moecclSystemError, "out of memory");
  if (rc == moecclSuccess && failed < 0 && built == moecclSuccess)
    probes_run(c, entered, &round2[c->rank].probe);
  free(entered);
  if (rc != moecclSuccess || failed >= 0 || built != moecclSuccess) free(round2);
  if (built != moecclSuccess) return built; /* its text is set */
  MOECCL_CHECK(rc);
  if (failed >= 0)
    return moeccl_error(c, moecclInvalidUsage,
                        "rank %d could not build its topology (see its log); every rank stops",
                        failed);
  moecclResult_t costs = costs_given ? moecclSuccess : transport_defaults(c);

  /* Second round: every rank must price alike, or their choices could
   * differ and a call would hang: same placement, groups, rails, costs,
   * window and alltoallv block size.  0: this rank has no costs (a
   * transport did not answer), and every rank stops. */
  round2[c->rank].hash = costs == moecclSuccess ? pricing_hash(c) : 0;
  rc = moeccl_bootstrap_allgather(c->boot, round2, sizeof(*round2));
  int differs = -1, unpriced = -1;
  for (int r = 0; rc == moecclSuccess && r < c->nranks; r++) {
    if (round2[r].hash == 0 && unpriced < 0) unpriced = r;
    if (round2[r].hash != round2[0].hash && differs < 0) differs = r;
  }
  moeccl_probe_t* probes = malloc(sizeof(moeccl_probe_t) * (size_t)c->nranks);
  for (int r = 0; probes && r < c->nranks; r++) probes[r] = round2[r].probe;
  free(round2);
  if (rc == moecclSuccess && !probes) rc = moeccl_error(c, moecclSystemError, "out of memory");
  if (rc != moecclSuccess) free(probes);
  MOECCL_CHECK(rc);
  if (costs != moecclSuccess || unpriced >= 0 || differs >= 0) free(probes);
  if (costs != moecclSuccess)
    return moeccl_error(c, costs, "tuner: a transport did not report its link costs");
  if (unpriced >= 0)
    return moeccl_error(c, moecclInvalidUsage,
                        "rank %d has no link costs from its transports (see its log); every "
                        "rank stops",
                        unpriced);
  if (differs >= 0)
    return moeccl_error(
        c, moecclInvalidUsage,
        "rank %d and rank 0 would price algorithms differently: MOECCL_TOPO_FILE, "
        "MOECCL_TOPO_GROUP_SIZE, MOECCL_TUNE_FILE (its device line too), MOECCL_TUNE_V_BYTES, "
        "MOECCL_A2A_WINDOW, MOECCL_A2A_CHUNKS, MOECCL_TUNE_PROBE, the transports' settings "
        "(MOECCL_NET, MOECCL_NET_EAGER_SIZE, MOECCL_SHM_EAGER_SIZE, MOECCL_SHM_DISABLE), "
        "MOECCL_ALGO, MOECCL_<COLL>_ALGO and MOECCL_MOE_ALGO must be the same on every rank",
        differs);
  rc = probes_apply(c, probes);
  free(probes);
  MOECCL_CHECK(rc);
  const moeccl_topo_t* t = c->topo;
  if (c->rank == 0) {
    INFO(ALGO, "topology (%s): %d ranks, %d nodes (%d ranks each%s), %d groups, %d rails; %s",
         t->source, t->nranks, t->nnodes, t->ranks_per_node, t->ranks_per_node ? "" : ": irregular",
         t->ngroups, t->nrails, t->hw[0] ? t->hw : "no hardware information");
    static const char* names[] = {"self", "node", "group", "global"};
    for (int k = MOECCL_LINK_NODE; k < MOECCL_LINK_NCLASSES; k++)
      INFO(ALGO, "link %s: latency %.2f us, overhead %.2f us, %.3g GB/s per rank", names[k],
           t->link[k].latency_us, t->link[k].overhead_us, t->link[k].bw_GBps);
    INFO(ALGO, "copies: %.2f us per copy, %.3g GB/s per rank (%s)", t->copy_overhead_us,
         t->copy_GBps, copy_source(c));
    if (loopback_network(c) && !costs_given)
      INFO(ALGO,
           "the %d nodes share one machine: the network is priced as loopback, at 1/%.0f "
           "of shared memory's bandwidth",
           t->nnodes, LOOPBACK_SLOWDOWN);
    if (c->tuner->oversubscribed)
      INFO(ALGO, "a machine holds more ranks than cores: candidates priced on every rank, "
                 "with the machine's summed CPU time over its cores as a floor");
    const char* dump = moeccl_param_topo_dump_file();
    char err[256] = "";
    if (dump && *dump && moeccl_topo_dump(t, dump, err, sizeof(err)) != moecclSuccess)
      WARN(INIT, "MOECCL_TOPO_DUMP_FILE: %s", err);
  }
  device_view_init(c);
  return moecclSuccess;
}

const moeccl_forced_t* moeccl_tuner_forced(const moeccl_comm_t* c) {
  static const moeccl_forced_t none = {-1, {[0 ... MOECCL_COLL_NKINDS - 1] = -1}, -1};
  return c->tuner ? &c->tuner->forced : &none;
}

int moeccl_tuner_machines(const moeccl_comm_t* c, const int** machine_of, const int** cores) {
  if (!c->tuner || !c->tuner->oversubscribed) return 0;
  *machine_of = c->tuner->machine_of, *cores = c->tuner->machine_cpus;
  return c->tuner->nmachines;
}

void moeccl_tuner_fini(moeccl_comm_t* c) {
  if (c->tuner) {
    moeccl_sched_free(&c->tuner->sched);
    moeccl_model_nic_free(&c->tuner->nic);
    free(c->tuner->machine_of);
    free(c->tuner->machine_cpus);
    free(c->tuner->machine_cpu_us);
    free(c->tuner->rank_cpu_us);
    free(c->tuner->meta_index);
  }
  free(c->tuner);
  c->tuner = NULL;
  if (c->topo) moeccl_topo_free(c->topo);
  free(c->topo);
  c->topo = NULL;
}

/* The ranks whose schedules are priced: all on small communicators, else a
 * fixed spread (first and last rank, first and last of a middle node, ...),
 * the same on every rank. */
static int sample_ranks(const moeccl_topo_t* t, int* out) {
  int n = t->nranks, k = 0;
  if (n <= MAX_SAMPLE) {
    for (int r = 0; r < n; r++) out[k++] = r;
    return k;
  }
  int cand[MAX_SAMPLE] = {0, n - 1, n / 2, n / 3};
  int nn = t->nnodes, c = 4;
  for (int i = 1; i <= 2 && c < MAX_SAMPLE; i++) {
    int node = (int)((long)nn * i / 3);
    int first = t->node_first[node], last = t->node_first[node + 1] - 1;
    cand[c++] = t->node_ranks[first];
    if (c < MAX_SAMPLE) cand[c++] = t->node_ranks[last];
  }
  for (int i = 0; i < c; i++) {
    int dup = 0;
    for (int j = 0; j < k; j++) dup |= out[j] == cand[i];
    if (!dup) out[k++] = cand[i];
  }
  return k;
}

/* ---- pricing (pricing.c): the sample, the oversubscribed machines ---------- */

/* worst, or on oversubscribed machines their ranks' summed CPU time
 * (machine_cpu_us) over their cores where that is more: the ranks' CPU
 * work shares the cores. */
static double machine_bound(const struct moeccl_tuner* tu, double worst) {
  for (int m = 0; tu->oversubscribed && m < tu->nmachines; m++) {
    double bound = tu->machine_cpus[m] > 0 ? tu->machine_cpu_us[m] / tu->machine_cpus[m] : 0.0;
    if (bound > worst) worst = bound;
  }
  return worst;
}

/* machine_bound over every rank's CPU time (cpu_us[r] of rank r: all are
 * priced when a machine is oversubscribed). */
static double machine_floor(const moeccl_pricing_t* p, const double* cpu_us, double worst) {
  const struct moeccl_tuner* tu = p->ctx;
  for (int m = 0; m < tu->nmachines; m++) tu->machine_cpu_us[m] = 0.0;
  for (int r = 0; r < p->nranks; r++) tu->machine_cpu_us[tu->machine_of[r]] += cpu_us[r];
  return machine_bound(tu, worst);
}

/* The ranks priced: the sample (sample_ranks) plus root, every rank when
 * oversubscribed (then ranks[] is not filled: the pricing takes 0..n-1).
 * A call on device buffers is priced on the device view, without the
 * machines' CPU floor: the streams, not the host's cores, move its bytes. */
static void priced_ranks(moeccl_comm_t* c, int root, int device, int* ranks,
                         moeccl_pricing_t* p) {
  struct moeccl_tuner* tu = c->tuner;
  p->topo = device ? &tu->dev_topo : c->topo;
  p->sched = &tu->sched;
  p->nic = &tu->nic;
  if (tu->oversubscribed && !device) {
    p->ranks = NULL, p->nranks = c->nranks;
    p->cpu_us = tu->rank_cpu_us, p->bound = machine_floor, p->ctx = tu;
    return;
  }
  int k = sample_ranks(c->topo, ranks), dup = root < 0;
  for (int i = 0; i < k; i++) dup |= ranks[i] == root;
  if (!dup) ranks[k++] = root;
  p->ranks = ranks, p->nranks = k;
}

/* ---- all-to-all ----------------------------------------------------------- */

const moeccl_a2a_algo_t* moeccl_tuner_pick(moeccl_comm_t* c, const moeccl_a2a_desc_t* d,
                                           int device) {
  c->tuner->a2a_chunks = c->tuner->chunks_param;
  if (c->tuner->forced.algo >= 0) return &moeccl_a2a_algos[c->tuner->forced.algo];
  int v = d->send_counts != NULL;
  size_t block = v ? c->tuner->v_bytes : d->block_bytes;
  struct moeccl_tuner* tu = c->tuner;
  tu->clock++;
  /* Training repeats one shape: try the last hit first. */
  cache_entry_t* last = &tu->cache[tu->a2a_last];
  if (last->algo >= 0 && last->block == block && last->v == v && last->device == device) {
    last->age = tu->clock;
    tu->a2a_chunks = last->chunks;
    return &moeccl_a2a_algos[last->algo];
  }
  cache_entry_t* slot = &tu->cache[0];
  for (int i = 0; i < CACHE_SLOTS; i++) {
    cache_entry_t* e = &tu->cache[i];
    if (e->algo < 0) { /* slots fill in order: nothing past the first empty one */
      slot = e;
      break;
    }
    if (e->block == block && e->v == v && e->device == device) {
      e->age = tu->clock;
      tu->a2a_last = i;
      tu->a2a_chunks = e->chunks;
      return &moeccl_a2a_algos[e->algo];
    }
    if (e->age < slot->age) slot = e;
  }
  /* Miss: price every candidate, in table order; a tie goes to the earlier. */
  moeccl_a2a_pricing_t call = {.d = {.nranks = c->nranks,
                                     .block_bytes = block,
                                     .elem_size = 1,
                                     .window = c->a2a_window,
                                     .topo = c->topo},
                               .v = v,
                               .meta_index = tu->meta_index};
  moeccl_pricing_t p = {0};
  int ranks[MAX_SAMPLE + 1];
  priced_ranks(c, -1, device, ranks, &p);
  call.d.topo = p.topo;
  call.d.chunks = tu->chunks_param;
  if (!tu->chunks_param && moeccl_pricing_a2a_chunks(&p, &call) == -2) return NULL;
  moeccl_pricing_a2a(&p, &call);
  char line[640];
  int best = moeccl_pricing_cheapest(&p, line, sizeof(line), NULL);
  if (best == -2) return NULL;
  if (best < 0) best = MOECCL_A2A_DIRECT;
  tu->a2a_chunks = call.d.chunks;
  slot->block = block, slot->v = v, slot->algo = best, slot->chunks = call.d.chunks;
  slot->device = device;
  slot->age = tu->clock;
  tu->a2a_last = (int)(slot - tu->cache);
  INFO(ALGO,
       "rank %d: all-to-all%s of %zu bytes per peer%s%s on %d ranks: %s (predicted us: %s; "
       "pipelined in %d chunks)",
       c->rank, v ? "v" : "", block, v ? " (MOECCL_TUNE_V_BYTES)" : "",
       device ? " in device memory" : "", c->nranks, moeccl_a2a_algos[best].name,
       line[0] ? line : "none", call.d.chunks);
  tu->last_algo = best;
  return &moeccl_a2a_algos[best];
}

/* ---- the other collectives ------------------------------------------------ */

static int coll_hit(const coll_entry_t* e, const moeccl_coll_desc_t* d, int device) {
  return e->algo >= 0 && e->kind == (int)d->kind && e->count == d->count &&
         e->elem == d->elem_size && e->root == d->root && e->device == device;
}

static coll_entry_t* coll_lookup(struct moeccl_tuner* tu, const moeccl_coll_desc_t* d, int device,
                                 coll_entry_t** victim) {
  tu->clock++;
  /* Training repeats one shape: try the last hit first. */
  coll_entry_t* last = &tu->coll_cache[tu->coll_last];
  if (coll_hit(last, d, device)) return last->age = tu->clock, last;
  *victim = &tu->coll_cache[0];
  for (int i = 0; i < CACHE_SLOTS; i++) {
    coll_entry_t* e = &tu->coll_cache[i];
    if (coll_hit(e, d, device)) {
      e->age = tu->clock;
      tu->coll_last = i;
      return e;
    }
    if (e->algo < 0 || e->age < (*victim)->age) *victim = e;
  }
  return NULL;
}

int moeccl_tuner_a2a_chunks(const moeccl_comm_t* c) { return c->tuner ? c->tuner->a2a_chunks : 0; }

int moeccl_tuner_pick_coll(moeccl_comm_t* c, const moeccl_coll_desc_t* d, int device) {
  if (c->tuner->forced.coll[d->kind] >= 0) return c->tuner->forced.coll[d->kind];
  coll_entry_t* slot;
  coll_entry_t* hit = coll_lookup(c->tuner, d, device, &slot);
  if (hit) return hit->algo;
  /* In place is each rank's own affair (NCCL decides it per rank from the
   * pointers) and changes only local ops: price without it, so that every
   * rank prices the same schedules. */
  moeccl_coll_desc_t call = *d;
  call.in_place = 0;
  moeccl_pricing_t p = {0};
  int ranks[MAX_SAMPLE + 1];
  priced_ranks(c, d->root, device, ranks, &p);
  call.topo = p.topo;
  moeccl_pricing_coll(&p, &call); /* direct, rhd, ring, ...: a tie to the earlier */
  char line[640];
  int best = moeccl_pricing_cheapest(&p, line, sizeof(line), NULL);
  if (best == -2) return -1;
  if (best < 0) best = MOECCL_COLL_DIRECT; /* implements every collective */
  *slot = (coll_entry_t){(int)d->kind, d->root, best, device, d->count, d->elem_size,
                         c->tuner->clock};
  INFO(ALGO, "rank %d: %s of %zu bytes%s on %d ranks: %s (predicted us: %s)", c->rank,
       moeccl_coll_kind_name(d->kind), d->count * d->elem_size, device ? " in device memory" : "",
       c->nranks,
       moeccl_coll_algos[best].name, line[0] ? line : "none");
  return best;
}

/* A MoE call's pricing (moeccl_pricing_moe): the slowest rank's steps, and
 * on machines with more ranks than cores each step at least their ranks'
 * summed CPU time of that step over the cores; where the network is the
 * loopback its rows cost those cores the kernel's copies, at the
 * loopback's rate as transport_defaults sets it from shared memory's, not
 * at the network link's (a topology file may give the link a shaped rate
 * that delays the rows but does not slow the copies). */
int moeccl_tuner_pick_moe(moeccl_comm_t* c, const moeccl_moe_layout_t* l, size_t row_bytes,
                          double us[3], int* chunks) {
  struct moeccl_tuner* tu = c->tuner;
  moeccl_moe_pricing_t m = {.topo = c->topo, .most = l->cost};
  if (tu->oversubscribed && l->cost_all) {
    m.all = l->cost_all, m.nranks = c->nranks, m.nmachines = tu->nmachines;
    m.machine_of = tu->machine_of, m.machine_cpus = tu->machine_cpus;
    m.scratch = tu->machine_cpu_us;
    if (loopback_network(c))
      m.loop_GBps = c->topo->link[MOECCL_LINK_NODE].bw_GBps / LOOPBACK_SLOWDOWN;
  }
  return moeccl_pricing_moe_pick(&m, (double)row_bytes, l->hier_ok, tu->forced.moe,
                                 tu->moe_chunks_param, us, chunks);
}

const moeccl_topo_t* moeccl_tuner_topo(const moeccl_comm_t* c, int device) {
  if (!c->tuner || !c->topo) return NULL;
  return device ? &c->tuner->dev_topo : c->topo;
}
