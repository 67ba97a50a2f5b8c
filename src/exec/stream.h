/*
 * Streams: where an operation's work is queued, as an ops table per kind
 * (like a transport).  The kind of a moecclStream_t argument is found from
 * the pointer:
 *   NULL           no stream: the call runs on the calling thread and
 *                  returns when this rank's part is done.  With device
 *                  buffers it first waits for the device's default stream
 *                  (CUDA's legacy stream), whose work may still be writing
 *                  them, as NCCL orders a call after that stream's work;
 *                  unlike NCCL it returns only when done (enqueue.c).
 *   a host stream  moecclHostStreamCreate's: an in-order queue served by
 *                  one library thread (hoststream.c).
 *   anything else  where the process has a device backend: a device stream
 *                  (a CUstream / cudaStream_t, or the emulation's): the
 *                  call is queued on it and returns at once; when the
 *                  stream gets there, a library thread runs it while the
 *                  stream waits on a flag the thread then writes, so it is
 *                  ordered after the stream's earlier work and before its
 *                  later work, and no kernel spins (devstream.c).  Without
 *                  a backend it is refused, and so is a pointer the
 *                  backend knows is none of its streams (stream_valid).  A stream
 * kind enqueues issued tasks (enqueue.h) to run after what it already
 * holds, in order, and reports and waits for its work.
 */
#ifndef MOECCL_STREAM_H_
#define MOECCL_STREAM_H_

#include "exec/enqueue.h"

typedef struct moeccl_stream_ops {
  const char* name;
  /* Takes the issued tasks (the list is emptied) to run after the stream's
   * earlier work; on failure the tasks are abandoned (retired). */
  moecclResult_t (*enqueue)(moecclStream_t stream, moeccl_task_list_t* list);
  /* moecclSuccess when everything queued is done, moecclInProgress while
   * some is not, else the first error since the last synchronize. */
  moecclResult_t (*query)(moecclStream_t stream);
  /* Waits for everything queued; returns (and clears) the first error. */
  moecclResult_t (*synchronize)(moecclStream_t stream);
} moeccl_stream_ops_t;

extern const moeccl_stream_ops_t moeccl_host_stream_ops;
extern const moeccl_stream_ops_t moeccl_device_stream_ops;

/* Work for a host stream, made where allocation may fail (the tasks are
 * taken from list, abandoned on failure: NULL) and pushed where it may not
 * (a device stream's host function): done(arg, result) runs on the stream's
 * thread once the tasks ran. */
typedef struct moeccl_stream_work moeccl_stream_work_t;
moeccl_stream_work_t* moeccl_stream_work_new(moeccl_task_list_t* list,
                                             void (*done)(void*, moecclResult_t), void* arg);
void moeccl_host_stream_push(moecclStream_t stream, moeccl_stream_work_t* work);
/* The arg given to moeccl_stream_work_new. */
void* moeccl_stream_work_arg(const moeccl_stream_work_t* work);

/* The kind of a non-NULL stream argument, or NULL when it is none this
 * build knows (not a live host stream). */
const moeccl_stream_ops_t* moeccl_stream_kind(moecclStream_t stream);

#endif
