/* The CUDA compute backend (backend.h) over a cuda_api.h table: the row-major
 * products as cuBLAS's column-major ones, every other op one or two kernels
 * of kernels.cu, all queued in order on the table's stream. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "cuda_api.h"

static const moe_cuda_api_t* api;
static char failure[256]; /* the first failure, sticky */
static double* partial;   /* sq_dist's block sums, on the device */
static size_t partial_n;
static double* partial_host;
static float* g_dev; /* router_dlogits' g, on the device */
static size_t g_n;
static int gemm_bf16;         /* gemm_precision */
static uint16_t* bf16_buf[2]; /* sgemm's A and B in bfloat16, on the device */
static size_t bf16_n[2];

/* Runs call unless an earlier op failed; keeps the first failure. */
#define RUN(what, call)                                                                         \
  do {                                                                                          \
    if (!failure[0] && (call))                                                                  \
      snprintf(failure, sizeof(failure), "%s: %s: %s", api->name, what, api->last_error());     \
  } while (0)

/* Device scratch i of at least n bfloat16 values; NULL on failure (kept). */
static uint16_t* bf16_scratch(int i, size_t n) {
  if (n <= bf16_n[i]) return bf16_buf[i];
  if (bf16_buf[i]) { /* the queued products may still read it */
    RUN("sync", api->sync());
    RUN("free", api->free(bf16_buf[i]));
    bf16_buf[i] = NULL, bf16_n[i] = 0;
  }
  void* p = NULL;
  RUN("alloc", api->alloc(&p, n * sizeof(uint16_t)));
  if (failure[0]) return NULL;
  bf16_buf[i] = p, bf16_n[i] = n;
  return p;
}

/* Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: the same
 * memory, the operands swapped. */
static void cu_sgemm(int trans_a, int trans_b, int m, int n, int k, float alpha, const float* a,
                     int lda, const float* b, int ldb, float beta, float* c, int ldc) {
  if (m <= 0 || n <= 0) return;
  if (gemm_bf16 && k > 0) { /* each operand's span as stored, rounded on the device */
    size_t na = (size_t)((trans_a ? k : m) - 1) * lda + (trans_a ? m : k);
    size_t nb = (size_t)((trans_b ? n : k) - 1) * ldb + (trans_b ? k : n);
    uint16_t *ha = bf16_scratch(0, na), *hb = ha ? bf16_scratch(1, nb) : NULL;
    if (!ha || !hb) return;
    RUN("to_bf16", api->to_bf16(na, a, ha));
    RUN("to_bf16", api->to_bf16(nb, b, hb));
    RUN("gemm_bf16",
        api->gemm_bf16(trans_b, trans_a, n, m, k, alpha, hb, ldb, ha, lda, beta, c, ldc));
    return;
  }
  RUN("sgemm", api->sgemm(trans_b, trans_a, n, m, k, alpha, b, ldb, a, lda, beta, c, ldc));
}

static void cu_gemm_precision(int bf16) { gemm_bf16 = bf16 != 0; }

static void cu_swiglu_forward(size_t count, const float* a, const float* b, float* h) {
  if (count) RUN("swiglu", api->swiglu(count, a, b, h));
}

static void cu_swiglu_backward(size_t count, const float* a, const float* b, const float* dh,
                               float* da, float* db) {
  if (count) RUN("swiglu_back", api->swiglu_back(count, a, b, dh, da, db));
}

static void cu_router_select(int n, int e, int k, float* probs, int32_t* expert, float* gate,
                             float* stats) {
  if (n > 0) RUN("router_token", api->router_token(n, e, k, probs, expert, gate));
  RUN("router_stat", api->router_stat(n, e, k, probs, expert, stats));
}

/* g is host memory (e floats): copied to the device first, on the stream
 * (the kernel runs after the caller's g is gone). */
static void cu_router_dlogits(int n, int e, int k, const float* probs, const int32_t* expert,
                              const float* gate, const float* dgate, const float* g,
                              float* dlogits) {
  if (n <= 0 || failure[0]) return;
  if ((size_t)e > g_n) {
    if (g_dev) RUN("free", (api->sync() || api->free(g_dev)));
    g_dev = NULL, g_n = 0;
    RUN("alloc", api->alloc((void**)&g_dev, (size_t)e * sizeof(float)));
    if (failure[0]) return;
    g_n = (size_t)e;
  }
  RUN("to_device", api->to_device(g_dev, g, (size_t)e * sizeof(float)));
  RUN("router_dlogits", api->router_dlogits(n, e, k, probs, expert, gate, dgate, g_dev,
                                            dlogits));
}

static void cu_gather_rows(int rows, int h, const int32_t* token_of, const float* x, float* out) {
  if (rows > 0) RUN("gather", api->gather(rows, h, token_of, x, out));
}

static void cu_combine_rows(size_t slots, int k, int h, const int32_t* row_of, const float* gate,
                            const float* y, float* out) {
  if (slots) RUN("combine", api->combine(slots / k, k, h, row_of, gate, y, out));
}

static void cu_combine_rows_backward(size_t slots, int k, int h, const int32_t* row_of,
                                     const float* gate, const float* dout, const float* y,
                                     float* dy, float* dgate) {
  if (slots) RUN("combine_back", api->combine_back(slots, k, h, row_of, gate, dout, y, dy, dgate));
}

static void cu_scatter_add_rows(size_t slots, int k, int h, const int32_t* row_of,
                                const float* src, float* dx) {
  if (slots) RUN("scatter", api->scatter(slots / k, k, h, row_of, src, dx));
}

static void cu_copy(size_t count, const float* src, float* dst) {
  if (count) RUN("copy", api->copy(dst, src, count * sizeof(float)));
}

static void cu_zero(size_t count, float* dst) {
  if (count) RUN("zero", api->zero(dst, count * sizeof(float)));
}

/* The block sums on the device, then their sum on the host in order. */
static double cu_sq_dist(size_t count, const float* a, const float* b) {
  size_t blocks = (count + MOE_CUDA_BLOCK - 1) / MOE_CUDA_BLOCK;
  if (!count || failure[0]) return 0.0;
  if (blocks > partial_n) {
    double* h = realloc(partial_host, blocks * sizeof(double));
    if (!h) {
      snprintf(failure, sizeof(failure), "%s: sq_dist: out of host memory", api->name);
      return 0.0;
    }
    partial_host = h;
    if (partial) api->free(partial);
    partial = NULL, partial_n = 0;
    RUN("alloc", api->alloc((void**)&partial, blocks * sizeof(double)));
    if (failure[0]) return 0.0;
    partial_n = blocks;
  }
  RUN("sq_dist", api->sq_dist_blocks(count, a, b, partial));
  RUN("to_host", api->to_host(partial_host, partial, blocks * sizeof(double)));
  RUN("sync", api->sync());
  double sq = 0.0;
  for (size_t i = 0; !failure[0] && i < blocks; i++) sq += partial_host[i];
  return failure[0] ? 0.0 : sq;
}

static void cu_scaled_diff(size_t count, float scale, const float* a, const float* b,
                           float* out) {
  if (count) RUN("scaled_diff", api->scaled_diff(count, scale, a, b, out));
}

static void cu_add(size_t count, const float* a, const float* b, float* out) {
  if (count) RUN("add", api->add(count, a, b, out));
}

static void cu_adam(size_t count, float lr, float b1, float b2, float eps, float c1, float c2,
                    float* p, const float* g, float* m, float* v) {
  if (count) RUN("adam", api->adam(count, lr, b1, b2, eps, c1, c2, p, g, m, v));
}

/* Zeroed device memory; NULL (and the failure kept) when there is none. */
static void* cu_alloc(size_t bytes) {
  void* p = NULL;
  if (failure[0]) return NULL;
  RUN("alloc", api->alloc(&p, bytes ? bytes : 1));
  if (failure[0]) return NULL;
  RUN("zero", api->zero(p, bytes ? bytes : 1));
  if (failure[0]) {
    api->free(p);
    return NULL;
  }
  return p;
}

/* Frees even after a failure (what was allocated is given back). */
static void cu_free(void* p) {
  if (p && api->free(p) && !failure[0])
    snprintf(failure, sizeof(failure), "%s: free: %s", api->name, api->last_error());
}

static void cu_to_host(void* dst, const void* src, size_t bytes) {
  if (!bytes) return;
  RUN("to_host", api->to_host(dst, src, bytes));
  RUN("sync", api->sync());
}

static void cu_to_device(void* dst, const void* src, size_t bytes) {
  if (!bytes) return;
  RUN("to_device", api->to_device(dst, src, bytes));
  RUN("sync", api->sync());
}

static void* cu_comm_ptr(void* p) { return p ? api->comm_ptr(p) : NULL; }

static void cu_sync(void) { RUN("sync", api->sync()); }

static void* cu_comm_stream(void) { return api->comm_stream(); }

static void cu_event_record(int ev, int on_comm) { RUN("record", api->record(ev, on_comm)); }

static void cu_event_wait(int ev, int on_comm) { RUN("wait", api->wait(ev, on_comm)); }

static const char* cu_failed(void) { return failure[0] ? failure : NULL; }

static const char* cu_describe(char* buf, size_t len) { return api->describe(buf, len); }

static const moe_backend_ops_t cuda_ops = {
    .size = sizeof(moe_backend_ops_t),
    .name = "cuda",
    .sgemm = cu_sgemm,
    .swiglu_forward = cu_swiglu_forward,
    .swiglu_backward = cu_swiglu_backward,
    .router_select = cu_router_select,
    .router_dlogits = cu_router_dlogits,
    .gather_rows = cu_gather_rows,
    .combine_rows = cu_combine_rows,
    .combine_rows_backward = cu_combine_rows_backward,
    .scatter_add_rows = cu_scatter_add_rows,
    .copy = cu_copy,
    .zero = cu_zero,
    .sq_dist = cu_sq_dist,
    .scaled_diff = cu_scaled_diff,
    .add = cu_add,
    .adam = cu_adam,
    .alloc = cu_alloc,
    .free = cu_free,
    .to_host = cu_to_host,
    .to_device = cu_to_device,
    .comm_ptr = cu_comm_ptr,
    .sync = cu_sync,
    .failed = cu_failed,
    .describe = cu_describe,
    .gemm_precision = cu_gemm_precision,
    .comm_stream = cu_comm_stream,
    .event_record = cu_event_record,
    .event_wait = cu_event_wait,
};

const moe_backend_ops_t* moe_backend_cuda(const moe_cuda_api_t* with) {
  if (api != with) { /* another table: the scratch was the old one's */
    if (api && partial) api->free(partial);
    if (api && g_dev) api->free(g_dev);
    g_dev = NULL, g_n = 0;
    for (int i = 0; i < 2; i++)
      if (api && bf16_buf[i]) api->free(bf16_buf[i]);
    partial = NULL, partial_n = 0;
    bf16_buf[0] = bf16_buf[1] = NULL, bf16_n[0] = bf16_n[1] = 0;
    failure[0] = 0;
  }
  api = with;
  return &cuda_ops;
}
