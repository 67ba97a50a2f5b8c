/* The compute backend of the moe/ layer: the few dense operations the router
 * and the experts need, behind one ops table, so that a GPU backend (cuBLAS
 * and its kernels) can take the host backend's place without the layer code
 * changing.  Every pointer an op receives lies in the backend's memory (host
 * memory for the BLAS backend).  Matrices are row-major, float32.
 *
 * The router's top-K and softmaxes and the local dispatch/combine of
 * model.c still run on the host over these pointers; a device backend adds
 * ops for them here (and memory allocation) when it comes. */
#ifndef MOE_BACKEND_H_
#define MOE_BACKEND_H_

#include <stddef.h>

typedef struct moe_backend_ops {
  size_t size; /* sizeof(moe_backend_ops_t) of the backend's build */
  const char* name;

  /* C = alpha * op(A) * op(B) + beta * C, where op(A) is m x k, op(B) is
   * k x n and C is m x n; trans_a / trans_b non-zero means op(X) = X^T.
   * lda, ldb, ldc are the row strides of A, B, C as stored.  m, n or k may
   * be 0 (k = 0 scales C by beta).  Synchronous; never fails. */
  void (*sgemm)(int trans_a, int trans_b, int m, int n, int k, float alpha, const float* a, int lda,
                const float* b, int ldb, float beta, float* c, int ldc);

  /* SwiGLU's gate, elementwise over count values: h = silu(a) * b with
   * silu(z) = z * sigmoid(z).  h may not alias a or b. */
  void (*swiglu_forward)(size_t count, const float* a, const float* b, float* h);

  /* Its backward from dh = dL/dh: da = dh * b * silu'(a), db = dh * silu(a)
   * (overwritten, not accumulated).  da and db may alias neither input. */
  void (*swiglu_backward)(size_t count, const float* a, const float* b, const float* dh, float* da,
                          float* db);

  /* One line saying what computes (library, version, threads) into buf;
   * returns buf. */
  const char* (*describe)(char* buf, size_t len);
} moe_backend_ops_t;

/* The host backend: OpenBLAS's cblas_sgemm and plain loops.  threads > 0
 * sets OpenBLAS's thread count; 0 keeps one thread unless OPENBLAS_NUM_THREADS
 * (or OMP_NUM_THREADS) is set, so that ranks sharing a machine do not
 * oversubscribe its cores.  Returns the table (static storage). */
const moe_backend_ops_t* moe_backend_blas(int threads);

#endif
