/* The planner's host probe: how fast the layers of moe/model.c (router,
 * dispatch, SwiGLU experts, combine and their backward) run with m rows per
 * expert, on the weights a rank of the plan holds (the model's layers and
 * its experts over the ranks probing at once: a step streams those from
 * memory, one layer repeated would find them in cache), m from 1 to 512 (few rows per expert are slow), after a
 * warm-up, the sizes taking turns until each has run 150 ms (all the work
 * over all the time: what a step sees, slow moments included; not a
 * median or a best), as
 * FLOP/s of the experts' products:
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

void plan_probe(const moe_backend_ops_t* be, int hidden, int ffn, int layers, int experts,
                int step_tokens, plan_machine_t* mc) {
  static const int sizes[] = {1, 4, 16, 64, 128, 256, 512}; /* rows per expert */
  int n = sizeof sizes / sizeof sizes[0];
  /* the model itself (moe/model.c: router, the local dispatch, the SwiGLU
   * experts, combine, and the backward of all of it), top-2, on as many
   * tokens as give each expert m rows; at least 2 experts, at most 64 MiB
   * of expert weights (far beyond any cache: more only takes longer) */
  const double most_bytes = 64.0 * 1024 * 1024, expert_bytes = 12.0 * hidden * ffn;
  if (experts * expert_bytes > most_bytes) experts = (int)(most_bytes / expert_bytes);
  if (experts < 2) experts = 2;
  if (layers * experts * expert_bytes > most_bytes)
    layers = (int)(most_bytes / (experts * expert_bytes));
  if (layers < 1) layers = 1;
  moe_config_t cfg = {layers, experts, 2, hidden, ffn, 0.01f};
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
#define LAYER(ws, x, tok)                                                             \
  do {                                                                               \
    moe_model_forward(be, &p, (ws), (x), t, (tok), NULL, &loss, NULL);               \
    moe_model_backward(be, &p, (ws), t, &g, NULL, NULL);                             \
  } while (0)
    /* warm-up: the cores reach their clock and the library its buffers */
    for (double t0 = now(); now() - t0 < 0.2;) LAYER(&ws, x, most / 2);
    /* A step's pieces are different tokens in different buffers: each size
     * goes round as many (a step's tokens of this rank, at most 64 pieces,
     * at most 256 MiB of them over all sizes), so that it finds no more of
     * them in cache than a step does. */
    const double ws_token = 4.0 * ((layers + 1.0) * (H + 2.0 * H * 2 + 3.0 * F * 2 + experts) + 2 * H);
    int nk = n < PLAN_RATES ? n : PLAN_RATES, tok[PLAN_RATES], w[PLAN_RATES], made[PLAN_RATES];
    moe_workspace_t* pieces[PLAN_RATES] = {0};
    double spent[PLAN_RATES] = {0}, work[PLAN_RATES] = {0};
    for (int k = 0; k < nk; k++) {
      tok[k] = sizes[k] * cfg.experts / cfg.topk;
      w[k] = step_tokens / tok[k];
      if (w[k] > most / tok[k]) w[k] = most / tok[k];
      if (w[k] > 64) w[k] = 64;
      if (w[k] * tok[k] * ws_token > 256.0 * 1024 * 1024 / nk)
        w[k] = (int)(256.0 * 1024 * 1024 / nk / (tok[k] * ws_token));
      if (w[k] < 1) w[k] = 1;
      made[k] = w[k] > 1 ? w[k] : 0;
      int ok = 1;
      pieces[k] = made[k] ? calloc(made[k], sizeof(*pieces[k])) : NULL;
      for (int i = 0; pieces[k] && i < made[k]; i++)
        ok &= !moe_workspace_alloc(&pieces[k][i], &cfg, tok[k]);
      if (!pieces[k] || !ok) w[k] = 1; /* no memory for them: the one workspace */
    }
    /* The sizes take turns, about 20 ms each, until each has had 150 ms:
     * the machine's speed drifts over seconds (a shared VM here: the same
     * GEMM 1.5x apart minutes apart), and sizes timed one after the other
     * would carry that drift into their ratio, which is what the planner
     * compares when it weighs more, smaller pieces against fewer. */
    for (int more = 1; more;) {
      more = 0;
      for (int k = 0; k < nk; k++) {
        if (spent[k] >= 0.15) continue;
        double t0 = now(), el;
        int reps = 0;
        do {
          int i = (int)(work[k] + reps) % w[k];
          LAYER(w[k] > 1 ? &pieces[k][i] : &ws, x + (size_t)i * tok[k] * H, tok[k]);
          reps++;
        } while ((el = now() - t0) < 0.02);
        spent[k] += el, work[k] += reps;
        more |= spent[k] < 0.15;
      }
    }
    for (int k = 0; k < nk; k++) {
      for (int i = 0; pieces[k] && i < made[k]; i++) moe_workspace_free(&pieces[k][i]);
      free(pieces[k]);
      mc->rate_rows[mc->nrates] = sizes[k];
      mc->rate[mc->nrates++] = 18.0 * cfg.layers * tok[k] * cfg.topk * H * F * work[k] / spent[k];
    }
#undef LAYER
    /* elementwise: SwiGLU reads two arrays and writes one */
    size_t cnt = big * F / 2;
    double t0 = now(), el;
    int reps = 0;
    do {
      be->swiglu_forward(cnt, hf, hf + cnt, y);
      reps++;
    } while ((el = now() - t0) < 0.06);
    mc->elem_rate = 12.0 * cnt * reps / el;
    /* Adam over a million parameters */
    moe_adam_t adam;
    size_t np = 1 << 20;
    float *p = calloc(np, sizeof(float)), *g = calloc(np, sizeof(float));
    if (p && g && moe_adam_init(&adam, np, 1e-3f) == 0) {
      for (size_t i = 0; i < np; i++) g[i] = (float)(i % 11) * 1e-3f;
      t0 = now(), reps = 0;
      do {
        moe_adam_step(&adam, be, p, g);
        reps++;
      } while ((el = now() - t0) < 0.06);
      mc->adam_rate = np * reps / el;
      moe_adam_free(&adam);
    }
    free(p), free(g);
  }
  moe_workspace_free(&ws);
  moe_params_free(&p), moe_params_free(&g);
  free(x), free(t), free(hf), free(y);
}
