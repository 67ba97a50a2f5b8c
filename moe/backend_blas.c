/* The host compute backend: OpenBLAS for the matrix products, loops for the
 * rest (the router's selection and softmaxes, the row gathers and sums,
 * SwiGLU, Adam). */
#include "backend.h"

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

/* The K largest of logits[0..E) in order, ties to the lower id (a strict >
 * keeps the first maximum), and the softmax over them. */
static void topk(const float* logits, int e_count, int k, int32_t* expert, float* gate) {
  unsigned char taken[e_count];
  memset(taken, 0, sizeof(taken));
  for (int j = 0; j < k; j++) { /* O(K E): K is small */
    int best = -1;
    for (int e = 0; e < e_count; e++)
      if (!taken[e] && (best < 0 || logits[e] > logits[best])) best = e;
    expert[j] = best;
    taken[best] = 1;
  }
  float top = logits[expert[0]], sum = 0.0f;
  for (int j = 0; j < k; j++) sum += gate[j] = expf(logits[expert[j]] - top);
  for (int j = 0; j < k; j++) gate[j] /= sum;
}

static void softmax_inplace(float* v, int count) {
  float top = v[0], sum = 0.0f;
  for (int i = 1; i < count; i++) top = v[i] > top ? v[i] : top;
  for (int i = 0; i < count; i++) sum += v[i] = expf(v[i] - top);
  for (int i = 0; i < count; i++) v[i] /= sum;
}

static void blas_router_select(int n, int e_count, int k, float* probs, int32_t* expert,
                               float* gate, float* stats) {
  for (int t = 0; t < n; t++) {
    float* row = probs + (size_t)t * e_count;
    topk(row, e_count, k, expert + (size_t)t * k, gate + (size_t)t * k);
    softmax_inplace(row, e_count);
    for (int j = 0; j < k; j++) stats[expert[(size_t)t * k + j]] += 1.0f;
    for (int e = 0; e < e_count; e++) stats[e_count + e] += row[e];
  }
  stats[2 * e_count] += (float)n;
}

static void blas_router_dlogits(int n, int e_count, int k, const float* probs,
                                const int32_t* experts, const float* gates, const float* dgates,
                                const float* g, float* dlogits) {
  for (int t = 0; t < n; t++) {
    const float *p = probs + (size_t)t * e_count, *gate = gates + (size_t)t * k;
    const float* dgate = dgates + (size_t)t * k;
    const int32_t* expert = experts + (size_t)t * k;
    float *dl = dlogits + (size_t)t * e_count, pg = 0.0f, wd = 0.0f;
    for (int e = 0; e < e_count; e++) pg += p[e] * g[e];
    for (int e = 0; e < e_count; e++) dl[e] = p[e] * (g[e] - pg);
    for (int j = 0; j < k; j++) wd += gate[j] * dgate[j];
    for (int j = 0; j < k; j++)
      if (expert[j] >= 0) dl[expert[j]] += gate[j] * (dgate[j] - wd);
  }
}

static void blas_gather_rows(int rows, int h, const int32_t* token_of, const float* x, float* out) {
  for (int r = 0; r < rows; r++)
    memcpy(out + (size_t)r * h, x + (size_t)token_of[r] * h, h * sizeof(float));
}

static void blas_combine_rows(size_t slots, int k, int h, const int32_t* row_of,
                              const float* gate, const float* y_rows, float* out) {
  for (size_t s = 0; s < slots; s++) {
    if (row_of[s] < 0) continue;
    const float* y = y_rows + (size_t)row_of[s] * h;
    float *o = out + (s / k) * h, w = gate[s];
    for (int i = 0; i < h; i++) o[i] += w * y[i];
  }
}

static void blas_combine_rows_backward(size_t slots, int k, int h, const int32_t* row_of,
                                       const float* gate, const float* dout, const float* y_rows,
                                       float* dy_rows, float* dgate) {
  for (size_t s = 0; s < slots; s++) {
    dgate[s] = 0.0f;
    if (row_of[s] < 0) continue;
    const float* d = dout + (s / k) * h;
    const float* y = y_rows + (size_t)row_of[s] * h;
    float *dy = dy_rows + (size_t)row_of[s] * h, w = gate[s], dot = 0.0f;
    for (int i = 0; i < h; i++) {
      dy[i] = w * d[i];
      dot += d[i] * y[i];
    }
    dgate[s] = dot;
  }
}

static void blas_scatter_add_rows(int rows, int h, const int32_t* token_of, const float* src,
                                  float* dx) {
  for (int r = 0; r < rows; r++) {
    const float* s = src + (size_t)r * h;
    float* d = dx + (size_t)token_of[r] * h;
    for (int i = 0; i < h; i++) d[i] += s[i];
  }
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
  for (size_t i = 0; i < count; i++) {
    float gi = g[i];
    m[i] = b1 * m[i] + (1.0f - b1) * gi;
    v[i] = b2 * v[i] + (1.0f - b2) * gi * gi;
    p[i] -= lr * (m[i] * c1) / (sqrtf(v[i] * c2) + eps);
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
    .describe = blas_describe,
};

const moe_backend_ops_t* moe_backend_blas(int threads) {
  if (threads > 0) openblas_set_num_threads(threads);
  else if (!getenv("OPENBLAS_NUM_THREADS") && !getenv("OMP_NUM_THREADS"))
    openblas_set_num_threads(1);
  return &blas_ops;
}
