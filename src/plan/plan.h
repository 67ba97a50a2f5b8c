/*
 * One planning path for every operation.  An entry point describes its call
 * as a moeccl_call_t; enqueue.c runs it now or captures it (group, host
 * stream), and for each call asks this module, downward, for two things:
 *   prepare: which algorithm (the tuner, or a forced one), and for an
 *            alltoallv whose algorithm needs other ranks' counts, the small
 *            count-exchange schedule to run first (comm->plan->meta_sched);
 *   build:   the call's schedule for the chosen algorithm.
 * The choice travels with the call, not through the communicator.  The
 * executor then runs the schedule; nothing here moves bytes.
 */
#ifndef MOECCL_PLAN_H_
#define MOECCL_PLAN_H_

#include "algos/algos.h"
#include "algos/coll_algos.h"
#include "algos/moe_algos.h"
#include "comm/comm.h"
#include "kernels/reduce.h"

typedef enum {
  MOECCL_CALL_A2A = 0,
  MOECCL_CALL_P2P = 1,
  MOECCL_CALL_COLL = 2,
  MOECCL_CALL_MOE = 3 /* MoE dispatch / combine (src/api/moe.c) */
} moeccl_call_kind_t;

typedef struct {
  int type; /* MOECCL_OP_SEND or MOECCL_OP_RECV */
  int peer;
  void* buf;
  size_t bytes;
} moeccl_p2p_op_t;

/* One operation, as issued. */
typedef struct {
  moeccl_call_kind_t kind;
  const void* sendbuf;
  void* recvbuf;
  moeccl_a2a_desc_t a2a;   /* A2A: v arrays as issued (a captured call owns copies) */
  moeccl_coll_desc_t coll; /* COLL */
  moeccl_red_t red;        /* COLL that reduces: the kernels and scalar */
  const void* scalar_ptr;  /* PreMulSum with moecclScalarDevice: read at build */
  const moeccl_p2p_op_t* p2p; /* P2P: the group's sends and receives on comm */
  int np2p;
  moeccl_moe_call_t moe; /* MOE: the plan's layout and the call's other buffers */
} moeccl_call_t;

/* What prepare decided for a call; build uses it. */
typedef struct {
  int algo;      /* row of moeccl_a2a_algos[] (A2A) or moeccl_coll_algos[] (COLL) */
  int need_meta; /* A2A: comm->plan->meta_sched (count exchange) must run before build */
  int chunks;    /* A2A: the pipelined algorithms' chunks (moeccl_tuner_a2a_chunks) */
} moeccl_choice_t;

/* What the planner keeps per communicator between calls (comm->plan): the
 * comm.h struct only points here, so the communicator needs nothing of the
 * layers above it. */
struct moeccl_plan_cache {
  moeccl_sched_t sched; /* the call's schedule, reused across calls */
  /* The uniform all-to-all whose schedule sched holds; a call that repeats
   * it (same buffers, block, element size and algorithm) runs that
   * schedule again without building it. */
  struct {
    int valid, algo;
    const void* sendbuf;
    void* recvbuf;
    size_t block, elem;
  } last;
  /* Count rows of other ranks for v-calls of hierarchical algorithms: member
   * m of the scope has its send row at meta_rows[2m*n], recv row after it. */
  size_t* meta_rows;
  int* meta_index;           /* comm rank -> member index, or -1 */
  size_t meta_cap;           /* size_t entries allocated in meta_rows */
  size_t meta_elem;          /* element size of the call the rows belong to */
  moeccl_sched_t meta_sched; /* the count exchange of a v-call */
};

/* comm->plan, empty; freed (and set NULL) by moeccl_plan_cache_free. */
moecclResult_t moeccl_plan_cache_create(moeccl_comm_t* comm);
void moeccl_plan_cache_free(moeccl_comm_t* comm);

moecclResult_t moeccl_plan_prepare(moeccl_comm_t* comm, const moeccl_call_t* call,
                                   moeccl_choice_t* choice);
/* Writes the call's schedule into sched (reused; no allocation once grown).
 * call is not const: a device-resident PreMulSum scalar is read into
 * call->red here, and sched->red points at it while the schedule runs. */
moecclResult_t moeccl_plan_build(moeccl_comm_t* comm, moeccl_call_t* call,
                                 const moeccl_choice_t* choice, moeccl_sched_t* sched);

/* Sends to self pair with receives from self within a P2P call. */
moecclResult_t moeccl_plan_p2p_check(moeccl_comm_t* comm, const moeccl_call_t* call);

#endif
