/*
 * The device seam.  Every call into a GPU driver is behind this ops table:
 * cuda.c implements it with the CUDA driver API, loaded with dlopen of
 * libcuda.so.1 (libmoeccl has no link-time CUDA dependency and runs where
 * there is no driver); emu.c implements it on the host for the test suite,
 * so the GPU transport's protocol and the stream semantics are tested on
 * machines without a GPU.  moeccl_device() returns the backend in use
 * (MOECCL_DEVICE: auto, cuda, emu or none).
 *
 * The semantics every backend keeps (CUDA's):
 *   - a stream runs its work in order; every *_async call and the waits,
 *     writes and host functions are queued and return at once;
 *   - wait_value makes the stream wait until the 64-bit flag at addr is at
 *     least value (the flag may be written by another stream or process);
 *     write_value writes the flag when the stream gets there;
 *   - memory from alloc is exportable: export_fd gives a POSIX file
 *     descriptor another process passes to import_fd (over a Unix socket)
 *     to map the same memory, until unimport;
 *   - no call spins a device: waiting is the stream's, not the caller's.
 */
#ifndef MOECCL_DEVICE_H_
#define MOECCL_DEVICE_H_

#include <stddef.h>
#include <stdint.h>

#include "moeccl.h"

#define MOECCL_IPC_HANDLE_BYTES 64

typedef struct moeccl_device_ops {
  const char* name;
  /* Devices this process sees (0 when none). */
  int (*count)(void);
  /* 1 with *device set when ptr is inside memory of this backend, else 0. */
  int (*pointer)(const void* ptr, int* device);
  /* The allocation that holds ptr: its base, size and an id no other
   * allocation of this process has had (a freed and reallocated range gets
   * a new one), so that a peer's cache of imported memory is never stale. */
  moecclResult_t (*range)(const void* ptr, void** base, size_t* bytes, uint64_t* id);
  /* Exportable device memory of at least bytes on device; free releases it. */
  moecclResult_t (*alloc)(void** ptr, size_t bytes, int device);
  moecclResult_t (*free)(void* ptr);
  /* A new descriptor of alloc's allocation at ptr (the caller closes it);
   * *bytes: its size. */
  moecclResult_t (*export_fd)(void* ptr, int* fd, size_t* bytes);
  /* Maps a peer's exported allocation (fd, bytes) on device into this
   * process; unimport unmaps it.  The descriptor stays the caller's. */
  moecclResult_t (*import_fd)(int fd, size_t bytes, int device, void** ptr);
  moecclResult_t (*unimport)(void* ptr, size_t bytes);
  /* Memory that export_fd cannot export (CUDA: cudaMalloc's, not VMM)
   * through a legacy IPC handle of MOECCL_IPC_HANDLE_BYTES: ipc_export
   * fills it for the allocation at base; ipc_import maps a peer's
   * (cached by the caller), ipc_close unmaps it. */
  moecclResult_t (*ipc_export)(void* base, void* handle);
  moecclResult_t (*ipc_import)(const void* handle, void** ptr);
  moecclResult_t (*ipc_close)(void* ptr);
  /* The device this thread works on (CUDA: the current context's; the
   * emulation: 0). */
  int (*current)(void);
  /* Streams. */
  moecclResult_t (*stream_create)(void** stream);
  /* 0 when stream is surely not a live stream of this backend (the
   * emulation knows its streams; CUDA cannot tell cheaply: 1). */
  int (*stream_valid)(const void* stream);
  moecclResult_t (*stream_destroy)(void* stream);
  moecclResult_t (*copy_async)(void* dst, const void* src, size_t bytes, void* stream);
  moecclResult_t (*wait_value)(void* stream, volatile uint64_t* addr, uint64_t value);
  /* Host memory for flags that streams of every device wait on and the host
   * writes (CUDA: pinned, mapped, portable); host_write stores a flag from
   * the host, so a waiting stream goes on without any device work (which a
   * single hardware queue, CUDA_DEVICE_MAX_CONNECTIONS=1, could hold up
   * behind the wait itself). */
  moecclResult_t (*host_flags)(void** ptr, size_t bytes);
  void (*host_write)(volatile uint64_t* addr, uint64_t value);
  moecclResult_t (*write_value)(void* stream, volatile uint64_t* addr, uint64_t value);
  moecclResult_t (*host_fn)(void* stream, void (*fn)(void*), void* arg);
  /* moecclSuccess when all queued work is done, moecclInProgress while some
   * is not, else the error that stopped the stream.  synchronize(NULL)
   * waits for the default stream (CUDA's legacy stream; the emulation has
   * none, so it returns at once). */
  moecclResult_t (*query)(void* stream);
  moecclResult_t (*synchronize)(void* stream);
} moeccl_device_ops_t;

extern const moeccl_device_ops_t moeccl_device_emu_ops;
#ifdef MOECCL_HAVE_CUDA
extern const moeccl_device_ops_t moeccl_device_cuda_ops;
/* Why the CUDA backend is not available (NULL when it is): no libcuda.so.1,
 * a missing symbol, cuInit's error. */
const char* moeccl_device_cuda_unavailable(void);
#endif

/* The backend of this process (MOECCL_DEVICE; auto: cuda when the driver
 * loads and sees a device, else none), NULL when none.  Chosen once. */
const moeccl_device_ops_t* moeccl_device(void);

/* dst = src through the backend's copy engine, done when it returns (a
 * stream of the library's, one per process, serialised).  Either side may
 * be device or host memory. */
moecclResult_t moeccl_device_copy(void* dst, const void* src, size_t bytes);

#endif
