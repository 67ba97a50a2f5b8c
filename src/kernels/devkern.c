/* Device kernels: loading, and the launches of the device memory kind
 * (devkern.h). */
#include "kernels/devkern.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/check.h"
#include "base/debug.h"
#include "kernels/devmath.h"
#include "kernels/reduce.h"
#include "kernels/rows.h"

_Static_assert((int)DM_I8 == (int)moecclInt8 && (int)DM_U8 == (int)moecclUint8 &&
                   (int)DM_I32 == (int)moecclInt32 && (int)DM_U32 == (int)moecclUint32 &&
                   (int)DM_I64 == (int)moecclInt64 && (int)DM_U64 == (int)moecclUint64 &&
                   (int)DM_F16 == (int)moecclFloat16 && (int)DM_F32 == (int)moecclFloat32 &&
                   (int)DM_F64 == (int)moecclFloat64 && (int)DM_BF16 == (int)moecclBfloat16 &&
                   (int)DM_E4M3 == (int)moecclFloat8e4m3 && (int)DM_E5M2 == (int)moecclFloat8e5m2,
               "devmath.h's datatypes are moeccl.h's");
_Static_assert((int)DM_SUM == (int)MOECCL_RED_SUM && (int)DM_PROD == (int)MOECCL_RED_PROD &&
                   (int)DM_MAX == (int)MOECCL_RED_MAX && (int)DM_MIN == (int)MOECCL_RED_MIN,
               "devmath.h's operations are reduce.h's");
_Static_assert((int)DM_REDUCE == (int)MOECCL_KRED_REDUCE &&
                   (int)DM_SCALE == (int)MOECCL_KRED_SCALE &&
                   (int)DM_POSTDIV == (int)MOECCL_KRED_POSTDIV,
               "devmath.h's launch kinds are devkern.h's");
_Static_assert(sizeof(dm_term_t) == sizeof(moeccl_row_term_t) &&
                   (int)DM_ROW_NONE == (int)MOECCL_ROW_NONE,
               "devmath.h's terms are rows.h's");

#define BLOCK 256
#define MAX_GRID 4096 /* blocks; each thread walks its items with a grid stride */
#define MAX_DEVICES 64

/* Per device (the seam's current()): the kernels, loaded once. */
static pthread_mutex_t load_lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
  int tried;
  void* fn[MOECCL_K_COUNT];
} loaded[MAX_DEVICES];
static uint64_t launches;

uint64_t moeccl_devkern_launches(void) { return __atomic_load_n(&launches, __ATOMIC_RELAXED); }

static void load(const moeccl_device_ops_t* d, int dev) {
  const moeccl_dev_image_t image = {moeccl_kernels_fatbin, moeccl_kernels_fatbin_bytes,
                                    moeccl_kernel_twins, MOECCL_K_COUNT};
  void* module = NULL;
  void* fn[MOECCL_K_COUNT] = {0};
  moecclResult_t rc = d->module_load(&image, &module);
  for (int k = 0; k < MOECCL_K_COUNT && rc == moecclSuccess; k++)
    rc = d->function(module, moeccl_kernel_twins[k].name, &fn[k]);
  if (rc == moecclSuccess) {
    memcpy(loaded[dev].fn, fn, sizeof fn);
    INFO(INIT, "device: %s kernels loaded on device %d", d->name, dev);
  } else if (moeccl_kernels_fatbin_bytes) { /* a fatbin that does not load: say so once */
    WARN(INIT,
         "device: the %s kernels did not load on device %d (%s; built for sm_80, sm_90 and "
         "PTX of compute_90): device reductions and row programs go through host memory",
         d->name, dev, moecclGetErrorString(rc));
  } else {
    INFO(INIT,
         "device: no %s kernels on device %d (%s): device reductions and row programs go "
         "through host memory",
         d->name, dev, "this build has no fatbin");
  }
}

/* The kernel k of the current device, NULL when it has none. */
static void* kernel(int k) {
  const moeccl_device_ops_t* d = moeccl_device();
  if (!d || !d->module_load) return NULL;
  int dev = d->current();
  if (dev < 0 || dev >= MAX_DEVICES) return NULL;
  pthread_mutex_lock(&load_lock);
  if (!loaded[dev].tried) {
    loaded[dev].tried = 1;
    load(d, dev);
  }
  void* fn = loaded[dev].fn[k];
  pthread_mutex_unlock(&load_lock);
  return fn;
}

/* Whether p is device memory (the seam's answer, as mem.c's
 * moeccl_mem_of gives it: asked here, since mem.c calls this file). */
static int on_device(const void* p) {
  int device;
  return p && moeccl_device()->pointer(p, &device);
}

static unsigned grid_for(uint64_t items) {
  uint64_t g = (items + BLOCK - 1) / BLOCK;
  return g < 1 ? 1 : g > MAX_GRID ? MAX_GRID : (unsigned)g;
}

/* ---- reductions ---------------------------------------------------------- */

typedef struct {
  void* fn;
  moeccl_kred_args_t args;
} red_launch_t;

static moecclResult_t queue_reduce(void* stream, void* arg) {
  red_launch_t* l = arg;
  __atomic_fetch_add(&launches, 1, __ATOMIC_RELAXED);
  return moeccl_device()->launch(l->fn, grid_for(l->args.n), BLOCK, &l->args, sizeof l->args,
                                 stream);
}

static moeccl_kred_args_t red_args(const moeccl_red_t* r, int what, void* dst, const void* a,
                                   const void* b, size_t n, unsigned flags) {
  return (moeccl_kred_args_t){.dst = dst,
                              .a = a,
                              .b = b,
                              .sdev = r->scalar_dev,
                              .n = n,
                              .type = (int32_t)r->type,
                              .op = (int32_t)r->op,
                              .what = what,
                              .flags = (int32_t)(flags & 3),
                              .premul = r->premul,
                              .postdiv = r->postdiv,
                              .sf = r->scalar.f,
                              .si = r->scalar.i,
                              .su = r->scalar.u};
}

/* Whether a launch of what has nothing to do, as on the host. */
static int red_is_noop(const moeccl_red_t* r, int what, const void* dst, const void* a, size_t n) {
  return n == 0 || (what == MOECCL_KRED_POSTDIV && r->postdiv == 0) ||
         (what == MOECCL_KRED_SCALE && !r->premul && dst == a);
}

moecclResult_t moeccl_devkern_reduce(const moeccl_red_t* r, int what, void* dst, const void* a,
                                     const void* b, size_t n, unsigned flags, int* ran) {
  *ran = 1;
  if (red_is_noop(r, what, dst, a, n)) return moecclSuccess;
  *ran = 0;
  if (!on_device(dst) || (what != MOECCL_KRED_POSTDIV && !on_device(a)) ||
      (what == MOECCL_KRED_REDUCE && !on_device(b)))
    return moecclSuccess;
  red_launch_t l = {kernel(MOECCL_K_REDUCE), red_args(r, what, dst, a, b, n, flags)};
  if (!l.fn) return moecclSuccess;
  *ran = 1;
  return moeccl_device_run(queue_reduce, &l);
}

int moeccl_devkern_ready(void) {
  return kernel(MOECCL_K_REDUCE) != NULL && kernel(MOECCL_K_REDUCE_FOLD) != NULL;
}

moecclResult_t moeccl_devkern_reduce_async(const moeccl_red_t* r, int what, void* dst,
                                           const void* a, const void* b, size_t n,
                                           unsigned flags, void* stream) {
  if (red_is_noop(r, what, dst, a, n)) return moecclSuccess;
  red_launch_t l = {kernel(MOECCL_K_REDUCE), red_args(r, what, dst, a, b, n, flags)};
  if (!l.fn) return moecclInternalError; /* the caller asked moeccl_devkern_ready */
  return queue_reduce(stream, &l);
}

moecclResult_t moeccl_devkern_fold_async(const moeccl_red_t* r, void* dst, const void* const* src,
                                         int nsrc, uint32_t raw, size_t n, void* stream) {
  void* fn = kernel(MOECCL_K_REDUCE_FOLD);
  if (!fn || nsrc < 2 || nsrc > 32) return moecclInternalError;
  if (n == 0) return moecclSuccess;
  /* operands past what one launch takes go to the next, folded onto dst */
  for (int i = 0; i < nsrc;) {
    moeccl_kfold_args_t g;
    memset(&g, 0, sizeof g);
    if (i == 0) {
      g.first = red_args(r, MOECCL_KRED_REDUCE, dst, src[0], src[1], n, raw & 3);
      i = 2;
    } else {
      g.first = red_args(r, MOECCL_KRED_REDUCE, dst, dst, src[i], n, (raw >> i & 1) ? 2 : 0);
      i++;
    }
    for (; i < nsrc && g.nmore < DM_FOLD_MORE; i++, g.nmore++) {
      g.more[g.nmore] = src[i];
      if (raw >> i & 1) g.more_pre |= 1 << g.nmore;
    }
    __atomic_fetch_add(&launches, 1, __ATOMIC_RELAXED);
    MOECCL_CHECK(moeccl_device()->launch(fn, grid_for(n), BLOCK, &g, sizeof g, stream));
  }
  return moecclSuccess;
}

/* ---- row programs -------------------------------------------------------- */

/* Whether the bytes p writes overlap the rows it reads: the kernels' items
 * run in any order, the host's in term order. */
static int rows_overlap(const moeccl_rows_t* p, const char* dst, const char* src) {
  size_t rb = moeccl_rows_row_bytes(p), du = p->mode == MOECCL_ROWS_DOT ? 4 : rb;
  uint32_t d0, d1, s0, s1;
  moeccl_rows_span(p, MOECCL_ROWS_FIELD_DST, &d0, &d1);
  moeccl_rows_span(p, MOECCL_ROWS_FIELD_SRC, &s0, &s1);
  if (d0 > d1 || s0 > s1) return 0;
  const char *dl = dst + (size_t)d0 * du, *dh = dst + ((size_t)d1 + 1) * du;
  const char *sl = src + (size_t)s0 * rb, *sh = src + ((size_t)s1 + 1) * rb;
  return dl < sh && sl < dh;
}

/* Whether a row (element, for DOT) is written by two terms, or for SUM by
 * two groups (a group is consecutive terms of one dst): the host's later
 * one wins, the kernels' items race.  -1 when out of memory. */
static int dst_repeats(const moeccl_rows_t* p) {
  uint32_t d0, d1;
  moeccl_rows_span(p, MOECCL_ROWS_FIELD_DST, &d0, &d1);
  if (d0 > d1) return 0;
  size_t range = (size_t)(d1 - d0) + 1;
  unsigned char* seen = calloc((range + 7) / 8, 1);
  if (!seen) return -1;
  int repeats = 0;
  for (size_t i = 0; i < p->nterms && !repeats; i++) {
    uint32_t v = p->terms[i].dst;
    if (v == MOECCL_ROW_NONE) continue;
    if (p->mode == MOECCL_ROWS_SUM && i > 0 && v == p->terms[i - 1].dst) continue;
    size_t b = v - d0;
    repeats = seen[b / 8] >> (b % 8) & 1;
    seen[b / 8] |= (unsigned char)(1u << (b % 8));
  }
  free(seen);
  return repeats;
}

typedef struct {
  const moeccl_rows_t* p;
  int k;
  void* fn;
  const float* host_w; /* SUM's weights in host memory: they go with the terms */
  size_t nw;
  moeccl_krows_args_t args;
} rows_launch_t;

/* SUM's groups: runs of consecutive terms of one dst (0 for other modes). */
static size_t count_groups(const rows_launch_t* l) {
  const moeccl_rows_t* p = l->p;
  size_t ngroups = 0;
  if (l->k == MOECCL_K_ROWS_SUM)
    for (size_t i = 0; i < p->nterms; i++)
      ngroups += i == 0 || p->terms[i].dst != p->terms[i - 1].dst;
  return ngroups;
}

/* Bytes of pinned memory l's terms, group starts and host weights take. */
static size_t terms_bytes(const rows_launch_t* l, size_t ngroups) {
  return l->p->nterms * sizeof(dm_term_t) + (ngroups + 1) * sizeof(uint32_t) +
         l->nw * sizeof(float);
}

/* Writes l's terms (and SUM's group starts, and its weights in host
 * memory) at mem, pinned memory the kernel reads, and points l's
 * arguments at them. */
static void write_terms(rows_launch_t* l, void* mem, size_t ngroups) {
  const moeccl_rows_t* p = l->p;
  dm_term_t* t = mem;
  memcpy(t, p->terms, p->nterms * sizeof(dm_term_t));
  uint32_t* first = (uint32_t*)(t + p->nterms);
  size_t g = 0;
  for (size_t i = 0; l->k == MOECCL_K_ROWS_SUM && i < p->nterms; i++)
    if (i == 0 || p->terms[i].dst != p->terms[i - 1].dst) first[g++] = (uint32_t)i;
  first[g] = (uint32_t)p->nterms;
  if (l->host_w) {
    float* w = (float*)(first + g + 1);
    memcpy(w, l->host_w, l->nw * sizeof(float));
    l->args.aux = w;
  }
  l->args.terms = t, l->args.first = first, l->args.ngroups = ngroups;
}

/* The host path's terms go to pinned host memory kept for the process
 * (grown, never freed: no driver call at exit).  Used under
 * moeccl_device_run's lock only. */
static void* scratch;
static size_t scratch_bytes;
static pid_t scratch_owner;

static moecclResult_t fill_terms(rows_launch_t* l) {
  const moeccl_device_ops_t* d = moeccl_device();
  size_t ngroups = count_groups(l), need = terms_bytes(l, ngroups);
  if (scratch_owner != getpid()) scratch = NULL, scratch_bytes = 0; /* forked: not ours */
  if (need > scratch_bytes) {
    size_t want = need > 2 * scratch_bytes ? need : 2 * scratch_bytes;
    void* s = NULL;
    MOECCL_CHECK(d->host_alloc(&s, want));
    if (scratch) d->host_free(scratch);
    scratch = s, scratch_bytes = want, scratch_owner = getpid();
  }
  write_terms(l, scratch, ngroups);
  return moecclSuccess;
}

/* Queues l's kernel on stream, its terms already written; one_thread: a
 * single thread runs the items in order (a program whose items the host
 * runs in an order the kernel's threads would not keep). */
static moecclResult_t launch_rows(rows_launch_t* l, void* stream, int one_thread) {
  static const int mode_of[MOECCL_K_COUNT] = {[MOECCL_K_ROWS_SUM] = 0,
                                              [MOECCL_K_ROWS_DOT] = 1,
                                              [MOECCL_K_ROWS_COPY] = 2,
                                              [MOECCL_K_ROWS_ADD] = 3};
  uint64_t items = dm_rows_items(mode_of[l->k], &l->args);
  if (items == 0) return moecclSuccess;
  __atomic_fetch_add(&launches, 1, __ATOMIC_RELAXED);
  return moeccl_device()->launch(l->fn, one_thread ? 1 : grid_for(items), one_thread ? 1 : BLOCK,
                                 &l->args, sizeof l->args, stream);
}

static moecclResult_t queue_rows(void* stream, void* arg) {
  rows_launch_t* l = arg;
  MOECCL_CHECK(fill_terms(l));
  return launch_rows(l, stream, 0);
}

/* The largest of 16, 8, 4, 2 bytes dividing the row size and both bases. */
static int copy_unit(size_t elems, const void* dst, const void* src) {
  uintptr_t m = (uintptr_t)elems | (uintptr_t)dst | (uintptr_t)src;
  for (int u = 16; u > 1; u /= 2)
    if (!(m & (uintptr_t)(u - 1))) return u;
  return 1;
}

/* l for program p over dst, src and aux (NULL: none); NULL fn when the
 * device has no kernels. */
static rows_launch_t rows_launch(const moeccl_rows_t* p, void* dst, const void* src,
                                 const void* aux) {
  static const int k_of[] = {[MOECCL_ROWS_SUM] = MOECCL_K_ROWS_SUM,
                             [MOECCL_ROWS_DOT] = MOECCL_K_ROWS_DOT,
                             [MOECCL_ROWS_COPY] = MOECCL_K_ROWS_COPY,
                             [MOECCL_ROWS_ADD] = MOECCL_K_ROWS_ADD};
  rows_launch_t l = {.p = p, .k = k_of[p->mode]};
  l.fn = kernel(l.k);
  l.args = (moeccl_krows_args_t){.dst = dst,
                                 .src = src,
                                 .aux = aux,
                                 .nterms = p->nterms,
                                 .elems = p->elems,
                                 .type = (int32_t)p->type,
                                 .unit = 1};
  if (p->mode == MOECCL_ROWS_COPY) l.args.unit = copy_unit(p->elems, dst, src);
  return l;
}

moecclResult_t moeccl_devkern_rows(const moeccl_rows_t* p, void* dst, const void* src,
                                   const void* aux, int* ran) {
  *ran = 1;
  if (!p->nterms) return moecclSuccess;
  *ran = 0;
  int uses_aux = aux && (p->mode == MOECCL_ROWS_SUM || p->mode == MOECCL_ROWS_DOT);
  uint32_t s0, s1;
  moeccl_rows_span(p, MOECCL_ROWS_FIELD_SRC, &s0, &s1);
  /* SUM's weights may be host memory (the caller's, as moecclMoeCombine
   * takes them): read where the terms are */
  int host_w = uses_aux && p->mode == MOECCL_ROWS_SUM && !on_device(aux);
  if (!on_device(dst) || (s0 <= s1 && !on_device(src)) ||
      (uses_aux && !host_w && !on_device(aux)) || (s0 <= s1 && rows_overlap(p, dst, src)) ||
      p->elems == 0)
    return moecclSuccess;
  int repeats = dst_repeats(p);
  if (repeats < 0) return moecclSystemError;
  if (repeats && p->mode != MOECCL_ROWS_ADD) return moecclSuccess;
  rows_launch_t l = rows_launch(p, dst, src, uses_aux ? aux : NULL);
  if (!l.fn) return moecclSuccess;
  l.args.serial = repeats; /* ADD: a column's terms in order in one thread */
  if (host_w) {
    uint32_t a0, a1;
    moeccl_rows_span(p, MOECCL_ROWS_FIELD_AUX, &a0, &a1);
    l.host_w = aux, l.nw = a0 <= a1 ? (size_t)a1 + 1 : 0;
    if (!l.nw) l.host_w = NULL, l.args.aux = NULL; /* no term is weighted */
  }
  *ran = 1;
  return moeccl_device_run(queue_rows, &l);
}

/* ---- row programs on the caller's stream --------------------------------- */

#define ARENA_ALIGN 16

size_t moeccl_devkern_rows_arena_bytes(const moeccl_rows_t* p) {
  if (!p->nterms) return 0;
  size_t starts = p->mode == MOECCL_ROWS_SUM ? p->nterms + 1 : 1;
  return p->nterms * sizeof(dm_term_t) + starts * sizeof(uint32_t) + ARENA_ALIGN;
}

moecclResult_t moeccl_devkern_rows_async(const moeccl_rows_t* p, const moeccl_row_term_t* terms,
                                         void* dst, const void* src, const void* aux,
                                         moeccl_dev_arena_t* arena, void* stream) {
  if (!p->nterms || !p->elems) return moecclSuccess;
  moeccl_rows_t q = *p; /* the program with the terms this launch runs */
  q.terms = terms;
  int uses_aux = aux && (q.mode == MOECCL_ROWS_SUM || q.mode == MOECCL_ROWS_DOT);
  rows_launch_t l = rows_launch(&q, dst, src, uses_aux ? aux : NULL);
  if (!l.fn) return moecclInternalError; /* the caller asked moeccl_devkern_ready */
  int repeats = dst_repeats(&q);
  if (repeats < 0) return moecclSystemError;
  uint32_t s0, s1;
  moeccl_rows_span(&q, MOECCL_ROWS_FIELD_SRC, &s0, &s1);
  /* A destination row written twice (the host's later term wins) or
   * overlapping the rows read: one thread runs the items in the host's
   * order (never for the MoE calls' programs, whose destinations are
   * other buffers than their sources and written once); ADD keeps a
   * column's terms in order in one thread. */
  int one_thread = (repeats && q.mode != MOECCL_ROWS_ADD) ||
                   (s0 <= s1 && rows_overlap(&q, dst, src));
  l.args.serial = repeats && q.mode == MOECCL_ROWS_ADD;
  size_t ngroups = count_groups(&l), need = terms_bytes(&l, ngroups);
  size_t at = (arena->used + ARENA_ALIGN - 1) / ARENA_ALIGN * ARENA_ALIGN;
  if (at > arena->bytes || need > arena->bytes - at) return moecclInternalError;
  arena->used = at + need;
  write_terms(&l, arena->base + at, ngroups);
  return launch_rows(&l, stream, one_thread);
}
