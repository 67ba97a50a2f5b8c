/* Three-level all-to-all for grouped fabrics (dragonfly, switch groups):
 * within the node, between the nodes of a group, between groups.
 *
 * NG groups of P nodes of L ranks (a regular topology with at least two
 * groups; elsewhere: direct).  Rank (g,p,x) is local index x of node p of
 * group g (node g*P + p).  A block from (g,p,x) to (h,q,i) is routed one
 * coordinate at a time:
 *   0  within the node to (g,p,i), the destination's local index;
 *   1  within the group to (g,q,i), the destination's node in the group;
 *   2  between groups to (h,q,i).
 * Each phase sends each peer one message with everything for it, so a rank
 * sends L-1 + P-1 + NG-1 messages; a phase without peers (L or P of 1) is
 * empty.  With one group the same exchange is `rail`, which needs only node
 * metadata, so hier3 does not apply there (the caller would otherwise
 * gather every rank's counts for a "group" spanning the communicator).
 *
 * Messages, blocks in this order:
 *   0 (g,p,x) -> (g,p,j): x's blocks to rank j of every node, nodes ascending;
 *   1 (g,p,i) -> (g,q,i): for each group h, for x = 0..L-1, the block
 *     (g,p,x) -> (h,q,i);
 *   2 (g,q,i) -> (h,q,i): the blocks of every rank of group g to (h,q,i),
 *     in rank order, so a uniform call receives each one straight into place.
 * Copies: phase 0 packs one per block, phase 1 one per block, phase 2 one
 * per node of the group plus one per local rank: about 2n per rank.
 *
 * Alltoallv metadata (MOECCL_META_GROUP): rank (g,p,l) asks pair_bytes only
 * for (g,p,x) -> any rank (send rows of its node's ranks: the phase 0
 * messages it receives) and (g,q,x) -> any rank (send rows of its group's
 * ranks: the phase 1 messages it receives, the phase 2 messages it sends).
 */
#include "pipeline.h"
#include "relay.h"
#include "topo/topo.h"

typedef struct {
  const moeccl_a2a_desc_t* d;
  const moeccl_topo_t* t;
  int ngroups, P, L, group, p, local, nnodes;
} hier3_t;

static int node_of(const hier3_t* h, int g, int p) { return g * h->P + p; }
static int rank_at(const hier3_t* h, int node, int local) {
  return moeccl_topo_rank_at(h->t, node, local);
}

/* Held after phase 0: from local rank x to node m's rank of my index. */
static int held1(const hier3_t* h, int x, int m) { return x * h->nnodes + m; }
/* Held after phase 1: from rank (my group, node p, x) to (group g, my node, my index). */
static int held2(const hier3_t* h, int p, int x, int g) { return (p * h->L + x) * h->ngroups + g; }

static void node_send(moeccl_relay_t* x, const void* ctx) {
  const hier3_t* h = ctx;
  int me = node_of(h, h->group, h->p);
  for (int k = 1; k < h->L; k++) {
    int j = (h->local + k) % h->L;
    moeccl_relay_send_begin(x, rank_at(h, me, j));
    for (int m = 0; m < h->nnodes; m++) moeccl_relay_send_own(x, rank_at(h, m, j));
    moeccl_relay_send_end(x);
  }
}

static void node_recv(moeccl_relay_t* x, const void* ctx) {
  const hier3_t* h = ctx;
  int me = node_of(h, h->group, h->p);
  for (int k = 1; k < h->L; k++) {
    int from = rank_at(h, me, (h->local - k + h->L) % h->L);
    moeccl_relay_recv_begin(x, from);
    for (int m = 0; m < h->nnodes; m++) {
      if (m == me) moeccl_relay_recv_final(x, from);
      else
        moeccl_relay_recv_held(x, held1(h, h->t->rank_local[from], m),
                               moeccl_a2a_bytes(h->d, from, rank_at(h, m, h->local)));
    }
    moeccl_relay_recv_end(x);
  }
}

static void node_stay(moeccl_relay_t* x, const void* ctx) {
  const hier3_t* h = ctx;
  for (int m = 0; m < h->nnodes; m++)
    if (m != node_of(h, h->group, h->p))
      moeccl_relay_stay_own(x, held1(h, h->local, m), rank_at(h, m, h->local));
}

static void group_send(moeccl_relay_t* x, const void* ctx) {
  const hier3_t* h = ctx;
  for (int k = 1; k < h->P; k++) {
    int q = (h->p + k) % h->P;
    moeccl_relay_send_begin(x, rank_at(h, node_of(h, h->group, q), h->local));
    for (int g = 0; g < h->ngroups; g++)
      for (int src = 0; src < h->L; src++)
        moeccl_relay_send_held(x, held1(h, src, node_of(h, g, q)));
    moeccl_relay_send_end(x);
  }
}

static void group_recv(moeccl_relay_t* x, const void* ctx) {
  const hier3_t* h = ctx;
  for (int k = 1; k < h->P; k++) {
    int p = (h->p - k + h->P) % h->P, n = node_of(h, h->group, p);
    moeccl_relay_recv_begin(x, rank_at(h, n, h->local));
    for (int g = 0; g < h->ngroups; g++) {
      int to = rank_at(h, node_of(h, g, h->p), h->local);
      for (int src = 0; src < h->L; src++) {
        int from = rank_at(h, n, src);
        if (g == h->group) moeccl_relay_recv_final(x, from);
        else moeccl_relay_recv_held(x, held2(h, p, src, g), moeccl_a2a_bytes(h->d, from, to));
      }
    }
    moeccl_relay_recv_end(x);
  }
}

static void group_stay(moeccl_relay_t* x, const void* ctx) {
  const hier3_t* h = ctx;
  for (int src = 0; src < h->L; src++)
    for (int g = 0; g < h->ngroups; g++)
      if (g != h->group)
        moeccl_relay_stay_held(x, held2(h, h->p, src, g), held1(h, src, node_of(h, g, h->p)));
}

static void global_send(moeccl_relay_t* x, const void* ctx) {
  const hier3_t* h = ctx;
  for (int k = 1; k < h->ngroups; k++) {
    int g = (h->group + k) % h->ngroups;
    moeccl_relay_send_begin(x, rank_at(h, node_of(h, g, h->p), h->local));
    for (int p = 0; p < h->P; p++)
      for (int src = 0; src < h->L; src++) moeccl_relay_send_held(x, held2(h, p, src, g));
    moeccl_relay_send_end(x);
  }
}

static void global_recv(moeccl_relay_t* x, const void* ctx) {
  const hier3_t* h = ctx;
  for (int k = 1; k < h->ngroups; k++) {
    int g = (h->group - k + h->ngroups) % h->ngroups;
    moeccl_relay_recv_begin(x, rank_at(h, node_of(h, g, h->p), h->local));
    for (int p = 0; p < h->P; p++)
      for (int src = 0; src < h->L; src++)
        moeccl_relay_recv_final(x, rank_at(h, node_of(h, g, p), src));
    moeccl_relay_recv_end(x);
  }
}

static const moeccl_relay_phase_t hier3_phases[] = {
    {node_send, node_recv, node_stay},
    {group_send, group_recv, group_stay},
    {global_send, global_recv, NULL},
};

int moeccl_a2a_hier3_applies(const moeccl_a2a_desc_t* d) { return moeccl_a2a_topo_fits(d, 3); }

/* hier3's phases for d (a whole call, or one chunk of a pipelined one). */
static moecclResult_t hier3_relay(const moeccl_a2a_desc_t* d, moeccl_sched_t* s, int* step_ends,
                                  uint64_t* scratch) {
  const moeccl_topo_t* t = d->topo;
  int node = t->rank_node[d->rank];
  hier3_t h = {.d = d,
               .t = t,
               .ngroups = t->ngroups,
               .P = t->nodes_per_group,
               .L = t->ranks_per_node,
               .group = t->node_group[node],
               .p = node % t->nodes_per_group,
               .local = t->rank_local[d->rank],
               .nnodes = t->nnodes};
  int most = h.L > h.P ? h.L : h.P;
  moeccl_relay_plan_t plan = {.phases = hier3_phases,
                              .nphases = 3,
                              .nblocks = d->nranks,
                              .max_msgs = most > h.ngroups ? most : h.ngroups,
                              .step_ends = step_ends,
                              .scratch = scratch};
  return moeccl_relay_run(d, s, &plan, &h);
}

moecclResult_t moeccl_a2a_hier3(const moeccl_a2a_desc_t* d, moeccl_sched_t* s) {
  if (!moeccl_a2a_hier3_applies(d)) return moeccl_a2a_direct(d, s);
  return hier3_relay(d, s, NULL, NULL);
}

/* Pipelined: the three levels of successive chunks in the same steps. */
moecclResult_t moeccl_a2a_hier3p(const moeccl_a2a_desc_t* d, moeccl_sched_t* s) {
  if (!moeccl_a2a_hier3_applies(d)) return moeccl_a2a_direct(d, s);
  return moeccl_pipeline_run(d, s, 3, hier3_relay);
}
