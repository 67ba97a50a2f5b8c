/*
 * The CUDA backend of the device seam (device.h): the only file that calls
 * the CUDA driver, loaded with dlopen("libcuda.so.1") the first time it is
 * needed, so libmoeccl links no CUDA library and runs where no driver is
 * installed.  Exportable memory is CUDA VMM (cuMemCreate with POSIX file
 * descriptor handles, mapped and made accessible on its device); flags are
 * waited on and written by the stream memory operations; work runs on the
 * caller's context, the device's primary context when the thread has none.
 * Built where cuda.h is found; it has not run on a GPU from this machine
 * (the GPU check, scripts/gpu-check.sh, exercises it).
 */
#include <cuda.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "base/check.h"
#include "base/debug.h"
#include "device/device.h"

#define CU_FN(name) static __typeof__(&name) p_##name
CU_FN(cuInit);
CU_FN(cuDeviceGetCount);
CU_FN(cuDeviceGet);
CU_FN(cuDevicePrimaryCtxRetain);
CU_FN(cuCtxGetCurrent);
CU_FN(cuCtxSetCurrent);
CU_FN(cuPointerGetAttribute);
CU_FN(cuMemGetAllocationGranularity);
CU_FN(cuMemCreate);
CU_FN(cuMemRelease);
CU_FN(cuMemAddressReserve);
CU_FN(cuMemAddressFree);
CU_FN(cuMemMap);
CU_FN(cuMemUnmap);
CU_FN(cuMemSetAccess);
CU_FN(cuMemExportToShareableHandle);
CU_FN(cuMemImportFromShareableHandle);
CU_FN(cuMemRetainAllocationHandle);
CU_FN(cuStreamCreate);
CU_FN(cuStreamDestroy);
CU_FN(cuMemcpyAsync);
CU_FN(cuStreamWaitValue64);
CU_FN(cuStreamWriteValue64);
CU_FN(cuLaunchHostFunc);
CU_FN(cuStreamQuery);
CU_FN(cuStreamSynchronize);
CU_FN(cuIpcGetMemHandle);
CU_FN(cuIpcOpenMemHandle);
CU_FN(cuIpcCloseMemHandle);
CU_FN(cuCtxGetDevice);
CU_FN(cuCtxSynchronize);
CU_FN(cuMemHostAlloc);
CU_FN(cuMemFreeHost);
CU_FN(cuMemHostRegister);
CU_FN(cuMemHostUnregister);
CU_FN(cuMemHostGetDevicePointer);
CU_FN(cuStreamBatchMemOp);
CU_FN(cuMemcpyBatchAsync);
CU_FN(cuModuleLoadData);
CU_FN(cuModuleGetFunction);
CU_FN(cuLaunchKernel);

#define MAX_DEVICES 64
static pthread_once_t load_once = PTHREAD_ONCE_INIT;
static char load_error[160];
static int ndevices;
static CUcontext primary[MAX_DEVICES];

static void* need(void* lib, const char* sym) {
  void* p = dlsym(lib, sym);
  if (!p && !load_error[0]) snprintf(load_error, sizeof(load_error), "libcuda.so.1 lacks %s", sym);
  return p;
}

#define LOAD(lib, name, sym) p_##name = (__typeof__(p_##name))need(lib, sym)

static void load(void) {
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    snprintf(load_error, sizeof(load_error), "no CUDA driver (dlopen libcuda.so.1: %s)", dlerror());
    return;
  }
  LOAD(lib, cuInit, "cuInit");
  LOAD(lib, cuDeviceGetCount, "cuDeviceGetCount");
  LOAD(lib, cuDeviceGet, "cuDeviceGet");
  LOAD(lib, cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain");
  LOAD(lib, cuCtxGetCurrent, "cuCtxGetCurrent");
  LOAD(lib, cuCtxSetCurrent, "cuCtxSetCurrent");
  LOAD(lib, cuPointerGetAttribute, "cuPointerGetAttribute");
  LOAD(lib, cuMemGetAllocationGranularity, "cuMemGetAllocationGranularity");
  LOAD(lib, cuMemCreate, "cuMemCreate");
  LOAD(lib, cuMemRelease, "cuMemRelease");
  LOAD(lib, cuMemAddressReserve, "cuMemAddressReserve");
  LOAD(lib, cuMemAddressFree, "cuMemAddressFree");
  LOAD(lib, cuMemMap, "cuMemMap");
  LOAD(lib, cuMemUnmap, "cuMemUnmap");
  LOAD(lib, cuMemSetAccess, "cuMemSetAccess");
  LOAD(lib, cuMemExportToShareableHandle, "cuMemExportToShareableHandle");
  LOAD(lib, cuMemImportFromShareableHandle, "cuMemImportFromShareableHandle");
  LOAD(lib, cuMemRetainAllocationHandle, "cuMemRetainAllocationHandle");
  LOAD(lib, cuStreamCreate, "cuStreamCreate");
  LOAD(lib, cuStreamDestroy, "cuStreamDestroy_v2");
  LOAD(lib, cuMemcpyAsync, "cuMemcpyAsync");
  LOAD(lib, cuStreamWaitValue64, "cuStreamWaitValue64_v2");
  LOAD(lib, cuStreamWriteValue64, "cuStreamWriteValue64_v2");
  LOAD(lib, cuLaunchHostFunc, "cuLaunchHostFunc");
  LOAD(lib, cuStreamQuery, "cuStreamQuery");
  LOAD(lib, cuStreamSynchronize, "cuStreamSynchronize");
  LOAD(lib, cuIpcGetMemHandle, "cuIpcGetMemHandle");
  LOAD(lib, cuIpcOpenMemHandle, "cuIpcOpenMemHandle_v2");
  LOAD(lib, cuIpcCloseMemHandle, "cuIpcCloseMemHandle");
  LOAD(lib, cuCtxGetDevice, "cuCtxGetDevice");
  LOAD(lib, cuCtxSynchronize, "cuCtxSynchronize");
  LOAD(lib, cuMemHostAlloc, "cuMemHostAlloc");
  LOAD(lib, cuMemFreeHost, "cuMemFreeHost");
  LOAD(lib, cuMemHostRegister, "cuMemHostRegister_v2");
  LOAD(lib, cuMemHostUnregister, "cuMemHostUnregister");
  LOAD(lib, cuMemHostGetDevicePointer, "cuMemHostGetDevicePointer_v2");
  LOAD(lib, cuModuleLoadData, "cuModuleLoadData");
  LOAD(lib, cuModuleGetFunction, "cuModuleGetFunction");
  LOAD(lib, cuLaunchKernel, "cuLaunchKernel");
  /* optional: without it, mem_ops queues one operation per call */
  p_cuStreamBatchMemOp = (__typeof__(p_cuStreamBatchMemOp))dlsym(lib, "cuStreamBatchMemOp_v2");
  /* optional (CUDA 13's form): without it, copy_batch makes one call per copy */
  p_cuMemcpyBatchAsync = (__typeof__(p_cuMemcpyBatchAsync))dlsym(lib, "cuMemcpyBatchAsync_v2");
  if (load_error[0]) return;
  CUresult rc = p_cuInit(0);
  if (rc == CUDA_SUCCESS) rc = p_cuDeviceGetCount(&ndevices);
  if (rc != CUDA_SUCCESS) {
    snprintf(load_error, sizeof(load_error), "cuInit failed (CUresult %d)", (int)rc);
    ndevices = 0;
  }
  if (ndevices > MAX_DEVICES) ndevices = MAX_DEVICES;
}

const char* moeccl_device_cuda_unavailable(void) {
  pthread_once(&load_once, load);
  if (load_error[0]) return load_error;
  return ndevices > 0 ? NULL : "the CUDA driver sees no device";
}

static moecclResult_t res(CUresult rc) {
  return rc == CUDA_SUCCESS ? moecclSuccess : moecclUnhandledCudaError;
}

/* Makes a context current on this thread: the device's primary context,
 * or the thread's own when it has one and no device is named (-1). */
static moecclResult_t use_device(int device) {
  if (moeccl_device_cuda_unavailable()) return moecclUnhandledCudaError;
  CUcontext cur = NULL;
  if (device < 0) {
    if (p_cuCtxGetCurrent(&cur) == CUDA_SUCCESS && cur) return moecclSuccess;
    device = 0;
  }
  if (device >= ndevices) return moecclInvalidArgument;
  if (!primary[device]) { /* a benign race: retaining twice is refcounted */
    CUdevice d;
    CUcontext ctx;
    if (p_cuDeviceGet(&d, device) != CUDA_SUCCESS ||
        p_cuDevicePrimaryCtxRetain(&ctx, d) != CUDA_SUCCESS)
      return moecclUnhandledCudaError;
    primary[device] = ctx;
  }
  return res(p_cuCtxSetCurrent(primary[device]));
}

static int cu_count(void) { return moeccl_device_cuda_unavailable() ? 0 : ndevices; }

static int cu_pointer(const void* ptr, int* device) {
  if (!ptr || moeccl_device_cuda_unavailable()) return 0;
  unsigned int type = 0;
  int ordinal = -1;
  if (p_cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, (CUdeviceptr)ptr) !=
          CUDA_SUCCESS ||
      type != CU_MEMORYTYPE_DEVICE)
    return 0;
  if (p_cuPointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, (CUdeviceptr)ptr) !=
      CUDA_SUCCESS)
    return 0;
  *device = ordinal;
  return 1;
}

static moecclResult_t cu_range(const void* ptr, void** base, size_t* bytes, uint64_t* id) {
  MOECCL_CHECK(use_device(-1));
  CUdeviceptr b = 0;
  size_t n = 0;
  unsigned long long buffer_id = 0;
  if (p_cuPointerGetAttribute(&b, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, (CUdeviceptr)ptr) !=
          CUDA_SUCCESS ||
      p_cuPointerGetAttribute(&n, CU_POINTER_ATTRIBUTE_RANGE_SIZE, (CUdeviceptr)ptr) !=
          CUDA_SUCCESS ||
      p_cuPointerGetAttribute(&buffer_id, CU_POINTER_ATTRIBUTE_BUFFER_ID, (CUdeviceptr)ptr) !=
          CUDA_SUCCESS)
    return moecclInvalidArgument;
  *base = (void*)b, *bytes = n, *id = buffer_id;
  return moecclSuccess;
}

static CUmemAllocationProp prop_of(int device) {
  CUmemAllocationProp p;
  memset(&p, 0, sizeof(p));
  p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  p.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  p.location.id = device;
  p.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  return p;
}

/* Maps handle (bytes, a multiple of the granularity) at a new address on
 * device, readable and writable there. */
static moecclResult_t map_handle(CUmemGenericAllocationHandle h, size_t bytes, int device,
                                 void** ptr) {
  CUdeviceptr va = 0;
  if (p_cuMemAddressReserve(&va, bytes, 0, 0, 0) != CUDA_SUCCESS) return moecclSystemError;
  CUmemAccessDesc acc;
  memset(&acc, 0, sizeof(acc));
  acc.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  acc.location.id = device;
  acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  if (p_cuMemMap(va, bytes, 0, h, 0) != CUDA_SUCCESS) {
    p_cuMemAddressFree(va, bytes);
    return moecclUnhandledCudaError;
  }
  if (p_cuMemSetAccess(va, bytes, &acc, 1) != CUDA_SUCCESS) {
    p_cuMemUnmap(va, bytes), p_cuMemAddressFree(va, bytes);
    return moecclUnhandledCudaError;
  }
  *ptr = (void*)va;
  return moecclSuccess;
}

static size_t granular(size_t bytes, int device) {
  CUmemAllocationProp p = prop_of(device);
  size_t g = 0;
  if (p_cuMemGetAllocationGranularity(&g, &p, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED) !=
          CUDA_SUCCESS ||
      g == 0)
    g = 2u << 20;
  return (bytes + g - 1) / g * g;
}

/* The VMM calls name the device themselves: they need a context, not the
 * device's, so the caller's current context stays current (switching it
 * would move the application's later CUDA calls to another device). */
static moecclResult_t cu_alloc(void** ptr, size_t bytes, int device) {
  MOECCL_CHECK(use_device(-1));
  if (device < 0 || device >= ndevices) return moecclInvalidArgument;
  size_t size = granular(bytes, device);
  CUmemAllocationProp p = prop_of(device);
  CUmemGenericAllocationHandle h;
  if (p_cuMemCreate(&h, size, &p, 0) != CUDA_SUCCESS) return moecclSystemError;
  moecclResult_t rc = map_handle(h, size, device, ptr);
  p_cuMemRelease(h); /* the mapping keeps the memory until unmapped */
  return rc;
}

/* The size of the allocation mapped at ptr (its base). */
static moecclResult_t mapped_size(void* ptr, size_t* bytes) {
  CUdeviceptr base = 0;
  size_t size = 0;
  if (p_cuPointerGetAttribute(&base, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, (CUdeviceptr)ptr) !=
          CUDA_SUCCESS ||
      p_cuPointerGetAttribute(&size, CU_POINTER_ATTRIBUTE_RANGE_SIZE, (CUdeviceptr)ptr) !=
          CUDA_SUCCESS ||
      base != (CUdeviceptr)ptr)
    return moecclInvalidArgument;
  *bytes = size;
  return moecclSuccess;
}

static moecclResult_t cu_unmap(void* ptr, size_t bytes) {
  CUresult a = p_cuMemUnmap((CUdeviceptr)ptr, bytes);
  CUresult b = p_cuMemAddressFree((CUdeviceptr)ptr, bytes);
  return a == CUDA_SUCCESS && b == CUDA_SUCCESS ? moecclSuccess : moecclUnhandledCudaError;
}

static moecclResult_t cu_free(void* ptr) {
  MOECCL_CHECK(use_device(-1));
  size_t bytes;
  MOECCL_CHECK(mapped_size(ptr, &bytes));
  return cu_unmap(ptr, bytes);
}

static moecclResult_t cu_export_fd(void* ptr, int* fd, size_t* bytes) {
  MOECCL_CHECK(use_device(-1));
  MOECCL_CHECK(mapped_size(ptr, bytes));
  CUmemGenericAllocationHandle h;
  if (p_cuMemRetainAllocationHandle(&h, ptr) != CUDA_SUCCESS) return moecclInvalidArgument;
  int out = -1;
  CUresult rc =
      p_cuMemExportToShareableHandle(&out, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
  p_cuMemRelease(h);
  if (rc != CUDA_SUCCESS) return moecclUnhandledCudaError;
  *fd = out;
  return moecclSuccess;
}

static moecclResult_t cu_import_fd(int fd, size_t bytes, int device, void** ptr) {
  MOECCL_CHECK(use_device(-1));
  if (device < 0 || device >= ndevices) return moecclInvalidArgument;
  CUmemGenericAllocationHandle h;
  if (p_cuMemImportFromShareableHandle(&h, (void*)(uintptr_t)fd,
                                       CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) != CUDA_SUCCESS)
    return moecclUnhandledCudaError;
  moecclResult_t rc = map_handle(h, bytes, device, ptr);
  p_cuMemRelease(h);
  return rc;
}

static moecclResult_t cu_unimport(void* ptr, size_t bytes) {
  MOECCL_CHECK(use_device(-1));
  return cu_unmap(ptr, bytes);
}

_Static_assert(sizeof(CUipcMemHandle) <= MOECCL_IPC_HANDLE_BYTES, "IPC handle size");

static moecclResult_t cu_ipc_export(void* base, void* handle) {
  MOECCL_CHECK(use_device(-1));
  CUipcMemHandle h;
  if (p_cuIpcGetMemHandle(&h, (CUdeviceptr)base) != CUDA_SUCCESS) return moecclInvalidArgument;
  memset(handle, 0, MOECCL_IPC_HANDLE_BYTES);
  memcpy(handle, &h, sizeof(h));
  return moecclSuccess;
}

static moecclResult_t cu_ipc_import(const void* handle, void** ptr) {
  MOECCL_CHECK(use_device(-1));
  CUipcMemHandle h;
  memcpy(&h, handle, sizeof(h));
  CUdeviceptr p = 0;
  if (p_cuIpcOpenMemHandle(&p, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS) != CUDA_SUCCESS)
    return moecclUnhandledCudaError;
  *ptr = (void*)p;
  return moecclSuccess;
}

static moecclResult_t cu_ipc_close(void* ptr) {
  MOECCL_CHECK(use_device(-1));
  return res(p_cuIpcCloseMemHandle((CUdeviceptr)ptr));
}

static int cu_current(void) {
  if (use_device(-1) != moecclSuccess) return 0;
  CUdevice d = 0;
  return p_cuCtxGetDevice(&d) == CUDA_SUCCESS ? (int)d : 0;
}

static moecclResult_t cu_stream_create(void** stream) {
  MOECCL_CHECK(use_device(-1));
  CUstream s;
  if (p_cuStreamCreate(&s, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS) return moecclUnhandledCudaError;
  *stream = s;
  return moecclSuccess;
}

/* Ordered with the legacy default stream both ways (cuStreamCreate's
 * default flags, cudaStreamCreate's). */
static moecclResult_t cu_stream_create_blocking(void** stream) {
  MOECCL_CHECK(use_device(-1));
  CUstream s;
  if (p_cuStreamCreate(&s, CU_STREAM_DEFAULT) != CUDA_SUCCESS) return moecclUnhandledCudaError;
  *stream = s;
  return moecclSuccess;
}

static int cu_stream_valid(const void* stream) {
  (void)stream;
  return 1; /* not cheaply knowable: a bad one fails when used */
}

static moecclResult_t cu_stream_destroy(void* stream) {
  if (!stream) return moecclInvalidArgument; /* the legacy stream is not ours to destroy */
  MOECCL_CHECK(use_device(-1));
  return res(p_cuStreamDestroy((CUstream)stream));
}

static moecclResult_t cu_copy_async(void* dst, const void* src, size_t bytes, void* stream) {
  MOECCL_CHECK(use_device(-1));
  return res(p_cuMemcpyAsync((CUdeviceptr)dst, (CUdeviceptr)src, bytes, (CUstream)stream));
}

/* The flag must be device memory or host memory the device can reach
 * (registered or from cuMemHostAlloc), as the stream memory operations ask. */
static moecclResult_t cu_wait_value(void* stream, volatile uint64_t* addr, uint64_t value) {
  MOECCL_CHECK(use_device(-1));
  return res(
      p_cuStreamWaitValue64((CUstream)stream, (CUdeviceptr)addr, value, CU_STREAM_WAIT_VALUE_GEQ));
}

static moecclResult_t cu_write_value(void* stream, volatile uint64_t* addr, uint64_t value) {
  MOECCL_CHECK(use_device(-1));
  return res(p_cuStreamWriteValue64((CUstream)stream, (CUdeviceptr)addr, value,
                                    CU_STREAM_WRITE_VALUE_DEFAULT));
}

/* The batch call where the driver has it, for a stream other than the
 * legacy one; after a refusal (a driver or platform without it) one
 * cuMemcpyAsync per copy. */
static int batch_refused;

static moecclResult_t cu_copy_batch(void* const* dst, const void* const* src, const size_t* bytes,
                                    int n, void* stream) {
  MOECCL_CHECK(use_device(-1));
  /* the batch call refuses the legacy default stream (NULL) */
  int legacy = !stream || (CUstream)stream == CU_STREAM_LEGACY;
  if (n > 1 && !legacy && p_cuMemcpyBatchAsync &&
      !__atomic_load_n(&batch_refused, __ATOMIC_RELAXED)) {
    CUmemcpyAttributes attr;
    memset(&attr, 0, sizeof(attr));
    attr.srcAccessOrder = CU_MEMCPY_SRC_ACCESS_ORDER_STREAM;
    attr.srcLocHint.type = CU_MEM_LOCATION_TYPE_DEVICE;
    attr.dstLocHint.type = CU_MEM_LOCATION_TYPE_DEVICE;
    size_t idx = 0;
    CUresult rc = p_cuMemcpyBatchAsync((CUdeviceptr*)dst, (CUdeviceptr*)src, (size_t*)bytes,
                                       (size_t)n, &attr, &idx, 1, (CUstream)stream);
    if (rc == CUDA_SUCCESS) return moecclSuccess;
    __atomic_store_n(&batch_refused, 1, __ATOMIC_RELAXED);
  }
  for (int i = 0; i < n; i++)
    if (p_cuMemcpyAsync((CUdeviceptr)dst[i], (CUdeviceptr)src[i], bytes[i], (CUstream)stream) !=
        CUDA_SUCCESS)
      return moecclUnhandledCudaError;
  return moecclSuccess;
}

/* One batch of stream memory operations per MOECCL_DEV_MEMOPS_MAX, in
 * order; one call per operation where the driver has no batch. */
static moecclResult_t cu_mem_ops(void* stream, const moeccl_dev_memop_t* ops, int n) {
  MOECCL_CHECK(use_device(-1));
  CUstreamBatchMemOpParams p[64];
  for (int i = 0; i < n;) {
    int k = 0;
    for (; i < n && k < 64; i++, k++) {
      memset(&p[k], 0, sizeof(p[k]));
      if (!p_cuStreamBatchMemOp) {
        CUresult rc = ops[i].wait
                          ? p_cuStreamWaitValue64((CUstream)stream, (CUdeviceptr)ops[i].addr,
                                                  ops[i].value, CU_STREAM_WAIT_VALUE_GEQ)
                          : p_cuStreamWriteValue64((CUstream)stream, (CUdeviceptr)ops[i].addr,
                                                   ops[i].value, CU_STREAM_WRITE_VALUE_DEFAULT);
        if (rc != CUDA_SUCCESS) return moecclUnhandledCudaError;
        continue;
      }
      if (ops[i].wait) {
        p[k].waitValue.operation = CU_STREAM_MEM_OP_WAIT_VALUE_64;
        p[k].waitValue.address = (CUdeviceptr)ops[i].addr;
        p[k].waitValue.value64 = ops[i].value;
        p[k].waitValue.flags = CU_STREAM_WAIT_VALUE_GEQ;
      } else {
        p[k].writeValue.operation = CU_STREAM_MEM_OP_WRITE_VALUE_64;
        p[k].writeValue.address = (CUdeviceptr)ops[i].addr;
        p[k].writeValue.value64 = ops[i].value;
        p[k].writeValue.flags = CU_STREAM_WRITE_VALUE_DEFAULT;
      }
    }
    if (p_cuStreamBatchMemOp && k &&
        p_cuStreamBatchMemOp((CUstream)stream, (unsigned)k, p, 0) != CUDA_SUCCESS)
      return moecclUnhandledCudaError;
  }
  return moecclSuccess;
}

static moecclResult_t cu_host_alloc(void** ptr, size_t bytes) {
  MOECCL_CHECK(use_device(-1));
  void* p = NULL;
  if (p_cuMemHostAlloc(&p, bytes ? bytes : 1,
                       CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP) != CUDA_SUCCESS)
    return moecclSystemError;
  *ptr = p;
  return moecclSuccess;
}

static void cu_host_free(void* ptr) {
  if (ptr && use_device(-1) == moecclSuccess) p_cuMemFreeHost(ptr);
}

/* Portable and mapped: with unified addressing the host address is the
 * device address stream memory operations and copies take. */
static moecclResult_t cu_host_register(void* ptr, size_t bytes, void** dev) {
  MOECCL_CHECK(use_device(-1));
  if (p_cuMemHostRegister(ptr, bytes, CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP) !=
      CUDA_SUCCESS)
    return moecclSystemError;
  CUdeviceptr d = 0;
  if (p_cuMemHostGetDevicePointer(&d, ptr, 0) != CUDA_SUCCESS) {
    p_cuMemHostUnregister(ptr);
    return moecclSystemError;
  }
  *dev = (void*)d;
  return moecclSuccess;
}

static void cu_host_unregister(void* ptr) {
  if (ptr && use_device(-1) == moecclSuccess) p_cuMemHostUnregister(ptr);
}

/* Pinned, mapped into every context (portable): with unified addressing
 * the host pointer is the device address the stream waits on. */
static moecclResult_t cu_host_flags(void** ptr, size_t bytes) {
  MOECCL_CHECK(use_device(-1));
  void* p = NULL;
  if (p_cuMemHostAlloc(&p, bytes, CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP) !=
      CUDA_SUCCESS)
    return moecclSystemError;
  memset(p, 0, bytes);
  *ptr = p;
  return moecclSuccess;
}

static void cu_host_write(volatile uint64_t* addr, uint64_t value) {
  __atomic_store_n(addr, value, __ATOMIC_RELEASE);
}

static moecclResult_t cu_host_fn(void* stream, void (*fn)(void*), void* arg) {
  MOECCL_CHECK(use_device(-1));
  return res(p_cuLaunchHostFunc((CUstream)stream, fn, arg));
}

static moecclResult_t cu_query(void* stream) {
  MOECCL_CHECK(use_device(-1));
  CUresult rc = p_cuStreamQuery((CUstream)stream);
  return rc == CUDA_ERROR_NOT_READY ? moecclInProgress : res(rc);
}

static moecclResult_t cu_synchronize(void* stream) {
  MOECCL_CHECK(use_device(-1));
  return res(p_cuStreamSynchronize((CUstream)stream));
}

static moecclResult_t cu_sync_all(void) {
  MOECCL_CHECK(use_device(-1));
  return res(p_cuCtxSynchronize());
}

/* Kernels: the image's fatbin, loaded into the current context (the
 * caller keeps a module per device); a launch passes the argument struct
 * as the kernel's one parameter (cuLaunchKernel copies it). */
static moecclResult_t cu_module_load(const moeccl_dev_image_t* image, void** module) {
  if (!image || !image->fatbin || !image->fatbin_bytes) return moecclInvalidUsage;
  MOECCL_CHECK(use_device(-1));
  CUmodule m;
  CUresult rc = p_cuModuleLoadData(&m, image->fatbin);
  if (rc != CUDA_SUCCESS) {
    WARN(INIT, "device: cuModuleLoadData of the kernels' fatbin failed (CUresult %d)", (int)rc);
    return moecclUnhandledCudaError;
  }
  *module = m;
  return moecclSuccess;
}

static moecclResult_t cu_function(void* module, const char* name, void** fn) {
  CUfunction f;
  if (p_cuModuleGetFunction(&f, (CUmodule)module, name) != CUDA_SUCCESS)
    return moecclInvalidArgument;
  *fn = f;
  return moecclSuccess;
}

static moecclResult_t cu_launch(void* fn, unsigned grid, unsigned block, const void* args,
                                size_t args_bytes, void* stream) {
  if (!fn || !grid || !block || !args || !args_bytes) return moecclInvalidArgument;
  MOECCL_CHECK(use_device(-1));
  void* params[1] = {(void*)(uintptr_t)args};
  return res(p_cuLaunchKernel((CUfunction)fn, grid, 1, 1, block, 1, 1, 0, (CUstream)stream, params,
                              NULL));
}

const moeccl_device_ops_t moeccl_device_cuda_ops = {
    .name = "cuda",
    .count = cu_count,
    .pointer = cu_pointer,
    .range = cu_range,
    .alloc = cu_alloc,
    .free = cu_free,
    .export_fd = cu_export_fd,
    .import_fd = cu_import_fd,
    .unimport = cu_unimport,
    .ipc_export = cu_ipc_export,
    .ipc_import = cu_ipc_import,
    .ipc_close = cu_ipc_close,
    .current = cu_current,
    .stream_create = cu_stream_create,
    .stream_create_blocking = cu_stream_create_blocking,
    .stream_valid = cu_stream_valid,
    .stream_destroy = cu_stream_destroy,
    .copy_async = cu_copy_async,
    .copy_batch = cu_copy_batch,
    .wait_value = cu_wait_value,
    .write_value = cu_write_value,
    .mem_ops = cu_mem_ops,
    .host_alloc = cu_host_alloc,
    .host_free = cu_host_free,
    .host_register = cu_host_register,
    .host_unregister = cu_host_unregister,
    .host_fn = cu_host_fn,
    .host_flags = cu_host_flags,
    .host_write = cu_host_write,
    .query = cu_query,
    .synchronize = cu_synchronize,
    .sync_all = cu_sync_all,
    .module_load = cu_module_load,
    .function = cu_function,
    .launch = cu_launch,
};
