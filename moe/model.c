/* The MoE model's compute on one process: router, local dispatch/combine,
 * SwiGLU experts, loss and backward.  See model.h for the model. */
#include "model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* --- config and parameters ------------------------------------------------------ */

int moe_config_check(const moe_config_t* cfg, char* err, size_t len) {
  const char* bad = NULL;
  if (cfg->layers < 1) bad = "layers must be at least 1";
  else if (cfg->experts < 1) bad = "experts must be at least 1";
  else if (cfg->topk < 1 || cfg->topk > cfg->experts) bad = "topk must be between 1 and experts";
  else if (cfg->hidden < 1) bad = "hidden must be at least 1";
  else if (cfg->ffn < 1) bad = "ffn must be at least 1";
  else if (!(cfg->aux >= 0.0f)) bad = "aux must be >= 0";
  if (bad && err && len) snprintf(err, len, "%s", bad);
  return bad ? -1 : 0;
}

size_t moe_layer_param_count(const moe_config_t* cfg) {
  size_t h = cfg->hidden, e = cfg->experts, f = cfg->ffn;
  return h * e + 3 * e * h * f;
}

int moe_params_alloc(moe_params_t* p, const moe_config_t* cfg) {
  return moe_params_alloc_on(p, cfg, NULL);
}

int moe_params_alloc_on(moe_params_t* p, const moe_config_t* cfg, const moe_backend_ops_t* mem) {
  memset(p, 0, sizeof(*p));
  if (moe_config_check(cfg, NULL, 0)) return -1;
  p->mem = mem;
  size_t per_layer = moe_layer_param_count(cfg);
  size_t ehf = (size_t)cfg->experts * cfg->hidden * cfg->ffn;
  p->cfg = *cfg;
  p->count = per_layer * cfg->layers;
  p->data = moe_mem_alloc(mem, p->count * sizeof(float));
  p->layer = calloc(cfg->layers, sizeof(*p->layer));
  if (!p->data || !p->layer) {
    moe_params_free(p);
    return -1;
  }
  for (int l = 0; l < cfg->layers; l++) {
    float* base = p->data + per_layer * l;
    p->layer[l].wg = base;
    p->layer[l].w1 = base + (size_t)cfg->hidden * cfg->experts;
    p->layer[l].w3 = p->layer[l].w1 + ehf;
    p->layer[l].w2 = p->layer[l].w3 + ehf;
  }
  return 0;
}

void moe_params_free(moe_params_t* p) {
  if (p->data) moe_mem_free(p->mem, p->data);
  free(p->layer);
  memset(p, 0, sizeof(*p));
}

void moe_rng_seed(moe_rng_t* rng, uint64_t seed) {
  rng->state = seed * 0x9E3779B97F4A7C15ull + 0x2545F4914F6CDD1Dull;
}

static uint64_t rng_next(moe_rng_t* rng) {
  uint64_t z = (rng->state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

double moe_rng_uniform(moe_rng_t* rng) {
  return (rng_next(rng) >> 11) * (1.0 / 9007199254740992.0);
}

/* Box-Muller, one value per pair of uniforms (simple and deterministic). */
void moe_rng_normal(moe_rng_t* rng, float* dst, size_t count, float std) {
  for (size_t i = 0; i < count; i++) {
    double u1 = 1.0 - moe_rng_uniform(rng), u2 = moe_rng_uniform(rng);
    dst[i] = (float)(std * sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
  }
}

void moe_params_to_host(const moe_params_t* p, float* host) {
  if (p->mem) p->mem->to_host(host, p->data, p->count * sizeof(float));
  else memcpy(host, p->data, p->count * sizeof(float));
}

void moe_params_to_device(moe_params_t* p, const float* host) {
  if (p->mem) p->mem->to_device(p->data, host, p->count * sizeof(float));
  else memcpy(p->data, host, p->count * sizeof(float));
}

int moe_params_init_random(moe_params_t* p, uint64_t seed) {
  const moe_config_t* c = &p->cfg;
  size_t ehf = (size_t)c->experts * c->hidden * c->ffn;
  float sh = 1.0f / sqrtf((float)c->hidden), sf = 1.0f / sqrtf((float)c->ffn);
  /* drawn in host memory, at the parameters' offsets */
  float* host = p->mem ? malloc(p->count * sizeof(float) + 1) : p->data;
  if (!host) return -1;
  moe_rng_t rng;
  moe_rng_seed(&rng, seed);
  for (int l = 0; l < c->layers; l++) {
    float* base = host + (p->layer[l].wg - p->data);
    moe_rng_normal(&rng, base, (size_t)c->hidden * c->experts, sh);
    moe_rng_normal(&rng, base + (p->layer[l].w1 - p->layer[l].wg), ehf, sh);
    moe_rng_normal(&rng, base + (p->layer[l].w3 - p->layer[l].wg), ehf, sh);
    moe_rng_normal(&rng, base + (p->layer[l].w2 - p->layer[l].wg), ehf, sf);
  }
  if (p->mem) {
    moe_params_to_device(p, host);
    free(host);
  }
  return 0;
}

/* --- global sums ----------------------------------------------------------------- */

static int sum_identity(void* ctx, float* values, int count) { return 0; }

const moe_sum_hook_t moe_sum_local = {sum_identity, NULL};

double moe_stats_aux_loss(const moe_config_t* cfg, const float* stats) {
  int e_count = cfg->experts;
  double n = stats[2 * e_count], acc = 0.0;
  if (n <= 0.0) return 0.0;
  for (int e = 0; e < e_count; e++) acc += (stats[e] / (n * cfg->topk)) * (stats[e_count + e] / n);
  return cfg->aux * e_count * acc;
}

/* --- router ----------------------------------------------------------------------- */

void moe_router_forward(const moe_backend_ops_t* be, const moe_config_t* cfg, const float* wg,
                        const float* x, int n, float* probs, int32_t* expert, float* gate,
                        float* stats) {
  int e_count = cfg->experts, k = cfg->topk;
  be->sgemm(0, 0, n, e_count, cfg->hidden, 1.0f, x, cfg->hidden, wg, e_count, 0.0f, probs, e_count);
  be->router_select(n, e_count, k, probs, expert, gate, stats);
}

void moe_router_backward_input(const moe_backend_ops_t* be, const moe_config_t* cfg,
                               const float* wg, int n, const float* probs, const int32_t* expert,
                               const float* gate, const float* dgate, const float* stats,
                               float* dlogits, float* dx) {
  int e_count = cfg->experts, k = cfg->topk, h = cfg->hidden;
  double nglob = stats[2 * e_count];
  float g[e_count];
  /* aux * E * sum_e f_e P_e with P_e = sum_t p_te / N: d/dp_te = aux E f_e / N */
  for (int e = 0; e < e_count; e++)
    g[e] = nglob > 0.0 ? (float)(cfg->aux * e_count * (stats[e] / (nglob * k)) / nglob) : 0.0f;
  be->router_dlogits(n, e_count, k, probs, expert, gate, dgate, g, dlogits);
  be->sgemm(0, 1, n, h, e_count, 1.0f, dlogits, e_count, wg, e_count, 1.0f, dx, h);
}

void moe_router_backward_weight(const moe_backend_ops_t* be, const moe_config_t* cfg,
                                const float* x, int n, const float* dlogits, float* dwg) {
  int e_count = cfg->experts, h = cfg->hidden;
  be->sgemm(1, 0, h, e_count, n, 1.0f, x, h, dlogits, e_count, 1.0f, dwg, e_count);
}

void moe_router_backward(const moe_backend_ops_t* be, const moe_config_t* cfg, const float* wg,
                         const float* x, int n, const float* probs, const int32_t* expert,
                         const float* gate, const float* dgate, const float* stats, float* dlogits,
                         float* dwg, float* dx) {
  moe_router_backward_input(be, cfg, wg, n, probs, expert, gate, dgate, stats, dlogits, dx);
  moe_router_backward_weight(be, cfg, x, n, dlogits, dwg);
}

/* --- local dispatch / combine ------------------------------------------------------ */

int moe_local_plan_alloc(moe_local_plan_t* plan, int experts, int topk, int max_tokens) {
  return moe_local_plan_alloc_on(plan, experts, topk, max_tokens, NULL);
}

int moe_local_plan_alloc_on(moe_local_plan_t* plan, int experts, int topk, int max_tokens,
                            const moe_backend_ops_t* mem) {
  memset(plan, 0, sizeof(*plan));
  size_t slots = (size_t)max_tokens * topk;
  plan->experts = experts;
  plan->topk = topk;
  plan->capacity = max_tokens;
  plan->counts = calloc(experts, sizeof(int));
  plan->offsets = calloc(experts + 1, sizeof(int));
  plan->row_of = calloc(slots ? slots : 1, sizeof(int32_t));
  plan->token_of = calloc(slots ? slots : 1, sizeof(int32_t));
  plan->mem = mem;
  plan->d_row_of = mem ? moe_mem_alloc(mem, (slots ? slots : 1) * sizeof(int32_t)) : plan->row_of;
  plan->d_token_of =
      mem ? moe_mem_alloc(mem, (slots ? slots : 1) * sizeof(int32_t)) : plan->token_of;
  if (!plan->counts || !plan->offsets || !plan->row_of || !plan->token_of || !plan->d_row_of ||
      !plan->d_token_of) {
    moe_local_plan_free(plan);
    return -1;
  }
  return 0;
}

void moe_local_plan_free(moe_local_plan_t* plan) {
  if (plan->mem) {
    if (plan->d_row_of) plan->mem->free(plan->d_row_of);
    if (plan->d_token_of) plan->mem->free(plan->d_token_of);
  }
  free(plan->counts);
  free(plan->offsets);
  free(plan->row_of);
  free(plan->token_of);
  memset(plan, 0, sizeof(*plan));
}

/* A counting sort of the (token, j) slots by expert, stable. */
void moe_local_plan_build(moe_local_plan_t* plan, const int32_t* expert, int n) {
  int e_count = plan->experts, k = plan->topk;
  size_t slots = (size_t)n * k;
  memset(plan->counts, 0, e_count * sizeof(int));
  for (size_t s = 0; s < slots; s++)
    if (expert[s] >= 0) plan->counts[expert[s]]++;
  plan->offsets[0] = 0;
  for (int e = 0; e < e_count; e++) plan->offsets[e + 1] = plan->offsets[e] + plan->counts[e];
  int next[e_count];
  memcpy(next, plan->offsets, e_count * sizeof(int));
  for (size_t s = 0; s < slots; s++) {
    int32_t row = expert[s] >= 0 ? next[expert[s]]++ : -1;
    plan->row_of[s] = row;
    if (row >= 0) plan->token_of[row] = (int32_t)(s / k);
  }
  plan->tokens = n;
  plan->rows = plan->offsets[e_count];
  if (plan->mem) { /* the ops' copies */
    plan->mem->to_device(plan->d_row_of, plan->row_of, slots * sizeof(int32_t));
    plan->mem->to_device(plan->d_token_of, plan->token_of, (size_t)plan->rows * sizeof(int32_t));
  }
}

void moe_local_dispatch(const moe_backend_ops_t* be, const moe_local_plan_t* plan, int hidden,
                        const float* x, float* rows) {
  be->gather_rows(plan->rows, hidden, plan->d_token_of, x, rows);
}

void moe_local_combine(const moe_backend_ops_t* be, const moe_local_plan_t* plan, int hidden,
                       const float* gate, const float* y_rows, float* out) {
  be->combine_rows((size_t)plan->tokens * plan->topk, plan->topk, hidden, plan->d_row_of, gate,
                   y_rows, out);
}

void moe_local_combine_backward(const moe_backend_ops_t* be, const moe_local_plan_t* plan,
                                int hidden, const float* gate, const float* dout,
                                const float* y_rows, float* dy_rows, float* dgate) {
  be->combine_rows_backward((size_t)plan->tokens * plan->topk, plan->topk, hidden, plan->d_row_of,
                            gate, dout, y_rows, dy_rows, dgate);
}

void moe_local_dispatch_backward(const moe_backend_ops_t* be, const moe_local_plan_t* plan,
                                 int hidden, const float* dx_rows, float* dx) {
  be->scatter_add_rows((size_t)plan->tokens * plan->topk, plan->topk, hidden, plan->d_row_of,
                       dx_rows, dx);
}

/* --- the model on one process's tokens --------------------------------------------- */

struct moe_layer_cache {
  float* probs;    /* [n][E] */
  int32_t* expert; /* [n][K] */
  float* gate;     /* [n][K] */
  float* stats;    /* MOE_STATS_LEN(E): the router's local sums */
  float* stats_host;      /* their host mirror, global after the forward */
  int32_t* expert_host;   /* [n][K] the expert ids' host mirror (the plan's sort) */
  moe_local_plan_t plan;
  float *x_rows, *y_rows; /* [n*K][H] */
  float *a, *b, *h;       /* [n*K][F] */
};

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

/* count zeroed floats (or int32s) of mem's memory (NULL: the host's). */
static float* alloc_floats(const moe_backend_ops_t* mem, size_t count, int* failed) {
  float* p = moe_mem_alloc(mem, (count ? count : 1) * sizeof(float));
  *failed |= p == NULL;
  return p;
}

static void free_floats(const moe_backend_ops_t* mem, void* p) {
  if (p) moe_mem_free(mem, p);
}

static int layer_cache_alloc(moe_layer_cache_t* c, const moe_config_t* cfg, int n,
                             const moe_backend_ops_t* mem) {
  size_t slots = (size_t)n * cfg->topk;
  int failed = 0;
  c->probs = alloc_floats(mem, (size_t)n * cfg->experts, &failed);
  c->expert = (int32_t*)alloc_floats(mem, slots, &failed);
  c->gate = alloc_floats(mem, slots, &failed);
  c->stats = alloc_floats(mem, MOE_STATS_LEN(cfg->experts), &failed);
  c->stats_host = alloc_floats(NULL, MOE_STATS_LEN(cfg->experts), &failed);
  c->expert_host = (int32_t*)alloc_floats(NULL, slots, &failed);
  c->x_rows = alloc_floats(mem, slots * cfg->hidden, &failed);
  c->y_rows = alloc_floats(mem, slots * cfg->hidden, &failed);
  c->a = alloc_floats(mem, slots * cfg->ffn, &failed);
  c->b = alloc_floats(mem, slots * cfg->ffn, &failed);
  c->h = alloc_floats(mem, slots * cfg->ffn, &failed);
  failed |= moe_local_plan_alloc_on(&c->plan, cfg->experts, cfg->topk, n, mem) != 0;
  return failed ? -1 : 0;
}

static void layer_cache_free(moe_layer_cache_t* c, const moe_backend_ops_t* mem) {
  free_floats(mem, c->probs);
  free_floats(mem, c->expert);
  free_floats(mem, c->gate);
  free_floats(mem, c->stats);
  free(c->stats_host);
  free(c->expert_host);
  free_floats(mem, c->x_rows);
  free_floats(mem, c->y_rows);
  free_floats(mem, c->a);
  free_floats(mem, c->b);
  free_floats(mem, c->h);
  moe_local_plan_free(&c->plan);
}

int moe_workspace_alloc(moe_workspace_t* ws, const moe_config_t* cfg, int max_tokens) {
  return moe_workspace_alloc_on(ws, cfg, max_tokens, NULL);
}

int moe_workspace_alloc_on(moe_workspace_t* ws, const moe_config_t* cfg, int max_tokens,
                           const moe_backend_ops_t* mem) {
  memset(ws, 0, sizeof(*ws));
  ws->mem = mem;
  if (moe_config_check(cfg, NULL, 0) || max_tokens < 0) return -1;
  size_t nh = (size_t)max_tokens * cfg->hidden, slots = (size_t)max_tokens * cfg->topk;
  int failed = 0;
  ws->cfg = *cfg;
  ws->capacity = max_tokens;
  ws->act = alloc_floats(mem, nh * (cfg->layers + 1), &failed);
  ws->layer = calloc(cfg->layers, sizeof(*ws->layer));
  failed |= ws->layer == NULL;
  for (int l = 0; !failed && l < cfg->layers; l++)
    failed |= layer_cache_alloc(&ws->layer[l], cfg, max_tokens, mem);
  ws->grad = alloc_floats(mem, nh, &failed);
  ws->grad_next = alloc_floats(mem, nh, &failed);
  ws->dgate = alloc_floats(mem, slots, &failed);
  ws->dlogits = alloc_floats(mem, (size_t)max_tokens * cfg->experts, &failed);
  ws->dy_rows = alloc_floats(mem, slots * cfg->hidden, &failed);
  ws->dx_rows = alloc_floats(mem, slots * cfg->hidden, &failed);
  ws->da = alloc_floats(mem, slots * cfg->ffn, &failed);
  ws->db = alloc_floats(mem, slots * cfg->ffn, &failed);
  ws->dh = alloc_floats(mem, slots * cfg->ffn, &failed);
  if (failed) {
    moe_workspace_free(ws);
    return -1;
  }
  return 0;
}

void moe_workspace_free(moe_workspace_t* ws) {
  const moe_backend_ops_t* mem = ws->mem;
  if (ws->layer)
    for (int l = 0; l < ws->cfg.layers; l++) layer_cache_free(&ws->layer[l], mem);
  free(ws->layer);
  float* all[] = {ws->act, ws->grad, ws->grad_next, ws->dgate, ws->dlogits, ws->dy_rows,
                  ws->dx_rows, ws->da, ws->db, ws->dh};
  for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++) free_floats(mem, all[i]);
  memset(ws, 0, sizeof(*ws));
}

static float* layer_act(const moe_workspace_t* ws, int l) {
  return ws->act + (size_t)l * ws->capacity * ws->cfg.hidden;
}

/* One layer forward: x [n][H] -> y [n][H]; the statistics summed by hook. */
static int layer_forward(const moe_backend_ops_t* be, const moe_config_t* cfg,
                         const moe_layer_params_t* w, moe_layer_cache_t* c, const float* x, int n,
                         const moe_sum_hook_t* hook, float* y, moe_timing_t* tm) {
  double t0 = now();
  size_t nstats = MOE_STATS_LEN(cfg->experts);
  be->zero(nstats, c->stats);
  moe_router_forward(be, cfg, w->wg, x, n, c->probs, c->expert, c->gate, c->stats);
  be->to_host(c->stats_host, c->stats, nstats * sizeof(float));
  if (hook->sum(hook->ctx, c->stats_host, (int)nstats)) return -1;
  double t1 = now();
  be->to_host(c->expert_host, c->expert, (size_t)n * cfg->topk * sizeof(int32_t));
  moe_local_plan_build(&c->plan, c->expert_host, n);
  moe_local_dispatch(be, &c->plan, cfg->hidden, x, c->x_rows);
  double t2 = now();
  moe_experts_forward(be, cfg, cfg->experts, c->plan.counts, w->w1, w->w3, w->w2, c->x_rows, c->a,
                      c->b, c->h, c->y_rows);
  double t3 = now();
  be->copy((size_t)n * cfg->hidden, x, y); /* the residual */
  moe_local_combine(be, &c->plan, cfg->hidden, c->gate, c->y_rows, y);
  double t4 = now();
  tm->router += t1 - t0;
  tm->dispatch += t2 - t1;
  tm->experts += t3 - t2;
  tm->combine += t4 - t3;
  return 0;
}

int moe_model_forward(const moe_backend_ops_t* be, const moe_params_t* p, moe_workspace_t* ws,
                      const float* x, const float* target, int n, const moe_sum_hook_t* hook,
                      moe_loss_t* loss, moe_timing_t* timing) {
  const moe_config_t* cfg = &ws->cfg;
  moe_timing_t tm = {0};
  if (!hook) hook = &moe_sum_local;
  if (n < 0 || n > ws->capacity) return -1;
  ws->tokens = n;
  be->copy((size_t)n * cfg->hidden, x, layer_act(ws, 0));
  double aux = 0.0;
  for (int l = 0; l < cfg->layers; l++) {
    if (layer_forward(be, cfg, &p->layer[l], &ws->layer[l], layer_act(ws, l), n, hook,
                      layer_act(ws, l + 1), &tm))
      return -1;
    aux += moe_stats_aux_loss(cfg, ws->layer[l].stats_host);
  }
  const float* out = layer_act(ws, cfg->layers);
  double sq = be->sq_dist((size_t)n * cfg->hidden, out, target);
  float sums[2] = {(float)sq, (float)n};
  if (hook->sum(hook->ctx, sums, 2)) return -1;
  ws->global_tokens = sums[1];
  if (loss) {
    loss->mse = sums[1] > 0.0f ? sums[0] / ((double)sums[1] * cfg->hidden) : 0.0;
    loss->aux = aux;
    loss->total = loss->mse + loss->aux;
  }
  if (timing) *timing = tm;
  return 0;
}

const float* moe_model_output(const moe_workspace_t* ws) { return layer_act(ws, ws->cfg.layers); }

/* One layer backward: from dout = dL/dy [n][H] to dx = dL/dx [n][H]. */
static void layer_backward(const moe_backend_ops_t* be, const moe_config_t* cfg,
                           const moe_layer_params_t* w, moe_layer_params_t* gw,
                           moe_layer_cache_t* c, moe_workspace_t* ws, const float* x, int n,
                           const float* dout, float* dx) {
  moe_local_combine_backward(be, &c->plan, cfg->hidden, c->gate, dout, c->y_rows, ws->dy_rows,
                             ws->dgate);
  moe_experts_backward(be, cfg, cfg->experts, c->plan.counts, w->w1, w->w3, w->w2, c->x_rows, c->a,
                       c->b, c->h, ws->dy_rows, gw->w1, gw->w3, gw->w2, ws->dx_rows, ws->da, ws->db,
                       ws->dh);
  be->copy((size_t)n * cfg->hidden, dout, dx); /* the residual */
  moe_local_dispatch_backward(be, &c->plan, cfg->hidden, ws->dx_rows, dx);
  moe_router_backward(be, cfg, w->wg, x, n, c->probs, c->expert, c->gate, ws->dgate, c->stats_host,
                      ws->dlogits, gw->wg, dx);
}

void moe_model_backward(const moe_backend_ops_t* be, const moe_params_t* p, moe_workspace_t* ws,
                        const float* target, moe_params_t* grads, float* grad_x,
                        moe_timing_t* timing) {
  const moe_config_t* cfg = &ws->cfg;
  int n = ws->tokens, hd = cfg->hidden;
  double t0 = now();
  be->zero(grads->count, grads->data);
  const float* out = layer_act(ws, cfg->layers);
  float scale = ws->global_tokens > 0.0f ? 2.0f / (ws->global_tokens * hd) : 0.0f;
  be->scaled_diff((size_t)n * hd, scale, out, target, ws->grad);
  for (int l = cfg->layers - 1; l >= 0; l--) {
    layer_backward(be, cfg, &p->layer[l], &grads->layer[l], &ws->layer[l], ws, layer_act(ws, l), n,
                   ws->grad, ws->grad_next);
    float* swap = ws->grad;
    ws->grad = ws->grad_next;
    ws->grad_next = swap;
  }
  if (grad_x) be->copy((size_t)n * hd, ws->grad, grad_x);
  if (timing) timing->backward = now() - t0;
}
