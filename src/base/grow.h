/* Growing an array kept for reuse (schedules, MoE plans): its capacity
 * only goes up, geometrically, so appending one element at a time costs
 * amortized constant time. */
#ifndef MOECCL_GROW_H_
#define MOECCL_GROW_H_

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

/* Makes *(void**)arr, of *cap elements of elem bytes, hold at least need
 * (and be allocated, even for need 0, so that callers may use it as an
 * array); the contents are kept.  -1 when out of memory (the array is
 * left as it was). */
static inline int moeccl_grow(void* arr, size_t* cap, size_t need, size_t elem) {
  void** p = arr;
  if (need <= *cap && *p) return 0;
  size_t ncap = *cap > 16 ? *cap : 16;
  while (ncap < need) ncap = ncap > SIZE_MAX / 2 ? need : 2 * ncap;
  if (elem && ncap > SIZE_MAX / elem) return -1;
  void* q = realloc(*p, ncap * elem);
  if (!q) return -1;
  *p = q, *cap = ncap;
  return 0;
}

#endif
