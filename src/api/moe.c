/*
 * MoE dispatch and combine (include/moeccl_moe.h): the plan, the layout of
 * a step (the count and route exchanges, then the tables the generators of
 * src/algos/moe_dispatch.c read), and the data calls' checks.  The data
 * calls go down the one planning path (moeccl_call_issue, plan.c, the
 * generator, the executor); nothing here moves a row.
 *
 * A layout, on each rank: (1) from the top-k ids, the pairs (token, rank)
 * it sends, by rank then token, each with K route entries (the receiver's
 * local expert index per slot, -1 where the slot's expert is elsewhere);
 * (2) an all-to-all of each peer's pair count (with topk, E, capacity and a
 * hash of the placement, which must agree); (3) an all-to-allv of the
 * routes; (4) with a capacity, the receiver drops the overflow of each
 * expert in receive order and returns the routes (an all-to-allv back), and
 * both sides drop the pairs left without a slot; (5) the tables.  The
 * exchanges are ordinary all-to-all calls on the communicator.
 */
#include "api/moe.h"
#include "base/grow.h"
#include "exec/enqueue.h"
#include "kernels/rows.h"
#include "comm/span.h"
#include "topo/topo.h"
#include "tune/tuner.h"

#include <stdlib.h>
#include <string.h>

enum { MSG_PAIRS, MSG_TOPK, MSG_EXPERTS, MSG_HASH, MSG_CAPACITY, MOE_MSG };

static moecclResult_t plan_check(moecclMoePlan_t plan, const char* fn) {
  if (!plan || plan->magic != MOECCL_MOE_MAGIC)
    return moeccl_error(NULL, moecclInvalidArgument, "%s: plan %p is not a live MoE plan", fn,
                        (void*)plan);
  return moeccl_comm_check(plan->comm, "comm");
}

/* Grows the plan's array name to at least need elements (base/grow.h). */
#define GROW(plan, name, need)                                                                     \
  moeccl_grow(&(plan)->name, &(plan)->name##_cap, (need), sizeof(*(plan)->name))

/* ---- the plan ------------------------------------------------------------ */

static moecclResult_t check_placement(moeccl_comm_t* c, int E, const int* placement) {
  for (int e = 0; placement && e < E; e++) {
    if (placement[e] == -1)
      return moeccl_error(c, moecclInvalidArgument,
                          "moecclMoePlanCreate: placement[%d] is -1: expert %d has no rank (the "
                          "placement must cover every expert)",
                          e, e);
    if (placement[e] < 0 || placement[e] >= c->nranks)
      return moeccl_error(c, moecclInvalidArgument,
                          "moecclMoePlanCreate: placement[%d] = %d is out of range [0,%d)", e,
                          placement[e], c->nranks);
  }
  return moecclSuccess;
}

static void plan_free(moecclMoePlan_t p) {
  void* arrays[] = {
      p->owner,       p->local_index, p->local_experts, p->send_first, p->recv_first, p->counts,
      p->stamp,       p->tpair,       p->msg_out,       p->msg_in,     p->ecount,     p->ecur,
      p->pair_token,  p->route_send,  p->route_recv,    p->exp_all,    p->exp_remote, p->exp_self,
      p->part,        p->own,         p->dot,           p->tok,        p->via,        p->node_rank,
      p->relay_first, p->rin_first,   p->fw_first,      p->fw_cur,     p->cost_out,   p->cost_in,
      p->tmask,       p->relay_token, p->relay_mask,    p->rin_mask,   p->fw_rows,    p->fsum,
      p->own_h,       p->progs,       p->exp_src_first, p->exp_src,    p->own_self,   p->own_src,
      p->seen,        p->exp_src_idx, p->src_token,     p->gather,     p->cost_all};
  for (size_t i = 0; i < sizeof(arrays) / sizeof(arrays[0]); i++) free(arrays[i]);
  if (p->send_area) moecclMemFree(p->send_area);
  p->magic = 0;
  free(p);
}

/* owner, local_index, local_experts and the placement hash. */
static void place(moecclMoePlan_t p, const int* placement) {
  int n = p->comm->nranks, E = p->E;
  for (int e = 0; e < E; e++) {
    if (placement) {
      p->owner[e] = placement[e];
      continue;
    }
    int r = 0; /* the r with r*E/n <= e < (r+1)*E/n */
    while ((long)(r + 1) * E / n <= e) r++;
    p->owner[e] = r;
  }
  uint64_t h = 1469598103934665603ULL ^ (uint64_t)n;
  p->nlocal = 0;
  for (int e = 0; e < E; e++) {
    h = (h ^ (uint64_t)p->owner[e]) * 1099511628211ULL;
    if (p->owner[e] == p->comm->rank) p->local_experts[p->nlocal++] = e;
  }
  p->placement_hash = h;
  /* local index: experts of each rank in ascending id order */
  size_t* next = p->send_first; /* scratch here: n entries */
  memset(next, 0, sizeof(size_t) * (size_t)n);
  for (int e = 0; e < E; e++) p->local_index[e] = (int)next[p->owner[e]]++;
}

#define NCOST (sizeof(moeccl_moe_cost_rows_t) / sizeof(uint64_t))
enum { HMSG_RELAY, HMSG_COST, HMSG = HMSG_COST + 2 * NCOST };

/* The hierarchical path's fixed tables, when it can apply: the
 * communicator spans nodes of at most 64 ranks (a relay row's destinations
 * are a 64-bit mask) and MOECCL_MOE_ALGO is not flat.  The same on every
 * rank (the topology is). */
static moecclResult_t hier_setup(moecclMoePlan_t p) {
  moeccl_comm_t* c = p->comm;
  const moeccl_topo_t* t = c->topo;
  p->logged_path = -1;
  if (!t || t->nranks != c->nranks || t->nnodes < 2 || moeccl_tuner_forced(c)->moe == 0)
    return moecclSuccess;
  for (int b = 0; b < t->nnodes; b++)
    if (t->node_first[b + 1] - t->node_first[b] > 64) return moecclSuccess;
  int n = c->nranks, me = c->rank, node = t->rank_node[me];
  p->nl = t->node_first[node + 1] - t->node_first[node];
  p->me_local = t->rank_local[me];
  size_t nb = (size_t)n * (size_t)p->nl + 1;
  p->via = malloc(sizeof(int) * (size_t)n);
  p->node_rank = malloc(sizeof(int) * (size_t)p->nl);
  p->relay_first = calloc((size_t)n + 1, sizeof(size_t));
  p->rin_first = calloc((size_t)n + 1, sizeof(size_t));
  p->fw_first = calloc(nb, sizeof(size_t));
  p->fw_cur = calloc(nb, sizeof(size_t));
  p->cost_out = calloc((size_t)n * HMSG, sizeof(uint64_t));
  p->cost_in = calloc((size_t)n * HMSG, sizeof(uint64_t));
  p->cost_all = calloc((size_t)n * 2, sizeof(moeccl_moe_cost_rows_t));
  if (!p->via || !p->node_rank || !p->relay_first || !p->rin_first || !p->fw_first || !p->fw_cur ||
      !p->cost_out || !p->cost_in || !p->cost_all)
    return moecclSystemError;
  for (int l = 0; l < p->nl; l++) p->node_rank[l] = t->node_ranks[t->node_first[node] + l];
  for (int s = 0; s < n; s++)
    p->via[s] = t->rank_node[s] == node ? -1 : p->node_rank[t->rank_local[s] % p->nl];
  p->hier_possible = 1;
  return moecclSuccess;
}

MOECCL_EXPORT moecclResult_t moecclMoePlanCreate(moecclMoePlan_t* plan, int numExperts,
                                                 const int* placement, moecclComm_t comm) {
  MOECCL_CHECK(moeccl_comm_check(comm, "comm"));
  if (!plan) return moeccl_error(comm, moecclInvalidArgument, "moecclMoePlanCreate: plan is NULL");
  if (numExperts < 1)
    return moeccl_error(comm, moecclInvalidArgument,
                        "moecclMoePlanCreate: numExperts %d is not positive", numExperts);
  /* programs are named by a 16-bit index in the schedule (MOECCL_MOE_MAX_PROGS + 2n) */
  if (comm->nranks > (UINT16_MAX - MOECCL_MOE_MAX_PROGS) / 2)
    return moeccl_error(comm, moecclInvalidArgument,
                        "moecclMoePlanCreate: %d ranks; MoE plans support at most %d", comm->nranks,
                        (UINT16_MAX - MOECCL_MOE_MAX_PROGS) / 2);
  MOECCL_CHECK(check_placement(comm, numExperts, placement));
  moecclMoePlan_t p = calloc(1, sizeof(*p));
  if (!p) return moeccl_error(comm, moecclSystemError, "out of memory");
  size_t n = (size_t)comm->nranks, E = (size_t)numExperts;
  p->magic = MOECCL_MOE_MAGIC;
  p->comm = comm;
  p->E = numExperts;
  p->owner = malloc(E * sizeof(int));
  p->local_index = malloc(E * sizeof(int));
  p->local_experts = malloc(E * sizeof(int));
  p->send_first = calloc(n + 1, sizeof(size_t));
  p->recv_first = calloc(n + 1, sizeof(size_t));
  p->counts = calloc(4 * n, sizeof(size_t));
  p->stamp = malloc(n * sizeof(long));
  p->tpair = malloc(n * sizeof(long));
  p->msg_out = calloc(MOE_MSG * n, sizeof(uint64_t));
  p->msg_in = calloc(MOE_MSG * n, sizeof(uint64_t));
  p->ecount = calloc(E, sizeof(size_t));
  p->ecur = calloc(E, sizeof(size_t));
  p->progs = calloc(MOECCL_MOE_MAX_PROGS + 2 * n, sizeof(moeccl_rows_t));
  p->exp_src_first = calloc(n + 1, sizeof(size_t));
  if (!p->owner || !p->local_index || !p->local_experts || !p->send_first || !p->recv_first ||
      !p->counts || !p->stamp || !p->tpair || !p->msg_out || !p->msg_in || !p->ecount || !p->ecur ||
      !p->progs || !p->exp_src_first) {
    plan_free(p);
    return moeccl_error(comm, moecclSystemError, "out of memory");
  }
  place(p, placement);
  if (hier_setup(p) != moecclSuccess) {
    plan_free(p);
    return moeccl_error(comm, moecclSystemError, "out of memory");
  }
  *plan = p;
  return moecclSuccess;
}

MOECCL_EXPORT moecclResult_t moecclMoePlanDestroy(moecclMoePlan_t plan) {
  if (!plan || plan->magic != MOECCL_MOE_MAGIC)
    return moeccl_error(NULL, moecclInvalidArgument,
                        "moecclMoePlanDestroy: plan %p is not a live MoE plan", (void*)plan);
  plan_free(plan);
  return moecclSuccess;
}

MOECCL_EXPORT moecclResult_t moecclMoeLocalExperts(moecclMoePlan_t plan, int* numLocalExperts,
                                                   int* localExperts) {
  MOECCL_CHECK(plan_check(plan, "moecclMoeLocalExperts"));
  if (numLocalExperts) *numLocalExperts = plan->nlocal;
  if (localExperts) memcpy(localExperts, plan->local_experts, sizeof(int) * (size_t)plan->nlocal);
  return moecclSuccess;
}

/* ---- the layout ----------------------------------------------------------- */

static moecclResult_t check_layout(moecclMoePlan_t p, const int32_t* ids, size_t T, int K) {
  moeccl_comm_t* c = p->comm;
  const char* fn = "moecclMoeLayout";
  if (moeccl_group_active())
    return moeccl_error(c, moecclInvalidUsage, "%s: synchronous, not allowed inside a group", fn);
  if (K < 0 || (K == 0 && T > 0))
    return moeccl_error(c, moecclInvalidArgument, "%s: topk %d with %zu tokens", fn, K, T);
  if (T > 0 && (uint64_t)T * (uint64_t)K >= UINT32_MAX / 4)
    return moeccl_error(c, moecclInvalidArgument, "%s: %zu tokens times topk %d is too large", fn,
                        T, K);
  if (T > 0 && !ids)
    return moeccl_error(c, moecclInvalidArgument, "%s: topkIdx is NULL with %zu tokens", fn, T);
  /* The layout is computed on the host from topkIdx. */
  moeccl_mem_t m = T > 0 ? moeccl_mem_of(ids) : MOECCL_MEM_HOST_INIT;
  if (m.kind != MOECCL_MEM_HOST)
    return moeccl_error(c, moecclInvalidArgument,
                        "%s: topkIdx %p is %s memory (device %d); the layout reads it on the host",
                        fn, (const void*)ids, moeccl_mem_name(m), m.device);
  for (size_t i = 0; i < T * (size_t)K; i++)
    if (ids[i] < -1 || ids[i] >= p->E)
      return moeccl_error(c, moecclInvalidArgument,
                          "%s: topkIdx[%zu][%zu] = %d is not an expert id in [0,%d) nor -1", fn,
                          i / (size_t)K, i % (size_t)K, (int)ids[i], p->E);
  return moecclSuccess;
}

/* Waits until every operation issued on the communicator before now has
 * finished: queued calls of this plan read the tables a layout rewrites. */
static void wait_idle(moeccl_comm_t* c) {
  moeccl_comm_wait_turn(c, moeccl_comm_issue(c, 1));
  moeccl_comm_retire(c, 1);
}

static size_t prefix(size_t* first, int n) {
  size_t sum = 0;
  for (int r = 0; r < n; r++) {
    size_t cnt = first[r];
    first[r] = sum;
    sum += cnt;
  }
  first[n] = sum;
  return sum;
}

/* Step 1: this rank's pairs by destination, their tokens and routes. */
static moecclResult_t send_side(moecclMoePlan_t p, const int32_t* ids, size_t T, int K,
                                size_t* routed) {
  int n = p->comm->nranks;
  size_t* first = p->send_first;
  memset(first, 0, sizeof(size_t) * (size_t)(n + 1));
  for (int r = 0; r < n; r++) p->stamp[r] = -1;
  *routed = 0;
  for (size_t t = 0; t < T; t++)
    for (int j = 0; j < K; j++) {
      int e = ids[t * (size_t)K + (size_t)j];
      if (e < 0) continue;
      (*routed)++;
      int r = p->owner[e];
      if (p->stamp[r] != (long)t) p->stamp[r] = (long)t, first[r]++;
    }
  size_t P = prefix(first, n);
  if (GROW(p, pair_token, P) || GROW(p, route_send, P * (size_t)K)) return moecclSystemError;
  size_t* cur = p->recv_first; /* free until the first exchange */
  memcpy(cur, first, sizeof(size_t) * (size_t)n);
  for (int r = 0; r < n; r++) p->stamp[r] = -1;
  for (size_t t = 0; t < T; t++)
    for (int j = 0; j < K; j++) {
      int e = ids[t * (size_t)K + (size_t)j];
      if (e < 0) continue;
      int r = p->owner[e];
      if (p->stamp[r] != (long)t) {
        size_t q = cur[r]++;
        p->stamp[r] = (long)t, p->tpair[r] = (long)q;
        p->pair_token[q] = (uint32_t)t;
        for (int k = 0; k < K; k++) p->route_send[q * (size_t)K + (size_t)k] = -1;
      }
      p->route_send[(size_t)p->tpair[r] * (size_t)K + (size_t)j] = p->local_index[e];
    }
  p->lay.P = P;
  return moecclSuccess;
}

/* An all-to-all(v) of plan memory on the plan's communicator, now. */
static moecclResult_t alltoallv(moecclMoePlan_t p, const void* send, const size_t* sfirst,
                                void* recv, const size_t* rfirst, size_t elem, size_t per) {
  moeccl_comm_t* c = p->comm;
  size_t n = (size_t)c->nranks, *v = p->counts;
  for (size_t r = 0; r < n; r++) {
    v[r] = (sfirst[r + 1] - sfirst[r]) * per, v[n + r] = sfirst[r] * per;
    v[2 * n + r] = (rfirst[r + 1] - rfirst[r]) * per, v[3 * n + r] = rfirst[r] * per;
  }
  moeccl_call_t call = {.kind = MOECCL_CALL_A2A, .sendbuf = send, .recvbuf = recv};
  call.a2a = (moeccl_a2a_desc_t){.rank = c->rank,
                                 .nranks = c->nranks,
                                 .send_counts = v,
                                 .send_displs = v + n,
                                 .recv_counts = v + 2 * n,
                                 .recv_displs = v + 3 * n,
                                 .elem_size = elem};
  return moeccl_call_issue(c, &call, NULL);
}

/* Step 2: pair counts, checked agreement. */
static moecclResult_t exchange_counts(moecclMoePlan_t p, int K, size_t capacity) {
  moeccl_comm_t* c = p->comm;
  int n = c->nranks;
  for (int r = 0; r < n; r++) {
    uint64_t* m = p->msg_out + (size_t)r * MOE_MSG;
    m[MSG_PAIRS] = p->send_first[r + 1] - p->send_first[r];
    m[MSG_TOPK] = (uint64_t)K, m[MSG_EXPERTS] = (uint64_t)p->E;
    m[MSG_HASH] = p->placement_hash, m[MSG_CAPACITY] = capacity;
  }
  moeccl_call_t call = {.kind = MOECCL_CALL_A2A, .sendbuf = p->msg_out, .recvbuf = p->msg_in};
  call.a2a = (moeccl_a2a_desc_t){
      .rank = c->rank, .nranks = n, .block_bytes = MOE_MSG * sizeof(uint64_t), .elem_size = 8};
  MOECCL_CHECK(moeccl_call_issue(c, &call, NULL));
  for (int s = 0; s < n; s++) {
    const uint64_t* m = p->msg_in + (size_t)s * MOE_MSG;
    if (m[MSG_TOPK] != (uint64_t)K || m[MSG_EXPERTS] != (uint64_t)p->E ||
        m[MSG_HASH] != p->placement_hash || m[MSG_CAPACITY] != capacity)
      return moeccl_error(c, moecclInvalidUsage,
                          "moecclMoeLayout: rank %d has topk %llu, %llu experts, capacity %llu "
                          "and placement hash %llx; this rank %d, %d, %zu and %llx (they must "
                          "agree)",
                          s, (unsigned long long)m[MSG_TOPK], (unsigned long long)m[MSG_EXPERTS],
                          (unsigned long long)m[MSG_CAPACITY], (unsigned long long)m[MSG_HASH], K,
                          p->E, capacity, (unsigned long long)p->placement_hash);
    p->recv_first[s] = (size_t)m[MSG_PAIRS];
  }
  p->lay.Q = prefix(p->recv_first, n);
  if ((uint64_t)(p->lay.Q + p->lay.P + 1) * (uint64_t)(K + 1) >= UINT32_MAX)
    return moeccl_error(c, moecclInvalidArgument, "moecclMoeLayout: %zu pairs received is too many",
                        p->lay.Q);
  return moecclSuccess;
}

/* Drops the pairs whose route has no slot left; renumbers first[]. */
static size_t compact(int32_t* route, uint32_t* token, size_t* first, int n, int K) {
  size_t out = 0, begin = 0;
  for (int r = 0; r < n; r++) {
    size_t end = first[r + 1];
    first[r] = out;
    for (size_t q = begin; q < end; q++) {
      int used = 0;
      for (int j = 0; j < K; j++) used |= route[q * (size_t)K + (size_t)j] >= 0;
      if (!used) continue;
      if (out != q) {
        memmove(route + out * (size_t)K, route + q * (size_t)K, sizeof(int32_t) * (size_t)K);
        if (token) token[out] = token[q];
      }
      out++;
    }
    begin = end;
  }
  first[n] = out;
  return out;
}

/* Step 4: the receiver keeps the first `capacity` rows of each expert and
 * sends the routes back; both sides drop emptied pairs. */
static moecclResult_t apply_capacity(moecclMoePlan_t p, int K, size_t capacity, size_t routed,
                                     size_t* dropped) {
  moeccl_moe_layout_t* l = &p->lay;
  memset(p->ecur, 0, sizeof(size_t) * (size_t)p->nlocal);
  for (size_t i = 0; i < l->Q * (size_t)K; i++) {
    int32_t le = p->route_recv[i];
    if (le < 0) continue;
    if (p->ecur[le] < capacity) p->ecur[le]++;
    else p->route_recv[i] = -1;
  }
  MOECCL_CHECK(alltoallv(p, p->route_recv, p->recv_first, p->route_send, p->send_first,
                         sizeof(int32_t), (size_t)K));
  size_t kept = 0;
  for (size_t i = 0; i < l->P * (size_t)K; i++) kept += p->route_send[i] >= 0;
  *dropped = routed - kept;
  int n = p->comm->nranks;
  l->P = compact(p->route_send, p->pair_token, p->send_first, n, K);
  l->Q = compact(p->route_recv, NULL, p->recv_first, n, K);
  return moecclSuccess;
}

static moeccl_row_term_t term(size_t dst, size_t src, size_t aux) {
  return (moeccl_row_term_t){(uint32_t)dst, (uint32_t)src, (uint32_t)aux};
}

/* The source rank of receive pair q (recv_first is ascending). */
static int source_of(const size_t* first, int n, size_t q) {
  int lo = 0, hi = n - 1; /* the last r with first[r] <= q */
  while (lo < hi) {
    int mid = (lo + hi + 1) / 2;
    if (first[mid] <= q) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}

/* exp_remote's nr terms by source, x ascending in each, src counted from
 * the source's first receive pair (a counting sort). */
static moecclResult_t by_source(moecclMoePlan_t p, size_t nr) {
  int n = p->comm->nranks;
  size_t* first = p->exp_src_first;
  if (GROW(p, exp_src, nr) || GROW(p, exp_src_idx, nr)) return moecclSystemError;
  memset(first, 0, sizeof(size_t) * (size_t)(n + 1));
  for (size_t i = 0; i < nr; i++) first[source_of(p->recv_first, n, p->exp_remote[i].src)]++;
  prefix(first, n);
  for (int r = n; r > 0; r--) first[r] = first[r - 1]; /* cursors: first[r + 1] */
  first[0] = 0;
  for (size_t i = 0; i < nr; i++) {
    moeccl_row_term_t t = p->exp_remote[i];
    int r = source_of(p->recv_first, n, t.src);
    moeccl_row_term_t ti = t;
    ti.src = p->src_token[t.src];
    t.src -= (uint32_t)p->recv_first[r];
    p->exp_src_idx[first[r + 1]] = ti;
    p->exp_src[first[r + 1]++] = t;
  }
  return moecclSuccess;
}

/* Step 5, expert side: counts, expansion, partial sums and dot terms. */
static moecclResult_t expert_tables(moecclMoePlan_t p, int K) {
  moeccl_moe_layout_t* l = &p->lay;
  int me = p->comm->rank;
  size_t nslots = l->Q * (size_t)K;
  memset(p->ecount, 0, sizeof(size_t) * (size_t)p->nlocal);
  for (size_t i = 0; i < nslots; i++) {
    int32_t le = p->route_recv[i];
    if (le >= p->nlocal)
      return moeccl_comm_fail(p->comm, moecclInternalError,
                              "moecclMoeLayout: a route names local expert %d of %d", (int)le,
                              p->nlocal);
    if (le >= 0) p->ecount[le]++;
  }
  size_t R = 0;
  for (int e = 0; e < p->nlocal; e++) p->ecur[e] = R, R += p->ecount[e];
  l->R = R;
  if (GROW(p, exp_all, R) || GROW(p, exp_remote, R) || GROW(p, exp_self, R) || GROW(p, part, R) ||
      GROW(p, dot, nslots))
    return moecclSystemError;
  size_t q0 = p->recv_first[me], q1 = p->recv_first[me + 1], np = 0;
  for (size_t q = 0; q < l->Q; q++) {
    int self = q >= q0 && q < q1;
    size_t src = self ? p->pair_token[p->send_first[me] + (q - q0)] : q;
    if (q == q0) l->part_self0 = np;
    if (q == q1) l->part_self1 = np;
    for (int j = 0; j < K; j++) {
      size_t i = q * (size_t)K + (size_t)j;
      int32_t le = p->route_recv[i];
      if (le < 0) {
        p->dot[i] = term(i, MOECCL_ROW_NONE, MOECCL_ROW_NONE);
        continue;
      }
      size_t x = p->ecur[le]++;
      p->part[np++] = term(q, x, i);
      p->exp_all[x] = term(x, src, i);
      p->dot[i] = term(i, src, x);
    }
  }
  if (q1 >= l->Q) l->part_self1 = np;
  if (q0 >= l->Q) l->part_self0 = np;
  size_t nr = 0, ns = 0;
  for (size_t x = 0; x < R; x++) {
    size_t q = p->exp_all[x].aux / (size_t)K;
    if (q >= q0 && q < q1) p->exp_self[ns++] = p->exp_all[x];
    else p->exp_remote[nr++] = p->exp_all[x];
  }
  if (by_source(p, nr) != moecclSuccess) return moecclSystemError;
  l->exp_src = p->exp_src, l->exp_src_first = p->exp_src_first;
  l->exp_src_idx = p->exp_src_idx, l->src_token = p->src_token;
  l->exp_remote = p->exp_remote, l->n_exp_remote = nr;
  l->exp_self = p->exp_self, l->n_exp_self = ns;
  l->part = p->part;
  l->dot = p->dot, l->dot_self0 = q0 * (size_t)K, l->dot_self1 = q1 * (size_t)K;
  return moecclSuccess;
}

/* Step 5, token side: the sums split by source (own_self, own_src). */
static moecclResult_t split_own(moecclMoePlan_t p, size_t T) {
  moeccl_moe_layout_t* l = &p->lay;
  int n = p->comm->nranks, me = p->comm->rank;
  size_t nself = l->part_self1 - l->part_self0;
  if (GROW(p, own_self, T + nself) || GROW(p, own_src, l->P) || GROW(p, seen, T))
    return moecclSystemError;
  /* seen[t]: 2 while t has pairs none of which has contributed yet */
  memset(p->seen, 0, T);
  for (size_t q = 0; q < l->P; q++) p->seen[p->pair_token[q]] = 2;
  size_t ns = 0, k = l->part_self0;
  for (size_t t = 0, q = p->send_first[me]; t < T; t++) {
    if (q < p->send_first[me + 1] && p->pair_token[q] == t) {
      /* the self pair's expert rows, weighted, straight into the token */
      size_t self = p->recv_first[me] + (q++ - p->send_first[me]);
      for (; k < l->part_self1 && p->part[k].dst == self; k++)
        p->own_self[ns++] = term(t, p->part[k].src, p->part[k].aux);
      p->seen[t] = 1;
    } else if (!p->seen[t]) {
      p->own_self[ns++] = term(t, MOECCL_ROW_NONE, MOECCL_ROW_NONE);
    }
  }
  for (int k = 1; k < n; k++) {
    int s = (me - k + n) % n;
    for (size_t q = p->send_first[s]; q < p->send_first[s + 1]; q++) {
      uint32_t t = p->pair_token[q];
      p->own_src[q] = term(t, q - p->send_first[s], p->seen[t] == 2 ? 0 : MOECCL_ROW_NONE);
      p->seen[t] = 1;
    }
  }
  l->own_self = p->own_self, l->n_own_self = ns, l->own_src = p->own_src;
  return moecclSuccess;
}

/* Token groups: tok[t] holds each token's term count; it becomes the
 * token's first term in out, a token without terms getting one zero-row
 * term.  Returns the terms in all. */
static size_t token_groups(size_t* tok, size_t T, moeccl_row_term_t* out) {
  size_t sum = 0;
  for (size_t t = 0; t < T; t++) {
    size_t cnt = tok[t];
    tok[t] = sum;
    if (!cnt) out[sum] = term(t, MOECCL_ROW_NONE, MOECCL_ROW_NONE);
    sum += cnt ? cnt : 1;
  }
  return sum;
}

/* Step 5, token side: per token, its pairs' returned rows, ranks ascending. */
static moecclResult_t token_tables(moecclMoePlan_t p, size_t T) {
  moeccl_moe_layout_t* l = &p->lay;
  int n = p->comm->nranks, me = p->comm->rank;
  if (GROW(p, tok, T + 1) || GROW(p, own, T + l->P)) return moecclSystemError;
  memset(p->tok, 0, sizeof(size_t) * (T + 1));
  for (size_t q = 0; q < l->P; q++) p->tok[p->pair_token[q]]++;
  l->n_own = token_groups(p->tok, T, p->own);
  for (int r = 0; r < n; r++)
    for (size_t q = p->send_first[r]; q < p->send_first[r + 1]; q++) {
      size_t t = p->pair_token[q];
      size_t src = r == me ? p->recv_first[me] + (q - p->send_first[me]) : l->Q + q;
      p->own[p->tok[t]++] = term(t, src, MOECCL_ROW_NONE);
    }
  l->own = p->own;
  if (GROW(p, gather, l->P)) return moecclSystemError;
  for (int r = 0; r < n; r++)
    for (size_t q = p->send_first[r]; q < p->send_first[r + 1]; q++)
      p->gather[q] = term(q - p->send_first[r], p->pair_token[q], MOECCL_ROW_NONE);
  l->gather = p->gather;
  return split_own(p, T);
}

/* ---- the hierarchical path's tables (moe_algos.h) ------------------------ */

/* Sender: relay rows by forwarder rank, tokens ascending, each with the
 * mask of the forwarder's node ranks that receive a pair of the token. */
static moecclResult_t relay_rows(moecclMoePlan_t p, size_t T) {
  const moeccl_topo_t* t = p->comm->topo;
  int n = p->comm->nranks, node = t->rank_node[p->comm->rank];
  if (GROW(p, tmask, T) || GROW(p, relay_token, p->lay.P) || GROW(p, relay_mask, p->lay.P))
    return moecclSystemError;
  size_t nr = 0;
  for (int f = 0; f < n; f++) {
    p->relay_first[f] = nr;
    int b = t->rank_node[f], first = t->node_first[b], size = t->node_first[b + 1] - first;
    if (b == node || t->node_ranks[first + p->me_local % size] != f) continue;
    memset(p->tmask, 0, sizeof(uint64_t) * T);
    for (int i = 0; i < size; i++) {
      int r = t->node_ranks[first + i];
      for (size_t q = p->send_first[r]; q < p->send_first[r + 1]; q++)
        p->tmask[p->pair_token[q]] |= 1ULL << i;
    }
    for (size_t tok = 0; tok < T; tok++)
      if (p->tmask[tok]) p->relay_token[nr] = (uint32_t)tok, p->relay_mask[nr++] = p->tmask[tok];
  }
  p->relay_first[n] = nr;
  return moecclSuccess;
}

/* Forwarder: the forward lists and the sums of the node's partials. */
static moecclResult_t forward_lists(moecclMoePlan_t p) {
  moeccl_moe_layout_t* l = &p->lay;
  int n = p->comm->nranks, nl = p->nl, me = p->comm->rank;
  size_t nb = (size_t)n * (size_t)nl;
  memset(p->fw_first, 0, sizeof(size_t) * (nb + 1));
  for (int s = 0; s < n; s++)
    for (size_t i = p->rin_first[s]; i < p->rin_first[s + 1]; i++) {
      uint64_t m = p->rin_mask[i];
      if (m == 0 || (nl < 64 && m >> nl))
        return moeccl_comm_fail(p->comm, moecclInternalError,
                                "moecclMoeLayout: relay row %zu from rank %d names ranks %llx of a "
                                "node of %d",
                                i, s, (unsigned long long)m, nl);
      for (int lr = 0; lr < nl; lr++) p->fw_first[(size_t)s * nl + lr] += m >> lr & 1;
    }
  size_t F = prefix(p->fw_first, (int)nb);
  if (GROW(p, fw_rows, F) || GROW(p, fsum, F)) return moecclSystemError;
  memset(p->fw_cur, 0, sizeof(size_t) * nb);
  size_t nf = 0;
  for (int s = 0; s < n; s++)
    for (size_t i = p->rin_first[s]; i < p->rin_first[s + 1]; i++)
      for (int lr = 0; lr < nl; lr++) {
        if (!(p->rin_mask[i] >> lr & 1)) continue;
        size_t b = (size_t)s * nl + lr, k = p->fw_first[b] + p->fw_cur[b]++;
        p->fw_rows[k] = (uint32_t)i;
        size_t src = lr == p->me_local ? p->recv_first[s] + (k - p->fw_first[b]) : l->Q + k;
        p->fsum[nf++] = term(i, src, MOECCL_ROW_NONE);
      }
  /* This rank's own lists must cover its receive pairs from those sources. */
  for (int s = 0; s < n; s++) {
    if (p->via[s] != me) continue;
    size_t b = (size_t)s * nl + p->me_local;
    if (p->fw_first[b + 1] - p->fw_first[b] != p->recv_first[s + 1] - p->recv_first[s])
      return moeccl_comm_fail(p->comm, moecclInternalError,
                              "moecclMoeLayout: rank %d relays %zu rows of its pairs to this rank, "
                              "which receives %zu",
                              s, p->fw_first[b + 1] - p->fw_first[b],
                              p->recv_first[s + 1] - p->recv_first[s]);
  }
  l->F = F, l->fsum = p->fsum, l->n_fsum = nf, l->fw_rows = p->fw_rows;
  return moecclSuccess;
}

/* Token side: per token, its pairs on this node and its relay rows' sums,
 * ranks ascending (a relay row at its forwarder's place). */
static moecclResult_t hier_own(moecclMoePlan_t p, size_t T) {
  moeccl_moe_layout_t* l = &p->lay;
  int n = p->comm->nranks, me = p->comm->rank;
  size_t Pr = p->relay_first[n];
  if (GROW(p, own_h, T + l->P + Pr)) return moecclSystemError;
  memset(p->tok, 0, sizeof(size_t) * (T + 1));
  for (int r = 0; r < n; r++) {
    if (p->via[r] < 0)
      for (size_t q = p->send_first[r]; q < p->send_first[r + 1]; q++) p->tok[p->pair_token[q]]++;
    for (size_t i = p->relay_first[r]; i < p->relay_first[r + 1]; i++) p->tok[p->relay_token[i]]++;
  }
  l->n_own_h = token_groups(p->tok, T, p->own_h);
  size_t back = l->Q + l->F;
  for (int r = 0; r < n; r++) {
    if (p->via[r] < 0)
      for (size_t q = p->send_first[r]; q < p->send_first[r + 1]; q++) {
        size_t src = r == me ? p->recv_first[me] + (q - p->send_first[me]) : back + q;
        p->own_h[p->tok[p->pair_token[q]]++] = term(p->pair_token[q], src, MOECCL_ROW_NONE);
      }
    for (size_t i = p->relay_first[r]; i < p->relay_first[r + 1]; i++)
      p->own_h[p->tok[p->relay_token[i]]++] =
          term(p->relay_token[i], back + l->P + i, MOECCL_ROW_NONE);
  }
  l->own_h = p->own_h;
  return moecclSuccess;
}

static uint64_t max64(uint64_t a, uint64_t b) { return a > b ? a : b; }

/* This rank's rows and messages per class on each path (cost_rows_t). */
static void hier_costs(moecclMoePlan_t p, uint64_t out[2 * NCOST]) {
  const moeccl_moe_layout_t* l = &p->lay;
  int n = p->comm->nranks, me = p->comm->rank;
  uint64_t net_o = 0, net_i = 0, node_o = 0, node_i = 0, netm_o = 0, netm_i = 0;
  uint64_t nodem_o = 0, nodem_i = 0, fwd_in = 0, fwdm_in = 0;
  for (int r = 0; r < n; r++) {
    if (r == me) continue;
    uint64_t so = p->send_first[r + 1] - p->send_first[r],
             ri = p->recv_first[r + 1] - p->recv_first[r];
    if (p->via[r] < 0) node_o += so, node_i += ri, nodem_o += so > 0, nodem_i += ri > 0;
    else net_o += so, net_i += ri, netm_o += so > 0, netm_i += ri > 0;
    if (p->via[r] >= 0 && p->via[r] != me) fwd_in += ri, fwdm_in += ri > 0;
  }
  uint64_t self = p->send_first[me + 1] - p->send_first[me];
  uint64_t fw_out = 0, fwm_out = 0;
  for (int s = 0; s < n; s++)
    for (int lr = 0; lr < p->nl; lr++) {
      size_t b = (size_t)s * p->nl + lr, k = p->fw_first[b + 1] - p->fw_first[b];
      if (lr != p->me_local) fw_out += k, fwm_out += k > 0;
    }
  uint64_t Pr = p->relay_first[n], Nin = p->rin_first[n], rm_o = 0, rm_i = 0;
  for (int r = 0; r < n; r++) {
    rm_o += p->relay_first[r + 1] > p->relay_first[r];
    rm_i += p->rin_first[r + 1] > p->rin_first[r];
  }
  moeccl_moe_cost_rows_t k[2] = {
      {max64(net_o, net_i), max64(node_o, node_i), l->P - self + l->R, max64(netm_o, netm_i),
       max64(nodem_o, nodem_i), 1, net_o + net_i, node_i},
      {max64(Pr, Nin), max64(node_o + fw_out, node_i + fwd_in), node_o + Pr + l->F + l->R,
       max64(rm_o, rm_i), max64(nodem_o + fwm_out, nodem_i + fwdm_in), 2, Pr + Nin,
       node_i + fwd_in}};
  memcpy(out, k, sizeof(k));
}

/* The hierarchical tables: relay rows, an all-to-all of their counts, an
 * all-to-allv of their masks, the forward lists, then an all-to-all of
 * every rank's costs (each keeps the maxima). */
static moecclResult_t hier_tables(moecclMoePlan_t p, size_t T) {
  moeccl_moe_layout_t* l = &p->lay;
  moeccl_comm_t* c = p->comm;
  int n = c->nranks;
  if (relay_rows(p, T) != moecclSuccess)
    return moeccl_comm_fail(c, moecclSystemError,
                            "moecclMoeLayout: out of memory for relay rows; abort the "
                            "communicator");
  for (int r = 0; r < n; r++) {
    uint64_t* m = p->cost_out + (size_t)r * HMSG;
    memset(m, 0, sizeof(uint64_t) * HMSG);
    m[HMSG_RELAY] = p->relay_first[r + 1] - p->relay_first[r];
  }
  moeccl_call_t call = {.kind = MOECCL_CALL_A2A, .sendbuf = p->cost_out, .recvbuf = p->cost_in};
  call.a2a = (moeccl_a2a_desc_t){
      .rank = c->rank, .nranks = n, .block_bytes = HMSG * sizeof(uint64_t), .elem_size = 8};
  MOECCL_CHECK(moeccl_call_issue(c, &call, NULL));
  for (int s = 0; s < n; s++) p->rin_first[s] = (size_t)p->cost_in[(size_t)s * HMSG + HMSG_RELAY];
  size_t Nin = prefix(p->rin_first, n);
  if (GROW(p, rin_mask, Nin))
    return moeccl_comm_fail(c, moecclSystemError,
                            "moecclMoeLayout: out of memory for relay masks; abort the "
                            "communicator");
  MOECCL_CHECK(
      alltoallv(p, p->relay_mask, p->relay_first, p->rin_mask, p->rin_first, sizeof(uint64_t), 1));
  moecclResult_t rc = forward_lists(p);
  if (rc == moecclSuccess) rc = hier_own(p, T);
  if (rc == moecclSystemError)
    return moeccl_comm_fail(c, rc,
                            "moecclMoeLayout: out of memory for the forward lists; abort "
                            "the communicator");
  MOECCL_CHECK(rc);
  /* row indices of the hierarchical programs are 32-bit (Q + F + P + Pr + Nin) */
  if ((uint64_t)l->Q + l->F + l->P + p->relay_first[n] + Nin >= UINT32_MAX)
    return moeccl_comm_fail(c, moecclInvalidArgument,
                            "moecclMoeLayout: %zu rows on the hierarchical path are too many; "
                            "abort the communicator",
                            l->Q + l->F + l->P + p->relay_first[n] + Nin);
  uint64_t mine[2 * NCOST];
  hier_costs(p, mine);
  for (int r = 0; r < n; r++)
    memcpy(p->cost_out + (size_t)r * HMSG + HMSG_COST, mine, sizeof(mine));
  MOECCL_CHECK(moeccl_call_issue(c, &call, NULL));
  uint64_t most[2 * NCOST] = {0};
  for (int s = 0; s < n; s++) {
    const uint64_t* theirs = p->cost_in + (size_t)s * HMSG + HMSG_COST;
    memcpy(&p->cost_all[2 * s], theirs, sizeof(mine));
    for (size_t i = 0; i < 2 * NCOST; i++) most[i] = max64(most[i], theirs[i]);
  }
  memcpy(l->cost, most, sizeof(most));
  l->cost_all = p->cost_all;
  l->via = p->via, l->relay_first = p->relay_first, l->relay_token = p->relay_token;
  l->rin_first = p->rin_first, l->nl = p->nl, l->me_local = p->me_local;
  l->node_rank = p->node_rank, l->fw_first = p->fw_first;
  l->hier_ok = 1;
  return moecclSuccess;
}

static moecclResult_t layout(moecclMoePlan_t p, const int32_t* ids, size_t T, int K,
                             size_t capacity, size_t* dropped) {
  moeccl_moe_layout_t* l = &p->lay;
  size_t routed = 0;
  *dropped = 0;
  if (send_side(p, ids, T, K, &routed) != moecclSuccess)
    return moeccl_error(p->comm, moecclSystemError, "moecclMoeLayout: out of memory");
  MOECCL_CHECK(exchange_counts(p, K, capacity));
  if (GROW(p, route_recv, l->Q * (size_t)K))
    return moeccl_comm_fail(p->comm, moecclSystemError,
                            "moecclMoeLayout: out of memory after the count exchange; abort the "
                            "communicator");
  MOECCL_CHECK(alltoallv(p, p->route_send, p->send_first, p->route_recv, p->recv_first,
                         sizeof(int32_t), (size_t)K));
  if (capacity) MOECCL_CHECK(apply_capacity(p, K, capacity, routed, dropped));
  /* the senders' token of each receive pair (gathered dispatch messages) */
  if (GROW(p, src_token, l->Q))
    return moeccl_comm_fail(p->comm, moecclSystemError,
                            "moecclMoeLayout: out of memory after the route exchange; abort the "
                            "communicator");
  MOECCL_CHECK(
      alltoallv(p, p->pair_token, p->send_first, p->src_token, p->recv_first, sizeof(uint32_t), 1));
  moecclResult_t rc = expert_tables(p, K);
  if (rc == moecclSuccess) rc = token_tables(p, T);
  if (rc == moecclSystemError)
    return moeccl_comm_fail(p->comm, rc,
                            "moecclMoeLayout: out of memory for the tables; abort the "
                            "communicator");
  l->rank = p->comm->rank, l->nranks = p->comm->nranks, l->K = K, l->T = T;
  l->send_first = p->send_first, l->recv_first = p->recv_first, l->pair_token = p->pair_token;
  l->hier_ok = 0;
  if (rc == moecclSuccess && p->hier_possible) rc = hier_tables(p, T);
  return rc;
}

MOECCL_EXPORT moecclResult_t moecclMoeLayout(moecclMoePlan_t plan, const int32_t* topkIdx,
                                             size_t numTokens, int topk, size_t capacity,
                                             size_t* recvCounts, size_t* numDropped) {
  MOECCL_CHECK(plan_check(plan, "moecclMoeLayout"));
  MOECCL_CHECK(check_layout(plan, topkIdx, numTokens, topk));
  wait_idle(plan->comm);
  plan->laid_out = 0;
  size_t dropped = 0;
  MOECCL_CHECK(layout(plan, topkIdx, numTokens, topk, capacity, &dropped));
  plan->laid_out = 1;
  plan->capacity = capacity;
  if (recvCounts) memcpy(recvCounts, plan->ecount, sizeof(size_t) * (size_t)plan->nlocal);
  if (numDropped) *numDropped = dropped;
  return moecclSuccess;
}

/* ---- the data calls ------------------------------------------------------ */

/* One data call before it is checked: in is read, out written. */
typedef struct {
  const char* fn;
  moeccl_moe_op_t op;
  const void* in;
  const char* in_name;
  size_t in_rows;
  void* out;
  const char* out_name;
  size_t out_rows;
  size_t rows_cap; /* what the caller says its expert-row buffer holds */
  int weighted, gate_grad;
  const float* weights;
  const void* expert_out;
  float* grad_weights;
  size_t hidden;
  moecclDataType_t type;
  moecclStream_t stream;
} moe_args_t;

static int overlaps(const void* a, size_t abytes, const void* b, size_t bbytes) {
  uintptr_t x = (uintptr_t)a, y = (uintptr_t)b;
  return abytes && bbytes && x < y + bbytes && y < x + abytes;
}

/* buf holds rows rows of row_bytes (checked not to overflow): not NULL
 * when rows > 0, and a span a buffer of the caller can have (span.h). */
static moecclResult_t check_rows(moeccl_comm_t* c, const moe_args_t* a, const void* buf,
                                 const char* name, size_t rows, size_t row_bytes) {
  if (rows && !buf)
    return moeccl_error(c, moecclInvalidArgument, "%s: %s is NULL with %zu rows", a->fn, name,
                        rows);
  moeccl_span_t why = moeccl_span_check(buf, rows * row_bytes, NULL);
  if (why != MOECCL_SPAN_OK)
    return moeccl_error(c, moecclInvalidArgument,
                        "%s on rank %d: %s %p of %zu rows of %zu bytes (hidden %zu) would %s",
                        a->fn, c->rank, name, buf, rows, row_bytes, a->hidden,
                        moeccl_span_text(why));
  return moecclSuccess;
}

static moecclResult_t check_data(moecclMoePlan_t p, const moe_args_t* a) {
  moeccl_comm_t* c = p->comm;
  const moeccl_moe_layout_t* l = &p->lay;
  if (!p->laid_out)
    return moeccl_error(c, moecclInvalidUsage, "%s: the plan has no layout (moecclMoeLayout)",
                        a->fn);
  size_t es = moeccl_type_size(a->type);
  if (es == 0)
    return moeccl_error(c, moecclInvalidArgument, "%s: datatype %d is invalid", a->fn,
                        (int)a->type);
  if (a->op != MOECCL_MOE_DISPATCH && !moeccl_rows_type_ok(a->type))
    return moeccl_error(c, moecclInvalidArgument,
                        "%s: datatype %d is not float32, float16 or bfloat16", a->fn, (int)a->type);
  if (a->hidden == 0 && (l->T > 0 || l->R > 0))
    return moeccl_error(c, moecclInvalidArgument, "%s: hidden is 0 with %zu tokens, %zu rows",
                        a->fn, l->T, l->R);
  /* Across nodes a rank may forward others' rows, and the path is chosen
   * by the row size: every rank must pass the same hidden, never 0. */
  if (a->hidden == 0 && l->hier_ok)
    return moeccl_error(c, moecclInvalidArgument,
                        "%s: hidden is 0 on a communicator that spans nodes (this rank may "
                        "forward other ranks' rows; pass the same hidden as every rank)",
                        a->fn);
  size_t most = l->T > l->R ? l->T : l->R;
  if (a->hidden && most > SIZE_MAX / a->hidden / es)
    return moeccl_error(c, moecclInvalidArgument, "%s: hidden %zu times rows overflows", a->fn,
                        a->hidden);
  if (a->rows_cap < l->R)
    return moeccl_error(c, moecclInvalidArgument,
                        "%s: the expert-row buffer holds %zu rows, this rank receives %zu", a->fn,
                        a->rows_cap, l->R);
  size_t rb = a->hidden * es;
  MOECCL_CHECK(check_rows(c, a, a->in, a->in_name, a->in_rows, rb));
  MOECCL_CHECK(check_rows(c, a, a->out, a->out_name, a->out_rows, rb));
  size_t slots = l->T * (size_t)l->K;
  if (a->weighted) MOECCL_CHECK(check_rows(c, a, a->weights, "weights", slots, sizeof(float)));
  if (a->gate_grad) {
    MOECCL_CHECK(check_rows(c, a, a->expert_out, "expertRows", l->R, rb));
    MOECCL_CHECK(check_rows(c, a, a->grad_weights, "gradWeights", slots, sizeof(float)));
    if (overlaps(a->grad_weights, slots * sizeof(float), a->out, a->out_rows * a->hidden * es))
      return moeccl_error(c, moecclInvalidArgument, "%s: gradWeights overlaps gradExpertRows",
                          a->fn);
  }
  if (overlaps(a->in, a->in_rows * rb, a->out, a->out_rows * rb))
    return moeccl_error(c, moecclInvalidArgument, "%s: %s and %s overlap", a->fn, a->in_name,
                        a->out_name);
  if (moeccl_stream_check(c, a->stream) != moecclSuccess)
    return moeccl_error(c, moecclInvalidArgument,
                        "%s: stream %p is not NULL nor a live moeccl host stream", a->fn,
                        a->stream);
  return moecclSuccess;
}

/* The send area for a call of rows of rb bytes: (P + Q) rows of
 * moecclMemAlloc memory, so that local peers read the rows this rank sends
 * from a mapping instead of by CMA.  It grows (rarely: the plan keeps the
 * largest) only once the calls queued before have finished; inside a group,
 * or when the memory cannot be had, the call uses scratch as before. */
static void* send_area(moecclMoePlan_t p, size_t rb) {
  const moeccl_moe_layout_t* l = &p->lay;
  size_t rows = moeccl_moe_area_rows(l);
  if (rb && rows > SIZE_MAX / rb) return NULL;
  size_t need = rows * rb;
  if (need == 0) return NULL;
  if (need <= p->send_area_bytes) return p->send_area;
  if (moeccl_group_active()) return NULL;
  wait_idle(p->comm);
  if (p->send_area) moecclMemFree(p->send_area);
  p->send_area = NULL, p->send_area_bytes = 0;
  size_t bytes = need + need / 4;
  void* q = NULL;
  if (moecclMemAlloc(&q, bytes) != moecclSuccess) return NULL;
  p->send_area = q, p->send_area_bytes = bytes;
  return q;
}

/* The tuner's path for rows of rb bytes, logged at ALGO when it changes. */
static int pick_path(moecclMoePlan_t p, const moe_args_t* a, size_t rb) {
  double us[2];
  int hier = moeccl_tuner_pick_moe(p->comm, &p->lay, rb, us);
  if (p->comm->rank == 0 && (hier != p->logged_path || rb != p->logged_rb)) {
    p->logged_path = hier, p->logged_rb = rb;
    if (us[1] < 0)
      INFO(ALGO, "rank %d: %s of %zu-byte rows: flat (%s)", p->comm->rank, a->fn, rb,
           moeccl_tuner_forced(p->comm)->moe == 0 ? "MOECCL_MOE_ALGO=flat"
                                                  : "one node, or a node of more than 64 ranks");
    else
      INFO(ALGO, "rank %d: %s of %zu-byte rows: %s (predicted us: flat %.1f, hier %.1f%s)",
           p->comm->rank, a->fn, rb, hier ? "hier" : "flat", us[0], us[1],
           moeccl_tuner_forced(p->comm)->moe >= 0 ? "; forced by MOECCL_MOE_ALGO" : "");
  }
  return hier;
}

static moecclResult_t moe_issue(moecclMoePlan_t p, const moe_args_t* a) {
  MOECCL_CHECK(plan_check(p, a->fn));
  MOECCL_CHECK(check_data(p, a));
  size_t rb = a->hidden * moeccl_type_size(a->type);
  moeccl_call_t call = {.kind = MOECCL_CALL_MOE, .sendbuf = a->in, .recvbuf = a->out};
  call.moe = (moeccl_moe_call_t){.op = a->op,
                                 .lay = &p->lay,
                                 .hier = pick_path(p, a, rb),
                                 .type = a->type,
                                 .hidden = a->hidden,
                                 .elem_size = moeccl_type_size(a->type),
                                 .weighted = a->weighted,
                                 .gate_grad = a->gate_grad,
                                 .weights = a->weights,
                                 .expert_out = a->expert_out,
                                 .grad_weights = a->grad_weights,
                                 .progs = p->progs,
                                 .nprogs_cap = MOECCL_MOE_MAX_PROGS + 2 * (size_t)p->comm->nranks,
                                 .send_area = send_area(p, rb)};
  return moeccl_call_issue(p->comm, &call, a->stream);
}

/* Rows the plan gives each side (0 when the plan is not valid: checked later). */
static size_t tokens_of(moecclMoePlan_t p) {
  return p && p->magic == MOECCL_MOE_MAGIC ? p->lay.T : 0;
}
static size_t rows_of(moecclMoePlan_t p) {
  return p && p->magic == MOECCL_MOE_MAGIC ? p->lay.R : 0;
}

MOECCL_EXPORT moecclResult_t moecclMoeDispatch(moecclMoePlan_t plan, const void* tokens,
                                               void* expertRows, size_t expertRowsCap,
                                               size_t hidden, moecclDataType_t datatype,
                                               moecclStream_t stream) {
  moe_args_t a = {"moecclMoeDispatch",
                  MOECCL_MOE_DISPATCH,
                  tokens,
                  "tokens",
                  tokens_of(plan),
                  expertRows,
                  "expertRows",
                  rows_of(plan),
                  expertRowsCap,
                  0,
                  0,
                  NULL,
                  NULL,
                  NULL,
                  hidden,
                  datatype,
                  stream};
  return moe_issue(plan, &a);
}

MOECCL_EXPORT moecclResult_t moecclMoeCombine(moecclMoePlan_t plan, const void* expertRows,
                                              size_t expertRowsCap, const float* weights,
                                              void* tokens, size_t hidden,
                                              moecclDataType_t datatype, moecclStream_t stream) {
  moe_args_t a = {"moecclMoeCombine",
                  MOECCL_MOE_COMBINE,
                  expertRows,
                  "expertRows",
                  rows_of(plan),
                  tokens,
                  "tokens",
                  tokens_of(plan),
                  expertRowsCap,
                  1,
                  0,
                  weights,
                  NULL,
                  NULL,
                  hidden,
                  datatype,
                  stream};
  return moe_issue(plan, &a);
}

MOECCL_EXPORT moecclResult_t moecclMoeDispatchBackward(moecclMoePlan_t plan,
                                                       const void* gradExpertRows,
                                                       size_t expertRowsCap, void* gradTokens,
                                                       size_t hidden, moecclDataType_t datatype,
                                                       moecclStream_t stream) {
  moe_args_t a = {"moecclMoeDispatchBackward",
                  MOECCL_MOE_COMBINE,
                  gradExpertRows,
                  "gradExpertRows",
                  rows_of(plan),
                  gradTokens,
                  "gradTokens",
                  tokens_of(plan),
                  expertRowsCap,
                  0,
                  0,
                  NULL,
                  NULL,
                  NULL,
                  hidden,
                  datatype,
                  stream};
  return moe_issue(plan, &a);
}

MOECCL_EXPORT moecclResult_t moecclMoeCombineBackward(moecclMoePlan_t plan, const void* gradTokens,
                                                      const float* weights, const void* expertRows,
                                                      void* gradExpertRows, size_t expertRowsCap,
                                                      float* gradWeights, size_t hidden,
                                                      moecclDataType_t datatype,
                                                      moecclStream_t stream) {
  moe_args_t a = {"moecclMoeCombineBackward",
                  MOECCL_MOE_COMBINE_BACKWARD,
                  gradTokens,
                  "gradTokens",
                  tokens_of(plan),
                  gradExpertRows,
                  "gradExpertRows",
                  rows_of(plan),
                  expertRowsCap,
                  1,
                  1,
                  weights,
                  expertRows,
                  gradWeights,
                  hidden,
                  datatype,
                  stream};
  return moe_issue(plan, &a);
}
