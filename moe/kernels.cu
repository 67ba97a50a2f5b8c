/* The CUDA backend's kernels (cuda_api.h): one thread per element, token,
 * expert, slot or block of MOE_CUDA_BLOCK elements, each running the
 * per-thread arithmetic of kern_math.h, the same source as the host backend
 * and the stand-in's twins.  Built with -fmad=false so that a * b + c is two
 * roundings, as on the host.  Names are C names: cuda_real.c looks them up
 * with cuModuleGetFunction. */
#include "cuda_api.h"
#include "kern_math.h"

#define TID ((size_t)blockIdx.x * blockDim.x + threadIdx.x)

extern "C" {

__global__ void moe_kto_bf16(size_t count, const float* x, uint16_t* out) {
  size_t i = TID;
  if (i < count) out[i] = moe_k_bf16(x[i]);
}

__global__ void moe_kswiglu(size_t count, const float* a, const float* b, float* h) {
  size_t i = TID;
  if (i < count) h[i] = moe_k_swiglu(a[i], b[i]);
}

__global__ void moe_kswiglu_back(size_t count, const float* a, const float* b, const float* dh,
                                 float* da, float* db) {
  size_t i = TID;
  if (i < count) moe_k_swiglu_back(a[i], b[i], dh[i], &da[i], &db[i]);
}

__global__ void moe_krouter_token(int n, int e, int k, float* probs, int32_t* expert,
                                  float* gate) {
  size_t t = TID;
  if (t < (size_t)n) moe_k_router_token(e, k, probs + t * e, expert + t * k, gate + t * k);
}

__global__ void moe_krouter_stat(int n, int e, int k, const float* probs, const int32_t* expert,
                                 float* stats) {
  size_t x = TID;
  if (x < (size_t)e) moe_k_router_stat(n, e, k, (int)x, probs, expert, &stats[x], &stats[e + x]);
  else if (x == (size_t)e) stats[2 * e] += (float)n;
}

__global__ void moe_krouter_dlogits(int n, int e, int k, const float* probs,
                                    const int32_t* expert, const float* gate, const float* dgate,
                                    const float* g, float* dl) {
  size_t t = TID;
  if (t < (size_t)n)
    moe_k_router_dlogits(e, k, probs + t * e, expert + t * k, gate + t * k, dgate + t * k, g,
                         dl + t * e);
}

__global__ void moe_kgather(int rows, int h, const int32_t* token_of, const float* x, float* out) {
  size_t i = TID;
  if (i < (size_t)rows * h) out[i] = x[(size_t)token_of[i / h] * h + i % h];
}

__global__ void moe_kcombine(size_t tokens, int k, int h, const int32_t* row_of,
                             const float* gate, const float* y, float* out) {
  size_t i = TID, t = i / h;
  if (i < tokens * h)
    out[i] = moe_k_combine_elem(k, h, (int)(i % h), row_of + t * k, gate + t * k, y, out[i]);
}

__global__ void moe_kcombine_back(size_t slots, int k, int h, const int32_t* row_of,
                                  const float* gate, const float* dout, const float* y, float* dy,
                                  float* dgate) {
  size_t s = TID;
  if (s < slots) dgate[s] = moe_k_combine_back_slot(h, row_of[s], gate[s], dout + (s / k) * h, y, dy);
}

__global__ void moe_kscatter(size_t tokens, int k, int h, const int32_t* row_of, const float* src,
                             float* dx) {
  size_t t = TID;
  if (t < tokens) moe_k_scatter_token(k, h, row_of + t * k, src, dx + t * h);
}

__global__ void moe_kadd(size_t count, const float* a, const float* b, float* out) {
  size_t i = TID;
  if (i < count) out[i] = a[i] + b[i];
}

__global__ void moe_kscaled_diff(size_t count, float scale, const float* a, const float* b,
                                 float* out) {
  size_t i = TID;
  if (i < count) out[i] = scale * (a[i] - b[i]);
}

__global__ void moe_ksq_dist_blocks(size_t count, const float* a, const float* b,
                                    double* partial) {
  size_t blk = TID, i0 = blk * MOE_CUDA_BLOCK;
  if (i0 >= count) return;
  double sq = 0.0;
  for (size_t i = i0; i < count && i < i0 + MOE_CUDA_BLOCK; i++) {
    double d = (double)a[i] - b[i];
    sq += d * d;
  }
  partial[blk] = sq;
}

__global__ void moe_kadam(size_t count, float lr, float b1, float b2, float eps, float c1,
                          float c2, float* p, const float* g, float* m, float* v) {
  size_t i = TID;
  if (i < count) moe_k_adam(lr, b1, b2, eps, c1, c2, &p[i], g[i], &m[i], &v[i]);
}

}
