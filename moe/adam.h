/* Adam (Kingma & Ba) with bias correction, over one flat float array:
 *   m = b1 m + (1 - b1) g,  v = b2 v + (1 - b2) g^2,
 *   p -= lr * (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps)   */
#ifndef MOE_ADAM_H_
#define MOE_ADAM_H_

#include <stddef.h>

#include "backend.h"

typedef struct moe_adam {
  float lr, beta1, beta2, eps;
  long step; /* t of the last update */
  size_t count;
  float *m, *v;
  const moe_backend_ops_t* mem; /* whose memory m and v are (NULL: the host's) */
} moe_adam_t;

/* Zero moments for count parameters; beta1 0.9, beta2 0.999, eps 1e-8.
 * 0, or -1 without memory. */
int moe_adam_init(moe_adam_t* adam, size_t count, float lr);
/* The same with the moments in backend mem's memory (NULL: the host's). */
int moe_adam_init_on(moe_adam_t* adam, size_t count, float lr, const moe_backend_ops_t* mem);
void moe_adam_free(moe_adam_t* adam);
/* One update of param [count] from grad [count], computed by be. */
void moe_adam_step(moe_adam_t* adam, const moe_backend_ops_t* be, float* param, const float* grad);
/* The same in parts, for a rank that updates only the parameters it holds:
 * moe_adam_begin starts an update (t + 1), then moe_adam_range updates
 * elements [off, off + count) of param from grad (whole arrays, the same
 * offsets as the moments). */
void moe_adam_begin(moe_adam_t* adam);
void moe_adam_range(moe_adam_t* adam, const moe_backend_ops_t* be, float* param,
                    const float* grad, size_t off, size_t count);

#endif
