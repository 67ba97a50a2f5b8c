/*
 * Cost model: prices a schedule (src/sched/schedule.h) on a topology
 * (src/topo/topo.h) without running it.  The tuner prices each candidate
 * algorithm's schedule for a call and runs the cheapest; perf/a2a_sim prices
 * them on modelled clusters of up to 16,384 ranks.
 *
 * Model (per step, steps run one after another):
 *   cpu    = sum over messages of the class overhead (sends and receives)
 *            + sum over copies of (copy overhead + bytes / copy bandwidth)
 *   link_c = max(bytes sent, bytes received) on class c / class bandwidth
 *   step   = max(cpu, link_node, link_group, link_global)
 *            + the largest latency among the classes the step uses
 *   total  = sum of the steps
 * A message larger than its class's rndv_bytes (when set) goes by
 * rendezvous: it costs a second overhead (the control message) and its
 * step waits three latencies of that class instead of one (request, clear
 * to send, data).
 * A message's class is moeccl_topo_class(rank, peer); copies use the SELF
 * class (its latency, normally 0, and the topology's copy costs).  Times are
 * in microseconds, bandwidths in GB/s (1e9 bytes/s); a class whose bandwidth
 * is 0 moves its bytes for free.  This is LogGP with o per message, G as
 * 1 / bandwidth and L per step: a step is bulk-synchronous, so a rank waits
 * for the latency of its farthest message once per step, not once per
 * message, while the overheads of all its messages add up (one CPU posts
 * them).  Bandwidths are per rank under all-to-all load (topo.h), so NIC
 * sharing and global-link taper are contention terms of the model.  Each
 * rank is priced alone: waiting on a slower peer's previous step is not
 * modelled, so a caller that wants the collective's time takes the maximum
 * over ranks (or over ranks whose schedules are alike).
 */
#ifndef MOECCL_TUNE_COST_MODEL_H_
#define MOECCL_TUNE_COST_MODEL_H_

#include "sched/schedule.h"
#include "topo/topo.h"

typedef struct {
  double total_us; /* predicted time of the whole schedule */
  int nsteps;
  int msgs[MOECCL_LINK_NCLASSES];     /* messages sent per class (SELF: copy ops) */
  double bytes[MOECCL_LINK_NCLASSES]; /* bytes sent per class (SELF: bytes copied) */
  double cpu_us, link_us, latency_us; /* sums over steps of each term */
} moeccl_cost_t;

/* Prices rank's schedule s (s->ops[].peer are ranks of t) in O(s->nops) time
 * without allocating: returns the predicted microseconds and, when detail is
 * not NULL, fills it.  Returns -1 and leaves detail untouched when t or s is
 * NULL, rank is not a rank of t, or an op names no rank of t. */
double moeccl_model_price(const moeccl_topo_t* t, const moeccl_sched_t* s, int rank,
                          moeccl_cost_t* detail);

#endif
