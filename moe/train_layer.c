/* moe_train's distributed layers: a piece's workspace, and the forward and
 * backward of its layers on a micro-batch's rows.  Per layer: the router on
 * the rank's tokens, the statistics all-reduced over the stage's ranks (all
 * that hold this micro-batch at this layer), moecclMoeLayout and
 * moecclMoeDispatch on the EP communicator, the rank's E/P experts on their
 * rows, moecclMoeCombine and the residual; the backward mirrors it.  With
 * chunks the EP exchanges are queued on the host stream so that a chunk's
 * experts run while its neighbours' exchanges are on the wire. */
#define _GNU_SOURCE
#include "train_layer.h"

#include "train_experts.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const moe_backend_ops_t* timed_device;

void train_time_device(const moe_backend_ops_t* be) { timed_device = be; }

double train_now(void) {
  if (timed_device) timed_device->sync();
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

float* falloc(size_t count, int* failed) {
  float* p = calloc(count ? count : 1, sizeof(float));
  *failed |= p == NULL;
  return p;
}

float* balloc(const moe_backend_ops_t* mem, size_t count, int* failed) {
  float* p = moe_mem_alloc(mem, (count ? count : 1) * sizeof(float));
  *failed |= p == NULL;
  return p;
}

/* The activations, the dispatch's input: on the host moecclMemAlloc memory,
 * so that local peers pick their rows straight from it (moecclMoe(3),
 * gathered dispatch messages); on a device the backend's. */
static float* act_alloc(const dws_t* w, size_t count, int* failed) {
  if (w->device) return balloc(w->mem, count, failed);
  void* p = NULL;
  if (moecclMemAlloc(&p, (count ? count : 1) * sizeof(float)) != moecclSuccess) p = NULL;
  if (p) memset(p, 0, (count ? count : 1) * sizeof(float));
  *failed |= p == NULL;
  return p;
}

/* A host mirror of count floats: its own memory on a device, else dev. */
static float* mirror(const dws_t* w, float* dev, size_t count, int* failed) {
  return w->device ? falloc(count, failed) : dev;
}

static void bfree(const dws_t* w, void* p) {
  if (p) moe_mem_free(w->mem, p);
}

static void mfree(const dws_t* w, void* p) {
  if (w->device) free(p);
}

void dws_free(dws_t* w) {
  if (w->layer)
    for (int l = 0; l < w->layers; l++) {
      dlayer_t* y = &w->layer[l];
      for (int k = 0; y->chunk && k < w->chunks; k++) {
        dchunk_t* ch = &y->chunk[k];
        if (ch->plan) moecclMoePlanDestroy(ch->plan);
        free(ch->recv), free(ch->counts);
        bfree(w, ch->x_rows), bfree(w, ch->y_rows), bfree(w, ch->a), bfree(w, ch->b);
        bfree(w, ch->h), bfree(w, ch->dy), bfree(w, ch->da), bfree(w, ch->db);
      }
      bfree(w, y->probs), bfree(w, y->expert), bfree(w, y->gate), bfree(w, y->stats);
      bfree(w, y->dlogits);
      free(y->stats_host), mfree(w, y->gate_host), free(y->expert_host);
      free(y->slot);
      free(y->chunk);
    }
  if (w->act) {
    if (w->device) bfree(w, w->act);
    else moecclMemFree(w->act);
  }
  free(w->layer);
  float* all[] = {w->grad, w->grad_next, w->tok, w->dgate, w->dlogits, w->dy_rows[0],
                  w->dx_rows[0], w->da, w->db, w->dh, w->dy_rows[1], w->dx_rows[1]};
  for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++) bfree(w, all[i]);
  memset(w, 0, sizeof(*w));
}

int dws_alloc(dws_t* w, const moe_config_t* c, const dist_t* ds, int chunks, int layers,
              int split_w) {
  memset(w, 0, sizeof(*w));
  size_t n = ds->maxn, H = c->hidden, F = c->ffn, E = c->experts, K = c->topk;
  /* A rank receives at most one row per (token of a chunk of its EP group,
   * local expert chosen), at most min(K, E/P) per token; a rank's chunk has
   * at most ceil(maxn / chunks) tokens. */
  size_t per = K < (size_t)ds->nlocal ? K : (size_t)ds->nlocal;
  const moe_backend_ops_t* mem = ds->be;
  w->mem = mem;
  w->device = ds->device;
  w->chunks = chunks;
  w->layers = layers;
  w->split_w = split_w;
  w->rows_cap = n;
  w->cap = (size_t)ds->P * ((ds->maxn + chunks - 1) / chunks) * per;
  int failed = 0;
  w->act = act_alloc(w, n * H * (layers + 1), &failed);
  w->layer = calloc(layers, sizeof(*w->layer));
  failed |= w->layer == NULL;
  for (int l = 0; !failed && l < layers; l++) {
    dlayer_t* y = &w->layer[l];
    y->probs = balloc(mem, n * E, &failed);
    y->expert = (int32_t*)balloc(mem, n * K + 1, &failed);
    y->expert_host = (int32_t*)falloc(n * K + 1, &failed);
    y->gate = balloc(mem, n * K, &failed);
    y->gate_host = mirror(w, y->gate, n * K, &failed);
    if (ds->place) {
      y->slot = calloc(n * K + 1, sizeof(int32_t));
      failed |= y->slot == NULL;
    }
    y->stats = balloc(mem, MOE_STATS_LEN(E), &failed);
    y->stats_host = falloc(MOE_STATS_LEN(E), &failed);
    if (split_w) y->dlogits = balloc(mem, n * E, &failed);
    y->chunk = calloc(chunks, sizeof(dchunk_t));
    failed |= !y->chunk;
    for (int k = 0; !failed && k < chunks; k++) {
      dchunk_t* ch = &y->chunk[k];
      ch->recv = calloc(ds->nlocal, sizeof(size_t));
      ch->counts = calloc(ds->nlocal, sizeof(int));
      failed |= !ch->recv || !ch->counts;
      ch->x_rows = balloc(mem, w->cap * H, &failed);
      ch->y_rows = balloc(mem, w->cap * H, &failed);
      ch->a = balloc(mem, w->cap * F, &failed);
      ch->b = balloc(mem, w->cap * F, &failed);
      ch->h = balloc(mem, w->cap * F, &failed);
      if (split_w) {
        ch->dy = balloc(mem, w->cap * H, &failed);
        ch->da = balloc(mem, w->cap * F, &failed);
        ch->db = balloc(mem, w->cap * F, &failed);
      }
    }
  }
  w->grad = balloc(mem, n * H, &failed);
  w->grad_next = balloc(mem, n * H, &failed);
  w->tok = balloc(mem, n * H, &failed);
  w->dgate = balloc(mem, n * K, &failed);
  w->dlogits = balloc(mem, n * E, &failed);
  for (int i = 0; i < (chunks > 1 ? 2 : 1); i++) {
    w->dy_rows[i] = balloc(mem, w->cap * H, &failed);
    w->dx_rows[i] = balloc(mem, w->cap * H, &failed);
  }
  w->da = balloc(mem, w->cap * F, &failed);
  w->db = balloc(mem, w->cap * F, &failed);
  w->dh = balloc(mem, w->cap * F, &failed);
  return failed ? -1 : 0;
}

int dws_plans(dws_t* w, const moe_config_t* c, const dist_t* ds) {
  if (ds->place) return 0; /* made at the layout, with the layer's placement */
  for (int l = 0; l < w->layers; l++)
    for (int k = 0; k < w->chunks; k++)
      CK(ds, ds->ep, moecclMoePlanCreate(&w->layer[l].chunk[k].plan, c->experts, NULL, ds->ep));
  return 0;
}

float* act_of(const dws_t* w, size_t H, int i) {
  return w->act + (size_t)i * w->rows_cap * H;
}

/* A host mirror of backend memory: copied down when apart. */
static void down(const moe_backend_ops_t* be, void* host, const void* dev, size_t bytes) {
  if (host != dev) be->to_host(host, dev, bytes);
}

/* The router's outputs moeccl and the host read: the local statistics, the
 * ids (the layout's), the gate weights (combine's). */
static void router_down(const moe_backend_ops_t* be, const moe_config_t* c, dlayer_t* y, int n) {
  size_t nk = (size_t)n * c->topk;
  be->to_host(y->stats_host, y->stats, MOE_STATS_LEN(c->experts) * sizeof(float));
  be->to_host(y->expert_host, y->expert, nk * sizeof(int32_t));
  down(be, y->gate_host, y->gate, nk * sizeof(float));
}

/* Time in the EP exchanges of the backward: the call (NULL stream) or the
 * wait for the stream. */
#define BEXCH(tm, stmt)                                                                            \
  do {                                                                                             \
    double bx0_ = train_now();                                                                     \
    stmt;                                                                                          \
    (tm)->bexch += train_now() - bx0_;                                                             \
  } while (0)

/* --- a chunk's layout ------------------------------------------------------ */

/* A chunk's layout of layer l: its plan (made again when the layer's
 * placement changed), the router's choices as slots of the placement, the
 * rows each local expert receives. */
static int chunk_layout(const moe_config_t* c, const dist_t* ds, dws_t* w, dlayer_t* y,
                        dchunk_t* ch, int l) {
  size_t K = c->topk;
  const int32_t* ids = y->expert_host + ch->t0 * K;
  if (ds->place) {
    const placement_t* pl = &ds->place[l];
    if (!ch->plan || ch->plan_layer != l || ch->plan_ver != ds->place_ver[l]) {
      if (ch->plan) moecclMoePlanDestroy(ch->plan);
      ch->plan = NULL;
      CK(ds, ds->ep, moecclMoePlanCreate(&ch->plan, pl->slots, pl->slot_rank, ds->ep));
      ch->plan_layer = l, ch->plan_ver = ds->place_ver[l];
    }
    placement_route(pl, ids, ch->t, c->topk, w->g0 + ch->t0, y->slot + ch->t0 * K);
    ids = y->slot + ch->t0 * K;
  }
  CK(ds, ds->ep, moecclMoeLayout(ch->plan, ids, ch->t, c->topk, 0, ch->recv, NULL));
  ch->rows = 0;
  for (int i = 0; i < ds->nlocal; i++) ch->counts[i] = (int)ch->recv[i], ch->rows += ch->recv[i];
  w->rows += ch->rows;
  if (ch->rows > w->cap) {
    fprintf(stderr, "moe_train: rank %d: %zu expert rows, room for %zu\n", ds->rank, ch->rows,
            w->cap);
    return -1;
  }
  return 0;
}

/* --- chunks on a device: the exchanges on the communication stream ------- *
 *
 * The exchanges are queued on the backend's communication stream and the
 * experts on its compute stream, ordered by events, the host waiting for
 * neither (it only queues):
 *
 *   communication:  X0 X1 [E0] Y0 X2 [E1] Y1 X3 [E2] Y2 ...
 *   compute:        [X0] E0 [X1] E1 [X2] E2 ...
 *
 * X is what brings a chunk's rows to the experts (the dispatch; in the
 * backward the combine's backward), E the experts, Y what takes their rows
 * back (the combine; the dispatch's backward); [A] waits for A.  Chunk k's
 * experts overlap chunk k+1's X and chunk k-1's Y.  Event EV_IN marks the
 * communication after each X, EV_OUT the compute after each E.  The
 * buffers two chunks share (the backward's alternating row gradients) are
 * safe: chunk k+2's X follows [Ek+1], and chunk k+2's E follows Yk. */
enum { EV_IN, EV_OUT };

/* The communication waits for the compute queued so far. */
static void comm_after_compute(const moe_backend_ops_t* be) {
  be->event_record(EV_OUT, 0);
  be->event_wait(EV_OUT, 1);
}

/* The compute waits for the communication queued so far. */
static void compute_after_comm(const moe_backend_ops_t* be) {
  be->event_record(EV_IN, 1);
  be->event_wait(EV_IN, 0);
}

static int fwd_chunks_events(const moe_backend_ops_t* be, const moe_config_t* c,
                             const dist_t* ds, dws_t* w, dlayer_t* y, int l,
                             const moe_layer_params_t* wl, const float* xin) {
  size_t H = c->hidden, K = c->topk;
  int C = w->chunks;
  moecclStream_t st = be->comm_stream();
  comm_after_compute(be); /* xin, and the last uses of the rows' buffers */
  for (int k = 0; k < C; k++) {
    dchunk_t* ch = &y->chunk[k];
    if (k == 0) {
      CK(ds, ds->ep, moecclMoeDispatch(ch->plan, qptr(ds, xin + ch->t0 * H), qptr(ds, ch->x_rows),
                                       w->cap, H, moecclFloat32, st));
      compute_after_comm(be);
    }
    if (k + 1 < C) {
      dchunk_t* nx = &y->chunk[k + 1];
      CK(ds, ds->ep, moecclMoeDispatch(nx->plan, qptr(ds, xin + nx->t0 * H), qptr(ds, nx->x_rows),
                                       w->cap, H, moecclFloat32, st));
      be->event_record(EV_IN, 1);
    }
    experts_fwd(be, c, ds, l, wl, ch);
    comm_after_compute(be);
    CK(ds, ds->ep, moecclMoeCombine(ch->plan, qptr(ds, ch->y_rows), w->cap,
                                    y->gate_host + ch->t0 * K, qptr(ds, w->tok + ch->t0 * H), H,
                                    moecclFloat32, st));
    if (k + 1 < C) be->event_wait(EV_IN, 0);
  }
  compute_after_comm(be); /* the residual reads the combine's tokens */
  return 0;
}

/* The chunks on the host stream (--chunks > 1; the NULL stream with one
 * chunk): chunk k's experts between chunk k+1's dispatch and chunk k-1's
 * combine, the stream's order D0 D1 C0 D2 C1 ... the same on every rank;
 * t1: when the layouts began (charged to dispatch). */
static int fwd_chunks_host(const moe_backend_ops_t* be, const moe_config_t* c, const dist_t* ds,
                           dws_t* w, dlayer_t* y, int l, const moe_layer_params_t* wl,
                           const float* xin, double t1, step_timing_t* tm) {
  size_t H = c->hidden, K = c->topk;
  moecclStream_t st = w->chunks > 1 ? ds->stream : NULL;
  dchunk_t* ch0 = &y->chunk[0];
  CK(ds, ds->ep, moecclMoeDispatch(ch0->plan, cptr(ds, xin + ch0->t0 * H), cptr(ds, ch0->x_rows),
                                   w->cap, H, moecclFloat32, st));
  if (st) CK(ds, ds->ep, moecclHostStreamSynchronize(st));
  tm->dispatch += train_now() - t1;
  for (int k = 0; k < w->chunks; k++) {
    dchunk_t* ch = &y->chunk[k];
    double t2 = train_now();
    if (k > 0) {
      dchunk_t* pr = &y->chunk[k - 1];
      CK(ds, ds->ep, moecclMoeCombine(pr->plan, cptr(ds, pr->y_rows), w->cap,
                                      y->gate_host + pr->t0 * K, cptr(ds, w->tok + pr->t0 * H),
                                      H, moecclFloat32, st));
    }
    if (k + 1 < w->chunks) {
      dchunk_t* nx = &y->chunk[k + 1];
      CK(ds, ds->ep, moecclMoeDispatch(nx->plan, cptr(ds, xin + nx->t0 * H),
                                       cptr(ds, nx->x_rows), w->cap, H, moecclFloat32, st));
    }
    experts_fwd(be, c, ds, l, wl, ch);
    double t3 = train_now();
    if (st) CK(ds, ds->ep, moecclHostStreamSynchronize(st));
    tm->experts += t3 - t2;
    tm->dispatch += train_now() - t3; /* the part of the exchanges not hidden */
  }
  dchunk_t* last = &y->chunk[w->chunks - 1];
  double t3 = train_now();
  CK(ds, ds->ep, moecclMoeCombine(last->plan, cptr(ds, last->y_rows), w->cap,
                                  y->gate_host + last->t0 * K, cptr(ds, w->tok + last->t0 * H),
                                  H, moecclFloat32, st));
  if (st) CK(ds, ds->ep, moecclHostStreamSynchronize(st));
  tm->combine += train_now() - t3;
  return 0;
}

/* The micro-batch's configuration: its load-balancing loss weighs N_m / N. */
static moe_config_t mb_config(const moe_config_t* c, double auxw) {
  moe_config_t m = *c;
  m.aux = (float)(c->aux * auxw);
  return m;
}

int piece_forward(const moe_backend_ops_t* be, const moe_config_t* c, const dist_t* ds,
                  const moe_params_t* p, dws_t* w, int l0, int l1, int n, double auxw,
                  double* aux, step_timing_t* tm) {
  size_t H = c->hidden;
  int E = c->experts;
  moe_config_t cm = mb_config(c, auxw);
  w->l0 = l0, w->l1 = l1, w->n = n, w->auxw = auxw;
  for (int l = l0; l < l1; l++) {
    const moe_layer_params_t* wl = &p->layer[l];
    dlayer_t* y = &w->layer[l - l0];
    const float* xin = act_of(w, H, l - l0);
    float* out = act_of(w, H, l - l0 + 1);
    double t0 = train_now();
    be->zero(MOE_STATS_LEN(E), y->stats);
    moe_router_forward(be, c, wl->wg, xin, n, y->probs, y->expert, y->gate, y->stats);
    router_down(be, c, y, n);
    CK(ds, ds->stage, moecclAllReduce(y->stats_host, y->stats_host, MOE_STATS_LEN(E),
                                      moecclFloat32, moecclSum, ds->stage, NULL));
    if (ds->load)
      for (int e = 0; e < E; e++) ds->load[(size_t)l * E + e] += y->stats_host[e];
    tm->router += train_now() - t0;
    /* Each chunk has its own plan (the backward finds it again); the
     * chunks' exchanges go on the host stream (fwd_chunks_host) or, on a
     * device, on the backend's communication stream (fwd_chunks_events). */
    double t1 = train_now();
    for (int k = 0; k < w->chunks; k++) {
      dchunk_t* ch = &y->chunk[k];
      ch->t0 = row_start(k, w->chunks, n);
      ch->t = row_start(k + 1, w->chunks, n) - ch->t0;
      if (chunk_layout(c, ds, w, y, ch, l)) return -1;
    }
    if (w->chunks > 1 && dist_events(ds)) { /* one span: nothing waits in it */
      double t2 = train_now();
      tm->dispatch += t2 - t1;
      if (fwd_chunks_events(be, c, ds, w, y, l, wl, xin)) return -1;
      tm->experts += train_now() - t2;
    } else if (fwd_chunks_host(be, c, ds, w, y, l, wl, xin, t1, tm)) {
      return -1;
    }
    double t4 = train_now();
    be->add((size_t)n * H, xin, w->tok, out);
    tm->combine += train_now() - t4;
    *aux += moe_stats_aux_loss(&cm, y->stats_host);
  }
  return 0;
}

/* moecclMoeCombineBackward of chunk ch: the forward's expert rows and the
 * gate gradients where the rows are (on a device the call stays on the
 * stream); queued: ordered by events (qptr), else cptr's wait. */
static moecclResult_t combine_bwd(const moe_config_t* c, const dist_t* ds, dws_t* w, dlayer_t* y,
                                  dchunk_t* ch, float* dy, moecclStream_t st, int queued) {
  size_t H = c->hidden, K = c->topk;
  void* (*at)(const dist_t*, const void*) = queued ? qptr : cptr;
  return moecclMoeCombineBackward(ch->plan, at(ds, w->grad + ch->t0 * H),
                                  y->gate_host + ch->t0 * K, at(ds, ch->y_rows), at(ds, dy),
                                  w->cap, at(ds, w->dgate + ch->t0 * K), H, moecclFloat32, st);
}

/* The backward's chunks on a device, as fwd_chunks_events: X the combine's
 * backward, Y the dispatch's backward. */
static int bwd_chunks_events(const moe_backend_ops_t* be, const moe_config_t* c,
                             const dist_t* ds, dws_t* w, dlayer_t* y, int l,
                             const moe_layer_params_t* wl, moe_layer_params_t* gl) {
  size_t H = c->hidden;
  int C = w->chunks;
  moecclStream_t st = be->comm_stream();
#define DY(ch, k) ((ch)->dy ? (ch)->dy : w->dy_rows[(k) % 2])
  comm_after_compute(be); /* the output's gradient */
  for (int k = 0; k < C; k++) {
    dchunk_t* ch = &y->chunk[k];
    if (k == 0) {
      CK(ds, ds->ep, combine_bwd(c, ds, w, y, ch, DY(ch, 0), st, 1));
      compute_after_comm(be);
    }
    if (k + 1 < C) {
      dchunk_t* nx = &y->chunk[k + 1];
      CK(ds, ds->ep, combine_bwd(c, ds, w, y, nx, DY(nx, k + 1), st, 1));
      be->event_record(EV_IN, 1);
    }
    float *da = ch->da ? ch->da : w->da, *db = ch->db ? ch->db : w->db;
    experts_bwd_in(be, c, ds, l, wl, ch, DY(ch, k), w->dx_rows[k % 2], da, db, w->dh);
    if (!w->split_w) experts_bwd_w(be, c, ds, l, ch, DY(ch, k), da, db, gl);
    comm_after_compute(be);
    CK(ds, ds->ep, moecclMoeDispatchBackward(ch->plan, qptr(ds, w->dx_rows[k % 2]), w->cap,
                                             qptr(ds, w->tok + ch->t0 * H), H, moecclFloat32,
                                             st));
    if (k + 1 < C) be->event_wait(EV_IN, 0);
  }
#undef DY
  compute_after_comm(be); /* the residual and the router read what they wrote */
  return 0;
}

int piece_backward(const moe_backend_ops_t* be, const moe_config_t* c, const dist_t* ds,
                   const moe_params_t* p, dws_t* w, moe_params_t* g, step_timing_t* tm) {
  size_t n = w->n, H = c->hidden;
  moe_config_t cm = mb_config(c, w->auxw);
  double t0 = train_now();
  for (int l = w->l1 - 1; l >= w->l0; l--) {
    const moe_layer_params_t* wl = &p->layer[l];
    moe_layer_params_t* gl = &g->layer[l];
    dlayer_t* y = &w->layer[l - w->l0];
    const float* xin = act_of(w, H, l - w->l0);
    /* The forward's pipeline mirrored: chunk k's experts' backward runs
     * while chunk k+1's combine-backward (a dispatch) and chunk k-1's
     * dispatch-backward (a combine) are on the wire; the row gradients
     * alternate between two buffers (or, split_w, stay in the chunk's own
     * for the weight half). */
    int C = w->chunks;
    moecclStream_t st = C > 1 ? ds->stream : NULL;
    if (C > 1 && dist_events(ds)) { /* one span: its exchanges are not told apart */
      if (bwd_chunks_events(be, c, ds, w, y, l, wl, gl)) return -1;
      goto residual;
    }
#define DY(ch, k) ((ch)->dy ? (ch)->dy : w->dy_rows[(k) % 2])
    dchunk_t* ch0 = &y->chunk[0];
    BEXCH(tm, CK(ds, ds->ep, combine_bwd(c, ds, w, y, ch0, DY(ch0, 0), st, 0)));
    if (st) BEXCH(tm, CK(ds, ds->ep, moecclHostStreamSynchronize(st)));
    for (int k = 0; k < C; k++) {
      dchunk_t* ch = &y->chunk[k];
      if (k > 0) {
        dchunk_t* pr = &y->chunk[k - 1];
        CK(ds, ds->ep, moecclMoeDispatchBackward(pr->plan, cptr(ds, w->dx_rows[(k - 1) % 2]),
                                                 w->cap, cptr(ds, w->tok + pr->t0 * H), H,
                                                 moecclFloat32, st));
      }
      if (k + 1 < C) {
        dchunk_t* nx = &y->chunk[k + 1];
        CK(ds, ds->ep, combine_bwd(c, ds, w, y, nx, DY(nx, k + 1), st, 0));
      }
      float *da = ch->da ? ch->da : w->da, *db = ch->db ? ch->db : w->db;
      experts_bwd_in(be, c, ds, l, wl, ch, DY(ch, k), w->dx_rows[k % 2], da, db, w->dh);
      if (!w->split_w) experts_bwd_w(be, c, ds, l, ch, DY(ch, k), da, db, gl);
      if (st) BEXCH(tm, CK(ds, ds->ep, moecclHostStreamSynchronize(st)));
    }
#undef DY
    dchunk_t* last = &y->chunk[C - 1];
    BEXCH(tm, CK(ds, ds->ep,
                 moecclMoeDispatchBackward(last->plan, cptr(ds, w->dx_rows[(C - 1) % 2]), w->cap,
                                           cptr(ds, w->tok + last->t0 * H), H, moecclFloat32,
                                           st)));
    if (st) BEXCH(tm, CK(ds, ds->ep, moecclHostStreamSynchronize(st)));
  residual:
    be->add(n * H, w->grad, w->tok, w->grad_next); /* residual */
    float* dlogits = y->dlogits ? y->dlogits : w->dlogits;
    moe_router_backward_input(be, &cm, wl->wg, (int)n, y->probs, y->expert, y->gate, w->dgate,
                              y->stats_host, dlogits, w->grad_next);
    if (!w->split_w) moe_router_backward_weight(be, c, xin, (int)n, dlogits, gl->wg);
    float* swap = w->grad;
    w->grad = w->grad_next;
    w->grad_next = swap;
  }
  tm->backward += train_now() - t0;
  return 0;
}

void piece_weights(const moe_backend_ops_t* be, const moe_config_t* c, const dist_t* ds,
                   dws_t* w, moe_params_t* g, step_timing_t* tm) {
  size_t H = c->hidden;
  double t0 = train_now();
  for (int l = w->l1 - 1; l >= w->l0; l--) {
    moe_layer_params_t* gl = &g->layer[l];
    dlayer_t* y = &w->layer[l - w->l0];
    for (int k = 0; k < w->chunks; k++) {
      dchunk_t* ch = &y->chunk[k];
      experts_bwd_w(be, c, ds, l, ch, ch->dy, ch->da, ch->db, gl);
    }
    moe_router_backward_weight(be, c, act_of(w, H, l - w->l0), w->n, y->dlogits, gl->wg);
  }
  tm->backward += train_now() - t0;
}

/* --- a forward and a backward of two micro-batches, overlapped ---------------- */

/* Waits for the stream; the wait is the communication not hidden. */
#define WAIT(tm, field)                                                                            \
  do {                                                                                             \
    double w0_ = train_now();                                                                      \
    CK(ds, ds->ep, moecclHostStreamSynchronize(st));                                               \
    (tm)->field += train_now() - w0_;                                                              \
  } while (0)

/* The router of forward layer i of wf, its statistics' sum queued on st. */
static int fused_router(const moe_backend_ops_t* be, const moe_config_t* c, const dist_t* ds,
                        const moe_params_t* p, dws_t* wf, int i, moecclStream_t st,
                        step_timing_t* tm) {
  size_t H = c->hidden;
  dlayer_t* y = &wf->layer[i];
  double t0 = train_now();
  be->zero(MOE_STATS_LEN(c->experts), y->stats);
  moe_router_forward(be, c, p->layer[wf->l0 + i].wg, act_of(wf, H, i), wf->n, y->probs, y->expert,
                     y->gate, y->stats);
  router_down(be, c, y, wf->n);
  CK(ds, ds->stage, moecclAllReduce(y->stats_host, y->stats_host, MOE_STATS_LEN(c->experts),
                                    moecclFloat32, moecclSum, ds->stage, st));
  tm->router += train_now() - t0;
  return 0;
}

/* Layer i's layout (the stream idle: the layout is synchronous). */
static int fused_layout(const moe_config_t* c, const dist_t* ds, dws_t* wf, int i) {
  dlayer_t* y = &wf->layer[i];
  if (ds->load) /* the statistics are summed now */
    for (int e = 0; e < c->experts; e++)
      ds->load[(size_t)(wf->l0 + i) * c->experts + e] += y->stats_host[e];
  dchunk_t* ch = &y->chunk[0];
  ch->t0 = 0, ch->t = wf->n;
  return chunk_layout(c, ds, wf, y, ch, wf->l0 + i);
}

int pieces_fused(const moe_backend_ops_t* be, const moe_config_t* c, const dist_t* ds,
                 const moe_params_t* p, dws_t* wf, int l0, int l1, int n, double auxw,
                 double* aux, dws_t* wb, moe_params_t* g, step_timing_t* tm) {
  size_t H = c->hidden;
  moecclStream_t st = ds->stream;
  moe_config_t cf = mb_config(c, auxw), cb = mb_config(c, wb->auxw);
  int nl = l1 - l0;
  if (wf->chunks != 1 || wb->chunks != 1 || wb->l1 - wb->l0 != nl || !st) {
    fprintf(stderr, "moe_train: rank %d: overlapped pieces need one chunk, equal pieces and a "
            "stream\n", ds->rank);
    return -1;
  }
  wf->l0 = l0, wf->l1 = l1, wf->n = n, wf->auxw = auxw;
  /* B's first exchange under F's first router */
  int bl = wb->l1 - 1;
  {
    dlayer_t* y = &wb->layer[bl - wb->l0];
    dchunk_t* ch = &y->chunk[0];
    CK(ds, ds->ep, combine_bwd(c, ds, wb, y, ch, ch->dy ? ch->dy : wb->dy_rows[0], st, 0));
  }
  if (fused_router(be, c, ds, p, wf, 0, st, tm)) return -1;
  WAIT(tm, bexch);
  if (fused_layout(c, ds, wf, 0)) return -1;
  for (int k = 0; k < nl; k++, bl--) {
    const moe_layer_params_t *fl = &p->layer[l0 + k], *wl = &p->layer[bl];
    moe_layer_params_t* gl = &g->layer[bl];
    dlayer_t *yf = &wf->layer[k], *yb = &wb->layer[bl - wb->l0];
    dchunk_t *cf0 = &yf->chunk[0], *cb0 = &yb->chunk[0];
    float* dy = cb0->dy ? cb0->dy : wb->dy_rows[0];
    float *da = cb0->da ? cb0->da : wb->da, *db = cb0->db ? cb0->db : wb->db;
    const float* xin = act_of(wf, H, k);
    /* A: F's dispatch under B's experts */
    CK(ds, ds->ep, moecclMoeDispatch(cf0->plan, cptr(ds, xin), cptr(ds, cf0->x_rows), wf->cap, H,
                                     moecclFloat32, st));
    double t0 = train_now();
    experts_bwd_in(be, c, ds, bl, wl, cb0, dy, wb->dx_rows[0], da, db, wb->dh);
    if (!wb->split_w) experts_bwd_w(be, c, ds, bl, cb0, dy, da, db, gl);
    tm->backward += train_now() - t0;
    WAIT(tm, dispatch);
    /* B: B's dispatch-backward under F's experts */
    CK(ds, ds->ep, moecclMoeDispatchBackward(cb0->plan, cptr(ds, wb->dx_rows[0]), wb->cap,
                                             cptr(ds, wb->tok), H, moecclFloat32, st));
    t0 = train_now();
    experts_fwd(be, c, ds, l0 + k, fl, cf0);
    tm->experts += train_now() - t0;
    WAIT(tm, bexch);
    /* C: F's combine under B's router */
    CK(ds, ds->ep, moecclMoeCombine(cf0->plan, cptr(ds, cf0->y_rows), wf->cap, yf->gate_host,
                                    cptr(ds, wf->tok), H, moecclFloat32, st));
    t0 = train_now();
    size_t nb = wb->n;
    be->add(nb * H, wb->grad, wb->tok, wb->grad_next);
    float* dlogits = yb->dlogits ? yb->dlogits : wb->dlogits;
    moe_router_backward_input(be, &cb, wl->wg, (int)nb, yb->probs, yb->expert, yb->gate,
                              wb->dgate, yb->stats_host, dlogits, wb->grad_next);
    if (!wb->split_w)
      moe_router_backward_weight(be, c, act_of(wb, H, bl - wb->l0), (int)nb, dlogits, gl->wg);
    float* swap = wb->grad;
    wb->grad = wb->grad_next;
    wb->grad_next = swap;
    tm->backward += train_now() - t0;
    WAIT(tm, combine);
    /* D: B's next combine-backward under F's residual and next router */
    if (k + 1 < nl) {
      dlayer_t* yn = &wb->layer[bl - 1 - wb->l0];
      dchunk_t* cn = &yn->chunk[0];
      CK(ds, ds->ep, combine_bwd(c, ds, wb, yn, cn, cn->dy ? cn->dy : wb->dy_rows[0], st, 0));
    }
    t0 = train_now();
    float* out = act_of(wf, H, k + 1);
    be->add((size_t)n * H, xin, wf->tok, out);
    *aux += moe_stats_aux_loss(&cf, yf->stats_host);
    tm->combine += train_now() - t0;
    if (k + 1 < nl) {
      if (fused_router(be, c, ds, p, wf, k + 1, st, tm)) return -1;
      WAIT(tm, bexch);
      if (fused_layout(c, ds, wf, k + 1)) return -1;
    }
  }
  return 0;
}
