/*
 * The executor's own parts, shared by its files (executor.c runs host
 * schedules, local.c their local ops, consume.c what receives do with their
 * messages, wait.c waiting and liveness, lower.c device schedules): its
 * request, which wraps the one a transport sees, and the helpers on a
 * schedule's buffers.
 */
#ifndef MOECCL_EXECUTOR_INT_H_
#define MOECCL_EXECUTOR_INT_H_

#include "exec/executor.h"
#include "kernels/mem.h"
#include "transport/transport.h"

struct moeccl_red;
struct moeccl_rows;

/* One posted SEND, RECV or RECV_REDUCE op: the transport's request (req,
 * what the transport sees), the consumer req.consumer may point to, and
 * what only the executor knows of the op.  comm->reqs holds them. */
typedef struct moeccl_xreq {
  moeccl_req_t req;
  moeccl_consumer_t consumer;
  /* A reduction: buf = operand (+) message, by red with red_flags over
   * whole elements (operand may equal buf).  In place (consumer, reducing
   * as the bytes arrive) where the transport can; else staged: the message
   * lands in staging memory (req.buf) and is reduced into stage_dst once
   * the receive completes (it must be stage_bytes long). */
  const struct moeccl_red* red;
  const void* operand;
  unsigned red_flags;
  void* stage_dst; /* NULL: nothing staged (or already reduced) */
  /* the op's length, which a staged message, or one whose row program the
   * executor runs, must have (the ranks agree on the call) */
  size_t stage_bytes;
  /* A receive consumed by a row program (MOECCL_OPF_ROWS): run on the
   * message, in place by the transport (consumed) or from buf once the
   * receive is done; rows is NULL once it ran. */
  const struct moeccl_rows* rows;
  void* rows_dst;
  const void* rows_aux;
  int consumed;
  /* the program writes or reads device memory: no transport runs it in
   * place (the consumer runs host code); the executor runs it from buf */
  int rows_device;
  /* An adding program (MOECCL_ROWS_ADD) runs after the one of the step's
   * previous adding receive, rows_after (NULL for the first), so that sums
   * come out the same run to run (the consumer's ready()). */
  const struct moeccl_xreq* rows_after;
  moeccl_comm_t* comm; /* whose communicator a consumer's failure fails */
} moeccl_xreq_t;

static inline void* moeccl_exec_buf(const moeccl_sched_t* s, uint32_t buf, uint64_t off) {
  return (char*)s->bufs[buf] + off;
}

static inline moeccl_mem_t moeccl_exec_mem(const moeccl_sched_t* s, uint32_t buf) {
  return s->mems ? s->mems[buf] : MOECCL_MEM_HOST_INIT;
}

/* The local-work table of an op's buffers (prepare checked it exists). */
static inline const moeccl_mem_ops_t* moeccl_exec_op_mem(const moeccl_sched_t* s, uint32_t buf) {
  return moeccl_mem_ops(moeccl_exec_mem(s, buf));
}

/* The table that works on buffers src and dst (copies, reductions, the
 * reduction's other operand being dst's): a device one where either side
 * is device memory (its members take either kind). */
static inline const moeccl_mem_ops_t* moeccl_exec_work_mem(const moeccl_sched_t* s, uint32_t dst,
                                                           uint32_t src) {
  return moeccl_exec_mem(s, src).kind != MOECCL_MEM_HOST ? moeccl_exec_op_mem(s, src)
                                                         : moeccl_exec_op_mem(s, dst);
}

/* local.c: the step's local ops [begin, end) and its messages to self;
 * mask names the transports a long op gives progress passes between its
 * pieces (0: none). */
static inline int moeccl_exec_is_local(const moeccl_sched_op_t* op) {
  return op->type == MOECCL_OP_COPY || op->type == MOECCL_OP_REDUCE || op->type == MOECCL_OP_ROWS;
}
moecclResult_t moeccl_exec_local_op(moeccl_job_t* j, unsigned mask, const moeccl_sched_op_t* op);
moecclResult_t moeccl_exec_self_ops(moeccl_job_t* j, int begin, int end, unsigned mask);
/* A kernel of table m returned rc: a failure fails the communicator. */
moecclResult_t moeccl_exec_kernel_done(moeccl_comm_t* c, const moeccl_mem_ops_t* m,
                                       moecclResult_t rc);

/* consume.c: a receive's consumer, and what the executor does with a
 * completed receive's message (staged reduction, row program). */
void moeccl_exec_consume_reduce(moeccl_xreq_t* x);
void moeccl_exec_consume_rows(moeccl_xreq_t* x);
int moeccl_exec_is_adding(const moeccl_xreq_t* x);
moecclResult_t moeccl_exec_finish_staged(moeccl_xreq_t* x);
moecclResult_t moeccl_exec_finish_rows(moeccl_xreq_t* x);

/* wait.c: waiting on the jobs' transports, and liveness. */
moecclResult_t moeccl_exec_progress_all(moeccl_job_t* jobs, int njobs, int* progressed, int arm);
void moeccl_exec_idle_wait(moeccl_job_t* jobs, int njobs);
moecclResult_t moeccl_exec_check_peers(moeccl_job_t* jobs, int njobs);
moecclResult_t moeccl_exec_timed_out(moeccl_job_t* jobs, int njobs);
int moeccl_exec_spin_limit(const moeccl_comm_t* c);

/* terms.c: one call's pinned memory for its row programs (the stream
 * path): the arena, and the flag the stream writes with seq once it
 * passed the call (moeccl_exec_terms_passed queues that write, after the
 * call's last operation).  take may wait, up to the communicator's
 * timeout, when the communicator's ring is in use by queued calls. */
#include "kernels/devkern.h"
typedef struct {
  moeccl_dev_arena_t arena;
  volatile uint64_t* flag;
  uint64_t seq;
} moeccl_term_use_t;
moecclResult_t moeccl_exec_terms_take(moeccl_comm_t* c, size_t bytes, moeccl_term_use_t* use);
moecclResult_t moeccl_exec_terms_passed(const moeccl_term_use_t* use, void* stream);

/* executor.c: the communicator's device scratch for s (lower.c too). */
moecclResult_t moeccl_exec_dev_scratch(moeccl_comm_t* c, moeccl_sched_t* s);

#endif
