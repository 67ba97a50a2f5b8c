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

/* One stream memory operation of a batch (mem_ops). */
typedef struct moeccl_dev_memop {
  volatile uint64_t* addr;
  uint64_t value;
  int wait; /* 1: wait until *addr >= value; 0: write value */
} moeccl_dev_memop_t;
#define MOECCL_DEV_MEMOPS_MAX 255

/* Kernels.  An image holds the same kernels in two forms: the fatbin nvcc
 * built (CUDA: cuModuleLoadData; fatbin_bytes 0 in a build without nvcc)
 * and their C twins by name (the emulation).  A twin runs every work item
 * of a launch on the host; map turns a device address into one the host
 * may use (the emulation's shadow mapping; host memory maps to itself). */
typedef void (*moeccl_dev_twin_fn_t)(const void* args, void* (*map)(const void* ptr));
typedef struct {
  const char* name;
  moeccl_dev_twin_fn_t fn;
} moeccl_dev_twin_t;
typedef struct moeccl_dev_image {
  const void* fatbin;
  size_t fatbin_bytes;
  const moeccl_dev_twin_t* twins;
  int ntwins;
} moeccl_dev_image_t;

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
  /* Streams.  stream_create makes a non-blocking one (CU_STREAM_NON_BLOCKING:
   * no implicit order with the legacy default stream), as the library and
   * most frameworks use; stream_create_blocking one that is ordered with
   * the legacy default stream both ways (cudaStreamCreate's default).
   * Every stream argument may be NULL: the legacy default stream. */
  moecclResult_t (*stream_create)(void** stream);
  moecclResult_t (*stream_create_blocking)(void** stream);
  /* 0 when stream is surely not a live stream of this backend (the
   * emulation knows its streams; CUDA cannot tell cheaply: 1, and a
   * made-up pointer reaching the driver is undefined behaviour there, as
   * it is with NCCL). */
  int (*stream_valid)(const void* stream);
  moecclResult_t (*stream_destroy)(void* stream);
  /* As cuMemcpyAsync: with pinned host memory (host_alloc, host_register)
   * or device memory on both sides it is queued and returns; a side in
   * pageable host memory makes it synchronous as CUDA does (from pageable
   * memory: the stream's earlier work is waited for first; into it: returns
   * once the copy is done), so it must not be used on a stream held by a
   * wait the caller itself would release. */
  moecclResult_t (*copy_async)(void* dst, const void* src, size_t bytes, void* stream);
  /* n copies between device memory (or pinned host memory), queued in one
   * call where the driver has it (cuMemcpyBatchAsync), in stream order:
   * none starts before the stream's earlier work, all end before its later
   * work; they may run concurrently with each other. */
  moecclResult_t (*copy_batch)(void* const* dst, const void* const* src, const size_t* bytes, int n,
                               void* stream);
  moecclResult_t (*wait_value)(void* stream, volatile uint64_t* addr, uint64_t value);
  /* Host memory for flags that streams of every device wait on and the host
   * writes (CUDA: pinned, mapped, portable); host_write stores a flag from
   * the host, so a waiting stream goes on without any device work (which a
   * single hardware queue, CUDA_DEVICE_MAX_CONNECTIONS=1, could hold up
   * behind the wait itself). */
  moecclResult_t (*host_flags)(void** ptr, size_t bytes);
  void (*host_write)(volatile uint64_t* addr, uint64_t value);
  moecclResult_t (*write_value)(void* stream, volatile uint64_t* addr, uint64_t value);
  /* n waits (wait 1: until *addr >= value) and writes, queued in array
   * order as one batch where the driver has one (cuStreamBatchMemOp, up to
   * MOECCL_DEV_MEMOPS_MAX per batch); addr in device memory or registered
   * host memory. */
  moecclResult_t (*mem_ops)(void* stream, const struct moeccl_dev_memop* ops, int n);
  /* Pinned host memory, mapped for every device (host_free releases it),
   * and pinning of existing host memory (page-aligned, e.g. a shared
   * mapping other processes also register): streams copy to and from it
   * asynchronously and wait on and write flags in it; host_register
   * gives the address streams use for ptr (*dev; with unified addressing
   * ptr itself). */
  moecclResult_t (*host_alloc)(void** ptr, size_t bytes);
  void (*host_free)(void* ptr);
  moecclResult_t (*host_register)(void* ptr, size_t bytes, void** dev);
  void (*host_unregister)(void* ptr);
  moecclResult_t (*host_fn)(void* stream, void (*fn)(void*), void* arg);
  /* moecclSuccess when all queued work is done, moecclInProgress while some
   * is not, else the error that stopped the stream.  synchronize(NULL)
   * waits for the default stream (CUDA's legacy stream; the emulation has
   * none, so it returns at once). */
  moecclResult_t (*query)(void* stream);
  moecclResult_t (*synchronize)(void* stream);
  /* Waits for the work of every stream of this process's current device
   * (cuCtxSynchronize), as cudaFree does before it frees. */
  moecclResult_t (*sync_all)(void);
  /* Loads image into the current device's context (*module; kept for the
   * process's life: no unload, nothing at exit); moecclInvalidUsage when
   * the image has no form this backend runs (CUDA: an empty fatbin).
   * function finds a kernel of it by name (*fn). */
  moecclResult_t (*module_load)(const moeccl_dev_image_t* image, void** module);
  moecclResult_t (*function)(void* module, const char* name, void** fn);
  /* Queues fn on stream over grid blocks of block threads, with one
   * argument: the args_bytes at args (a struct passed by value, copied
   * before launch returns, as CUDA copies kernel parameters).  In stream
   * order with the copies, flag operations and host functions. */
  moecclResult_t (*launch)(void* fn, unsigned grid, unsigned block, const void* args,
                           size_t args_bytes, void* stream);
} moeccl_device_ops_t;

extern const moeccl_device_ops_t moeccl_device_emu_ops;
/* The emulation's stand-in for a CUDA driver torn down before the
 * process's atexit handlers run: every emulated call after it aborts the
 * process with a message, as a call into an unloaded driver may crash
 * (tests/test_device calls it from an atexit handler of its own). */
void moeccl_device_emu_teardown(void);
/* What the emulation was asked to do in this process (tests count it). */
typedef struct {
  uint64_t copies, memops, host_fns, syncs; /* syncs: synchronize and sync_all calls */
  uint64_t launches;                        /* kernels (their C twins) */
} moeccl_device_emu_counts_t;
void moeccl_device_emu_counts(moeccl_device_emu_counts_t* out);
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
/* Runs queue(stream, arg) on the library's copy stream (the one
 * moeccl_device_copy uses, so in order with its copies), then waits for
 * the stream: done when it returns.  Serialised with the copies. */
moecclResult_t moeccl_device_run(moecclResult_t (*queue)(void* stream, void* arg), void* arg);

#endif
