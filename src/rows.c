/* Row programs of the MoE combine (rows.h): weighted row sums and row dot
 * products, in float32 with the conversions of reduce.h for 16-bit rows. */
#include "rows.h"
#include "reduce.h"

#include <string.h>

#define CHUNK 256 /* columns accumulated at a time (a float32 buffer on the stack) */

int moeccl_rows_type_ok(moecclDataType_t type) {
  return type == moecclFloat32 || type == moecclBfloat16 || type == moecclFloat16;
}

static size_t elem_size(moecclDataType_t type) { return type == moecclFloat32 ? 4 : 2; }

/* acc[k] += w * row[c0 + k] for k < n. */
static void accumulate(moecclDataType_t type, float* acc, const void* row, size_t c0, size_t n,
                       float w) {
  if (type == moecclFloat32) {
    const float* r = (const float*)row + c0;
    if (n == CHUNK) /* a constant trip count: gcc vectorises this at -O2 */
      for (size_t k = 0; k < CHUNK; k++) acc[k] += w * r[k];
    else
      for (size_t k = 0; k < n; k++) acc[k] += w * r[k];
  } else if (type == moecclBfloat16) {
    const uint16_t* r = (const uint16_t*)row + c0;
    for (size_t k = 0; k < n; k++) acc[k] += w * moeccl_bf16_to_float(r[k]);
  } else {
    const uint16_t* r = (const uint16_t*)row + c0;
    for (size_t k = 0; k < n; k++) acc[k] += w * moeccl_half_to_float(r[k]);
  }
}

static void store(moecclDataType_t type, void* row, size_t c0, const float* acc, size_t n) {
  if (type == moecclFloat32) {
    memcpy((float*)row + c0, acc, n * sizeof(float));
  } else if (type == moecclBfloat16) {
    uint16_t* r = (uint16_t*)row + c0;
    for (size_t k = 0; k < n; k++) r[k] = moeccl_float_to_bf16(acc[k]);
  } else {
    uint16_t* r = (uint16_t*)row + c0;
    for (size_t k = 0; k < n; k++) r[k] = moeccl_float_to_half(acc[k]);
  }
}

static float weight_of(const moeccl_row_term_t* t, const float* weights) {
  return weights && t->aux != MOECCL_ROW_NONE ? weights[t->aux] : 1.0f;
}

/* One group of a SUM program: terms [0, n) share dst. */
static void sum_group(const moeccl_rows_t* p, char* dst, const char* src, const float* weights,
                      const moeccl_row_term_t* t, size_t n) {
  size_t rb = p->elems * elem_size(p->type);
  char* out = dst + (size_t)t[0].dst * rb;
  if (n == 1 && t[0].src != MOECCL_ROW_NONE && weight_of(&t[0], weights) == 1.0f) {
    memmove(out, src + (size_t)t[0].src * rb, rb); /* a copy: exact in every type */
    return;
  }
  float acc[CHUNK];
  for (size_t c0 = 0; c0 < p->elems; c0 += CHUNK) {
    size_t m = p->elems - c0 < CHUNK ? p->elems - c0 : CHUNK;
    memset(acc, 0, m * sizeof(float));
    for (size_t i = 0; i < n; i++)
      if (t[i].src != MOECCL_ROW_NONE)
        accumulate(p->type, acc, src + (size_t)t[i].src * rb, c0, m, weight_of(&t[i], weights));
    store(p->type, out, c0, acc, m);
  }
}

static float dot(moecclDataType_t type, const void* a, const void* b, size_t n) {
  float s = 0;
  if (type == moecclFloat32) {
    const float *x = a, *y = b;
    for (size_t k = 0; k < n; k++) s += x[k] * y[k];
  } else {
    float (*dec)(uint16_t) = type == moecclBfloat16 ? moeccl_bf16_to_float : moeccl_half_to_float;
    const uint16_t *x = a, *y = b;
    for (size_t k = 0; k < n; k++) s += dec(x[k]) * dec(y[k]);
  }
  return s;
}

void moeccl_rows_run(const moeccl_rows_t* p, void* dst, const void* src, const void* aux) {
  const moeccl_row_term_t* t = p->terms;
  size_t rb = p->elems * elem_size(p->type);
  if (p->mode == MOECCL_ROWS_DOT) {
    float* out = dst;
    for (size_t i = 0; i < p->nterms; i++)
      out[t[i].dst] = t[i].src == MOECCL_ROW_NONE || t[i].aux == MOECCL_ROW_NONE
                          ? 0.0f
                          : dot(p->type, (const char*)src + (size_t)t[i].src * rb,
                                (const char*)aux + (size_t)t[i].aux * rb, p->elems);
    return;
  }
  for (size_t i = 0; i < p->nterms;) {
    size_t j = i + 1;
    while (j < p->nterms && t[j].dst == t[i].dst) j++;
    sum_group(p, dst, src, aux, &t[i], j - i);
    i = j;
  }
}
