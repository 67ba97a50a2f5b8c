/* The host compute backend: OpenBLAS for the matrix products, loops for the
 * rest (the router's selection and softmaxes, the row gathers and sums,
 * SwiGLU, Adam). */
#include "backend.h"
#include "kern_math.h"

#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* OpenBLAS's own entry points; declared here because not every cblas.h a
 * system puts first (netlib's, through alternatives) declares them. */
void openblas_set_num_threads(int num_threads);
int openblas_get_num_threads(void);
char* openblas_get_config(void);

static int gemm_bf16;     /* gemm_precision */
static float* bf16_a;     /* sgemm's operands rounded to bfloat16 (held as float32) */
static float* bf16_b;
static size_t bf16_a_n, bf16_b_n;

/* The n floats from x rounded to bfloat16 in *buf (grown to n); NULL when
 * there is no memory for them (the product is not made: the backend fails). */
static const float* round_bf16(const float* x, size_t n, float** buf, size_t* cap) {
  if (n > *cap) {
    float* p = realloc(*buf, n * sizeof(float));
    if (!p) return NULL;
    *buf = p, *cap = n;
  }
  for (size_t i = 0; i < n; i++) (*buf)[i] = moe_k_bf16_float(moe_k_bf16(x[i]));
  return *buf;
}

static const char* blas_failure;

static void blas_sgemm(int trans_a, int trans_b, int m, int n, int k, float alpha, const float* a,
                       int lda, const float* b, int ldb, float beta, float* c, int ldc) {
  if (m <= 0 || n <= 0) return;
  if (k <= 0) { /* BLAS implementations differ on k = 0; do it here */
    for (int i = 0; i < m; i++)
      for (int j = 0; j < n; j++)
        c[(size_t)i * ldc + j] = beta == 0.0f ? 0.0f : beta * c[(size_t)i * ldc + j];
    return;
  }
  if (gemm_bf16) { /* the spans of A and B as stored, row-major */
    size_t na = (size_t)((trans_a ? k : m) - 1) * lda + (trans_a ? m : k);
    size_t nb = (size_t)((trans_b ? n : k) - 1) * ldb + (trans_b ? k : n);
    const float* ra = round_bf16(a, na, &bf16_a, &bf16_a_n);
    const float* rb = ra ? round_bf16(b, nb, &bf16_b, &bf16_b_n) : NULL;
    if (!ra || !rb) {
      if (!blas_failure) blas_failure = "sgemm: no memory to round its operands to bfloat16";
      return;
    }
    a = ra, b = rb;
  }
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
              trans_b ? CblasTrans : CblasNoTrans, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

static void blas_gemm_precision(int bf16) { gemm_bf16 = bf16 != 0; }

static void blas_swiglu_forward(size_t count, const float* a, const float* b, float* h) {
  for (size_t i = 0; i < count; i++) h[i] = moe_k_swiglu(a[i], b[i]);
}

static void blas_swiglu_backward(size_t count, const float* a, const float* b, const float* dh,
                                 float* da, float* db) {
  for (size_t i = 0; i < count; i++) moe_k_swiglu_back(a[i], b[i], dh[i], &da[i], &db[i]);
}

static void blas_router_select(int n, int e, int k, float* probs, int32_t* expert, float* gate,
                               float* stats) {
  for (int t = 0; t < n; t++)
    moe_k_router_token(e, k, probs + (size_t)t * e, expert + (size_t)t * k, gate + (size_t)t * k);
  for (int x = 0; x < e; x++)
    moe_k_router_stat(n, e, k, x, probs, expert, &stats[x], &stats[e + x]);
  stats[2 * e] += (float)n;
}

static void blas_router_dlogits(int n, int e, int k, const float* probs, const int32_t* expert,
                                const float* gate, const float* dgate, const float* g,
                                float* dlogits) {
  for (int t = 0; t < n; t++)
    moe_k_router_dlogits(e, k, probs + (size_t)t * e, expert + (size_t)t * k,
                         gate + (size_t)t * k, dgate + (size_t)t * k, g, dlogits + (size_t)t * e);
}

static void blas_gather_rows(int rows, int h, const int32_t* token_of, const float* x, float* out) {
  for (int r = 0; r < rows; r++)
    memcpy(out + (size_t)r * h, x + (size_t)token_of[r] * h, h * sizeof(float));
}

static void blas_combine_rows(size_t slots, int k, int h, const int32_t* row_of,
                              const float* gate, const float* y, float* out) {
  for (size_t t = 0; t < slots / k; t++)
    for (int i = 0; i < h; i++)
      out[t * h + i] = moe_k_combine_elem(k, h, i, row_of + t * k, gate + t * k, y, out[t * h + i]);
}

static void blas_combine_rows_backward(size_t slots, int k, int h, const int32_t* row_of,
                                       const float* gate, const float* dout, const float* y,
                                       float* dy, float* dgate) {
  for (size_t s = 0; s < slots; s++)
    dgate[s] = moe_k_combine_back_slot(h, row_of[s], gate[s], dout + (s / k) * h, y, dy);
}

static void blas_scatter_add_rows(size_t slots, int k, int h, const int32_t* row_of,
                                  const float* src, float* dx) {
  for (size_t t = 0; t < slots / k; t++)
    moe_k_scatter_token(k, h, row_of + t * k, src, dx + t * h);
}

static void blas_copy(size_t count, const float* src, float* dst) {
  memcpy(dst, src, count * sizeof(float));
}

static void blas_zero(size_t count, float* dst) { memset(dst, 0, count * sizeof(float)); }

static double blas_sq_dist(size_t count, const float* a, const float* b) {
  double sq = 0.0;
  for (size_t i = 0; i < count; i++) {
    double d = (double)a[i] - b[i];
    sq += d * d;
  }
  return sq;
}

static void blas_scaled_diff(size_t count, float scale, const float* a, const float* b,
                             float* out) {
  for (size_t i = 0; i < count; i++) out[i] = scale * (a[i] - b[i]);
}

static void blas_add(size_t count, const float* a, const float* b, float* out) {
  for (size_t i = 0; i < count; i++) out[i] = a[i] + b[i];
}

static void blas_adam(size_t count, float lr, float b1, float b2, float eps, float c1, float c2,
                      float* p, const float* g, float* m, float* v) {
  for (size_t i = 0; i < count; i++) moe_k_adam(lr, b1, b2, eps, c1, c2, &p[i], g[i], &m[i], &v[i]);
}

static void* blas_alloc(size_t bytes) { return calloc(bytes ? bytes : 1, 1); }

static void blas_free(void* p) { free(p); }

static void blas_memcpy(void* dst, const void* src, size_t bytes) {
  if (bytes) memcpy(dst, src, bytes);
}

static void* blas_comm_ptr(void* p) { return p; }

static void blas_sync(void) {}

static const char* blas_failed(void) { return blas_failure; }

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
    .router_select = blas_router_select,
    .router_dlogits = blas_router_dlogits,
    .gather_rows = blas_gather_rows,
    .combine_rows = blas_combine_rows,
    .combine_rows_backward = blas_combine_rows_backward,
    .scatter_add_rows = blas_scatter_add_rows,
    .copy = blas_copy,
    .zero = blas_zero,
    .sq_dist = blas_sq_dist,
    .scaled_diff = blas_scaled_diff,
    .add = blas_add,
    .adam = blas_adam,
    .alloc = blas_alloc,
    .free = blas_free,
    .to_host = blas_memcpy,
    .to_device = blas_memcpy,
    .comm_ptr = blas_comm_ptr,
    .sync = blas_sync,
    .failed = blas_failed,
    .describe = blas_describe,
    .gemm_precision = blas_gemm_precision,
};

const moe_backend_ops_t* moe_backend_blas(int threads) {
  if (threads > 0) openblas_set_num_threads(threads);
  else if (!getenv("OPENBLAS_NUM_THREADS") && !getenv("OMP_NUM_THREADS"))
    openblas_set_num_threads(1);
  return &blas_ops;
}
