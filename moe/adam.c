/* Adam with bias correction (see adam.h). */
#include "adam.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

int moe_adam_init(moe_adam_t* adam, size_t count, float lr) {
  return moe_adam_init_on(adam, count, lr, NULL);
}

int moe_adam_init_on(moe_adam_t* adam, size_t count, float lr, const moe_backend_ops_t* mem) {
  memset(adam, 0, sizeof(*adam));
  adam->mem = mem;
  adam->lr = lr;
  adam->beta1 = 0.9f;
  adam->beta2 = 0.999f;
  adam->eps = 1e-8f;
  adam->count = count;
  adam->m = moe_mem_alloc(mem, (count ? count : 1) * sizeof(float));
  adam->v = moe_mem_alloc(mem, (count ? count : 1) * sizeof(float));
  if (!adam->m || !adam->v) {
    moe_adam_free(adam);
    return -1;
  }
  return 0;
}

void moe_adam_free(moe_adam_t* adam) {
  moe_mem_free(adam->mem, adam->m);
  moe_mem_free(adam->mem, adam->v);
  adam->m = adam->v = NULL;
  adam->count = 0;
}

void moe_adam_begin(moe_adam_t* adam) {
  adam->step++;
}

void moe_adam_range(moe_adam_t* adam, const moe_backend_ops_t* be, float* param,
                    const float* grad, size_t off, size_t count) {
  float b1 = adam->beta1, b2 = adam->beta2;
  /* the corrections in double: 1 - b2^t is small for the first steps */
  float c1 = (float)(1.0 / (1.0 - pow(b1, (double)adam->step)));
  float c2 = (float)(1.0 / (1.0 - pow(b2, (double)adam->step)));
  if (off >= adam->count) return;
  if (count > adam->count - off) count = adam->count - off;
  be->adam(count, adam->lr, b1, b2, adam->eps, c1, c2, param + off, grad + off, adam->m + off,
           adam->v + off);
}

void moe_adam_step(moe_adam_t* adam, const moe_backend_ops_t* be, float* param, const float* grad) {
  moe_adam_begin(adam);
  moe_adam_range(adam, be, param, grad, 0, adam->count);
}
