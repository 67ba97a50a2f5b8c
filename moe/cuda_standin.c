/* The host stand-in of the CUDA table (cuda_api.h), for the tests where
 * there is no GPU: cuBLAS's column-major sgemm by OpenBLAS, and each kernel
 * of kernels.cu as a loop over its threads running the same per-thread
 * arithmetic (kern_math.h) on host memory, in thread order. */
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_api.h"
#include "kern_math.h"

static int s_sgemm(int trans_a, int trans_b, int m, int n, int k, float alpha, const float* a,
                   int lda, const float* b, int ldb, float beta, float* c, int ldc) {
  if (m <= 0 || n <= 0) return 0;
  if (k <= 0) { /* BLAS's convention: C = beta C */
    for (int j = 0; j < n; j++)
      for (int i = 0; i < m; i++)
        c[(size_t)j * ldc + i] = beta == 0.0f ? 0.0f : beta * c[(size_t)j * ldc + i];
    return 0;
  }
  cblas_sgemm(CblasColMajor, trans_a ? CblasTrans : CblasNoTrans,
              trans_b ? CblasTrans : CblasNoTrans, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  return 0;
}

static int s_swiglu(size_t count, const float* a, const float* b, float* h) {
  for (size_t i = 0; i < count; i++) h[i] = moe_k_swiglu(a[i], b[i]);
  return 0;
}

static int s_swiglu_back(size_t count, const float* a, const float* b, const float* dh, float* da,
                         float* db) {
  for (size_t i = 0; i < count; i++) moe_k_swiglu_back(a[i], b[i], dh[i], &da[i], &db[i]);
  return 0;
}

static int s_router_token(int n, int e, int k, float* probs, int32_t* expert, float* gate) {
  for (int t = 0; t < n; t++)
    moe_k_router_token(e, k, probs + (size_t)t * e, expert + (size_t)t * k, gate + (size_t)t * k);
  return 0;
}

/* threads 0..e-1: an expert's statistics; thread e: the token count */
static int s_router_stat(int n, int e, int k, const float* probs, const int32_t* expert,
                         float* stats) {
  for (int x = 0; x < e; x++) moe_k_router_stat(n, e, k, x, probs, expert, &stats[x], &stats[e + x]);
  stats[2 * e] += (float)n;
  return 0;
}

static int s_router_dlogits(int n, int e, int k, const float* probs, const int32_t* expert,
                            const float* gate, const float* dgate, const float* g, float* dl) {
  for (int t = 0; t < n; t++)
    moe_k_router_dlogits(e, k, probs + (size_t)t * e, expert + (size_t)t * k,
                         gate + (size_t)t * k, dgate + (size_t)t * k, g, dl + (size_t)t * e);
  return 0;
}

static int s_gather(int rows, int h, const int32_t* token_of, const float* x, float* out) {
  for (size_t i = 0; i < (size_t)rows * h; i++) out[i] = x[(size_t)token_of[i / h] * h + i % h];
  return 0;
}

static int s_combine(size_t tokens, int k, int h, const int32_t* row_of, const float* gate,
                     const float* y, float* out) {
  for (size_t i = 0; i < tokens * h; i++) {
    size_t t = i / h;
    out[i] = moe_k_combine_elem(k, h, (int)(i % h), row_of + t * k, gate + t * k, y, out[i]);
  }
  return 0;
}

static int s_combine_back(size_t slots, int k, int h, const int32_t* row_of, const float* gate,
                          const float* dout, const float* y, float* dy, float* dgate) {
  for (size_t s = 0; s < slots; s++)
    dgate[s] = moe_k_combine_back_slot(h, row_of[s], gate[s], dout + (s / k) * h, y, dy);
  return 0;
}

static int s_scatter(size_t tokens, int k, int h, const int32_t* row_of, const float* src,
                     float* dx) {
  for (size_t t = 0; t < tokens; t++) moe_k_scatter_token(k, h, row_of + t * k, src, dx + t * h);
  return 0;
}

static int s_add(size_t count, const float* a, const float* b, float* out) {
  for (size_t i = 0; i < count; i++) out[i] = a[i] + b[i];
  return 0;
}

static int s_scaled_diff(size_t count, float scale, const float* a, const float* b, float* out) {
  for (size_t i = 0; i < count; i++) out[i] = scale * (a[i] - b[i]);
  return 0;
}

static int s_sq_dist_blocks(size_t count, const float* a, const float* b, double* partial) {
  for (size_t blk = 0; blk * MOE_CUDA_BLOCK < count; blk++) {
    double sq = 0.0;
    for (size_t i = blk * MOE_CUDA_BLOCK; i < count && i < (blk + 1) * MOE_CUDA_BLOCK; i++) {
      double d = (double)a[i] - b[i];
      sq += d * d;
    }
    partial[blk] = sq;
  }
  return 0;
}

static int s_adam(size_t count, float lr, float b1, float b2, float eps, float c1, float c2,
                  float* p, const float* g, float* m, float* v) {
  for (size_t i = 0; i < count; i++) moe_k_adam(lr, b1, b2, eps, c1, c2, &p[i], g[i], &m[i], &v[i]);
  return 0;
}

static char s_error[128];

static int s_alloc(void** ptr, size_t bytes) {
  *ptr = calloc(bytes ? bytes : 1, 1);
  if (!*ptr) snprintf(s_error, sizeof(s_error), "out of memory for %zu bytes", bytes);
  return *ptr ? 0 : -1;
}

static int s_free(void* ptr) {
  free(ptr);
  return 0;
}

static int s_copy(void* dst, const void* src, size_t bytes) {
  memmove(dst, src, bytes);
  return 0;
}

static int s_zero(void* dst, size_t bytes) {
  memset(dst, 0, bytes);
  return 0;
}

static int s_sync(void) { return 0; }

static const char* s_describe(char* buf, size_t len) {
  snprintf(buf, len, "the CUDA backend on its host stand-in (OpenBLAS for cuBLAS, the kernels' "
                     "host twins)");
  return buf;
}

static const char* s_last_error(void) { return s_error; }

static const moe_cuda_api_t standin = {
    .name = "cuda-standin",
    .sgemm = s_sgemm,
    .swiglu = s_swiglu,
    .swiglu_back = s_swiglu_back,
    .router_token = s_router_token,
    .router_stat = s_router_stat,
    .router_dlogits = s_router_dlogits,
    .gather = s_gather,
    .combine = s_combine,
    .combine_back = s_combine_back,
    .scatter = s_scatter,
    .add = s_add,
    .scaled_diff = s_scaled_diff,
    .sq_dist_blocks = s_sq_dist_blocks,
    .adam = s_adam,
    .alloc = s_alloc,
    .free = s_free,
    .copy = s_copy,
    .to_host = s_copy,
    .to_device = s_copy,
    .zero = s_zero,
    .sync = s_sync,
    .describe = s_describe,
    .last_error = s_last_error,
};

const moe_cuda_api_t* moe_cuda_api_standin(void) { return &standin; }
