/* Memory kinds and their local-work tables (mem.h). */
#include "kernels/mem.h"

#include <stdlib.h>

#include "kernels/copy.h"
#include "kernels/devkern.h"
#include "device/device.h"
#include "kernels/reduce.h"
#include "kernels/rows.h"

static moecclResult_t host_reduce(const moeccl_red_t* r, void* dst, const void* a, const void* b,
                                  size_t n, unsigned flags) {
  moeccl_reduce(r, dst, a, b, n, flags);
  return moecclSuccess;
}

static moecclResult_t host_scale(const moeccl_red_t* r, void* dst, const void* src, size_t n) {
  moeccl_reduce_scale(r, dst, src, n);
  return moecclSuccess;
}

static moecclResult_t host_rows(const moeccl_rows_t* p, void* dst, const void* src,
                                const void* aux) {
  moeccl_rows_run(p, dst, src, aux);
  return moecclSuccess;
}

static moecclResult_t host_postdiv(const moeccl_red_t* r, void* buf, size_t n) {
  moeccl_reduce_postdiv(r, buf, n);
  return moecclSuccess;
}

static moecclResult_t host_copy(void* dst, const void* src, size_t bytes, int stream) {
  moeccl_copy(dst, src, bytes, stream);
  return moecclSuccess;
}

const moeccl_mem_ops_t moeccl_host_mem_ops = {
    .name = "host",
    .copy = host_copy,
    .reduce = host_reduce,
    .scale = host_scale,
    .postdiv = host_postdiv,
    .rows = host_rows,
};

static moecclResult_t device_copy(void* dst, const void* src, size_t bytes, int stream) {
  (void)stream;
  return moeccl_device_copy(dst, src, bytes);
}

/* Device reductions run as kernels (devkern.h) where every operand is
 * device memory and the backend has them; else (a build without nvcc on
 * CUDA, an operand in host memory) the staging path: the copy engine
 * brings pieces of the operands to a host bounce buffer, the host kernel
 * reduces them, and the copy engine takes the result back.  The bytes
 * staged are counted. */
#define BOUNCE_ELEMS_BYTES ((size_t)1 << 20)

static uint64_t staged_bytes;
#define STAGED(n) __atomic_fetch_add(&staged_bytes, (uint64_t)(n), __ATOMIC_RELAXED)

void moeccl_mem_device_counts(moeccl_mem_device_counts_t* out) {
  out->launches = moeccl_devkern_launches();
  out->staged_bytes = __atomic_load_n(&staged_bytes, __ATOMIC_RELAXED);
}

static moecclResult_t bounce_op(const moeccl_red_t* r, void* dst, const void* a, const void* b,
                                size_t n, unsigned flags, int what) {
  size_t es = r->elem_size, per = BOUNCE_ELEMS_BYTES / es;
  char* h = malloc(2 * per * es);
  if (!h) return moecclSystemError;
  moecclResult_t rc = moecclSuccess;
  for (size_t i = 0; i < n && rc == moecclSuccess; i += per) {
    size_t k = n - i < per ? n - i : per, off = i * es;
    char *ha = h, *hb = h + per * es;
    rc = moeccl_device_copy(ha, (const char*)a + off, k * es);
    if (rc == moecclSuccess && what == 0) rc = moeccl_device_copy(hb, (const char*)b + off, k * es);
    if (rc != moecclSuccess) break;
    if (what == 0) moeccl_reduce(r, ha, ha, hb, k, flags);
    else if (what == 1) moeccl_reduce_scale(r, ha, ha, k);
    else moeccl_reduce_postdiv(r, ha, k);
    rc = moeccl_device_copy((char*)dst + off, ha, k * es);
  }
  free(h);
  STAGED(n * es * (what == 0 ? 3 : 2));
  return rc;
}

static moecclResult_t device_reduce(const moeccl_red_t* r, void* dst, const void* a, const void* b,
                                    size_t n, unsigned flags) {
  int ran;
  moecclResult_t rc = moeccl_devkern_reduce(r, MOECCL_KRED_REDUCE, dst, a, b, n, flags, &ran);
  return ran ? rc : bounce_op(r, dst, a, b, n, flags, 0);
}

static moecclResult_t device_scale(const moeccl_red_t* r, void* dst, const void* src, size_t n) {
  int ran;
  moecclResult_t rc = moeccl_devkern_reduce(r, MOECCL_KRED_SCALE, dst, src, NULL, n, 0, &ran);
  return ran ? rc : bounce_op(r, dst, src, NULL, n, 0, 1);
}

static moecclResult_t device_postdiv(const moeccl_red_t* r, void* buf, size_t n) {
  int ran;
  moecclResult_t rc = moeccl_devkern_reduce(r, MOECCL_KRED_POSTDIV, buf, NULL, NULL, n, 0, &ran);
  return ran ? rc : bounce_op(r, buf, buf, NULL, n, 0, 2);
}

/* Device row programs: the rows a program reads (and the destination rows
 * it may partly write, to keep the rest) go to host memory through the
 * copy engine, the host kernel runs on them with rebased indices, and the
 * destination range goes back.  Indices count rows of dst_unit, src_unit
 * and aux_unit bytes (rows.h). */
static moecclResult_t staged_rows(const moeccl_rows_t* p, void* dst, const void* src,
                                  const void* aux) {
  size_t rb = moeccl_rows_row_bytes(p);
  size_t dst_unit = p->mode == MOECCL_ROWS_DOT ? 4 : rb;
  size_t aux_unit = p->mode == MOECCL_ROWS_DOT ? rb : 4; /* DOT: rows of the row type */
  int uses_aux = aux && (p->mode == MOECCL_ROWS_SUM || p->mode == MOECCL_ROWS_DOT);
  uint32_t d0, d1, s0, s1, a0, a1;
  moeccl_rows_span(p, MOECCL_ROWS_FIELD_DST, &d0, &d1);
  moeccl_rows_span(p, MOECCL_ROWS_FIELD_SRC, &s0, &s1);
  moeccl_rows_span(p, MOECCL_ROWS_FIELD_AUX, &a0, &a1);
  if (!p->nterms || d0 > d1) return moecclSuccess;
  size_t dn = (size_t)(d1 - d0 + 1) * dst_unit, sn = s0 <= s1 ? (size_t)(s1 - s0 + 1) * rb : 0;
  size_t an = uses_aux && a0 <= a1 ? (size_t)(a1 - a0 + 1) * aux_unit : 0;
  char* h = malloc(dn + sn + an + 1);
  moeccl_row_term_t* t = malloc(p->nterms * sizeof(*t));
  moecclResult_t rc = h && t ? moecclSuccess : moecclSystemError;
  char *hd = h, *hs = h + dn, *ha = h + dn + sn;
  if (rc == moecclSuccess) rc = moeccl_device_copy(hd, (const char*)dst + (size_t)d0 * dst_unit, dn);
  if (rc == moecclSuccess && sn) rc = moeccl_device_copy(hs, (const char*)src + (size_t)s0 * rb, sn);
  if (rc == moecclSuccess && an) rc = moeccl_device_copy(ha, (const char*)aux + (size_t)a0 * aux_unit, an);
  if (rc == moecclSuccess) {
    for (size_t i = 0; i < p->nterms; i++) {
      moeccl_row_term_t x = p->terms[i];
      x.dst -= d0;
      if (x.src != MOECCL_ROW_NONE) x.src -= s0;
      if (uses_aux && x.aux != MOECCL_ROW_NONE) x.aux -= a0;
      t[i] = x;
    }
    moeccl_rows_t q = *p;
    q.terms = t;
    moeccl_rows_run(&q, hd, hs, uses_aux ? ha : aux);
    rc = moeccl_device_copy((char*)dst + (size_t)d0 * dst_unit, hd, dn);
  }
  free(t);
  free(h);
  STAGED(2 * dn + sn + an);
  return rc;
}

/* Row programs on device memory: a kernel, or the staging path where none
 * applies (devkern.h). */
static moecclResult_t device_rows(const moeccl_rows_t* p, void* dst, const void* src,
                                  const void* aux) {
  int ran;
  moecclResult_t rc = moeccl_devkern_rows(p, dst, src, aux, &ran);
  return ran ? rc : staged_rows(p, dst, src, aux);
}

const moeccl_mem_ops_t moeccl_device_mem_ops = {
    .name = "device",
    .copy = device_copy,
    .reduce = device_reduce,
    .scale = device_scale,
    .postdiv = device_postdiv,
    .rows = device_rows,
};

const moeccl_mem_ops_t* moeccl_mem_ops(moeccl_mem_t m) {
  if (m.kind == MOECCL_MEM_HOST) return &moeccl_host_mem_ops;
  if (m.kind == MOECCL_MEM_DEVICE && moeccl_device()) return &moeccl_device_mem_ops;
  return NULL;
}

moeccl_mem_t moeccl_mem_of(const void* ptr) {
  const moeccl_device_ops_t* d = ptr ? moeccl_device() : NULL;
  int device = -1;
  if (d && d->pointer(ptr, &device)) return (moeccl_mem_t){MOECCL_MEM_DEVICE, (int16_t)device};
  return MOECCL_MEM_HOST_INIT;
}

const char* moeccl_mem_name(moeccl_mem_t m) {
  return m.kind == MOECCL_MEM_HOST ? "host" : m.kind == MOECCL_MEM_DEVICE ? "device" : "unknown";
}
