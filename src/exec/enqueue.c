/* Groups, point-to-point calls, and running captured tasks. */
#include "exec/enqueue.h"

#include "device/device.h"
#include "exec/executor.h"
#include "exec/stream.h"
#include "kernels/devkern.h"
#include "transport/transport.h"
#include "tune/tuner.h"

#include <stdlib.h>
#include <string.h>

static __thread int group_depth;
static __thread moeccl_task_list_t group_tasks;
static __thread moecclStream_t group_stream;
static __thread int group_has_stream;
static __thread int group_device; /* a call of the group has device buffers */

/* A call with device buffers on the NULL stream runs after the default
 * stream's work, which may still be writing its buffers (stream.h). */
static moecclResult_t default_stream_sync(moeccl_comm_t* comm) {
  moecclResult_t rc = moeccl_device()->synchronize(NULL);
  if (rc == moecclSuccess) return rc;
  return moeccl_error(comm, rc, "the default device stream failed before the call (%s)",
                      moecclGetErrorString(rc));
}

int moeccl_group_active(void) { return group_depth > 0; }

/* Lists take their tickets atomically, so two lists that share several
 * communicators are ordered the same way on all of them (no turn cycles). */
static pthread_mutex_t issue_lock = PTHREAD_MUTEX_INITIALIZER;

uint64_t moeccl_comm_issue(moeccl_comm_t* c, int n) {
  pthread_mutex_lock(&c->order_lock);
  uint64_t first = c->issue_ticket;
  c->issue_ticket += (uint64_t)n;
  c->pending += n;
  pthread_mutex_unlock(&c->order_lock);
  return first;
}

/* order_lock held. */
static void wait_order(moeccl_comm_t* c) {
  c->order_waiters++;
  pthread_cond_wait(&c->order_cond, &c->order_lock);
  c->order_waiters--;
}

void moeccl_comm_wait_turn(moeccl_comm_t* c, uint64_t ticket) {
  pthread_mutex_lock(&c->order_lock);
  while (c->exec_ticket != ticket) wait_order(c);
  pthread_mutex_unlock(&c->order_lock);
}

void moeccl_comm_issue_wait(moeccl_comm_t* c) {
  pthread_mutex_lock(&c->order_lock);
  uint64_t ticket = c->issue_ticket++;
  c->pending++;
  while (c->exec_ticket != ticket) wait_order(c);
  pthread_mutex_unlock(&c->order_lock);
}

void moeccl_comm_retire(moeccl_comm_t* c, int n) {
  pthread_mutex_lock(&c->order_lock);
  c->exec_ticket += (uint64_t)n;
  c->pending -= n;
  if (c->order_waiters) pthread_cond_broadcast(&c->order_cond);
  pthread_mutex_unlock(&c->order_lock);
}

void moeccl_comm_drain(moeccl_comm_t* c) {
  pthread_mutex_lock(&c->order_lock);
  while (c->pending > 0) wait_order(c);
  pthread_mutex_unlock(&c->order_lock);
}

void moeccl_tasks_issue(moeccl_task_list_t* list) {
  pthread_mutex_lock(&issue_lock);
  for (moeccl_task_t* t = list->head; t; t = t->next) t->ticket = moeccl_comm_issue(t->comm, 1);
  pthread_mutex_unlock(&issue_lock);
}

void moeccl_tasks_free(moeccl_task_list_t* list) {
  moeccl_task_t* t = list->head;
  while (t) {
    moeccl_task_t* next = t->next;
    free(t->counts);
    free(t->ops);
    free(t);
    t = next;
  }
  list->head = list->tail = NULL;
}

/* The task's call sees its own p2p ops (the array may have grown). */
static moeccl_call_t* task_call(moeccl_task_t* t) {
  if (t->call.kind == MOECCL_CALL_P2P) t->call.p2p = t->ops, t->call.np2p = t->nops;
  return &t->call;
}

static moecclResult_t task_plan(moeccl_task_t* t) {
  return moeccl_plan_build(t->comm, task_call(t), &t->choice, &t->comm->plan->sched);
}

/* The algorithm of a task, and whether its count exchange
 * (comm->plan->meta_sched) must run before task_plan. */
static moecclResult_t task_prepare(moeccl_task_t* t, int* need_meta) {
  moecclResult_t rc = moeccl_plan_prepare(t->comm, task_call(t), &t->choice);
  *need_meta = rc == moecclSuccess && t->choice.need_meta;
  return rc;
}

static int cmp_ptr(const void* a, const void* b) {
  uintptr_t x = (uintptr_t) * (void*const*)a, y = (uintptr_t) * (void*const*)b;
  return x < y ? -1 : x > y;
}

/* Distinct communicators of the list, sorted (lock order). */
static int list_comms(const moeccl_task_list_t* list, moeccl_comm_t*** out) {
  int n = 0, cap = 0;
  moeccl_comm_t** comms = NULL;
  for (moeccl_task_t* t = list->head; t; t = t->next) {
    int seen = 0;
    for (int i = 0; i < n && !seen; i++) seen = comms[i] == t->comm;
    if (seen) continue;
    if (n == cap) {
      cap = cap ? 2 * cap : 4;
      moeccl_comm_t** p = realloc(comms, sizeof(*p) * (size_t)cap);
      if (!p) return free(comms), -1;
      comms = p;
    }
    comms[n++] = t->comm;
  }
  qsort(comms, (size_t)n, sizeof(*comms), cmp_ptr);
  *out = comms;
  return n;
}

/* Round k runs the k-th task of every communicator together. */
static moecclResult_t run_rounds(moeccl_task_list_t* list, moeccl_comm_t** comms, int ncomms) {
  moeccl_job_t* jobs = calloc((size_t)ncomms, sizeof(*jobs));
  moeccl_task_t** cursor = calloc((size_t)ncomms, sizeof(*cursor));
  moecclResult_t rc = jobs && cursor ? moecclSuccess : moecclSystemError;
  for (int i = 0; i < ncomms; i++)
    for (cursor[i] = list->head; cursor[i] && cursor[i]->comm != comms[i];)
      cursor[i] = cursor[i]->next;
  while (rc == moecclSuccess) {
    /* Count exchanges of this round's v-calls first, all together. */
    int njobs = 0;
    for (int i = 0; i < ncomms && rc == moecclSuccess; i++) {
      int meta = 0;
      if (cursor[i]) rc = task_prepare(cursor[i], &meta);
      if (meta)
        jobs[njobs++] = (moeccl_job_t){.comm = comms[i], .sched = &comms[i]->plan->meta_sched};
    }
    if (rc == moecclSuccess && njobs) rc = moeccl_executor_run(jobs, njobs);
    njobs = 0;
    for (int i = 0; i < ncomms && rc == moecclSuccess; i++) {
      moeccl_task_t* t = cursor[i];
      if (!t) continue;
      rc = task_plan(t);
      jobs[njobs++] = (moeccl_job_t){.comm = t->comm, .sched = &t->comm->plan->sched};
      do cursor[i] = cursor[i]->next;
      while (cursor[i] && cursor[i]->comm != comms[i]);
    }
    if (njobs == 0 || rc != moecclSuccess) break;
    rc = moeccl_executor_run(jobs, njobs);
  }
  /* The list's calls passed their checks on every rank (usage errors are
   * caught before this), so the peers posted their side of work this rank
   * will not do: the communicators cannot go on matching messages in order. */
  for (int i = 0; rc != moecclSuccess && i < ncomms; i++)
    moeccl_comm_fail(comms[i], rc, "a group stopped part way (%s); abort the communicator",
                     moecclGetErrorString(rc));
  free(jobs);
  free(cursor);
  return rc;
}

void moeccl_tasks_abandon(moeccl_task_list_t* list) {
  for (moeccl_task_t* t = list->head; t; t = t->next) {
    moeccl_comm_wait_turn(t->comm, t->ticket);
    moeccl_comm_retire(t->comm, 1);
  }
  moeccl_tasks_free(list);
}

/* The comm's first ticket in the list and how many tasks it has there. */
static uint64_t first_ticket(const moeccl_task_list_t* list, moeccl_comm_t* c, int* count) {
  uint64_t first = UINT64_MAX;
  *count = 0;
  for (moeccl_task_t* t = list->head; t; t = t->next)
    if (t->comm == c) first = t->ticket < first ? t->ticket : first, (*count)++;
  return first;
}

static void retire_all(const moeccl_task_list_t* list, moeccl_comm_t** comms, int n) {
  for (int i = 0; i < n; i++) {
    int count;
    first_ticket(list, comms[i], &count);
    moeccl_comm_retire(comms[i], count);
  }
}

moecclResult_t moeccl_tasks_run(moeccl_task_list_t* list) {
  if (!list->head) return moecclSuccess;
  moeccl_comm_t** comms = NULL;
  int n = list_comms(list, &comms);
  if (n < 0) {
    moeccl_tasks_abandon(list);
    return moecclSystemError;
  }
  /* Usage errors found before anything is posted leave every communicator
   * usable. */
  for (moeccl_task_t* t = list->head; t; t = t->next) {
    moecclResult_t bad = t->call.kind == MOECCL_CALL_P2P
                             ? moeccl_plan_p2p_check(t->comm, task_call(t))
                             : moecclSuccess;
    if (bad != moecclSuccess) {
      free(comms);
      moeccl_tasks_abandon(list);
      return bad;
    }
  }
  for (int i = 0; i < n; i++) {
    int count;
    moeccl_comm_wait_turn(comms[i], first_ticket(list, comms[i], &count));
  }
  for (int i = 0; i < n; i++) pthread_mutex_lock(&comms[i]->lock);
  moecclResult_t rc = run_rounds(list, comms, n);
  for (int i = n - 1; i >= 0; i--) pthread_mutex_unlock(&comms[i]->lock);
  retire_all(list, comms, n);
  free(comms);
  moeccl_tasks_free(list);
  return rc;
}

/* A prepared call's count exchange (host memory: the host transports),
 * then its schedule in comm->plan->sched.  Every rank passed the argument
 * checks, so the peers go on to the call: a rank that cannot plan it (no
 * memory) must not stay usable. */
static moecclResult_t plan_call(moeccl_comm_t* c, moeccl_call_t* call,
                                const moeccl_choice_t* choice) {
  moecclResult_t rc = moecclSuccess;
  if (choice->need_meta) {
    moeccl_job_t job = {.comm = c, .sched = &c->plan->meta_sched};
    rc = moeccl_executor_run(&job, 1);
  }
  if (rc == moecclSuccess) {
    rc = moeccl_plan_build(c, call, choice, &c->plan->sched);
    if (rc != moecclSuccess)
      moeccl_comm_fail(c, rc,
                       "planning failed after the call was issued on every rank; abort "
                       "the communicator");
  }
  return rc;
}

/* ---- device calls lowered onto their stream -------------------------------- */

/* Whether buf is device memory (NULL counts as such: a buffer a rank does
 * not use, as a Scatter's sendbuff off the root). */
static int on_device(const void* buf) {
  return !buf || moeccl_mem_of(buf).kind == MOECCL_MEM_DEVICE;
}

/* Whether every rank of the call can be reached by a stream transport:
 * peers = -1, all of them; otherwise just that one. */
static int stream_reach(const moeccl_comm_t* comm, int peer) {
  if (peer >= 0) return peer == comm->rank || moeccl_peer_stream_transport(comm, peer) >= 0;
  for (int p = 0; p < comm->nranks; p++)
    if (p != comm->rank && moeccl_peer_stream_transport(comm, p) < 0) return 0;
  return 1;
}

/* Whether a collective's reduction can run on the stream: the device's
 * kernels are loaded (every rank has the same build and kind of device),
 * and a PreMulSum's moecclScalarDevice scalar, if any, is device memory
 * of the buffers' device, which the kernels read as the stream reaches
 * them (lower_one).  One elsewhere is read when the call runs, so the host
 * path takes it: it runs the call when the stream gets there. */
static int reduction_lowerable(const moeccl_call_t* call) {
  if (!call->coll.reduce) return 1;
  if (call->scalar_ptr) { /* device memory of the buffers' device (the kernels run there) */
    moeccl_mem_t s = moeccl_mem_of(call->scalar_ptr);
    moeccl_mem_t b = moeccl_mem_of(call->sendbuf ? call->sendbuf : call->recvbuf);
    if (s.kind != MOECCL_MEM_DEVICE || s.device != b.device) return 0;
  }
  return moeccl_devkern_ready();
}

/* Whether a MoE call's schedule runs on the stream: the dispatch, the
 * combine and both backward calls on the flat path (one node), with the
 * device's row kernels; weights in host memory are copied at enqueue.  The
 * combine backward's dot products read the forward's expert rows and write
 * the gate gradients where they lie: both must be device memory (NULL: a
 * rank without rows or tokens); in host memory (the API's older contract)
 * the host path runs it. */
static int moe_lowerable(const moeccl_call_t* call) {
  const moeccl_moe_call_t* m = &call->moe;
  if (m->op == MOECCL_MOE_COMBINE_BACKWARD &&
      (!on_device(m->expert_out) || !on_device(m->grad_weights)))
    return 0;
  return !m->hier && moeccl_devkern_ready();
}

/* Whether a call goes to the stream path (docs/ARCHITECTURE.md): its
 * buffers are all device memory (the caller found one that is), its stream is NULL (the legacy
 * default stream) or a device stream, it moves bytes (all-to-all, send/recv, AllGather,
 * Broadcast, Gather, Scatter), reduces (AllReduce, ReduceScatter, Reduce: kernels on the
 * stream) or is a MoE call moe_lowerable takes, and a stream transport reaches its peers.
 * Every rank decides alike for a call whose ranks all pass device buffers, as NCCL
 * requires. */
static int lowerable(const moeccl_comm_t* comm, const moeccl_call_t* call, moecclStream_t stream) {
  if (stream && moeccl_host_stream_valid(stream)) return 0;
  if (!moeccl_device()) return 0;
  switch (call->kind) {
    case MOECCL_CALL_A2A:
      return on_device(call->sendbuf) && on_device(call->recvbuf) && stream_reach(comm, -1);
    case MOECCL_CALL_COLL: /* a Gather's recvbuff or a Scatter's sendbuff may be NULL off the root
                            */
      return reduction_lowerable(call) && on_device(call->sendbuf) &&
             on_device(call->recvbuf) && stream_reach(comm, -1);
    case MOECCL_CALL_P2P:
      for (int i = 0; i < call->np2p; i++)
        if (!call->p2p[i].buf || !on_device(call->p2p[i].buf) ||
            !stream_reach(comm, call->p2p[i].peer))
          return 0;
      return call->np2p > 0;
    case MOECCL_CALL_MOE:
      return moe_lowerable(call) && on_device(call->sendbuf) && on_device(call->recvbuf) &&
             stream_reach(comm, -1);
    default: return 0;
  }
}

/* The algorithm of a lowered call: the one forced by the environment, else
 * direct (one step: every message of the call between one pair of flag
 * rounds, which is what the copy engines want on one node). */
static moecclResult_t lower_prepare(moeccl_comm_t* c, const moeccl_call_t* call,
                                    moeccl_choice_t* choice) {
  *choice = (moeccl_choice_t){0, 0};
  const moeccl_forced_t* forced = moeccl_tuner_forced(c);
  if (call->kind == MOECCL_CALL_A2A && forced->algo < 0) {
    choice->algo = MOECCL_A2A_DIRECT;
    return moecclSuccess;
  }
  if (call->kind == MOECCL_CALL_COLL && forced->coll[call->coll.kind] < 0) {
    choice->algo = MOECCL_COLL_DIRECT;
    return moecclSuccess;
  }
  return moeccl_plan_prepare(c, call, choice);
}

/* Plans one call and queues it on stream (the caller has the call's turn
 * and holds comm->lock). */
static moecclResult_t lower_one(moeccl_comm_t* c, moeccl_call_t* call, moecclStream_t stream) {
  moeccl_choice_t choice;
  /* a device scalar: the kernels read it when the stream reaches them (the
   * planner then does not read it) */
  if (call->kind == MOECCL_CALL_COLL && call->coll.reduce && call->scalar_ptr)
    moeccl_red_set_premul_device(&call->red, call->scalar_ptr);
  moecclResult_t rc = lower_prepare(c, call, &choice);
  if (rc == moecclSuccess) rc = plan_call(c, call, &choice);
  if (rc == moecclSuccess) rc = moeccl_executor_lower(c, &c->plan->sched, stream);
  return rc;
}

/* A call queued on its stream now, from the calling thread. */
static moecclResult_t call_lower_now(moeccl_comm_t* c, moeccl_call_t* call, moecclStream_t stream) {
  moeccl_comm_issue_wait(c);
  pthread_mutex_lock(&c->lock);
  moecclResult_t rc = lower_one(c, call, stream);
  pthread_mutex_unlock(&c->lock);
  moeccl_comm_retire(c, 1);
  return rc;
}

/* Whether a group's tasks all go to the stream path: one communicator (so
 * no two ranks can lower a group's communicators in different orders),
 * every task lowerable. */
static int list_lowerable(const moeccl_task_list_t* list, moecclStream_t stream) {
  for (moeccl_task_t* t = list->head; t; t = t->next)
    if (t->comm != list->head->comm || !lowerable(t->comm, task_call(t), stream)) return 0;
  return list->head != NULL;
}

/* Lowers a group's issued tasks onto stream, in order, then frees them. */
static moecclResult_t tasks_lower(moeccl_task_list_t* list, moecclStream_t stream) {
  moeccl_comm_t* c = list->head->comm;
  moecclResult_t rc = moecclSuccess;
  for (moeccl_task_t* t = list->head; t && rc == moecclSuccess; t = t->next)
    if (t->call.kind == MOECCL_CALL_P2P) rc = moeccl_plan_p2p_check(c, task_call(t));
  if (rc != moecclSuccess) { /* nothing was queued: the communicator stays usable */
    moeccl_tasks_abandon(list);
    return rc;
  }
  int n = 0;
  uint64_t first = list->head->ticket;
  for (moeccl_task_t* t = list->head; t; t = t->next) n++;
  moeccl_comm_wait_turn(c, first);
  pthread_mutex_lock(&c->lock);
  for (moeccl_task_t* t = list->head; t && rc == moecclSuccess; t = t->next)
    rc = lower_one(c, task_call(t), stream);
  pthread_mutex_unlock(&c->lock);
  moeccl_comm_retire(c, n);
  moeccl_tasks_free(list);
  return rc;
}

static void list_append(moeccl_task_list_t* list, moeccl_task_t* t) {
  t->next = NULL;
  if (list->tail) list->tail->next = t;
  else list->head = t;
  list->tail = t;
}

/* A stream job's task list (stream.h), from its first task. */
static moeccl_task_list_t job_list(void* head) {
  moeccl_task_list_t list = {head, head};
  while (list.tail && list.tail->next) list.tail = list.tail->next;
  return list;
}

static moecclResult_t job_run(void* head) {
  moeccl_task_list_t list = job_list(head);
  return moeccl_tasks_run(&list);
}

static void job_drop(void* head) {
  moeccl_task_list_t list = job_list(head);
  moeccl_tasks_abandon(&list);
}

/* Queues issued tasks on a stream through its kind's ops table, as a job
 * that runs them (or abandons them where they cannot be queued). */
static moecclResult_t enqueue_on(moecclStream_t stream, moeccl_task_list_t* list) {
  const moeccl_stream_ops_t* kind = moeccl_stream_kind(stream);
  if (!kind) { /* checked at the entry point; destroyed since? */
    moeccl_tasks_abandon(list);
    return moeccl_error(NULL, moecclInvalidArgument, "stream %p is no longer a live stream",
                        stream);
  }
  moeccl_stream_job_t job = {job_run, job_drop, list->head};
  list->head = list->tail = NULL;
  return kind->enqueue(stream, &job);
}

moecclResult_t moeccl_task_submit(moeccl_task_t* t, moecclStream_t stream) {
  if (group_depth > 0) {
    if (group_has_stream && group_stream != stream) {
      moeccl_task_list_t one = {t, t};
      moeccl_tasks_free(&one);
      return moeccl_error(t->comm, moecclInvalidUsage,
                          "all operations of a group must use the same stream");
    }
    group_stream = stream;
    group_has_stream = 1;
    list_append(&group_tasks, t);
    return moecclSuccess;
  }
  moeccl_task_list_t list = {NULL, NULL};
  list_append(&list, t);
  moeccl_tasks_issue(&list);
  if (stream) return enqueue_on(stream, &list);
  return moeccl_tasks_run(&list);
}

MOECCL_EXPORT moecclResult_t moecclGroupStart(void) {
  group_depth++;
  return moecclSuccess;
}

MOECCL_EXPORT moecclResult_t moecclGroupEnd(void) {
  if (group_depth == 0)
    return moeccl_error(NULL, moecclInvalidUsage, "moecclGroupEnd without moecclGroupStart");
  if (--group_depth > 0) return moecclSuccess;
  moeccl_task_list_t list = group_tasks;
  group_tasks.head = group_tasks.tail = NULL;
  moecclStream_t stream = group_stream;
  group_has_stream = 0;
  group_stream = NULL;
  int device = group_device;
  group_device = 0;
  if (device && list_lowerable(&list, stream)) {
    moeccl_tasks_issue(&list);
    return tasks_lower(&list, stream);
  }
  if (!stream && device) { /* as one call with device buffers on the NULL stream */
    moecclResult_t rc = default_stream_sync(NULL);
    if (rc != moecclSuccess) {
      moeccl_tasks_free(&list); /* no ticket taken yet: the peers' calls fail on theirs */
      return rc;
    }
  }
  moeccl_tasks_issue(&list);
  if (stream) return enqueue_on(stream, &list);
  return moeccl_tasks_run(&list);
}

/* Appends to the group's newest task on comm if it is a P2P task, so all the
 * group's sends and receives on a communicator run as one step. */
static moeccl_task_t* p2p_task(moeccl_comm_t* comm, int* is_new) {
  moeccl_task_t* last = NULL;
  for (moeccl_task_t* t = group_tasks.head; group_depth > 0 && t; t = t->next)
    if (t->comm == comm) last = t;
  *is_new = !(last && last->call.kind == MOECCL_CALL_P2P);
  if (!*is_new) return last;
  moeccl_task_t* t = calloc(1, sizeof(*t));
  if (t) {
    t->comm = comm;
    t->call.kind = MOECCL_CALL_P2P;
  }
  return t;
}

static moecclResult_t p2p_check(moeccl_comm_t* comm, const void* buf, const char* bufname,
                                size_t count, moecclDataType_t type, int peer,
                                moecclStream_t stream, const char* fn) {
  MOECCL_CHECK(moeccl_comm_check(comm, "comm"));
  size_t size = moeccl_type_size(type);
  if (size == 0)
    return moeccl_error(comm, moecclInvalidArgument, "%s: datatype %d is invalid", fn, (int)type);
  if (peer < 0 || peer >= comm->nranks)
    return moeccl_error(comm, moecclInvalidArgument, "%s: peer %d out of range [0,%d)", fn, peer,
                        comm->nranks);
  if (count > SIZE_MAX / size)
    return moeccl_error(comm, moecclInvalidArgument, "%s: count %zu times datatype size overflows",
                        fn, count);
  if (!buf && count > 0)
    return moeccl_error(comm, moecclInvalidArgument, "%s: %s is NULL with count %zu", fn, bufname,
                        count);
  return moeccl_stream_check(comm, stream);
}

static moecclResult_t p2p_issue(moeccl_comm_t* comm, int type, void* buf, size_t bytes, int peer,
                                moecclStream_t stream) {
  if (bytes == 0) return moecclSuccess; /* nothing to match: the peer skips it too */
  if (moeccl_mem_of(buf).kind == MOECCL_MEM_DEVICE) {
    moeccl_p2p_op_t one = {type, peer, buf, bytes};
    moeccl_call_t call = {.kind = MOECCL_CALL_P2P, .p2p = &one, .np2p = 1};
    if (moeccl_group_active()) group_device = 1;
    else if (lowerable(comm, &call, stream)) {
      MOECCL_CHECK(moeccl_plan_p2p_check(comm, &call));
      return call_lower_now(comm, &call, stream);
    } else if (!stream) MOECCL_CHECK(default_stream_sync(comm));
  }
  int is_new;
  moeccl_task_t* t = p2p_task(comm, &is_new);
  if (!t) return moeccl_error(comm, moecclSystemError, "out of memory");
  if (t->nops == t->ops_cap) {
    int cap = t->ops_cap ? 2 * t->ops_cap : 8;
    moeccl_p2p_op_t* ops = realloc(t->ops, sizeof(*ops) * (size_t)cap);
    if (!ops) {
      if (is_new) free(t);
      return moeccl_error(comm, moecclSystemError, "out of memory");
    }
    t->ops = ops;
    t->ops_cap = cap;
  }
  t->ops[t->nops++] = (moeccl_p2p_op_t){type, peer, buf, bytes};
  return is_new ? moeccl_task_submit(t, stream) : moecclSuccess;
}

MOECCL_EXPORT moecclResult_t moecclSend(const void* sendbuff, size_t count,
                                        moecclDataType_t datatype, int peer, moecclComm_t comm,
                                        moecclStream_t stream) {
  moecclResult_t rc =
      p2p_check(comm, sendbuff, "sendbuff", count, datatype, peer, stream, "moecclSend");
  if (rc == moecclSuccess)
    rc = p2p_issue(comm, MOECCL_OP_SEND, (void*)sendbuff, count * moeccl_type_size(datatype), peer,
                   stream);
  return rc;
}

MOECCL_EXPORT moecclResult_t moecclRecv(void* recvbuff, size_t count, moecclDataType_t datatype,
                                        int peer, moecclComm_t comm, moecclStream_t stream) {
  moecclResult_t rc =
      p2p_check(comm, recvbuff, "recvbuff", count, datatype, peer, stream, "moecclRecv");
  if (rc == moecclSuccess)
    rc =
        p2p_issue(comm, MOECCL_OP_RECV, recvbuff, count * moeccl_type_size(datatype), peer, stream);
  return rc;
}

/* ---- collective calls ------------------------------------------------------ */

/* Runs one call now, on the calling thread. */
static moecclResult_t call_run_now(moeccl_comm_t* c, moeccl_call_t* call) {
  moeccl_choice_t choice;
  moeccl_comm_issue_wait(c);
  pthread_mutex_lock(&c->lock);
  moecclResult_t rc = moeccl_plan_prepare(c, call, &choice);
  if (rc == moecclSuccess) rc = plan_call(c, call, &choice);
  if (rc == moecclSuccess) {
    moeccl_job_t job = {.comm = c, .sched = &c->plan->sched};
    rc = moeccl_executor_run(&job, 1);
  }
  pthread_mutex_unlock(&c->lock);
  moeccl_comm_retire(c, 1);
  return rc;
}

/* Captures the call for a group or a host stream; v arrays are copied. */
static moecclResult_t call_defer(moeccl_comm_t* c, const moeccl_call_t* call,
                                 moecclStream_t stream) {
  moeccl_task_t* t = calloc(1, sizeof(*t));
  if (!t) return moeccl_error(c, moecclSystemError, "out of memory");
  t->comm = c;
  t->call = *call;
  const moeccl_a2a_desc_t* d = &call->a2a;
  if (call->kind == MOECCL_CALL_A2A && d->send_counts) {
    size_t n = (size_t)c->nranks;
    t->counts = malloc(4 * n * sizeof(size_t));
    if (!t->counts) return free(t), moeccl_error(c, moecclSystemError, "out of memory");
    memcpy(t->counts, d->send_counts, n * sizeof(size_t));
    memcpy(t->counts + n, d->send_displs, n * sizeof(size_t));
    memcpy(t->counts + 2 * n, d->recv_counts, n * sizeof(size_t));
    memcpy(t->counts + 3 * n, d->recv_displs, n * sizeof(size_t));
    t->call.a2a.send_counts = t->counts;
    t->call.a2a.send_displs = t->counts + n;
    t->call.a2a.recv_counts = t->counts + 2 * n;
    t->call.a2a.recv_displs = t->counts + 3 * n;
  }
  return moeccl_task_submit(t, stream);
}

/* A buffer of a memory kind this build cannot operate on, or that no
 * transport moves to the peers, is refused before anything is issued (the
 * communicator stays usable; the rule is the executor's, executor.h);
 * host_only: the library reads it on the host (the MoE calls' weights,
 * expert rows and gate gradients of a call on host buffers, whose
 * schedule runs host kernels on them). */
static moecclResult_t check_kind(moeccl_comm_t* comm, const void* buf, const char* what,
                                 int host_only, int all_peers, int* device) {
  if (!buf) return moecclSuccess;
  moeccl_mem_t m = moeccl_mem_of(buf);
  if (m.kind == MOECCL_MEM_DEVICE) *device = 1;
  if (host_only && m.kind != MOECCL_MEM_HOST)
    return moeccl_error(comm, moecclInvalidArgument,
                        "%s %p is %s memory (device %d), but the call's token and row buffers "
                        "are host memory, where its kernels run: pass host memory",
                        what, buf, moeccl_mem_name(m), m.device);
  /* A collective may send a device buffer to every peer: each must be
   * reachable with it (same node), or every rank refuses alike here
   * rather than failing the communicator in the executor.  Host memory
   * every transport moves. */
  int peer = all_peers && m.kind == MOECCL_MEM_DEVICE ? -1 : comm->rank;
  return moeccl_mem_check(comm, m, peer, what, buf);
}

/* Whether any buffer of the call is device memory (*device). */
static moecclResult_t check_kinds(moeccl_comm_t* comm, const moeccl_call_t* call, int* device) {
  *device = 0;
  MOECCL_CHECK(check_kind(comm, call->sendbuf, "sendbuff", 0, 1, device));
  MOECCL_CHECK(check_kind(comm, call->recvbuf, "recvbuff", 0, 1, device));
  for (int i = 0; i < call->np2p; i++) /* the executor checks the peer of each */
    MOECCL_CHECK(check_kind(comm, call->p2p[i].buf, "buffer", 0, 0, device));
  if (call->kind == MOECCL_CALL_MOE) {
    /* the MoE calls' other buffers: in device memory only beside device
     * token and row buffers (whose memory kind the schedule gives them) */
    int host_only = !*device;
    MOECCL_CHECK(check_kind(comm, call->moe.weights, "weights", host_only, 0, device));
    MOECCL_CHECK(check_kind(comm, call->moe.expert_out, "expertRows", host_only, 0, device));
    MOECCL_CHECK(check_kind(comm, call->moe.grad_weights, "gradWeights", host_only, 0, device));
  }
  return moecclSuccess;
}

moecclResult_t moeccl_call_issue(moeccl_comm_t* comm, moeccl_call_t* call,
                                 moecclStream_t stream) {
  int device;
  MOECCL_CHECK(check_kinds(comm, call, &device));
  if (moeccl_group_active()) group_device |= device;
  if (device && !moeccl_group_active() && lowerable(comm, call, stream))
    return call_lower_now(comm, call, stream);
  if (stream || moeccl_group_active()) return call_defer(comm, call, stream);
  /* Device buffers, NULL stream (stream.h): after the default stream's
   * work, which may still be writing sendbuff. */
  if (device) MOECCL_CHECK(default_stream_sync(comm));
  return call_run_now(comm, call);
}
