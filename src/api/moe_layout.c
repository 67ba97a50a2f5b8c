/*
 * The layout of a MoE step (moecclMoeLayout, moe.c): the count and route
 * exchanges, then the tables the generators of src/algos/moe_dispatch.c
 * read; the hierarchical path's own tables follow (moe_hier.c).
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
#include "api/moe_int.h"
#include "exec/enqueue.h"

#include <stdlib.h>
#include <string.h>

/* ---- the layout ----------------------------------------------------------- */

moecclResult_t moeccl_moeplan_check_layout(moecclMoePlan_t p, const int32_t* ids, size_t T, int K) {
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
  size_t P = moeccl_moeplan_prefix(first, n);
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
  p->lay.Q = moeccl_moeplan_prefix(p->recv_first, n);
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
  MOECCL_CHECK(moeccl_moeplan_alltoallv(p, p->route_recv, p->recv_first, p->route_send,
                                        p->send_first, sizeof(int32_t), (size_t)K));
  size_t kept = 0;
  for (size_t i = 0; i < l->P * (size_t)K; i++) kept += p->route_send[i] >= 0;
  *dropped = routed - kept;
  int n = p->comm->nranks;
  l->P = compact(p->route_send, p->pair_token, p->send_first, n, K);
  l->Q = compact(p->route_recv, NULL, p->recv_first, n, K);
  return moecclSuccess;
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
  moeccl_moeplan_prefix(first, n);
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
        p->dot[i] = moe_term(i, MOECCL_ROW_NONE, MOECCL_ROW_NONE);
        continue;
      }
      size_t x = p->ecur[le]++;
      p->part[np++] = moe_term(q, x, i);
      p->exp_all[x] = moe_term(x, src, i);
      p->dot[i] = moe_term(i, src, x);
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
        p->own_self[ns++] = moe_term(t, p->part[k].src, p->part[k].aux);
      p->seen[t] = 1;
    } else if (!p->seen[t]) {
      p->own_self[ns++] = moe_term(t, MOECCL_ROW_NONE, MOECCL_ROW_NONE);
    }
  }
  for (int k = 1; k < n; k++) {
    int s = (me - k + n) % n;
    for (size_t q = p->send_first[s]; q < p->send_first[s + 1]; q++) {
      uint32_t t = p->pair_token[q];
      p->own_src[q] = moe_term(t, q - p->send_first[s], p->seen[t] == 2 ? 0 : MOECCL_ROW_NONE);
      p->seen[t] = 1;
    }
  }
  l->own_self = p->own_self, l->n_own_self = ns, l->own_src = p->own_src;
  return moecclSuccess;
}

/* Step 5, token side: per token, its pairs' returned rows, ranks ascending. */
static moecclResult_t token_tables(moecclMoePlan_t p, size_t T) {
  moeccl_moe_layout_t* l = &p->lay;
  int n = p->comm->nranks, me = p->comm->rank;
  if (GROW(p, tok, T + 1) || GROW(p, own, T + l->P)) return moecclSystemError;
  memset(p->tok, 0, sizeof(size_t) * (T + 1));
  for (size_t q = 0; q < l->P; q++) p->tok[p->pair_token[q]]++;
  l->n_own = moeccl_moeplan_token_groups(p->tok, T, p->own);
  for (int r = 0; r < n; r++)
    for (size_t q = p->send_first[r]; q < p->send_first[r + 1]; q++) {
      size_t t = p->pair_token[q];
      size_t src = r == me ? p->recv_first[me] + (q - p->send_first[me]) : l->Q + q;
      p->own[p->tok[t]++] = moe_term(t, src, MOECCL_ROW_NONE);
    }
  l->own = p->own;
  if (GROW(p, gather, l->P)) return moecclSystemError;
  for (int r = 0; r < n; r++)
    for (size_t q = p->send_first[r]; q < p->send_first[r + 1]; q++)
      p->gather[q] = moe_term(q - p->send_first[r], p->pair_token[q], MOECCL_ROW_NONE);
  l->gather = p->gather;
  return split_own(p, T);
}

moecclResult_t moeccl_moeplan_layout(moecclMoePlan_t p, const int32_t* ids, size_t T, int K,
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
  MOECCL_CHECK(moeccl_moeplan_alltoallv(p, p->route_send, p->send_first, p->route_recv,
                                        p->recv_first, sizeof(int32_t), (size_t)K));
  if (capacity) MOECCL_CHECK(apply_capacity(p, K, capacity, routed, dropped));
  /* the senders' token of each receive pair (gathered dispatch messages) */
  if (GROW(p, src_token, l->Q))
    return moeccl_comm_fail(p->comm, moecclSystemError,
                            "moecclMoeLayout: out of memory after the route exchange; abort the "
                            "communicator");
  MOECCL_CHECK(moeccl_moeplan_alltoallv(p, p->pair_token, p->send_first, p->src_token,
                                        p->recv_first, sizeof(uint32_t), 1));
  moecclResult_t rc = expert_tables(p, K);
  if (rc == moecclSuccess) rc = token_tables(p, T);
  if (rc == moecclSystemError)
    return moeccl_comm_fail(p->comm, rc,
                            "moecclMoeLayout: out of memory for the tables; abort the "
                            "communicator");
  l->rank = p->comm->rank, l->nranks = p->comm->nranks, l->K = K, l->T = T;
  l->send_first = p->send_first, l->recv_first = p->recv_first, l->pair_token = p->pair_token;
  l->hier_ok = 0;
  if (rc == moecclSuccess && p->hier_possible) rc = moeccl_moeplan_hier_tables(p, T);
  return rc;
}
