/*
 * Row programs: the local op MOECCL_OP_ROWS (schedule.h) of the MoE
 * dispatch and combine.  A program is a list of terms over rows of one
 * datatype; the executor runs it with moeccl_rows_run, the only place its
 * bytes move.  Two modes:
 *
 *   SUM  consecutive terms with the same dst form a group:
 *        dst row = sum over the group of weight * src row, accumulated in
 *        float32 in term order and rounded to the row type once; a term
 *        whose src is MOECCL_ROW_NONE adds nothing (a group of only such
 *        terms writes a zero row).  The weight is float32 element `aux` of
 *        the aux buffer, or 1 when the program has no aux buffer or aux is
 *        MOECCL_ROW_NONE.
 *   COPY dst row = src row, rows of `elems` bytes of any datatype (the
 *        dispatch's expansion); consecutive terms whose rows follow on both
 *        sides move as one copy.
 *   ADD  float32 rows, one term at a time: dst row = dst row + src row, or
 *        0 + src row when the term's aux is not MOECCL_ROW_NONE (the first
 *        contribution): a sum split over programs run in a fixed order
 *        (the combine's receives: a step's adding receives run in op
 *        order, executor.c).
 *   DOT  float32 element dst of the destination = the dot product of src
 *        row `src` and aux-buffer row `aux`, accumulated in float32 in
 *        element order; 0 when src or aux is MOECCL_ROW_NONE.
 *
 * Terms hold indices, not bytes (rows of `elems` elements; DOT's dst and
 * SUM's aux in float32 elements), so one layout's terms serve every hidden
 * size and datatype; the op's src_off and dst_off and the program's
 * aux_off are the byte bases the indices count from.
 */
#ifndef MOECCL_ROWS_H_
#define MOECCL_ROWS_H_

#include <stddef.h>
#include <stdint.h>

#include "moeccl.h"

#define MOECCL_ROW_NONE UINT32_MAX

typedef enum {
  MOECCL_ROWS_SUM = 0,
  MOECCL_ROWS_DOT = 1,
  MOECCL_ROWS_COPY = 2,
  MOECCL_ROWS_ADD = 3
} moeccl_rows_mode_t;

typedef struct {
  uint32_t dst, src, aux;
} moeccl_row_term_t;

typedef struct moeccl_rows {
  moeccl_rows_mode_t mode;
  moecclDataType_t type; /* of the rows: float32, float16 or bfloat16 */
  size_t elems;          /* elements per row */
  uint32_t aux_buf; /* schedule buffer of weights (SUM) or second rows (DOT); UINT32_MAX: none */
  uint64_t aux_off; /* byte base in it */
  const moeccl_row_term_t* terms;
  size_t nterms;
  /* A program of a receive or send with MOECCL_OPF_ROWS (schedule.h):
   * where it writes; for a receive, the same program for a gathered
   * message (terms_idx: src counts rows of the sender's whole buffer) and
   * map[i], the sender's row of message row i; for a send, span, the bytes
   * of the whole buffer its src rows index. */
  uint32_t out_buf;
  uint64_t out_off;
  const moeccl_row_term_t* terms_idx;
  const uint32_t* map;
  uint64_t span;
} moeccl_rows_t;

/* Bytes of one row of p. */
size_t moeccl_rows_row_bytes(const moeccl_rows_t* p);
/* Which field of the terms moeccl_rows_span reads. */
enum { MOECCL_ROWS_FIELD_DST = 0, MOECCL_ROWS_FIELD_SRC = 1, MOECCL_ROWS_FIELD_AUX = 2 };
/* The index range [*lo, *hi] field (MOECCL_ROWS_FIELD_*) takes over p's
 * terms, MOECCL_ROW_NONE left out; *lo > *hi when none. */
void moeccl_rows_span(const moeccl_rows_t* p, int field, uint32_t* lo, uint32_t* hi);
/* 1 when the kernels handle rows of type. */
int moeccl_rows_type_ok(moecclDataType_t type);
/* Runs program p: dst, src and aux are the byte bases (aux NULL: none). */
void moeccl_rows_run(const moeccl_rows_t* p, void* dst, const void* src, const void* aux);

#endif
