/* The device backend of this process (device.h). */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "base/debug.h"
#include "device/device.h"
#include "base/param.h"

static pthread_once_t pick_once = PTHREAD_ONCE_INIT;
static const moeccl_device_ops_t* picked;
static const char* refused; /* why MOECCL_DEVICE=cuda, asked for by name, is not there */

static void pick(void) {
  const char* want = moeccl_param_device();
  if (!want || !*want) want = "auto";
  if (strcasecmp(want, "emu") == 0) {
    picked = &moeccl_device_emu_ops;
  } else if (strcasecmp(want, "cuda") == 0 || strcasecmp(want, "auto") == 0) {
#ifdef MOECCL_HAVE_CUDA
    const char* why = moeccl_device_cuda_unavailable();
    if (!why) picked = &moeccl_device_cuda_ops;
#else
    const char* why = "this build has no CUDA backend (configure found no cuda.h)";
#endif
    if (why && strcasecmp(want, "cuda") == 0) refused = why;
    if (why) INFO(INIT, "device: no CUDA backend: %s", why);
  }
  if (picked) INFO(INIT, "device: %s backend, %d device(s)", picked->name, picked->count());
}

const char* moeccl_device_refusal(void) {
  moeccl_device();
  return refused;
}

/* Every call asks (moeccl_mem_of per buffer): after the pick, one acquire
 * load instead of pthread_once. */
static atomic_int picked_ready;

const moeccl_device_ops_t* moeccl_device(void) {
  if (atomic_load_explicit(&picked_ready, memory_order_acquire)) return picked;
  pthread_once(&pick_once, pick);
  atomic_store_explicit(&picked_ready, 1, memory_order_release);
  return picked;
}

/* The library's copy stream: made on first use and never destroyed.  No
 * CUDA call may run from an exit-time handler: the driver may be torn down
 * before atexit handlers run (on an H200, cuStreamDestroy from such a
 * handler crashed nccl-tests at exit), and the process's end frees the
 * stream anyway. */
static pthread_mutex_t copy_lock = PTHREAD_MUTEX_INITIALIZER;
static void* copy_stream;

static pid_t copy_owner; /* a forked child inherits the pointer, not the stream */

moecclResult_t moeccl_device_run(moecclResult_t (*queue)(void* stream, void* arg), void* arg) {
  const moeccl_device_ops_t* d = moeccl_device();
  if (!d) return moecclInvalidUsage;
  pthread_mutex_lock(&copy_lock);
  moecclResult_t rc = moecclSuccess;
  if (copy_stream && copy_owner != getpid()) copy_stream = NULL; /* forked: make our own */
  if (!copy_stream) {
    rc = d->stream_create(&copy_stream);
    if (rc == moecclSuccess) {
      copy_owner = getpid();
    } else {
      copy_stream = NULL;
    }
  }
  if (rc == moecclSuccess) rc = queue(copy_stream, arg);
  if (rc == moecclSuccess) rc = d->synchronize(copy_stream);
  pthread_mutex_unlock(&copy_lock);
  return rc;
}

typedef struct {
  void* dst;
  const void* src;
  size_t bytes;
} copy_arg_t;

static moecclResult_t queue_copy(void* stream, void* arg) {
  copy_arg_t* c = arg;
  return moeccl_device()->copy_async(c->dst, c->src, c->bytes, stream);
}

moecclResult_t moeccl_device_copy(void* dst, const void* src, size_t bytes) {
  if (!moeccl_device()) return moecclInvalidUsage;
  if (!bytes) return moecclSuccess;
  copy_arg_t c = {dst, src, bytes};
  moecclResult_t rc = moeccl_device_run(queue_copy, &c);
  if (rc != moecclSuccess)
    WARN(INIT, "device: a copy of %zu bytes from %p to %p failed (%s)", bytes, src, dst,
         moecclGetErrorString(rc));
  return rc;
}
