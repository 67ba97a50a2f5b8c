/*
 * Memory kinds.  Every buffer a schedule names carries where it lives
 * (moeccl_mem_t: host memory, or device memory of one device), from the
 * entry points through the schedule's buffer table (schedule.h) to the
 * transport requests (transport.h).  Local work on a buffer -- copies,
 * reductions, the MoE row programs -- goes through the ops table of its
 * kind (the role UCX's memory domains and UCC's mc components play), so
 * the executor stays the one place that moves bytes and never branches on
 * the kind itself; transports say which kinds they move (ops->mem_types)
 * and are chosen per (peer, kind).
 *
 * Device pointers are told from host ones by the device seam
 * (src/device/device.h).  The device kind's table (where a device backend
 * is in use) copies through the backend's copy engine, and reduces, scales,
 * divides and runs the MoE row programs with device kernels (devkern.h)
 * where every operand is device memory and the backend has the kernels;
 * otherwise (an operand in host memory, CUDA in a build without nvcc) by
 * the copy engine plus the host kernels (the operands are copied to host
 * memory in pieces, reduced there and copied back).  Its members take
 * either kind for any operand.
 */
#ifndef MOECCL_MEM_H_
#define MOECCL_MEM_H_

#include <stddef.h>
#include <stdint.h>

#include "moeccl.h"

typedef enum { MOECCL_MEM_HOST = 0, MOECCL_MEM_DEVICE = 1, MOECCL_MEM_NKINDS } moeccl_mem_kind_t;

typedef struct {
  uint8_t kind;   /* moeccl_mem_kind_t */
  int16_t device; /* DEVICE: its ordinal; HOST: -1 */
} moeccl_mem_t;

#define MOECCL_MEM_HOST_INIT ((moeccl_mem_t){MOECCL_MEM_HOST, -1})

struct moeccl_red;
struct moeccl_rows;

/* Local work on buffers of one kind.  Both buffers of an op are of it. */
typedef struct moeccl_mem_ops {
  const char* name;
  /* dst = src, bytes; stream: streaming stores where the kind has them.
   * Host copies cannot fail; a device copy returns the driver's error. */
  moecclResult_t (*copy)(void* dst, const void* src, size_t bytes, int stream);
  /* The members below are NULL where the kind has no kernel for them (the
   * executor refuses such a call before posting anything).
   * dst = a (+) b over n elements of r, flags MOECCL_OPF_PRE_* (reduce.h) */
  moecclResult_t (*reduce)(const struct moeccl_red* r, void* dst, const void* a, const void* b,
                           size_t n, unsigned flags);
  /* dst = scalar * src (PreMulSum), buf /= postdiv (integer Avg) */
  moecclResult_t (*scale)(const struct moeccl_red* r, void* dst, const void* src, size_t n);
  moecclResult_t (*postdiv)(const struct moeccl_red* r, void* buf, size_t n);
  /* a row program (rows.h) */
  moecclResult_t (*rows)(const struct moeccl_rows* p, void* dst, const void* src,
                         const void* aux);
} moeccl_mem_ops_t;

extern const moeccl_mem_ops_t moeccl_host_mem_ops;
extern const moeccl_mem_ops_t moeccl_device_mem_ops;

/* The ops of kind m, or NULL where this build has none. */
const moeccl_mem_ops_t* moeccl_mem_ops(moeccl_mem_t m);
/* Where ptr lives (host in a build without devices; NULL is host). */
moeccl_mem_t moeccl_mem_of(const void* ptr);
/* The transport mask bit of a kind (MOECCL_MEM_TYPE_*, transport.h). */
static inline unsigned moeccl_mem_bit(moeccl_mem_t m) { return 1u << m.kind; }
const char* moeccl_mem_name(moeccl_mem_t m);

/* What the device kind's table did in this process (tests count it):
 * kernels launched, and bytes it moved through host memory (operands and
 * results of the staging path). */
typedef struct {
  uint64_t launches, staged_bytes;
} moeccl_mem_device_counts_t;
void moeccl_mem_device_counts(moeccl_mem_device_counts_t* out);

#endif
