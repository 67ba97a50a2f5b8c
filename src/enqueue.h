/* Tasks: operations captured for later (inside a group or on a host stream),
 * and the one place that turns tasks into schedules and runs them. */
#ifndef MOECCL_ENQUEUE_H_
#define MOECCL_ENQUEUE_H_

#include "algos/algos.h"
#include "core.h"

typedef enum { MOECCL_TASK_A2A = 0, MOECCL_TASK_P2P = 1 } moeccl_task_kind_t;

typedef struct {
  int type; /* MOECCL_OP_SEND or MOECCL_OP_RECV */
  int peer;
  void* buf;
  size_t bytes;
} moeccl_p2p_op_t;

typedef struct moeccl_task {
  moeccl_comm_t* comm;
  int kind;
  /* A2A: the call's description; count arrays owned by the task (v) */
  const void* sendbuf;
  void* recvbuf;
  moeccl_a2a_desc_t desc;
  size_t* counts; /* 4*nranks: send counts, send displs, recv counts, recv displs */
  /* P2P: the group's sends and receives on this comm, in issue order */
  moeccl_p2p_op_t* ops;
  int nops, ops_cap;
  uint64_t ticket; /* issue order on comm */
  struct moeccl_task* next;
} moeccl_task_t;

typedef struct {
  moeccl_task_t *head, *tail;
} moeccl_task_list_t;

/* Takes the tasks' tickets (issue order) on their communicators. */
void moeccl_tasks_issue(moeccl_task_list_t* list);
/* Runs issued tasks (in order per communicator; communicators concurrently),
 * then retires and frees them.  Waits for each communicator's turn, then
 * locks it while it runs. */
moecclResult_t moeccl_tasks_run(moeccl_task_list_t* list);
void moeccl_tasks_free(moeccl_task_list_t* list);
/* Retires issued tasks without running them (they could not be queued), so
 * later operations and destroy do not wait for them; frees them. */
void moeccl_tasks_abandon(moeccl_task_list_t* list);

/* Hands a task to the current group, to a host stream, or runs it now. */
moecclResult_t moeccl_task_submit(moeccl_task_t* task, moecclStream_t stream);
/* Whether a group is open on this thread. */
int moeccl_group_active(void);

/* Plans one all-to-all into sched (the tuner picks the algorithm). */
/* An all-to-all is planned in two parts.  prepare picks the algorithm and,
 * when a v-call of it needs other ranks' counts (algos.h: meta), writes the
 * exchange of count rows into comm->meta_sched and sets *need_meta: run that
 * schedule first.  plan then writes the call's schedule into sched. */
moecclResult_t moeccl_a2a_prepare(moeccl_comm_t* comm, const moeccl_a2a_desc_t* desc,
                                  int* need_meta);
moecclResult_t moeccl_a2a_plan(moeccl_comm_t* comm, const moeccl_a2a_desc_t* desc,
                               const void* sendbuf, void* recvbuf, moeccl_sched_t* sched);
/* Whether a v-call of algo (desc->topo set) exchanges count rows first; the
 * tuner prices that exchange with it. */
#define MOECCL_META_ALL_MAX_RANKS 1024
int moeccl_a2a_needs_meta(const moeccl_a2a_algo_t* algo, const moeccl_a2a_desc_t* desc);

/* Checks a stream argument: NULL or a live host stream. */
moecclResult_t moeccl_stream_check(moeccl_comm_t* comm, moecclStream_t stream);
int moeccl_host_stream_valid(moecclStream_t stream);
moecclResult_t moeccl_host_stream_enqueue(moecclStream_t stream, moeccl_task_list_t* list);

#endif
