/* The host stand-in of the CUDA table (cuda_api.h), for the tests where
 * there is no GPU: cuBLAS's column-major sgemm by OpenBLAS, and each kernel
 * of kernels.cu as a loop over its threads running the same per-thread
 * arithmetic (kern_math.h) on host memory, in thread order.
 *
 * Its "device memory" cannot be touched from the host: alloc maps one memfd
 * twice, a PROT_NONE mapping whose address it hands out (the device
 * address) and a read-write shadow.  Every entry translates its pointer
 * arguments to the shadow through a sorted table of the regions (a pointer
 * in none of them is host memory and passes through); to_host and
 * to_device copy between a shadow and host memory; comm_ptr gives the
 * shadow.  So a caller that dereferences a device pointer on the host
 * crashes here as it would on a GPU. */
#define _GNU_SOURCE
#include <cblas.h>
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "cuda_api.h"
#include "kern_math.h"

static char s_error[128];

/* --- device memory: the regions ------------------------------------------- */

typedef struct region {
  char* dev;    /* the PROT_NONE address handed out */
  char* shadow; /* the same pages, read-write */
  size_t len;   /* mapped bytes: the request plus at least one, page-rounded,
                   so that a pointer one past the end is still inside */
} region_t;

static region_t* regions; /* sorted by dev */
static size_t nregions, cap_regions;
static pthread_mutex_t regions_lock = PTHREAD_MUTEX_INITIALIZER;

/* The region holding p, or NULL (host memory); the caller holds the lock. */
static const region_t* region_of(const void* p) {
  size_t lo = 0, hi = nregions;
  while (lo < hi) { /* the first region whose dev is above p */
    size_t mid = (lo + hi) / 2;
    if (regions[mid].dev <= (const char*)p) lo = mid + 1;
    else hi = mid;
  }
  if (lo == 0) return NULL;
  const region_t* r = &regions[lo - 1];
  return (const char*)p < r->dev + r->len ? r : NULL;
}

/* The shadow address of p, or p itself when p is host memory. */
static void* shadow_of(const void* p) {
  if (!p) return NULL;
  pthread_mutex_lock(&regions_lock);
  const region_t* r = region_of(p);
  void* s = r ? r->shadow + ((const char*)p - r->dev) : (void*)p;
  pthread_mutex_unlock(&regions_lock);
  return s;
}

#define SH(p) ((__typeof__(p))shadow_of(p))

static int s_alloc(void** ptr, size_t bytes) {
  long page = sysconf(_SC_PAGESIZE);
  size_t len = (bytes + 1 + page - 1) / page * page;
  void *dev = MAP_FAILED, *shadow = MAP_FAILED;
  *ptr = NULL;
  int fd = memfd_create("moe-standin", MFD_CLOEXEC);
  if (fd < 0 || ftruncate(fd, (off_t)len)) goto fail;
  dev = mmap(NULL, len, PROT_NONE, MAP_SHARED, fd, 0);
  shadow = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (dev == MAP_FAILED || shadow == MAP_FAILED) goto fail;
  close(fd);
  fd = -1;
  pthread_mutex_lock(&regions_lock);
  if (nregions == cap_regions) {
    size_t cap = cap_regions ? 2 * cap_regions : 64;
    region_t* r = realloc(regions, cap * sizeof(*r));
    if (!r) {
      pthread_mutex_unlock(&regions_lock);
      errno = ENOMEM;
      goto fail;
    }
    regions = r, cap_regions = cap;
  }
  size_t at = 0;
  while (at < nregions && regions[at].dev < (char*)dev) at++;
  memmove(&regions[at + 1], &regions[at], (nregions - at) * sizeof(*regions));
  regions[at] = (region_t){dev, shadow, len};
  nregions++;
  pthread_mutex_unlock(&regions_lock);
  *ptr = dev; /* a fresh memfd reads as zeros */
  return 0;
fail:
  snprintf(s_error, sizeof(s_error), "no device memory for %zu bytes: %s", bytes,
           strerror(errno));
  if (dev != MAP_FAILED) munmap(dev, len);
  if (shadow != MAP_FAILED) munmap(shadow, len);
  if (fd >= 0) close(fd);
  return -1;
}

static int s_free(void* ptr) {
  if (!ptr) return 0;
  pthread_mutex_lock(&regions_lock);
  const region_t* r = region_of(ptr);
  if (!r || r->dev != (char*)ptr) {
    pthread_mutex_unlock(&regions_lock);
    snprintf(s_error, sizeof(s_error), "free of %p: not an allocation of the stand-in", ptr);
    return -1;
  }
  region_t gone = *r;
  size_t at = (size_t)(r - regions);
  memmove(&regions[at], &regions[at + 1], (nregions - at - 1) * sizeof(*regions));
  nregions--;
  pthread_mutex_unlock(&regions_lock);
  munmap(gone.dev, gone.len);
  munmap(gone.shadow, gone.len);
  return 0;
}

static void* s_comm_ptr(void* ptr) { return shadow_of(ptr); }

/* --- cuBLAS and the kernels, on the shadows -------------------------------- */

static int do_sgemm(int trans_a, int trans_b, int m, int n, int k, float alpha, const float* a,
                   int lda, const float* b, int ldb, float beta, float* c, int ldc) {
  a = SH(a);
  b = SH(b);
  c = SH(c);
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

/* cuBLAS's GemmEx in bfloat16: each operand's span widened to float32
 * (exact), then the float32 product, whose sums are float32 as
 * CUBLAS_COMPUTE_32F's. */
static int do_gemm_bf16(int trans_a, int trans_b, int m, int n, int k, float alpha,
                       const uint16_t* a, int lda, const uint16_t* b, int ldb, float beta, float* c,
                       int ldc) {
  if (m <= 0 || n <= 0) return do_sgemm(trans_a, trans_b, m, n, k, alpha, NULL, lda, NULL, ldb,
                                        beta, c, ldc);
  /* column-major: op(A) m x k is A k x m (trans) or m x k, columns of lda */
  size_t na = k <= 0 ? 0 : (size_t)((trans_a ? m : k) - 1) * lda + (trans_a ? k : m);
  size_t nb = k <= 0 ? 0 : (size_t)((trans_b ? k : n) - 1) * ldb + (trans_b ? n : k);
  float *fa = malloc((na + 1) * sizeof(float)), *fb = malloc((nb + 1) * sizeof(float));
  if (!fa || !fb) {
    free(fa), free(fb);
    snprintf(s_error, sizeof(s_error), "gemm_bf16: no host memory for %zu elements", na + nb);
    return -1;
  }
  const uint16_t *sa = SH(a), *sb = SH(b);
  for (size_t i = 0; i < na; i++) fa[i] = moe_k_bf16_float(sa[i]);
  for (size_t i = 0; i < nb; i++) fb[i] = moe_k_bf16_float(sb[i]);
  int rc = do_sgemm(trans_a, trans_b, m, n, k, alpha, fa, lda, fb, ldb, beta, c, ldc);
  free(fa), free(fb);
  return rc;
}

static int do_to_bf16(size_t count, const float* x, uint16_t* out) {
  x = SH(x);
  out = SH(out);
  for (size_t i = 0; i < count; i++) out[i] = moe_k_bf16(x[i]);
  return 0;
}

static int do_swiglu(size_t count, const float* a, const float* b, float* h) {
  a = SH(a);
  b = SH(b);
  h = SH(h);
  for (size_t i = 0; i < count; i++) h[i] = moe_k_swiglu(a[i], b[i]);
  return 0;
}

static int do_swiglu_back(size_t count, const float* a, const float* b, const float* dh, float* da,
                         float* db) {
  a = SH(a);
  b = SH(b);
  dh = SH(dh);
  da = SH(da);
  db = SH(db);
  for (size_t i = 0; i < count; i++) moe_k_swiglu_back(a[i], b[i], dh[i], &da[i], &db[i]);
  return 0;
}

static int do_router_token(int n, int e, int k, float* probs, int32_t* expert, float* gate) {
  probs = SH(probs);
  expert = SH(expert);
  gate = SH(gate);
  for (int t = 0; t < n; t++)
    moe_k_router_token(e, k, probs + (size_t)t * e, expert + (size_t)t * k, gate + (size_t)t * k);
  return 0;
}

/* threads 0..e-1: an expert's statistics; thread e: the token count */
static int do_router_stat(int n, int e, int k, const float* probs, const int32_t* expert,
                         float* stats) {
  probs = SH(probs);
  expert = SH(expert);
  stats = SH(stats);
  for (int x = 0; x < e; x++) moe_k_router_stat(n, e, k, x, probs, expert, &stats[x], &stats[e + x]);
  stats[2 * e] += (float)n;
  return 0;
}

static int do_router_dlogits(int n, int e, int k, const float* probs, const int32_t* expert,
                            const float* gate, const float* dgate, const float* g, float* dl) {
  probs = SH(probs);
  expert = SH(expert);
  gate = SH(gate);
  dgate = SH(dgate);
  g = SH(g);
  dl = SH(dl);
  for (int t = 0; t < n; t++)
    moe_k_router_dlogits(e, k, probs + (size_t)t * e, expert + (size_t)t * k,
                         gate + (size_t)t * k, dgate + (size_t)t * k, g, dl + (size_t)t * e);
  return 0;
}

static int do_gather(int rows, int h, const int32_t* token_of, const float* x, float* out) {
  token_of = SH(token_of);
  x = SH(x);
  out = SH(out);
  for (size_t i = 0; i < (size_t)rows * h; i++) out[i] = x[(size_t)token_of[i / h] * h + i % h];
  return 0;
}

static int do_combine(size_t tokens, int k, int h, const int32_t* row_of, const float* gate,
                     const float* y, float* out) {
  row_of = SH(row_of);
  gate = SH(gate);
  y = SH(y);
  out = SH(out);
  for (size_t i = 0; i < tokens * h; i++) {
    size_t t = i / h;
    out[i] = moe_k_combine_elem(k, h, (int)(i % h), row_of + t * k, gate + t * k, y, out[i]);
  }
  return 0;
}

static int do_combine_back(size_t slots, int k, int h, const int32_t* row_of, const float* gate,
                          const float* dout, const float* y, float* dy, float* dgate) {
  row_of = SH(row_of);
  gate = SH(gate);
  dout = SH(dout);
  y = SH(y);
  dy = SH(dy);
  dgate = SH(dgate);
  for (size_t s = 0; s < slots; s++)
    dgate[s] = moe_k_combine_back_slot(h, row_of[s], gate[s], dout + (s / k) * h, y, dy);
  return 0;
}

static int do_scatter(size_t tokens, int k, int h, const int32_t* row_of, const float* src,
                     float* dx) {
  row_of = SH(row_of);
  src = SH(src);
  dx = SH(dx);
  for (size_t t = 0; t < tokens; t++) moe_k_scatter_token(k, h, row_of + t * k, src, dx + t * h);
  return 0;
}

static int do_add(size_t count, const float* a, const float* b, float* out) {
  a = SH(a);
  b = SH(b);
  out = SH(out);
  for (size_t i = 0; i < count; i++) out[i] = a[i] + b[i];
  return 0;
}

static int do_scaled_diff(size_t count, float scale, const float* a, const float* b, float* out) {
  a = SH(a);
  b = SH(b);
  out = SH(out);
  for (size_t i = 0; i < count; i++) out[i] = scale * (a[i] - b[i]);
  return 0;
}

static int do_sq_dist_blocks(size_t count, const float* a, const float* b, double* partial) {
  a = SH(a);
  b = SH(b);
  partial = SH(partial);
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

static int do_adam(size_t count, float lr, float b1, float b2, float eps, float c1, float c2,
                  float* p, const float* g, float* m, float* v) {
  p = SH(p);
  g = SH(g);
  m = SH(m);
  v = SH(v);
  for (size_t i = 0; i < count; i++) moe_k_adam(lr, b1, b2, eps, c1, c2, &p[i], g[i], &m[i], &v[i]);
  return 0;
}

/* --- copies and order ------------------------------------------------------- */

static int do_copy(void* dst, const void* src, size_t bytes) {
  memmove(SH(dst), SH(src), bytes);
  return 0;
}

static int do_zero(void* dst, size_t bytes) {
  memset(SH(dst), 0, bytes);
  return 0;
}

/* --- the compute stream: queued, run when the host waits ------------------- *
 *
 * A GPU runs the compute stream's work after the host queued it, so a caller
 * that hands the communication library (comm_ptr) memory that queued work
 * writes, without sync or an event between them, reads it too early.  The
 * stand-in does the same: every kernel, product, copy and zeroing is queued
 * with its arguments and runs, in order, when the host waits for the stream
 * (sync, to_host, to_device, free) or the communication waits for one of
 * its events (wait(ev, 1)); so such a caller reads stale values here too
 * and the dumps' comparisons catch it.  The communication library's calls
 * run at once (comm_stream is NULL): its side needs no events. */

typedef struct op {
  int (*run)(const void* args);
  struct op* next;
  _Alignas(max_align_t) char args[];
} op_t;

static op_t *q_head, *q_tail;
static unsigned long long q_pushed, q_ran;          /* ops queued, ops run */
static unsigned long long q_mark[MOE_CUDA_EVENTS];  /* q_pushed at record(ev, 0) */
static unsigned long long q_syncs;                  /* host waits (sync) */
static int q_failed;                                /* an op failed: sync says so */
static pthread_mutex_t q_lock = PTHREAD_MUTEX_INITIALIZER;

/* Runs the queued ops up to the upto-th; 0, or -1 if one failed since the
 * last report. */
static int run_upto(unsigned long long upto) {
  pthread_mutex_lock(&q_lock);
  while (q_head && q_ran < upto) {
    op_t* o = q_head;
    q_head = o->next;
    if (!q_head) q_tail = NULL;
    q_ran++;
    if (o->run(o->args)) q_failed = 1;
    free(o);
  }
  int rc = q_failed ? -1 : 0;
  q_failed = 0;
  pthread_mutex_unlock(&q_lock);
  return rc;
}

static int flush(void) { return run_upto(~0ull); }

/* A GPU's kernel or product cannot read host memory: every pointer given
 * to one must be the stand-in's device memory (or NULL). */
static int dev_args(const char* op, int n, ...) {
  va_list ap;
  va_start(ap, n);
  const void* host = NULL;
  for (int i = 0; i < n; i++) {
    const void* p = va_arg(ap, const void*);
    if (!p) continue;
    pthread_mutex_lock(&regions_lock);
    if (!region_of(p) && !host) host = p;
    pthread_mutex_unlock(&regions_lock);
  }
  va_end(ap);
  if (!host) return 0;
  snprintf(s_error, sizeof(s_error), "%s: %p is host memory (a GPU's kernel cannot read it)", op,
           host);
  return -1;
}

static int defer(int (*run)(const void*), const void* args, size_t len) {
  op_t* o = malloc(sizeof(op_t) + len);
  if (!o) { /* no memory to queue it: run it now, after the queue */
    if (flush()) return -1;
    return run(args);
  }
  o->run = run;
  o->next = NULL;
  memcpy(o->args, args, len);
  pthread_mutex_lock(&q_lock);
  if (q_tail) q_tail->next = o;
  else q_head = o;
  q_tail = o;
  q_pushed++;
  pthread_mutex_unlock(&q_lock);
  return 0;
}

/* Per op: its arguments (a_OP), what runs it from the queue (r_OP, calling
 * do_OP above) and the table's entry (s_OP: checks that its pointers are
 * device memory, then queues it). */
struct a_sgemm {
  int trans_a, trans_b, m, n, k; float alpha; const float *a; int lda; const float *b; int ldb;
  float beta; float *c; int ldc;
};
static int r_sgemm(const void* p) {
  const struct a_sgemm* v_ = p;
  return do_sgemm(v_->trans_a, v_->trans_b, v_->m, v_->n, v_->k, v_->alpha, v_->a, v_->lda, v_->b,
                  v_->ldb, v_->beta, v_->c, v_->ldc);
}
static int s_sgemm(int trans_a, int trans_b, int m, int n, int k, float alpha, const float* a,
                   int lda, const float* b, int ldb, float beta, float* c, int ldc) {
  if (dev_args("sgemm", 3, (const void*)a, (const void*)b, (const void*)c)) return -1;
  struct a_sgemm q_ = {trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc};
  return defer(r_sgemm, &q_, sizeof q_);
}
struct a_gemm_bf16 {
  int trans_a, trans_b, m, n, k; float alpha; const uint16_t *a; int lda; const uint16_t *b;
  int ldb; float beta; float *c; int ldc;
};
static int r_gemm_bf16(const void* p) {
  const struct a_gemm_bf16* v_ = p;
  return do_gemm_bf16(v_->trans_a, v_->trans_b, v_->m, v_->n, v_->k, v_->alpha, v_->a, v_->lda,
                      v_->b, v_->ldb, v_->beta, v_->c, v_->ldc);
}
static int s_gemm_bf16(int trans_a, int trans_b, int m, int n, int k, float alpha,
                       const uint16_t* a, int lda, const uint16_t* b, int ldb, float beta, float* c,
                       int ldc) {
  if (dev_args("gemm_bf16", 3, (const void*)a, (const void*)b, (const void*)c)) return -1;
  struct a_gemm_bf16 q_ = {trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc};
  return defer(r_gemm_bf16, &q_, sizeof q_);
}
struct a_to_bf16 { size_t count; const float *x; uint16_t *out; };
static int r_to_bf16(const void* p) {
  const struct a_to_bf16* v_ = p;
  return do_to_bf16(v_->count, v_->x, v_->out);
}
static int s_to_bf16(size_t count, const float* x, uint16_t* out) {
  if (dev_args("to_bf16", 2, (const void*)x, (const void*)out)) return -1;
  struct a_to_bf16 q_ = {count, x, out};
  return defer(r_to_bf16, &q_, sizeof q_);
}
struct a_swiglu { size_t count; const float *a, *b; float *h; };
static int r_swiglu(const void* p) {
  const struct a_swiglu* v_ = p;
  return do_swiglu(v_->count, v_->a, v_->b, v_->h);
}
static int s_swiglu(size_t count, const float* a, const float* b, float* h) {
  if (dev_args("swiglu", 3, (const void*)a, (const void*)b, (const void*)h)) return -1;
  struct a_swiglu q_ = {count, a, b, h};
  return defer(r_swiglu, &q_, sizeof q_);
}
struct a_swiglu_back { size_t count; const float *a, *b, *dh; float *da, *db; };
static int r_swiglu_back(const void* p) {
  const struct a_swiglu_back* v_ = p;
  return do_swiglu_back(v_->count, v_->a, v_->b, v_->dh, v_->da, v_->db);
}
static int s_swiglu_back(size_t count, const float* a, const float* b, const float* dh, float* da,
                         float* db) {
  if (dev_args("swiglu_back", 5, (const void*)a, (const void*)b, (const void*)dh, (const void*)da,
               (const void*)db))
    return -1;
  struct a_swiglu_back q_ = {count, a, b, dh, da, db};
  return defer(r_swiglu_back, &q_, sizeof q_);
}
struct a_router_token { int n, e, k; float *probs; int32_t *expert; float *gate; };
static int r_router_token(const void* p) {
  const struct a_router_token* v_ = p;
  return do_router_token(v_->n, v_->e, v_->k, v_->probs, v_->expert, v_->gate);
}
static int s_router_token(int n, int e, int k, float* probs, int32_t* expert, float* gate) {
  if (dev_args("router_token", 3, (const void*)probs, (const void*)expert, (const void*)gate))
    return -1;
  struct a_router_token q_ = {n, e, k, probs, expert, gate};
  return defer(r_router_token, &q_, sizeof q_);
}
struct a_router_stat { int n, e, k; const float *probs; const int32_t *expert; float *stats; };
static int r_router_stat(const void* p) {
  const struct a_router_stat* v_ = p;
  return do_router_stat(v_->n, v_->e, v_->k, v_->probs, v_->expert, v_->stats);
}
static int s_router_stat(int n, int e, int k, const float* probs, const int32_t* expert,
                         float* stats) {
  if (dev_args("router_stat", 3, (const void*)probs, (const void*)expert, (const void*)stats))
    return -1;
  struct a_router_stat q_ = {n, e, k, probs, expert, stats};
  return defer(r_router_stat, &q_, sizeof q_);
}
struct a_router_dlogits {
  int n, e, k; const float *probs; const int32_t *expert; const float *gate, *dgate, *g; float *dl;
};
static int r_router_dlogits(const void* p) {
  const struct a_router_dlogits* v_ = p;
  return do_router_dlogits(v_->n, v_->e, v_->k, v_->probs, v_->expert, v_->gate, v_->dgate, v_->g,
                           v_->dl);
}
static int s_router_dlogits(int n, int e, int k, const float* probs, const int32_t* expert,
                            const float* gate, const float* dgate, const float* g, float* dl) {
  if (dev_args("router_dlogits", 6, (const void*)probs, (const void*)expert, (const void*)gate,
               (const void*)dgate, (const void*)g, (const void*)dl))
    return -1;
  struct a_router_dlogits q_ = {n, e, k, probs, expert, gate, dgate, g, dl};
  return defer(r_router_dlogits, &q_, sizeof q_);
}
struct a_gather { int rows, h; const int32_t *token_of; const float *x; float *out; };
static int r_gather(const void* p) {
  const struct a_gather* v_ = p;
  return do_gather(v_->rows, v_->h, v_->token_of, v_->x, v_->out);
}
static int s_gather(int rows, int h, const int32_t* token_of, const float* x, float* out) {
  if (dev_args("gather", 3, (const void*)token_of, (const void*)x, (const void*)out)) return -1;
  struct a_gather q_ = {rows, h, token_of, x, out};
  return defer(r_gather, &q_, sizeof q_);
}
struct a_combine {
  size_t tokens; int k, h; const int32_t *row_of; const float *gate, *y; float *out;
};
static int r_combine(const void* p) {
  const struct a_combine* v_ = p;
  return do_combine(v_->tokens, v_->k, v_->h, v_->row_of, v_->gate, v_->y, v_->out);
}
static int s_combine(size_t tokens, int k, int h, const int32_t* row_of, const float* gate,
                     const float* y, float* out) {
  if (dev_args("combine", 4, (const void*)row_of, (const void*)gate, (const void*)y,
               (const void*)out))
    return -1;
  struct a_combine q_ = {tokens, k, h, row_of, gate, y, out};
  return defer(r_combine, &q_, sizeof q_);
}
struct a_combine_back {
  size_t slots; int k, h; const int32_t *row_of; const float *gate, *dout, *y; float *dy, *dgate;
};
static int r_combine_back(const void* p) {
  const struct a_combine_back* v_ = p;
  return do_combine_back(v_->slots, v_->k, v_->h, v_->row_of, v_->gate, v_->dout, v_->y, v_->dy,
                         v_->dgate);
}
static int s_combine_back(size_t slots, int k, int h, const int32_t* row_of, const float* gate,
                          const float* dout, const float* y, float* dy, float* dgate) {
  if (dev_args("combine_back", 6, (const void*)row_of, (const void*)gate, (const void*)dout,
               (const void*)y, (const void*)dy, (const void*)dgate))
    return -1;
  struct a_combine_back q_ = {slots, k, h, row_of, gate, dout, y, dy, dgate};
  return defer(r_combine_back, &q_, sizeof q_);
}
struct a_scatter { size_t tokens; int k, h; const int32_t *row_of; const float *src; float *dx; };
static int r_scatter(const void* p) {
  const struct a_scatter* v_ = p;
  return do_scatter(v_->tokens, v_->k, v_->h, v_->row_of, v_->src, v_->dx);
}
static int s_scatter(size_t tokens, int k, int h, const int32_t* row_of, const float* src,
                     float* dx) {
  if (dev_args("scatter", 3, (const void*)row_of, (const void*)src, (const void*)dx)) return -1;
  struct a_scatter q_ = {tokens, k, h, row_of, src, dx};
  return defer(r_scatter, &q_, sizeof q_);
}
struct a_add { size_t count; const float *a, *b; float *out; };
static int r_add(const void* p) {
  const struct a_add* v_ = p;
  return do_add(v_->count, v_->a, v_->b, v_->out);
}
static int s_add(size_t count, const float* a, const float* b, float* out) {
  if (dev_args("add", 3, (const void*)a, (const void*)b, (const void*)out)) return -1;
  struct a_add q_ = {count, a, b, out};
  return defer(r_add, &q_, sizeof q_);
}
struct a_scaled_diff { size_t count; float scale; const float *a, *b; float *out; };
static int r_scaled_diff(const void* p) {
  const struct a_scaled_diff* v_ = p;
  return do_scaled_diff(v_->count, v_->scale, v_->a, v_->b, v_->out);
}
static int s_scaled_diff(size_t count, float scale, const float* a, const float* b, float* out) {
  if (dev_args("scaled_diff", 3, (const void*)a, (const void*)b, (const void*)out)) return -1;
  struct a_scaled_diff q_ = {count, scale, a, b, out};
  return defer(r_scaled_diff, &q_, sizeof q_);
}
struct a_sq_dist_blocks { size_t count; const float *a, *b; double *partial; };
static int r_sq_dist_blocks(const void* p) {
  const struct a_sq_dist_blocks* v_ = p;
  return do_sq_dist_blocks(v_->count, v_->a, v_->b, v_->partial);
}
static int s_sq_dist_blocks(size_t count, const float* a, const float* b, double* partial) {
  if (dev_args("sq_dist_blocks", 3, (const void*)a, (const void*)b, (const void*)partial))
    return -1;
  struct a_sq_dist_blocks q_ = {count, a, b, partial};
  return defer(r_sq_dist_blocks, &q_, sizeof q_);
}
struct a_adam {
  size_t count; float lr, b1, b2, eps, c1, c2; float *p; const float *g; float *m, *v;
};
static int r_adam(const void* p) {
  const struct a_adam* v_ = p;
  return do_adam(v_->count, v_->lr, v_->b1, v_->b2, v_->eps, v_->c1, v_->c2, v_->p, v_->g, v_->m,
                 v_->v);
}
static int s_adam(size_t count, float lr, float b1, float b2, float eps, float c1, float c2,
                  float* p, const float* g, float* m, float* v) {
  if (dev_args("adam", 4, (const void*)p, (const void*)g, (const void*)m, (const void*)v))
    return -1;
  struct a_adam q_ = {count, lr, b1, b2, eps, c1, c2, p, g, m, v};
  return defer(r_adam, &q_, sizeof q_);
}
struct a_copy { void *dst; const void *src; size_t bytes; };
static int r_copy(const void* p) {
  const struct a_copy* v_ = p;
  return do_copy(v_->dst, v_->src, v_->bytes);
}
static int s_copy(void* dst, const void* src, size_t bytes) {
  if (dev_args("copy", 2, (const void*)dst, (const void*)src)) return -1;
  struct a_copy q_ = {dst, src, bytes};
  return defer(r_copy, &q_, sizeof q_);
}
struct a_zero { void *dst; size_t bytes; };
static int r_zero(const void* p) {
  const struct a_zero* v_ = p;
  return do_zero(v_->dst, v_->bytes);
}
static int s_zero(void* dst, size_t bytes) {
  if (dev_args("zero", 1, (const void*)dst)) return -1;
  struct a_zero q_ = {dst, bytes};
  return defer(r_zero, &q_, sizeof q_);
}

static int s_to_host(void* dst, const void* src, size_t bytes) {
  int rc = flush();
  return do_copy(dst, src, bytes) || rc ? -1 : 0;
}

static int s_sync(void) {
  pthread_mutex_lock(&q_lock);
  q_syncs++;
  pthread_mutex_unlock(&q_lock);
  return flush();
}

static int s_free_queued(void* ptr) { /* the queued ops may use it */
  int rc = flush();
  return s_free(ptr) || rc ? -1 : 0;
}

static void* s_comm_stream(void) { return NULL; }

static int s_check_event(int ev) {
  if (ev >= 0 && ev < MOE_CUDA_EVENTS) return 0;
  snprintf(s_error, sizeof(s_error), "event %d: not one of 0..%d", ev, MOE_CUDA_EVENTS - 1);
  return -1;
}

/* The communication's work is done when its call returns: a mark on its
 * stream, and the compute's wait for one, have nothing to order. */
static int s_record(int ev, int on_comm) {
  if (s_check_event(ev)) return -1;
  pthread_mutex_lock(&q_lock);
  if (!on_comm) q_mark[ev] = q_pushed;
  pthread_mutex_unlock(&q_lock);
  return 0;
}

static int s_wait(int ev, int on_comm) {
  if (s_check_event(ev)) return -1;
  if (!on_comm) return 0;
  pthread_mutex_lock(&q_lock);
  unsigned long long upto = q_mark[ev];
  pthread_mutex_unlock(&q_lock);
  return run_upto(upto);
}

void moe_cuda_standin_counts(unsigned long long* ops, unsigned long long* syncs) {
  pthread_mutex_lock(&q_lock);
  if (ops) *ops = q_pushed;
  if (syncs) *syncs = q_syncs;
  pthread_mutex_unlock(&q_lock);
}

static const char* s_describe(char* buf, size_t len) {
  snprintf(buf, len, "the CUDA backend on its host stand-in (OpenBLAS for cuBLAS, the kernels' "
                     "host twins, device memory the host cannot touch)");
  return buf;
}

static const char* s_last_error(void) { return s_error; }

static const moe_cuda_api_t standin = {
    .name = "cuda-standin",
    .sgemm = s_sgemm,
    .gemm_bf16 = s_gemm_bf16,
    .to_bf16 = s_to_bf16,
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
    .free = s_free_queued,
    .copy = s_copy,
    .to_host = s_to_host,
    .to_device = s_to_host,
    .comm_ptr = s_comm_ptr,
    .zero = s_zero,
    .sync = s_sync,
    .comm_stream = s_comm_stream,
    .record = s_record,
    .wait = s_wait,
    .describe = s_describe,
    .last_error = s_last_error,
};

const moe_cuda_api_t* moe_cuda_api_standin(void) { return &standin; }
