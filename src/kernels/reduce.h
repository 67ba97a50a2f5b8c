/*
 * Host reduction kernels: one vectorised loop per (datatype, operation),
 * chosen once when a collective is planned, so the hot loop has no
 * per-element switch.  16-bit and 8-bit floats are widened to float32 in
 * vector registers, combined there and rounded once (to nearest even; the
 * 8-bit formats saturate to their largest finite value, as CUDA's
 * conversions do).  Integer sums and products wrap (two's complement).
 *
 * The schedule (schedule.h) names this as s->red; the executor and the
 * transports that reduce on receive call moeccl_reduce().
 */
#ifndef MOECCL_REDUCE_H_
#define MOECCL_REDUCE_H_

#include <stddef.h>
#include <stdint.h>

#include "moeccl.h"

/* What the kernels compute.  moecclAvg and PreMulSum ops are SUM with a
 * pre-multiplier (floating types) or a post-divisor (integer Avg). */
typedef enum {
  MOECCL_RED_SUM = 0,
  MOECCL_RED_PROD = 1,
  MOECCL_RED_MAX = 2,
  MOECCL_RED_MIN = 3,
  MOECCL_RED_NOPS
} moeccl_red_op_t;

typedef struct moeccl_red moeccl_red_t;

/* dst[i] = A[i] (+) B[i] for i < n elements, where A is a[i], or
 * scalar * a[i] when the kernel is the PRE_A variant (B likewise).  dst may
 * be a or b (exactly, not partially overlapping). */
typedef void (*moeccl_reduce_kernel_t)(void* dst, const void* a, const void* b, size_t n,
                                       const moeccl_red_t* r);

struct moeccl_red {
  moecclDataType_t type;
  size_t elem_size;
  moeccl_red_op_t op;
  /* SUM whose raw inputs are scaled by the scalar as they are read (the
   * MOECCL_OPF_PRE_* flags of the schedule's ops say which operands are). */
  int premul;
  /* Integer Avg: the final result is divided by this (nranks), 0 when none. */
  int postdiv;
  /* The pre-multiplier in the type's domain: f for the floating types (the
   * 16- and 8-bit ones widened to float), i for signed, u for unsigned. */
  union {
    double f;
    int64_t i;
    uint64_t u;
  } scalar;
  /* NULL, or where the device kernels read the pre-multiplier when the
   * stream reaches them (a PreMulSum's moecclScalarDevice scalar in device
   * memory, on the stream path: moeccl_red_set_premul_device); the host
   * kernels never read it. */
  const void* scalar_dev;
  /* Index: MOECCL_OPF_PRE_A | MOECCL_OPF_PRE_B bits of the op (all four the
   * same kernel when premul is 0). */
  moeccl_reduce_kernel_t kernel[4];
};

/* Fills r for a reduction op on type, no pre-multiplier, no post-divisor.
 * moecclInvalidArgument for an unknown type or op. */
moecclResult_t moeccl_red_init(moeccl_red_t* r, moecclDataType_t type, moeccl_red_op_t op);
/* Makes r (a SUM) a pre-multiplied sum: scalar points at one element of
 * r->type (host memory), read now. */
void moeccl_red_set_premul(moeccl_red_t* r, const void* scalar);
/* Makes r (a SUM) a pre-multiplied sum whose scalar the device kernels
 * read at scalar (device memory, one element of r->type) as they run: the
 * stream path only (the host kernels of r would scale by 0). */
void moeccl_red_set_premul_device(moeccl_red_t* r, const void* scalar);
/* Makes r (a SUM) a pre-multiplied sum by 1/n (floating types only): Avg. */
void moeccl_red_set_premul_inverse(moeccl_red_t* r, int n);

static inline void moeccl_reduce(const moeccl_red_t* r, void* dst, const void* a, const void* b,
                                 size_t n, unsigned flags) {
  r->kernel[flags & 3](dst, a, b, n, r);
}
/* dst[i] = scalar * src[i] (a raw input that becomes a result unreduced,
 * as on one rank); dst may equal src.  A plain copy when r has no premul. */
void moeccl_reduce_scale(const moeccl_red_t* r, void* dst, const void* src, size_t n);
/* buf[i] /= r->postdiv (integer Avg; C division, truncating toward zero);
 * nothing when postdiv is 0. */
void moeccl_reduce_postdiv(const moeccl_red_t* r, void* buf, size_t n);

/* Conversions the kernels use, exposed for tests and the MoE layer. */
float moeccl_half_to_float(uint16_t h);
uint16_t moeccl_float_to_half(float f);
float moeccl_bf16_to_float(uint16_t h);
uint16_t moeccl_float_to_bf16(float f);
float moeccl_fp8e4m3_to_float(uint8_t v);
uint8_t moeccl_float_to_fp8e4m3(float f);
float moeccl_fp8e5m2_to_float(uint8_t v);
uint8_t moeccl_float_to_fp8e5m2(float f);

#endif
