/* One rank's run of moe_train: its communicators and buffers, the weights
 * (--load, or the seeds' student and teacher), then the training loop (the
 * synthetic batch, forward, backward, the gradients' sums, --dump after the
 * first step, Adam) and rank 0's report: the header, a line per step, the
 * progress line, --json and the means over the steps after the first. */
#define _GNU_SOURCE
#include "train_loop.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "adam.h"
#include "backend.h"
#include "cuda_api.h"
#include "model.h"
#include "train_dist.h"
#include "train_io.h"
#include "train_layer.h"
#include "train_pipe.h"
#include "train_plan.h"
#include "train_place.h"

/* --skew's direction: a unit vector of the seed's (seed + 3). */
static void skew_dir(const moe_config_t* c, unsigned long seed, float* u) {
  moe_rng_t rng;
  moe_rng_seed(&rng, seed + 3);
  moe_rng_normal(&rng, u, c->hidden, 1.0f);
  double n2 = 0;
  for (int h = 0; h < c->hidden; h++) n2 += (double)u[h] * u[h];
  for (int h = 0; h < c->hidden; h++) u[h] = n2 > 0 ? (float)(u[h] / sqrt(n2)) : 0.0f;
}

/* --skew A: the inputs carry 2u, and every router favours expert e along u
 * by A ln(E / (e + 1)), so the low ids are hot from the start (student and
 * teacher alike; the load-balancing loss evens them out only slowly). */
static void skew_router(const moe_config_t* c, float A, const float* u, moe_params_t* p) {
  for (int l = 0; l < c->layers; l++)
    for (int h = 0; h < c->hidden; h++)
      for (int e = 0; e < c->experts; e++)
        p->layer[l].wg[(size_t)h * c->experts + e] +=
            (float)(A * log((double)c->experts / (e + 1)) * u[h] / 2);
}

/* A fresh batch: random x of the whole batch (every rank draws the same;
 * plus 2u with --skew), the teacher's output on this rank's rows as its
 * target (x and target in the backend's memory, hx a host staging array of
 * this rank's rows). */
static void synthetic_batch(const moe_backend_ops_t* be, const moe_params_t* teacher,
                            moe_workspace_t* ws, moe_rng_t* rng, const dist_t* ds, int tokens,
                            const float* u, float* xfull, float* hx, float* x, float* target) {
  size_t H = teacher->cfg.hidden, nh = (size_t)ds->n * H;
  moe_rng_normal(rng, xfull, (size_t)tokens * H, 1.0f);
  if (u)
    for (size_t t = 0; t < (size_t)tokens; t++)
      for (size_t h = 0; h < H; h++) xfull[t * H + h] += 2 * u[h];
  rows_take(ds, H, xfull, hx);
  be->to_device(x, hx, nh * sizeof(float));
  moe_model_forward(be, teacher, ws, x, x, ds->n, NULL, NULL, NULL);
  be->copy(nh, moe_model_output(ws), target);
}

/* The compute backend of --device (*device: whether its memory is a
 * device's); NULL with the reason said when cuda cannot be had. */
static const moe_backend_ops_t* pick_backend(const train_options_t* o, int rank, int* device) {
  const moe_backend_ops_t* host = moe_backend_blas(o->threads); /* sets the BLAS threads */
  *device = 0;
  host->gemm_precision(o->gemm_bf16);
  if (o->device == TRAIN_DEVICE_HOST) return host;
  const char* si = getenv("MOE_CUDA_STANDIN");
  int standin = si && !strcmp(si, "1");
  char why[256] = "";
  const moe_cuda_api_t* api =
      standin ? moe_cuda_api_standin() : moe_cuda_api_load(why, sizeof(why));
  if (o->device == TRAIN_DEVICE_AUTO && !api) return host;
  if (!api) {
    fprintf(stderr, "moe_train: rank %d: --device cuda: no GPU: %s (MOE_CUDA_STANDIN=1 runs the "
            "host stand-in)\n", rank, why);
    return NULL;
  }
  *device = 1;
  const moe_backend_ops_t* be = moe_backend_cuda(api);
  be->gemm_precision(o->gemm_bf16);
  return be;
}

/* The EP group's load this step: the most expert rows a rank of it
 * computed over their mean. */
static int ep_imbalance(const dist_t* ds, size_t rows, double* out) {
  double v[2] = {(double)rows, (double)rows};
  moecclResult_t r = moecclAllReduce(v, v, 1, moecclFloat64, moecclMax, ds->ep, NULL);
  if (r == moecclSuccess)
    r = moecclAllReduce(v + 1, v + 1, 1, moecclFloat64, moecclSum, ds->ep, NULL);
  if (r != moecclSuccess) return ccl_fail(ds, ds->ep, "moecclAllReduce (the load)", r);
  *out = v[1] > 0 ? v[0] / (v[1] / ds->P) : 1.0;
  return 0;
}

/* Every --rebalance-every steps: the new placements of this stage's layers,
 * their experts' weights and Adam moments moved; 1 when one changed. */
static int rebalance(const moe_config_t* c, dist_t* ds, placement_tracker_t* tr,
                     moe_params_t* p, moe_adam_t* adam) {
  for (int l = 0; l < c->layers; l++) {
    if (dist_has_layer(ds, l)) placement_tracker_add(tr, l, ds->load + (size_t)l * c->experts);
  }
  memset(ds->load, 0, (size_t)c->layers * c->experts * sizeof(float));
  placement_t* nw = calloc(c->layers, sizeof(placement_t));
  int* changed = calloc(c->layers, sizeof(int));
  char err[256];
  int rc = -1, any = 0;
  if (!nw || !changed) {
    fprintf(stderr, "moe_train: rank %d: out of memory\n", ds->rank);
    goto out;
  }
  int due = placement_tracker_step(tr, ds->place, nw, changed, err, sizeof(err));
  if (due < 0) {
    fprintf(stderr, "moe_train: rank %d: rebalance: %s\n", ds->rank, err);
    goto out;
  }
  for (int l = 0; due && l < c->layers; l++) {
    if (!changed[l] || !dist_has_layer(ds, l)) continue;
    if (place_migrate(c, ds, l, &ds->place[l], &nw[l], p, adam)) goto out;
    placement_free(&ds->place[l]);
    if (placement_copy(&ds->place[l], &nw[l])) {
      fprintf(stderr, "moe_train: rank %d: out of memory\n", ds->rank);
      goto out;
    }
    ds->place_ver[l]++;
    any = 1;
  }
  rc = any;
out:
  for (int l = 0; nw && l < c->layers; l++) placement_free(&nw[l]);
  free(nw), free(changed);
  return rc;
}

int train_rank(const train_options_t* given, int rank, int nranks, moecclUniqueId id) {
  train_options_t planned = *given; /* --plan replaces the layout */
  const train_options_t* o = &planned;
  const moe_config_t* c = &o->cfg;
  int device = 0;
  const moe_backend_ops_t* be = pick_backend(given, rank, &device);
  char blas[512];
  if (!be) return 1;
  train_time_device(device ? be : NULL);
  dist_t ds;
  int root = rank == 0;
  moecclComm_t world = NULL;
  moecclResult_t wr = moecclCommInitRank(&world, nranks, id, rank);
  if (wr != moecclSuccess) {
    fprintf(stderr, "moe_train: rank %d: moecclCommInitRank: %s: %s\n", rank,
            moecclGetErrorString(wr), moecclGetLastError(NULL));
    return 1;
  }
  if (given->plan && train_plan(&planned, world, rank, nranks)) {
    moecclCommAbort(world);
    if (planned.layer_start != given->layer_start) free(planned.layer_start);
    return 1;
  }
  if (dist_init(&ds, o, rank, nranks, world)) {
    dist_fini(&ds, 1);
    if (planned.layer_start != given->layer_start) free(planned.layer_start);
    return 1;
  }
  ds.be = be;
  ds.device = device;
  /* p, g, the teacher, Adam's moments, x, target, out and grad_x in the
   * backend's memory; hp (the inits, --skew, --load), hx (a batch's rows)
   * and, for --dump, hg, hout, hgx are their host staging copies. */
  moe_params_t p = {0}, g = {0}, teacher = {0}, dump_g = {0}, hp = {0}, hg = {0};
  moe_workspace_t tws = {0};
  pipe_t pipe = {0};
  moe_adam_t adam = {0};
  FILE* json = NULL;
  int status = 1;
  size_t H = c->hidden, nh = (size_t)ds.n * H, NH = (size_t)o->tokens * H;
  int nomem = 0;
  float *x = balloc(be, nh, &nomem), *target = balloc(be, nh, &nomem);
  float *grad_x = balloc(be, nh, &nomem), *out = balloc(be, nh, &nomem);
  float *hx = falloc(nh, &nomem), *hout = NULL, *hgx = NULL;
  float* skew_u = falloc(H, &nomem);
  placement_tracker_t tracker = {0};
  double imb_sum[2] = {0, 0}, imb_step[2] = {0, 0}; /* before and after the last rebalance */
  int imb_n[2] = {0, 0}, rebalanced_at = 0;
  float *xfull = malloc(NH * sizeof(float) + 1), *tfull = malloc(NH * sizeof(float) + 1);
  float *dump_out = NULL, *dump_gx = NULL;
  if (nomem || !xfull || !tfull || moe_params_alloc_on(&p, c, be) ||
      moe_params_alloc_on(&g, c, be) || moe_params_alloc(&hp, c) || pipe_init(&pipe, o, &ds) ||
      moe_adam_init_on(&adam, p.count, o->lr, be) ||
      (!o->load &&
       (moe_params_alloc_on(&teacher, c, be) || moe_workspace_alloc_on(&tws, c, ds.n, be))) ||
      (o->dump && (moe_params_alloc(&hg, c) || !(hout = falloc(nh, &nomem)) ||
                   !(hgx = falloc(nh, &nomem)) || nomem)) ||
      (o->dump && root && (!(dump_out = malloc(NH * sizeof(float) + 1)) ||
                           !(dump_gx = malloc(NH * sizeof(float) + 1)) ||
                           moe_params_alloc(&dump_g, c)))) {
    fprintf(stderr, "moe_train: rank %d: out of memory%s%s\n", rank, be->failed() ? ": " : "",
            be->failed() ? be->failed() : "");
    goto done;
  }
  moe_rng_t batch_rng;
  moe_rng_seed(&batch_rng, o->seed + 2);
  if (o->load) {
    if (load_all(o, &hp, xfull, tfull)) goto done;
    moe_params_to_device(&p, hp.data);
    rows_take(&ds, H, xfull, hx);
    be->to_device(x, hx, nh * sizeof(float));
    rows_take(&ds, H, tfull, hx);
    be->to_device(target, hx, nh * sizeof(float));
  } else {
    if (o->skew > 0) skew_dir(c, o->seed, skew_u);
    moe_params_t* to[2] = {&p, &teacher};
    for (int i = 0; i < 2; i++) { /* drawn (and skewed) on the host */
      moe_params_init_random(&hp, o->seed + i);
      if (o->skew > 0) skew_router(c, o->skew, skew_u, &hp);
      moe_params_to_device(to[i], hp.data);
    }
  }
  int version = 0;
  moecclGetVersion(&version);
  be->describe(blas, sizeof(blas));
  if (root) {
    printf("# moe_train (moeccl %d.%d.%d), %d rank%s (PP %d x EP %d x DP %d, %d expert%s and "
           "%d tokens per rank, %d micro-batch%s, %s, %d chunk%s): L=%d E=%d K=%d H=%d F=%d N=%d "
           "steps=%d lr=%g aux=%g seed=%lu %s\n# compute: %s%s\n",
           version / 10000, version / 100 % 100, version % 100, nranks, nranks > 1 ? "s" : "",
           ds.S, ds.P, ds.D, ds.nexp, ds.nexp > 1 ? "s" : "", ds.n, ds.M, ds.M > 1 ? "es" : "",
           pp_sched_name(o->schedule), o->chunks, o->chunks > 1 ? "s" : "", c->layers,
           c->experts, c->topk, c->hidden, c->ffn, o->tokens, o->steps, o->lr, c->aux, o->seed,
           o->load    ? o->load
           : o->fresh ? "teacher, fresh inputs"
                      : "teacher, one batch",
           blas, o->gemm_bf16 ? "; products' inputs in bfloat16, summed in float32" : "");
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
  if (ds.place && o->rebalance_every > 0) {
    char err[256];
    if (placement_tracker_init(&tracker, c->layers, c->experts, ds.P, o->replicas,
                               o->rebalance_every, 0.05, err, sizeof(err))) {
      fprintf(stderr, "moe_train: rank %d: %s\n", rank, err);
      goto done;
    }
  }
  if (json)
    fprintf(json,
            "{\"layers\": %d, \"experts\": %d, \"topk\": %d, \"hidden\": %d, \"ffn\": %d, "
            "\"tokens\": %d, \"lr\": %g, \"aux\": %g, \"seed\": %lu, \"ranks\": %d, \"ep\": %d, "
            "\"dp\": %d, \"pp\": %d, \"vstages\": %d, \"microbatches\": %d, \"schedule\": "
            "\"%s\", \"chunks\": %d, \"blas\": \"%s\", \"steps\": [",
            c->layers, c->experts, c->topk, c->hidden, c->ffn, o->tokens, o->lr, c->aux, o->seed,
            nranks, ds.P, ds.D, ds.S, ds.V, ds.M, pp_sched_name(o->schedule), o->chunks, blas);
  int tty = root && isatty(STDERR_FILENO);
  double first_ratio = 0.0, last_ratio = 0.0;
  step_timing_t sum = {0}; /* over the steps after the first (warm-up) */
  double sum_step = 0.0, sum_comm = 0.0;
  int nsum = 0;
  for (int step = 1; step <= o->steps || (step == 1 && o->dump); step++) {
    if (!o->load && (step == 1 || o->fresh))
      synthetic_batch(be, &teacher, &tws, &batch_rng, &ds, o->tokens,
                      o->skew > 0 ? skew_u : NULL, xfull, hx, x, target);
    moe_loss_t loss;
    step_timing_t tm = {0};
    double sums[4], t0 = train_now();
    if (pipe_step(&pipe, be, c, &ds, &p, x, target, &g, out, grad_x, sums, &tm)) goto done;
    if (device && be->failed()) fprintf(stderr, "moe_train: rank %d: %s\n", rank, be->failed());
    if (device && dist_any(&ds, be->failed() != NULL)) goto done;
    double tl = train_now();
    moecclResult_t rr = moecclAllReduce(sums, sums, 4, moecclFloat64, moecclSum, ds.world, NULL);
    if (rr != moecclSuccess) {
      ccl_fail(&ds, ds.world, "moecclAllReduce (the loss)", rr);
      goto done;
    }
    tm.router += train_now() - tl;
    loss.mse = sums[1] > 0 ? sums[0] / (sums[1] * H) : 0.0;
    loss.aux = sums[3];
    loss.total = loss.mse + loss.aux;
    double base = sums[1] > 0 ? sums[2] / (sums[1] * H) : 0.0;
    double t1 = train_now();
    if (grad_allreduce(c, &ds, &g)) goto done;
    tm.allreduce = train_now() - t1;
    if (step == 1 && o->dump) {
      moe_params_to_host(&g, hg.data); /* the gathers read them on the host */
      be->to_host(hout, out, nh * sizeof(float));
      be->to_host(hgx, grad_x, nh * sizeof(float));
      if (gather_for_dump(c, &ds, o->tokens, &hg, hout, hgx, &dump_g, dump_out, dump_gx))
        goto done;
      if (dist_any(&ds, root && dump_all(o, &dump_g, dump_out, dump_gx, &loss))) goto done;
    }
    if (step > o->steps) break;
    double t2 = train_now();
    adam_held(be, c, &ds, &adam, &p, &g);
    double t3 = train_now();
    tm.optimizer = t3 - t2;
    double imb = 1.0;
    if (ep_imbalance(&ds, pipe.rows, &imb)) goto done;
    if (step > 1) { /* the first step warms up */
      int k = rebalanced_at > 0;
      imb_sum[k] += imb, imb_step[k] += t3 - t0, imb_n[k]++;
    }
    if (ds.place && o->rebalance_every > 0) {
      int moved = rebalance(c, &ds, &tracker, &p, &adam);
      if (moved < 0) goto done;
      if (moved) {
        rebalanced_at = step;
        imb_sum[1] = imb_step[1] = 0, imb_n[1] = 0; /* "after" counts from the last one */
        if (root) printf("# step %d: experts placed again (EP %d ranks, %d replica%s)\n", step,
                         ds.P, o->replicas, o->replicas == 1 ? "" : "s");
      }
    }
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
    if (step == 1 && o->steps > 1) pipe_stats_reset(&pipe); /* the first step warms up */
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
              "\"comm_share\": %.4f, \"imbalance\": %.4f}",
              step > 1 ? "," : "", step, loss.total, loss.mse, loss.aux, base, tps, tm.router,
              tm.dispatch, tm.experts, tm.combine, tm.backward, tm.bexch, tm.allreduce,
              tm.optimizer, comm / (t3 - t0), imb);
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
  if (root && (ds.P > 1 || ds.place) && imb_n[0] > 0) {
    printf("# expert load (the most expert rows an EP rank computes per step over the mean): "
           "%.3f, %.3f ms per step", imb_sum[0] / imb_n[0], 1e3 * imb_step[0] / imb_n[0]);
    if (imb_n[1] > 0)
      printf(" before the placement of step %d; after it %.3f, %.3f ms per step (steps %d-%d)",
             rebalanced_at, imb_sum[1] / imb_n[1], 1e3 * imb_step[1] / imb_n[1],
             rebalanced_at + 1, o->steps);
    printf("\n");
  }
  if (root && o->steps > 0)
    printf("# loss / baseline: %.4f at step 1, %.4f at step %d\n", first_ratio, last_ratio,
           o->steps);
  if (json) fprintf(json, "\n]");
  if (pipe_report(&pipe, o, &ds, json)) goto done;
  if (json) fprintf(json, "}\n");
  status = 0;
done:
  if (json && fclose(json)) {
    fprintf(stderr, "moe_train: --json %s: %s\n", o->json, strerror(errno));
    status = 1;
  }
  fflush(stdout);
  pipe_free(&pipe);
  dist_fini(&ds, status != 0);
  moe_adam_free(&adam);
  moe_workspace_free(&tws);
  moe_params_free(&p);
  moe_params_free(&g);
  moe_params_free(&teacher);
  moe_params_free(&dump_g);
  moe_params_free(&hp);
  moe_params_free(&hg);
  placement_tracker_free(&tracker);
  if (planned.layer_start != given->layer_start) free(planned.layer_start);
  float* dev[] = {x, target, grad_x, out};
  for (int i = 0; i < 4; i++)
    if (dev[i]) moe_mem_free(be, dev[i]);
  free(hx), free(hout), free(hgx);
  free(skew_u), free(xfull), free(tfull), free(dump_out), free(dump_gx);
  return status;
}
