/* Two-level all-to-all with node aggregation (hier2), for many nodes and
 * small blocks: each pair of nodes exchanges one message instead of L x L.
 *
 * N nodes of L ranks each (a regular topology; elsewhere: direct).  Rank
 * (n,x) is local index x of node n.  A block from (n,x) to (m,i), m != n,
 * at distance d = (m - n) mod N travels
 *   A  within node n to the carrier (n,c), c = (d - 1) mod L;
 *   B  to (m,c), in the one message from node n to node m;
 *   C  within node m to (m,i).
 * The carrier of a distance has the same local index on both nodes, so each
 * rank sends and receives K <= ceil((N-1)/L) inter-node messages, the node
 * pairs spread evenly over the local ranks and each message stays on one
 * rail.  A block to a rank of the same node is final after phase A.
 *
 * Messages, blocks in this order:
 *   A (n,x) -> (n,q): x's block to (n,q); then for each distance d carried
 *     by q, ascending, x's blocks to (n+d, 0..L-1);
 *   B (n,c) -> (n+d,c): for x = 0..L-1, the blocks (n,x) -> (n+d, 0..L-1);
 *   C (m,c) -> (m,i): for each d carried by c, for x = 0..L-1, the block
 *     (m-d,x) -> (m,i).
 * Per rank: L-1, K, L-1 messages each way; about n + 3N copies (a uniform
 * call's A and B copies merge per node, C copies one block each).
 *
 * hier2p (moeccl_a2a_hier2p) runs these phases per chunk, chunks overlapped
 * (pipeline.h).
 *
 * Alltoallv metadata (MOECCL_META_NODE): rank (n,l) asks pair_bytes only for
 * (n,x) -> any rank (send rows of its node's ranks: the A messages it
 * receives and the B messages it sends) and any rank -> (n,i) (receive rows
 * of its node's ranks: the B messages it receives, the C messages it sends).
 */
#include "pipeline.h"
#include "relay.h"
#include "topo/topo.h"

typedef struct {
  const moeccl_a2a_desc_t* d;
  const moeccl_topo_t* t;
  int nnodes, L, node, local;
} hier2_t;

static int rank_at(const hier2_t* h, int node, int local) {
  return moeccl_topo_rank_at(h->t, (node % h->nnodes + h->nnodes) % h->nnodes, local);
}

/* Held block of a carrier: the e-th distance it carries, source x, target i. */
static int held(const hier2_t* h, int e, int x, int i) { return (e * h->L + x) * h->L + i; }

/* Distances carried by local rank c: c+1, c+1+L, ... below N. */
static int carried(const hier2_t* h, int c) {
  return c + 1 < h->nnodes ? (h->nnodes - 2 - c) / h->L + 1 : 0;
}
static int distance(const hier2_t* h, int c, int e) { return c + 1 + e * h->L; }

static void a_send(moeccl_relay_t* x, const void* ctx) {
  const hier2_t* h = ctx;
  for (int k = 1; k < h->L; k++) {
    int q = (h->local + k) % h->L, to = rank_at(h, h->node, q);
    moeccl_relay_send_begin(x, to);
    moeccl_relay_send_own(x, to);
    for (int e = 0; e < carried(h, q); e++)
      for (int i = 0; i < h->L; i++)
        moeccl_relay_send_own(x, rank_at(h, h->node + distance(h, q, e), i));
    moeccl_relay_send_end(x);
  }
}

static void a_recv(moeccl_relay_t* x, const void* ctx) {
  const hier2_t* h = ctx;
  for (int k = 1; k < h->L; k++) {
    int q = (h->local - k + h->L) % h->L, from = rank_at(h, h->node, q);
    moeccl_relay_recv_begin(x, from);
    moeccl_relay_recv_final(x, from);
    for (int e = 0; e < carried(h, h->local); e++) {
      int m = h->node + distance(h, h->local, e);
      for (int i = 0; i < h->L; i++)
        moeccl_relay_recv_held(x, held(h, e, q, i), moeccl_a2a_bytes(h->d, from, rank_at(h, m, i)));
    }
    moeccl_relay_recv_end(x);
  }
}

static void a_stay(moeccl_relay_t* x, const void* ctx) {
  const hier2_t* h = ctx;
  for (int e = 0; e < carried(h, h->local); e++)
    for (int i = 0; i < h->L; i++)
      moeccl_relay_stay_own(x, held(h, e, h->local, i),
                            rank_at(h, h->node + distance(h, h->local, e), i));
}

static void b_send(moeccl_relay_t* x, const void* ctx) {
  const hier2_t* h = ctx;
  for (int e = 0; e < carried(h, h->local); e++) {
    moeccl_relay_send_begin(x, rank_at(h, h->node + distance(h, h->local, e), h->local));
    for (int src = 0; src < h->L; src++)
      for (int i = 0; i < h->L; i++) moeccl_relay_send_held(x, held(h, e, src, i));
    moeccl_relay_send_end(x);
  }
}

static void b_recv(moeccl_relay_t* x, const void* ctx) {
  const hier2_t* h = ctx;
  for (int e = 0; e < carried(h, h->local); e++) {
    int n = h->node - distance(h, h->local, e);
    moeccl_relay_recv_begin(x, rank_at(h, n, h->local));
    for (int src = 0; src < h->L; src++) {
      int from = rank_at(h, n, src);
      for (int i = 0; i < h->L; i++) {
        if (i == h->local) moeccl_relay_recv_final(x, from);
        else
          moeccl_relay_recv_held(x, held(h, e, src, i),
                                 moeccl_a2a_bytes(h->d, from, rank_at(h, h->node, i)));
      }
    }
    moeccl_relay_recv_end(x);
  }
}

static void c_send(moeccl_relay_t* x, const void* ctx) {
  const hier2_t* h = ctx;
  for (int k = 1; k < h->L; k++) {
    int q = (h->local + k) % h->L;
    moeccl_relay_send_begin(x, rank_at(h, h->node, q));
    for (int e = 0; e < carried(h, h->local); e++)
      for (int src = 0; src < h->L; src++) moeccl_relay_send_held(x, held(h, e, src, q));
    moeccl_relay_send_end(x);
  }
}

static void c_recv(moeccl_relay_t* x, const void* ctx) {
  const hier2_t* h = ctx;
  for (int k = 1; k < h->L; k++) {
    int c = (h->local - k + h->L) % h->L;
    moeccl_relay_recv_begin(x, rank_at(h, h->node, c));
    for (int e = 0; e < carried(h, c); e++)
      for (int src = 0; src < h->L; src++)
        moeccl_relay_recv_final(x, rank_at(h, h->node - distance(h, c, e), src));
    moeccl_relay_recv_end(x);
  }
}

static const moeccl_relay_phase_t hier2_phases[] = {
    {a_send, a_recv, a_stay},
    {b_send, b_recv, NULL},
    {c_send, c_recv, NULL},
};

int moeccl_a2a_hier2_applies(const moeccl_a2a_desc_t* d) { return moeccl_a2a_topo_fits(d, 2); }

/* hier2's phases for d (a whole call, or one chunk of a pipelined one). */
static moecclResult_t hier2_relay(const moeccl_a2a_desc_t* d, moeccl_sched_t* s, int* step_ends,
                                  uint64_t* scratch) {
  const moeccl_topo_t* t = d->topo;
  hier2_t h = {.d = d,
               .t = t,
               .nnodes = t->nnodes,
               .L = t->ranks_per_node,
               .node = t->rank_node[d->rank],
               .local = t->rank_local[d->rank]};
  int K = carried(&h, h.local);
  moeccl_relay_plan_t plan = {.phases = hier2_phases,
                              .nphases = 3,
                              .nblocks = (K > 0 ? K : 1) * h.L * h.L,
                              .max_msgs = K > h.L ? K : h.L,
                              .step_ends = step_ends,
                              .scratch = scratch};
  return moeccl_relay_run(d, s, &plan, &h);
}

moecclResult_t moeccl_a2a_hier2(const moeccl_a2a_desc_t* d, moeccl_sched_t* s) {
  if (!moeccl_a2a_hier2_applies(d)) return moeccl_a2a_direct(d, s);
  return hier2_relay(d, s, NULL, NULL);
}

/* Pipelined: the same phases per chunk, chunks overlapped (pipeline.c). */
moecclResult_t moeccl_a2a_hier2p(const moeccl_a2a_desc_t* d, moeccl_sched_t* s) {
  if (!moeccl_a2a_hier2_applies(d)) return moeccl_a2a_direct(d, s);
  return moeccl_pipeline_run(d, s, 3, hier2_relay);
}
