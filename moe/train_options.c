/* moe_train's command line: usage, the flags' parsing, the shapes left open
 * taken from --load's files, and R = P x D resolved from -n, --ep, --dp (or
 * the MPI launch). */
#define _GNU_SOURCE
#include "train_options.h"

#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "npy.h"
#include "pp_sched.h"

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
               "  --device D    host (default), cuda (every tensor in GPU memory: cuBLAS and\n"
               "                moe/'s kernels; MOE_CUDA_STANDIN=1 runs the host stand-in) or\n"
               "                auto (cuda where a GPU is found, else host)\n"
               "  --gemm P      the matrix products' inputs: fp32 (default) or bf16 (rounded\n"
               "                to bfloat16, summed in float32, on either device)\n"
               "  --load DIR    wg{l}.npy w1_{l}.npy w3_{l}.npy w2_{l}.npy x.npy target.npy;\n"
               "                shapes not given as flags are taken from the files\n"
               "  --dump DIR    first step's out.npy grad_x.npy grad_wg{l}.npy grad_w1_{l}.npy\n"
               "                grad_w3_{l}.npy grad_w2_{l}.npy loss.txt\n"
               "  --json FILE   per-step loss, tokens/s and time split as JSON\n"
               "  -n R          fork R local ranks (default: P * D, or mpirun's -np)\n"
               "  --ep P        expert-parallel ranks per group (default R / D)\n"
               "  --dp D        data-parallel groups (default R / P); R = P * D, P divides E\n"
               "  --chunks C    split each rank's tokens into C chunks per layer, each with\n"
               "                its own plan; a chunk's experts run while the next chunk's\n"
               "                dispatch and the last one's combine are queued on a host\n"
               "                stream (1)\n"
               "  --pp S        pipeline stages: the layers split into S contiguous stages;\n"
               "                R = S * P * D (1)\n"
               "  --microbatches M  micro-batches per step (1); the optimizer steps once\n"
               "                per step whatever S and M are\n"
               "  --schedule NAME   gpipe, 1f1b (default), interleaved, zb-h1\n"
               "  --vstages V   model chunks per stage (interleaved only; 1)\n"
               "  --split LIST  layers per virtual stage, S*V numbers summing to L\n"
               "                (default: as even as possible, the first ones larger)\n"
               "  --overlap     a forward next to the backward of another micro-batch (the\n"
               "                1f1b-overlap schedule's steady state) run layer by layer\n"
               "                interleaved, each one's EP exchanges on a host stream under\n"
               "                the other's compute (needs --chunks 1)\n"
               "  --timeline FILE   the last step's pipeline ops per stage as JSON\n"
               "                (scripts/pp_timeline.py draws it)\n"
               "  --rebalance-every N  every N steps, place the experts so that each EP\n"
               "                rank's load (the router's counts since) evens out; their\n"
               "                weights and Adam state move with them (0: never)\n"
               "  --replicas X  X more expert slots in each EP group, for copies of the\n"
               "                hottest experts (EPLB's redundant experts); (E + X) %% P = 0\n"
               "  --skew A      synthetic task: inputs with a common direction that the\n"
               "                routers of student and teacher favour for low expert ids,\n"
               "                expert e by A * ln(E / (e + 1)) (0)\n"
               "  --plan        the planner (moe_plan(1)) ranks every layout of the R ranks\n"
               "                with this host's probed compute and the communicator's\n"
               "                costs; rank 0 prints the ranking and all train with the\n"
               "                winner (--pp, --ep, --dp, --microbatches, --schedule,\n"
               "                --vstages, --chunks, --overlap given are replaced)\n"
               "  --plan-json FILE  --plan, and every layout's prediction as JSON\n"
               "  under MPI:    mpirun -np R moe_train [--pp S --ep P --dp D] ...\n");
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
  if (errno || *end || !(v >= 0.0f) || !isfinite(v)) {
    fprintf(stderr, "moe_train: --%s %s: want a finite number >= 0\n", name, text);
    return -1;
  }
  *out = v;
  return 0;
}

/* 0, 1 when help was asked, -1 on a bad argument. */
int parse_options(int argc, char** argv, train_options_t* o) {
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
    O_FRESH,
    O_PP,
    O_MICRO,
    O_SCHEDULE,
    O_VSTAGES,
    O_SPLIT,
    O_TIMELINE,
    O_OVERLAP,
    O_REBALANCE,
    O_REPLICAS,
    O_SKEW,
    O_PLAN,
    O_PLAN_JSON,
    O_DEVICE,
    O_GEMM
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
      {"pp", 1, 0, O_PP},           {"microbatches", 1, 0, O_MICRO},
      {"schedule", 1, 0, O_SCHEDULE}, {"vstages", 1, 0, O_VSTAGES},
      {"split", 1, 0, O_SPLIT},     {"timeline", 1, 0, O_TIMELINE},
      {"overlap", 0, 0, O_OVERLAP}, {"rebalance-every", 1, 0, O_REBALANCE},
      {"replicas", 1, 0, O_REPLICAS}, {"skew", 1, 0, O_SKEW},
      {"plan", 0, 0, O_PLAN},       {"plan-json", 1, 0, O_PLAN_JSON},
      {"device", 1, 0, O_DEVICE},   {"gemm", 1, 0, O_GEMM},
      {"help", 0, 0, 'h'},          {0, 0, 0, 0}};
  *o = (train_options_t){
      .cfg = {2, 8, 2, 64, 128, 0.01f}, .tokens = 256, .steps = 200, .lr = 0.003f, .seed = 1,
      .chunks = 1, .pp = 1, .vstages = 1, .microbatches = 1, .schedule = PP_1F1B};
  int c, seed = 0, rc = 0;
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
      case O_EP: rc = parse_int("ep", optarg, 1, &o->ep); break;
      case O_DP: rc = parse_int("dp", optarg, 1, &o->dp); break;
      case 'n': rc = parse_int("n", optarg, 1, &o->ranks); break;
      case O_CHUNKS:
        rc = parse_int("chunks", optarg, 1, &o->chunks);
        break;
      case O_PP: rc = parse_int("pp", optarg, 1, &o->pp); break;
      case O_MICRO: rc = parse_int("microbatches", optarg, 1, &o->microbatches); break;
      case O_VSTAGES: rc = parse_int("vstages", optarg, 1, &o->vstages); break;
      case O_SPLIT: o->split = optarg; break;
      case O_TIMELINE: o->timeline = optarg; break;
      case O_OVERLAP: o->overlap = 1; break;
      case O_REBALANCE: rc = parse_int("rebalance-every", optarg, 0, &o->rebalance_every); break;
      case O_REPLICAS: rc = parse_int("replicas", optarg, 0, &o->replicas); break;
      case O_SKEW: rc = parse_float("skew", optarg, &o->skew); break;
      case O_PLAN: o->plan = 1; break;
      case O_PLAN_JSON: o->plan_json = optarg, o->plan = 1; break;
      case O_DEVICE:
        if (!strcmp(optarg, "host")) o->device = TRAIN_DEVICE_HOST;
        else if (!strcmp(optarg, "cuda")) o->device = TRAIN_DEVICE_CUDA;
        else if (!strcmp(optarg, "auto")) o->device = TRAIN_DEVICE_AUTO;
        else {
          fprintf(stderr, "moe_train: --device %s: want host, cuda or auto\n", optarg);
          rc = -1;
        }
        break;
      case O_GEMM:
        if (!strcmp(optarg, "fp32")) o->gemm_bf16 = 0;
        else if (!strcmp(optarg, "bf16")) o->gemm_bf16 = 1;
        else {
          fprintf(stderr, "moe_train: --gemm %s: want fp32 or bf16\n", optarg);
          rc = -1;
        }
        break;
      case O_SCHEDULE:
        o->schedule = pp_sched_lookup(optarg);
        if (o->schedule < 0) {
          fprintf(stderr, "moe_train: --schedule %s: want one of %s\n", optarg, pp_sched_names());
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
int infer_shapes(train_options_t* o) {
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

/* The layers of each of the nv virtual stages: --split's list, or as even
 * as possible; 0, or -1 with a message. */
static int split_layers(train_options_t* o, int nv) {
  int L = o->cfg.layers;
  o->layer_start = calloc(nv + 1, sizeof(int));
  if (!o->layer_start) {
    fprintf(stderr, "moe_train: out of memory\n");
    return -1;
  }
  if (!o->split) {
    if (L < nv) {
      fprintf(stderr, "moe_train: %d layers do not fill %d virtual stages (--pp x --vstages)\n",
              L, nv);
      free(o->layer_start);
      o->layer_start = NULL;
      return -1;
    }
    for (int j = 0; j <= nv; j++) o->layer_start[j] = j * (L / nv) + (j < L % nv ? j : L % nv);
    return 0;
  }
  const char* t = o->split;
  for (int j = 0; j < nv; j++) {
    char* end;
    errno = 0;
    long v = strtol(t, &end, 10);
    if (errno || end == t || v < 1 || v > L || (j + 1 < nv ? *end != ',' : *end != 0)) {
      fprintf(stderr,
              "moe_train: --split %s: want %d layer counts >= 1 separated by commas (one per "
              "virtual stage, S x V)\n",
              o->split, nv);
      free(o->layer_start);
      o->layer_start = NULL;
      return -1;
    }
    o->layer_start[j + 1] = o->layer_start[j] + (int)v;
    t = end + 1;
  }
  if (o->layer_start[nv] != L) {
    fprintf(stderr, "moe_train: --split %s: %d layers, the model has %d\n", o->split,
            o->layer_start[nv], L);
    free(o->layer_start);
    o->layer_start = NULL;
    return -1;
  }
  return 0;
}

/* R, S, P and D from the flags (and the launcher's R); 0, or -1 with a message. */
int resolve_layout(train_options_t* o, int launched) {
  int R = launched ? launched : o->ranks;
  if (launched && o->ranks && o->ranks != launched) {
    fprintf(stderr, "moe_train: -n %d under an MPI launch of %d ranks: give one of them\n",
            o->ranks, launched);
    return -1;
  }
  int S = o->pp;
  if (!R) {
    long long r = (long long)S * (o->ep ? o->ep : 1) * (o->dp ? o->dp : 1);
    if (r > 256) {
      fprintf(stderr, "moe_train: --pp %d x --ep %d x --dp %d ranks: at most 256\n", S, o->ep,
              o->dp);
      return -1;
    }
    R = (int)r;
  }
  if (R > 256) {
    fprintf(stderr, "moe_train: %d ranks: at most 256\n", R);
    return -1;
  }
  if (o->plan) { /* the planner picks the layout on the ranks; only R is needed now */
    o->ranks = R;
    return 0;
  }
  if (R % S) {
    fprintf(stderr, "moe_train: %d ranks do not split into --pp %d stages\n", R, S);
    return -1;
  }
  int Q = R / S; /* ranks per stage */
  if (!o->ep && !o->dp) o->ep = Q, o->dp = 1;
  else if (!o->ep) o->ep = Q % o->dp ? 0 : Q / o->dp;
  else if (!o->dp) o->dp = Q % o->ep ? 0 : Q / o->ep;
  if (o->ep < 1 || o->dp < 1 || (long long)o->ep * o->dp != Q) {
    fprintf(stderr,
            "moe_train: %d ranks do not split as --pp %d x --ep %d x --dp %d (R = S * P * D)\n",
            R, S, o->ep, o->dp);
    return -1;
  }
  if (o->cfg.experts % o->ep) {
    fprintf(stderr, "moe_train: --ep %d does not divide the %d experts\n", o->ep,
            o->cfg.experts);
    return -1;
  }
  if (o->vstages > 1 && o->schedule != PP_INTERLEAVED) {
    fprintf(stderr, "moe_train: --vstages %d needs --schedule interleaved\n", o->vstages);
    return -1;
  }
  if ((o->cfg.experts + (long long)o->replicas) % o->ep ||
      o->replicas > (long long)o->cfg.experts * (o->ep - 1)) {
    fprintf(stderr,
            "moe_train: --replicas %d: the %d experts and their copies must fill --ep %d ranks "
            "evenly, at most one copy of an expert per rank\n",
            o->replicas, o->cfg.experts, o->ep);
    return -1;
  }
  if (o->overlap && o->chunks > 1) {
    fprintf(stderr, "moe_train: --overlap runs one chunk per layer: not with --chunks %d\n",
            o->chunks);
    return -1;
  }
  if (S > 64) {
    fprintf(stderr, "moe_train: --pp %d: at most 64 stages\n", S);
    return -1;
  }
  if (o->microbatches > o->tokens) {
    fprintf(stderr, "moe_train: --microbatches %d: more than the %d tokens\n", o->microbatches,
            o->tokens);
    return -1;
  }
  if ((long long)S * o->vstages > o->cfg.layers) {
    fprintf(stderr, "moe_train: %d layers do not fill %d x %d virtual stages (--pp x --vstages)\n",
            o->cfg.layers, S, o->vstages);
    return -1;
  }
  if (split_layers(o, S * o->vstages)) return -1;
  /* the schedule itself says what it refuses (interleaved's M % S, ...) */
  pp_sched_t sc;
  char err[256];
  if (pp_sched_build(&sc, o->schedule, S, o->vstages, o->microbatches, err, sizeof(err))) {
    fprintf(stderr, "moe_train: %s\n", err);
    free(o->layer_start);
    o->layer_start = NULL;
    return -1;
  }
  pp_sched_free(&sc);
  o->ranks = R;
  return 0;
}
