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

typedef enum { MOECCL_ROWS_SUM = 0, MOECCL_ROWS_DOT = 1 } moeccl_rows_mode_t;

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
} moeccl_rows_t;

/* 1 when the kernels handle rows of type. */
int moeccl_rows_type_ok(moecclDataType_t type);
/* Runs program p: dst, src and aux are the byte bases (aux NULL: none). */
void moeccl_rows_run(const moeccl_rows_t* p, void* dst, const void* src, const void* aux);

#endif
