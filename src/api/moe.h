/*
 * The MoE plan behind moecclMoePlan_t (include/moeccl_moe.h): the expert
 * placement, and the layout of the last moecclMoeLayout with the memory it
 * lives in.  Arrays only grow, so a step whose layout is no larger than an
 * earlier one plans without allocating.
 */
#ifndef MOECCL_MOE_INTERNAL_H_
#define MOECCL_MOE_INTERNAL_H_

#include "algos/moe_algos.h"
#include "comm/comm.h"
#include "moeccl_moe.h"

#define MOECCL_MOE_MAGIC 0x6d6f6563634d6f45ULL /* "moeccMoE" */

/* A growable array: ptr, capacity in elements. */
#define MOE_ARRAY(type, name)                                                                      \
  type* name;                                                                                      \
  size_t name##_cap

struct moecclMoePlan {
  uint64_t magic;
  moeccl_comm_t* comm;
  int E, nlocal;
  int* owner;         /* [E] rank holding expert e */
  int* local_index;   /* [E] e's index among its rank's experts (ascending ids) */
  int* local_experts; /* [nlocal] this rank's experts, ascending */
  uint64_t placement_hash;

  int laid_out; /* lay describes a completed moecclMoeLayout */
  moeccl_moe_layout_t lay;
  size_t capacity;

  /* per rank (nranks or nranks+1 entries, allocated at creation) */
  size_t *send_first, *recv_first, *counts; /* counts: 4n, the exchanges' v arrays */
  long *stamp, *tpair;                      /* per token: the pair to each rank */
  uint64_t *msg_out, *msg_in;               /* the first exchange: MOE_MSG words per rank */
  /* per local expert */
  size_t *ecount, *ecur;
  /* grown per layout */
  MOE_ARRAY(uint32_t, pair_token);
  MOE_ARRAY(int32_t, route_send); /* [P][K]: local expert index at the receiver, or -1 */
  MOE_ARRAY(int32_t, route_recv); /* [Q][K] */
  MOE_ARRAY(moeccl_row_term_t, exp_all);
  MOE_ARRAY(moeccl_row_term_t, exp_remote);
  MOE_ARRAY(moeccl_row_term_t, exp_self);
  MOE_ARRAY(moeccl_row_term_t, part);
  MOE_ARRAY(moeccl_row_term_t, own);
  MOE_ARRAY(moeccl_row_term_t, dot);
  MOE_ARRAY(size_t, tok);
  /* the hierarchical path's tables (hier_possible: the communicator spans
   * nodes of at most 64 ranks and MOECCL_MOE_ALGO is not flat) */
  int hier_possible, nl, me_local;
  int* via;                         /* [n] */
  int* node_rank;                   /* [nl] */
  size_t *relay_first, *rin_first;  /* [n+1] */
  size_t *fw_first, *fw_cur;        /* [n*nl+1] */
  uint64_t *cost_out, *cost_in;     /* the cost exchange: HMSG words per rank */
  moeccl_moe_cost_rows_t* cost_all; /* [n][2]: every rank's costs, flat and hier */
  MOE_ARRAY(uint64_t, tmask);       /* per token: destination ranks on one node */
  MOE_ARRAY(uint32_t, relay_token);
  MOE_ARRAY(uint64_t, relay_mask);
  MOE_ARRAY(uint64_t, rin_mask);
  MOE_ARRAY(uint32_t, fw_rows);
  MOE_ARRAY(moeccl_row_term_t, fsum);
  MOE_ARRAY(moeccl_row_term_t, own_h);
  int logged_path;       /* the path last logged at ALGO (-1: none yet) */
  size_t logged_rb;      /* and its row size */
  moeccl_rows_t* progs;  /* MOECCL_MOE_MAX_PROGS + 2n */
  size_t* exp_src_first; /* [n+1] */
  MOE_ARRAY(moeccl_row_term_t, exp_src);
  MOE_ARRAY(moeccl_row_term_t, exp_src_idx);
  MOE_ARRAY(uint32_t, src_token);
  MOE_ARRAY(moeccl_row_term_t, gather);
  MOE_ARRAY(moeccl_row_term_t, own_self);
  MOE_ARRAY(moeccl_row_term_t, own_src);
  MOE_ARRAY(uint8_t, seen); /* per token */
  /* moecclMemAlloc memory the data calls send from (moeccl_moe_call_t's
   * send_area): grown, never shrunk; NULL until the first call. */
  void* send_area;
  size_t send_area_bytes;
};

#endif
