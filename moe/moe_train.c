/* moe_train: trains the MoE model of moe/model.h on one process.
 *
 * Without --load, a synthetic task: a teacher MoE of the same shape (seed
 * + 1) makes the targets of N random inputs (seed + 2; one batch reused
 * every step, or new inputs every step with --fresh) and the student (seed)
 * learns them; the baseline is the loss of x_L = x on the same batch.
 * With --load DIR, the weights and one batch come from .npy files and every
 * step uses that batch.  --dump DIR writes the first step's output, loss and
 * every gradient, before the optimizer step.
 *
 * This is the single-process driver: the multi-rank one (--ep, --dp, -n,
 * --chunks) puts moeccl's dispatch and combine between the per-layer pieces
 * of model.h; until then those flags accept only 1. */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "adam.h"
#include "backend.h"
#include "model.h"
#include "moeccl.h"
#include "npy.h"

typedef struct train_options {
  moe_config_t cfg;
  int tokens, steps, threads;
  float lr;
  unsigned long seed;
  const char *load, *dump, *json;
  int fresh; /* a new synthetic batch every step */
  int set_layers, set_experts, set_hidden, set_ffn, set_tokens; /* given on the command line */
} train_options_t;

static void usage(FILE* out) {
  fprintf(out, "usage: moe_train [options]\n"
               "  --layers L    layers (2)              --experts E   experts per layer (8)\n"
               "  --topk K      experts per token (2)   --hidden H    model width (64)\n"
               "  --ffn F       expert width (128)      --tokens N    tokens per step (256)\n"
               "  --steps S     steps (200)             --lr LR       Adam learning rate (0.003)\n"
               "  --aux A       load-balancing loss weight (0.01)\n"
               "  --seed S      student seed; the teacher is S+1, the inputs S+2 (1)\n"
               "  --fresh       synthetic task: new random inputs every step (default: one\n"
               "                batch of N random inputs, reused every step as with --load)\n"
               "  --threads T   BLAS threads (1, or OPENBLAS_NUM_THREADS)\n"
               "  --load DIR    wg{l}.npy w1_{l}.npy w3_{l}.npy w2_{l}.npy x.npy target.npy;\n"
               "                shapes not given as flags are taken from the files\n"
               "  --dump DIR    first step's out.npy grad_x.npy grad_wg{l}.npy grad_w1_{l}.npy\n"
               "                grad_w3_{l}.npy grad_w2_{l}.npy loss.txt\n"
               "  --json FILE   per-step loss, tokens/s and time split as JSON\n"
               "  --ep P --dp D -n R --chunks C   multi-rank layout: only 1 in this build\n");
}

static int parse_int(const char* name, const char* text, int min, int* out) {
  char* end;
  errno = 0;
  long v = strtol(text, &end, 10);
  if (errno || *end || v < min || v > 1 << 30) {
    fprintf(stderr, "moe_train: --%s %s: want an integer >= %d\n", name, text, min);
    return -1;
  }
  *out = (int)v;
  return 0;
}

static int parse_float(const char* name, const char* text, float* out) {
  char* end;
  errno = 0;
  float v = strtof(text, &end);
  if (errno || *end || !(v >= 0.0f)) {
    fprintf(stderr, "moe_train: --%s %s: want a number >= 0\n", name, text);
    return -1;
  }
  *out = v;
  return 0;
}

/* 0, 1 when help was asked, -1 on a bad argument. */
static int parse_options(int argc, char** argv, train_options_t* o) {
  enum {
    O_LAYERS = 256,
    O_EXPERTS,
    O_TOPK,
    O_HIDDEN,
    O_FFN,
    O_TOKENS,
    O_STEPS,
    O_LR,
    O_AUX,
    O_SEED,
    O_THREADS,
    O_LOAD,
    O_DUMP,
    O_JSON,
    O_EP,
    O_DP,
    O_CHUNKS,
    O_FRESH
  };
  static const struct option longopts[] = {
      {"layers", 1, 0, O_LAYERS},   {"experts", 1, 0, O_EXPERTS},
      {"topk", 1, 0, O_TOPK},       {"hidden", 1, 0, O_HIDDEN},
      {"ffn", 1, 0, O_FFN},         {"tokens", 1, 0, O_TOKENS},
      {"steps", 1, 0, O_STEPS},     {"lr", 1, 0, O_LR},
      {"aux", 1, 0, O_AUX},         {"seed", 1, 0, O_SEED},
      {"threads", 1, 0, O_THREADS}, {"load", 1, 0, O_LOAD},
      {"dump", 1, 0, O_DUMP},       {"json", 1, 0, O_JSON},
      {"ep", 1, 0, O_EP},           {"dp", 1, 0, O_DP},
      {"chunks", 1, 0, O_CHUNKS},   {"fresh", 0, 0, O_FRESH},
      {"help", 0, 0, 'h'},          {0, 0, 0, 0}};
  *o = (train_options_t){
      .cfg = {2, 8, 2, 64, 128, 0.01f}, .tokens = 256, .steps = 200, .lr = 0.003f, .seed = 1};
  int c, one = 1, seed = 0, rc = 0;
  while (rc == 0 && (c = getopt_long(argc, argv, "hn:", longopts, NULL)) != -1) {
    switch (c) {
      case O_LAYERS:
        rc = parse_int("layers", optarg, 1, &o->cfg.layers);
        o->set_layers = 1;
        break;
      case O_EXPERTS:
        rc = parse_int("experts", optarg, 1, &o->cfg.experts);
        o->set_experts = 1;
        break;
      case O_TOPK: rc = parse_int("topk", optarg, 1, &o->cfg.topk); break;
      case O_HIDDEN:
        rc = parse_int("hidden", optarg, 1, &o->cfg.hidden);
        o->set_hidden = 1;
        break;
      case O_FFN:
        rc = parse_int("ffn", optarg, 1, &o->cfg.ffn);
        o->set_ffn = 1;
        break;
      case O_TOKENS:
        rc = parse_int("tokens", optarg, 1, &o->tokens);
        o->set_tokens = 1;
        break;
      case O_STEPS: rc = parse_int("steps", optarg, 0, &o->steps); break;
      case O_LR: rc = parse_float("lr", optarg, &o->lr); break;
      case O_AUX: rc = parse_float("aux", optarg, &o->cfg.aux); break;
      case O_SEED:
        rc = parse_int("seed", optarg, 0, &seed);
        o->seed = (unsigned long)seed;
        break;
      case O_THREADS: rc = parse_int("threads", optarg, 1, &o->threads); break;
      case O_LOAD: o->load = optarg; break;
      case O_DUMP: o->dump = optarg; break;
      case O_JSON: o->json = optarg; break;
      case O_FRESH: o->fresh = 1; break;
      case O_EP:
      case O_DP:
      case O_CHUNKS:
      case 'n':
        rc = parse_int(c == 'n'    ? "n"
                       : c == O_EP ? "ep"
                       : c == O_DP ? "dp"
                                   : "chunks",
                       optarg, 1, &one);
        if (rc == 0 && one != 1) {
          fprintf(stderr, "moe_train: this build runs one rank, one chunk (multi-rank: later)\n");
          rc = -1;
        }
        break;
      case 'h': usage(stdout); return 1;
      default: usage(stderr); return -1;
    }
  }
  if (rc == 0 && optind < argc) {
    fprintf(stderr, "moe_train: unexpected argument %s\n", argv[optind]);
    rc = -1;
  }
  return rc;
}

/* The shapes the flags left open, from the files of --load. */
static int infer_shapes(train_options_t* o) {
  char path[4096], err[512];
  moe_npy_t a;
  snprintf(path, sizeof(path), "%s/wg0.npy", o->load);
  if (moe_npy_read(path, &a, err, sizeof(err))) {
    fprintf(stderr, "moe_train: --load: %s\n", err);
    return -1;
  }
  if (a.ndim != 2) {
    fprintf(stderr, "moe_train: --load: %s: %d dimensions, expected 2 ([H, E])\n", path, a.ndim);
    moe_npy_free(&a);
    return -1;
  }
  if (!o->set_hidden) o->cfg.hidden = (int)a.shape[0];
  if (!o->set_experts) o->cfg.experts = (int)a.shape[1];
  moe_npy_free(&a);
  snprintf(path, sizeof(path), "%s/w1_0.npy", o->load);
  if (!o->set_ffn && moe_npy_read(path, &a, err, sizeof(err)) == 0) {
    if (a.ndim == 3) o->cfg.ffn = (int)a.shape[2];
    moe_npy_free(&a);
  }
  snprintf(path, sizeof(path), "%s/x.npy", o->load);
  if (!o->set_tokens && moe_npy_read(path, &a, err, sizeof(err)) == 0) {
    if (a.ndim == 2) o->tokens = (int)a.shape[0];
    moe_npy_free(&a);
  }
  if (!o->set_layers) {
    struct stat st;
    int l = 0;
    do snprintf(path, sizeof(path), "%s/wg%d.npy", o->load, ++l);
    while (stat(path, &st) == 0);
    o->cfg.layers = l;
  }
  return 0;
}

static int load_all(const train_options_t* o, moe_params_t* p, float* x, float* target) {
  const moe_config_t* c = &o->cfg;
  size_t H = c->hidden, E = c->experts, F = c->ffn, N = o->tokens;
  size_t s_wg[2] = {H, E}, s_w13[3] = {E, H, F}, s_w2[3] = {E, F, H}, s_x[2] = {N, H};
  char path[4096], err[4200];
  for (int l = 0; l < c->layers; l++) {
    struct {
      const char* fmt;
      float* dst;
      int nd;
      const size_t* shape;
    } f[4] = {{"%s/wg%d.npy", p->layer[l].wg, 2, s_wg},
              {"%s/w1_%d.npy", p->layer[l].w1, 3, s_w13},
              {"%s/w3_%d.npy", p->layer[l].w3, 3, s_w13},
              {"%s/w2_%d.npy", p->layer[l].w2, 3, s_w2}};
    for (int i = 0; i < 4; i++) {
      snprintf(path, sizeof(path), f[i].fmt, o->load, l);
      if (moe_npy_load(path, f[i].dst, f[i].nd, f[i].shape, err, sizeof(err))) {
        fprintf(stderr, "moe_train: --load: %s\n", err);
        return -1;
      }
    }
  }
  const char* names[2] = {"x", "target"};
  float* dst[2] = {x, target};
  for (int i = 0; i < 2; i++) {
    snprintf(path, sizeof(path), "%s/%s.npy", o->load, names[i]);
    if (moe_npy_load(path, dst[i], 2, s_x, err, sizeof(err))) {
      fprintf(stderr, "moe_train: --load: %s\n", err);
      return -1;
    }
  }
  return 0;
}

static int dump_one(const char* dir, const char* name, const float* data, int nd,
                    const size_t* shape) {
  char path[4096], err[4200];
  snprintf(path, sizeof(path), "%s/%s", dir, name);
  if (moe_npy_write(path, data, nd, shape, err, sizeof(err))) {
    fprintf(stderr, "moe_train: --dump: %s\n", err);
    return -1;
  }
  return 0;
}

static int dump_all(const train_options_t* o, const moe_params_t* g, const float* out,
                    const float* grad_x, const moe_loss_t* loss) {
  const moe_config_t* c = &o->cfg;
  size_t H = c->hidden, E = c->experts, F = c->ffn, N = o->tokens;
  size_t s_wg[2] = {H, E}, s_w13[3] = {E, H, F}, s_w2[3] = {E, F, H}, s_x[2] = {N, H};
  char name[64], path[4096];
  if (mkdir(o->dump, 0777) && errno != EEXIST) {
    fprintf(stderr, "moe_train: --dump %s: %s\n", o->dump, strerror(errno));
    return -1;
  }
  int rc =
      dump_one(o->dump, "out.npy", out, 2, s_x) | dump_one(o->dump, "grad_x.npy", grad_x, 2, s_x);
  for (int l = 0; l < c->layers; l++) {
    snprintf(name, sizeof(name), "grad_wg%d.npy", l);
    rc |= dump_one(o->dump, name, g->layer[l].wg, 2, s_wg);
    snprintf(name, sizeof(name), "grad_w1_%d.npy", l);
    rc |= dump_one(o->dump, name, g->layer[l].w1, 3, s_w13);
    snprintf(name, sizeof(name), "grad_w3_%d.npy", l);
    rc |= dump_one(o->dump, name, g->layer[l].w3, 3, s_w13);
    snprintf(name, sizeof(name), "grad_w2_%d.npy", l);
    rc |= dump_one(o->dump, name, g->layer[l].w2, 3, s_w2);
  }
  snprintf(path, sizeof(path), "%s/loss.txt", o->dump);
  FILE* f = fopen(path, "w");
  if (!f || fprintf(f, "%.9g\n", loss->total) < 0 || fclose(f)) {
    fprintf(stderr, "moe_train: --dump: %s: %s\n", path, strerror(errno));
    return -1;
  }
  return rc ? -1 : 0;
}

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

/* A fresh batch: random x, the teacher's output as the target. */
static void synthetic_batch(const moe_backend_ops_t* be, const moe_params_t* teacher,
                            moe_workspace_t* ws, moe_rng_t* rng, int n, float* x, float* target) {
  size_t nh = (size_t)n * teacher->cfg.hidden;
  moe_rng_normal(rng, x, nh, 1.0f);
  moe_model_forward(be, teacher, ws, x, x, n, NULL, NULL, NULL);
  memcpy(target, moe_model_output(ws), nh * sizeof(float));
}

static double baseline_loss(const float* x, const float* target, size_t count) {
  double sq = 0.0;
  for (size_t i = 0; i < count; i++) sq += ((double)x[i] - target[i]) * ((double)x[i] - target[i]);
  return sq / (double)count;
}

int main(int argc, char** argv) {
  train_options_t o;
  char err[256], blas[512];
  int rc = parse_options(argc, argv, &o);
  if (rc) return rc > 0 ? 0 : 2;
  if (o.load && infer_shapes(&o)) return 1;
  if (moe_config_check(&o.cfg, err, sizeof(err))) {
    fprintf(stderr, "moe_train: %s\n", err);
    return 2;
  }
  const moe_config_t* c = &o.cfg;
  const moe_backend_ops_t* be = moe_backend_blas(o.threads);
  moe_params_t p = {0}, g = {0}, teacher = {0};
  moe_workspace_t ws = {0};
  moe_adam_t adam = {0};
  FILE* json = NULL;
  int status = 1;
  size_t nh = (size_t)o.tokens * c->hidden;
  float *x = malloc(nh * sizeof(float)), *target = malloc(nh * sizeof(float));
  float* grad_x = malloc(nh * sizeof(float));
  if (!x || !target || !grad_x || moe_params_alloc(&p, c) || moe_params_alloc(&g, c) ||
      moe_workspace_alloc(&ws, c, o.tokens) || moe_adam_init(&adam, p.count, o.lr) ||
      (!o.load && moe_params_alloc(&teacher, c))) {
    fprintf(stderr, "moe_train: out of memory\n");
    goto done;
  }
  moe_rng_t batch_rng;
  moe_rng_seed(&batch_rng, o.seed + 2);
  if (o.load) {
    if (load_all(&o, &p, x, target)) goto done;
  } else {
    moe_params_init_random(&p, o.seed);
    moe_params_init_random(&teacher, o.seed + 1);
  }
  int version = 0;
  moecclGetVersion(&version);
  printf(
      "# moe_train (moeccl %d.%d.%d), 1 rank: L=%d E=%d K=%d H=%d F=%d N=%d steps=%d lr=%g aux=%g "
      "seed=%lu %s\n# compute: %s\n",
      version / 10000, version / 100 % 100, version % 100, c->layers, c->experts, c->topk,
      c->hidden, c->ffn, o.tokens, o.steps, o.lr, c->aux, o.seed,
      o.load    ? o.load
      : o.fresh ? "teacher, fresh inputs"
                : "teacher, one batch",
      be->describe(blas, sizeof(blas)));
  printf("# %5s %12s %12s %10s %12s %7s %10s  ms: %s\n", "step", "loss", "mse", "aux", "baseline",
         "ratio", "tokens/s", "router dispatch experts combine backward allreduce optimizer");
  json = o.json ? fopen(o.json, "w") : NULL;
  if (o.json && !json) {
    fprintf(stderr, "moe_train: --json %s: %s\n", o.json, strerror(errno));
    goto done;
  }
  if (json)
    fprintf(json,
            "{\"layers\": %d, \"experts\": %d, \"topk\": %d, \"hidden\": %d, \"ffn\": %d, "
            "\"tokens\": %d, \"lr\": %g, \"aux\": %g, \"seed\": %lu, \"ranks\": 1, "
            "\"blas\": \"%s\", \"steps\": [",
            c->layers, c->experts, c->topk, c->hidden, c->ffn, o.tokens, o.lr, c->aux, o.seed,
            blas);
  int tty = isatty(STDERR_FILENO);
  status = 0;
  double first_ratio = 0.0, last_ratio = 0.0;
  for (int step = 1; step <= o.steps || (step == 1 && o.dump); step++) {
    if (!o.load && (step == 1 || o.fresh))
      synthetic_batch(be, &teacher, &ws, &batch_rng, o.tokens, x, target);
    moe_loss_t loss;
    moe_timing_t tm;
    double t0 = now();
    moe_model_forward(be, &p, &ws, x, target, o.tokens, NULL, &loss, &tm);
    moe_model_backward(be, &p, &ws, target, &g, grad_x, &tm);
    if (step == 1 && o.dump && dump_all(&o, &g, moe_model_output(&ws), grad_x, &loss)) {
      status = 1;
      break;
    }
    if (step > o.steps) break;
    double t1 = now();
    moe_adam_step(&adam, p.data, g.data);
    double t2 = now();
    double base = baseline_loss(x, target, nh), ratio = base > 0 ? loss.total / base : 0.0;
    if (step == 1) first_ratio = ratio;
    last_ratio = ratio;
    double tps = o.tokens / (t2 - t0);
    printf("  %5d %12.6g %12.6g %10.4g %12.6g %7.4f %10.0f  %.3f %.3f %.3f %.3f %.3f %.3f %.3f\n",
           step, loss.total, loss.mse, loss.aux, base, ratio, tps, 1e3 * tm.router,
           1e3 * tm.dispatch, 1e3 * tm.experts, 1e3 * tm.combine, 1e3 * tm.backward, 0.0,
           1e3 * (t2 - t1));
    if (tty)
      fprintf(stderr, "\rstep %d/%d loss %.5g (%.1f%% of baseline)", step, o.steps, loss.total,
              100 * ratio);
    if (json)
      fprintf(json,
              "%s\n  {\"step\": %d, \"loss\": %.9g, \"mse\": %.9g, \"aux\": %.9g, "
              "\"baseline\": %.9g, \"tokens_per_s\": %.1f, \"time_s\": {\"router\": %.6g, "
              "\"dispatch\": %.6g, \"experts\": %.6g, \"combine\": %.6g, \"backward\": "
              "%.6g, \"allreduce\": 0, \"optimizer\": %.6g}}",
              step > 1 ? "," : "", step, loss.total, loss.mse, loss.aux, base, tps, tm.router,
              tm.dispatch, tm.experts, tm.combine, tm.backward, t2 - t1);
  }
  if (tty) fprintf(stderr, "\n");
  if (o.steps > 0)
    printf("# loss / baseline: %.4f at step 1, %.4f at step %d\n", first_ratio, last_ratio,
           o.steps);
  if (json) fprintf(json, "\n]}\n");
done:
  if (json && fclose(json)) {
    fprintf(stderr, "moe_train: --json %s: %s\n", o.json, strerror(errno));
    status = 1;
  }
  moe_adam_free(&adam);
  moe_workspace_free(&ws);
  moe_params_free(&p);
  moe_params_free(&g);
  moe_params_free(&teacher);
  free(x);
  free(target);
  free(grad_x);
  return status;
}
