/*
 * Pricing the candidate algorithms of one call, without a communicator:
 * each candidate's schedule is built for every priced rank and priced by
 * the cost model (cost_model.h); a candidate's time is that of its slowest
 * priced rank, and the cheapest candidate wins, a tie going to the one
 * earlier in the order given.  The tuner (tuner.c) prices a communicator's
 * calls with it on its sample of ranks; the simulator API (src/api/sim.c,
 * moeccl_sim.h) prices calls on a modelled cluster, and perf/a2a_sim
 * samples its ranks with the helpers at the end.
 */
#ifndef MOECCL_TUNE_PRICING_H_
#define MOECCL_TUNE_PRICING_H_

#include "algos/algos.h"
#include "algos/coll_algos.h"
#include "algos/moe_algos.h"
#include "sched/schedule.h"
#include "topo/topo.h"
#include "tune/cost_model.h"

typedef struct moeccl_pricing {
  const moeccl_topo_t* topo; /* the ranks' placement and link costs */
  moeccl_sched_t* sched;     /* every schedule is built here (reset first) */
  /* Optional: the scratch for pricing each rank with its NIC-mates' load
   * (moeccl_model_price_nic): every mate's schedule is built too, so a
   * rank costs its NIC's ranks' builds.  NULL: each rank priced alone. */
  moeccl_nic_load_t* nic;
  const int* ranks; /* the ranks priced; NULL: 0 .. nranks-1 */
  int nranks;
  const void* call; /* the call, as the functions below read it */
  const int* order; /* candidates (algorithm ids), in pricing order; NULL: 0..n-1 */
  int n;
  /* A later candidate wins only when cheaper by more than this fraction
   * (0: any cheaper one wins). */
  double tie;
  const char* (*name)(int algo);
  int (*applies)(const struct moeccl_pricing* p, int algo);
  /* Builds rank's schedule of algo into s, which has its standard buffers. */
  moecclResult_t (*build)(const struct moeccl_pricing* p, int algo, int rank, moeccl_sched_t* s);
  /* Optional: adds what rank's algo runs besides its schedule (an
   * alltoallv's count exchange) to *us and *cpu_us; may reuse s. */
  moecclResult_t (*extra)(const struct moeccl_pricing* p, int algo, int rank, moeccl_sched_t* s,
                          double* us, double* cpu_us);
  /* Optional: a candidate's time from its slowest priced rank's (worst)
   * and every priced rank's CPU time (cpu_us[i]: the i-th priced rank's),
   * e.g. the tuner's floor on machines with more ranks than cores. */
  double (*bound)(const struct moeccl_pricing* p, const double* cpu_us, double worst);
  double* cpu_us;  /* [nranks], for bound; NULL without one */
  const void* ctx; /* the caller's, for its functions */
  int slowest;     /* out: the slowest rank of the last moeccl_pricing_price */
} moeccl_pricing_t;

/* A price that failed: a schedule could not be built (out of memory).  A
 * tuner must then fail the call, since dropping the candidate on one rank
 * would let ranks choose differently. */
#define MOECCL_PRICE_FAILED (-2.0)

/* The predicted microseconds of candidate algo (whether or not it applies),
 * MOECCL_PRICE_FAILED, or < 0 when the model could not price it. */
double moeccl_pricing_price(moeccl_pricing_t* p, int algo);
/* Prices every candidate that applies and returns the cheapest (-1: none
 * applies; -2: a price failed), its time in *best_us (if not NULL), and
 * the predictions as "name us, name us" in line (cap bytes). */
int moeccl_pricing_cheapest(moeccl_pricing_t* p, char* line, size_t cap, double* best_us);

/* An all-to-all(v) as moeccl_pricing_a2a prices it. */
typedef struct {
  moeccl_a2a_desc_t d; /* the call (d.topo set); d.rank is set per priced rank */
  /* An alltoallv: the count exchange of an algorithm with a meta scope is
   * priced with it where the library runs one (moeccl_a2a_needs_meta's
   * rule), and bruck is no candidate past MOECCL_META_ALL_MAX_RANKS. */
  int v;
  int* meta_index; /* [d.nranks] scratch, for v */
  /* Optional: fills rank's counts into d (an alltoallv whose counts are
   * known); without it d is priced as it is (the tuner prices a v-call as
   * uniform blocks).  d.pair_bytes is kept only where the algorithm's
   * count exchange runs, as the planner does. */
  void (*rank_part)(const void* ctx, int rank, moeccl_a2a_desc_t* d);
  const void* ctx;
} moeccl_a2a_pricing_t;

/* Sets p up to price call (which must outlive p's use): every row of
 * moeccl_a2a_algos[] in table order, ties to the earlier.  p->topo,
 * sched, ranks and nranks are the caller's. */
void moeccl_pricing_a2a(moeccl_pricing_t* p, const moeccl_a2a_pricing_t* call);
/* The chunk count (2, 4, 8 or 16; more must win by 2%) of the cheapest
 * pipelined schedule (hier2p, railp, hier3p) for call on p's first two
 * ranks (all are priced for the choice of algorithm afterwards), set in
 * call->d.chunks and returned; 0 (the generators' default) where none
 * applies; -2 when a price failed.  Sets p up as moeccl_pricing_a2a. */
int moeccl_pricing_a2a_chunks(moeccl_pricing_t* p, moeccl_a2a_pricing_t* call);
/* The same for a collective (call->topo set): the rows of
 * moeccl_coll_algos[] that implement call->kind and apply, in the order
 * direct, rhd, ring, rd, tree, hier, a tie (1e-9) to the earlier. */
void moeccl_pricing_coll(moeccl_pricing_t* p, const moeccl_coll_desc_t* call);
/* The name of the schedule a v-call (v) or uniform call of a writes on
 * d's ranks: a's own, or where it does not apply the one its generator
 * writes instead (direct; bruck's alltoallv past
 * MOECCL_META_ALL_MAX_RANKS: pairwise). */
const char* moeccl_pricing_a2a_runs(const moeccl_a2a_algo_t* a, const moeccl_a2a_desc_t* d, int v);

/* ---- MoE dispatch and combine -------------------------------------------------
 * One direction of a MoE exchange (combine mirrors dispatch) on one of its
 * paths (0: flat, 1: hierarchical), priced by the steps its schedule runs
 * (moe_dispatch.c), each as the cost model prices a step (cost_model.h:
 * its slowest resource, CPU or a link class, plus one latency): the
 * packing copies; the exchange, whose first step also carries the rows
 * straight to this node's ranks; on the hierarchical path the forwarders'
 * copies and their messages on the node; the expansion.  In C chunks the
 * hierarchical path's exchange takes C + 2 steps, step j holding chunk
 * j's rows between nodes, the forwarders' copies of chunk j-1 and their
 * messages of chunk j-2, each moving 1/C of its rows with all of its
 * messages: its stages overlap, one chunk's time is its slowest stage's,
 * plus the fill and drain; in 1 chunk they run one after the other (3
 * steps).  The packing and the expansion run before and after either way.
 * On machines with more ranks than cores each step takes at least the
 * machine's summed CPU time of that step over its cores, so the CPU work
 * of the stages on the node adds to the transfers between nodes in 1
 * chunk and overlaps them in C. */
typedef struct {
  const moeccl_topo_t* topo;          /* link and copy costs */
  const moeccl_moe_cost_rows_t* most; /* [2] each field's maximum over the ranks */
  /* The machine floor (optional: NULL all): every rank's rows ([nranks][2]),
   * machine_of[nranks], machine_cpus[nmachines], scratch[nmachines]. */
  const moeccl_moe_cost_rows_t* all;
  int nranks, nmachines;
  const int* machine_of;
  const int* machine_cpus;
  double* scratch;
  /* > 0 where the network between nodes is one machine's loopback: a
   * machine's cores also copy every network row, half on each end, at this
   * rate (GB/s). */
  double loop_GBps;
} moeccl_moe_pricing_t;

/* Predicted microseconds of path (0 or 1) in chunks (1 on the flat path)
 * for rows of row_bytes. */
double moeccl_pricing_moe(const moeccl_moe_pricing_t* m, int path, double row_bytes, int chunks);
/* The path of a call with rows of row_bytes: 1 (hierarchical, only where
 * hier_ok) or 0, forced (path 0 or 1) or the cheaper (path -1; a tie to
 * flat, the hierarchical path priced at the cheaper of its 1 chunk and
 * its chunks); *chunks the hierarchical path's, forced (chunks > 0) or
 * the most of 2, 4, 8 and 16 priced within 2% of the cheapest of them
 * (each chunk pays every message again, and that is priced), kept unless
 * priced more than 10% over 1 chunk.  The pipeline gets that benefit of
 * the doubt because the model is biased against it: on rate-limited test
 * hosts (250 Mbit/s and 10 Gbit/s, K 4 and 8, docs/SIMULATOR.md) 4 to 16
 * chunks ran 1-20% faster than 1 chunk in every run, 16 chunks the
 * fastest wherever it ran, while priced from 1% cheaper to 8% dearer.
 * What the model leaves out is, we think, the cache: a chunk's rows are
 * still cached when the next stage copies them, the whole call's are not,
 * and every copy is priced at the one copy rate.  us[]: flat, hier in 1
 * chunk, hier in *chunks (us[1], us[2] < 0 without hier_ok). */
int moeccl_pricing_moe_pick(const moeccl_moe_pricing_t* m, double row_bytes, int hier_ok, int path,
                            int chunks_forced, double us[3], int* chunks);

/* ---- which ranks to price ----------------------------------------------------
 * Adds rank to out[k] unless seen (n bytes) marks it or it is not in
 * [0, n); returns the new count. */
int moeccl_pricing_sample_add(int rank, int n, unsigned char* seen, int* out, int k);
/* Ranks 0 and n-1, then count ranks on nodes spread evenly over t (so
 * over its groups), each at another local index (perf/a2a_sim's sample). */
int moeccl_pricing_sample_spread(const moeccl_topo_t* t, int count, unsigned char* seen, int* out,
                                 int k);
/* The top heaviest senders, then the top heaviest receivers of the n x n
 * byte counts (counts[src * n + dst]), each list heaviest first, the lower
 * rank first among equals (top <= 16).  O(n^2), row by row. */
int moeccl_pricing_sample_heavy(const size_t* counts, int n, int top, unsigned char* seen, int* out,
                                int k);

#endif
