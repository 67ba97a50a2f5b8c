/* The compute backend of the moe/ layer: every operation the router, the
 * local dispatch/combine, the experts, the residual stream and Adam do on
 * activations, gradients and parameters, behind one ops table, so that a
 * GPU backend (cuBLAS and its kernels) can take the host backend's place
 * without the layer code changing.  Matrices are row-major, float32.
 *
 * Memory.  Every pointer an op receives (floats, and the index arrays: expert
 * ids, the local plan's row_of and token_of) lies in the backend's memory,
 * from its alloc: host memory for the BLAS backend, device memory for the
 * CUDA one.  The host reads and writes backend memory only through to_host
 * and to_device (into small host mirrors: the router's statistics, expert
 * ids for the counting sort, losses, dumps); the communication library is
 * given comm_ptr(p) for backend memory p (p itself on the host and on a GPU,
 * where the library takes its device path; the host shadow on the CUDA
 * backend's stand-in, whose device memory the host cannot touch, so that
 * the tests catch any host dereference of a tensor).
 *
 * Order.  Ops run in the order they are called (the host backend's are done
 * when they return; a device backend's are queued on its stream, and every
 * op that returns a value to the host, to_host and to_device included, waits
 * for them).  An op does not fail on the host; a device backend's failure (a
 * launch the driver refused, no memory) is kept, later ops do nothing, and
 * failed() says why.
 *
 * What stays on the host: the local plan's counting sort (built from a host
 * mirror of the expert ids), the per-expert row counts the GEMM loop walks,
 * and the router statistics' aux-loss coefficients (E floats).  moe_train
 * --device cuda runs every layout, pipeline schedule and expert placement
 * this way (checked on the stand-in; not yet on a GPU). */
#ifndef MOE_BACKEND_H_
#define MOE_BACKEND_H_

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

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

  /* The router over n tokens' logits [n][e] (probs, in place): per token
   * the k largest in order, ties to the lower id, into expert [n][k]; the
   * softmax over those k into gate [n][k]; then the softmax over all e into
   * probs.  stats (MOE_STATS_LEN(e)) accumulates the tokens sent to each
   * expert [0, e), the probabilities' sums [e, 2e) and the token count [2e]. */
  void (*router_select)(int n, int e, int k, float* probs, int32_t* expert, float* gate,
                        float* stats);

  /* dL/dlogits [n][e] of those softmaxes: the gate softmax's backward on
   * the chosen ids (from dgate = dL/dgate [n][k]) plus the full softmax's
   * from g [e], the same dL/dp_e for every token (the aux loss's); g is
   * host memory, free to change when the op returns.  An expert id < 0 is
   * a dropped slot. */
  void (*router_dlogits)(int n, int e, int k, const float* probs, const int32_t* expert,
                         const float* gate, const float* dgate, const float* g, float* dlogits);

  /* out[r] = x[token_of[r]] for r < rows, rows of h floats. */
  void (*gather_rows)(int rows, int h, const int32_t* token_of, const float* x, float* out);

  /* out[s / k] += gate[s] * y[row_of[s]] for the slots s < slots whose
   * row_of[s] >= 0, in slot order. */
  void (*combine_rows)(size_t slots, int k, int h, const int32_t* row_of, const float* gate,
                       const float* y, float* out);

  /* Its backward: dy[row_of[s]] = gate[s] * dout[s / k] and dgate[s] = the
   * dot of dout[s / k] and y[row_of[s]] (0 where row_of[s] < 0). */
  void (*combine_rows_backward)(size_t slots, int k, int h, const int32_t* row_of,
                                const float* gate, const float* dout, const float* y, float* dy,
                                float* dgate);

  /* dx[s / k] += src[row_of[s]] for the slots s < slots whose row_of[s] >= 0,
   * a token's rows added in increasing row order. */
  void (*scatter_add_rows)(size_t slots, int k, int h, const int32_t* row_of, const float* src,
                           float* dx);

  /* dst = src over count floats (they do not overlap). */
  void (*copy)(size_t count, const float* src, float* dst);

  /* dst = 0 over count floats. */
  void (*zero)(size_t count, float* dst);

  /* The sum of (a - b)^2 over count floats, in double, in index order. */
  double (*sq_dist)(size_t count, const float* a, const float* b);

  /* out = scale (a - b) over count floats. */
  void (*scaled_diff)(size_t count, float scale, const float* a, const float* b, float* out);

  /* out = a + b over count floats (out may be a or b). */
  void (*add)(size_t count, const float* a, const float* b, float* out);

  /* One Adam update of count parameters (moe/adam.h):
   * m = b1 m + (1 - b1) g, v = b2 v + (1 - b2) g^2,
   * p -= lr (m c1) / (sqrt(v c2) + eps), c1 and c2 the bias corrections. */
  void (*adam)(size_t count, float lr, float b1, float b2, float eps, float c1, float c2, float* p,
               const float* g, float* m, float* v);

  /* Backend memory: bytes zeroed (at least one byte), or NULL with the
   * reason in failed(); free of NULL does nothing. */
  void* (*alloc)(size_t bytes);
  void (*free)(void* p);

  /* Copies between host memory and backend memory; they wait for the ops
   * before them, and the host buffer may be reused when they return. */
  void (*to_host)(void* dst, const void* src, size_t bytes);
  void (*to_device)(void* dst, const void* src, size_t bytes);

  /* The address the communication library is given for backend memory p
   * (an address inside an allocation): p on the host backend and on a GPU. */
  void* (*comm_ptr)(void* p);

  /* Waits for the ops queued before it: before the communication library,
   * which does not know the backend's stream, reads or writes memory they
   * use (nothing to wait for on the host). */
  void (*sync)(void);

  /* NULL, or what made an op fail (the first failure; sticky). */
  const char* (*failed)(void);

  /* One line saying what computes (library, version, threads) into buf;
   * returns buf. */
  const char* (*describe)(char* buf, size_t len);

  /* The precision of sgemm's inputs from now on: 0 float32 (the default),
   * 1 bfloat16: A and B rounded to bfloat16 (to nearest, ties to even:
   * moe_k_bf16), their products summed in float32 into C, as a GPU's bf16
   * tensor-core GEMM with float32 accumulation (cuBLAS's GemmEx with
   * CUBLAS_COMPUTE_32F) does; everything else stays float32.  Both
   * backends compute the same products (a product of two bfloat16 is exact
   * in float32); the sums' order is each library's. */
  void (*gemm_precision)(int bf16);

  /* Overlap of the communication library's calls with the ops, without the
   * host waiting (NULL on the host backend, whose callers use a host
   * stream).  comm_stream() is the moecclStream_t those calls are queued on
   * (NULL where the library's calls are done when they return: the CUDA
   * stand-in).  event_record(ev, on_comm) marks event ev (0 <= ev <
   * MOE_EVENTS) after what is queued so far on the ops' stream (on_comm 0)
   * or the communication's (1); event_wait(ev, on_comm) makes what is queued
   * from now on on that stream wait for ev's last mark.  Memory given to
   * the library this way is comm_ptr(p) without sync: the events order it.
   * sync waits for both streams. */
  void* (*comm_stream)(void);
  void (*event_record)(int ev, int on_comm);
  void (*event_wait)(int ev, int on_comm);
} moe_backend_ops_t;

#define MOE_EVENTS 4

/* Memory of backend mem, or the host's (calloc / free) when mem is NULL:
 * the structures of model.h and adam.h keep the backend that allocated
 * them. */
static inline void* moe_mem_alloc(const moe_backend_ops_t* mem, size_t bytes) {
  return mem ? mem->alloc(bytes) : calloc(bytes ? bytes : 1, 1);
}

static inline void moe_mem_free(const moe_backend_ops_t* mem, void* p) {
  if (mem) mem->free(p);
  else free(p);
}

/* The CUDA backend over api (cuda_api.h: the GPU's, or the host stand-in
 * the tests run): cuBLAS for the products, kernels.cu for the rest.  One per
 * process; returns the table (static storage). */
struct moe_cuda_api;
const moe_backend_ops_t* moe_backend_cuda(const struct moe_cuda_api* api);

/* The host backend: OpenBLAS's cblas_sgemm and plain loops.  threads > 0
 * sets OpenBLAS's thread count; 0 keeps one thread unless OPENBLAS_NUM_THREADS
 * (or OMP_NUM_THREADS) is set, so that ranks sharing a machine do not
 * oversubscribe its cores.  Returns the table (static storage). */
const moe_backend_ops_t* moe_backend_blas(int threads);

#endif
