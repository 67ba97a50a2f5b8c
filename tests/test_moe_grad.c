/* The moe/ layer's gradients against finite differences.
 *
 * The analytic gradients (float32, moe/model.c) of every parameter and of
 * the input are compared with central differences of an independent float64
 * implementation of the same loss written here with plain loops (no BLAS):
 *   fd_i = (L(p + eps e_i) - L(p - eps e_i)) / (2 eps), eps = 1e-6, in double.
 * Tolerance, per tensor: max_i |g_i - fd_i| <= 1e-4 * max_i |fd_i| + 1e-8
 * (float32 rounding of the analytic gradient is ~1e-6 relative, measured
 * worst 1e-6; a wrong term is off by its own size).  The float loss must
 * equal the double one within 1e-5 relative.  Cases: the shapes
 * (L=2 E=4 K=2 H=8 F=16 N=12 aux=0.01), a strong aux loss (aux=1), K = E,
 * K = 1 with experts that get no token, L=3 E=6 K=3, and exact ties (a zero
 * router: every logit 0, so the ids must be 0..K-1 in order; with K < E that
 * layer's Wg is not differentiable and is left out, with K = E it is checked
 * too).  Also: the tie rule on crafted logits, and a batch split in two halves
 * whose statistics meet through the sum hook gives the full batch's loss and
 * (summed) gradients (also 0 + 12, a rank without tokens), and one layer
 * composed by hand from the per-layer pieces (token chunks, expert halves)
 * equals the model's.
 * Exit 0 pass, 1 fail. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "model.h"
#include "unit_check.h"

/* --- the float64 reference of the loss ------------------------------------------ */

typedef struct ref_layer {
  const double *wg, *w1, *w3, *w2;
} ref_layer_t;

static void ref_layers(const moe_config_t* c, const double* p, ref_layer_t* out) {
  size_t ehf = (size_t)c->experts * c->hidden * c->ffn;
  for (int l = 0; l < c->layers; l++) {
    out[l].wg = p + moe_layer_param_count(c) * l;
    out[l].w1 = out[l].wg + (size_t)c->hidden * c->experts;
    out[l].w3 = out[l].w1 + ehf;
    out[l].w2 = out[l].w3 + ehf;
  }
}

/* y += w * FFN_e(x) for one token. */
static void ref_ffn(const moe_config_t* c, const ref_layer_t* w, int e, const double* x, double gw,
                    double* y) {
  int H = c->hidden, F = c->ffn;
  const double *w1 = w->w1 + (size_t)e * H * F, *w3 = w->w3 + (size_t)e * H * F;
  const double* w2 = w->w2 + (size_t)e * F * H;
  for (int f = 0; f < F; f++) {
    double a = 0, b = 0;
    for (int h = 0; h < H; h++) {
      a += x[h] * w1[h * F + f];
      b += x[h] * w3[h * F + f];
    }
    double g = a / (1.0 + exp(-a)) * b;
    for (int h = 0; h < H; h++) y[h] += gw * g * w2[f * H + h];
  }
}

/* One layer on one token; adds the token's counts and probabilities. */
static void ref_token(const moe_config_t* c, const ref_layer_t* w, const double* x, double* y,
                      double* count, double* psum, int* ids) {
  int E = c->experts, K = c->topk, H = c->hidden;
  double logit[64], top = -INFINITY, z = 0;
  int chosen[64] = {0};
  for (int e = 0; e < E; e++) {
    logit[e] = 0;
    for (int h = 0; h < H; h++) logit[e] += x[h] * w->wg[h * E + e];
    top = fmax(top, logit[e]);
  }
  for (int e = 0; e < E; e++) z += exp(logit[e] - top);
  for (int e = 0; e < E; e++) psum[e] += exp(logit[e] - top) / z;
  for (int j = 0; j < K; j++) { /* largest first, ties to the lower id */
    int best = -1;
    for (int e = 0; e < E; e++)
      if (!chosen[e] && (best < 0 || logit[e] > logit[best])) best = e;
    chosen[best] = 1;
    ids[j] = best;
    count[best] += 1;
  }
  double zk = 0;
  for (int j = 0; j < K; j++) zk += exp(logit[ids[j]] - logit[ids[0]]);
  memcpy(y, x, H * sizeof(double));
  for (int j = 0; j < K; j++) ref_ffn(c, w, ids[j], x, exp(logit[ids[j]] - logit[ids[0]]) / zk, y);
}

static double ref_loss(const moe_config_t* c, const double* p, const double* x0,
                       const double* target, int n) {
  int H = c->hidden, E = c->experts;
  ref_layer_t w[8];
  ref_layers(c, p, w);
  double *x = malloc(sizeof(double) * n * H), *y = malloc(sizeof(double) * n * H);
  memcpy(x, x0, sizeof(double) * n * H);
  double aux = 0;
  for (int l = 0; l < c->layers; l++) {
    double count[64] = {0}, psum[64] = {0}, acc = 0;
    int ids[64];
    for (int t = 0; t < n; t++) ref_token(c, &w[l], x + t * H, y + t * H, count, psum, ids);
    for (int e = 0; e < E; e++) acc += count[e] / ((double)n * c->topk) * (psum[e] / n);
    aux += c->aux * E * acc;
    memcpy(x, y, sizeof(double) * n * H);
  }
  double sq = 0;
  for (int i = 0; i < n * H; i++) sq += (x[i] - target[i]) * (x[i] - target[i]);
  free(x);
  free(y);
  return sq / ((double)n * H) + aux;
}

/* --- one case --------------------------------------------------------------------------- */

typedef struct grad_case {
  const char* name;
  moe_config_t cfg;
  int tokens;
  unsigned seed;
  int zero_router_layer; /* -1, or the layer whose Wg is all zero (ties) */
} grad_case_t;

static const double fd_eps = 1e-6, tol_rel = 1e-4, tol_abs = 1e-8;

/* Compares analytic g [count] with central differences of the reference in
 * the entries [first, first + count) of the vector v (params or x). */
static double check_tensor(const grad_case_t* gc, const char* what, const float* g, double* v,
                           size_t first, size_t count, const double* p, const double* x,
                           const double* target) {
  double max_fd = 0, max_err = 0;
  for (size_t i = 0; i < count; i++) {
    double keep = v[first + i];
    v[first + i] = keep + fd_eps;
    double up = ref_loss(&gc->cfg, p, x, target, gc->tokens);
    v[first + i] = keep - fd_eps;
    double down = ref_loss(&gc->cfg, p, x, target, gc->tokens);
    v[first + i] = keep;
    double fd = (up - down) / (2 * fd_eps);
    max_fd = fmax(max_fd, fabs(fd));
    max_err = fmax(max_err, fabs(fd - g[i]));
  }
  double rel = max_err / (max_fd > 0 ? max_fd : 1);
  CHECK_STDOUT(max_err <= tol_rel * max_fd + tol_abs,
               "%s: %s: max error %.3g, max |fd| %.3g (rel %.3g)", gc->name, what, max_err, max_fd,
               rel);
  return rel;
}

static void run_case(const moe_backend_ops_t* be, const grad_case_t* gc) {
  const moe_config_t* c = &gc->cfg;
  int n = gc->tokens, H = c->hidden, E = c->experts;
  moe_params_t p, g;
  moe_workspace_t ws;
  moe_loss_t loss;
  if (moe_params_alloc(&p, c) || moe_params_alloc(&g, c) || moe_workspace_alloc(&ws, c, n)) {
    CHECK_STDOUT(0, "%s: allocation", gc->name);
    return;
  }
  moe_params_init_random(&p, gc->seed);
  if (gc->zero_router_layer >= 0)
    memset(p.layer[gc->zero_router_layer].wg, 0, sizeof(float) * H * E);
  float *x = malloc(sizeof(float) * n * H), *target = malloc(sizeof(float) * n * H);
  float* gx = malloc(sizeof(float) * n * H);
  moe_rng_t rng;
  moe_rng_seed(&rng, gc->seed + 100);
  moe_rng_normal(&rng, x, (size_t)n * H, 1.0f);
  moe_rng_normal(&rng, target, (size_t)n * H, 1.0f);
  CHECK_STDOUT(moe_model_forward(be, &p, &ws, x, target, n, NULL, &loss, NULL) == 0, "%s: forward",
               gc->name);
  moe_model_backward(be, &p, &ws, target, &g, gx, NULL);

  double *pd = malloc(sizeof(double) * p.count), *xd = malloc(sizeof(double) * n * H);
  double* td = malloc(sizeof(double) * n * H);
  for (size_t i = 0; i < p.count; i++) pd[i] = p.data[i];
  for (int i = 0; i < n * H; i++) {
    xd[i] = x[i];
    td[i] = target[i];
  }
  double ref = ref_loss(c, pd, xd, td, n);
  CHECK_STDOUT(fabs(loss.total - ref) <= 1e-5 * fabs(ref), "%s: loss %.9g, reference %.9g",
               gc->name, loss.total, ref);

  if (gc->zero_router_layer >= 0) { /* all logits 0: ids 0..K-1 in order, weights 1/K */
    int K = c->topk;
    float *probs = malloc(sizeof(float) * n * E), *gate = malloc(sizeof(float) * n * K);
    float* stats = calloc(MOE_STATS_LEN(E), sizeof(float));
    int32_t* ids = malloc(sizeof(int32_t) * n * K);
    moe_router_forward(be, c, p.layer[gc->zero_router_layer].wg, x, n, probs, ids, gate, stats);
    int wrong = 0;
    for (int t = 0; t < n; t++)
      for (int j = 0; j < K; j++)
        wrong += ids[t * K + j] != j || fabsf(gate[t * K + j] - 1.0f / K) > 1e-6f;
    CHECK_STDOUT(wrong == 0, "%s: %d (token, j) of a zero router are not expert j with weight 1/K",
                 gc->name, wrong);
    free(probs);
    free(gate);
    free(stats);
    free(ids);
  }

  double worst = 0;
  size_t per = moe_layer_param_count(c), ehf = (size_t)E * H * c->ffn;
  for (int l = 0; l < c->layers; l++) {
    char what[64];
    size_t base = per * l;
    if (l != gc->zero_router_layer || c->topk == c->experts) {
      snprintf(what, sizeof(what), "wg%d", l);
      worst =
          fmax(worst, check_tensor(gc, what, g.layer[l].wg, pd, base, (size_t)H * E, pd, xd, td));
    }
    snprintf(what, sizeof(what), "w1_%d", l);
    worst = fmax(worst, check_tensor(gc, what, g.layer[l].w1, pd, base + H * E, ehf, pd, xd, td));
    snprintf(what, sizeof(what), "w3_%d", l);
    worst =
        fmax(worst, check_tensor(gc, what, g.layer[l].w3, pd, base + H * E + ehf, ehf, pd, xd, td));
    snprintf(what, sizeof(what), "w2_%d", l);
    worst = fmax(
        worst, check_tensor(gc, what, g.layer[l].w2, pd, base + H * E + 2 * ehf, ehf, pd, xd, td));
  }
  worst = fmax(worst, check_tensor(gc, "x", gx, xd, 0, (size_t)n * H, pd, xd, td));
  printf("%-28s loss %.6f (aux %.3g)  worst relative gradient error %.2e\n", gc->name, loss.total,
         loss.aux, worst);
  free(pd);
  free(xd);
  free(td);
  free(x);
  free(target);
  free(gx);
  moe_workspace_free(&ws);
  moe_params_free(&p);
  moe_params_free(&g);
}

/* --- the tie rule on crafted logits ---------------------------------------------------- */

static void check_ties(const moe_backend_ops_t* be) {
  /* H = 1, x = 1: the logits are Wg's row exactly. */
  const float wg[6] = {1, 2, 2, 0, 2, -1};
  const float x[1] = {1};
  static const int32_t want[6][6] = {{1},          {1, 2},          {1, 2, 4},
                                     {1, 2, 4, 0}, {1, 2, 4, 0, 3}, {1, 2, 4, 0, 3, 5}};
  for (int k = 1; k <= 6; k++) {
    moe_config_t c = {1, 6, k, 1, 1, 0.01f};
    float probs[6], gate[6], stats[MOE_STATS_LEN(6)] = {0};
    int32_t ids[6];
    moe_router_forward(be, &c, wg, x, 1, probs, ids, gate, stats);
    for (int j = 0; j < k; j++)
      CHECK_STDOUT(ids[j] == want[k - 1][j], "ties, K=%d: id %d is %d, want %d", k, j, ids[j],
                   want[k - 1][j]);
    if (k >= 3)
      CHECK_STDOUT(gate[1] == gate[2] && gate[0] == gate[1],
                   "ties, K=%d: equal logits, unequal weights", k);
    CHECK_STDOUT(stats[12] == 1.0f && stats[1] == 1.0f && stats[5] == (k == 6),
                 "ties, K=%d: counts", k);
  }
}

/* --- a batch split in two halves meets through the hook -------------------------------- */

/* Records every hook call's values (the other half's sums) or adds them. */
typedef struct split_hook {
  float values[64][32];
  int counts[64];
  int calls, replay;
} split_hook_t;

static int split_sum(void* ctx, float* values, int count) {
  split_hook_t* s = ctx;
  if (s->calls >= 64 || count > 32) return -1;
  if (s->replay) {
    if (s->counts[s->calls] != count) return -1;
    for (int i = 0; i < count; i++) values[i] += s->values[s->calls][i];
  } else {
    memcpy(s->values[s->calls], values, count * sizeof(float));
    s->counts[s->calls] = count;
  }
  s->calls++;
  return 0;
}

/* Tokens [0, half) are one part, [half, 12) the other; half may be 0 (a
 * rank without tokens). */
static void check_split(const moe_backend_ops_t* be, int half) {
  moe_config_t c = {2, 4, 2, 8, 16, 0.5f};
  int n = 12, H = c.hidden;
  moe_params_t p, g_full, g_a, g_b;
  moe_workspace_t ws;
  moe_loss_t l_full, l_a, l_b;
  moe_params_alloc(&p, &c);
  moe_params_alloc(&g_full, &c);
  moe_params_alloc(&g_a, &c);
  moe_params_alloc(&g_b, &c);
  moe_workspace_alloc(&ws, &c, n);
  moe_params_init_random(&p, 7);
  float x[12 * 8], target[12 * 8], gx_full[12 * 8], gx[12 * 8];
  moe_rng_t rng;
  moe_rng_seed(&rng, 8);
  moe_rng_normal(&rng, x, n * H, 1.0f);
  moe_rng_normal(&rng, target, n * H, 1.0f);
  moe_model_forward(be, &p, &ws, x, target, n, NULL, &l_full, NULL);
  moe_model_backward(be, &p, &ws, target, &g_full, gx_full, NULL);

  static split_hook_t rec_a, rec_b, add_a, add_b;
  memset(&rec_a, 0, sizeof(rec_a));
  memset(&rec_b, 0, sizeof(rec_b));
  moe_sum_hook_t hook_rec_a = {split_sum, &rec_a}, hook_rec_b = {split_sum, &rec_b};
  const float *xa = x, *xb = x + half * H, *ta = target, *tb = target + half * H;
  moe_model_forward(be, &p, &ws, xa, ta, half, &hook_rec_a, NULL, NULL);
  moe_model_forward(be, &p, &ws, xb, tb, n - half, &hook_rec_b, NULL, NULL);
  memcpy(&add_a, &rec_b, sizeof(add_a)); /* half a gets b's sums and vice versa */
  memcpy(&add_b, &rec_a, sizeof(add_b));
  add_a.calls = add_b.calls = 0;
  add_a.replay = add_b.replay = 1;
  moe_sum_hook_t hook_a = {split_sum, &add_a}, hook_b = {split_sum, &add_b};
  CHECK_STDOUT(moe_model_forward(be, &p, &ws, xa, ta, half, &hook_a, &l_a, NULL) == 0,
               "split: forward a");
  moe_model_backward(be, &p, &ws, ta, &g_a, gx, NULL);
  CHECK_STDOUT(moe_model_forward(be, &p, &ws, xb, tb, n - half, &hook_b, &l_b, NULL) == 0,
               "split: forward b");
  moe_model_backward(be, &p, &ws, tb, &g_b, gx + half * H, NULL);
  CHECK_STDOUT(rec_a.calls == c.layers + 1, "split: %d hook calls, want %d", rec_a.calls,
               c.layers + 1);
  CHECK_STDOUT(fabs(l_a.total - l_full.total) <= 1e-5 * l_full.total &&
                   fabs(l_b.total - l_full.total) <= 1e-5 * l_full.total,
               "split: loss %.8g / %.8g, full batch %.8g", l_a.total, l_b.total, l_full.total);
  double max_err = 0, max_g = 0;
  for (size_t i = 0; i < p.count; i++) {
    max_err = fmax(max_err, fabs(g_a.data[i] + g_b.data[i] - g_full.data[i]));
    max_g = fmax(max_g, fabs(g_full.data[i]));
  }
  for (int i = 0; i < n * H; i++) {
    max_err = fmax(max_err, fabs(gx[i] - gx_full[i]));
    max_g = fmax(max_g, fabs(gx_full[i]));
  }
  CHECK_STDOUT(max_err <= 1e-5 * max_g, "split %d: gradients differ by %.3g (max %.3g)", half,
               max_err, max_g);
  printf("split %2d + %2d through the hook  loss %.6f  max gradient difference %.2e\n", half,
         n - half, l_full.total, max_err / max_g);
  moe_workspace_free(&ws);
  moe_params_free(&p);
  moe_params_free(&g_full);
  moe_params_free(&g_a);
  moe_params_free(&g_b);
}

/* --- the per-layer pieces composed by hand, as a driver will ------------------------ */

/* One layer (L = 1) built from the pieces of model.h the way an expert- and
 * token-split driver composes them: the router over two chunks of tokens
 * accumulating one set of statistics, the experts as two halves (experts
 * [0, E/2) and [E/2, E), each with its own weight and row offsets, as two
 * ranks would hold them), the router backward per chunk accumulating dWg
 * and dx.  Output and every gradient must equal moe_model_forward/backward. */
static double max_diff(const float* a, const float* b, size_t count, double* max_b) {
  double d = 0;
  for (size_t i = 0; i < count; i++) {
    d = fmax(d, fabs((double)a[i] - b[i]));
    *max_b = fmax(*max_b, fabs(b[i]));
  }
  return d;
}

static void check_pieces(const moe_backend_ops_t* be) {
  moe_config_t c = {1, 6, 2, 8, 10, 0.3f};
  enum { N = 12, CHUNK = 5 };
  int H = c.hidden, E = c.experts, K = c.topk, F = c.ffn, half = E / 2;
  size_t hf = (size_t)H * F;
  moe_params_t p, g_model, g;
  moe_workspace_t ws;
  moe_local_plan_t plan;
  moe_params_alloc(&p, &c);
  moe_params_alloc(&g_model, &c);
  moe_params_alloc(&g, &c);
  moe_workspace_alloc(&ws, &c, N);
  moe_local_plan_alloc(&plan, E, K, N);
  moe_params_init_random(&p, 11);
  float x[N * 8], target[N * 8], gx_model[N * 8], y[N * 8], dout[N * 8], dx[N * 8];
  float probs[N * 6], gate[N * 2], dgate[N * 2], dlogits[N * 6], stats[MOE_STATS_LEN(6)] = {0};
  int32_t ids[N * 2];
  float x_rows[N * 2 * 8], y_rows[N * 2 * 8], dy_rows[N * 2 * 8], dx_rows[N * 2 * 8];
  float a[N * 2 * 10], b[N * 2 * 10], h[N * 2 * 10], da[N * 2 * 10], db[N * 2 * 10], dh[N * 2 * 10];
  moe_rng_t rng;
  moe_rng_seed(&rng, 12);
  moe_rng_normal(&rng, x, N * H, 1.0f);
  moe_rng_normal(&rng, target, N * H, 1.0f);
  moe_model_forward(be, &p, &ws, x, target, N, NULL, NULL, NULL);
  moe_model_backward(be, &p, &ws, target, &g_model, gx_model, NULL);

  const moe_layer_params_t* w = &p.layer[0];
  moe_layer_params_t* gw = &g.layer[0];
  static const int chunk_first[3] = {0, CHUNK, N};
  for (int ch = 0; ch < 2; ch++) {
    int t0 = chunk_first[ch], n = chunk_first[ch + 1] - t0;
    moe_router_forward(be, &c, w->wg, x + t0 * H, n, probs + t0 * E, ids + t0 * K, gate + t0 * K,
                       stats);
  }
  moe_local_plan_build(&plan, ids, N);
  moe_local_dispatch(be, &plan, H, x, x_rows);
  for (int e0 = 0; e0 < E; e0 += half) {
    size_t r0 = plan.offsets[e0];
    moe_experts_forward(be, &c, half, plan.counts + e0, w->w1 + e0 * hf, w->w3 + e0 * hf,
                        w->w2 + e0 * hf, x_rows + r0 * H, a + r0 * F, b + r0 * F, h + r0 * F,
                        y_rows + r0 * H);
  }
  memcpy(y, x, sizeof(y));
  moe_local_combine(be, &plan, H, gate, y_rows, y);
  for (int i = 0; i < N * H; i++) dout[i] = 2.0f * (y[i] - target[i]) / (N * H);

  memset(g.data, 0, g.count * sizeof(float));
  moe_local_combine_backward(be, &plan, H, gate, dout, y_rows, dy_rows, dgate);
  for (int e0 = 0; e0 < E; e0 += half) {
    size_t r0 = plan.offsets[e0];
    moe_experts_backward(be, &c, half, plan.counts + e0, w->w1 + e0 * hf, w->w3 + e0 * hf,
                         w->w2 + e0 * hf, x_rows + r0 * H, a + r0 * F, b + r0 * F, h + r0 * F,
                         dy_rows + r0 * H, gw->w1 + e0 * hf, gw->w3 + e0 * hf, gw->w2 + e0 * hf,
                         dx_rows + r0 * H, da + r0 * F, db + r0 * F, dh + r0 * F);
  }
  memcpy(dx, dout, sizeof(dx));
  moe_local_dispatch_backward(be, &plan, H, dx_rows, dx);
  for (int ch = 0; ch < 2; ch++) {
    int t0 = chunk_first[ch], n = chunk_first[ch + 1] - t0;
    moe_router_backward(be, &c, w->wg, x + t0 * H, n, probs + t0 * E, ids + t0 * K, gate + t0 * K,
                        dgate + t0 * K, stats, dlogits, gw->wg, dx + t0 * H);
  }

  double max_out = 0, max_g = 0;
  double d_out = max_diff(y, moe_model_output(&ws), (size_t)N * H, &max_out);
  double d_g = fmax(max_diff(g.data, g_model.data, g.count, &max_g),
                    max_diff(dx, gx_model, (size_t)N * H, &max_g));
  CHECK_STDOUT(d_out <= 1e-6 * max_out, "pieces: output differs by %.3g (max %.3g)", d_out,
               max_out);
  CHECK_STDOUT(d_g <= 1e-5 * max_g, "pieces: gradients differ by %.3g (max %.3g)", d_g, max_g);
  printf("pieces: 2 token chunks x 2 expert halves  output %.2e  gradients %.2e\n", d_out / max_out,
         d_g / max_g);
  moe_local_plan_free(&plan);
  moe_workspace_free(&ws);
  moe_params_free(&p);
  moe_params_free(&g_model);
  moe_params_free(&g);
}

int main(void) {
  const moe_backend_ops_t* be = moe_backend_blas(1);
  static const grad_case_t cases[] = {
      {"L2 E4 K2 H8 F16 N12", {2, 4, 2, 8, 16, 0.01f}, 12, 1, -1},
      {"strong aux (aux=1)", {2, 4, 2, 8, 16, 1.0f}, 12, 2, -1},
      {"K = E = 4", {2, 4, 4, 8, 16, 0.01f}, 12, 3, -1},
      {"K = 1, idle experts", {2, 8, 1, 6, 5, 0.1f}, 4, 4, -1},
      {"ties: zero router, K < E", {2, 4, 2, 8, 16, 0.01f}, 12, 5, 1},
      {"ties: zero router, K = E", {2, 4, 4, 8, 16, 0.01f}, 12, 6, 0},
      {"L3 E6 K3 H7 F9 N10", {3, 6, 3, 7, 9, 0.05f}, 10, 7, -1},
  };
  printf("finite differences: eps %g, tolerance %g * max|fd| + %g per tensor\n", fd_eps, tol_rel,
         tol_abs);
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) run_case(be, &cases[i]);
  check_ties(be);
  check_split(be, 5);
  check_split(be, 0);
  check_pieces(be);
  if (failures) printf("%d check(s) failed\n", failures);
  return failures ? 1 : 0;
}
