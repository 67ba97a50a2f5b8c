/*
 * Device streams as a stream kind (stream.h): a call issued on a CUstream /
 * cudaStream_t (or an emulated stream, device/emu.c) is queued on it and
 * the caller gets control back at once, as with NCCL.  On the stream go two
 * operations:
 *   - a host function that hands the call's job to a library thread (one
 *     host stream per device stream, so the calls of one device stream run
 *     in its order and a call waiting for its communicator's turn never
 *     holds up another stream's);
 *   - a wait until the device stream's flag reaches the call's number.
 * The library thread runs the job (the call's tasks: the executor, its
 * copies on the library's copy stream), then writes the flag from the
 * host, which releases the user's stream.  So the call runs after the stream's
 * earlier work and before its later work, no kernel spins, nothing on the
 * device has to run for the stream to go on, and a failed call still
 * writes its flag (the error is the communicator's, and the stream kind's
 * query and synchronize report it).
 *
 * The flags are one block of pinned host memory that streams of every
 * device can wait on (device.h: host_flags).
 */
#include "exec/stream.h"

#include <pthread.h>
#include <stdlib.h>

#include "device/device.h"

#define FLAGS_MAX 512 /* device streams one process can use */

typedef struct {
  moecclStream_t stream; /* the user's device stream */
  moecclStream_t worker; /* a host stream: runs its calls in order */
  int index;             /* its flag */
  uint64_t issued;       /* calls queued on it */
  moecclResult_t error;  /* first failure since the last synchronize */
} dev_stream_t;

typedef struct {
  dev_stream_t* e;
  uint64_t value;
} dev_call_t;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static dev_stream_t entries[FLAGS_MAX];
static int nentries;
static uint64_t* flags; /* pinned host memory, FLAGS_MAX counters (zeroed) */

static moecclResult_t alloc_flags(const moeccl_device_ops_t* d) {
  void* p = NULL;
  moecclResult_t rc = d->host_flags(&p, FLAGS_MAX * sizeof(uint64_t));
  if (rc != moecclSuccess)
    return moeccl_error(NULL, rc, "device streams: no pinned host memory for their flags");
  flags = p;
  return moecclSuccess;
}

/* The entry of stream, made on first use (under lock). */
static moecclResult_t entry_of(moecclStream_t stream, dev_stream_t** out) {
  const moeccl_device_ops_t* d = moeccl_device();
  for (int i = 0; i < nentries; i++)
    if (entries[i].stream == stream) return *out = &entries[i], moecclSuccess;
  if (nentries == FLAGS_MAX)
    return moeccl_error(NULL, moecclInvalidUsage, "more than %d device streams used", FLAGS_MAX);
  if (!flags) MOECCL_CHECK(alloc_flags(d));
  dev_stream_t* e = &entries[nentries];
  *e = (dev_stream_t){.stream = stream, .index = nentries};
  MOECCL_CHECK(moecclHostStreamCreate(&e->worker));
  nentries++;
  return *out = e, moecclSuccess;
}

static dev_stream_t* find(moecclStream_t stream) {
  pthread_mutex_lock(&lock);
  dev_stream_t* e = NULL;
  for (int i = 0; i < nentries && !e; i++)
    if (entries[i].stream == stream) e = &entries[i];
  pthread_mutex_unlock(&lock);
  return e;
}

/* On the worker thread, after the call's job ran: release the stream. */
static void finished(void* arg, moecclResult_t rc) {
  dev_call_t* c = arg;
  dev_stream_t* e = c->e;
  if (rc != moecclSuccess) {
    pthread_mutex_lock(&lock);
    if (e->error == moecclSuccess) e->error = rc;
    pthread_mutex_unlock(&lock);
  }
  moeccl_device()->host_write(&flags[e->index], c->value);
  free(c);
}

/* The stream's host function: no driver call and no allocation here (CUDA
 * forbids the one, and the other could fail where nothing can report it). */
static void launch(void* arg) {
  moeccl_stream_work_t* w = arg;
  dev_call_t* c = moeccl_stream_work_arg(w);
  moeccl_host_stream_push(c->e->worker, w);
}

static moecclResult_t device_stream_enqueue(moecclStream_t stream, const moeccl_stream_job_t* job) {
  const moeccl_device_ops_t* d = moeccl_device();
  dev_call_t* c = malloc(sizeof(*c));
  pthread_mutex_lock(&lock);
  dev_stream_t* e = NULL;
  moecclResult_t rc = c ? entry_of(stream, &e) : moecclSystemError;
  if (rc == moecclSuccess) c->e = e, c->value = ++e->issued;
  pthread_mutex_unlock(&lock);
  moeccl_stream_work_t* w = rc == moecclSuccess ? moeccl_stream_work_new(job, finished, c) : NULL;
  if (!w) {
    if (rc == moecclSuccess) rc = moecclSystemError; /* the work dropped the job */
    else job->drop(job->arg);
    free(c);
    /* Its number is never written; the stream's later calls write theirs,
     * and each wait is for at least a call's own number. */
    return moeccl_error(NULL, rc, "device stream %p: cannot queue the call", stream);
  }
  /* c belongs to the call from here: its thread may free it at any time */
  uint64_t value = c->value;
  volatile uint64_t* flag = &flags[e->index];
  rc = d->host_fn(stream, launch, w);
  if (rc != moecclSuccess) {
    /* Not on the stream: run it unordered, so that its tickets retire and
     * the peers are not left waiting, and say so. */
    moeccl_host_stream_push(e->worker, w);
    return moeccl_error(NULL, rc,
                        "device stream %p: the call could not be queued on it (%s), so it ran "
                        "unordered; is it a live stream of this process's device backend?",
                        stream, moecclGetErrorString(rc));
  }
  rc = d->wait_value(stream, flag, value);
  if (rc != moecclSuccess)
    return moeccl_error(NULL, rc,
                        "device stream %p: the wait after the call could not be queued (%s): "
                        "the stream's later work may run before the call is done",
                        stream, moecclGetErrorString(rc));
  return moecclSuccess;
}

static moecclResult_t device_stream_query(moecclStream_t stream) {
  moecclResult_t rc = moeccl_device()->query(stream);
  dev_stream_t* e = find(stream);
  if (rc == moecclSuccess && e) {
    pthread_mutex_lock(&lock);
    rc = e->error;
    pthread_mutex_unlock(&lock);
  }
  return rc;
}

static moecclResult_t device_stream_synchronize(moecclStream_t stream) {
  moecclResult_t rc = moeccl_device()->synchronize(stream);
  dev_stream_t* e = find(stream);
  if (e) {
    pthread_mutex_lock(&lock);
    if (rc == moecclSuccess) rc = e->error;
    e->error = moecclSuccess;
    pthread_mutex_unlock(&lock);
  }
  return rc;
}

const moeccl_stream_ops_t moeccl_device_stream_ops = {
    .name = "device",
    .enqueue = device_stream_enqueue,
    .query = device_stream_query,
    .synchronize = device_stream_synchronize,
};
