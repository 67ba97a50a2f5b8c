/*
 * Cost model: prices a schedule (src/schedule.h) on a topology
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
 * Bandwidths are per rank under all-to-all load (topo.h), so NIC sharing and
 * global-link taper are contention terms of the model.
 */
#ifndef MOECCL_MODEL_H_
#define MOECCL_MODEL_H_

#include "schedule.h"
#include "topo/topo.h"

typedef struct {
  double total_us; /* predicted time of the whole schedule */
  int nsteps;
  int msgs[MOECCL_LINK_NCLASSES];      /* messages sent per class */
  double bytes[MOECCL_LINK_NCLASSES];  /* bytes sent per class (SELF: copies) */
  double cpu_us, link_us, latency_us;  /* sums over steps of each term */
} moeccl_cost_t;

/* Prices rank's schedule s (s->ops[].peer are ranks of t).  detail may be NULL. */
double moeccl_model_price(const moeccl_topo_t* t, const moeccl_sched_t* s, int rank,
                          moeccl_cost_t* detail);

#endif
