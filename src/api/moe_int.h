/*
 * The MoE plan behind moecclMoePlan_t (include/moeccl_moe.h): the expert
 * placement, and the layout of the last moecclMoeLayout with the memory it
 * lives in.  Arrays only grow, so a step whose layout is no larger than an
 * earlier one plans without allocating.  moe.c holds the public calls,
 * moe_layout.c the layout's exchanges and tables, moe_hier.c the
 * hierarchical path's tables, moe_common.c the helpers of both; this
 * header what they share.
 */
#ifndef MOECCL_MOE_INTERNAL_H_
#define MOECCL_MOE_INTERNAL_H_

#include "algos/moe_algos.h"
#include "base/grow.h"
#include "comm/comm.h"
#include "moeccl_moe.h"

#define MOECCL_MOE_MAGIC 0x6d6f6563634d6f45ULL /* "moeccMoE" */

/* A growable array: ptr, capacity in elements. */
#define MOE_ARRAY(type, name)                                                                      \
  type* name;                                                                                      \
  size_t name##_cap

/* A relay row a forwarder receives, keyed for the order of the node's sums
 * (moe_algos.h's fsum): its token t of its source s's T. */
typedef struct {
  uint64_t t, T;
  uint32_t s, i;
} moe_rin_key_t;

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
  MOE_ARRAY(uint32_t, rin_token);
  MOE_ARRAY(moe_rin_key_t, rin_key);
  size_t* peer_T; /* [n] every rank's tokens */
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

/* The first exchange of a layout: per peer, these words. */
enum { MSG_PAIRS, MSG_TOPK, MSG_EXPERTS, MSG_HASH, MSG_CAPACITY, MOE_MSG };

/* ---- moe_common.c, and base/grow.h ---- */

/* Grows the plan's array name to at least need elements (base/grow.h). */
#define GROW(plan, name, need)                                                                     \
  moeccl_grow(&(plan)->name, &(plan)->name##_cap, (need), sizeof(*(plan)->name))

static inline moeccl_row_term_t moe_term(size_t dst, size_t src, size_t aux) {
  return (moeccl_row_term_t){(uint32_t)dst, (uint32_t)src, (uint32_t)aux};
}

/* first[0..n) counts become offsets, first[n] the total (returned). */
size_t moeccl_moeplan_prefix(size_t* first, int n);
/* An all-to-all(v) of plan memory on the plan's communicator, now: per
 * rank, sfirst/rfirst give the first item, each of per elements of elem bytes. */
moecclResult_t moeccl_moeplan_alltoallv(moecclMoePlan_t p, const void* send, const size_t* sfirst,
                                        void* recv, const size_t* rfirst, size_t elem, size_t per);
/* Token groups: tok[t] holds each token's term count; it becomes the
 * token's first term in out, a token without terms getting one zero-row
 * term.  Returns the terms in all. */
size_t moeccl_moeplan_token_groups(size_t* tok, size_t T, moeccl_row_term_t* out);

/* moecclMoeLayout's argument checks, and the layout itself (moe_layout.c). */
moecclResult_t moeccl_moeplan_check_layout(moecclMoePlan_t p, const int32_t* ids, size_t T, int K);
moecclResult_t moeccl_moeplan_layout(moecclMoePlan_t p, const int32_t* ids, size_t T, int K,
                                     size_t capacity, size_t* dropped);

/* The hierarchical path (moe_hier.c): its fixed tables at plan creation
 * (moecclSystemError when out of memory), and a layout's tables, with their
 * exchanges (after the flat tables). */
moecclResult_t moeccl_moeplan_hier_setup(moecclMoePlan_t p);
moecclResult_t moeccl_moeplan_hier_tables(moecclMoePlan_t p, size_t T);

#endif
