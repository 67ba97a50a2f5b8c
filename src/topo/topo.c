/* Topology tables: placement of ranks on nodes and groups, default link
 * costs.  File I/O and hwloc discovery live in topo_file.c and topo_hw.c. */
#include "topo/topo.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Default link costs, measured on the development machine with a2a_perf
 * (shared memory between ranks of a node; TCP between nodes) and used until
 * a topology file, MOECCL_TUNE_FILE or the communicator's transports say
 * otherwise. */
static const moeccl_link_t default_link[MOECCL_LINK_NCLASSES] = {
    [MOECCL_LINK_SELF] = {0.0, 0.0, 8.0},
    [MOECCL_LINK_NODE] = {1.0, 0.5, 6.0},
    [MOECCL_LINK_GROUP] = {25.0, 4.0, 1.0},
    [MOECCL_LINK_GLOBAL] = {25.0, 4.0, 1.0},
};

void moeccl_topo_free(moeccl_topo_t* t) {
  if (!t) return;
  free(t->rank_node);
  free(t->rank_local);
  free(t->node_first);
  free(t->node_ranks);
  free(t->node_group);
  memset(t, 0, sizeof(*t));
}

void moeccl_topo_default_costs(moeccl_topo_t* t) {
  memcpy(t->link, default_link, sizeof(default_link));
  t->copy_overhead_us = 0.2;
  t->copy_GBps = 8.0;
  t->dev = (moeccl_topo_device_t){MOECCL_DEV_DEFAULT_HBM_GBPS, MOECCL_DEV_DEFAULT_LINK_GBPS,
                                  MOECCL_DEV_DEFAULT_COPY_US, MOECCL_DEV_DEFAULT_LAUNCH_US, 0};
}

void moeccl_topo_device_view(const moeccl_topo_t* t, moeccl_topo_t* view) {
  *view = *t;
  const moeccl_topo_device_t* d = &t->dev;
  view->link[MOECCL_LINK_NODE] = (moeccl_link_t){d->launch_us, d->copy_us / 2.0, d->link_GBps, 0.0};
  view->copy_overhead_us = d->copy_us;
  view->copy_GBps = d->hbm_GBps / 2.0;
}

/* Fills the derived tables from rank_node[] (nodes numbered 0..nnodes-1). */
static moecclResult_t finish(moeccl_topo_t* t, int nodes_per_group, int nrails) {
  int n = t->nranks, nn = t->nnodes;
  t->rank_local = malloc((size_t)n * sizeof(int));
  t->node_first = calloc((size_t)nn + 1, sizeof(int));
  t->node_ranks = malloc((size_t)n * sizeof(int));
  t->node_group = malloc((size_t)nn * sizeof(int));
  if (!t->rank_local || !t->node_first || !t->node_ranks || !t->node_group) {
    moeccl_topo_free(t);
    return moecclSystemError;
  }
  for (int r = 0; r < n; r++) t->node_first[t->rank_node[r] + 1]++;
  for (int i = 0; i < nn; i++) t->node_first[i + 1] += t->node_first[i];
  int* fill = calloc((size_t)nn, sizeof(int));
  if (!fill) {
    moeccl_topo_free(t);
    return moecclSystemError;
  }
  for (int r = 0; r < n; r++) { /* ascending r: local indices ascend with rank */
    int node = t->rank_node[r];
    t->rank_local[r] = fill[node];
    t->node_ranks[t->node_first[node] + fill[node]++] = r;
  }
  free(fill);
  t->ranks_per_node = nn > 0 ? t->node_first[1] : 0;
  for (int i = 1; i < nn; i++)
    if (t->node_first[i + 1] - t->node_first[i] != t->ranks_per_node) t->ranks_per_node = 0;
  t->nodes_per_group = nodes_per_group > 0 && nodes_per_group < nn ? nodes_per_group : 0;
  int g = t->nodes_per_group ? t->nodes_per_group : (nn > 0 ? nn : 1);
  for (int i = 0; i < nn; i++) t->node_group[i] = i / g;
  t->ngroups = nn > 0 ? (nn + g - 1) / g : 0;
  t->nrails = nrails > 0 ? nrails : 0;
  return moecclSuccess;
}

moecclResult_t moeccl_topo_from_nodes(moeccl_topo_t* t, int nranks, const uint64_t* node_of,
                                      int nodes_per_group, int nrails) {
  memset(t, 0, sizeof(*t));
  if (nranks <= 0 || !node_of) return moecclInvalidArgument;
  t->nranks = nranks;
  t->rank_node = malloc((size_t)nranks * sizeof(int));
  if (!t->rank_node) return moecclSystemError;
  /* Node numbers in order of first appearance: O(n * nodes), fine at init. */
  uint64_t* ids = malloc((size_t)nranks * sizeof(uint64_t));
  if (!ids) {
    moeccl_topo_free(t);
    return moecclSystemError;
  }
  for (int r = 0; r < nranks; r++) {
    int k = 0;
    while (k < t->nnodes && ids[k] != node_of[r]) k++;
    if (k == t->nnodes) ids[t->nnodes++] = node_of[r];
    t->rank_node[r] = k;
  }
  free(ids);
  moeccl_topo_default_costs(t);
  snprintf(t->source, sizeof(t->source), "discovered");
  return finish(t, nodes_per_group, nrails);
}

moecclResult_t moeccl_topo_regular_shape(moeccl_topo_t* t, int nnodes, int ranks_per_node,
                                         int nodes_per_group, int nrails) {
  memset(t, 0, sizeof(*t));
  if (nnodes <= 0 || ranks_per_node <= 0 || nnodes > (1 << 30) / ranks_per_node)
    return moecclInvalidArgument;
  t->nranks = nnodes * ranks_per_node;
  t->nnodes = nnodes;
  t->rank_node = malloc((size_t)t->nranks * sizeof(int));
  if (!t->rank_node) return moecclSystemError;
  for (int r = 0; r < t->nranks; r++) t->rank_node[r] = r / ranks_per_node;
  moeccl_topo_default_costs(t);
  snprintf(t->source, sizeof(t->source), "regular %dx%d", nnodes, ranks_per_node);
  return finish(t, nodes_per_group, nrails);
}

/* 1 when rank_node[] numbers nodes 0..nnodes-1 in order of their lowest rank
 * and leaves none empty (the numbering from_nodes produces). */
static int placement_valid(int nranks, int nnodes, const int* rank_node) {
  int next = 0; /* the node a rank may open next */
  for (int r = 0; r < nranks; r++) {
    if (rank_node[r] < 0 || rank_node[r] > next || rank_node[r] >= nnodes) return 0;
    if (rank_node[r] == next) next++;
  }
  return next == nnodes;
}

moecclResult_t moeccl_topo_from_placement(moeccl_topo_t* t, int nranks, int nnodes,
                                          const int* rank_node, int nodes_per_group, int nrails) {
  memset(t, 0, sizeof(*t));
  if (nranks <= 0 || nnodes <= 0 || !rank_node || !placement_valid(nranks, nnodes, rank_node))
    return moecclInvalidArgument;
  t->nranks = nranks;
  t->nnodes = nnodes;
  t->rank_node = malloc((size_t)nranks * sizeof(int));
  if (!t->rank_node) return moecclSystemError;
  memcpy(t->rank_node, rank_node, (size_t)nranks * sizeof(int));
  moeccl_topo_default_costs(t);
  snprintf(t->source, sizeof(t->source), "placement");
  return finish(t, nodes_per_group, nrails);
}

int moeccl_topo_regular(const moeccl_topo_t* t, int levels) {
  if (!t || t->ranks_per_node <= 0) return 0;
  if (levels < 3) return 1;
  return t->nodes_per_group == 0 || t->nnodes % t->nodes_per_group == 0;
}

static int* dup_ints(const int* src, int n) {
  int* p = src ? malloc(sizeof(int) * (size_t)(n > 0 ? n : 1)) : NULL;
  if (p) memcpy(p, src, sizeof(int) * (size_t)n);
  return p;
}

moecclResult_t moeccl_topo_copy(moeccl_topo_t* dst, const moeccl_topo_t* src) {
  *dst = *src;
  dst->rank_node = dup_ints(src->rank_node, src->nranks);
  dst->rank_local = dup_ints(src->rank_local, src->nranks);
  dst->node_first = dup_ints(src->node_first, src->nnodes + 1);
  dst->node_ranks = dup_ints(src->node_ranks, src->nranks);
  dst->node_group = dup_ints(src->node_group, src->nnodes);
  if (!dst->rank_node || !dst->rank_local || !dst->node_first || !dst->node_ranks ||
      !dst->node_group) {
    moeccl_topo_free(dst);
    return moecclSystemError;
  }
  return moecclSuccess;
}

/* The members' nodes per group when the parent's groups form consecutive
 * runs of one size over them, and there are two runs or more; else 0.
 * parent_of[k]: the parent node of member node k; seen: ngroups bytes, 0. */
static int group_run(const moeccl_topo_t* p, const int* parent_of, int nn, unsigned char* seen) {
  int per = 0, run = 0;
  for (int k = 0; k < nn; k++) {
    int g = p->node_group[parent_of[k]];
    if (k && g == p->node_group[parent_of[k - 1]]) {
      run++;
      continue;
    }
    if (k && per == 0) per = run;
    else if (k && run != per) return 0;
    if (seen[g]) return 0; /* a group seen before: not one run */
    seen[g] = 1;
    run = 1;
  }
  if (per == 0) per = run;
  else if (run != per) return 0;
  return per < nn ? per : 0;
}

moecclResult_t moeccl_topo_subset(moeccl_topo_t* t, const moeccl_topo_t* p, const int* ranks,
                                  int n) {
  memset(t, 0, sizeof(*t));
  if (!p || !ranks || n < 1) return moecclInvalidArgument;
  int* rank_node = malloc(sizeof(int) * (size_t)n);
  int* child_of = malloc(sizeof(int) * (size_t)p->nnodes);
  int* parent_of = malloc(sizeof(int) * (size_t)p->nnodes);
  unsigned char* seen = calloc((size_t)p->ngroups + 1, 1);
  moecclResult_t rc = moecclSystemError;
  if (rank_node && child_of && parent_of && seen) {
    int nn = 0;
    for (int k = 0; k < p->nnodes; k++) child_of[k] = -1;
    for (int i = 0; i < n; i++) { /* nodes numbered in order of first appearance */
      int pn = p->rank_node[ranks[i]];
      if (child_of[pn] < 0) parent_of[nn] = pn, child_of[pn] = nn++;
      rank_node[i] = child_of[pn];
    }
    rc = moeccl_topo_from_placement(t, n, nn, rank_node, group_run(p, parent_of, nn, seen),
                                    p->nrails);
  }
  free(rank_node);
  free(child_of);
  free(parent_of);
  free(seen);
  if (rc != moecclSuccess) return rc;
  memcpy(t->link, p->link, sizeof(t->link));
  t->copy_GBps = p->copy_GBps, t->copy_overhead_us = p->copy_overhead_us;
  t->dev = p->dev;
  snprintf(t->source, sizeof(t->source), "%s", p->source);
  snprintf(t->hw, sizeof(t->hw), "%s", p->hw);
  return moecclSuccess;
}
