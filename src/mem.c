/* Memory kinds and their local-work tables (mem.h). */
#include "mem.h"

#include <stdlib.h>

#include "copy.h"
#include "device/device.h"
#include "reduce.h"
#include "rows.h"

static moecclResult_t host_reduce(const moeccl_red_t* r, void* dst, const void* a, const void* b,
                                  size_t n, unsigned flags) {
  moeccl_reduce(r, dst, a, b, n, flags);
  return moecclSuccess;
}

static moecclResult_t host_scale(const moeccl_red_t* r, void* dst, const void* src, size_t n) {
  moeccl_reduce_scale(r, dst, src, n);
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
    .rows = moeccl_rows_run,
};

static moecclResult_t device_copy(void* dst, const void* src, size_t bytes, int stream) {
  (void)stream;
  return moeccl_device_copy(dst, src, bytes);
}

/* Device reductions: the copy engine brings pieces of the operands to a
 * host bounce buffer, the host kernel reduces them, and the copy engine
 * takes the result back (either kind for each operand). */
#define BOUNCE_ELEMS_BYTES ((size_t)1 << 20)

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
  return rc;
}

static moecclResult_t device_reduce(const moeccl_red_t* r, void* dst, const void* a, const void* b,
                                    size_t n, unsigned flags) {
  return bounce_op(r, dst, a, b, n, flags, 0);
}

static moecclResult_t device_scale(const moeccl_red_t* r, void* dst, const void* src, size_t n) {
  return bounce_op(r, dst, src, NULL, n, 0, 1);
}

static moecclResult_t device_postdiv(const moeccl_red_t* r, void* buf, size_t n) {
  return bounce_op(r, buf, buf, NULL, n, 0, 2);
}

/* No row kernels: the MoE calls are refused on device memory (enqueue.c). */
const moeccl_mem_ops_t moeccl_device_mem_ops = {
    .name = "device",
    .copy = device_copy,
    .reduce = device_reduce,
    .scale = device_scale,
    .postdiv = device_postdiv,
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
