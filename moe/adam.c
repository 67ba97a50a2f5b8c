/* Adam with bias correction (see adam.h). */
#include "adam.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

int moe_adam_init(moe_adam_t* adam, size_t count, float lr) {
  memset(adam, 0, sizeof(*adam));
  adam->lr = lr;
  adam->beta1 = 0.9f;
  adam->beta2 = 0.999f;
  adam->eps = 1e-8f;
  adam->count = count;
  adam->m = calloc(count ? count : 1, sizeof(float));
  adam->v = calloc(count ? count : 1, sizeof(float));
  if (!adam->m || !adam->v) {
    moe_adam_free(adam);
    return -1;
  }
  return 0;
}

void moe_adam_free(moe_adam_t* adam) {
  free(adam->m);
  free(adam->v);
  adam->m = adam->v = NULL;
  adam->count = 0;
}

void moe_adam_step(moe_adam_t* adam, float* param, const float* grad) {
  adam->step++;
  float b1 = adam->beta1, b2 = adam->beta2;
  /* the corrections in double: 1 - b2^t is small for the first steps */
  float c1 = (float)(1.0 / (1.0 - pow(b1, (double)adam->step)));
  float c2 = (float)(1.0 / (1.0 - pow(b2, (double)adam->step)));
  for (size_t i = 0; i < adam->count; i++) {
    float g = grad[i];
    adam->m[i] = b1 * adam->m[i] + (1.0f - b1) * g;
    adam->v[i] = b2 * adam->v[i] + (1.0f - b2) * g * g;
    param[i] -= adam->lr * (adam->m[i] * c1) / (sqrtf(adam->v[i] * c2) + adam->eps);
  }
}
