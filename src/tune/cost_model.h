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
 * sharing and global-link taper are contention terms of the model.
 * moeccl_model_price_nic also knows the other ranks on the rank's NIC (its
 * node's ranks, or those of its rail where the topology names rails): a
 * network class then moves, per step, the most that all of them send or
 * receive on it, at its bandwidth times their number.  A rank whose
 * NIC-mates are idle in a step (a forwarder of hier2) gets the NIC's whole
 * rate; where all send alike (a uniform direct) it is the per-rank one.
 * Each rank is otherwise priced alone: waiting on a slower peer's previous
 * step is not modelled, so a caller that wants the collective's time takes
 * the maximum over ranks (or over ranks whose schedules are alike).
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

/* The network bytes that the ranks of one NIC put on each class, step by
 * step, summed over the ranks added (moeccl_model_nic_add).  Zero it before
 * first use; moeccl_model_nic_free releases it. */
typedef struct {
  double* bytes; /* [cap][2 * MOECCL_LINK_NCLASSES]: sent, received per class, by step_id */
  int nsteps, cap;
  int nranks; /* ranks added since the reset */
  int* mates; /* moeccl_model_nic_load's scratch */
  int mates_cap;
} moeccl_nic_load_t;

/* The ranks that share rank's NIC (rank among them, ascending) into out
 * (room for the ranks of rank's node); returns their number, 0 for a bad
 * argument. */
int moeccl_model_nic_mates(const moeccl_topo_t* t, int rank, int* out);
void moeccl_model_nic_reset(moeccl_nic_load_t* nic);
/* Adds rank's schedule s's network bytes per step to nic:
 * moecclInvalidArgument for a bad argument (nothing added), moecclSystemError
 * when out of memory. */
moecclResult_t moeccl_model_nic_add(moeccl_nic_load_t* nic, const moeccl_topo_t* t,
                                    const moeccl_sched_t* s, int rank);
void moeccl_model_nic_free(moeccl_nic_load_t* nic);
/* Writes rank's schedule into the schedule moeccl_model_nic_load was given
 * (priced: 1 for the rank priced, 0 for a NIC-mate's). */
typedef moecclResult_t (*moeccl_model_plan_fn)(void* ctx, int rank, int priced);
/* Resets nic to the load of rank's NIC: plan writes every other NIC-mate's
 * schedule into s, which is added, then rank's own, which is added and
 * left in s for moeccl_model_price_nic.  A bad rank: only its own is
 * planned (the price then fails).  plan's error, or moecclSystemError. */
moecclResult_t moeccl_model_nic_load(moeccl_nic_load_t* nic, const moeccl_topo_t* t, int rank,
                                     const moeccl_sched_t* s, moeccl_model_plan_fn plan, void* ctx);
/* moeccl_model_price with the load of rank's NIC (rank's own schedule
 * included; NULL or no rank added: priced alone, as moeccl_model_price).
 * Steps are matched by their place in the algorithm (the schedule's
 * step_id), so a rank whose schedule dropped an empty step (a forwarder
 * with nothing to copy, an uneven all-to-allv) still meets its mates'
 * steps where they happen. */
double moeccl_model_price_nic(const moeccl_topo_t* t, const moeccl_sched_t* s, int rank,
                              const moeccl_nic_load_t* nic, moeccl_cost_t* detail);

#endif
