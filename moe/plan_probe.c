/* The planner's host probe: how fast one layer of moe/model.c (router,
 * dispatch, eight SwiGLU experts, combine and their backward) runs with m
 * rows per expert, m from 1 to 512 (few rows per expert are slow), after a
 * warm-up, the median of five timings, as FLOP/s of the experts' products:
 * the rest of the layer's work rides on that rate; how fast the backend
 * streams elementwise work (SwiGLU over a large array); how fast Adam
 * updates. */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "adam.h"
#include "backend.h"
#include "model.h"
#include "plan.h"

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

void plan_probe(const moe_backend_ops_t* be, int hidden, int ffn, plan_machine_t* mc) {
  static const int sizes[] = {1, 4, 16, 64, 128, 256, 512}; /* rows per expert */
  int n = sizeof sizes / sizeof sizes[0];
  /* one layer of the model itself (moe/model.c: router, the local
   * dispatch, eight SwiGLU experts, combine, and the backward of all of
   * it), top-2, on as many tokens as give each expert m rows */
  moe_config_t cfg = {1, 8, 2, hidden, ffn, 0.01f};
  int most = sizes[n - 1] * cfg.experts / cfg.topk;
  moe_params_t p = {0}, g = {0};
  moe_workspace_t ws = {0};
  size_t H = hidden, F = ffn, big = (size_t)most;
  float *x = calloc(big * H + 1, sizeof(float)), *t = calloc(big * H + 1, sizeof(float));
  float* hf = calloc(big * F + 1, sizeof(float));
  float* y = calloc(big * H + 1, sizeof(float));
  mc->nrates = 0;
  if (x && t && hf && y && !moe_params_alloc(&p, &cfg) && !moe_params_alloc(&g, &cfg) &&
      !moe_workspace_alloc(&ws, &cfg, most)) {
    moe_params_init_random(&p, 7);
    moe_rng_t rng;
    moe_rng_seed(&rng, 8);
    moe_rng_normal(&rng, x, big * H, 1.0f);
    moe_rng_normal(&rng, t, big * H, 1.0f);
    moe_loss_t loss;
#define LAYER(tok)                                                                   \
  do {                                                                               \
    moe_model_forward(be, &p, &ws, x, t, (tok), NULL, &loss, NULL);                  \
    moe_model_backward(be, &p, &ws, t, &g, NULL, NULL);                              \
  } while (0)
    /* warm-up: the cores reach their clock and the library its buffers */
    for (double t0 = now(); now() - t0 < 0.2;) LAYER(most / 2);
    for (int k = 0; k < n && k < PLAN_RATES; k++) {
      int m = sizes[k], tok = m * cfg.experts / cfg.topk;
      double r[5];
      for (int trial = 0; trial < 5; trial++) { /* the median of five of >= 30 ms each */
        double t0 = now(), el;
        int reps = 0;
        do {
          LAYER(tok);
          reps++;
        } while ((el = now() - t0) < 0.03);
        r[trial] = 18.0 * tok * cfg.topk * H * F * reps / el;
      }
      for (int i = 1; i < 5; i++) /* sorted, for the median */
        for (int j = i; j > 0 && r[j] < r[j - 1]; j--) {
          double x = r[j];
          r[j] = r[j - 1], r[j - 1] = x;
        }
      mc->rate_rows[mc->nrates] = m;
      mc->rate[mc->nrates++] = r[2];
    }
#undef LAYER
    /* elementwise: SwiGLU reads two arrays and writes one */
    size_t cnt = big * F / 2;
    double best = 0;
    for (int trial = 0; trial < 3; trial++) {
      double t0 = now(), t;
      int reps = 0;
      do {
        be->swiglu_forward(cnt, hf, hf + cnt, y);
        reps++;
      } while ((t = now() - t0) < 0.02);
      double r = 12.0 * cnt * reps / t;
      if (r > best) best = r;
    }
    mc->elem_rate = best;
    /* Adam over a million parameters */
    moe_adam_t adam;
    size_t np = 1 << 20;
    float *p = calloc(np, sizeof(float)), *g = calloc(np, sizeof(float));
    if (p && g && moe_adam_init(&adam, np, 1e-3f) == 0) {
      for (size_t i = 0; i < np; i++) g[i] = (float)(i % 11) * 1e-3f;
      best = 0;
      for (int trial = 0; trial < 3; trial++) {
        double t0 = now(), t;
        int reps = 0;
        do {
          moe_adam_step(&adam, be, p, g);
          reps++;
        } while ((t = now() - t0) < 0.02);
        if (np * reps / t > best) best = np * reps / t;
      }
      mc->adam_rate = best;
      moe_adam_free(&adam);
    }
    free(p), free(g);
  }
  moe_workspace_free(&ws);
  moe_params_free(&p), moe_params_free(&g);
  free(x), free(t), free(hf), free(y);
}
