/*
 * test_moe_sched.c - the MoE generators (src/algos/moe_dispatch.c) and row
 * kernels (src/kernels/rows.c) without processes.
 *
 *   schedule  a hand-made layout of rank 1 of 3: the dispatch packs with
 *             one COPY per run of consecutive tokens, sends one message per
 *             peer with rows and none to a peer without (nor receives), and
 *             expands with one COPY per run; the combine sends the weights
 *             and the partial rows once per peer and names its programs
 *   combine with several peers  rank 1 of 4 exchanging with all three
 *             peers in one step, both combine paths: every op of every step
 *             (type, peer, buffers, offsets, bytes) and the programs named
 *   kernels   SUM groups accumulate in float32 and round once (bfloat16),
 *             a group of only empty terms writes zeros; DOT, and DOT of an
 *             empty term
 *   pick      the tuner's path and chunks (moeccl_pricing_moe_pick) for one
 *             dispatch's rows of 4 KiB on 4 nodes of 2 ranks: node dedup in
 *             chunks on slow links with a core per rank (priced within the
 *             10% the pipeline is given), in 1 chunk with rows of 16 B
 *             (every chunk's latencies cost more than that), in chunks
 *             priced cheaper than 1 when the 8 ranks share 2 cores (their
 *             copies then take 4x longer and add to the transfer in 1
 *             chunk), flat where dedup saves no
 *             row across, on slow links or fast uniform ones;
 *             MOECCL_MOE_CHUNKS and MOECCL_MOE_ALGO obeyed
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "algos/moe_algos.h"
#include "kernels/reduce.h"
#include "kernels/rows.h"
#include "tune/pricing.h"
#include "unit_check.h"

#define N MOECCL_ROW_NONE

/* Rank 1 of 3, K = 2, 5 tokens.  Sends tokens 0, 1, 3 to rank 0, token 2
 * to itself, nothing to rank 2; receives 2 pairs from rank 0, its own one,
 * none from rank 2.  Local experts 0 and 1: q0 slots -> 0, 1; q1 slot 0 ->
 * 0; q2 (token 2) slot 1 -> 1.  Rows: x0 = q0j0, x1 = q1j0 (expert 0),
 * x2 = q0j1, x3 = q2j1 (expert 1). */
static const size_t send_first[] = {0, 3, 4, 4}, recv_first[] = {0, 2, 3, 3};
static const uint32_t pair_token[] = {0, 1, 3, 2};
static const moeccl_row_term_t exp_remote[] = {{0, 0, 0}, {1, 1, 2}, {2, 0, 1}};
static const moeccl_row_term_t exp_self[] = {{3, 2, 5}};
static const moeccl_row_term_t part[] = {{0, 0, 0}, {0, 2, 1}, {1, 1, 2}, {2, 3, 5}};
static const moeccl_row_term_t own[] = {{0, 3, N}, {1, 4, N}, {2, 2, N}, {3, 5, N}, {4, N, N}};
static const moeccl_row_term_t dot[] = {{0, 0, 0}, {1, 0, 2}, {2, 1, 1},
                                        {3, N, N}, {4, N, N}, {5, 2, 3}};

static moeccl_moe_layout_t layout(void) {
  return (moeccl_moe_layout_t){.rank = 1,
                               .nranks = 3,
                               .K = 2,
                               .T = 5,
                               .P = 4,
                               .Q = 3,
                               .R = 4,
                               .send_first = send_first,
                               .recv_first = recv_first,
                               .pair_token = pair_token,
                               .exp_remote = exp_remote,
                               .n_exp_remote = 3,
                               .exp_self = exp_self,
                               .n_exp_self = 1,
                               .part = part,
                               .own = own,
                               .n_own = 5,
                               .dot = dot,
                               .dot_self0 = 4,
                               .dot_self1 = 6};
}

static int count(const moeccl_sched_t* s, int step, int type, int peer) {
  int begin = step ? s->step_end[step - 1] : 0, n = 0;
  for (int i = begin; i < s->step_end[step]; i++)
    n += s->ops[i].type == type && (peer < -1 || s->ops[i].peer == peer);
  return n;
}

/* Empties s and gives it the standard buffers, as the planner does. */
static void fresh(moeccl_sched_t* s) {
  uint32_t b;
  moeccl_sched_reset(s);
  for (int i = 0; i < MOECCL_BUF_NSTD; i++) moeccl_sched_add_buf(s, NULL, &b);
}

static void test_schedule(void) {
  moeccl_moe_layout_t l = layout();
  moeccl_rows_t progs[MOECCL_MOE_MAX_PROGS];
  moeccl_moe_call_t c = {.op = MOECCL_MOE_DISPATCH,
                         .lay = &l,
                         .type = moecclFloat32,
                         .hidden = 4,
                         .elem_size = 4,
                         .progs = progs,
                         .nprogs_cap = MOECCL_MOE_MAX_PROGS};
  moeccl_sched_t s = {0};
  fresh(&s);
  CHECK_STDOUT(moeccl_moe_schedule(&c, &s) == moecclSuccess, "dispatch: schedule failed");
  moeccl_sched_end_step(&s);
  CHECK_STDOUT(s.nsteps == 3, "dispatch: %d steps, want 3", s.nsteps);
  CHECK_STDOUT(count(&s, 0, MOECCL_OP_COPY, -2) == 2, "dispatch: pack has %d copies, want 2 runs",
               count(&s, 0, MOECCL_OP_COPY, -2));
  CHECK_STDOUT(s.ops[0].bytes == 2 * 16 && s.ops[0].src_off == 0,
               "dispatch: first run is tokens 0-1");
  CHECK_STDOUT(count(&s, 1, MOECCL_OP_SEND, -2) == 1 && count(&s, 1, MOECCL_OP_SEND, 0) == 1,
               "dispatch: one send, to rank 0 (none to rank 2, none to self)");
  CHECK_STDOUT(count(&s, 1, MOECCL_OP_RECV, -2) == 1 && count(&s, 1, MOECCL_OP_RECV, 0) == 1,
               "dispatch: one receive, from rank 0");
  CHECK_STDOUT(count(&s, 1, MOECCL_OP_COPY, -2) == 1, "dispatch: the own row expands by one copy");
  CHECK_STDOUT(count(&s, 2, MOECCL_OP_COPY, -2) == 2,
               "dispatch: expansion has %d copies, want 2 runs", count(&s, 2, MOECCL_OP_COPY, -2));
  for (int i = 0; i < s.nops; i++)
    if (s.ops[i].type == MOECCL_OP_SEND)
      CHECK_STDOUT(s.ops[i].bytes == 3 * 16, "dispatch: 3 rows sent");
    else if (s.ops[i].type == MOECCL_OP_RECV)
      CHECK_STDOUT(s.ops[i].bytes == 2 * 16, "dispatch: 2 rows in");

  fresh(&s);
  c.op = MOECCL_MOE_COMBINE, c.weighted = 1;
  CHECK_STDOUT(moeccl_moe_schedule(&c, &s) == moecclSuccess, "combine: schedule failed");
  moeccl_sched_end_step(&s);
  CHECK_STDOUT(s.nsteps == 5, "combine: %d steps, want 5", s.nsteps);
  CHECK_STDOUT(count(&s, 0, MOECCL_OP_COPY, -2) == 3,
               "combine: weights pack %d copies, want 2 + own", count(&s, 0, MOECCL_OP_COPY, -2));
  CHECK_STDOUT(count(&s, 1, MOECCL_OP_SEND, 0) == 1 && count(&s, 1, MOECCL_OP_RECV, 0) == 1 &&
                   count(&s, 1, MOECCL_OP_SEND, -2) + count(&s, 1, MOECCL_OP_RECV, -2) == 2,
               "combine: one weights message each way, with rank 0");
  CHECK_STDOUT(count(&s, 2, MOECCL_OP_ROWS, -2) == 1 && s.rows == progs,
               "combine: one partial-sum program");
  CHECK_STDOUT(count(&s, 3, MOECCL_OP_SEND, 0) == 1 && count(&s, 3, MOECCL_OP_RECV, 0) == 1 &&
                   count(&s, 3, MOECCL_OP_SEND, -2) + count(&s, 3, MOECCL_OP_RECV, -2) == 2,
               "combine: one partial-row message each way, with rank 0");
  CHECK_STDOUT(count(&s, 4, MOECCL_OP_ROWS, -2) == 1, "combine: one token-side program");

  fresh(&s);
  c.op = MOECCL_MOE_COMBINE_BACKWARD, c.weighted = 1, c.gate_grad = 1;
  CHECK_STDOUT(moeccl_moe_schedule(&c, &s) == moecclSuccess, "combine backward: schedule failed");
  moeccl_sched_end_step(&s);
  CHECK_STDOUT(s.nsteps == 5, "combine backward: %d steps, want 5", s.nsteps);
  int rows = 0;
  for (int i = 0; i < s.nops; i++) rows += s.ops[i].type == MOECCL_OP_ROWS;
  /* self expansion, self dots, remote expansion, remote dots (before the
   * self range only: the one after it is empty), token-side sum */
  CHECK_STDOUT(rows == 5, "combine backward: %d programs, want 5", rows);
  moeccl_sched_free(&s);
}

/* ---- a combine with several peers in one step ------------------------------ */

/* Rank 1 of 4, K = 2, 4 tokens, every peer in both directions.  Send pairs
 * (by destination, then token): tokens 0, 2 to rank 0; token 1 to itself;
 * tokens 0, 3 to rank 2; token 2 to rank 3.  Receive pairs: 2 from rank 0,
 * its own 1, 1 from rank 2, 2 from rank 3.  Local experts 0 and 1, slots
 * (q: j0 j1): q0: 0 -, q1: - 1, q2 (self, token 1): 0 1, q3: 1 -, q4: 0 -,
 * q5: - 1; expert 0's rows x0-x2 = q0 q2 q4, expert 1's x3-x6 = q1 q2 q3
 * q5.  The token-side tables are as src/api/moe_layout.c derives them (own: Q + p for
 * pair p's returned row, 2 for the self pair). */
static const size_t m_send_first[] = {0, 2, 3, 5, 6}, m_recv_first[] = {0, 2, 3, 4, 6};
static const uint32_t m_pair_token[] = {0, 2, 1, 0, 3, 2};
static const moeccl_row_term_t m_part[] = {{0, 0, 0}, {1, 3, 3}, {2, 1, 4}, {2, 4, 5},
                                           {3, 5, 6}, {4, 2, 8}, {5, 6, 11}};
static const moeccl_row_term_t m_own[] = {{0, 6, N}, {0, 9, N},  {1, 2, N},
                                          {2, 7, N}, {2, 11, N}, {3, 10, N}};
static const moeccl_row_term_t m_own_self[] = {{1, 1, 4}, {1, 4, 5}};
static const moeccl_row_term_t m_own_src[] = {{0, 0, 0}, {2, 1, 0}, {N, N, N},
                                              {0, 0, N}, {3, 1, 0}, {2, 0, N}};

static moeccl_moe_layout_t multi_layout(void) {
  return (moeccl_moe_layout_t){.rank = 1,
                               .nranks = 4,
                               .K = 2,
                               .T = 4,
                               .P = 6,
                               .Q = 6,
                               .R = 7,
                               .send_first = m_send_first,
                               .recv_first = m_recv_first,
                               .pair_token = m_pair_token,
                               .part = m_part,
                               .own = m_own,
                               .n_own = 6,
                               .own_self = m_own_self,
                               .n_own_self = 2,
                               .part_self0 = 2,
                               .part_self1 = 4,
                               .own_src = m_own_src};
}

/* One op as the test expects it; for ROWS ops peer is the program. */
typedef struct {
  int type, peer;
  uint32_t src_buf;
  uint64_t src_off;
  uint32_t dst_buf;
  uint64_t dst_off, bytes;
  unsigned flags;
} want_op_t;

static want_op_t want(int type, int peer, uint32_t src_buf, uint64_t src_off, uint32_t dst_buf,
                      uint64_t dst_off, uint64_t bytes, unsigned flags) {
  return (want_op_t){type, peer, src_buf, src_off, dst_buf, dst_off, bytes, flags};
}

/* Step step of s holds exactly the ops w[0..n), in that order. */
static void expect_step(const moeccl_sched_t* s, int step, const want_op_t* w, int n,
                        const char* what) {
  int begin = step ? s->step_end[step - 1] : 0, have = s->step_end[step] - begin;
  CHECK_STDOUT(have == n, "%s: step %d has %d ops, want %d", what, step, have, n);
  for (int i = 0; i < n && i < have; i++) {
    const moeccl_sched_op_t* o = &s->ops[begin + i];
    const want_op_t* e = &w[i];
    int send = e->type == MOECCL_OP_SEND, recv = e->type == MOECCL_OP_RECV;
    CHECK_STDOUT(
        o->type == e->type && o->peer == e->peer && o->bytes == e->bytes && o->flags == e->flags &&
            (recv || (o->src_buf == e->src_buf && o->src_off == e->src_off)) &&
            (send || (o->dst_buf == e->dst_buf && o->dst_off == e->dst_off)),
        "%s: step %d op %d is type %d peer %d src %u+%llu dst %u+%llu %llu bytes flags %u, "
        "want type %d peer %d src %u+%llu dst %u+%llu %llu bytes flags %u",
        what, step, i, o->type, o->peer, o->src_buf, (unsigned long long)o->src_off, o->dst_buf,
        (unsigned long long)o->dst_off, (unsigned long long)o->bytes, o->flags, e->type, e->peer,
        e->src_buf, (unsigned long long)e->src_off, e->dst_buf, (unsigned long long)e->dst_off,
        (unsigned long long)e->bytes, e->flags);
  }
}

static size_t npairs(const size_t* first, int r) { return first[r + 1] - first[r]; }

/* Program p runs terms [t, t + n) in mode, with aux at (aux_buf, aux_off). */
static void expect_prog(const moeccl_rows_t* p, moeccl_rows_mode_t mode, const moeccl_row_term_t* t,
                        size_t n, uint32_t aux_buf, uint64_t aux_off, const char* what) {
  CHECK_STDOUT(
      p->mode == mode && p->type == moecclFloat32 && p->elems == 4 && p->terms == t &&
          p->nterms == n && p->aux_buf == aux_buf &&
          (aux_buf == UINT32_MAX || p->aux_off == aux_off),
      "%s: mode %d, %zu terms at %p, aux %u+%llu; want mode %d, %zu terms at %p, aux %u+%llu", what,
      (int)p->mode, p->nterms, (const void*)p->terms, p->aux_buf, (unsigned long long)p->aux_off,
      (int)mode, n, (const void*)t, aux_buf, (unsigned long long)aux_off);
}

/* The partial rows go back to the three sources in one step, each to the
 * pairs it sent: to rank 1+k, from rank 1-k (k = 1, 2, 3), SEND before
 * RECV.  Both combine paths: the unweighted bfloat16 combine (partials,
 * exchange, token-side sum) and the weighted float32 one whose receives
 * add into the tokens as they arrive.  Every op of every step is checked:
 * buffers, offsets from the areas moe_dispatch.c names (weights by pair,
 * K floats each; the partials from part_off by receive pair; the returned
 * rows after them by send pair) and bytes from the pair counts. */
static void test_combine_multi(void) {
  static const int to[3] = {2, 3, 0}, from[3] = {0, 3, 2};
  moeccl_moe_layout_t l = multi_layout();
  moeccl_rows_t progs[MOECCL_MOE_MAX_PROGS + 8];
  moeccl_moe_call_t c = {.op = MOECCL_MOE_COMBINE,
                         .lay = &l,
                         .type = moecclBfloat16,
                         .hidden = 4,
                         .elem_size = 2,
                         .progs = progs,
                         .nprogs_cap = MOECCL_MOE_MAX_PROGS + 8};
  const uint32_t S = MOECCL_BUF_SCRATCH;
  moeccl_sched_t s = {0};
  want_op_t w[8];

  /* Unweighted bfloat16: rows of 8 bytes, partials at 0, returned rows at Q. */
  uint64_t rb = 8, back = l.Q * rb;
  fresh(&s);
  CHECK_STDOUT(moeccl_moe_schedule(&c, &s) == moecclSuccess, "multi combine: schedule failed");
  moeccl_sched_end_step(&s);
  CHECK_STDOUT(s.nsteps == 3 && s.scratch_bytes == (l.Q + l.P) * rb,
               "multi combine: %d steps, %zu scratch bytes, want 3 and %llu", s.nsteps,
               s.scratch_bytes, (unsigned long long)((l.Q + l.P) * rb));
  w[0] = want(MOECCL_OP_ROWS, 0, MOECCL_BUF_SEND, 0, S, 0, l.Q * rb, 0);
  expect_step(&s, 0, w, 1, "multi combine partials");
  uint64_t sent = 0, got = 0;
  for (int k = 0; k < 3; k++) {
    w[2 * k] = want(MOECCL_OP_SEND, to[k], S, m_recv_first[to[k]] * rb, 0, 0,
                    npairs(m_recv_first, to[k]) * rb, 0);
    w[2 * k + 1] = want(MOECCL_OP_RECV, from[k], 0, 0, S, back + m_send_first[from[k]] * rb,
                        npairs(m_send_first, from[k]) * rb, 0);
    sent += w[2 * k].bytes, got += w[2 * k + 1].bytes;
  }
  CHECK_STDOUT(
      sent == (l.Q - 1) * rb && got == (l.P - 1) * rb,
      "multi combine: the test's messages carry %llu and %llu bytes, not the rows of the Q - 1 "
      "and P - 1 pairs with the peers",
      (unsigned long long)sent, (unsigned long long)got);
  expect_step(&s, 1, w, 6, "multi combine exchange");
  w[0] = want(MOECCL_OP_ROWS, 1, S, 0, MOECCL_BUF_RECV, 0, l.T * rb, 0);
  expect_step(&s, 2, w, 1, "multi combine token sums");
  /* the programs: type is bfloat16 here */
  CHECK_STDOUT(progs[0].mode == MOECCL_ROWS_SUM && progs[0].terms == m_part &&
                   progs[0].nterms == 7 && progs[0].aux_buf == UINT32_MAX &&
                   progs[1].mode == MOECCL_ROWS_SUM && progs[1].terms == m_own &&
                   progs[1].nterms == 6 && s.rows == progs,
               "multi combine: the partial sums over part[0, 7), the token sums over own[0, 6)");

  /* Weighted float32 with own_src: rows of 16 bytes; weights (K = 2
   * floats, 8 bytes a pair) packed at 0 by send pair, received at 6 * 8 by
   * receive pair; partials at round64(48 + 6 * 8) = 128, returned rows at
   * 128 + 6 * 16. */
  rb = 16;
  const uint64_t kb = 8, w_recv = l.P * kb, part = 128;
  back = part + l.Q * rb;
  const uint32_t W = MOECCL_BUF_NSTD; /* the weights, the first buffer the call adds */
  float weights[4 * 2] = {0};
  c.type = moecclFloat32, c.elem_size = 4, c.weighted = 1, c.weights = weights;
  fresh(&s);
  CHECK_STDOUT(moeccl_moe_schedule(&c, &s) == moecclSuccess, "multi combine f32: schedule failed");
  moeccl_sched_end_step(&s);
  CHECK_STDOUT(s.nsteps == 4 && s.scratch_bytes == part + (l.Q + l.P) * rb,
               "multi combine f32: %d steps, %zu scratch bytes, want 4 and %llu", s.nsteps,
               s.scratch_bytes, (unsigned long long)(part + (l.Q + l.P) * rb));
  /* step 0: each pair's K weights from its token's; no two pairs of a peer
   * have consecutive tokens, so one COPY each; the self pair's go straight
   * to its receive pair (2) */
  for (int p = 0; p < 6; p++)
    w[p] = want(MOECCL_OP_COPY, -1, W, m_pair_token[p] * kb, S, p == 2 ? w_recv + 2 * kb : p * kb,
                kb, 0);
  expect_step(&s, 0, w, 6, "multi combine f32 weights pack");
  for (int k = 0; k < 3; k++) { /* weights go the other way: to the experts */
    w[2 * k] = want(MOECCL_OP_SEND, to[k], S, m_send_first[to[k]] * kb, 0, 0,
                    npairs(m_send_first, to[k]) * kb, 0);
    w[2 * k + 1] = want(MOECCL_OP_RECV, from[k], 0, 0, S, w_recv + m_recv_first[from[k]] * kb,
                        npairs(m_recv_first, from[k]) * kb, 0);
  }
  expect_step(&s, 1, w, 6, "multi combine f32 weights exchange");
  /* step 2: the partials of the receive pairs before (q0-q1: part[0, 2))
   * and after (q3-q5: part[4, 7)) the self pair, and the own tokens' rows
   * straight from the self pair's expert rows */
  w[0] = want(MOECCL_OP_ROWS, 0, MOECCL_BUF_SEND, 0, S, part, 2 * rb, 0);
  w[1] = want(MOECCL_OP_ROWS, 1, MOECCL_BUF_SEND, 0, S, part, 3 * rb, 0);
  w[2] = want(MOECCL_OP_ROWS, 2, MOECCL_BUF_SEND, 0, MOECCL_BUF_RECV, 0, l.T * rb, 0);
  expect_step(&s, 2, w, 3, "multi combine f32 partials");
  expect_prog(&progs[0], MOECCL_ROWS_SUM, m_part, 2, S, w_recv, "multi combine f32 before");
  expect_prog(&progs[1], MOECCL_ROWS_SUM, m_part + 4, 3, S, w_recv, "multi combine f32 after");
  expect_prog(&progs[2], MOECCL_ROWS_SUM, m_own_self, 2, S, w_recv, "multi combine f32 self");
  /* step 3: all three peers at once, each RECV adding its rows into the
   * tokens as they arrive (own_src from the source's first send pair) */
  for (int k = 0; k < 3; k++) {
    w[2 * k] = want(MOECCL_OP_SEND, to[k], S, part + m_recv_first[to[k]] * rb, 0, 0,
                    npairs(m_recv_first, to[k]) * rb, 0);
    w[2 * k + 1] = want(MOECCL_OP_RECV, from[k], 0, 0, S, back + m_send_first[from[k]] * rb,
                        npairs(m_send_first, from[k]) * rb, MOECCL_OPF_ROWS);
  }
  expect_step(&s, 3, w, 6, "multi combine f32 exchange");
  for (int k = 0; k < 3 && s.nsteps == 4 && s.step_end[3] - s.step_end[2] == 6; k++) {
    const moeccl_sched_op_t* o = &s.ops[s.step_end[2] + 2 * k + 1];
    char what[64];
    snprintf(what, sizeof(what), "multi combine f32 add from rank %d", from[k]);
    CHECK_STDOUT(o->prog == 3 + k, "%s: program %d, want %d", what, o->prog, 3 + k);
    const moeccl_rows_t* a = &progs[o->prog < MOECCL_MOE_MAX_PROGS + 8 ? o->prog : 0];
    expect_prog(a, MOECCL_ROWS_ADD, m_own_src + m_send_first[from[k]],
                npairs(m_send_first, from[k]), UINT32_MAX, 0, what);
    CHECK_STDOUT(a->out_buf == MOECCL_BUF_RECV && a->out_off == 0,
                 "%s: writes at %u+%llu, want the tokens", what, a->out_buf,
                 (unsigned long long)a->out_off);
  }
  moeccl_sched_free(&s);
}

static void test_kernels(void) {
  /* SUM in bfloat16: 1 + 2^-8 + 2^-8 rounds once to 1 + 2^-7 (pairwise
   * rounding would stay at 1) */
  uint16_t src[3] = {moeccl_float_to_bf16(1.0f), moeccl_float_to_bf16(0x1p-8f),
                     moeccl_float_to_bf16(0x1p-8f)};
  uint16_t dst[2] = {0xffff, 0xffff};
  float w[2] = {1.0f, 1.0f};
  moeccl_row_term_t t[] = {{0, 0, N}, {0, 1, 0}, {0, 2, 1}, {1, N, N}};
  moeccl_rows_t p = {MOECCL_ROWS_SUM, moecclBfloat16, 1, 0, 0, t, 4};
  moeccl_rows_run(&p, dst, src, w);
  CHECK_STDOUT(moeccl_bf16_to_float(dst[0]) == 1.0f + 0x1p-7f, "bf16 sum is %g",
               (double)moeccl_bf16_to_float(dst[0]));
  CHECK_STDOUT(dst[1] == 0, "a group of empty terms writes zero (0x%x)", dst[1]);
  /* weighted float32 rows of 300 elements (a chunk and a tail) */
  enum { H = 300 };
  static float a[2 * H], out[H], wt[2] = {0.5f, -2.0f};
  for (int i = 0; i < 2 * H; i++) a[i] = (float)(i % 7);
  moeccl_row_term_t t2[] = {{0, 0, 0}, {0, 1, 1}};
  moeccl_rows_t p2 = {MOECCL_ROWS_SUM, moecclFloat32, H, 0, 0, t2, 2};
  moeccl_rows_run(&p2, out, a, wt);
  int bad = 0;
  for (int i = 0; i < H; i++) bad += out[i] != 0.5f * a[i] - 2.0f * a[H + i];
  CHECK_STDOUT(bad == 0, "weighted float32 sum: %d elements wrong", bad);
  /* float32 sums go straight into the output row unless it overlaps a
   * source row: in place over the group's second row (which is read after
   * the first term would have been written), and an empty group */
  static float io[3 * H];
  for (int i = 0; i < 3 * H; i++) io[i] = (float)(i % 5) - 1.0f;
  static float first[H], second[H];
  memcpy(first, io, sizeof(first));
  memcpy(second, io + H, sizeof(second));
  moeccl_row_term_t t4[] = {{1, 0, 0}, {1, 1, 1}, {2, N, N}};
  moeccl_rows_t p4 = {MOECCL_ROWS_SUM, moecclFloat32, H, 0, 0, t4, 3};
  moeccl_rows_run(&p4, io, io, wt);
  bad = 0;
  for (int i = 0; i < H; i++) bad += io[H + i] != 0.5f * first[i] - 2.0f * second[i];
  for (int i = 0; i < H; i++) bad += io[2 * H + i] != 0.0f;
  for (int i = 0; i < H; i++) bad += io[i] != first[i];
  CHECK_STDOUT(bad == 0, "float32 sum into one of its own rows: %d elements wrong", bad);
  /* DOT */
  float d[2] = {-1, -1};
  moeccl_row_term_t t3[] = {{0, 0, 1}, {1, N, N}};
  moeccl_rows_t p3 = {MOECCL_ROWS_DOT, moecclFloat32, H, 0, 0, t3, 2};
  moeccl_rows_run(&p3, d, a, a);
  double want = 0;
  for (int i = 0; i < H; i++) want += (double)a[i] * a[H + i];
  CHECK_STDOUT(d[0] == (float)want && d[1] == 0, "dot is %g and %g, want %g and 0", (double)d[0],
               (double)d[1], want);
}

/* The hierarchical path, rank 0 of 4 on nodes {0,1} {2,3}, K = 2, 3
 * tokens, receiving nothing: token 0 goes to ranks 2 and 3, token 1 to
 * ranks 1 and 2, token 2 to rank 3.  Flat sends 4 rows to the other node
 * (token 0 twice); hierarchical sends 3, all to rank 2 (the forwarder with
 * local index 0), which hands them on. */
static void test_hier(void) {
  static const size_t h_send[] = {0, 0, 1, 3, 5}, zero[] = {0, 0, 0, 0, 0};
  static const size_t fw_zero[9] = {0};
  static const uint32_t h_tok[] = {1, 0, 1, 0, 2}, relay_tok[] = {0, 1, 2};
  static const size_t relay_first[] = {0, 0, 0, 3, 3};
  static const int via[] = {-1, -1, 0, 1}, node_rank[] = {0, 1};
  static const moeccl_row_term_t h_own[] = {{0, 5, N}, {1, 0, N}, {1, 6, N}, {2, 7, N}};
  moeccl_moe_layout_t l = {.rank = 0,
                           .nranks = 4,
                           .K = 2,
                           .T = 3,
                           .P = 5,
                           .Q = 0,
                           .R = 0,
                           .send_first = h_send,
                           .recv_first = zero,
                           .pair_token = h_tok,
                           .own = h_own,
                           .n_own = 4,
                           .hier_ok = 1,
                           .via = via,
                           .relay_first = relay_first,
                           .relay_token = relay_tok,
                           .rin_first = zero,
                           .nl = 2,
                           .me_local = 0,
                           .node_rank = node_rank,
                           .fw_first = fw_zero,
                           .F = 0,
                           .own_h = h_own,
                           .n_own_h = 4};
  moeccl_rows_t progs[MOECCL_MOE_MAX_PROGS];
  moeccl_moe_call_t c = {.op = MOECCL_MOE_DISPATCH,
                         .lay = &l,
                         .type = moecclFloat32,
                         .hidden = 4,
                         .elem_size = 4,
                         .progs = progs,
                         .nprogs_cap = MOECCL_MOE_MAX_PROGS,
                         .hier = 1};
  moeccl_sched_t s = {0};
  fresh(&s);
  CHECK_STDOUT(moeccl_moe_schedule(&c, &s) == moecclSuccess, "hier dispatch: schedule failed");
  moeccl_sched_end_step(&s);
  uint64_t to[4] = {0}, nsend[4] = {0};
  for (int i = 0; i < s.nops; i++)
    if (s.ops[i].type == MOECCL_OP_SEND)
      to[s.ops[i].peer] += s.ops[i].bytes, nsend[s.ops[i].peer]++;
  CHECK_STDOUT(to[2] == 3 * 16 && nsend[2] == 1,
               "hier dispatch: %llu bytes in %llu messages to the "
               "forwarder, want 3 rows in one",
               (unsigned long long)to[2], (unsigned long long)nsend[2]);
  CHECK_STDOUT(to[3] == 0,
               "hier dispatch: %llu bytes to rank 3, want none (its rows go via rank 2)",
               (unsigned long long)to[3]);
  CHECK_STDOUT(to[1] == 16 && to[0] == 0,
               "hier dispatch: one row to rank 1 on the node, none to self");
  /* the relay rows are packed from tokens 0, 1, 2: one run */
  int relay_runs = 0;
  for (int i = 0; i < s.step_end[0]; i++)
    relay_runs += s.ops[i].type == MOECCL_OP_COPY && s.ops[i].bytes == 3 * 16;
  CHECK_STDOUT(relay_runs == 1, "hier dispatch: relay rows pack in %d runs of 3 rows, want 1",
               relay_runs);

  fresh(&s);
  c.op = MOECCL_MOE_COMBINE;
  CHECK_STDOUT(moeccl_moe_schedule(&c, &s) == moecclSuccess, "hier combine: schedule failed");
  moeccl_sched_end_step(&s);
  uint64_t from[4] = {0};
  for (int i = 0; i < s.nops; i++)
    if (s.ops[i].type == MOECCL_OP_RECV) from[s.ops[i].peer] += s.ops[i].bytes;
  CHECK_STDOUT(from[2] == 3 * 16 && from[3] == 0 && from[1] == 16,
               "hier combine: %llu/%llu/%llu bytes back from ranks 1/2/3, want 16/48/0",
               (unsigned long long)from[1], (unsigned long long)from[2],
               (unsigned long long)from[3]);
  int last = s.step_end[s.nsteps - 1] - 1;
  CHECK_STDOUT(s.ops[last].type == MOECCL_OP_ROWS && progs[s.ops[last].peer].terms == h_own &&
                   s.ops[last].dst_buf == MOECCL_BUF_RECV,
               "hier combine: the token side's sum runs last, into the tokens");
  moeccl_sched_free(&s);
}

/* The step of op i. */
static int step_of(const moeccl_sched_t* s, int i) {
  int k = 0;
  while (k < s->nsteps && s->step_end[k] <= i) k++;
  return k;
}

/* The pipelined hierarchical path on a forwarder: rank 2 of 4 on nodes
 * {0,1} {2,3}; rank 0 (3 tokens) relays tokens 0 (for ranks 2 and 3),
 * 1 (rank 2) and 2 (rank 3).  In C chunks (token t of 3 in chunk
 * floor(t C / 3)) each relay row crosses in its chunk's step j, the
 * forwarder copies it in step j+1 and hands it to rank 3 in step j+2;
 * the combine mirrors it (partials in j, sums in j+1, back in j+2).  Every
 * row moves once whatever C, and C = 1 is the unpipelined schedule. */
static void test_hier_chunks(void) {
  static const size_t zero[] = {0, 0, 0, 0, 0}, rin_first[] = {0, 3, 3, 3, 3};
  static const size_t recv_first[] = {0, 2, 2, 2, 2}, peer_T[] = {3, 0, 0, 0};
  static const size_t fw_first[] = {0, 2, 4, 4, 4, 4, 4, 4, 4};
  static const uint32_t rin_token[] = {0, 1, 2}, fw_rows[] = {0, 1, 0, 2}, src_token[] = {0, 1};
  static const int via[] = {2, 3, -1, -1}, node_rank[] = {2, 3};
  /* the sums per relay row: its own partial (pair 0, 1) or a forwarded one (Q + k) */
  static const moeccl_row_term_t fsum[] = {{0, 0, N}, {0, 4, N}, {1, 1, N}, {2, 5, N}};
  static const int chunks[] = {1, 2, 3, 8};
  for (size_t ci = 0; ci < sizeof(chunks) / sizeof(chunks[0]); ci++) {
    int C = chunks[ci];
    moeccl_moe_layout_t l = {.rank = 2,
                             .nranks = 4,
                             .K = 2,
                             .T = 0,
                             .P = 0,
                             .Q = 2,
                             .R = 0,
                             .send_first = zero,
                             .recv_first = recv_first,
                             .src_token = src_token,
                             .hier_ok = 1,
                             .via = via,
                             .relay_first = zero,
                             .rin_first = rin_first,
                             .nl = 2,
                             .me_local = 0,
                             .node_rank = node_rank,
                             .fw_first = fw_first,
                             .fw_rows = fw_rows,
                             .F = 4,
                             .peer_T = peer_T,
                             .rin_token = rin_token,
                             .fsum = fsum,
                             .n_fsum = 4};
    moeccl_rows_t progs[MOECCL_MOE_MAX_PROGS + MOECCL_MOE_MAX_CHUNKS];
    moeccl_moe_call_t c = {.op = MOECCL_MOE_DISPATCH,
                           .lay = &l,
                           .type = moecclFloat32,
                           .hidden = 4,
                           .elem_size = 4,
                           .progs = progs,
                           .nprogs_cap = MOECCL_MOE_MAX_PROGS + MOECCL_MOE_MAX_CHUNKS,
                           .hier = 1,
                           .chunks = C};
    const uint64_t rb = 16;
    moeccl_sched_t s = {0};
    fresh(&s);
    CHECK_STDOUT(moeccl_moe_schedule(&c, &s) == moecclSuccess, "C=%d: dispatch failed", C);
    moeccl_sched_end_step(&s);
    /* token t's relay row (rin row t) arrives in step in[t]; forwarded row
     * k (rin row fw_rows[k]) leaves for rank 3 in step out[fw_rows[k]] */
    int in[3] = {-1, -1, -1}, out[3] = {-1, -1, -1}, nin = 0, nout = 0, nchunks = 0;
    uint64_t rin_off = UINT64_MAX, fout_off = 0; /* no weights, no send area: fout at 0 */
    for (int i = 0; i < s.nops; i++)
      if (s.ops[i].type == MOECCL_OP_RECV && s.ops[i].peer == 0 && s.ops[i].dst_off < rin_off)
        rin_off = s.ops[i].dst_off;
    for (int i = 0; i < s.nops; i++) {
      const moeccl_sched_op_t* op = &s.ops[i];
      uint64_t r0 =
          (op->type == MOECCL_OP_RECV ? op->dst_off - rin_off : op->src_off - fout_off) / rb;
      if (op->type == MOECCL_OP_RECV && op->peer == 0) {
        for (uint64_t r = r0; r < r0 + op->bytes / rb && r < 3; r++) in[r] = step_of(&s, i);
        nin++;
      }
      if (op->type == MOECCL_OP_SEND && op->peer == 3) {
        for (uint64_t r = r0; r < r0 + op->bytes / rb && r < 4; r++)
          out[fw_rows[r]] = step_of(&s, i);
        nout++;
      }
    }
    for (int t = 0; t < 3; t++)
      nchunks += t == 0 || moeccl_moe_chunk_of(t, 3, C) != moeccl_moe_chunk_of(t - 1, 3, C);
    CHECK_STDOUT(nin == nchunks, "C=%d: %d relay messages in, want %d", C, nin, nchunks);
    CHECK_STDOUT(nout == (C == 1 ? 1 : 2), "C=%d: %d forwarded messages to rank 3, want %d", C,
                 nout, C == 1 ? 1 : 2);
    /* (steps without ops are dropped: a later chunk's step may come sooner) */
    for (int t = 1; t < 3; t++)
      CHECK_STDOUT(in[t] >= 0 && (moeccl_moe_chunk_of(t, 3, C) > moeccl_moe_chunk_of(t - 1, 3, C)
                                      ? in[t] > in[t - 1]
                                      : in[t] == in[t - 1]),
                   "C=%d: token %d's relay row arrives in step %d, token %d's in %d", C, t, in[t],
                   t - 1, in[t - 1]);
    CHECK_STDOUT(out[0] == in[0] + 2 && out[2] == in[2] + 2,
                 "C=%d: tokens 0 and 2 go on in steps %d and %d, want %d and %d", C, out[0], out[2],
                 in[0] + 2, in[2] + 2);

    fresh(&s);
    c.op = MOECCL_MOE_COMBINE;
    CHECK_STDOUT(moeccl_moe_schedule(&c, &s) == moecclSuccess, "C=%d: combine failed", C);
    moeccl_sched_end_step(&s);
    int nback = 0, nfs = 0, fs_step[3] = {-1, -1, -1}, back_step[3] = {-1, -1, -1};
    size_t terms = 0;
    uint64_t back_rows = 0, rsum_off = UINT64_MAX;
    for (int i = 0; i < s.nops; i++)
      if (s.ops[i].type == MOECCL_OP_SEND && s.ops[i].peer == 0 && s.ops[i].src_off < rsum_off)
        rsum_off = s.ops[i].src_off;
    for (int i = 0; i < s.nops; i++) {
      const moeccl_sched_op_t* op = &s.ops[i];
      if (op->type == MOECCL_OP_ROWS && progs[op->peer].terms >= fsum &&
          progs[op->peer].terms < fsum + 4) {
        const moeccl_rows_t* pr = &progs[op->peer];
        for (size_t t = 0; t < pr->nterms; t++) fs_step[pr->terms[t].dst] = step_of(&s, i);
        terms += pr->nterms, nfs++;
      }
      if (op->type == MOECCL_OP_SEND && op->peer == 0) {
        uint64_t r0 = (op->src_off - rsum_off) / rb;
        for (uint64_t r = r0; r < r0 + op->bytes / rb && r < 3; r++) back_step[r] = step_of(&s, i);
        back_rows += op->bytes / rb, nback++;
      }
    }
    CHECK_STDOUT(terms == 4 && back_rows == 3, "C=%d: %zu sum terms and %llu rows back, want 4, 3",
                 C, terms, (unsigned long long)back_rows);
    CHECK_STDOUT(nfs == nchunks && nback == nchunks,
                 "C=%d: %d sums and %d messages back, want %d (a chunk with rows each)", C, nfs,
                 nback, nchunks);
    for (int t = 0; t < 3; t++)
      CHECK_STDOUT(fs_step[t] >= 0 && back_step[t] == fs_step[t] + 1 &&
                       (t == 0 || (moeccl_moe_chunk_of(t, 3, C) > moeccl_moe_chunk_of(t - 1, 3, C)
                                       ? fs_step[t] > fs_step[t - 1]
                                       : fs_step[t] == fs_step[t - 1])),
                   "C=%d: row %d summed in step %d, back in %d", C, t, fs_step[t], back_step[t]);
    moeccl_sched_free(&s);
  }
}

/* The flat dispatch with the layout's gather tables: no pack op, a
 * gathered SEND whose program picks tokens 0, 1, 3 from the whole token
 * buffer, and a consuming RECV whose program expands rank 0's rows (and
 * knows the sender's tokens for a gathered message). */
static void test_gathered(void) {
  static const moeccl_row_term_t exp_src[] = {{0, 0, 0}, {1, 1, 2}, {2, 0, 1}};
  static const moeccl_row_term_t exp_src_idx[] = {{0, 4, 0}, {1, 5, 2}, {2, 4, 1}};
  static const size_t exp_src_first[] = {0, 3, 3, 3};
  static const uint32_t src_token[] = {4, 5, 2};
  static const moeccl_row_term_t gather[] = {{0, 0, N}, {1, 1, N}, {2, 3, N}, {0, 2, N}};
  moeccl_moe_layout_t l = layout();
  l.exp_src = exp_src, l.exp_src_first = exp_src_first, l.exp_src_idx = exp_src_idx;
  l.src_token = src_token, l.gather = gather;
  moeccl_rows_t progs[MOECCL_MOE_MAX_PROGS + 6];
  moeccl_moe_call_t c = {.op = MOECCL_MOE_DISPATCH,
                         .lay = &l,
                         .type = moecclFloat32,
                         .hidden = 4,
                         .elem_size = 4,
                         .progs = progs,
                         .nprogs_cap = MOECCL_MOE_MAX_PROGS + 6};
  moeccl_sched_t s = {0};
  fresh(&s);
  CHECK_STDOUT(moeccl_moe_schedule(&c, &s) == moecclSuccess, "gathered dispatch: schedule failed");
  moeccl_sched_end_step(&s);
  int sends = 0, recvs = 0, copies = 0;
  for (int i = 0; i < s.nops; i++) {
    const moeccl_sched_op_t* op = &s.ops[i];
    if (op->type == MOECCL_OP_COPY) copies++;
    if (op->type == MOECCL_OP_SEND) {
      sends++;
      const moeccl_rows_t* g = &progs[op->prog];
      CHECK_STDOUT(op->peer == 0 && (op->flags & MOECCL_OPF_ROWS) &&
                       op->src_buf == MOECCL_BUF_SEND && op->bytes == 3 * 16,
                   "gathered dispatch: one gathered send of 3 rows to rank 0 from the tokens");
      CHECK_STDOUT(g->mode == MOECCL_ROWS_COPY && g->terms == gather && g->nterms == 3 &&
                       g->span == 5 * 16,
                   "gathered dispatch: the send picks its 3 rows from the 5-token buffer");
    }
    if (op->type == MOECCL_OP_RECV) {
      recvs++;
      const moeccl_rows_t* e = &progs[op->prog];
      CHECK_STDOUT(op->peer == 0 && (op->flags & MOECCL_OPF_ROWS) && op->bytes == 2 * 16,
                   "gathered dispatch: one consuming receive of 2 rows from rank 0");
      CHECK_STDOUT(e->terms == exp_src && e->nterms == 3 && e->terms_idx == exp_src_idx &&
                       e->map == src_token && e->out_buf == MOECCL_BUF_RECV,
                   "gathered dispatch: the receive expands rank 0's 3 rows into the expert rows");
    }
  }
  CHECK_STDOUT(sends == 1 && recvs == 1, "gathered dispatch: %d sends, %d receives, want 1 and 1",
               sends, recvs);
  CHECK_STDOUT(copies == 1, "gathered dispatch: %d copies, want only the own row's expansion",
               copies);
  moeccl_sched_free(&s);
}

/* ---- the tuner's MoE pick ---------------------------------------------------- */

/* 4 nodes of 2 ranks, links between nodes of net_GBps per rank (50 us),
 * shared memory's on the node (10 GB/s), copies at 20 GB/s. */
static moeccl_topo_t pick_topo(double net_GBps) {
  moeccl_topo_t t = {.nranks = 8, .nnodes = 4, .ngroups = 1, .copy_GBps = 20.0};
  t.link[MOECCL_LINK_GROUP] =
      (moeccl_link_t){.latency_us = 50.0, .overhead_us = 4.5, .bw_GBps = net_GBps};
  t.link[MOECCL_LINK_NODE] =
      (moeccl_link_t){.latency_us = 1.5, .overhead_us = 0.3, .bw_GBps = 10.0};
  return t;
}

static void test_moe_pick(void) {
  /* One rank's dispatch of 512 tokens, K = 8 (every rank alike): flat
   * sends each token to the 6 ranks off its node; node dedup sends it to
   * one forwarder per other node, which copies it and hands it on. */
  moeccl_moe_cost_rows_t rows[2] = {{.net_rows = 3072,
                                     .node_rows = 512,
                                     .pack_rows = 3584,
                                     .expand_rows = 4096,
                                     .net_msgs = 6,
                                     .node_msgs = 1,
                                     .net_io_rows = 6144,
                                     .node_in_rows = 512},
                                    {.net_rows = 1536,
                                     .node_rows = 512,
                                     .fwd_node_rows = 1536,
                                     .pack_rows = 2048,
                                     .fwd_rows = 1536,
                                     .expand_rows = 4096,
                                     .net_msgs = 3,
                                     .node_msgs = 1,
                                     .fwd_node_msgs = 3,
                                     .net_io_rows = 3072,
                                     .node_in_rows = 512,
                                     .fwd_in_rows = 1536}};
  moeccl_moe_cost_rows_t all[16];
  for (int r = 0; r < 8; r++) all[2 * r] = rows[0], all[2 * r + 1] = rows[1];
  int machine_of[8] = {0}, cores[1] = {2};
  double scratch[1], us[3];
  int chunks = -1;
  /* 1 Gbit/s per host link, 2 ranks each: the copies on the node are 1%
   * of the transfer on a rank's own core, 4% on a quarter of one. */
  moeccl_topo_t t = pick_topo(0.0625);
  moeccl_moe_pricing_t own = {.topo = &t, .most = rows};
  int path = moeccl_pricing_moe_pick(&own, 4096.0, 1, -1, 0, us, &chunks);
  CHECK_STDOUT(path == 1 && chunks > 1 && us[2] <= 1.1 * us[1],
               "pick, slow links, a core per rank: path %d in %d chunks (us %.0f %.0f %.0f), "
               "want hier in more than 1, priced within 10%% of 1",
               path, chunks, us[0], us[1], us[2]);
  /* rows of 16 B: every chunk's messages and latencies cost more than the
   * overlap saves, by more than the 10% the pipeline is given */
  path = moeccl_pricing_moe_pick(&own, 16.0, 1, -1, 0, us, &chunks);
  CHECK_STDOUT(path == 1 && chunks == 1,
               "pick, rows of 16 B: path %d in %d chunks (us %.0f %.0f %.0f), want hier in 1", path,
               chunks, us[0], us[1], us[2]);
  moeccl_moe_pricing_t shared = own;
  shared.all = all, shared.nranks = 8, shared.nmachines = 1;
  shared.machine_of = machine_of, shared.machine_cpus = cores, shared.scratch = scratch;
  shared.loop_GBps = 2.0;
  path = moeccl_pricing_moe_pick(&shared, 4096.0, 1, -1, 0, us, &chunks);
  double one = us[1], best = us[2];
  CHECK_STDOUT(path == 1 && chunks > 1 && best < 0.98 * one,
               "pick, 8 ranks on 2 cores: path %d in %d chunks (us %.0f %.0f %.0f), want hier "
               "in more than 1",
               path, chunks, us[0], us[1], us[2]);
  /* in 1 chunk the stages add up: at least the transfer plus the
   * forwarders' copies on the shared cores */
  double net = 1536 * 4096.0 / (0.0625 * 1e3), fwd = 8 * 1536 * 4096.0 / (20.0 * 1e3) / 2;
  CHECK_STDOUT(one >= net + fwd, "pick: 1 chunk priced %.0f us, under transfer %.0f + copies %.0f",
               one, net, fwd);
  /* forced */
  path = moeccl_pricing_moe_pick(&shared, 4096.0, 1, 0, 8, us, &chunks);
  CHECK_STDOUT(path == 0 && chunks == 8 && us[2] > 0,
               "pick, forced flat, 8 chunks: path %d, %d chunks", path, chunks);
  path = moeccl_pricing_moe_pick(&shared, 4096.0, 0, -1, 0, us, &chunks);
  CHECK_STDOUT(path == 0 && chunks == 1 && us[1] < 0 && us[2] < 0,
               "pick without hier_ok: path %d, %d chunks, us %.0f %.0f", path, chunks, us[1],
               us[2]);
  /* dedup saving nothing: every token to one rank off its node, the
   * forwarder handing each row on */
  moeccl_moe_cost_rows_t none[2] = {rows[0], rows[1]};
  none[0].net_rows = none[1].net_rows = 512, none[0].net_io_rows = none[1].net_io_rows = 1024;
  none[1].fwd_rows = none[1].fwd_node_rows = none[1].fwd_in_rows = 512;
  none[0].net_msgs = none[1].net_msgs = 1, none[0].pack_rows = none[1].pack_rows = 1024;
  moeccl_moe_pricing_t same = {.topo = &t, .most = none};
  path = moeccl_pricing_moe_pick(&same, 4096.0, 1, -1, 0, us, &chunks);
  CHECK_STDOUT(path == 0, "pick, dedup saves nothing: path %d (us %.0f %.0f %.0f), want flat", path,
               us[0], us[1], us[2]);
  /* and on fast uniform links (the network as fast as the node) */
  moeccl_topo_t fast = pick_topo(10.0);
  fast.link[MOECCL_LINK_GROUP] = fast.link[MOECCL_LINK_NODE];
  moeccl_moe_pricing_t uniform = {.topo = &fast, .most = none};
  path = moeccl_pricing_moe_pick(&uniform, 4096.0, 1, -1, 0, us, &chunks);
  CHECK_STDOUT(path == 0,
               "pick, fast uniform links, dedup saves nothing: path %d in %d chunks "
               "(us %.0f %.0f %.0f), want flat",
               path, chunks, us[0], us[1], us[2]);
}

int main(void) {
  test_schedule();
  test_combine_multi();
  test_gathered();
  test_hier();
  test_hier_chunks();
  test_kernels();
  test_moe_pick();
  if (failures) return 1;
  printf("test_moe_sched: all checks passed\n");
  return 0;
}
