/*
 * Device kernels (docs/ARCHITECTURE.md, "Device kernels"): the reductions
 * and the MoE row programs of the device memory kind, launched through
 * the device seam (device.h) on the library's copy stream and waited for
 * (the host path), or on the caller's stream and not waited for (the
 * stream path: the _async launches below).
 * The kernels are kernels.cu's (a fatbin built by nvcc and embedded in
 * libmoeccl) on CUDA and their C twins (twins.c) on the emulation.
 *
 * Each call sets *ran: 1 when the kernel ran (the result is the call's),
 * 0 when no kernel applies and nothing was done (no fatbin in this build,
 * an operand in host memory, a row program whose destination overlaps its
 * source): the caller then takes the staging path.
 */
#ifndef MOECCL_KERNELS_DEVKERN_H_
#define MOECCL_KERNELS_DEVKERN_H_

#include <stddef.h>
#include <stdint.h>

#include "device/device.h"
#include "kernels/rows.h"
#include "moeccl.h"

/* The kernels by family; the datatype and the operation are arguments. */
enum {
  MOECCL_K_REDUCE = 0,
  MOECCL_K_ROWS_SUM,
  MOECCL_K_ROWS_DOT,
  MOECCL_K_ROWS_COPY,
  MOECCL_K_ROWS_ADD,
  MOECCL_K_REDUCE_FOLD,
  MOECCL_K_COUNT
};

/* What moeccl_devkern_reduce computes (devmath.h's DM_REDUCE...). */
enum { MOECCL_KRED_REDUCE = 0, MOECCL_KRED_SCALE = 1, MOECCL_KRED_POSTDIV = 2 };

extern const moeccl_dev_twin_t moeccl_kernel_twins[MOECCL_K_COUNT];
/* The fatbin (src/local.mk generates it; empty without nvcc). */
extern const unsigned char moeccl_kernels_fatbin[];
extern const size_t moeccl_kernels_fatbin_bytes;

struct moeccl_red;
struct moeccl_rows;

/* REDUCE: dst = a (+) b (flags MOECCL_OPF_PRE_*), SCALE: dst = s * a,
 * POSTDIV: dst /= postdiv (a, b unused), n elements of r. */
moecclResult_t moeccl_devkern_reduce(const struct moeccl_red* r, int what, void* dst, const void* a,
                                     const void* b, size_t n, unsigned flags, int* ran);
/* The stream path's launches (docs/ARCHITECTURE.md, "Device buffers
 * between ranks of one node"): queued on stream after what was queued
 * before, never waited for; every operand is device memory (mapped peer
 * memory included).  moecclInternalError where the kernels are missing:
 * ask moeccl_devkern_ready first.
 * Whether the current device has the kernels (they are loaded now). */
int moeccl_devkern_ready(void);
/* moeccl_devkern_reduce's work, on stream. */
moecclResult_t moeccl_devkern_reduce_async(const struct moeccl_red* r, int what, void* dst,
                                           const void* a, const void* b, size_t n,
                                           unsigned flags, void* stream);
/* dst = src[0] (+) src[1] (+) ... (+) src[nsrc-1], folded left, n elements,
 * 2 <= nsrc <= 32; bit k of raw: src[k] is a raw input (pre-multiplied, as
 * MOECCL_OPF_PRE_*).  One launch for up to 2 + DM_FOLD_MORE (devmath.h)
 * operands, the same bits as nsrc - 1 moeccl_devkern_reduce calls. */
moecclResult_t moeccl_devkern_fold_async(const struct moeccl_red* r, void* dst,
                                         const void* const* src, int nsrc, uint32_t raw, size_t n,
                                         void* stream);
/* Row program p (rows.h) on device memory. */
moecclResult_t moeccl_devkern_rows(const struct moeccl_rows* p, void* dst, const void* src,
                                   const void* aux, int* ran);
/* Pinned host memory a lowered call's row programs take their terms from
 * (exec/lower.c hands each call one): [base, base + bytes), used so far. */
typedef struct moeccl_dev_arena {
  char* base;
  size_t bytes, used;
} moeccl_dev_arena_t;
/* At most the arena bytes one moeccl_devkern_rows_async of p takes. */
size_t moeccl_devkern_rows_arena_bytes(const struct moeccl_rows* p);
/* Row program p with terms (p->terms, or p->terms_idx for a gathered
 * message) on stream, never waited for: the terms (and SUM's group
 * starts) are written into arena, which must live until the stream has
 * passed the launch.  dst, src and aux (NULL: none) are device memory or
 * pinned host memory, mapped peer memory included.  Every program runs,
 * the host's bits: one whose destination rows repeat or overlap what it
 * reads runs its items in the host's order.  moecclInternalError where the
 * kernels are missing or the arena is short. */
moecclResult_t moeccl_devkern_rows_async(const struct moeccl_rows* p,
                                         const moeccl_row_term_t* terms, void* dst,
                                         const void* src, const void* aux,
                                         moeccl_dev_arena_t* arena, void* stream);
/* Kernels this process launched. */
uint64_t moeccl_devkern_launches(void);

#endif
