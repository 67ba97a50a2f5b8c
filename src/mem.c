/* Memory kinds and their local-work tables (mem.h). */
#include "mem.h"

#include "copy.h"
#include "device/device.h"
#include "reduce.h"
#include "rows.h"

static void host_reduce(const moeccl_red_t* r, void* dst, const void* a, const void* b, size_t n,
                        unsigned flags) {
  moeccl_reduce(r, dst, a, b, n, flags);
}

static moecclResult_t host_copy(void* dst, const void* src, size_t bytes, int stream) {
  moeccl_copy(dst, src, bytes, stream);
  return moecclSuccess;
}

const moeccl_mem_ops_t moeccl_host_mem_ops = {
    .name = "host",
    .copy = host_copy,
    .reduce = host_reduce,
    .scale = moeccl_reduce_scale,
    .postdiv = moeccl_reduce_postdiv,
    .rows = moeccl_rows_run,
};

static moecclResult_t device_copy(void* dst, const void* src, size_t bytes, int stream) {
  (void)stream;
  return moeccl_device_copy(dst, src, bytes);
}

/* Copies only: reductions and the MoE row programs need device kernels,
 * which this build does not have. */
const moeccl_mem_ops_t moeccl_device_mem_ops = {
    .name = "device",
    .copy = device_copy,
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
