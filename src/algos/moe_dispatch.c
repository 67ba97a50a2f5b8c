/*
 * The MoE dispatch, combine and combine backward as schedules (moe_algos.h).
 *
 * dispatch:  1. pack: one COPY per run of consecutive tokens into a row per
 *               (token, peer) in scratch;
 *            2. one SEND / RECV of the packed rows per peer pair; the rows
 *               from this rank itself expand straight from the tokens;
 *            3. expand the received rows into expert-major order, one COPY
 *               per run of rows consecutive on both sides.
 * combine:   1-2. the token side sends each peer K weights per pair (when
 *               weighted; this rank's own go by COPY);
 *            3. the expert side forms one partial sum per pair over the
 *               experts it holds (a ROWS program);
 *            4. one SEND / RECV of the partial rows per peer pair;
 *            5. the token side sums its pairs' rows, ranks ascending.
 * combine backward: dispatch's steps, with the expansion weighted by the
 *            gate weights (a ROWS program instead of copies) and, for the
 *            gate gradients, a DOT program over the received rows and the
 *            forward's expert outputs, whose K floats per pair go back and
 *            are summed per token like the combine's rows.
 * flat dispatch with the layout's gather tables: no pack; one gathered
 *            SEND per peer (the executor packs at post time unless the
 *            transport lets the receiver pick the rows from the whole token
 *            buffer) and one consuming RECV per peer that expands as the
 *            rows arrive.
 * flat float32 combine: the peers' partials only (the own tokens sum
 *            their expert rows directly), then one step with every peer,
 *            each RECV adding its rows into the tokens as they arrive, in
 *            op order (rank-1, rank-2, ...).
 * hierarchical (c->hier, moe_algos.h): the packed rows go only to this
 *            node's peers; relay rows (one per token and other node) go to
 *            the forwarders, which copy each on to their node's ranks (one
 *            message per source) or into their own receive pairs; combine
 *            mirrors it, the forwarder summing the node's partials per
 *            relay row before one row per (token, node) goes back.
 *            In C chunks (c->chunks; every rank's tokens cut alike,
 *            moeccl_moe_chunk_of) the hops overlap: step j carries chunk
 *            j's relay rows between nodes, the forwarders' copies of chunk
 *            j-1 and chunk j-2's messages on the node (combine: chunk j's
 *            partials to the forwarders, chunk j-1's sums, chunk j-2's
 *            rows back), C + 2 steps instead of 3, the same rows and sums.
 * Zero-byte blocks produce no op on either side.  Planning is O(nranks +
 * rows) per call; the terms come from the layout.
 */
#include "base/check.h"
#include "moe_algos.h"

#include <string.h>
#include <strings.h>

const char* moeccl_moe_op_name(moeccl_moe_op_t op) {
  static const char* const names[MOECCL_MOE_NOPS] = {"dispatch", "combine", "combine backward"};
  return op < MOECCL_MOE_NOPS ? names[op] : "?";
}

/* The names MOECCL_MOE_ALGO takes (param_list.h's choices; test_param
 * checks that the two agree). */
const char* const moeccl_moe_paths[MOECCL_MOE_NPATHS] = {"flat", "hier"};

int moeccl_moe_path_by_name(const char* name) {
  for (int i = 0; i < MOECCL_MOE_NPATHS; i++)
    if (name && strcasecmp(name, moeccl_moe_paths[i]) == 0) return i;
  return -1;
}

/* COPY ops of (dst, src) index pairs, merged while both run on. */
typedef struct {
  moeccl_sched_t* s;
  uint32_t sbuf, dbuf;
  uint64_t sbase, dbase, unit;
  uint64_t s0, d0, n;
} runs_t;

static moecclResult_t runs_flush(runs_t* r) {
  if (!r->n) return moecclSuccess;
  uint64_t n = r->n;
  r->n = 0;
  return moeccl_sched_add(r->s, MOECCL_OP_COPY, -1, r->sbuf, r->sbase + r->s0 * r->unit, r->dbuf,
                          r->dbase + r->d0 * r->unit, n * r->unit);
}

static moecclResult_t runs_add(runs_t* r, uint64_t dst, uint64_t src) {
  if (r->n && dst == r->d0 + r->n && src == r->s0 + r->n) {
    r->n++;
    return moecclSuccess;
  }
  MOECCL_CHECK(runs_flush(r));
  r->d0 = dst, r->s0 = src, r->n = 1;
  return moecclSuccess;
}

/* Token rows (or K weights) of the send pairs to the peers into scratch at
 * dbase, by pair; this rank's own pairs, when self_to is not NONE, to
 * self_base (by receive pair) instead of being skipped. */
static moecclResult_t pack(const moeccl_moe_layout_t* l, moeccl_sched_t* s, uint32_t sbuf,
                           uint64_t unit, uint32_t dbuf, uint64_t dbase, int with_self,
                           uint64_t self_base, const int* via) {
  runs_t r = {s, sbuf, dbuf, 0, dbase, unit, 0, 0, 0};
  for (int peer = 0; peer < l->nranks; peer++) {
    int self = peer == l->rank;
    if ((self && !with_self) || (via && via[peer] >= 0)) continue;
    MOECCL_CHECK(runs_flush(&r));
    r.dbase = self ? self_base : dbase;
    size_t shift = self ? l->recv_first[peer] - l->send_first[peer] : 0;
    for (size_t p = l->send_first[peer]; p < l->send_first[peer + 1]; p++)
      MOECCL_CHECK(runs_add(&r, p + shift, l->pair_token[p]));
  }
  return runs_flush(&r);
}

/* One message per peer: out's pairs [first[peer], first[peer+1]) of unit
 * bytes go from sbuf at sbase; in's arrive into dbuf at dbase.  With via,
 * only the peers on this node (via[peer] < 0). */
static moecclResult_t exchange_via(const moeccl_moe_layout_t* l, moeccl_sched_t* s,
                                   const size_t* out_first, uint32_t sbuf, uint64_t sbase,
                                   const size_t* in_first, uint32_t dbuf, uint64_t dbase,
                                   uint64_t unit, const int* via) {
  for (int k = 1; k < l->nranks; k++) {
    int to = (l->rank + k) % l->nranks, from = (l->rank - k + l->nranks) % l->nranks;
    if (!via || via[to] < 0)
      MOECCL_CHECK(moeccl_sched_add(s, MOECCL_OP_SEND, to, sbuf, sbase + out_first[to] * unit, 0, 0,
                                    (out_first[to + 1] - out_first[to]) * unit));
    if (!via || via[from] < 0)
      MOECCL_CHECK(moeccl_sched_add(s, MOECCL_OP_RECV, from, 0, 0, dbuf,
                                    dbase + in_first[from] * unit,
                                    (in_first[from + 1] - in_first[from]) * unit));
  }
  return moecclSuccess;
}

static moecclResult_t exchange(const moeccl_moe_layout_t* l, moeccl_sched_t* s,
                               const size_t* out_first, uint32_t sbuf, uint64_t sbase,
                               const size_t* in_first, uint32_t dbuf, uint64_t dbase,
                               uint64_t unit) {
  return exchange_via(l, s, out_first, sbuf, sbase, in_first, dbuf, dbase, unit, NULL);
}

/* ---- the hierarchical path's hops (moe_algos.h) ---------------------------- */

size_t moeccl_moe_area_rows(const moeccl_moe_layout_t* l) {
  size_t rows = l->P + l->Q;
  if (l->hier_ok) rows += l->F + l->relay_first[l->nranks] + l->rin_first[l->nranks];
  return rows;
}

/* Sender: relay rows from the tokens into dbuf at dbase (by relay row). */
static moecclResult_t pack_relay(const moeccl_moe_layout_t* l, moeccl_sched_t* s, uint64_t rb,
                                 uint32_t dbuf, uint64_t dbase) {
  runs_t r = {s, MOECCL_BUF_SEND, dbuf, 0, dbase, rb, 0, 0, 0};
  for (size_t i = 0; i < l->relay_first[l->nranks]; i++)
    MOECCL_CHECK(runs_add(&r, i, l->relay_token[i]));
  return runs_flush(&r);
}

/* ---- the pipelined hierarchical path's chunks ------------------------------ *
 * Chunk c of C holds, of every rank's tokens, those with moeccl_moe_chunk_of
 * c; each rank on a row's way finds the chunk's part of its lists from the
 * tokens: the sender from its relay rows' tokens, the forwarder from the
 * relay rows' (rin_token) and the receiver from its receive pairs' senders'
 * (src_token), each list being ascending in token.  With one chunk nothing
 * is read: a chunk is the whole list. */
typedef struct {
  const moeccl_moe_layout_t* l;
  int C, c; /* chunks, this one */
} chunk_t;

/* The first j of [lo, hi) whose token (tok[idx[j]], or tok[j] without idx)
 * of a rank with T tokens lies in chunk c or later. */
static size_t cut(const chunk_t* k, int c, const uint32_t* tok, const uint32_t* idx, size_t lo,
                  size_t hi, uint64_t T) {
  if (c <= 0) return lo;
  if (c >= k->C) return hi;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    uint32_t t = tok[idx ? idx[mid] : mid];
    if (moeccl_moe_chunk_of(t, T, k->C) < c) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

/* The chunk's part [*a, *b) of the relay rows this rank sends to forwarder f. */
static void relay_part(const chunk_t* k, int f, size_t* a, size_t* b) {
  const moeccl_moe_layout_t* l = k->l;
  size_t lo = l->relay_first[f], hi = l->relay_first[f + 1];
  *a = cut(k, k->c, l->relay_token, NULL, lo, hi, l->T);
  *b = cut(k, k->c + 1, l->relay_token, NULL, lo, hi, l->T);
}

/* ... of the relay rows this rank forwards for source src. */
static void rin_part(const chunk_t* k, int src, size_t* a, size_t* b) {
  const moeccl_moe_layout_t* l = k->l;
  size_t lo = l->rin_first[src], hi = l->rin_first[src + 1];
  uint64_t T = k->C > 1 ? l->peer_T[src] : 0;
  *a = cut(k, k->c, l->rin_token, NULL, lo, hi, T);
  *b = cut(k, k->c + 1, l->rin_token, NULL, lo, hi, T);
}

/* ... of forward list b (source src), by forwarded row. */
static void fw_part(const chunk_t* k, int src, size_t b, size_t* x, size_t* y) {
  const moeccl_moe_layout_t* l = k->l;
  size_t lo = l->fw_first[b], hi = l->fw_first[b + 1];
  uint64_t T = k->C > 1 ? l->peer_T[src] : 0;
  *x = cut(k, k->c, l->rin_token, l->fw_rows, lo, hi, T);
  *y = cut(k, k->c + 1, l->rin_token, l->fw_rows, lo, hi, T);
}

/* ... of this rank's receive pairs from src. */
static void recv_part(const chunk_t* k, int src, size_t* a, size_t* b) {
  const moeccl_moe_layout_t* l = k->l;
  size_t lo = l->recv_first[src], hi = l->recv_first[src + 1];
  uint64_t T = k->C > 1 ? l->peer_T[src] : 0;
  *a = cut(k, k->c, l->src_token, NULL, lo, hi, T);
  *b = cut(k, k->c + 1, l->src_token, NULL, lo, hi, T);
}

/* The chunk of the forwarder's sum whose terms start at fsum[j]. */
static int fsum_chunk(const chunk_t* k, size_t j) {
  const moeccl_moe_layout_t* l = k->l;
  uint32_t i = l->fsum[j].dst;
  int lo = 0, hi = l->nranks - 1; /* the source: the last s with rin_first[s] <= i */
  while (lo < hi) {
    int mid = lo + (hi - lo + 1) / 2;
    if (l->rin_first[mid] <= i) lo = mid;
    else hi = mid - 1;
  }
  return moeccl_moe_chunk_of(l->rin_token[i], l->peer_T[lo], k->C);
}

/* The first term of fsum (ordered by chunk, moe_algos.h) in chunk c or later. */
static size_t fsum_cut(const chunk_t* k, int c) {
  size_t lo = 0, hi = k->l->n_fsum;
  if (c <= 0) return lo;
  if (c >= k->C) return hi;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (fsum_chunk(k, mid) < c) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

/* Between nodes, the chunk's rows: relay rows to the forwarders (from sbuf
 * at sbase, by relay row), and the relay rows this rank forwards in (into
 * dbuf at dbase, by rin row); back, the forwarders' sums (by rin row) to
 * their sources (by relay row). */
static moecclResult_t relay_exchange(const chunk_t* k, moeccl_sched_t* s, uint32_t sbuf,
                                     uint64_t sbase, uint32_t dbuf, uint64_t dbase, uint64_t rb,
                                     int back) {
  const moeccl_moe_layout_t* l = k->l;
  for (int j = 1; j < l->nranks; j++) {
    int to = (l->rank + j) % l->nranks, from = (l->rank - j + l->nranks) % l->nranks;
    size_t o0, o1, i0, i1;
    if (back) rin_part(k, to, &o0, &o1), relay_part(k, from, &i0, &i1);
    else relay_part(k, to, &o0, &o1), rin_part(k, from, &i0, &i1);
    if (o1 > o0)
      MOECCL_CHECK(
          moeccl_sched_add(s, MOECCL_OP_SEND, to, sbuf, sbase + o0 * rb, 0, 0, (o1 - o0) * rb));
    if (i1 > i0)
      MOECCL_CHECK(
          moeccl_sched_add(s, MOECCL_OP_RECV, from, 0, 0, dbuf, dbase + i0 * rb, (i1 - i0) * rb));
  }
  return moecclSuccess;
}

/* Forwarder, dispatch, the chunk's rows: each forwarded row from the relay
 * rows (rin, in ibuf at ibase) to its forward list's place in fout (obuf at
 * obase), or, for this rank's own list, straight to its receive pair (rbuf
 * at rbase). */
static moecclResult_t forward_pack(const chunk_t* k, moeccl_sched_t* s, uint64_t rb, uint32_t ibuf,
                                   uint64_t ibase, uint32_t obuf, uint64_t obase, uint32_t rbuf,
                                   uint64_t rbase) {
  const moeccl_moe_layout_t* l = k->l;
  runs_t out = {s, ibuf, obuf, ibase, obase, rb, 0, 0, 0};
  runs_t own = {s, ibuf, rbuf, ibase, rbase, rb, 0, 0, 0};
  for (int src = 0; src < l->nranks; src++)
    for (int lr = 0; lr < l->nl; lr++) {
      size_t b = (size_t)src * (size_t)l->nl + (size_t)lr, x, y;
      fw_part(k, src, b, &x, &y);
      for (size_t f = x; f < y; f++) {
        if (lr == l->me_local)
          MOECCL_CHECK(runs_add(&own, l->recv_first[src] + (f - l->fw_first[b]), l->fw_rows[f]));
        else MOECCL_CHECK(runs_add(&out, f, l->fw_rows[f]));
      }
    }
  MOECCL_CHECK(runs_flush(&out));
  return runs_flush(&own);
}

/* On the node, the chunk's rows: the forwarder's lists (fbuf at fbase, by
 * forwarded row) to the node's ranks; each rank's rows from a forwarder,
 * one message per source, into its receive pairs (rbuf at rbase).  back:
 * the reverse (the partials of the receive pairs to the forwarder, its
 * lists in). */
static moecclResult_t forward_exchange(const chunk_t* k, moeccl_sched_t* s, uint64_t rb,
                                       uint32_t fbuf, uint64_t fbase, uint32_t rbuf, uint64_t rbase,
                                       int back) {
  const moeccl_moe_layout_t* l = k->l;
  for (int src = 0; src < l->nranks; src++) {
    for (int lr = 0; lr < l->nl; lr++) {
      size_t b = (size_t)src * (size_t)l->nl + (size_t)lr, x, y;
      if (lr == l->me_local || l->fw_first[b + 1] == l->fw_first[b]) continue;
      fw_part(k, src, b, &x, &y);
      if (y == x) continue;
      MOECCL_CHECK(moeccl_sched_add(s, back ? MOECCL_OP_RECV : MOECCL_OP_SEND, l->node_rank[lr],
                                    back ? 0 : fbuf, back ? 0 : fbase + x * rb, back ? fbuf : 0,
                                    back ? fbase + x * rb : 0, (y - x) * rb));
    }
    int f = l->via[src];
    size_t a, e;
    if (f < 0 || f == l->rank || l->recv_first[src + 1] == l->recv_first[src]) continue;
    recv_part(k, src, &a, &e);
    if (e == a) continue;
    MOECCL_CHECK(moeccl_sched_add(s, back ? MOECCL_OP_SEND : MOECCL_OP_RECV, f, back ? rbuf : 0,
                                  back ? rbase + a * rb : 0, back ? 0 : rbuf,
                                  back ? 0 : rbase + a * rb, (e - a) * rb));
  }
  return moecclSuccess;
}

/* The chunks a call's hierarchical path runs in (1 on the flat path). */
static int call_chunks(const moeccl_moe_call_t* c) {
  if (!c->hier || c->chunks <= 1) return 1;
  return c->chunks < MOECCL_MOE_MAX_CHUNKS ? c->chunks : MOECCL_MOE_MAX_CHUNKS;
}

/* The memory kind of the call's buffers (its RECV buffer's): the weights
 * and the other buffers a call adds are of it. */
static moeccl_mem_t call_mem(const moeccl_sched_t* s) {
  return s->mems && s->nbufs > MOECCL_BUF_RECV ? s->mems[MOECCL_BUF_RECV] : MOECCL_MEM_HOST_INIT;
}

/* A ROWS op running a new program of the call. */
static moecclResult_t rows_op(const moeccl_moe_call_t* c, moeccl_sched_t* s, int* nprogs,
                              moeccl_rows_t prog, uint32_t sbuf, uint64_t sbase, uint32_t dbuf,
                              uint64_t dbase, uint64_t bytes) {
  if (prog.nterms == 0 || bytes == 0) return moecclSuccess;
  if ((size_t)*nprogs == c->nprogs_cap) return moecclInternalError;
  c->progs[*nprogs] = prog;
  s->rows = c->progs;
  return moeccl_sched_add(s, MOECCL_OP_ROWS, (*nprogs)++, sbuf, sbase, dbuf, dbase, bytes);
}

static moeccl_rows_t program(moeccl_rows_mode_t mode, moecclDataType_t type, size_t elems,
                             uint32_t aux_buf, uint64_t aux_off, const moeccl_row_term_t* terms,
                             size_t n) {
  return (moeccl_rows_t){mode, type, elems, aux_buf, aux_off, terms, n};
}

static uint64_t round64(uint64_t x) { return (x + 63) & ~(uint64_t)63; }

/* A SEND or RECV with MOECCL_OPF_ROWS running the new program prog, which
 * writes at (out_buf, out_off): src (SEND) or dst (RECV) at (buf, off). */
static moecclResult_t prog_op(const moeccl_moe_call_t* c, moeccl_sched_t* s, int* nprogs,
                              moeccl_rows_t prog, uint32_t out_buf, uint64_t out_off,
                              moeccl_op_type_t type, int peer, uint32_t buf, uint64_t off,
                              uint64_t bytes) {
  if (bytes == 0) return moecclSuccess;
  if ((size_t)*nprogs == c->nprogs_cap) return moecclInternalError;
  prog.out_buf = out_buf, prog.out_off = out_off;
  c->progs[*nprogs] = prog;
  s->rows = c->progs;
  int send = type == MOECCL_OP_SEND;
  MOECCL_CHECK(moeccl_sched_add_flags(s, type, peer, send ? buf : 0, send ? off : 0, send ? 0 : buf,
                                      send ? 0 : off, bytes, MOECCL_OPF_ROWS));
  s->ops[s->nops - 1].prog = (uint16_t)(*nprogs)++;
  return moecclSuccess;
}

/* Expanded rows from terms {x, src row, weight}: copies, or a weighted
 * program when the call has weights. */
static moecclResult_t expand(const moeccl_moe_call_t* c, moeccl_sched_t* s, int* nprogs,
                             const moeccl_row_term_t* t, size_t n, uint32_t sbuf, uint64_t sbase,
                             uint32_t wbuf, uint64_t wbase) {
  uint64_t rb = c->hidden * c->elem_size;
  if (c->weighted) {
    moeccl_rows_t p = program(MOECCL_ROWS_SUM, c->type, c->hidden, wbuf, wbase, t, n);
    return rows_op(c, s, nprogs, p, sbuf, sbase, MOECCL_BUF_RECV, 0, n * rb);
  }
  runs_t r = {s, sbuf, MOECCL_BUF_RECV, sbase, 0, rb, 0, 0, 0};
  for (size_t i = 0; i < n; i++) MOECCL_CHECK(runs_add(&r, t[i].dst, t[i].src));
  return runs_flush(&r);
}

/* The dispatch's row exchange with consuming receives: from each source a
 * RECV whose program copies its rows to their expanded places (RECV
 * buffer), the message landing at dbase in scratch only when the
 * transport cannot run the program out of the sender's memory. */
static moecclResult_t consuming_exchange(const moeccl_moe_call_t* c, moeccl_sched_t* s, int* nprogs,
                                         uint32_t pbuf, uint64_t pack_off, uint64_t dbase) {
  const moeccl_moe_layout_t* l = c->lay;
  uint64_t rb = c->hidden * c->elem_size;
  for (int k = 1; k < l->nranks; k++) {
    int to = (l->rank + k) % l->nranks, from = (l->rank - k + l->nranks) % l->nranks;
    size_t p0 = l->send_first[to], np = l->send_first[to + 1] - p0;
    moeccl_rows_t g = program(MOECCL_ROWS_COPY, c->type, rb, UINT32_MAX, 0, l->gather + p0, np);
    g.span = l->T * rb;
    MOECCL_CHECK(prog_op(c, s, nprogs, g, pbuf, pack_off + p0 * rb, MOECCL_OP_SEND, to,
                         MOECCL_BUF_SEND, 0, np * rb));
    size_t q0 = l->recv_first[from], n = l->recv_first[from + 1] - q0;
    size_t t0 = l->exp_src_first[from], nt = l->exp_src_first[from + 1] - t0;
    moeccl_rows_t e = program(MOECCL_ROWS_COPY, c->type, rb, UINT32_MAX, 0, l->exp_src + t0, nt);
    e.terms_idx = l->exp_src_idx + t0, e.map = l->src_token + q0;
    MOECCL_CHECK(prog_op(c, s, nprogs, e, MOECCL_BUF_RECV, 0, MOECCL_OP_RECV, from,
                         MOECCL_BUF_SCRATCH, dbase + q0 * rb, n * rb));
  }
  return moecclSuccess;
}

/* Dispatch and combine backward: token-side rows to the experts. */
static moecclResult_t to_experts(const moeccl_moe_call_t* c, moeccl_sched_t* s) {
  const moeccl_moe_layout_t* l = c->lay;
  uint64_t rb = c->hidden * c->elem_size, kb = (uint64_t)l->K * sizeof(float);
  int ww = c->weighted, dots = c->gate_grad, nprogs = 0;
  uint64_t w_pack = 0, w_recv = w_pack + (ww ? l->P * kb : 0);
  uint64_t gwp = w_recv + (ww ? l->Q * kb : 0), gw_back = gwp + (dots ? l->Q * kb : 0);
  /* Rows this rank sends (pbuf: the send area when there is one):
   * packed pairs [P], and on the hierarchical path relay rows [Pr] and
   * forwarded rows [F]; then in scratch the receive pairs [Q] and the
   * relay rows in [Nin]. */
  int hier = c->hier;
  const int* via = hier ? l->via : NULL;
  size_t Pr = hier ? l->relay_first[l->nranks] : 0, Nin = hier ? l->rin_first[l->nranks] : 0;
  size_t F = hier ? l->F : 0;
  uint64_t base = round64(gw_back + (dots ? l->P * kb : 0)), pack_off = base;
  uint32_t pbuf = MOECCL_BUF_SCRATCH;
  if (c->send_area) {
    MOECCL_CHECK(moeccl_sched_add_buf(s, c->send_area, &pbuf));
    pack_off = 0;
  }
  uint64_t relay_off = pack_off + l->P * rb, fout_off = relay_off + Pr * rb;
  uint64_t recv_off = c->send_area ? base : fout_off + F * rb, rin_off = recv_off + l->Q * rb;
  s->scratch_bytes = rin_off + Nin * rb;
  uint32_t wbuf = UINT32_MAX, ebuf = UINT32_MAX, gbuf = UINT32_MAX;
  if (ww) MOECCL_CHECK(moeccl_sched_add_buf_mem(s, (void*)c->weights, call_mem(s), &wbuf));
  if (dots) MOECCL_CHECK(moeccl_sched_add_buf_mem(s, (void*)c->expert_out, call_mem(s), &ebuf));
  if (dots) MOECCL_CHECK(moeccl_sched_add_buf_mem(s, c->grad_weights, call_mem(s), &gbuf));
  /* The dispatch's own rows move as gathered messages, consumed as they
   * arrive: the sender's rows picked straight from its mapped token buffer
   * where shared memory allows, else packed by the executor at post time
   * (consuming_exchange).  Otherwise packed here. */
  int consume = c->op == MOECCL_MOE_DISPATCH && !hier && !ww && l->exp_src && l->gather;
  if (!consume) MOECCL_CHECK(pack(l, s, MOECCL_BUF_SEND, rb, pbuf, pack_off, 0, 0, via));
  if (hier) MOECCL_CHECK(pack_relay(l, s, rb, pbuf, relay_off));
  if (ww) MOECCL_CHECK(pack(l, s, wbuf, kb, MOECCL_BUF_SCRATCH, w_pack, 1, w_recv, NULL));
  MOECCL_CHECK(moeccl_sched_end_step(s));
  /* Then, hierarchical in C chunks, step j holds chunk j's relay rows
   * between nodes, the forwarders' copies of chunk j-1 and their messages
   * on the node of chunk j-2 (the executor progresses a step's messages
   * while it copies): C + 2 steps, the first also the rows on the node and
   * the weights. */
  chunk_t k = {l, call_chunks(c), 0};
  for (int j = 0; j < (hier ? k.C + 2 : 1); j++) {
    if (j == 0 && consume)
      MOECCL_CHECK(consuming_exchange(c, s, &nprogs, pbuf, pack_off, recv_off));
    else if (j == 0)
      MOECCL_CHECK(exchange_via(l, s, l->send_first, pbuf, pack_off, l->recv_first,
                                MOECCL_BUF_SCRATCH, recv_off, rb, via));
    if (hier && j < k.C) {
      k.c = j;
      MOECCL_CHECK(relay_exchange(&k, s, pbuf, relay_off, MOECCL_BUF_SCRATCH, rin_off, rb, 0));
    }
    if (j == 0 && ww)
      MOECCL_CHECK(exchange(l, s, l->send_first, MOECCL_BUF_SCRATCH, w_pack, l->recv_first,
                            MOECCL_BUF_SCRATCH, w_recv, kb));
    if (j == 0) {
      MOECCL_CHECK(expand(c, s, &nprogs, l->exp_self, l->n_exp_self, MOECCL_BUF_SEND, 0,
                          MOECCL_BUF_SCRATCH, w_recv));
      moeccl_rows_t dot_self = program(MOECCL_ROWS_DOT, c->type, c->hidden, ebuf, 0,
                                       l->dot + l->dot_self0, l->dot_self1 - l->dot_self0);
      if (dots)
        MOECCL_CHECK(rows_op(c, s, &nprogs, dot_self, MOECCL_BUF_SEND, 0, MOECCL_BUF_SCRATCH, gwp,
                             dot_self.nterms * sizeof(float)));
    }
    if (hier && j >= 1 && j - 1 < k.C) { /* the forwarders hand the relay rows on */
      k.c = j - 1;
      MOECCL_CHECK(forward_pack(&k, s, rb, MOECCL_BUF_SCRATCH, rin_off, pbuf, fout_off,
                                MOECCL_BUF_SCRATCH, recv_off));
    }
    if (hier && j >= 2) {
      k.c = j - 2;
      MOECCL_CHECK(forward_exchange(&k, s, rb, pbuf, fout_off, MOECCL_BUF_SCRATCH, recv_off, 0));
    }
    MOECCL_CHECK(moeccl_sched_end_step(s));
  }
  if (!consume)
    MOECCL_CHECK(expand(c, s, &nprogs, l->exp_remote, l->n_exp_remote, MOECCL_BUF_SCRATCH, recv_off,
                        MOECCL_BUF_SCRATCH, w_recv));
  if (!dots) return moecclSuccess;
  size_t nd = l->Q * (size_t)l->K;
  moeccl_rows_t before =
      program(MOECCL_ROWS_DOT, c->type, c->hidden, ebuf, 0, l->dot, l->dot_self0);
  moeccl_rows_t after = program(MOECCL_ROWS_DOT, c->type, c->hidden, ebuf, 0, l->dot + l->dot_self1,
                                nd - l->dot_self1);
  MOECCL_CHECK(rows_op(c, s, &nprogs, before, MOECCL_BUF_SCRATCH, recv_off, MOECCL_BUF_SCRATCH, gwp,
                       before.nterms * sizeof(float)));
  MOECCL_CHECK(rows_op(c, s, &nprogs, after, MOECCL_BUF_SCRATCH, recv_off, MOECCL_BUF_SCRATCH, gwp,
                       after.nterms * sizeof(float)));
  MOECCL_CHECK(moeccl_sched_end_step(s));
  MOECCL_CHECK(exchange(l, s, l->recv_first, MOECCL_BUF_SCRATCH, gwp, l->send_first,
                        MOECCL_BUF_SCRATCH, gw_back, kb));
  MOECCL_CHECK(moeccl_sched_end_step(s));
  /* Receive pair q's block is gwp + q, returned pair p's gwp + Q + p. */
  moeccl_rows_t sum =
      program(MOECCL_ROWS_SUM, moecclFloat32, (size_t)l->K, UINT32_MAX, 0, l->own, l->n_own);
  return rows_op(c, s, &nprogs, sum, MOECCL_BUF_SCRATCH, gwp, gbuf, 0, l->T * kb);
}

/* Combine (weighted or not) and dispatch backward: expert rows back. */
static moecclResult_t to_tokens(const moeccl_moe_call_t* c, moeccl_sched_t* s) {
  const moeccl_moe_layout_t* l = c->lay;
  uint64_t rb = c->hidden * c->elem_size, kb = (uint64_t)l->K * sizeof(float);
  int ww = c->weighted, nprogs = 0;
  uint64_t w_pack = 0, w_recv = w_pack + (ww ? l->P * kb : 0);
  /* One area (the send area when there is one): the partials [Q], and on
   * the hierarchical path the node's partials a forwarder receives [F];
   * the returned rows [P]; then, hierarchical, the relay rows' sums coming
   * back [Pr] and those a forwarder sends [Nin]. */
  int hier = c->hier;
  size_t Pr = hier ? l->relay_first[l->nranks] : 0, Nin = hier ? l->rin_first[l->nranks] : 0;
  size_t F = hier ? l->F : 0;
  uint64_t part_off = round64(w_recv + (ww ? l->Q * kb : 0));
  s->scratch_bytes = part_off + (l->Q + F + l->P + Pr + Nin) * rb;
  uint32_t pbuf = MOECCL_BUF_SCRATCH;
  if (c->send_area) {
    MOECCL_CHECK(moeccl_sched_add_buf(s, c->send_area, &pbuf));
    s->scratch_bytes = part_off, part_off = 0;
  }
  uint64_t fin_off = part_off + l->Q * rb, back_off = fin_off + F * rb;
  uint64_t rback_off = back_off + l->P * rb, rsum_off = rback_off + Pr * rb;
  uint32_t wbuf = UINT32_MAX;
  if (ww) {
    MOECCL_CHECK(moeccl_sched_add_buf_mem(s, (void*)c->weights, call_mem(s), &wbuf));
    MOECCL_CHECK(pack(l, s, wbuf, kb, MOECCL_BUF_SCRATCH, w_pack, 1, w_recv, NULL));
    MOECCL_CHECK(moeccl_sched_end_step(s));
    MOECCL_CHECK(exchange(l, s, l->send_first, MOECCL_BUF_SCRATCH, w_pack, l->recv_first,
                          MOECCL_BUF_SCRATCH, w_recv, kb));
    MOECCL_CHECK(moeccl_sched_end_step(s));
  }
  uint32_t wb = ww ? MOECCL_BUF_SCRATCH : UINT32_MAX;
  if (!hier && c->type == moecclFloat32 && l->own_src) {
    /* The peers' partials (not this rank's own: its tokens sum their
     * expert rows directly), then one step exchanges them with every peer,
     * each peer's rows adding into the tokens as they arrive, in the
     * step's op order (rank-1, rank-2, ...: the same sums every run). */
    size_t s0 = l->part_self0, s1 = l->part_self1;
    moeccl_rows_t before = program(MOECCL_ROWS_SUM, c->type, c->hidden, wb, w_recv, l->part, s0);
    moeccl_rows_t after =
        program(MOECCL_ROWS_SUM, c->type, c->hidden, wb, w_recv, l->part + s1, l->R - s1);
    uint64_t q0 = l->recv_first[l->rank], q1 = l->recv_first[l->rank + 1];
    MOECCL_CHECK(rows_op(c, s, &nprogs, before, MOECCL_BUF_SEND, 0, pbuf, part_off, q0 * rb));
    MOECCL_CHECK(
        rows_op(c, s, &nprogs, after, MOECCL_BUF_SEND, 0, pbuf, part_off, (l->Q - q1) * rb));
    moeccl_rows_t self =
        program(MOECCL_ROWS_SUM, c->type, c->hidden, wb, w_recv, l->own_self, l->n_own_self);
    MOECCL_CHECK(rows_op(c, s, &nprogs, self, MOECCL_BUF_SEND, 0, MOECCL_BUF_RECV, 0, l->T * rb));
    MOECCL_CHECK(moeccl_sched_end_step(s));
    for (int k = 1; k < l->nranks; k++) {
      int to = (l->rank + k) % l->nranks, from = (l->rank - k + l->nranks) % l->nranks;
      MOECCL_CHECK(moeccl_sched_add(s, MOECCL_OP_SEND, to, pbuf, part_off + l->recv_first[to] * rb,
                                    0, 0, (l->recv_first[to + 1] - l->recv_first[to]) * rb));
      size_t p0 = l->send_first[from], n = l->send_first[from + 1] - p0;
      moeccl_rows_t add =
          program(MOECCL_ROWS_ADD, c->type, c->hidden, UINT32_MAX, 0, l->own_src + p0, n);
      MOECCL_CHECK(prog_op(c, s, &nprogs, add, MOECCL_BUF_RECV, 0, MOECCL_OP_RECV, from, pbuf,
                           back_off + p0 * rb, n * rb));
    }
    return moeccl_sched_end_step(s);
  }
  moeccl_rows_t part = program(MOECCL_ROWS_SUM, c->type, c->hidden, wb, w_recv, l->part, l->R);
  MOECCL_CHECK(rows_op(c, s, &nprogs, part, MOECCL_BUF_SEND, 0, pbuf, part_off, l->Q * rb));
  MOECCL_CHECK(moeccl_sched_end_step(s));
  if (!hier) {
    MOECCL_CHECK(exchange(l, s, l->recv_first, pbuf, part_off, l->send_first, pbuf, back_off, rb));
    MOECCL_CHECK(moeccl_sched_end_step(s));
    /* Receive pair q's partial is part_off + q, returned pair p's + Q + p. */
    moeccl_rows_t own =
        program(MOECCL_ROWS_SUM, c->type, c->hidden, UINT32_MAX, 0, l->own, l->n_own);
    return rows_op(c, s, &nprogs, own, pbuf, part_off, MOECCL_BUF_RECV, 0, l->T * rb);
  }
  /* Partials for this node's sources go direct, the others to their
   * forwarder, which sums them per relay row and returns one row per
   * (token, node). */
  /* In C chunks, step j holds chunk j's partials on the node, the
   * forwarders' sums of chunk j-1 and chunk j-2's sums between nodes. */
  chunk_t k = {l, call_chunks(c), 0};
  for (int j = 0; j < k.C + 2; j++) {
    if (j == 0)
      MOECCL_CHECK(exchange_via(l, s, l->recv_first, pbuf, part_off, l->send_first, pbuf, back_off,
                                rb, l->via));
    if (j < k.C) {
      k.c = j;
      MOECCL_CHECK(forward_exchange(&k, s, rb, pbuf, fin_off, pbuf, part_off, 1));
    }
    if (j >= 1 && j - 1 < k.C) {
      size_t t0 = fsum_cut(&k, j - 1), t1 = fsum_cut(&k, j);
      moeccl_rows_t fsum =
          program(MOECCL_ROWS_SUM, c->type, c->hidden, UINT32_MAX, 0, l->fsum + t0, t1 - t0);
      MOECCL_CHECK(rows_op(c, s, &nprogs, fsum, pbuf, part_off, pbuf, rsum_off, Nin * rb));
    }
    if (j >= 2) {
      k.c = j - 2;
      MOECCL_CHECK(relay_exchange(&k, s, pbuf, rsum_off, pbuf, rback_off, rb, 1));
    }
    MOECCL_CHECK(moeccl_sched_end_step(s));
  }
  moeccl_rows_t own =
      program(MOECCL_ROWS_SUM, c->type, c->hidden, UINT32_MAX, 0, l->own_h, l->n_own_h);
  return rows_op(c, s, &nprogs, own, pbuf, part_off, MOECCL_BUF_RECV, 0, l->T * rb);
}

moecclResult_t moeccl_moe_schedule(const moeccl_moe_call_t* c, moeccl_sched_t* s) {
  if (c->op == MOECCL_MOE_COMBINE) return to_tokens(c, s);
  return to_experts(c, s);
}
