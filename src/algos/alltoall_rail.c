/* Rail-aligned all-to-all (PXN-like): inter-node traffic leaves each node
 * from the rank on the destination's rail, one message per destination.
 *
 * N nodes of L ranks each (a regular topology; elsewhere: direct).  Rank
 * (n,x) is local index x of node n; local index i uses rail i mod nrails
 * (nrails 0: one NIC per local rank).  A block from (n,x) to (m,i) travels
 *   0  within node n to (n,i), the rank with the destination's local index,
 *      hence on the destination's rail whatever nrails is;
 *   1  from (n,i) to (m,i), m != n, in one message holding the blocks of
 *      every rank of node n to (m,i).
 * Blocks to ranks of the same node are final after phase 0.
 *
 * Messages, blocks in this order:
 *   0 (n,x) -> (n,q): x's blocks to (0,q), (1,q), ..., (N-1,q);
 *   1 (n,i) -> (m,i): the blocks (n,0..L-1) -> (m,i), in source rank order,
 *     so a uniform call receives each one straight into place.
 * Per rank: L-1 messages within the node and N-1 across, each way; about
 * 2n copies (phase 0 packs one block per destination, phase 1 one per
 * source).
 *
 * Alltoallv metadata (MOECCL_META_NODE): rank (n,l) asks pair_bytes only for
 * (n,x) -> (m,l), x on its node (send rows of its node's ranks).
 */
#include "pipeline.h"
#include "relay.h"
#include "topo/topo.h"

typedef struct {
  const moeccl_a2a_desc_t* d;
  const moeccl_topo_t* t;
  int nnodes, L, node, local;
} rail_t;

static int rank_at(const rail_t* h, int node, int local) {
  return moeccl_topo_rank_at(h->t, (node % h->nnodes + h->nnodes) % h->nnodes, local);
}

/* Held block after phase 0: from local rank x to node m's rank of my index. */
static int held(const rail_t* h, int x, int m) { return x * h->nnodes + m; }

static void local_send(moeccl_relay_t* x, const void* ctx) {
  const rail_t* h = ctx;
  for (int k = 1; k < h->L; k++) {
    int q = (h->local + k) % h->L;
    moeccl_relay_send_begin(x, rank_at(h, h->node, q));
    for (int m = 0; m < h->nnodes; m++) moeccl_relay_send_own(x, rank_at(h, m, q));
    moeccl_relay_send_end(x);
  }
}

static void local_recv(moeccl_relay_t* x, const void* ctx) {
  const rail_t* h = ctx;
  for (int k = 1; k < h->L; k++) {
    int q = (h->local - k + h->L) % h->L, from = rank_at(h, h->node, q);
    moeccl_relay_recv_begin(x, from);
    for (int m = 0; m < h->nnodes; m++) {
      if (m == h->node) moeccl_relay_recv_final(x, from);
      else
        moeccl_relay_recv_held(x, held(h, q, m),
                               moeccl_a2a_bytes(h->d, from, rank_at(h, m, h->local)));
    }
    moeccl_relay_recv_end(x);
  }
}

static void local_stay(moeccl_relay_t* x, const void* ctx) {
  const rail_t* h = ctx;
  for (int m = 0; m < h->nnodes; m++)
    if (m != h->node) moeccl_relay_stay_own(x, held(h, h->local, m), rank_at(h, m, h->local));
}

static void rail_send(moeccl_relay_t* x, const void* ctx) {
  const rail_t* h = ctx;
  for (int k = 1; k < h->nnodes; k++) {
    int m = (h->node + k) % h->nnodes;
    moeccl_relay_send_begin(x, rank_at(h, m, h->local));
    for (int src = 0; src < h->L; src++) moeccl_relay_send_held(x, held(h, src, m));
    moeccl_relay_send_end(x);
  }
}

static void rail_recv(moeccl_relay_t* x, const void* ctx) {
  const rail_t* h = ctx;
  for (int k = 1; k < h->nnodes; k++) {
    int n = h->node - k;
    moeccl_relay_recv_begin(x, rank_at(h, n, h->local));
    for (int src = 0; src < h->L; src++) moeccl_relay_recv_final(x, rank_at(h, n, src));
    moeccl_relay_recv_end(x);
  }
}

static const moeccl_relay_phase_t rail_phases[] = {
    {local_send, local_recv, local_stay},
    {rail_send, rail_recv, NULL},
};

int moeccl_a2a_rail_applies(const moeccl_a2a_desc_t* d) { return moeccl_a2a_topo_fits(d, 2); }

/* rail's phases for d (a whole call, or one chunk of a pipelined one). */
static moecclResult_t rail_relay(const moeccl_a2a_desc_t* d, moeccl_sched_t* s, int* step_ends,
                                 uint64_t* scratch) {
  const moeccl_topo_t* t = d->topo;
  rail_t h = {.d = d,
              .t = t,
              .nnodes = t->nnodes,
              .L = t->ranks_per_node,
              .node = t->rank_node[d->rank],
              .local = t->rank_local[d->rank]};
  moeccl_relay_plan_t plan = {.phases = rail_phases,
                              .nphases = 2,
                              .nblocks = h.L * h.nnodes,
                              .max_msgs = h.L > h.nnodes ? h.L : h.nnodes,
                              .step_ends = step_ends,
                              .scratch = scratch};
  return moeccl_relay_run(d, s, &plan, &h);
}

moecclResult_t moeccl_a2a_rail(const moeccl_a2a_desc_t* d, moeccl_sched_t* s) {
  if (!moeccl_a2a_rail_applies(d)) return moeccl_a2a_direct(d, s);
  return rail_relay(d, s, NULL, NULL);
}

/* Pipelined: chunk c's exchange across nodes with chunk c+2's on the node. */
moecclResult_t moeccl_a2a_railp(const moeccl_a2a_desc_t* d, moeccl_sched_t* s) {
  if (!moeccl_a2a_rail_applies(d)) return moeccl_a2a_direct(d, s);
  return moeccl_pipeline_run(d, s, 2, rail_relay);
}
