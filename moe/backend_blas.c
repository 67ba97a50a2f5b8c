/* The host compute backend: OpenBLAS for the matrix products, loops for the
 * elementwise SwiGLU. */
#include "backend.h"

#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

/* OpenBLAS's own entry points; declared here because not every cblas.h a
 * system puts first (netlib's, through alternatives) declares them. */
void openblas_set_num_threads(int num_threads);
int openblas_get_num_threads(void);
char* openblas_get_config(void);

static void blas_sgemm(int trans_a, int trans_b, int m, int n, int k, float alpha, const float* a,
                       int lda, const float* b, int ldb, float beta, float* c, int ldc) {
  if (m <= 0 || n <= 0) return;
  if (k <= 0) { /* BLAS implementations differ on k = 0; do it here */
    for (int i = 0; i < m; i++)
      for (int j = 0; j < n; j++)
        c[(size_t)i * ldc + j] = beta == 0.0f ? 0.0f : beta * c[(size_t)i * ldc + j];
    return;
  }
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
              trans_b ? CblasTrans : CblasNoTrans, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

static float sigmoid(float z) { return 1.0f / (1.0f + expf(-z)); }

static void blas_swiglu_forward(size_t count, const float* a, const float* b, float* h) {
  for (size_t i = 0; i < count; i++) h[i] = a[i] * sigmoid(a[i]) * b[i];
}

/* silu'(z) = s + z s (1 - s) with s = sigmoid(z). */
static void blas_swiglu_backward(size_t count, const float* a, const float* b, const float* dh,
                                 float* da, float* db) {
  for (size_t i = 0; i < count; i++) {
    float s = sigmoid(a[i]);
    float silu = a[i] * s;
    da[i] = dh[i] * b[i] * (s + silu * (1.0f - s));
    db[i] = dh[i] * silu;
  }
}

static const char* blas_describe(char* buf, size_t len) {
  snprintf(buf, len, "OpenBLAS (%s), %d thread(s)", openblas_get_config(),
           openblas_get_num_threads());
  return buf;
}

static const moe_backend_ops_t blas_ops = {
    .size = sizeof(moe_backend_ops_t),
    .name = "blas",
    .sgemm = blas_sgemm,
    .swiglu_forward = blas_swiglu_forward,
    .swiglu_backward = blas_swiglu_backward,
    .describe = blas_describe,
};

const moe_backend_ops_t* moe_backend_blas(int threads) {
  if (threads > 0) openblas_set_num_threads(threads);
  else if (!getenv("OPENBLAS_NUM_THREADS") && !getenv("OMP_NUM_THREADS"))
    openblas_set_num_threads(1);
  return &blas_ops;
}
