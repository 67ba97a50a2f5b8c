/* The arithmetic of the moe/ backend's operations, one token, row, slot or
 * element at a time, shared by the host backend (backend_blas.c), the CUDA
 * kernels (kernels.cu) and their host twins (cuda_standin.c): one source, so
 * the device computes what the host computes in the same order (the GPU's
 * expf differs from the host's in the last bits; everything else is the
 * same operations in the same order when nvcc does not contract a * b + c,
 * which kernels.cu is built to avoid: -fmad=false).
 *
 * Built as C (static inline) or as CUDA (__host__ __device__). */
#ifndef MOE_KERN_MATH_H_
#define MOE_KERN_MATH_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __CUDACC__
#define MOE_KFN static __host__ __device__ inline
#else
#include <math.h>
#define MOE_KFN static inline
#endif

/* x rounded to bfloat16 (the top 16 bits of its float32), to nearest, ties
 * to even, as CUDA's __float2bfloat16_rn; a NaN stays a (quiet) NaN. */
MOE_KFN uint16_t moe_k_bf16(float x) {
  union {
    float f;
    uint32_t u;
  } v;
  v.f = x;
  if ((v.u & 0x7f800000u) == 0x7f800000u && (v.u & 0x007fffffu))
    return (uint16_t)((v.u >> 16) | 0x0040u);
  v.u += 0x7fffu + ((v.u >> 16) & 1u);
  return (uint16_t)(v.u >> 16);
}

/* A bfloat16 as the float32 it is exactly. */
MOE_KFN float moe_k_bf16_float(uint16_t h) {
  union {
    float f;
    uint32_t u;
  } v;
  v.u = (uint32_t)h << 16;
  return v.f;
}

MOE_KFN float moe_k_sigmoid(float z) { return 1.0f / (1.0f + expf(-z)); }

/* SwiGLU: h = silu(a) b. */
MOE_KFN float moe_k_swiglu(float a, float b) { return a * moe_k_sigmoid(a) * b; }

/* Its backward: silu'(z) = s + z s (1 - s), s = sigmoid(z). */
MOE_KFN void moe_k_swiglu_back(float a, float b, float dh, float* da, float* db) {
  float s = moe_k_sigmoid(a);
  float silu = a * s;
  *da = dh * b * (s + silu * (1.0f - s));
  *db = dh * silu;
}

/* One token's router: the k largest of logits[0..e) in order, ties to the
 * lower id (a strict > keeps the first maximum), into expert[k]; the
 * softmax over those k into gate[k]; then logits becomes the softmax over
 * all e.  O(k^2 e): k is small. */
MOE_KFN void moe_k_router_token(int e, int k, float* logits, int32_t* expert, float* gate) {
  for (int j = 0; j < k; j++) {
    int best = -1;
    for (int x = 0; x < e; x++) {
      int taken = 0;
      for (int i = 0; i < j; i++) taken |= expert[i] == x;
      if (!taken && (best < 0 || logits[x] > logits[best])) best = x;
    }
    expert[j] = best;
  }
  float top = logits[expert[0]], sum = 0.0f;
  for (int j = 0; j < k; j++) sum += gate[j] = expf(logits[expert[j]] - top);
  for (int j = 0; j < k; j++) gate[j] /= sum;
  top = logits[0], sum = 0.0f;
  for (int x = 1; x < e; x++) top = logits[x] > top ? logits[x] : top;
  for (int x = 0; x < e; x++) sum += logits[x] = expf(logits[x] - top);
  for (int x = 0; x < e; x++) logits[x] /= sum;
}

/* The statistics of expert x over n tokens, in token order: how many of
 * their k slots chose it, and the sum of its probability. */
MOE_KFN void moe_k_router_stat(int n, int e, int k, int x, const float* probs,
                               const int32_t* expert, float* count, float* psum) {
  float c = *count, p = *psum;
  for (int t = 0; t < n; t++) {
    for (int j = 0; j < k; j++) c += expert[(size_t)t * k + j] == x ? 1.0f : 0.0f;
    p += probs[(size_t)t * e + x];
  }
  *count = c, *psum = p;
}

/* One token's dL/dlogits [e]: the gate softmax's backward on the chosen ids
 * plus the full softmax's from g [e] (dL/dp, the same for every token). */
MOE_KFN void moe_k_router_dlogits(int e, int k, const float* p, const int32_t* expert,
                                  const float* gate, const float* dgate, const float* g,
                                  float* dl) {
  float pg = 0.0f, wd = 0.0f;
  for (int x = 0; x < e; x++) pg += p[x] * g[x];
  for (int x = 0; x < e; x++) dl[x] = p[x] * (g[x] - pg);
  for (int j = 0; j < k; j++) wd += gate[j] * dgate[j];
  for (int j = 0; j < k; j++)
    if (expert[j] >= 0) dl[expert[j]] += gate[j] * (dgate[j] - wd);
}

/* Element i of one token's combined output: o += the k slots' gate-weighted
 * rows, in slot order. */
MOE_KFN float moe_k_combine_elem(int k, int h, int i, const int32_t* row_of, const float* gate,
                                 const float* y, float o) {
  for (int j = 0; j < k; j++)
    if (row_of[j] >= 0) o += gate[j] * y[(size_t)row_of[j] * h + i];
  return o;
}

/* One slot's combine backward: dy_row = gate dout, and the dot of dout and
 * the slot's row (0 without a row). */
MOE_KFN float moe_k_combine_back_slot(int h, int32_t row, float gate, const float* dout,
                                      const float* y, float* dy) {
  if (row < 0) return 0.0f;
  const float* yr = y + (size_t)row * h;
  float* d = dy + (size_t)row * h;
  float dot = 0.0f;
  for (int i = 0; i < h; i++) {
    d[i] = gate * dout[i];
    dot += dout[i] * yr[i];
  }
  return dot;
}

/* One token's rows added into its dx row, in increasing row order (as a
 * walk over all rows in order adds them). */
MOE_KFN void moe_k_scatter_token(int k, int h, const int32_t* row_of, const float* src,
                                 float* dx) {
  int32_t last = -1;
  for (int j = 0; j < k; j++) { /* the next larger row each time: k is small */
    int32_t next = -1;
    for (int i = 0; i < k; i++)
      if (row_of[i] > last && (next < 0 || row_of[i] < next)) next = row_of[i];
    if (next < 0) break;
    const float* s = src + (size_t)next * h;
    for (int i = 0; i < h; i++) dx[i] += s[i];
    last = next;
  }
}

/* One Adam update of one parameter. */
MOE_KFN void moe_k_adam(float lr, float b1, float b2, float eps, float c1, float c2, float* p,
                        float g, float* m, float* v) {
  *m = b1 * *m + (1.0f - b1) * g;
  *v = b2 * *v + (1.0f - b2) * g * g;
  *p -= lr * (*m * c1) / (sqrtf(*v * c2) + eps);
}

#endif
