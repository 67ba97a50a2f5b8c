/*
 * Generators of the MoE dispatch and combine (src/algos/moe_dispatch.c).
 * Like every generator they are pure: given a layout (src/moe.c computes it
 * from the router's top-k ids and the expert placement, once per step) and
 * a call's buffers, they append this rank's ops and never touch memory.
 *
 * Numbering.  A pair is (token, destination rank): one row crosses per
 * pair, however many of the token's experts that rank holds.  Pairs this
 * rank sends are numbered by destination then token (send_first[r] ..
 * send_first[r+1]); pairs it receives by source then the source's token
 * order (recv_first[s] ..).  Its pairs to itself are both: send pair
 * send_first[me] + i is receive pair recv_first[me] + i.  Expanded rows
 * (the expert side's input) are expert-major: local expert 0's rows, then
 * 1's, ...; within an expert by receive pair, then slot.
 *
 * Scratch (MOECCL_BUF_SCRATCH) holds, per call, the areas its generator
 * names in moe_dispatch.c: packed rows and weights on the token side,
 * received rows and weights, partial sums and gate-gradient blocks.
 * Weights and gate gradients travel as K float32 per pair (slot order).
 */
#ifndef MOECCL_MOE_ALGOS_H_
#define MOECCL_MOE_ALGOS_H_

#include "rows.h"
#include "schedule.h"

/* One step's routing on one rank, as the generators read it. */
typedef struct {
  int rank, nranks, K;
  size_t T;                   /* tokens of this rank */
  size_t P;                   /* pairs it sends (to itself too) */
  size_t Q;                   /* pairs it receives (from itself too) */
  size_t R;                   /* expanded rows it receives */
  const size_t* send_first;   /* [nranks+1] */
  const size_t* recv_first;   /* [nranks+1] */
  const uint32_t* pair_token; /* [P]: token of send pair p */
  /* Expansion, by expanded row x: {x, receive pair q, weight q*K+j};
   * exp_self has the rows from this rank itself with src = the token. */
  const moeccl_row_term_t* exp_remote;
  size_t n_exp_remote;
  const moeccl_row_term_t* exp_self;
  size_t n_exp_self;
  /* Partial sums on the expert side, grouped by receive pair:
   * {q, x, q*K+j}, R terms. */
  const moeccl_row_term_t* part;
  /* The token side's sums, grouped by token, ranks ascending:
   * {t, q_self (from itself) or Q + p (pair p's returned row), none};
   * a token without pairs has one term {t, none, none}: a zero row. */
  const moeccl_row_term_t* own;
  size_t n_own;
  /* Gate-gradient dots, Q*K terms by (q, j): {q*K+j, q (self: the token),
   * x or none}; the self pairs' terms are [Kself0, Kself1). */
  const moeccl_row_term_t* dot;
  size_t dot_self0, dot_self1;
} moeccl_moe_layout_t;

typedef enum {
  MOECCL_MOE_DISPATCH = 0,         /* tokens -> expanded rows */
  MOECCL_MOE_COMBINE = 1,          /* expanded rows -> tokens (weights optional) */
  MOECCL_MOE_COMBINE_BACKWARD = 2, /* token grads -> expanded grads (+ gate grads) */
  MOECCL_MOE_NOPS
} moeccl_moe_op_t;

#define MOECCL_MOE_MAX_PROGS 8

/* One MoE call: SEND and RECV of the schedule are the call's main input
 * and output (dispatch: tokens, expanded rows; combine: expanded rows,
 * tokens; combine backward: token grads, expanded grads). */
typedef struct {
  moeccl_moe_op_t op;
  const moeccl_moe_layout_t* lay;
  moecclDataType_t type;
  size_t hidden;
  size_t elem_size;
  /* The same on every rank (set by the entry point, not by whether a
   * pointer is NULL: a rank without tokens passes none but still takes
   * part in the weights' and gate gradients' exchanges). */
  int weighted;           /* combine, combine backward: the gate weights apply */
  int gate_grad;          /* combine backward: gate gradients are computed */
  const float* weights;   /* [T][K] */
  const void* expert_out; /* combine backward: the forward's expanded outputs */
  float* grad_weights;    /* combine backward: [T][K] */
  moeccl_rows_t* progs;   /* MOECCL_MOE_MAX_PROGS programs the schedule's ROWS ops name */
  /* NULL, or moecclMemAlloc memory of at least (P + Q) rows that the plan
   * owns: the rows this rank sends (packed tokens, partial sums) and the
   * returned partials go there instead of scratch, so that local peers
   * copy them from the mapped region (no CMA). */
  void* send_area;
} moeccl_moe_call_t;

const char* moeccl_moe_op_name(moeccl_moe_op_t op);
/* Appends the call's steps to s, whose SEND, RECV and SCRATCH buffers the
 * planner has set up. */
moecclResult_t moeccl_moe_schedule(const moeccl_moe_call_t* call, moeccl_sched_t* s);

#endif
