/*
 * Generators of the MoE dispatch and combine (src/algos/moe_dispatch.c).
 * Like every generator they are pure: given a layout (src/api/moe_layout.c computes it
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

#include "kernels/rows.h"
#include "sched/schedule.h"

/* What the tuner prices a path by (moeccl_tuner_pick_moe): rows and
 * messages one rank moves in a dispatch (combine is its mirror), by stage
 * of the schedule: the packing copies before the exchange, the exchange
 * (rows between nodes and, in its first step, the rows straight to this
 * node's ranks), the forwarders' copies and their messages on the node
 * (the hierarchical path's stages that run in chunks), the expansion
 * after.  Per class the larger of what it sends and receives; and, for the
 * CPU time a machine's ranks share, the rows it sends plus receives over
 * the network and receives on the node (the receiver's core copies those).
 * The layout keeps each field's maximum over the ranks (cost), so that
 * every rank decides alike, and every rank's own (cost_all). */
typedef struct {
  uint64_t net_rows, node_rows, fwd_node_rows; /* between nodes; on the node: direct, forwarded */
  uint64_t pack_rows, fwd_rows, expand_rows;   /* copied locally: before, by forwarders, after */
  uint64_t net_msgs, node_msgs, fwd_node_msgs; /* messages of each kind */
  uint64_t net_io_rows;                        /* network rows out + in */
  uint64_t node_in_rows, fwd_in_rows;          /* node rows in: direct, forwarded */
} moeccl_moe_cost_rows_t;

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
  /* exp_remote again, by source rank (x ascending within each), src
   * counted from the source's first receive pair: the dispatch's
   * receives consume their message with these (NULL: not built). */
  const moeccl_row_term_t* exp_src;
  const size_t* exp_src_first; /* [nranks+1] */
  /* The same terms with src the sender's token (for a gathered message),
   * and the sender's token of each receive pair. */
  const moeccl_row_term_t* exp_src_idx;
  const uint32_t* src_token; /* [Q] */
  /* Send side's gather programs, by send pair: {p - send_first[peer],
   * its token, none}. */
  const moeccl_row_term_t* gather;
  /* Partial sums on the expert side, grouped by receive pair:
   * {q, x, q*K+j}, R terms. */
  const moeccl_row_term_t* part;
  /* The token side's sums, grouped by token, ranks ascending:
   * {t, q_self (from itself) or Q + p (pair p's returned row), none};
   * a token without pairs has one term {t, none, none}: a zero row. */
  const moeccl_row_term_t* own;
  size_t n_own;
  /* The same sums split for a combine whose receives add as they arrive
   * (float32 rows): own_self (SUM, src the expert rows, aux the weights as
   * in part) writes each token's row straight from its own pair's expert
   * rows, or zeros for a token without pairs (the self pairs' partials,
   * part[part_self0, part_self1), are then not formed); then peers
   * rank-1, rank-2, ... in turn, own_src[p] (ADD, by send pair, src
   * counted from the peer's first pair) adds pair p's returned row,
   * starting from zero (aux 0) for a token's first contribution.  NULL:
   * not built. */
  const moeccl_row_term_t* own_self;
  size_t n_own_self;
  size_t part_self0, part_self1;
  const moeccl_row_term_t* own_src;
  /* Gate-gradient dots, Q*K terms by (q, j): {q*K+j, q (self: the token),
   * x or none}; the self pairs' terms are [Kself0, Kself1). */
  const moeccl_row_term_t* dot;
  size_t dot_self0, dot_self1;

  /* The hierarchical path (DeepEP's node dedup), set when hier_ok: a row
   * crosses between nodes once per (token, destination node), to this
   * rank's forwarder there (the rank of that node with this rank's local
   * index modulo the node's size), which hands it to the node's ranks that
   * hold the token's experts.  Pairs, receive pairs, the expansion and the
   * partial sums stay those of the flat path; only the rows' route
   * changes, and the K floats per pair (weights, gate gradients) go
   * direct.  Relay rows: by forwarder rank, tokens ascending. */
  int hier_ok;
  const int* via;              /* [nranks] -1: source on this node (direct); else the
                                  rank of this node that forwards its rows (maybe this one) */
  const size_t* relay_first;   /* [nranks+1] relay rows this rank sends, by forwarder */
  const uint32_t* relay_token; /* [relay_first[nranks]] their tokens */
  const size_t* rin_first;     /* [nranks+1] relay rows this rank forwards, by source */
  int nl, me_local;            /* ranks on this node, this rank's index among them */
  const int* node_rank;        /* [nl] this node's ranks, ascending */
  const size_t* fw_first;      /* [nranks*nl+1] forward list (source s, local index lr) */
  const uint32_t* fw_rows;     /* [F] relay row (rin index) of each forwarded row */
  size_t F;                    /* fw_first[nranks*nl] */
  /* Each source rank's tokens (T of every rank), and the token of each
   * relay row this rank forwards [rin_first[nranks]]: the pipelined path
   * cuts every rank's tokens into the same chunks (moeccl_moe_chunk_of),
   * which each rank on a row's way finds from these. */
  const size_t* peer_T;
  const uint32_t* rin_token;
  /* Forwarder's sums of the node's partials per relay row, grouped by rin
   * row, local index ascending: {i, q (its own partial) or Q + k, none};
   * the groups in the order of their token's place in its source's tokens
   * (rin_token[i] / peer_T[source], ties by source), so that one chunk's
   * sums are one run of terms for any chunk count. */
  const moeccl_row_term_t* fsum;
  size_t n_fsum;
  /* Token side's sums: {t, q_self, Q+F+p (a pair on this node) or
   * Q+F+P+i (relay row i's returned sum), none}, grouped by token. */
  const moeccl_row_term_t* own_h;
  size_t n_own_h;
  moeccl_moe_cost_rows_t cost[2];         /* flat, hierarchical (when hier_ok): maxima */
  const moeccl_moe_cost_rows_t* cost_all; /* [nranks][2]: every rank's own (when hier_ok) */
} moeccl_moe_layout_t;

typedef enum {
  MOECCL_MOE_DISPATCH = 0,         /* tokens -> expanded rows */
  MOECCL_MOE_COMBINE = 1,          /* expanded rows -> tokens (weights optional) */
  MOECCL_MOE_COMBINE_BACKWARD = 2, /* token grads -> expanded grads (+ gate grads) */
  MOECCL_MOE_NOPS
} moeccl_moe_op_t;

#define MOECCL_MOE_MAX_PROGS 8
/* The most chunks the pipelined hierarchical path takes; a call's programs
 * are at most MOECCL_MOE_MAX_PROGS + 2 nranks + this many. */
#define MOECCL_MOE_MAX_CHUNKS 64

/* The chunk of token t of a rank with T tokens when its tokens are cut into
 * chunks of about equal size: floor(t * chunks / T).  The same on every rank,
 * and monotonic in t / T. */
static inline int moeccl_moe_chunk_of(uint64_t t, uint64_t T, int chunks) {
  return T ? (int)(t * (uint64_t)chunks / T) : 0;
}

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
  int hier;               /* the hierarchical path (lay->hier_ok; the tuner's choice) */
  int chunks;             /* hier: chunks (MOECCL_MOE_CHUNKS or the tuner's; 0, 1: none) */
  int weighted;           /* combine, combine backward: the gate weights apply */
  int gate_grad;          /* combine backward: gate gradients are computed */
  const float* weights;   /* [T][K] */
  const void* expert_out; /* combine backward: the forward's expanded outputs */
  float* grad_weights;    /* combine backward: [T][K] */
  moeccl_rows_t* progs;   /* the programs the schedule's ROWS ops and consuming receives name */
  size_t nprogs_cap;      /* at least MOECCL_MOE_MAX_PROGS + 2 nranks */
  /* NULL, or moecclMemAlloc memory of at least moeccl_moe_area_rows rows that the plan
   * owns: the rows this rank sends (packed tokens, partial sums) and the
   * returned partials go there instead of scratch, so that local peers
   * copy them from the mapped region (no CMA). */
  void* send_area;
} moeccl_moe_call_t;

const char* moeccl_moe_op_name(moeccl_moe_op_t op);
/* The dispatch/combine paths across nodes, by index (comm->forced_moe):
 * 0 flat (one all-to-all), 1 hier (within the node, then between nodes). */
#define MOECCL_MOE_NPATHS 2
extern const char* const moeccl_moe_paths[MOECCL_MOE_NPATHS];
/* The path called name (case-insensitive, as MOECCL_MOE_ALGO), or -1. */
int moeccl_moe_path_by_name(const char* name);
/* Rows of the send area a call on l uses (either path). */
size_t moeccl_moe_area_rows(const moeccl_moe_layout_t* l);
/* Appends the call's steps to s, whose SEND, RECV and SCRATCH buffers the
 * planner has set up. */
moecclResult_t moeccl_moe_schedule(const moeccl_moe_call_t* call, moeccl_sched_t* s);

#endif
