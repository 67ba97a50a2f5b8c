/* The GPU's CUDA table (cuda_api.h): libcuda and libcublas loaded with
 * dlopen at first use, the kernels from the fatbin nvcc built into this
 * program (kernels_fatbin.c; empty when configure found no nvcc), a
 * compute stream and a communication stream with events between them on
 * device 0's primary context. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "cuda_api.h"

extern const unsigned char moe_kernels_fatbin[];
extern const size_t moe_kernels_fatbin_len;

typedef int CUresult;
typedef unsigned long long CUdeviceptr;
typedef void* CUhandle; /* CUcontext, CUmodule, CUfunction, CUstream, cublasHandle_t */

static struct {
  CUresult (*Init)(unsigned);
  CUresult (*DeviceGetCount)(int*);
  CUresult (*DeviceGet)(int*, int);
  CUresult (*DeviceGetName)(char*, int, int);
  CUresult (*DevicePrimaryCtxRetain)(CUhandle*, int);
  CUresult (*CtxSetCurrent)(CUhandle);
  CUresult (*ModuleLoadData)(CUhandle*, const void*);
  CUresult (*ModuleGetFunction)(CUhandle*, CUhandle, const char*);
  CUresult (*StreamCreate)(CUhandle*, unsigned);
  CUresult (*LaunchKernel)(CUhandle, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                           unsigned, CUhandle, void**, void**);
  CUresult (*MemAlloc)(CUdeviceptr*, size_t);
  CUresult (*MemFree)(CUdeviceptr);
  CUresult (*MemcpyDtoDAsync)(CUdeviceptr, CUdeviceptr, size_t, CUhandle);
  CUresult (*MemcpyDtoHAsync)(void*, CUdeviceptr, size_t, CUhandle);
  CUresult (*MemcpyHtoDAsync)(CUdeviceptr, const void*, size_t, CUhandle);
  CUresult (*MemsetD8Async)(CUdeviceptr, unsigned char, size_t, CUhandle);
  CUresult (*StreamSynchronize)(CUhandle);
  CUresult (*EventCreate)(CUhandle*, unsigned);
  CUresult (*EventRecord)(CUhandle, CUhandle);
  CUresult (*StreamWaitEvent)(CUhandle, CUhandle, unsigned);
  CUresult (*GetErrorString)(CUresult, const char**);
  int (*blasCreate)(CUhandle*);
  int (*blasSetStream)(CUhandle, CUhandle);
  int (*blasSgemm)(CUhandle, int, int, int, int, int, const float*, const float*, int,
                   const float*, int, const float*, float*, int);
  int (*blasGemmEx)(CUhandle, int, int, int, int, int, const void*, const void*, int, int,
                    const void*, int, int, const void*, void*, int, int, int, int);
  const char* (*blasStatusString)(int);
} cu;

enum {
  K_SWIGLU, K_SWIGLU_BACK, K_ROUTER_TOKEN, K_ROUTER_STAT, K_ROUTER_DLOGITS, K_GATHER, K_COMBINE,
  K_COMBINE_BACK, K_SCATTER, K_ADD, K_SCALED_DIFF, K_SQ_DIST, K_ADAM, K_TO_BF16, K_COUNT
};
static const char* const kernel_name[K_COUNT] = {
    "moe_kswiglu",  "moe_kswiglu_back", "moe_krouter_token", "moe_krouter_stat",
    "moe_krouter_dlogits", "moe_kgather", "moe_kcombine", "moe_kcombine_back",
    "moe_kscatter", "moe_kadd", "moe_kscaled_diff", "moe_ksq_dist_blocks", "moe_kadam", "moe_kto_bf16"};

static CUhandle stream, blas, kernel[K_COUNT], context;
static CUhandle comm_stream, event[MOE_CUDA_EVENTS]; /* the communication's */
static char device_name[128];
static char error[256];

static int fail(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(error, sizeof(error), fmt, ap);
  va_end(ap);
  return -1;
}

static int cu_check(CUresult r, const char* what) {
  if (r == 0) return 0;
  const char* s = NULL;
  if (cu.GetErrorString) cu.GetErrorString(r, &s);
  return fail("%s: CUDA error %d (%s)", what, r, s ? s : "unknown");
}

static int blas_check(int r, const char* what) {
  if (r == 0) return 0;
  return fail("%s: cuBLAS status %d (%s)", what, r,
              cu.blasStatusString ? cu.blasStatusString(r) : "unknown");
}

/* The context is current per thread: every entry makes it so (cheap), for
 * calls from threads other than the one that loaded it. */
static int current(void) { return cu_check(cu.CtxSetCurrent(context), "cuCtxSetCurrent"); }

/* One thread per item, MOE_CUDA_BLOCK to a block. */
static int launch(int id, size_t items, void** args) {
  size_t blocks = (items + MOE_CUDA_BLOCK - 1) / MOE_CUDA_BLOCK;
  if (blocks == 0) return 0;
  if (current()) return -1;
  if (blocks > 0x7fffffffu) return fail("%s: %zu items is too many", kernel_name[id], items);
  return cu_check(cu.LaunchKernel(kernel[id], (unsigned)blocks, 1, 1, MOE_CUDA_BLOCK, 1, 1, 0,
                                  stream, args, NULL),
                  kernel_name[id]);
}

static int r_sgemm(int trans_a, int trans_b, int m, int n, int k, float alpha, const float* a,
                   int lda, const float* b, int ldb, float beta, float* c, int ldc) {
  if (current()) return -1;
  return blas_check(cu.blasSgemm(blas, trans_a ? 1 : 0, trans_b ? 1 : 0, m, n, k, &alpha, a, lda,
                                 b, ldb, &beta, c, ldc),
                    "cublasSgemm");
}

/* cudaDataType and cuBLAS enums (library_types.h, cublas_api.h) */
enum { R_32F = 0, R_16BF = 14, COMPUTE_32F = 68, GEMM_DEFAULT = -1 };

static int r_gemm_bf16(int trans_a, int trans_b, int m, int n, int k, float alpha,
                       const uint16_t* a, int lda, const uint16_t* b, int ldb, float beta, float* c,
                       int ldc) {
  if (current()) return -1;
  return blas_check(cu.blasGemmEx(blas, trans_a ? 1 : 0, trans_b ? 1 : 0, m, n, k, &alpha, a,
                                  R_16BF, lda, b, R_16BF, ldb, &beta, c, R_32F, ldc, COMPUTE_32F,
                                  GEMM_DEFAULT),
                    "cublasGemmEx");
}

static int r_to_bf16(size_t count, const float* x, uint16_t* out) {
  void* args[] = {&count, &x, &out};
  return launch(K_TO_BF16, count, args);
}

static int r_swiglu(size_t count, const float* a, const float* b, float* h) {
  void* args[] = {&count, &a, &b, &h};
  return launch(K_SWIGLU, count, args);
}

static int r_swiglu_back(size_t count, const float* a, const float* b, const float* dh, float* da,
                         float* db) {
  void* args[] = {&count, &a, &b, &dh, &da, &db};
  return launch(K_SWIGLU_BACK, count, args);
}

static int r_router_token(int n, int e, int k, float* probs, int32_t* expert, float* gate) {
  void* args[] = {&n, &e, &k, &probs, &expert, &gate};
  return launch(K_ROUTER_TOKEN, (size_t)n, args);
}

static int r_router_stat(int n, int e, int k, const float* probs, const int32_t* expert,
                         float* stats) {
  void* args[] = {&n, &e, &k, &probs, &expert, &stats};
  return launch(K_ROUTER_STAT, (size_t)e + 1, args);
}

static int r_router_dlogits(int n, int e, int k, const float* probs, const int32_t* expert,
                            const float* gate, const float* dgate, const float* g, float* dl) {
  void* args[] = {&n, &e, &k, &probs, &expert, &gate, &dgate, &g, &dl};
  return launch(K_ROUTER_DLOGITS, (size_t)n, args);
}

static int r_gather(int rows, int h, const int32_t* token_of, const float* x, float* out) {
  void* args[] = {&rows, &h, &token_of, &x, &out};
  return launch(K_GATHER, (size_t)rows * h, args);
}

static int r_combine(size_t tokens, int k, int h, const int32_t* row_of, const float* gate,
                     const float* y, float* out) {
  void* args[] = {&tokens, &k, &h, &row_of, &gate, &y, &out};
  return launch(K_COMBINE, tokens * h, args);
}

static int r_combine_back(size_t slots, int k, int h, const int32_t* row_of, const float* gate,
                          const float* dout, const float* y, float* dy, float* dgate) {
  void* args[] = {&slots, &k, &h, &row_of, &gate, &dout, &y, &dy, &dgate};
  return launch(K_COMBINE_BACK, slots, args);
}

static int r_scatter(size_t tokens, int k, int h, const int32_t* row_of, const float* src,
                     float* dx) {
  void* args[] = {&tokens, &k, &h, &row_of, &src, &dx};
  return launch(K_SCATTER, tokens, args);
}

static int r_add(size_t count, const float* a, const float* b, float* out) {
  void* args[] = {&count, &a, &b, &out};
  return launch(K_ADD, count, args);
}

static int r_scaled_diff(size_t count, float scale, const float* a, const float* b, float* out) {
  void* args[] = {&count, &scale, &a, &b, &out};
  return launch(K_SCALED_DIFF, count, args);
}

static int r_sq_dist_blocks(size_t count, const float* a, const float* b, double* partial) {
  void* args[] = {&count, &a, &b, &partial};
  return launch(K_SQ_DIST, (count + MOE_CUDA_BLOCK - 1) / MOE_CUDA_BLOCK, args);
}

static int r_adam(size_t count, float lr, float b1, float b2, float eps, float c1, float c2,
                  float* p, const float* g, float* m, float* v) {
  void* args[] = {&count, &lr, &b1, &b2, &eps, &c1, &c2, &p, &g, &m, &v};
  return launch(K_ADAM, count, args);
}

static int r_alloc(void** ptr, size_t bytes) {
  if (current()) return -1;
  CUdeviceptr d = 0;
  if (cu_check(cu.MemAlloc(&d, bytes ? bytes : 1), "cuMemAlloc")) return -1;
  *ptr = (void*)(uintptr_t)d;
  return 0;
}

static int r_free(void* ptr) {
  if (ptr && current()) return -1;
  return ptr ? cu_check(cu.MemFree((CUdeviceptr)(uintptr_t)ptr), "cuMemFree") : 0;
}

static int r_copy(void* dst, const void* src, size_t bytes) {
  if (current()) return -1;
  return cu_check(cu.MemcpyDtoDAsync((CUdeviceptr)(uintptr_t)dst, (CUdeviceptr)(uintptr_t)src,
                                     bytes, stream),
                  "cuMemcpyDtoDAsync");
}

static int r_to_host(void* dst, const void* src, size_t bytes) {
  if (current()) return -1;
  return cu_check(cu.MemcpyDtoHAsync(dst, (CUdeviceptr)(uintptr_t)src, bytes, stream),
                  "cuMemcpyDtoHAsync");
}

static int r_to_device(void* dst, const void* src, size_t bytes) {
  if (current()) return -1;
  return cu_check(cu.MemcpyHtoDAsync((CUdeviceptr)(uintptr_t)dst, src, bytes, stream),
                  "cuMemcpyHtoDAsync");
}

static int r_zero(void* dst, size_t bytes) {
  if (current()) return -1;
  return cu_check(cu.MemsetD8Async((CUdeviceptr)(uintptr_t)dst, 0, bytes, stream),
                  "cuMemsetD8Async");
}

static void* r_comm_ptr(void* ptr) { return ptr; }

/* The backend's stream, then the legacy default stream (NULL), where
 * moeccl queued the calls moe/ made: a phase's time (train_now) and what
 * the host reads next include them. */
static int r_sync(void) {
  if (current()) return -1;
  return cu_check(cu.StreamSynchronize(stream), "cuStreamSynchronize") ||
         cu_check(cu.StreamSynchronize(comm_stream), "cuStreamSynchronize (communication)") ||
         cu_check(cu.StreamSynchronize(NULL), "cuStreamSynchronize (legacy stream)");
}

static void* r_comm_stream(void) { return comm_stream; }

static int r_record(int ev, int on_comm) {
  if (ev < 0 || ev >= MOE_CUDA_EVENTS) return fail("event %d: not one of 0..%d", ev,
                                                   MOE_CUDA_EVENTS - 1);
  if (current()) return -1;
  return cu_check(cu.EventRecord(event[ev], on_comm ? comm_stream : stream), "cuEventRecord");
}

static int r_wait(int ev, int on_comm) {
  if (ev < 0 || ev >= MOE_CUDA_EVENTS) return fail("event %d: not one of 0..%d", ev,
                                                   MOE_CUDA_EVENTS - 1);
  if (current()) return -1;
  return cu_check(cu.StreamWaitEvent(on_comm ? comm_stream : stream, event[ev], 0),
                  "cuStreamWaitEvent");
}

static const char* r_describe(char* buf, size_t len) {
  snprintf(buf, len, "CUDA on %s: cuBLAS and the kernels of moe/kernels.cu", device_name);
  return buf;
}

static const char* r_last_error(void) { return error; }

static const moe_cuda_api_t real = {
    .name = "cuda",
    .sgemm = r_sgemm,
    .gemm_bf16 = r_gemm_bf16,
    .to_bf16 = r_to_bf16,
    .swiglu = r_swiglu,
    .swiglu_back = r_swiglu_back,
    .router_token = r_router_token,
    .router_stat = r_router_stat,
    .router_dlogits = r_router_dlogits,
    .gather = r_gather,
    .combine = r_combine,
    .combine_back = r_combine_back,
    .scatter = r_scatter,
    .add = r_add,
    .scaled_diff = r_scaled_diff,
    .sq_dist_blocks = r_sq_dist_blocks,
    .adam = r_adam,
    .alloc = r_alloc,
    .free = r_free,
    .copy = r_copy,
    .to_host = r_to_host,
    .to_device = r_to_device,
    .zero = r_zero,
    .comm_ptr = r_comm_ptr,
    .sync = r_sync,
    .comm_stream = r_comm_stream,
    .record = r_record,
    .wait = r_wait,
    .describe = r_describe,
    .last_error = r_last_error,
};

static void* first_lib(const char* const* names) {
  for (; *names; names++) {
    void* h = dlopen(*names, RTLD_NOW | RTLD_LOCAL);
    if (h) return h;
  }
  return NULL;
}

#define SYM(lib, field, name)                                             \
  do {                                                                    \
    *(void**)&cu.field = dlsym(lib, name);                                \
    if (!cu.field) return fail("%s has no %s", #lib, name);               \
  } while (0)

static int load(void) {
  static const char* const cuda_libs[] = {"libcuda.so.1", "libcuda.so", NULL};
  static const char* const blas_libs[] = {"libcublas.so.13", "libcublas.so.12", "libcublas.so",
                                          NULL};
  if (moe_kernels_fatbin_len == 0)
    return fail("this build has no kernels (configure found no nvcc)");
  void* libcuda = first_lib(cuda_libs);
  if (!libcuda) return fail("no CUDA driver (libcuda.so.1): %s", dlerror());
  void* libcublas = first_lib(blas_libs);
  if (!libcublas) return fail("no cuBLAS (libcublas.so): %s", dlerror());
  SYM(libcuda, Init, "cuInit");
  SYM(libcuda, DeviceGetCount, "cuDeviceGetCount");
  SYM(libcuda, DeviceGet, "cuDeviceGet");
  SYM(libcuda, DeviceGetName, "cuDeviceGetName");
  SYM(libcuda, DevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain");
  SYM(libcuda, CtxSetCurrent, "cuCtxSetCurrent");
  SYM(libcuda, ModuleLoadData, "cuModuleLoadData");
  SYM(libcuda, ModuleGetFunction, "cuModuleGetFunction");
  SYM(libcuda, StreamCreate, "cuStreamCreate");
  SYM(libcuda, LaunchKernel, "cuLaunchKernel");
  SYM(libcuda, MemAlloc, "cuMemAlloc_v2");
  SYM(libcuda, MemFree, "cuMemFree_v2");
  SYM(libcuda, MemcpyDtoDAsync, "cuMemcpyDtoDAsync_v2");
  SYM(libcuda, MemcpyDtoHAsync, "cuMemcpyDtoHAsync_v2");
  SYM(libcuda, MemcpyHtoDAsync, "cuMemcpyHtoDAsync_v2");
  SYM(libcuda, MemsetD8Async, "cuMemsetD8Async");
  SYM(libcuda, StreamSynchronize, "cuStreamSynchronize");
  SYM(libcuda, EventCreate, "cuEventCreate");
  SYM(libcuda, EventRecord, "cuEventRecord");
  SYM(libcuda, StreamWaitEvent, "cuStreamWaitEvent");
  SYM(libcuda, GetErrorString, "cuGetErrorString");
  SYM(libcublas, blasCreate, "cublasCreate_v2");
  SYM(libcublas, blasSetStream, "cublasSetStream_v2");
  SYM(libcublas, blasSgemm, "cublasSgemm_v2");
  SYM(libcublas, blasGemmEx, "cublasGemmEx");
  *(void**)&cu.blasStatusString = dlsym(libcublas, "cublasGetStatusString"); /* optional */
  int count = 0, dev = 0;
  CUhandle module = NULL;
  if (cu_check(cu.Init(0), "cuInit") || cu_check(cu.DeviceGetCount(&count), "cuDeviceGetCount"))
    return -1;
  if (count < 1) return fail("no CUDA device");
  if (cu_check(cu.DeviceGet(&dev, 0), "cuDeviceGet") ||
      cu_check(cu.DeviceGetName(device_name, sizeof(device_name) - 1, dev), "cuDeviceGetName") ||
      cu_check(cu.DevicePrimaryCtxRetain(&context, dev), "cuDevicePrimaryCtxRetain") ||
      cu_check(cu.CtxSetCurrent(context), "cuCtxSetCurrent") ||
      cu_check(cu.ModuleLoadData(&module, moe_kernels_fatbin), "cuModuleLoadData"))
    return -1;
  for (int i = 0; i < K_COUNT; i++)
    if (cu_check(cu.ModuleGetFunction(&kernel[i], module, kernel_name[i]), kernel_name[i]))
      return -1;
  /* A blocking stream (flags 0): the legacy default stream waits for the
   * work queued on it before and it waits for the legacy stream's work
   * queued before its next.  moe/ calls moeccl with stream NULL, the legacy
   * stream, and moeccl lowers calls on device buffers onto it without
   * waiting for them (the dispatch, the combine, the reductions, the
   * pipeline's send/recv): so the experts after a dispatch wait for it on
   * the GPU, not on the host.  A non-blocking stream raced with them. */
  /* The communication's stream is a blocking one too; the events time
   * nothing (CU_EVENT_DISABLE_TIMING). */
  if (cu_check(cu.StreamCreate(&stream, 0 /* blocking */), "cuStreamCreate") ||
      cu_check(cu.StreamCreate(&comm_stream, 0), "cuStreamCreate (communication)") ||
      blas_check(cu.blasCreate(&blas), "cublasCreate") ||
      blas_check(cu.blasSetStream(blas, stream), "cublasSetStream"))
    return -1;
  for (int i = 0; i < MOE_CUDA_EVENTS; i++)
    if (cu_check(cu.EventCreate(&event[i], 0x2 /* CU_EVENT_DISABLE_TIMING */), "cuEventCreate"))
      return -1;
  return 0;
}

static int state; /* 1 loaded, -1 failed */
static void load_once(void) { state = load() == 0 ? 1 : -1; }

const moe_cuda_api_t* moe_cuda_api_load(char* why, size_t len) {
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  pthread_once(&once, load_once);
  if (state < 0) {
    snprintf(why, len, "%s", error);
    return NULL;
  }
  return &real;
}
