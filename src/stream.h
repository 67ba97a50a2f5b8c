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
 * Anything else is refused in this build (no CUDA streams yet).  A stream
 * kind enqueues issued tasks (enqueue.h) to run after what it already
 * holds, in order, and reports and waits for its work.
 */
#ifndef MOECCL_STREAM_H_
#define MOECCL_STREAM_H_

#include "enqueue.h"

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

/* The kind of a non-NULL stream argument, or NULL when it is none this
 * build knows (not a live host stream). */
const moeccl_stream_ops_t* moeccl_stream_kind(moecclStream_t stream);

#endif
