/* moe_train's distributed layer: a rank's workspace, and the forward and
 * backward of every layer on its rows.  Per layer: the router on the rank's
 * tokens, the statistics all-reduced over all ranks, moecclMoeLayout and
 * moecclMoeDispatch on the EP communicator, the rank's E/P experts on their
 * rows, moecclMoeCombine and the residual; the backward mirrors it.  With
 * chunks the EP exchanges are queued on the host stream so that a chunk's
 * experts run while its neighbours' exchanges are on the wire. */
#define _GNU_SOURCE
#include "train_layer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

double train_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

float* falloc(size_t count, int* failed) {
  float* p = calloc(count ? count : 1, sizeof(float));
  *failed |= p == NULL;
  return p;
}

/* The activations, the dispatch's input: moecclMemAlloc memory, so that
 * local peers pick their rows straight from it (moecclMoe(3), gathered
 * dispatch messages). */
static float* act_alloc(size_t count, int* failed) {
  void* p = NULL;
  if (moecclMemAlloc(&p, (count ? count : 1) * sizeof(float)) != moecclSuccess) p = NULL;
  if (p) memset(p, 0, (count ? count : 1) * sizeof(float));
  *failed |= p == NULL;
  return p;
}

void dws_free(dws_t* w, const moe_config_t* c) {
  if (w->layer)
    for (int l = 0; l < c->layers; l++) {
      dlayer_t* y = &w->layer[l];
      for (int k = 0; y->chunk && k < w->chunks; k++) {
        dchunk_t* ch = &y->chunk[k];
        if (ch->plan) moecclMoePlanDestroy(ch->plan);
        free(ch->recv), free(ch->counts), free(ch->x_rows), free(ch->y_rows);
        free(ch->a), free(ch->b), free(ch->h);
      }
      free(y->probs), free(y->expert), free(y->gate), free(y->stats), free(y->chunk);
    }
  if (w->act) moecclMemFree(w->act);
  free(w->layer), free(w->grad), free(w->grad_next), free(w->tok), free(w->dgate);
  free(w->dlogits), free(w->dy_rows[0]), free(w->dx_rows[0]), free(w->da), free(w->db), free(w->dh);
  free(w->dy_rows[1]), free(w->dx_rows[1]);
  memset(w, 0, sizeof(*w));
}

int dws_alloc(dws_t* w, const moe_config_t* c, const dist_t* ds, int chunks) {
  memset(w, 0, sizeof(*w));
  size_t n = ds->n, H = c->hidden, F = c->ffn, E = c->experts, K = c->topk;
  /* A rank receives at most one row per (token of a chunk of its EP group,
   * local expert chosen), at most min(K, E/P) per token; a rank's chunk has
   * at most ceil(maxn / chunks) tokens. */
  size_t per = K < (size_t)ds->nexp ? K : (size_t)ds->nexp;
  w->chunks = chunks;
  w->cap = (size_t)ds->P * ((ds->maxn + chunks - 1) / chunks) * per;
  int failed = 0;
  w->act = act_alloc(n * H * (c->layers + 1), &failed);
  w->layer = calloc(c->layers, sizeof(*w->layer));
  failed |= w->layer == NULL;
  for (int l = 0; !failed && l < c->layers; l++) {
    dlayer_t* y = &w->layer[l];
    y->probs = falloc(n * E, &failed);
    y->expert = calloc(n * K + 1, sizeof(int32_t));
    failed |= y->expert == NULL;
    y->gate = falloc(n * K, &failed);
    y->stats = falloc(MOE_STATS_LEN(E), &failed);
    y->chunk = calloc(chunks, sizeof(dchunk_t));
    failed |= !y->chunk;
    for (int k = 0; !failed && k < chunks; k++) {
      dchunk_t* ch = &y->chunk[k];
      ch->t0 = row_start(k, chunks, ds->n);
      ch->t = row_start(k + 1, chunks, ds->n) - ch->t0;
      ch->recv = calloc(ds->nexp, sizeof(size_t));
      ch->counts = calloc(ds->nexp, sizeof(int));
      failed |= !ch->recv || !ch->counts;
      ch->x_rows = falloc(w->cap * H, &failed);
      ch->y_rows = falloc(w->cap * H, &failed);
      ch->a = falloc(w->cap * F, &failed);
      ch->b = falloc(w->cap * F, &failed);
      ch->h = falloc(w->cap * F, &failed);
    }
  }
  w->grad = falloc(n * H, &failed);
  w->grad_next = falloc(n * H, &failed);
  w->tok = falloc(n * H, &failed);
  w->dgate = falloc(n * K, &failed);
  w->dlogits = falloc(n * E, &failed);
  for (int i = 0; i < (chunks > 1 ? 2 : 1); i++) {
    w->dy_rows[i] = falloc(w->cap * H, &failed);
    w->dx_rows[i] = falloc(w->cap * H, &failed);
  }
  w->da = falloc(w->cap * F, &failed);
  w->db = falloc(w->cap * F, &failed);
  w->dh = falloc(w->cap * F, &failed);
  return failed ? -1 : 0;
}

int dws_plans(dws_t* w, const moe_config_t* c, const dist_t* ds) {
  for (int l = 0; l < c->layers; l++)
    for (int k = 0; k < w->chunks; k++)
      CK(ds, ds->ep, moecclMoePlanCreate(&w->layer[l].chunk[k].plan, c->experts, NULL, ds->ep));
  return 0;
}

float* act_of(const dws_t* w, const moe_config_t* c, const dist_t* ds, int l) {
  return w->act + (size_t)l * ds->n * c->hidden;
}

/* Time in the EP exchanges of the backward: the call (NULL stream) or the
 * wait for the stream. */
#define BEXCH(tm, stmt)                                                                            \
  do {                                                                                             \
    double bx0_ = train_now();                                                                     \
    stmt;                                                                                          \
    (tm)->bexch += train_now() - bx0_;                                                             \
  } while (0)

int dist_forward(const moe_backend_ops_t* be, const moe_config_t* c, const dist_t* ds,
                 const moe_params_t* p, dws_t* w, const float* x, const float* target,
                 moe_loss_t* loss, double* baseline, step_timing_t* tm) {
  size_t n = ds->n, H = c->hidden, HF = (size_t)c->hidden * c->ffn;
  int E = c->experts;
  memcpy(act_of(w, c, ds, 0), x, n * H * sizeof(float));
  double aux = 0.0;
  for (int l = 0; l < c->layers; l++) {
    const moe_layer_params_t* wl = &p->layer[l];
    dlayer_t* y = &w->layer[l];
    const float* xin = act_of(w, c, ds, l);
    float* out = act_of(w, c, ds, l + 1);
    double t0 = train_now();
    memset(y->stats, 0, MOE_STATS_LEN(E) * sizeof(float));
    moe_router_forward(be, c, wl->wg, xin, (int)n, y->probs, y->expert, y->gate, y->stats);
    CK(ds, ds->world, moecclAllReduce(y->stats, y->stats, MOE_STATS_LEN(E), moecclFloat32,
                                      moecclSum, ds->world, NULL));
    tm->router += train_now() - t0;
    /* Each chunk has its own plan (the backward finds it again).  With
     * chunks the EP calls are queued on the host stream: chunk k's experts
     * run while chunk k+1's dispatch and chunk k-1's combine are on the
     * wire.  The stream's order, D0 D1 C0 D2 C1 ..., is the same on every
     * rank. */
    size_t K = c->topk;
    moecclStream_t st = w->chunks > 1 ? ds->stream : NULL;
    double t1 = train_now();
    for (int k = 0; k < w->chunks; k++) {
      dchunk_t* ch = &y->chunk[k];
      CK(ds, ds->ep, moecclMoeLayout(ch->plan, y->expert + ch->t0 * K, ch->t, c->topk, 0,
                                     ch->recv, NULL));
      ch->rows = 0;
      for (int i = 0; i < ds->nexp; i++) ch->counts[i] = (int)ch->recv[i], ch->rows += ch->recv[i];
      if (ch->rows > w->cap) {
        fprintf(stderr, "moe_train: rank %d: %zu expert rows, room for %zu\n", ds->rank, ch->rows,
                w->cap);
        return -1;
      }
    }
    dchunk_t* ch0 = &y->chunk[0];
    CK(ds, ds->ep, moecclMoeDispatch(ch0->plan, xin + ch0->t0 * H, ch0->x_rows, w->cap, H,
                                     moecclFloat32, st));
    if (st) CK(ds, ds->ep, moecclHostStreamSynchronize(st));
    tm->dispatch += train_now() - t1;
    for (int k = 0; k < w->chunks; k++) {
      dchunk_t* ch = &y->chunk[k];
      double t2 = train_now();
      if (k > 0) {
        dchunk_t* pr = &y->chunk[k - 1];
        CK(ds, ds->ep, moecclMoeCombine(pr->plan, pr->y_rows, w->cap, y->gate + pr->t0 * K,
                                        w->tok + pr->t0 * H, H, moecclFloat32, st));
      }
      if (k + 1 < w->chunks) {
        dchunk_t* nx = &y->chunk[k + 1];
        CK(ds, ds->ep, moecclMoeDispatch(nx->plan, xin + nx->t0 * H, nx->x_rows, w->cap, H,
                                         moecclFloat32, st));
      }
      moe_experts_forward(be, c, ds->nexp, ch->counts, wl->w1 + ds->e0 * HF,
                          wl->w3 + ds->e0 * HF, wl->w2 + ds->e0 * HF, ch->x_rows, ch->a, ch->b,
                          ch->h, ch->y_rows);
      double t3 = train_now();
      if (st) CK(ds, ds->ep, moecclHostStreamSynchronize(st));
      tm->experts += t3 - t2;
      tm->dispatch += train_now() - t3; /* the part of the exchanges not hidden */
    }
    dchunk_t* last = &y->chunk[w->chunks - 1];
    double t3 = train_now();
    CK(ds, ds->ep, moecclMoeCombine(last->plan, last->y_rows, w->cap, y->gate + last->t0 * K,
                                    w->tok + last->t0 * H, H, moecclFloat32, st));
    if (st) CK(ds, ds->ep, moecclHostStreamSynchronize(st));
    tm->combine += train_now() - t3;
    double t4 = train_now();
    for (size_t i = 0; i < n * H; i++) out[i] = xin[i] + w->tok[i];
    tm->combine += train_now() - t4;
    aux += moe_stats_aux_loss(c, y->stats);
  }
  const float* out = act_of(w, c, ds, c->layers);
  double sums[3] = {0.0, (double)n, 0.0};
  for (size_t i = 0; i < n * H; i++) {
    double d = (double)out[i] - target[i], b = (double)x[i] - target[i];
    sums[0] += d * d;
    sums[2] += b * b;
  }
  double t0 = train_now();
  CK(ds, ds->world, moecclAllReduce(sums, sums, 3, moecclFloat64, moecclSum, ds->world, NULL));
  tm->router += train_now() - t0;
  loss->mse = sums[1] > 0 ? sums[0] / (sums[1] * H) : 0.0;
  loss->aux = aux;
  loss->total = loss->mse + loss->aux;
  *baseline = sums[1] > 0 ? sums[2] / (sums[1] * H) : 0.0;
  return 0;
}

int dist_backward(const moe_backend_ops_t* be, const moe_config_t* c, const dist_t* ds,
                  const moe_params_t* p, dws_t* w, const float* target, int tokens,
                  moe_params_t* g, float* grad_x, step_timing_t* tm) {
  size_t n = ds->n, H = c->hidden, HF = (size_t)c->hidden * c->ffn;
  double t0 = train_now();
  memset(g->data, 0, g->count * sizeof(float));
  const float* out = act_of(w, c, ds, c->layers);
  float scale = tokens > 0 ? 2.0f / ((float)tokens * (float)H) : 0.0f;
  for (size_t i = 0; i < n * H; i++) w->grad[i] = scale * (out[i] - target[i]);
  for (int l = c->layers - 1; l >= 0; l--) {
    const moe_layer_params_t* wl = &p->layer[l];
    moe_layer_params_t* gl = &g->layer[l];
    dlayer_t* y = &w->layer[l];
    const float* xin = act_of(w, c, ds, l);
    /* The forward's pipeline mirrored: chunk k's experts' backward runs
     * while chunk k+1's combine-backward (a dispatch) and chunk k-1's
     * dispatch-backward (a combine) are on the wire; the row gradients
     * alternate between two buffers. */
    size_t K = c->topk;
    int C = w->chunks;
    moecclStream_t st = C > 1 ? ds->stream : NULL;
    dchunk_t* ch0 = &y->chunk[0];
    BEXCH(tm, CK(ds, ds->ep,
                 moecclMoeCombineBackward(ch0->plan, w->grad + ch0->t0 * H, y->gate + ch0->t0 * K,
                                          ch0->y_rows, w->dy_rows[0], w->cap,
                                          w->dgate + ch0->t0 * K, H, moecclFloat32, st)));
    if (st) BEXCH(tm, CK(ds, ds->ep, moecclHostStreamSynchronize(st)));
    for (int k = 0; k < C; k++) {
      dchunk_t* ch = &y->chunk[k];
      if (k > 0) {
        dchunk_t* pr = &y->chunk[k - 1];
        CK(ds, ds->ep, moecclMoeDispatchBackward(pr->plan, w->dx_rows[(k - 1) % 2], w->cap,
                                                 w->tok + pr->t0 * H, H, moecclFloat32, st));
      }
      if (k + 1 < C) {
        dchunk_t* nx = &y->chunk[k + 1];
        CK(ds, ds->ep, moecclMoeCombineBackward(nx->plan, w->grad + nx->t0 * H,
                                                y->gate + nx->t0 * K, nx->y_rows,
                                                w->dy_rows[(k + 1) % 2], w->cap,
                                                w->dgate + nx->t0 * K, H, moecclFloat32, st));
      }
      moe_experts_backward(be, c, ds->nexp, ch->counts, wl->w1 + ds->e0 * HF,
                           wl->w3 + ds->e0 * HF, wl->w2 + ds->e0 * HF, ch->x_rows, ch->a, ch->b,
                           ch->h, w->dy_rows[k % 2], gl->w1 + ds->e0 * HF, gl->w3 + ds->e0 * HF,
                           gl->w2 + ds->e0 * HF, w->dx_rows[k % 2], w->da, w->db, w->dh);
      if (st) BEXCH(tm, CK(ds, ds->ep, moecclHostStreamSynchronize(st)));
    }
    dchunk_t* last = &y->chunk[C - 1];
    BEXCH(tm, CK(ds, ds->ep,
                 moecclMoeDispatchBackward(last->plan, w->dx_rows[(C - 1) % 2], w->cap,
                                           w->tok + last->t0 * H, H, moecclFloat32, st)));
    if (st) BEXCH(tm, CK(ds, ds->ep, moecclHostStreamSynchronize(st)));
    for (size_t i = 0; i < n * H; i++) w->grad_next[i] = w->grad[i] + w->tok[i]; /* residual */
    moe_router_backward(be, c, wl->wg, xin, (int)n, y->probs, y->expert, y->gate, w->dgate,
                        y->stats, w->dlogits, gl->wg, w->grad_next);
    float* swap = w->grad;
    w->grad = w->grad_next;
    w->grad_next = swap;
  }
  memcpy(grad_x, w->grad, n * H * sizeof(float));
  tm->backward = train_now() - t0;
  return 0;
}
