/*
 * Streams: where an operation's work is queued, as an ops table per kind
 * (like a transport).  The kind of a moecclStream_t argument is found from
 * the pointer (stream.c):
 *   NULL           no stream: the call runs on the calling thread and
 *                  returns when this rank's part is done.  With device
 *                  buffers it first waits for the device's default stream
 *                  (CUDA's legacy stream), whose work may still be writing
 *                  them, as NCCL orders a call after that stream's work;
 *                  unlike NCCL it returns only when done (enqueue.c).
 *   a host stream  moecclHostStreamCreate's: an in-order queue served by
 *                  one library thread (hoststream.c, over base/queue.h).
 *   anything else  where the process has a device backend: a device stream
 *                  (a CUstream / cudaStream_t, or the emulation's): the
 *                  call is queued on it and returns at once; when the
 *                  stream gets there, a library thread runs it while the
 *                  stream waits on a flag the thread then writes, so it is
 *                  ordered after the stream's earlier work and before its
 *                  later work, and no kernel spins (devstream.c).  Without
 *                  a backend it is refused, and so is a pointer the
 *                  backend knows is none of its streams (stream_valid).
 * A stream kind takes a job (what to run, as a callback: the streams know
 * nothing of tasks, enqueue.c makes the jobs) to run after what it already
 * holds, in order, and reports and waits for its work.
 */
#ifndef MOECCL_STREAM_H_
#define MOECCL_STREAM_H_

#include "comm/comm.h"

/* Work queued on a stream: exactly one of run(arg), when the stream gets
 * to it (on a library thread), or drop(arg), when it cannot be queued (so
 * that what it holds is released: issued tasks retire their tickets). */
typedef struct {
  moecclResult_t (*run)(void* arg);
  void (*drop)(void* arg);
  void* arg;
} moeccl_stream_job_t;

typedef struct moeccl_stream_ops {
  const char* name;
  /* Takes the job to run after the stream's earlier work; on failure the
   * job is dropped. */
  moecclResult_t (*enqueue)(moecclStream_t stream, const moeccl_stream_job_t* job);
  /* moecclSuccess when everything queued is done, moecclInProgress while
   * some is not, else the first error since the last synchronize. */
  moecclResult_t (*query)(moecclStream_t stream);
  /* Waits for everything queued; returns (and clears) the first error. */
  moecclResult_t (*synchronize)(moecclStream_t stream);
} moeccl_stream_ops_t;

extern const moeccl_stream_ops_t moeccl_host_stream_ops;
extern const moeccl_stream_ops_t moeccl_device_stream_ops;

/* The kind of a non-NULL stream argument, or NULL when it is none this
 * build knows (not a live host stream, no device backend's stream). */
const moeccl_stream_ops_t* moeccl_stream_kind(moecclStream_t stream);
/* Checks a stream argument: NULL or a stream of a kind this build knows. */
moecclResult_t moeccl_stream_check(moeccl_comm_t* comm, moecclStream_t stream);

/* ---- host streams (hoststream.c) ---- */

int moeccl_host_stream_valid(moecclStream_t stream);
/* Work for a host stream, made where allocation may fail (NULL, and the
 * job dropped) and pushed where it may not (a device stream's host
 * function): done(arg, result) runs on the stream's thread once the job
 * ran. */
typedef struct moeccl_stream_work moeccl_stream_work_t;
moeccl_stream_work_t* moeccl_stream_work_new(const moeccl_stream_job_t* job,
                                             void (*done)(void*, moecclResult_t), void* arg);
void moeccl_host_stream_push(moecclStream_t stream, moeccl_stream_work_t* work);
/* The arg given to moeccl_stream_work_new. */
void* moeccl_stream_work_arg(const moeccl_stream_work_t* work);

#endif
