/* moe_train's pipeline: a stage walks its list of the schedule's ops for the
 * micro-batches of one step.  Forwards and backwards of its pieces go
 * through train_layer.c; the activations and their gradients cross stage
 * boundaries with moecclSend/moecclRecv, each of the schedule's groups one
 * moecclGroupStart/End on the pipeline communicator (NULL stream, host
 * memory: the group returns when its transfers are done, the rendezvous the
 * schedule was checked against).  A piece that follows another on the same
 * stage (one stage with virtual stages) takes its input by a copy. */
#define _GNU_SOURCE
#include "train_pipe.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The virtual stage of an op of this stage, and its layers. */
static int vstage(const pipe_t* pp, const dist_t* ds, int chunk) {
  (void)pp;
  return chunk * ds->S + ds->s;
}

int pipe_init(pipe_t* pp, const train_options_t* o, const dist_t* ds) {
  memset(pp, 0, sizeof(*pp));
  char err[256];
  if (pp_sched_build(&pp->sc, o->schedule, ds->S, ds->V, ds->M, err, sizeof(err)) ||
      pp_sched_check(&pp->sc, &pp->check, err, sizeof(err))) {
    fprintf(stderr, "moe_train: rank %d: schedule: %s\n", ds->rank, err);
    return -1;
  }
  pp->s = ds->s;
  pp->nops = pp->sc.nops[ds->s];
  pp->ops = pp->sc.ops[ds->s];
  pp->chunks = o->chunks;
  pp->tokens = o->tokens;
  pp->overlap = o->overlap;
  for (int j = ds->s; j < ds->S * ds->V; j += ds->S) {
    int nl = ds->layer_start[j + 1] - ds->layer_start[j];
    if (nl > pp->maxl) pp->maxl = nl;
  }
  pp->last = calloc(pp->nops + 1, sizeof(int));
  pp->ev = calloc(2 * (size_t)pp->nops + 1, sizeof(double));
  pp->slot = calloc((size_t)ds->M * ds->V + 1, sizeof(*pp->slot));
  if (!pp->last || !pp->ev || !pp->slot) {
    fprintf(stderr, "moe_train: rank %d: out of memory\n", ds->rank);
    return -1;
  }
  /* An op is the last of its (mb, chunk) when no later op names it. */
  for (int i = 0; i < pp->nops; i++) {
    pp->last[i] = 1;
    for (int k = i + 1; k < pp->nops && pp->last[i]; k++)
      if (pp->ops[k].mb == pp->ops[i].mb && pp->ops[k].chunk == pp->ops[i].chunk)
        pp->last[i] = 0;
  }
  return 0;
}

void pipe_free(pipe_t* pp) {
  for (int i = 0; i < pp->nslots; i++) {
    dws_free(&pp->slot[i]->w);
    free(pp->slot[i]);
  }
  free(pp->slot), free(pp->last), free(pp->ev);
  pp_sched_free(&pp->sc);
  memset(pp, 0, sizeof(*pp));
}

void pipe_stats_reset(pipe_t* pp) {
  memset(&pp->st, 0, sizeof(pp->st));
}

static pipe_slot_t* find_slot(pipe_t* pp, int mb, int chunk) {
  for (int i = 0; i < pp->nslots; i++)
    if (pp->slot[i]->used && pp->slot[i]->mb == mb && pp->slot[i]->chunk == chunk)
      return pp->slot[i];
  return NULL;
}

/* The slot of (mb, chunk), taken now if it has none (a free one, or new
 * buffers the first time the schedule holds that many). */
static pipe_slot_t* get_slot(pipe_t* pp, const moe_config_t* c, const dist_t* ds, int mb,
                             int chunk) {
  pipe_slot_t* sl = find_slot(pp, mb, chunk);
  for (int i = 0; !sl && i < pp->nslots; i++)
    if (!pp->slot[i]->used) sl = pp->slot[i];
  if (!sl) {
    if (pp->nslots >= ds->M * ds->V) return NULL; /* the schedule names too many */
    sl = calloc(1, sizeof(*sl));
    if (!sl) return NULL;
    pp->slot[pp->nslots++] = sl;
    if (dws_alloc(&sl->w, c, ds, pp->chunks, pp->maxl, pp->sc.split_w) ||
        dws_plans(&sl->w, c, ds)) {
      fprintf(stderr, "moe_train: rank %d: no memory for the activations of %d micro-batches\n",
              ds->rank, pp->nslots);
      return NULL;
    }
  }
  if (!sl->used) {
    sl->used = 1, sl->mb = mb, sl->chunk = chunk;
    int held = 0;
    for (int i = 0; i < pp->nslots; i++) held += pp->slot[i]->used;
    if (held > pp->peak) pp->peak = held;
  }
  return sl;
}

static pipe_slot_t* need_slot(pipe_t* pp, const dist_t* ds, const pp_op_t* op) {
  pipe_slot_t* sl = find_slot(pp, op->mb, op->chunk);
  if (!sl)
    fprintf(stderr, "moe_train: rank %d: schedule op %d on micro-batch %d, chunk %d before its "
            "forward\n", ds->rank, (int)(op - pp->ops), op->mb, op->chunk);
  return sl;
}

/* Before a forward of (mb, chunk): its slot, and the input of virtual
 * stage 0.  Its layers and rows in *l0, *l1, *n, its loss weight *auxw. */
static pipe_slot_t* fwd_pre(pipe_t* pp, const moe_backend_ops_t* be, const moe_config_t* c,
                            const dist_t* ds, const pp_op_t* op, const float* x, int* l0,
                            int* l1, int* n, double* auxw) {
  size_t H = c->hidden;
  int j = vstage(pp, ds, op->chunk), m = op->mb;
  pipe_slot_t* sl = get_slot(pp, c, ds, m, op->chunk);
  if (!sl) return NULL;
  *n = ds->mb_n[m];
  sl->w.g0 = ds->mb_g0[m];
  sl->w.rows = 0;
  if (j == 0)
    be->copy((size_t)*n * H, x + (size_t)ds->mb_off[m] * H, act_of(&sl->w, H, 0));
  int gm0 = row_start(m, ds->M, pp->tokens), gm1 = row_start(m + 1, ds->M, pp->tokens);
  *auxw = (double)(gm1 - gm0) / pp->tokens;
  *l0 = ds->layer_start[j], *l1 = ds->layer_start[j + 1];
  return sl;
}

/* After it: the last virtual stage adds the micro-batch's loss terms; a
 * piece followed by another on this stage hands it its input. */
static int fwd_post(pipe_t* pp, const moe_backend_ops_t* be, const moe_config_t* c,
                    const dist_t* ds, const pp_op_t* op, pipe_slot_t* sl, const float* x,
                    const float* target, float* out, double* sums) {
  size_t H = c->hidden;
  int j = vstage(pp, ds, op->chunk), nv = ds->S * ds->V, m = op->mb;
  size_t n = ds->mb_n[m], off = (size_t)ds->mb_off[m] * H;
  const float* y = act_of(&sl->w, H, sl->w.l1 - sl->w.l0);
  pp->rows += sl->w.rows;
  if (j == nv - 1) {
    const float *t = target + off, *xi = x + off;
    sums[0] += be->sq_dist(n * H, y, t);
    sums[2] += be->sq_dist(n * H, xi, t);
    sums[1] += (double)n;
    be->copy(n * H, y, out + off);
  } else if (ds->S == 1) { /* the next piece is on this stage too */
    pipe_slot_t* nx = get_slot(pp, c, ds, m, op->chunk + 1);
    if (!nx) return -1;
    be->copy(n * H, y, act_of(&nx->w, H, 0));
  }
  return 0;
}

/* Before a backward: the last virtual stage starts from the loss. */
static pipe_slot_t* bwd_pre(pipe_t* pp, const moe_backend_ops_t* be, const moe_config_t* c,
                            const dist_t* ds, const pp_op_t* op, const float* target) {
  size_t H = c->hidden;
  int j = vstage(pp, ds, op->chunk), nv = ds->S * ds->V, m = op->mb;
  pipe_slot_t* sl = need_slot(pp, ds, op);
  if (!sl) return NULL;
  size_t n = ds->mb_n[m], off = (size_t)ds->mb_off[m] * H;
  if (j == nv - 1) {
    const float *y = act_of(&sl->w, H, sl->w.l1 - sl->w.l0), *t = target + off;
    float scale = pp->tokens > 0 ? 2.0f / ((float)pp->tokens * (float)H) : 0.0f;
    be->scaled_diff(n * H, scale, y, t, sl->w.grad);
  }
  return sl;
}

/* After it: dL/dx of virtual stage 0, or the piece before on this stage. */
static int bwd_post(pipe_t* pp, const moe_backend_ops_t* be, const moe_config_t* c,
                    const dist_t* ds, const pp_op_t* op, pipe_slot_t* sl, float* grad_x) {
  size_t H = c->hidden;
  int j = vstage(pp, ds, op->chunk), m = op->mb;
  size_t n = ds->mb_n[m], off = (size_t)ds->mb_off[m] * H;
  if (j == 0) {
    be->copy(n * H, sl->w.grad, grad_x + off);
  } else if (ds->S == 1) { /* the piece before is on this stage too */
    pipe_slot_t* pr = find_slot(pp, m, op->chunk - 1);
    if (!pr) return -1;
    be->copy(n * H, sl->w.grad, pr->w.grad);
  }
  return 0;
}

static int run_forward(pipe_t* pp, const moe_backend_ops_t* be, const moe_config_t* c,
                       const dist_t* ds, const moe_params_t* p, const pp_op_t* op, const float* x,
                       const float* target, float* out, double* sums, step_timing_t* tm) {
  int l0, l1, n;
  double auxw;
  pipe_slot_t* sl = fwd_pre(pp, be, c, ds, op, x, &l0, &l1, &n, &auxw);
  if (!sl || piece_forward(be, c, ds, p, &sl->w, l0, l1, n, auxw, &sums[3], tm)) return -1;
  return fwd_post(pp, be, c, ds, op, sl, x, target, out, sums);
}

static int run_backward(pipe_t* pp, const moe_backend_ops_t* be, const moe_config_t* c,
                        const dist_t* ds, const moe_params_t* p, const pp_op_t* op,
                        const float* target, moe_params_t* g, float* grad_x, step_timing_t* tm) {
  pipe_slot_t* sl = bwd_pre(pp, be, c, ds, op, target);
  if (!sl || piece_backward(be, c, ds, p, &sl->w, g, tm)) return -1;
  return bwd_post(pp, be, c, ds, op, sl, grad_x);
}

/* Whether ops i and i + 1, a forward and a backward (either first) of two
 * micro-batches on as many layers, run overlapped (--overlap). */
static int fusable(const pipe_t* pp, const dist_t* ds, int i) {
  if (!pp->overlap || i + 1 >= pp->nops) return 0;
  const pp_op_t *f = &pp->ops[i], *b = &pp->ops[i + 1];
  if (f->kind == PP_B) f = b, b = &pp->ops[i];
  if (f->kind != PP_F || b->kind != PP_B || f->mb == b->mb) return 0;
  int jf = vstage(pp, ds, f->chunk), jb = vstage(pp, ds, b->chunk);
  return ds->layer_start[jf + 1] - ds->layer_start[jf] ==
         ds->layer_start[jb + 1] - ds->layer_start[jb];
}

static int run_fused(pipe_t* pp, const moe_backend_ops_t* be, const moe_config_t* c,
                     const dist_t* ds, const moe_params_t* p, int i, const float* x,
                     const float* target, moe_params_t* g, float* out, float* grad_x,
                     double* sums, step_timing_t* tm) {
  const pp_op_t *f = &pp->ops[i], *b = &pp->ops[i + 1];
  if (f->kind == PP_B) f = b, b = &pp->ops[i];
  int l0, l1, n;
  double auxw;
  pipe_slot_t* sb = bwd_pre(pp, be, c, ds, b, target);
  pipe_slot_t* sf = sb ? fwd_pre(pp, be, c, ds, f, x, &l0, &l1, &n, &auxw) : NULL;
  if (!sf || pieces_fused(be, c, ds, p, &sf->w, l0, l1, n, auxw, &sums[3], &sb->w, g, tm))
    return -1;
  return fwd_post(pp, be, c, ds, f, sf, x, target, out, sums) ||
         bwd_post(pp, be, c, ds, b, sb, grad_x);
}

/* The ops of one group, posted together; returns the index after it. */
static int run_group(pipe_t* pp, const moe_config_t* c, const dist_t* ds, int i, int* failed) {
  size_t H = c->hidden;
  int g = pp->ops[i].group, k = i;
  moecclResult_t r = moecclGroupStart();
  for (; k < pp->nops && pp->ops[k].group == g && pp->ops[k].kind >= PP_SEND_F; k++) {
    const pp_op_t* op = &pp->ops[k];
    pipe_slot_t* sl = op->kind == PP_RECV_F ? get_slot(pp, c, ds, op->mb, op->chunk)
                                            : need_slot(pp, ds, op);
    if (!sl) {
      *failed = 1;
      continue;
    }
    size_t count = (size_t)ds->mb_n[op->mb] * H;
    moecclResult_t q = moecclSuccess;
    switch (op->kind) {
      case PP_SEND_F:
        q = moecclSend(cptr(ds, act_of(&sl->w, H, sl->w.l1 - sl->w.l0)), count, moecclFloat32,
                       op->peer, ds->pp, NULL);
        break;
      case PP_RECV_F:
        q = moecclRecv(cptr(ds, act_of(&sl->w, H, 0)), count, moecclFloat32, op->peer, ds->pp,
                       NULL);
        break;
      case PP_SEND_B:
        q = moecclSend(cptr(ds, sl->w.grad), count, moecclFloat32, op->peer, ds->pp, NULL);
        break;
      case PP_RECV_B:
        q = moecclRecv(cptr(ds, sl->w.grad), count, moecclFloat32, op->peer, ds->pp, NULL);
        break;
    }
    if (q != moecclSuccess && r == moecclSuccess) r = q;
  }
  moecclResult_t e = moecclGroupEnd();
  if (r == moecclSuccess) r = e;
  if (r != moecclSuccess) {
    ccl_fail(ds, ds->pp, "the pipeline's send/receive group", r);
    *failed = 1;
  }
  return k;
}

int pipe_step(pipe_t* pp, const moe_backend_ops_t* be, const moe_config_t* c, const dist_t* ds,
              const moe_params_t* p, const float* x, const float* target, moe_params_t* g,
              float* out, float* grad_x, double sums[4], step_timing_t* tm) {
  be->zero(g->count, g->data);
  pp->rows = 0;
  double aux = 0.0, t0 = train_now();
  sums[0] = sums[1] = sums[2] = sums[3] = 0.0;
  for (int i = 0; i < pp->nops;) {
    const pp_op_t* op = &pp->ops[i];
    double a = train_now();
    int next = i + 1, failed = 0;
    double lsums[4] = {0, 0, 0, 0};
    double x0 = tm->dispatch + tm->combine + tm->bexch;
    int kind = fusable(pp, ds, i) ? -1 : op->kind; /* -1: the pair of ops i, i + 1 */
    switch (kind) {
      case -1:
        failed = run_fused(pp, be, c, ds, p, i, x, target, g, out, grad_x, lsums, tm) != 0;
        pp->st.fused += train_now() - a, pp->st.nfused++;
        pp->st.xfused += tm->dispatch + tm->combine + tm->bexch - x0;
        next = i + 2;
        break;
      case PP_F:
        failed = run_forward(pp, be, c, ds, p, op, x, target, out, lsums, tm) != 0;
        pp->st.f += train_now() - a, pp->st.nf++;
        pp->st.xf += tm->dispatch + tm->combine + tm->bexch - x0;
        break;
      case PP_B:
        failed = run_backward(pp, be, c, ds, p, op, target, g, grad_x, tm) != 0;
        pp->st.b += train_now() - a, pp->st.nb++;
        pp->st.xb += tm->dispatch + tm->combine + tm->bexch - x0;
        break;
      case PP_W: {
        pipe_slot_t* sl = need_slot(pp, ds, op);
        if (!sl) failed = 1;
        else piece_weights(be, c, ds, &sl->w, g, tm);
        pp->st.w += train_now() - a, pp->st.nw++;
        break;
      }
      default:
        next = run_group(pp, c, ds, i, &failed);
        pp->st.comm += train_now() - a;
        break;
    }
    if (failed) return -1;
    for (int k = 0; k < 3; k++) sums[k] += lsums[k];
    aux += lsums[3];
    double b = train_now();
    for (int k = i; k < next; k++) {
      pp->ev[2 * k] = a - t0, pp->ev[2 * k + 1] = b - t0;
      if (pp->last[k]) { /* its (mb, chunk) is done here: the slot is free */
        pipe_slot_t* sl = find_slot(pp, pp->ops[k].mb, pp->ops[k].chunk);
        if (sl) sl->used = 0;
      }
    }
    i = next;
  }
  sums[3] = ds->q == 0 ? aux : 0.0;
  pp->st.step += train_now() - t0;
  pp->st.steps++;
  return 0;
}

static const char* kind_name(int kind) {
  static const char* names[PP_NKINDS] = {"F", "B", "W", "SEND_F", "RECV_F", "SEND_B", "RECV_B"};
  return kind >= 0 && kind < PP_NKINDS ? names[kind] : "?";
}

enum { REP_STEPS, REP_STEP, REP_F, REP_B, REP_W, REP_NF, REP_NB, REP_NW, REP_COMM, REP_PEAK,
       REP_FUSED, REP_NFUSED, REP_XF, REP_XB, REP_XFUSED, REP_N };

/* The last step's ops of every stage, for scripts/pp_timeline.py. */
static int write_timeline(const pipe_t* pp, const train_options_t* o, const dist_t* ds,
                          const double* all, size_t per) {
  FILE* f = fopen(o->timeline, "w");
  if (!f) {
    perror(o->timeline);
    return -1;
  }
  fprintf(f, "{\"schedule\": \"%s\", \"stages\": %d, \"vstages\": %d, \"microbatches\": %d, "
          "\"events\": [", pp_sched_name(pp->sc.id), ds->S, ds->V, ds->M);
  int first = 1;
  for (int s = 0; s < ds->S; s++) {
    const double* ev = all + per * (size_t)(s * ds->Q) + REP_N;
    for (int i = 0; i < pp->sc.nops[s]; i++) {
      const pp_op_t* op = &pp->sc.ops[s][i];
      fprintf(f, "%s\n  {\"stage\": %d, \"kind\": \"%s\", \"mb\": %d, \"chunk\": %d, "
              "\"start\": %.6f, \"end\": %.6f}", first ? "" : ",", s, kind_name(op->kind),
              op->mb, op->chunk, ev[2 * i], ev[2 * i + 1]);
      first = 0;
    }
  }
  fprintf(f, "\n]}\n");
  if (fclose(f)) {
    perror(o->timeline);
    return -1;
  }
  return 0;
}

int pipe_report(pipe_t* pp, const train_options_t* o, const dist_t* ds, FILE* json) {
  if (ds->S == 1 && ds->M == 1 && ds->V == 1 && !o->timeline) return 0; /* no pipeline */
  int maxops = 0;
  for (int s = 0; s < ds->S; s++)
    if (pp->sc.nops[s] > maxops) maxops = pp->sc.nops[s];
  size_t per = REP_N + 2 * (size_t)maxops;
  double* mine = calloc(per, sizeof(double));
  double* all = calloc(per * ds->nranks, sizeof(double));
  if (!mine || !all) {
    free(mine), free(all);
    fprintf(stderr, "moe_train: rank %d: out of memory\n", ds->rank);
    return -1;
  }
  const pipe_stats_t* st = &pp->st;
  double v[REP_N] = {st->steps, st->step, st->f,    st->b,     st->w,      st->nf,
                     st->nb,    st->nw,   st->comm, pp->peak,  st->fused,  st->nfused,
                     st->xf,    st->xb,   st->xfused};
  memcpy(mine, v, sizeof(v));
  memcpy(mine + REP_N, pp->ev, 2 * (size_t)pp->nops * sizeof(double));
  moecclResult_t r = moecclAllGather(mine, all, per, moecclFloat64, ds->world, NULL);
  free(mine);
  if (r != moecclSuccess) {
    free(all);
    return ccl_fail(ds, ds->world, "moecclAllGather", r);
  }
  int rc = 0;
  if (ds->rank == 0) {
    pp_times_t t = {0};
    double tf = 0, tb = 0, tw = 0;
    int S = ds->S < 64 ? ds->S : 64;
    for (int s = 0; s < S; s++) {
      const double* a = all + per * (size_t)(s * ds->Q);
      t.f[s] = a[REP_NF] > 0 ? a[REP_F] / a[REP_NF] : 0;
      t.b[s] = a[REP_NB] > 0 ? a[REP_B] / a[REP_NB] : 0;
      t.w[s] = a[REP_NW] > 0 ? a[REP_W] / a[REP_NW] : 0;
      tf += t.f[s] / S, tb += t.b[s] / S, tw += t.w[s] / S;
    }
    pp_sim_t sim = {0};
    char err[256];
    double formula = pp_sched_bubble_formula(&pp->sc, tf, tb, tw);
    int simok = pp_sched_simulate(&pp->sc, &t, 0, &sim, err, sizeof(err)) == 0;
    printf("# pipeline: %s, %d stage%s x %d chunk%s, %d micro-batch%s; layers per virtual stage",
           pp_sched_name(pp->sc.id), ds->S, ds->S > 1 ? "s" : "", ds->V, ds->V > 1 ? "s" : "",
           ds->M, ds->M > 1 ? "es" : "");
    for (int j = 0; j < ds->S * ds->V; j++)
      printf("%s%d", j ? "," : " ", ds->layer_start[j + 1] - ds->layer_start[j]);
    printf("\n# bubble: formula %.1f%%, simulated with the measured op times %.1f%%; measured "
           "idle (not computing) per stage:",
           100 * formula, simok ? 100 * sim.bubble : -1.0);
    double idle_mean = 0;
    for (int s = 0; s < ds->S; s++) {
      const double* a = all + per * (size_t)(s * ds->Q);
      double busy = a[REP_F] + a[REP_B] + a[REP_W] + a[REP_FUSED];
      double idle = a[REP_STEP] > 0 ? (a[REP_STEP] - busy) / a[REP_STEP] : 0;
      idle_mean += idle / ds->S;
      printf(" %.1f%%", 100 * idle);
    }
    printf(" (mean %.1f%%)\n# per stage, ms per step: forward backward weight overlapped-pairs "
           "send/recv idle; peak activations held (the schedule's check)\n", 100 * idle_mean);
    for (int s = 0; s < ds->S; s++) {
      const double* a = all + per * (size_t)(s * ds->Q);
      double k = a[REP_STEPS] > 0 ? 1e3 / a[REP_STEPS] : 0;
      double busy = a[REP_F] + a[REP_B] + a[REP_W] + a[REP_FUSED];
      printf("#   stage %d: %.3f %.3f %.3f %.3f %.3f %.3f; %d (%d)\n", s, k * a[REP_F],
             k * a[REP_B], k * a[REP_W], k * a[REP_FUSED], k * a[REP_COMM],
             k * (a[REP_STEP] - busy), (int)a[REP_PEAK],
             s < 64 ? pp->check.peak_act[s] : -1);
    }
    /* --overlap: the exchanges a pair left exposed against what a forward
     * and a backward on their own expose (the same run's) */
    double hidden = -1, pair_x = 0, alone_x = 0;
    int npairs = 0;
    for (int s = 0; s < ds->S; s++) {
      const double* a = all + per * (size_t)(s * ds->Q);
      if (a[REP_NFUSED] < 1 || a[REP_NF] < 1 || a[REP_NB] < 1) continue;
      pair_x += a[REP_XFUSED], npairs += (int)a[REP_NFUSED];
      alone_x += (a[REP_XF] / a[REP_NF] + a[REP_XB] / a[REP_NB]) * a[REP_NFUSED];
    }
    if (npairs > 0 && alone_x > 0) {
      hidden = 1 - pair_x / alone_x;
      printf("# overlap: %d forward/backward pairs; EP exchanges exposed %.3f ms per pair, a "
             "forward and a backward alone %.3f ms: %.0f%% hidden\n", npairs,
             1e3 * pair_x / npairs, 1e3 * alone_x / npairs, 100 * hidden);
    }
    if (json) {
      fprintf(json, ", \"pipeline\": {\"overlap_pairs\": %d, \"overlap_hidden\": %.4f, ", npairs,
              hidden);
      fprintf(json, "\"schedule\": \"%s\", \"stages\": %d, \"vstages\": %d, "
              "\"microbatches\": %d, \"bubble_formula\": %.6f, \"bubble_simulated\": %.6f, "
              "\"idle_mean\": %.6f, \"stage\": [", pp_sched_name(pp->sc.id), ds->S, ds->V, ds->M,
              formula, simok ? sim.bubble : -1.0, idle_mean);
      for (int s = 0; s < ds->S; s++) {
        const double* a = all + per * (size_t)(s * ds->Q);
        double k = a[REP_STEPS] > 0 ? 1.0 / a[REP_STEPS] : 0;
        fprintf(json, "%s{\"forward_s\": %.6g, \"backward_s\": %.6g, \"weight_s\": %.6g, "
                "\"sendrecv_s\": %.6g, \"step_s\": %.6g, \"peak_activations\": %d}", s ? ", " : "",
                k * a[REP_F], k * a[REP_B], k * a[REP_W], k * a[REP_COMM], k * a[REP_STEP],
                (int)a[REP_PEAK]);
      }
      fprintf(json, "]}");
    }
    if (o->timeline) rc = write_timeline(pp, o, ds, all, per);
  }
  free(all);
  return rc;
}
