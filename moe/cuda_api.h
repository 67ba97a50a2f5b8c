/* What the CUDA compute backend (backend_cuda.c) needs from a GPU, as one
 * table: cuBLAS's sgemm and bfloat16 GemmEx, the kernels of kernels.cu (one entry each, typed),
 * copies and a synchronize on one stream, a second stream and events
 * for the communication's calls.  Two tables fill it:
 *
 *   moe_cuda_api_load    the GPU: libcuda and libcublas loaded with dlopen
 *                        (no link-time CUDA dependency), the kernels from the
 *                        fatbin nvcc built (cuModuleLoadData), launched on
 *                        the backend's stream (cuda_real.c);
 *   moe_cuda_api_standin the host stand-in the tests run where there is no
 *                        GPU: OpenBLAS in cuBLAS's column-major convention and
 *                        the kernels' host twins, the same per-thread
 *                        arithmetic (kern_math.h) over host memory
 *                        (cuda_standin.c).
 *
 * Pointers are device memory on the GPU; on the stand-in, memory its alloc
 * mapped so that the host cannot touch it (its entries work on a read-write
 * shadow of it: cuda_standin.c), or host memory passed through.  An entry
 * returns 0, or -1 with the reason in the table's last error. */
#ifndef MOE_CUDA_API_H_
#define MOE_CUDA_API_H_

#include <stddef.h>
#include <stdint.h>

typedef struct moe_cuda_api {
  const char* name;
  /* cublasSgemm on column-major matrices: C = alpha op(A) op(B) + beta C,
   * op(A) m x k, op(B) k x n, C m x n, ld* the column strides. */
  int (*sgemm)(int trans_a, int trans_b, int m, int n, int k, float alpha, const float* a, int lda,
               const float* b, int ldb, float beta, float* c, int ldc);
  /* cublasGemmEx the same way with A and B in bfloat16, C in float32, the
   * products summed in float32 (CUBLAS_COMPUTE_32F) */
  int (*gemm_bf16)(int trans_a, int trans_b, int m, int n, int k, float alpha, const uint16_t* a,
                   int lda, const uint16_t* b, int ldb, float beta, float* c, int ldc);
  /* kernels.cu, one thread per element, token, expert, slot or block */
  int (*to_bf16)(size_t count, const float* x, uint16_t* out); /* moe_k_bf16 of each */
  int (*swiglu)(size_t count, const float* a, const float* b, float* h);
  int (*swiglu_back)(size_t count, const float* a, const float* b, const float* dh, float* da,
                     float* db);
  int (*router_token)(int n, int e, int k, float* probs, int32_t* expert, float* gate);
  int (*router_stat)(int n, int e, int k, const float* probs, const int32_t* expert,
                     float* stats);
  int (*router_dlogits)(int n, int e, int k, const float* probs, const int32_t* expert,
                        const float* gate, const float* dgate, const float* g, float* dlogits);
  int (*gather)(int rows, int h, const int32_t* token_of, const float* x, float* out);
  int (*combine)(size_t tokens, int k, int h, const int32_t* row_of, const float* gate,
                 const float* y, float* out);
  int (*combine_back)(size_t slots, int k, int h, const int32_t* row_of, const float* gate,
                      const float* dout, const float* y, float* dy, float* dgate);
  int (*scatter)(size_t tokens, int k, int h, const int32_t* row_of, const float* src,
                 float* dx);
  int (*add)(size_t count, const float* a, const float* b, float* out);
  int (*scaled_diff)(size_t count, float scale, const float* a, const float* b, float* out);
  /* partial[b] = the sum of (a - b)^2 over block b of MOE_CUDA_BLOCK
   * elements, in double, in index order */
  int (*sq_dist_blocks)(size_t count, const float* a, const float* b, double* partial);
  int (*adam)(size_t count, float lr, float b1, float b2, float eps, float c1, float c2, float* p,
              const float* g, float* m, float* v);
  /* memory and order */
  int (*alloc)(void** ptr, size_t bytes);
  int (*free)(void* ptr);
  int (*copy)(void* dst, const void* src, size_t bytes); /* device to device */
  int (*to_host)(void* dst, const void* src, size_t bytes);
  int (*to_device)(void* dst, const void* src, size_t bytes);
  int (*zero)(void* dst, size_t bytes);
  /* The address the communication library is given for alloc's memory ptr
   * (or an address inside it): ptr itself on the GPU (the library takes its
   * device path), the host shadow on the stand-in. */
  void* (*comm_ptr)(void* ptr);
  /* The compute stream and its events: the host waits for both streams
   * (and the legacy default stream) */
  int (*sync)(void);
  /* A second stream, for the communication library's calls that overlap
   * the compute: the handle moeccl is given (a CUstream), or NULL where the
   * library's calls run at once (the stand-in: it gives moeccl the host
   * shadows).  record marks event ev (< MOE_CUDA_EVENTS) after the work
   * queued so far on the compute (on_comm 0) or the communication stream
   * (1); wait makes the work queued from now on on that stream wait for
   * ev's last mark (cuEventRecord, cuStreamWaitEvent: no host wait). */
  void* (*comm_stream)(void);
  int (*record)(int ev, int on_comm);
  int (*wait)(int ev, int on_comm);
  const char* (*describe)(char* buf, size_t len);
  const char* (*last_error)(void);
} moe_cuda_api_t;

/* Events of record and wait. */
#define MOE_CUDA_EVENTS 4

/* Elements per block of the kernels, and of sq_dist_blocks' sums. */
#define MOE_CUDA_BLOCK 256

/* The GPU's table, or NULL with the reason in why (no driver, no device, no
 * cuBLAS, no kernels in this build). */
const moe_cuda_api_t* moe_cuda_api_load(char* why, size_t len);
/* The host stand-in (never fails).  Its compute stream is queued and runs
 * when the host or the communication waits for it (cuda_standin.c). */
const moe_cuda_api_t* moe_cuda_api_standin(void);
/* The ops the stand-in queued and the host's waits for it (sync) so far. */
void moe_cuda_standin_counts(unsigned long long* ops, unsigned long long* syncs);

#endif
