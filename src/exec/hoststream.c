/*
 * Host streams: an in-order queue (base/queue.h) of jobs served by one
 * library thread, so host-memory operations can overlap the caller's
 * compute (the MoE layer overlaps expert compute with dispatch and
 * combine).  A job is a callback (stream.h): what it runs is the caller's
 * business.  A failed job does not stop the later ones; its error is
 * reported by the next query or synchronize, which clears it.
 */
#include "exec/stream.h"

#include <errno.h>
#include <stdlib.h>

#include "base/queue.h"

typedef struct moeccl_stream_work {
  moeccl_queue_item_t item; /* first: the queue's view of it */
  moeccl_stream_job_t job;
  void (*done)(void* arg, moecclResult_t rc); /* after the job ran (device streams) */
  void* done_arg;
} work_t;

/* A host stream is a bare queue: the handle is its address. */
static moeccl_queue_registry_t registry = MOECCL_QUEUE_REGISTRY_INIT;

int moeccl_host_stream_valid(moecclStream_t stream) { return moeccl_queue_live(&registry, stream); }

/* On the stream's thread; error (an earlier job's) does not hold it up. */
static moecclResult_t run_work(moeccl_queue_t* q, moeccl_queue_item_t* item, moecclResult_t error) {
  (void)q, (void)error;
  work_t* w = (work_t*)item;
  moecclResult_t rc = w->job.run(w->job.arg);
  if (w->done) w->done(w->done_arg, rc);
  free(w);
  return rc;
}

moeccl_stream_work_t* moeccl_stream_work_new(const moeccl_stream_job_t* job,
                                             void (*done)(void*, moecclResult_t), void* arg) {
  work_t* w = malloc(sizeof(*w));
  if (!w) {
    job->drop(job->arg);
    moeccl_error(NULL, moecclSystemError, "out of memory");
    return NULL;
  }
  *w = (work_t){.item.run = run_work, .job = *job, .done = done, .done_arg = arg};
  return w;
}

void* moeccl_stream_work_arg(const moeccl_stream_work_t* w) { return w->done_arg; }

void moeccl_host_stream_push(moecclStream_t stream, moeccl_stream_work_t* w) {
  moeccl_queue_push(stream, &w->item);
}

static moecclResult_t host_stream_enqueue(moecclStream_t stream, const moeccl_stream_job_t* job) {
  moeccl_stream_work_t* w = moeccl_stream_work_new(job, NULL, NULL);
  if (!w) return moecclSystemError;
  moeccl_host_stream_push(stream, w);
  return moecclSuccess;
}

MOECCL_EXPORT moecclResult_t moecclHostStreamCreate(moecclStream_t* stream) {
  if (!stream)
    return moeccl_error(NULL, moecclInvalidArgument, "moecclHostStreamCreate: stream is NULL");
  moeccl_queue_t* q;
  int err = moeccl_queue_new(sizeof(*q), &q);
  if (err == ENOMEM) return moeccl_error(NULL, moecclSystemError, "out of memory");
  if (err != 0)
    return moeccl_error(NULL, moecclSystemError, "moecclHostStreamCreate: cannot start a thread");
  moeccl_queue_register(&registry, q);
  *stream = q;
  return moecclSuccess;
}

static moecclResult_t check_stream(moecclStream_t stream, const char* fn) {
  if (!moeccl_host_stream_valid(stream))
    return moeccl_error(NULL, moecclInvalidArgument, "%s: stream %p is not a live host stream", fn,
                        stream);
  return moecclSuccess;
}

static moecclResult_t host_stream_synchronize(moecclStream_t stream) {
  return moeccl_queue_sync(stream, 1);
}

/* The error first: a failure is reported even while later jobs run. */
static moecclResult_t host_stream_query(moecclStream_t stream) {
  moecclResult_t rc = moeccl_queue_error(stream);
  return rc != moecclSuccess ? rc : moeccl_queue_query(stream);
}

const moeccl_stream_ops_t moeccl_host_stream_ops = {
    .name = "host",
    .enqueue = host_stream_enqueue,
    .query = host_stream_query,
    .synchronize = host_stream_synchronize,
};

MOECCL_EXPORT moecclResult_t moecclHostStreamSynchronize(moecclStream_t stream) {
  MOECCL_CHECK(check_stream(stream, "moecclHostStreamSynchronize"));
  return moeccl_host_stream_ops.synchronize(stream);
}

MOECCL_EXPORT moecclResult_t moecclHostStreamQuery(moecclStream_t stream) {
  MOECCL_CHECK(check_stream(stream, "moecclHostStreamQuery"));
  return moeccl_host_stream_ops.query(stream);
}

MOECCL_EXPORT moecclResult_t moecclHostStreamDestroy(moecclStream_t stream) {
  MOECCL_CHECK(check_stream(stream, "moecclHostStreamDestroy"));
  moecclResult_t rc = host_stream_synchronize(stream);
  moeccl_queue_stop(&registry, stream);
  moeccl_queue_free(stream);
  return rc;
}
