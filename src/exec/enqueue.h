/* Tasks: operations captured for later (inside a group or on a host stream),
 * and the one place that turns tasks into schedules and runs them. */
#ifndef MOECCL_ENQUEUE_H_
#define MOECCL_ENQUEUE_H_

#include "comm/comm.h"
#include "exec/stream.h" /* the entry points check their stream argument */
#include "plan/plan.h"

/* A captured call: the call's description (count arrays and p2p ops owned
 * by the task), the algorithm prepare chose for it, its issue ticket. */
typedef struct moeccl_task {
  moeccl_comm_t* comm;
  moeccl_call_t call;
  moeccl_choice_t choice;
  size_t* counts; /* A2A v: 4*nranks: send counts, send displs, recv counts, recv displs */
  moeccl_p2p_op_t* ops; /* P2P: the group's sends and receives on this comm, in issue order */
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

/* Issues one collective call (A2A or COLL) of an entry point whose
 * arguments were checked: runs it now on the calling thread (NULL stream,
 * no group), or captures a copy of it (v arrays too) for the group or the
 * host stream.  The caller's call may change (planning reads a device
 * PreMulSum scalar into it), which saves a copy on every call. */
moecclResult_t moeccl_call_issue(moeccl_comm_t* comm, moeccl_call_t* call,
                                 moecclStream_t stream);

#endif
