/*
 * The hierarchical MoE path's tables (moe_algos.h): across nodes a row goes
 * to one forwarder rank on the destination's node, which hands it on to
 * every rank there that needs it.  Fixed tables at plan creation (which
 * rank forwards for which), then per layout the relay rows, the forward
 * lists and every rank's costs on both paths, for the tuner to choose.
 */
#include "api/moe_int.h"
#include "exec/enqueue.h"
#include "topo/topo.h"
#include "tune/tuner.h"

#include <stdlib.h>
#include <string.h>

#define NCOST (sizeof(moeccl_moe_cost_rows_t) / sizeof(uint64_t))
enum { HMSG_RELAY, HMSG_T, HMSG_COST, HMSG = HMSG_COST + 2 * NCOST };

/* The hierarchical path's fixed tables, when it can apply: the
 * communicator spans nodes of at most 64 ranks (a relay row's destinations
 * are a 64-bit mask) and MOECCL_MOE_ALGO is not flat.  The same on every
 * rank (the topology is). */
moecclResult_t moeccl_moeplan_hier_setup(moecclMoePlan_t p) {
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
  p->peer_T = calloc((size_t)n, sizeof(size_t));
  if (!p->peer_T || !p->via || !p->node_rank || !p->relay_first || !p->rin_first || !p->fw_first ||
      !p->fw_cur || !p->cost_out || !p->cost_in || !p->cost_all)
    return moecclSystemError;
  for (int l = 0; l < p->nl; l++) p->node_rank[l] = t->node_ranks[t->node_first[node] + l];
  for (int s = 0; s < n; s++)
    p->via[s] = t->rank_node[s] == node ? -1 : p->node_rank[t->rank_local[s] % p->nl];
  p->hier_possible = 1;
  return moecclSuccess;
}

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

/* t/T ascending (exact: t < T < 2^32), then the source. */
static int rin_key_cmp(const void* a, const void* b) {
  const moe_rin_key_t *x = a, *y = b;
  unsigned __int128 l = (unsigned __int128)x->t * y->T, r = (unsigned __int128)y->t * x->T;
  if (l != r) return l < r ? -1 : 1;
  return x->s < y->s ? -1 : x->s > y->s;
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
  size_t F = moeccl_moeplan_prefix(p->fw_first, (int)nb), Nin = p->rin_first[n];
  if (GROW(p, fw_rows, F) || GROW(p, fsum, F) || GROW(p, rin_key, Nin)) return moecclSystemError;
  /* The rows in the order of their token's place among their source's
   * tokens (moe_algos.h's fsum); within a source that is rin order, so the
   * forward lists come out by rin row as the forwarding expects. */
  for (int s = 0; s < n; s++)
    for (size_t i = p->rin_first[s]; i < p->rin_first[s + 1]; i++)
      p->rin_key[i] = (moe_rin_key_t){p->rin_token[i], p->peer_T[s], (uint32_t)s, (uint32_t)i};
  if (Nin > 1) qsort(p->rin_key, Nin, sizeof(moe_rin_key_t), rin_key_cmp);
  memset(p->fw_cur, 0, sizeof(size_t) * nb);
  size_t nf = 0;
  for (size_t j = 0; j < Nin; j++) {
    int s = (int)p->rin_key[j].s;
    size_t i = p->rin_key[j].i;
    for (int lr = 0; lr < nl; lr++) {
      if (!(p->rin_mask[i] >> lr & 1)) continue;
      size_t b = (size_t)s * nl + lr, k = p->fw_first[b] + p->fw_cur[b]++;
      p->fw_rows[k] = (uint32_t)i;
      size_t src = lr == p->me_local ? p->recv_first[s] + (k - p->fw_first[b]) : l->Q + k;
      p->fsum[nf++] = moe_term(i, src, MOECCL_ROW_NONE);
    }
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
  l->n_own_h = moeccl_moeplan_token_groups(p->tok, T, p->own_h);
  size_t back = l->Q + l->F;
  for (int r = 0; r < n; r++) {
    if (p->via[r] < 0)
      for (size_t q = p->send_first[r]; q < p->send_first[r + 1]; q++) {
        size_t src = r == me ? p->recv_first[me] + (q - p->send_first[me]) : back + q;
        p->own_h[p->tok[p->pair_token[q]]++] = moe_term(p->pair_token[q], src, MOECCL_ROW_NONE);
      }
    for (size_t i = p->relay_first[r]; i < p->relay_first[r + 1]; i++)
      p->own_h[p->tok[p->relay_token[i]]++] =
          moe_term(p->relay_token[i], back + l->P + i, MOECCL_ROW_NONE);
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
  moeccl_moe_cost_rows_t k[2] = {{.net_rows = max64(net_o, net_i),
                                  .node_rows = max64(node_o, node_i),
                                  .pack_rows = l->P - self,
                                  .expand_rows = l->R,
                                  .net_msgs = max64(netm_o, netm_i),
                                  .node_msgs = max64(nodem_o, nodem_i),
                                  .net_io_rows = net_o + net_i,
                                  .node_in_rows = node_i},
                                 {.net_rows = max64(Pr, Nin),
                                  .node_rows = max64(node_o, node_i),
                                  .fwd_node_rows = max64(fw_out, fwd_in),
                                  .pack_rows = node_o + Pr,
                                  .fwd_rows = l->F,
                                  .expand_rows = l->R,
                                  .net_msgs = max64(rm_o, rm_i),
                                  .node_msgs = max64(nodem_o, nodem_i),
                                  .fwd_node_msgs = max64(fwm_out, fwdm_in),
                                  .net_io_rows = Pr + Nin,
                                  .node_in_rows = node_i,
                                  .fwd_in_rows = fwd_in}};
  memcpy(out, k, sizeof(k));
}

/* The hierarchical tables: relay rows, an all-to-all of their counts, an
 * all-to-allv of their masks, the forward lists, then an all-to-all of
 * every rank's costs (each keeps the maxima). */
moecclResult_t moeccl_moeplan_hier_tables(moecclMoePlan_t p, size_t T) {
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
    m[HMSG_T] = T;
  }
  moeccl_call_t call = {.kind = MOECCL_CALL_A2A, .sendbuf = p->cost_out, .recvbuf = p->cost_in};
  call.a2a = (moeccl_a2a_desc_t){
      .rank = c->rank, .nranks = n, .block_bytes = HMSG * sizeof(uint64_t), .elem_size = 8};
  MOECCL_CHECK(moeccl_call_issue(c, &call, NULL));
  for (int s = 0; s < n; s++) {
    p->rin_first[s] = (size_t)p->cost_in[(size_t)s * HMSG + HMSG_RELAY];
    p->peer_T[s] = (size_t)p->cost_in[(size_t)s * HMSG + HMSG_T];
  }
  size_t Nin = moeccl_moeplan_prefix(p->rin_first, n);
  if (GROW(p, rin_mask, Nin) || GROW(p, rin_token, Nin))
    return moeccl_comm_fail(c, moecclSystemError,
                            "moecclMoeLayout: out of memory for relay masks; abort the "
                            "communicator");
  MOECCL_CHECK(moeccl_moeplan_alltoallv(p, p->relay_mask, p->relay_first, p->rin_mask, p->rin_first,
                                        sizeof(uint64_t), 1));
  /* their tokens, for the pipelined path's chunks */
  MOECCL_CHECK(moeccl_moeplan_alltoallv(p, p->relay_token, p->relay_first, p->rin_token,
                                        p->rin_first, sizeof(uint32_t), 1));
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
  l->peer_T = p->peer_T, l->rin_token = p->rin_token;
  l->hier_ok = 1;
  return moecclSuccess;
}
