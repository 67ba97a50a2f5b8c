/* moe_train --plan (train_plan.h). */
#define _GNU_SOURCE
#include "train_plan.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "backend.h"
#include "moeccl_sim.h"
#include "plan.h"
#include "train_layer.h"

/* Whether moe_train can run the layout with o's other flags. */
static int runnable(const train_options_t* o, const plan_layout_t* l) {
  int X = o->replicas;
  if ((o->cfg.experts + X) % l->P || X > o->cfg.experts * (l->P - 1)) return 0;
  return !(l->overlap && l->C > 1);
}

static int write_json(const char* path, const plan_pred_t* p, int n) {
  FILE* f = fopen(path, "w");
  if (!f) {
    fprintf(stderr, "moe_train: --plan-json %s: %s\n", path, strerror(errno));
    return -1;
  }
  char flags[160];
  fprintf(f, "{\"layouts\": [");
  for (int i = 0; i < n; i++)
    fprintf(f, "%s\n  {\"flags\": \"%s\", \"fits\": %d, \"step_s\": %.9g, \"compute_s\": %.9g, "
            "\"comm_s\": %.9g, \"comm_exposed_s\": %.9g, \"bubble\": %.6f, \"allreduce_s\": "
            "%.9g, \"optimizer_s\": %.9g, \"mem_bytes\": %.6g}",
            i ? "," : "", plan_flags(&p[i].lay, flags, sizeof(flags)), p[i].fits, p[i].step,
            p[i].compute, p[i].comm, p[i].comm_exposed, p[i].bubble, p[i].allreduce,
            p[i].optimizer, p[i].mem);
  fprintf(f, "\n]}\n");
  if (fclose(f)) {
    fprintf(stderr, "moe_train: --plan-json %s: %s\n", path, strerror(errno));
    return -1;
  }
  return 0;
}

/* CPU seconds this thread has run. */
static double cpu_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

/* What a small exchange costs on comm (every rank), per call, on rank 0:
 * 40 all-to-alls of 64 bytes per peer after 5 unmeasured; -1 on failure.
 * When the ranks outnumber the cores (share: ranks per core, > 1) a call
 * also waits for peers the scheduler has not run yet: then each rank
 * computes BURST CPU seconds before each of 16 calls (after 3 unmeasured),
 * as training computes between its exchanges, and a call costs what an
 * iteration takes beyond that work at its share of a core.  With a stream
 * each call is queued on it before the work and waited for after (as
 * --chunks runs a chunk's exchange under another's experts): what the
 * stream's thread, competing with the work for a core, adds. */
#define BURST 0.004
static double call_time(moecclComm_t comm, double share, moecclStream_t stream) {
  static char a[64 * 256], b[64 * 256]; /* at most 256 ranks: no allocation to fail */
  moecclResult_t r = moecclSuccess;
  int busy = share > 1 || stream, warm = busy ? 3 : 5, n = busy ? 16 : 40;
  double t0 = 0;
  volatile double sink = 0;
  for (int i = 0; i < warm + n && r == moecclSuccess; i++) {
    if (i == warm) t0 = train_now();
    if (stream) r = moecclAlltoAll(a, b, 64, moecclInt8, comm, stream);
    if (busy)
      for (double c0 = cpu_now(); cpu_now() - c0 < BURST;)
        for (int k = 0; k < 1000; k++) sink += k * 1e-9;
    if (r == moecclSuccess)
      r = stream ? moecclHostStreamSynchronize(stream)
                 : moecclAlltoAll(a, b, 64, moecclInt8, comm, NULL);
  }
  if (r != moecclSuccess) return -1;
  double t = (train_now() - t0) / n - (busy ? BURST * (share > 1 ? share : 1) : 0);
  return t > 0 ? t : 0;
}

/* The part of a call of n ranks the cost model does not price: measured
 * less the price of the same all-to-all on ranks 0..n-1. */
static double unpriced(moecclSim_t sim, int n, double measured) {
  int* all = calloc(n, sizeof(int));
  double priced = 0;
  for (int i = 0; all && i < n; i++) all[i] = i;
  if (all && n > 1 && moecclSimAlltoAll(sim, all, n, 64, NULL, &priced, NULL)) priced = 0;
  free(all);
  return measured > priced ? measured - priced : 0;
}

/* Rank 0's plan: the winner's layout in lay[8], or lay[0] = 0.  calls: the
 * measured times of a small all-to-all of every rank, of 2 ranks, and of
 * every rank queued on a host stream. */
static void plan_here(const train_options_t* o, moecclComm_t world, int nranks,
                      const double calls[3], const plan_machine_t* probed, int lay[8]) {
  plan_machine_t mc = {0};
  plan_pred_t* p = NULL;
  if (moecclSimCreateFromComm(&mc.sim, world) != moecclSuccess) {
    fprintf(stderr, "moe_train: --plan: %s\n", moecclGetLastError(NULL));
    return;
  }
  const moe_config_t* c = &o->cfg;
  plan_model_t m = {c->layers, c->experts, c->topk, c->hidden, c->ffn, o->tokens, 4, 0, 0};
  mc.ranks = nranks;
  mc.ranks_per_node = nranks;
  long cores = sysconf(_SC_NPROCESSORS_ONLN), pages = sysconf(_SC_PHYS_PAGES);
  mc.cores = cores > 0 ? (int)cores : 1;
  mc.mem = pages > 0 ? (double)pages * sysconf(_SC_PAGESIZE) / nranks : 0;
  mc.param_bytes = 4;
  mc.name = "this host (probed), this communicator's costs";
  mc.nrates = probed->nrates;
  memcpy(mc.rate_rows, probed->rate_rows, sizeof(mc.rate_rows));
  memcpy(mc.rate, probed->rate, sizeof(mc.rate));
  mc.elem_rate = probed->elem_rate, mc.adam_rate = probed->adam_rate;
  mc.call_s = unpriced(mc.sim, nranks, calls[0]);
  mc.call2_s = nranks > 2 ? unpriced(mc.sim, 2, calls[1]) : 0;
  mc.stream_call_s = unpriced(mc.sim, nranks, calls[2]);
  for (int i = 0; i < mc.nrates; i++) /* MFU's peak: the fastest the probe saw */
    if (mc.rate[i] > mc.peak) mc.peak = mc.rate[i];
  int n = plan_search(&m, &mc, &p);
  int w = -1;
  for (int i = 0; i < n && w < 0; i++)
    if (p[i].fits && runnable(o, &p[i].lay)) w = i;
  if (w < 0) {
    fprintf(stderr, "moe_train: --plan: no layout of %d ranks fits\n", nranks);
  } else {
    if (w > 0) { /* the first moe_train can run with the other flags goes first */
      plan_pred_t t = p[w];
      memmove(p + 1, p, w * sizeof(*p));
      p[0] = t;
    }
    plan_report(stdout, &m, &mc, p, n, 10);
    char flags[160];
    printf("# plan: training with %s\n", plan_flags(&p[0].lay, flags, sizeof(flags)));
    fflush(stdout);
    const plan_layout_t* l = &p[0].lay;
    int v[8] = {l->S, l->P, l->D, l->V, l->M, l->C, l->schedule, l->overlap};
    if (!o->plan_json || write_json(o->plan_json, p, n) == 0) memcpy(lay, v, sizeof(v));
  }
  free(p);
  moecclSimDestroy(mc.sim);
}

/* Whether every rank says ok (1), not all (0), or -1 when the ranks
 * cannot agree: the ranks take the same branch around the calls after. */
static int agree(moecclComm_t world, int ok) {
  int32_t v = ok;
  if (moecclAllReduce(&v, &v, 1, moecclInt32, moecclMin, world, NULL) != moecclSuccess) return -1;
  return v;
}

int train_plan(train_options_t* o, moecclComm_t world, int rank, int nranks) {
  int lay[8] = {0};
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  double share = cores > 0 ? (double)nranks / cores : 1;
  /* The compute is probed on as many ranks at once as the layout will run
   * at once (up to the cores): ranks sharing a machine's caches and memory
   * compute slower together than one alone. */
  plan_machine_t probed = {0};
  double go = 0; /* all start together, or the first probes alone */
  if (moecclAllReduce(&go, &go, 1, moecclFloat64, moecclSum, world, NULL) != moecclSuccess) {
    fprintf(stderr, "moe_train: rank %d: --plan: moecclAllReduce: %s\n", rank,
            moecclGetLastError(world));
    return -1;
  }
  int probers = cores > 0 && cores < nranks ? (int)cores : nranks;
  if (rank < probers) /* the model's experts over the ranks probing at once */
    plan_probe(moe_backend_blas(o->threads), o->cfg.hidden, o->cfg.ffn, o->cfg.layers,
               o->cfg.experts / probers, o->tokens / probers, &probed);
  /* A step goes at its slowest rank's pace (its peers wait for it at every
   * exchange): the plan takes each rate from the rank that probed slowest
   * (rank 0's alone missed a core that a neighbour took from another). */
  double rates[PLAN_RATES + 2];
  for (int i = 0; i < PLAN_RATES + 2; i++) rates[i] = HUGE_VAL; /* no probe here */
  if (probed.nrates > 0) {
    memcpy(rates, probed.rate, sizeof(probed.rate));
    rates[PLAN_RATES] = probed.elem_rate, rates[PLAN_RATES + 1] = probed.adam_rate;
  }
  if (moecclAllReduce(rates, rates, PLAN_RATES + 2, moecclFloat64, moecclMin, world, NULL) !=
      moecclSuccess) {
    fprintf(stderr, "moe_train: rank %d: --plan: moecclAllReduce: %s\n", rank,
            moecclGetLastError(world));
    return -1;
  }
  if (probed.nrates > 0) {
    memcpy(probed.rate, rates, sizeof(probed.rate));
    probed.elem_rate = rates[PLAN_RATES], probed.adam_rate = rates[PLAN_RATES + 1];
  }
  /* then the calls (the first waits for the probe: its warm-up) */
  double call = call_time(world, share, NULL), call2 = call, scall = -1;
  int all_ok = agree(world, call >= 0);
  if (all_ok > 0 && nranks > 2) { /* and among 2 ranks, every pair at once */
    moecclComm_t pair = NULL;
    int color = nranks % 2 && rank == nranks - 1 ? MOECCL_SPLIT_NOCOLOR : rank / 2;
    moecclResult_t s = moecclCommSplit(world, color, rank, &pair, NULL);
    call2 = s != moecclSuccess ? -1 : pair ? call_time(pair, share, NULL) : 0;
    if (pair) moecclCommDestroy(pair);
  }
  moecclStream_t st = NULL;
  int made = all_ok > 0 && moecclHostStreamCreate(&st) == moecclSuccess;
  if (all_ok > 0 && agree(world, made) > 0) scall = call_time(world, share, st);
  if (made) moecclHostStreamDestroy(st);
  double calls[3] = {call, call2, scall};
  moecclResult_t b = moecclAllReduce(calls, calls, 3, moecclFloat64, moecclMax, world, NULL);
  if (b != moecclSuccess) {
    fprintf(stderr, "moe_train: rank %d: --plan: moecclAllReduce: %s\n", rank,
            moecclGetLastError(world));
    return -1;
  }
  if (rank == 0) plan_here(o, world, nranks, calls, &probed, lay);
  moecclResult_t r = moecclBroadcast(lay, lay, 8, moecclInt32, 0, world, NULL);
  if (r != moecclSuccess) {
    fprintf(stderr, "moe_train: rank %d: --plan: moecclBroadcast: %s\n", rank,
            moecclGetLastError(world));
    return -1;
  }
  if (lay[0] == 0) return -1;
  o->pp = lay[0], o->ep = lay[1], o->dp = lay[2], o->vstages = lay[3];
  o->microbatches = lay[4], o->chunks = lay[5], o->schedule = lay[6], o->overlap = lay[7];
  o->split = NULL;
  o->layer_start = NULL; /* resolve_layout makes the split again */
  o->plan = 0;           /* now the layout is the winner's: check it all */
  return resolve_layout(o, nranks);
}
