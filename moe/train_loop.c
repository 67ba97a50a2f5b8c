/* One rank's run of moe_train: its communicators and buffers, the weights
 * (--load, or the seeds' student and teacher), then the training loop (the
 * synthetic batch, forward, backward, the gradients' sums, --dump after the
 * first step, Adam) and rank 0's report: the header, a line per step, the
 * progress line, --json and the means over the steps after the first. */
#define _GNU_SOURCE
#include "train_loop.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "adam.h"
#include "backend.h"
#include "model.h"
#include "train_dist.h"
#include "train_io.h"
#include "train_layer.h"

/* A fresh batch: random x of the whole batch (every rank draws the same),
 * the teacher's output on this rank's rows as its target. */
static void synthetic_batch(const moe_backend_ops_t* be, const moe_params_t* teacher,
                            moe_workspace_t* ws, moe_rng_t* rng, const dist_t* ds, int tokens,
                            float* xfull, float* x, float* target) {
  size_t H = teacher->cfg.hidden, nh = (size_t)ds->n * H;
  moe_rng_normal(rng, xfull, (size_t)tokens * H, 1.0f);
  memcpy(x, xfull + (size_t)ds->n0 * H, nh * sizeof(float));
  moe_model_forward(be, teacher, ws, x, x, ds->n, NULL, NULL, NULL);
  memcpy(target, moe_model_output(ws), nh * sizeof(float));
}

int train_rank(const train_options_t* o, int rank, int nranks, moecclUniqueId id) {
  const moe_config_t* c = &o->cfg;
  const moe_backend_ops_t* be = moe_backend_blas(o->threads);
  char blas[512];
  dist_t ds;
  int root = rank == 0;
  if (dist_init(&ds, o, rank, nranks, id)) {
    dist_fini(&ds, 1);
    return 1;
  }
  moe_params_t p = {0}, g = {0}, teacher = {0};
  moe_workspace_t tws = {0};
  dws_t w = {0};
  moe_adam_t adam = {0};
  FILE* json = NULL;
  int status = 1;
  size_t H = c->hidden, nh = (size_t)ds.n * H, NH = (size_t)o->tokens * H;
  int nomem = 0;
  float *x = falloc(nh, &nomem), *target = falloc(nh, &nomem), *grad_x = falloc(nh, &nomem);
  float *xfull = malloc(NH * sizeof(float) + 1), *tfull = malloc(NH * sizeof(float) + 1);
  float *dump_out = NULL, *dump_gx = NULL;
  if (nomem || !xfull || !tfull || moe_params_alloc(&p, c) ||
      moe_params_alloc(&g, c) || dws_alloc(&w, c, &ds, o->chunks) ||
      moe_adam_init(&adam, p.count, o->lr) ||
      (!o->load && (moe_params_alloc(&teacher, c) || moe_workspace_alloc(&tws, c, ds.n))) ||
      (o->dump && root && (!(dump_out = malloc(NH * sizeof(float) + 1)) ||
                           !(dump_gx = malloc(NH * sizeof(float) + 1))))) {
    fprintf(stderr, "moe_train: rank %d: out of memory\n", rank);
    goto done;
  }
  if (dws_plans(&w, c, &ds)) goto done;
  moe_rng_t batch_rng;
  moe_rng_seed(&batch_rng, o->seed + 2);
  if (o->load) {
    if (load_all(o, &p, xfull, tfull)) goto done;
    memcpy(x, xfull + (size_t)ds.n0 * H, nh * sizeof(float));
    memcpy(target, tfull + (size_t)ds.n0 * H, nh * sizeof(float));
  } else {
    moe_params_init_random(&p, o->seed);
    moe_params_init_random(&teacher, o->seed + 1);
  }
  int version = 0;
  moecclGetVersion(&version);
  be->describe(blas, sizeof(blas));
  if (root) {
    printf("# moe_train (moeccl %d.%d.%d), %d rank%s (EP %d x DP %d, %d expert%s and %d-%d tokens "
           "per rank, %d chunk%s): L=%d E=%d K=%d H=%d F=%d N=%d steps=%d lr=%g aux=%g seed=%lu "
           "%s\n# compute: %s\n",
           version / 10000, version / 100 % 100, version % 100, nranks, nranks > 1 ? "s" : "",
           ds.P, ds.D, ds.nexp, ds.nexp > 1 ? "s" : "", o->tokens / nranks, ds.maxn, o->chunks,
           o->chunks > 1 ? "s" : "", c->layers,
           c->experts, c->topk, c->hidden, c->ffn, o->tokens, o->steps, o->lr, c->aux, o->seed,
           o->load    ? o->load
           : o->fresh ? "teacher, fresh inputs"
                      : "teacher, one batch",
           blas);
    printf("# %5s %12s %12s %10s %12s %7s %10s  ms (rank 0): %s\n", "step", "loss", "mse", "aux",
           "baseline", "ratio", "tokens/s",
           "router dispatch experts combine backward (exchanges) allreduce optimizer comm%");
    json = o->json ? fopen(o->json, "w") : NULL;
    if (o->json && !json) {
      fprintf(stderr, "moe_train: --json %s: %s\n", o->json, strerror(errno));
      /* the other ranks stop at the first collective's failure flag below */
    }
  }
  if (dist_any(&ds, root && o->json && !json)) goto done;
  if (json)
    fprintf(json,
            "{\"layers\": %d, \"experts\": %d, \"topk\": %d, \"hidden\": %d, \"ffn\": %d, "
            "\"tokens\": %d, \"lr\": %g, \"aux\": %g, \"seed\": %lu, \"ranks\": %d, \"ep\": %d, "
            "\"dp\": %d, \"chunks\": %d, \"blas\": \"%s\", \"steps\": [",
            c->layers, c->experts, c->topk, c->hidden, c->ffn, o->tokens, o->lr, c->aux, o->seed,
            nranks, ds.P, ds.D, o->chunks, blas);
  int tty = root && isatty(STDERR_FILENO);
  double first_ratio = 0.0, last_ratio = 0.0;
  step_timing_t sum = {0}; /* over the steps after the first (warm-up) */
  double sum_step = 0.0, sum_comm = 0.0;
  int nsum = 0;
  for (int step = 1; step <= o->steps || (step == 1 && o->dump); step++) {
    if (!o->load && (step == 1 || o->fresh))
      synthetic_batch(be, &teacher, &tws, &batch_rng, &ds, o->tokens, xfull, x, target);
    moe_loss_t loss;
    step_timing_t tm = {0};
    double base = 0.0, t0 = train_now();
    if (dist_forward(be, c, &ds, &p, &w, x, target, &loss, &base, &tm) ||
        dist_backward(be, c, &ds, &p, &w, target, o->tokens, &g, grad_x, &tm))
      goto done;
    double t1 = train_now();
    if (grad_allreduce(c, &ds, &g)) goto done;
    tm.allreduce = train_now() - t1;
    if (step == 1 && o->dump) {
      if (gather_for_dump(c, &ds, o->tokens, &g, act_of(&w, c, &ds, c->layers), grad_x, dump_out,
                          dump_gx))
        goto done;
      if (dist_any(&ds, root && dump_all(o, &g, dump_out, dump_gx, &loss))) goto done;
    }
    if (step > o->steps) break;
    double t2 = train_now();
    moe_adam_step(&adam, p.data, g.data);
    double t3 = train_now();
    tm.optimizer = t3 - t2;
    double ratio = base > 0 ? loss.total / base : 0.0;
    if (step == 1) first_ratio = ratio;
    last_ratio = ratio;
    double tps = o->tokens / (t3 - t0);
    /* communication: the EP exchanges not hidden (dispatch, combine, the
     * backward's) and the gradient all-reduce */
    double comm = tm.dispatch + tm.combine + tm.bexch + tm.allreduce;
    if (step > 1 || o->steps == 1) {
      sum.router += tm.router, sum.dispatch += tm.dispatch, sum.experts += tm.experts;
      sum.combine += tm.combine, sum.backward += tm.backward, sum.bexch += tm.bexch;
      sum.allreduce += tm.allreduce, sum.optimizer += tm.optimizer;
      sum_step += t3 - t0, sum_comm += comm, nsum++;
    }
    if (!root) continue;
    printf("  %5d %12.6g %12.6g %10.4g %12.6g %7.4f %10.0f  %.3f %.3f %.3f %.3f %.3f (%.3f) %.3f "
           "%.3f %.1f\n",
           step, loss.total, loss.mse, loss.aux, base, ratio, tps, 1e3 * tm.router,
           1e3 * tm.dispatch, 1e3 * tm.experts, 1e3 * tm.combine, 1e3 * tm.backward,
           1e3 * tm.bexch, 1e3 * tm.allreduce, 1e3 * tm.optimizer, 100 * comm / (t3 - t0));
    if (tty)
      fprintf(stderr, "\rstep %d/%d loss %.5g (%.1f%% of baseline)", step, o->steps, loss.total,
              100 * ratio);
    if (json)
      fprintf(json,
              "%s\n  {\"step\": %d, \"loss\": %.9g, \"mse\": %.9g, \"aux\": %.9g, "
              "\"baseline\": %.9g, \"tokens_per_s\": %.1f, \"time_s\": {\"router\": %.6g, "
              "\"dispatch\": %.6g, \"experts\": %.6g, \"combine\": %.6g, \"backward\": "
              "%.6g, \"backward_exchanges\": %.6g, \"allreduce\": %.6g, \"optimizer\": %.6g}, "
              "\"comm_share\": %.4f}",
              step > 1 ? "," : "", step, loss.total, loss.mse, loss.aux, base, tps, tm.router,
              tm.dispatch, tm.experts, tm.combine, tm.backward, tm.bexch, tm.allreduce,
              tm.optimizer, comm / (t3 - t0));
  }
  if (tty) fprintf(stderr, "\n");
  if (root && nsum > 0) {
    double k = 1e3 / nsum;
    printf("# mean of steps %d-%d: %.0f tokens/s; ms per step: router %.3f dispatch %.3f experts "
           "%.3f combine %.3f backward %.3f (exchanges %.3f) allreduce %.3f optimizer %.3f; "
           "communication %.1f%% of a step\n",
           o->steps == 1 ? 1 : 2, o->steps, o->tokens * nsum / sum_step, k * sum.router,
           k * sum.dispatch, k * sum.experts, k * sum.combine, k * sum.backward, k * sum.bexch,
           k * sum.allreduce, k * sum.optimizer, 100 * sum_comm / sum_step);
  }
  if (root && o->steps > 0)
    printf("# loss / baseline: %.4f at step 1, %.4f at step %d\n", first_ratio, last_ratio,
           o->steps);
  if (json) fprintf(json, "\n]}\n");
  status = 0;
done:
  if (json && fclose(json)) {
    fprintf(stderr, "moe_train: --json %s: %s\n", o->json, strerror(errno));
    status = 1;
  }
  fflush(stdout);
  dws_free(&w, c);
  dist_fini(&ds, status != 0);
  moe_adam_free(&adam);
  moe_workspace_free(&tws);
  moe_params_free(&p);
  moe_params_free(&g);
  moe_params_free(&teacher);
  free(x), free(target), free(grad_x), free(xfull), free(tfull), free(dump_out), free(dump_gx);
  return status;
}
