/* The invariants of a topology (src/topo/topo.h) and of its link costs,
 * checked by the topology and tune file harnesses. */
#ifndef MOECCL_FUZZ_TOPO_CHECK_H_
#define MOECCL_FUZZ_TOPO_CHECK_H_

#include "fuzz.h"
#include "topo/topo.h"

#include <math.h>
#include <string.h>

#define FUZZ_MAX_RANKS MOECCL_TOPO_MAX_RANKS /* what a file may declare (topo.h) */
#define FUZZ_MAX_RAILS 64

/* What the parser promises of every cost it accepts: finite, bandwidths
 * above 0, the rest 0 or more (docs/TOPOLOGY.md). */
static inline void fuzz_check_costs(const moeccl_topo_t* t) {
  for (int c = MOECCL_LINK_NODE; c < MOECCL_LINK_NCLASSES; c++) {
    const moeccl_link_t* l = &t->link[c];
    FUZZ_ASSERT(isfinite(l->latency_us) && l->latency_us >= 0, "class %d latency %g", c,
                l->latency_us);
    FUZZ_ASSERT(isfinite(l->overhead_us) && l->overhead_us >= 0, "class %d overhead %g", c,
                l->overhead_us);
    FUZZ_ASSERT(isfinite(l->bw_GBps) && l->bw_GBps > 0, "class %d bandwidth %g", c, l->bw_GBps);
    FUZZ_ASSERT(isfinite(l->rndv_bytes) && l->rndv_bytes >= 0, "class %d rndv %g", c,
                l->rndv_bytes);
  }
  FUZZ_ASSERT(isfinite(t->copy_overhead_us) && t->copy_overhead_us >= 0, "copy overhead %g",
              t->copy_overhead_us);
  FUZZ_ASSERT(isfinite(t->copy_GBps) && t->copy_GBps > 0, "copy bandwidth %g", t->copy_GBps);
  const moeccl_topo_device_t* d = &t->dev;
  FUZZ_ASSERT(isfinite(d->hbm_GBps) && d->hbm_GBps > 0 && isfinite(d->link_GBps) &&
                  d->link_GBps > 0,
              "device bandwidths %g %g", d->hbm_GBps, d->link_GBps);
  FUZZ_ASSERT(isfinite(d->copy_us) && d->copy_us >= 0 && isfinite(d->launch_us) &&
                  d->launch_us >= 0,
              "device latencies %g %g", d->copy_us, d->launch_us);
}

/* The tables of a built topology agree with each other (topo.h). */
static inline void fuzz_check_topo(const moeccl_topo_t* t) {
  int n = t->nranks, nn = t->nnodes;
  FUZZ_ASSERT(n >= 1 && n <= FUZZ_MAX_RANKS, "nranks %d", n);
  FUZZ_ASSERT(nn >= 1 && nn <= n, "nnodes %d of %d ranks", nn, n);
  FUZZ_ASSERT(t->rank_node && t->rank_local && t->node_first && t->node_ranks && t->node_group,
              "a table is missing");
  int next = 0; /* nodes numbered in order of their lowest rank */
  for (int r = 0; r < n; r++) {
    int node = t->rank_node[r];
    FUZZ_ASSERT(node >= 0 && node < nn && node <= next, "rank %d on node %d (next %d)", r, node,
                next);
    if (node == next) next++;
  }
  FUZZ_ASSERT(next == nn, "%d of %d nodes hold ranks", next, nn);
  FUZZ_ASSERT(t->node_first[0] == 0 && t->node_first[nn] == n, "node_first spans %d..%d",
              t->node_first[0], t->node_first[nn]);
  int same = t->node_first[1];
  for (int k = 0; k < nn; k++) {
    int first = t->node_first[k], count = t->node_first[k + 1] - first;
    FUZZ_ASSERT(count >= 1, "node %d holds %d ranks", k, count);
    if (count != same) same = 0;
    for (int l = 0; l < count; l++) {
      int r = t->node_ranks[first + l];
      FUZZ_ASSERT(r >= 0 && r < n && t->rank_node[r] == k && t->rank_local[r] == l,
                  "node %d's rank %d at %d", k, r, l);
      FUZZ_ASSERT(l == 0 || t->node_ranks[first + l - 1] < r, "node %d's ranks not ascending", k);
      FUZZ_ASSERT(moeccl_topo_rank_at(t, k, l) == r, "rank_at(%d, %d)", k, l);
    }
    FUZZ_ASSERT(moeccl_topo_rank_at(t, k, count) == -1, "rank_at past node %d", k);
  }
  FUZZ_ASSERT(t->ranks_per_node == same, "ranks_per_node %d, nodes hold %d each", t->ranks_per_node,
              same);
  int g = t->nodes_per_group;
  FUZZ_ASSERT(g >= 0 && g < nn, "nodes_per_group %d of %d nodes", g, nn);
  int per = g ? g : nn;
  for (int k = 0; k < nn; k++)
    FUZZ_ASSERT(t->node_group[k] == k / per, "node %d in group %d", k, t->node_group[k]);
  FUZZ_ASSERT(t->ngroups == (nn + per - 1) / per, "ngroups %d", t->ngroups);
  FUZZ_ASSERT(t->nrails >= 0 && t->nrails <= FUZZ_MAX_RAILS, "nrails %d", t->nrails);
  FUZZ_ASSERT(memchr(t->hw, '\0', sizeof(t->hw)) && !strchr(t->hw, '\n') && !strchr(t->hw, '#'),
              "hw line");
  FUZZ_ASSERT(memchr(t->source, '\0', sizeof(t->source)), "source not terminated");
  int last = n - 1;
  FUZZ_ASSERT(moeccl_topo_class(t, 0, 0) == MOECCL_LINK_SELF, "class of a rank to itself");
  FUZZ_ASSERT(moeccl_topo_class(t, 0, last) ==
                  (last == 0                                               ? MOECCL_LINK_SELF
                   : t->rank_node[0] == t->rank_node[last]                 ? MOECCL_LINK_NODE
                   : t->node_group[0] == t->node_group[t->rank_node[last]] ? MOECCL_LINK_GROUP
                                                                           : MOECCL_LINK_GLOBAL),
              "class of ranks 0 and %d", last);
  fuzz_check_costs(t);
}

/* Equal costs, by value: "-0" reads as -0.0, and a dump leaves out a
 * rndv_bytes of 0 (either sign), which reads back as +0.0. */
static inline int fuzz_same_costs(const moeccl_topo_t* a, const moeccl_topo_t* b) {
  for (int c = 0; c < MOECCL_LINK_NCLASSES; c++) {
    const moeccl_link_t *x = &a->link[c], *y = &b->link[c];
    if (x->latency_us != y->latency_us || x->overhead_us != y->overhead_us ||
        x->bw_GBps != y->bw_GBps || x->rndv_bytes != y->rndv_bytes)
      return 0;
  }
  const moeccl_topo_device_t *p = &a->dev, *q = &b->dev;
  if (p->hbm_GBps != q->hbm_GBps || p->link_GBps != q->link_GBps || p->copy_us != q->copy_us ||
      p->launch_us != q->launch_us)
    return 0;
  return a->copy_GBps == b->copy_GBps && a->copy_overhead_us == b->copy_overhead_us;
}

/* A zeroed topology: what a failed load leaves (topo.h). */
static inline int fuzz_topo_zero(const moeccl_topo_t* t) {
  static const moeccl_topo_t zero;
  return memcmp(t, &zero, sizeof(zero)) == 0;
}

#endif
