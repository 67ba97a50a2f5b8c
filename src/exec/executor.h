/* The executor: the only place that moves bytes.  It runs schedules over the
 * transports that init chose for each peer. */
#ifndef MOECCL_EXECUTOR_H_
#define MOECCL_EXECUTOR_H_

#include "comm/comm.h"
#include "sched/schedule.h"

/* One schedule to run on one communicator.  Jobs of different communicators
 * run concurrently, so a group spanning communicators cannot deadlock on the
 * order in which they are served. */
typedef struct {
  moeccl_comm_t* comm;
  moeccl_sched_t* sched;
  /* executor's */
  int step, first_req, nreqs, pending;
  int stream_copy; /* large operation: copies use streaming stores */
  int passes;      /* progress passes the current step's long local ops made */
} moeccl_job_t;

/* Whether this build can work on memory of kind m (the kind has a
 * local-work table) and move it to peer (-1: to every peer; this rank:
 * to none); else an error that names the buffer (what, buf).  The one rule
 * for both checks of buffer kinds: a call's buffers at the entry point
 * (enqueue.c, before anything is issued, so every rank refuses alike) and
 * a schedule's buffers and messages before the executor posts anything. */
moecclResult_t moeccl_mem_check(moeccl_comm_t* comm, moeccl_mem_t m, int peer, const char* what,
                                const void* buf);

/* Runs every job to completion.  The caller holds each job's comm->lock.  On
 * failure the failing communicator is marked broken (its async error) and
 * every job's queued requests are dropped. */
moecclResult_t moeccl_executor_run(moeccl_job_t* jobs, int njobs);

/* A device schedule (every buffer device memory; SEND, RECV and COPY ops
 * only; peers reached by one stream transport) lowered onto a device
 * stream (NULL: the legacy default stream): the transport queues the
 * messages (transport.h: lower_begin, lower_step) and the executor the
 * local copies between each step's two phases; the host waits for no
 * device work.  When it returns, the call is queued; the stream completes
 * it.  The caller holds comm->lock and has the call's turn. */
moecclResult_t moeccl_executor_lower(moeccl_comm_t* comm, moeccl_sched_t* sched, void* stream);

/* The pinned buffers of lowered calls' row programs (terms.c): calls that
 * took one, and times the host waited for the stream to free one (the
 * communicator's ring was in use by queued calls).  terms_free, at
 * destroy, once the streams have passed the communicator's work. */
void moeccl_exec_terms_stats(const moeccl_comm_t* comm, uint64_t* calls, uint64_t* waits);
void moeccl_exec_terms_free(moeccl_comm_t* comm);

#endif
