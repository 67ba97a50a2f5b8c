/* moe_plan: ranks the parallel layouts of moe/'s model on a cluster with the
 * planner's resource model (plan.h) and explains the winner.  The cluster's
 * links are an a2a_sim preset or a topology file, priced by moeccl's cost
 * model (moeccl_sim.h); the compute is an accelerator's published-class
 * rates (--gpu h100|h200), this host's probed with the moe/ backend (--gpu
 * host), either changed by --rates/--peak/--mem/--elem-rate.  moe_train --plan
 * plans the same way on the ranks it runs, with their own communicator's
 * topology and costs. */
#define _GNU_SOURCE
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend.h"
#include "plan.h"
#include "pp_sched.h"

static void usage(FILE* f) {
  fprintf(f,
          "usage: moe_plan [model] [cluster] [--top K] [--json FILE] [--layout FLAGS]\n"
          " model: --model deepseek-v3|mixtral-8x7b, or --layers L --experts E --topk K\n"
          "        --hidden H --ffn F --tokens N (tokens per step) [--dense-flops X]\n"
          "        [--dense-params X] (per layer, outside the experts) [--act-bytes B]\n"
          "        (defaults: moe_train's: L=2 E=8 K=2 H=64 F=128 N=256, float32)\n"
          " cluster: --cluster fattree|dragonfly|FILE (a2a_sim's presets, a topology file)\n"
          "        -n R (ranks; default the preset's) [--costs SPEC] (moecclSimSetCosts)\n"
          "        compute: --gpu h100 (default) or h200 (published-class rates), or\n"
          "        --gpu host (this host's cores, probed); over either --rates\n"
          "        m:TFLOPS,... --peak TFLOPS --mem GiB --elem-rate GB/s\n"
          "        [--cores C] (0: each rank has an accelerator) [--param-bytes B]\n"
          "        [--call-us US] (a call's cost beyond the cost model's price)\n"
          " --layout FLAGS: predict that layout only (moe_train's flags, e.g.\n"
          "        \"--pp 2 --ep 2 --microbatches 4 --schedule 1f1b\")\n");
}

/* Published-class rates of one GPU (bfloat16 dense): the GEMM rate by rows
 * is an assumption (skinny GEMMs reach a fraction of the peak), stated in
 * docs/PLANNER.md; memory and bandwidth from the data sheets. */
static void gpu(plan_machine_t* mc, int h200) {
  static const int rows[] = {16, 64, 256, 1024, 4096};
  static const double frac[] = {0.06, 0.25, 0.55, 0.70, 0.75};
  mc->peak = 989e12;
  mc->nrates = 5;
  for (int i = 0; i < 5; i++) mc->rate_rows[i] = rows[i], mc->rate[i] = frac[i] * mc->peak;
  mc->mem = (h200 ? 141.0 : 80.0) * (1 << 30);
  mc->elem_rate = (h200 ? 4.8e12 : 3.35e12) * 0.7;
  mc->cores = 0;
  mc->call_s = 20e-6; /* a kernel launch and a stream wait */
  mc->param_bytes = 2;
  mc->mixed = 1;
  mc->name = h200 ? "H200-class GPUs" : "H100-class GPUs";
}

static int parse_rates(const char* s, plan_machine_t* mc) {
  mc->nrates = 0;
  while (*s && mc->nrates < PLAN_RATES) {
    char* end;
    long m = strtol(s, &end, 10);
    if (end == s || *end != ':' || m < 1) return -1;
    double t = strtod(end + 1, &end);
    if (!(t > 0)) return -1;
    mc->rate_rows[mc->nrates] = (int)m, mc->rate[mc->nrates++] = t * 1e12;
    if (*end == ',') end++;
    else if (*end) return -1;
    s = end;
  }
  return mc->nrates > 0 ? 0 : -1;
}

/* --layout's flags into a layout; P and D not given are filled in as
 * moe_train does (D = 1, or one from the other and R / S). */
static int parse_layout(const char* text, int ranks, plan_layout_t* lay) {
  *lay = (plan_layout_t){1, 0, 0, 1, 1, 1, PP_1F1B, 0};
  char* dup = strdup(text);
  if (!dup) return -1;
  int rc = 0;
  for (char *save = NULL, *w = strtok_r(dup, " ", &save); w && !rc; w = strtok_r(NULL, " ", &save)) {
    if (!strcmp(w, "--overlap")) {
      lay->overlap = 1;
      continue;
    }
    char* v = strtok_r(NULL, " ", &save);
    if (!v) rc = -1;
    else if (!strcmp(w, "--pp")) lay->S = atoi(v);
    else if (!strcmp(w, "--ep")) lay->P = atoi(v);
    else if (!strcmp(w, "--dp")) lay->D = atoi(v);
    else if (!strcmp(w, "--vstages")) lay->V = atoi(v);
    else if (!strcmp(w, "--microbatches")) lay->M = atoi(v);
    else if (!strcmp(w, "--chunks")) lay->C = atoi(v);
    else if (!strcmp(w, "--schedule")) rc = (lay->schedule = pp_sched_lookup(v)) < 0;
    else rc = -1;
  }
  free(dup);
  if (rc || lay->S < 1) return -1;
  int Q = ranks / lay->S;
  if (!lay->P && !lay->D) lay->P = Q, lay->D = 1;
  else if (!lay->P) lay->P = lay->D > 0 ? Q / lay->D : 0;
  else if (!lay->D) lay->D = Q / lay->P;
  return 0;
}

int main(int argc, char** argv) {
  enum { O_MODEL = 256, O_L, O_E, O_K, O_H, O_F, O_N, O_DF, O_DP, O_AB, O_CLUSTER, O_COSTS,
         O_GPU, O_RATES, O_PEAK, O_MEM, O_ELEM, O_CORES, O_PB, O_TOP, O_JSON, O_LAYOUT,
         O_CALL };
  static const struct option opts[] = {
      {"model", 1, 0, O_MODEL},       {"layers", 1, 0, O_L},       {"experts", 1, 0, O_E},
      {"topk", 1, 0, O_K},            {"hidden", 1, 0, O_H},       {"ffn", 1, 0, O_F},
      {"tokens", 1, 0, O_N},          {"dense-flops", 1, 0, O_DF}, {"dense-params", 1, 0, O_DP},
      {"act-bytes", 1, 0, O_AB},      {"cluster", 1, 0, O_CLUSTER}, {"costs", 1, 0, O_COSTS},
      {"gpu", 1, 0, O_GPU},           {"rates", 1, 0, O_RATES},    {"peak", 1, 0, O_PEAK},
      {"mem", 1, 0, O_MEM},           {"elem-rate", 1, 0, O_ELEM}, {"cores", 1, 0, O_CORES},
      {"param-bytes", 1, 0, O_PB},    {"top", 1, 0, O_TOP},        {"json", 1, 0, O_JSON},
      {"layout", 1, 0, O_LAYOUT},     {"call-us", 1, 0, O_CALL},   {"help", 0, 0, 'h'},
      {0, 0, 0, 0}};
  plan_model_t m = {2, 8, 2, 64, 128, 256, 4, 0, 0};
  plan_machine_t mc = {0};
  mc.param_bytes = 4;
  const char *cluster = "fattree", *costs = NULL, *json = NULL, *layout = NULL, *rates = NULL;
  int ranks = 0, top = 12, gpu_kind = 0, cores = -1;
  double peak = 0, mem = 0, elem_rate = 0, call_us = -1;
  int c;
  while ((c = getopt_long(argc, argv, "hn:", opts, NULL)) != -1) {
    switch (c) {
      case O_MODEL:
        if (!strcmp(optarg, "deepseek-v3")) /* the 58 MoE layers of DeepSeek-V3 */
          m = (plan_model_t){58, 256, 8, 7168, 2048, 15360LL * 4096, 2, 0.8e9, 2.3e8};
        else if (!strcmp(optarg, "mixtral-8x7b"))
          m = (plan_model_t){32, 8, 2, 4096, 14336, 1024LL * 4096, 2, 1.2e8, 4.2e7};
        else {
          fprintf(stderr, "moe_plan: --model %s: deepseek-v3 or mixtral-8x7b\n", optarg);
          return 2;
        }
        break;
      case O_L: m.layers = atoi(optarg); break;
      case O_E: m.experts = atoi(optarg); break;
      case O_K: m.topk = atoi(optarg); break;
      case O_H: m.hidden = atoi(optarg); break;
      case O_F: m.ffn = atoi(optarg); break;
      case O_N: m.tokens = atoll(optarg); break;
      case O_DF: m.dense_flops_tok = atof(optarg); break;
      case O_DP: m.dense_params = atof(optarg); break;
      case O_AB: m.act_bytes = atoi(optarg); break;
      case O_CLUSTER: cluster = optarg; break;
      case O_COSTS: costs = optarg; break;
      case O_GPU:
        if (strcmp(optarg, "h100") && strcmp(optarg, "h200") && strcmp(optarg, "host")) {
          fprintf(stderr, "moe_plan: --gpu %s: h100, h200 or host\n", optarg);
          return 2;
        }
        gpu_kind = !strcmp(optarg, "host") ? 2 : !strcmp(optarg, "h200");
        break;
      case O_RATES: rates = optarg; break;
      case O_PEAK: peak = atof(optarg) * 1e12; break;
      case O_MEM: mem = atof(optarg) * (1 << 30); break;
      case O_ELEM: elem_rate = atof(optarg) * 1e9; break;
      case O_CORES: cores = atoi(optarg); break;
      case O_CALL: call_us = atof(optarg); break;
      case O_PB: mc.param_bytes = atoi(optarg); break;
      case 'n': ranks = atoi(optarg); break;
      case O_TOP: top = atoi(optarg); break;
      case O_JSON: json = optarg; break;
      case O_LAYOUT: layout = optarg; break;
      case 'h': usage(stdout); return 0;
      default: usage(stderr); return 2;
    }
  }
  if (optind < argc || m.layers < 1 || m.experts < 1 || m.topk < 1 || m.topk > m.experts ||
      m.hidden < 1 || m.ffn < 1 || m.tokens < 1 || m.act_bytes < 1 || mc.param_bytes < 1 ||
      ranks < 0) {
    fprintf(stderr, "moe_plan: bad model or ranks (all positive, K <= E)\n");
    usage(stderr);
    return 2;
  }
  if (moecclSimCreate(&mc.sim, cluster, ranks) != moecclSuccess) {
    fprintf(stderr, "moe_plan: --cluster %s: %s\n", cluster, moecclGetLastError(NULL));
    return 2;
  }
  if (costs && moecclSimSetCosts(mc.sim, costs) != moecclSuccess) {
    fprintf(stderr, "moe_plan: --costs: %s\n", moecclGetLastError(NULL));
    moecclSimDestroy(mc.sim);
    return 2;
  }
  moecclSimRanks(mc.sim, &mc.ranks);
  char where[1024];
  moecclSimDescribe(mc.sim, where, sizeof(where));
  /* ranks per node: the description's "N nodes x K" */
  const char* rpn = strstr(where, " nodes x ");
  mc.ranks_per_node = rpn ? atoi(rpn + 9) : mc.ranks;
  if (mc.ranks_per_node < 1) mc.ranks_per_node = mc.ranks;
  if (gpu_kind != 2) {
    gpu(&mc, gpu_kind);
  } else {
    plan_probe(moe_backend_blas(1), m.hidden, m.ffn, m.layers, m.experts,
               (int)(m.tokens / (mc.ranks > 0 ? mc.ranks : 1)), &mc);
    mc.param_bytes = 4;
    if (mc.nrates < 1) {
      fprintf(stderr, "moe_plan: --gpu host: the probe found no memory\n");
      moecclSimDestroy(mc.sim);
      return 1;
    }
    for (int i = 0; i < mc.nrates; i++) /* MFU's peak: the fastest the probe saw */
      if (mc.rate[i] > mc.peak) mc.peak = mc.rate[i];
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    mc.cores = n > 0 ? (int)n : 1;
    mc.name = "this host's cores (probed)";
  }
  if (rates && parse_rates(rates, &mc)) {
    fprintf(stderr, "moe_plan: --rates %s: want m:TFLOPS,m:TFLOPS,...\n", rates);
    moecclSimDestroy(mc.sim);
    return 2;
  }
  if (peak > 0) mc.peak = peak;
  if (mem > 0) mc.mem = mem;
  if (elem_rate > 0) mc.elem_rate = elem_rate;
  if (cores >= 0) mc.cores = cores;
  if (call_us >= 0) mc.call_s = call_us * 1e-6;
  plan_pred_t* p = NULL;
  int n;
  if (layout) {
    plan_layout_t lay;
    char err[256] = "unknown or incomplete flags (want --pp, --ep, --dp, --vstages, "
                    "--microbatches, --chunks, --schedule NAME, --overlap)";
    p = calloc(1, sizeof(*p));
    if (!p || parse_layout(layout, mc.ranks, &lay) ||
        plan_predict(&m, &mc, &lay, p, err, sizeof(err))) {
      fprintf(stderr, "moe_plan: --layout %s: %s\n", layout, p ? err : "out of memory");
      free(p);
      moecclSimDestroy(mc.sim);
      return 2;
    }
    n = 1;
  } else if ((n = plan_search(&m, &mc, &p)) < 1) {
    fprintf(stderr, "moe_plan: no layout of %d ranks applies to this model\n", mc.ranks);
    free(p);
    moecclSimDestroy(mc.sim);
    return 1;
  }
  printf("# cluster: %s\n", cluster);
  plan_report(stdout, &m, &mc, p, n, top);
  int rc = 0;
  if (json) {
    FILE* f = fopen(json, "w");
    if (!f) {
      fprintf(stderr, "moe_plan: --json %s: %s\n", json, strerror(errno));
      rc = 1;
    } else {
      char flags[160];
      fprintf(f, "{\"cluster\": \"%s\", \"ranks\": %d, \"layouts\": [", cluster, mc.ranks);
      for (int i = 0; i < n; i++)
        fprintf(f, "%s\n  {\"flags\": \"%s\", \"fits\": %d, \"step_s\": %.9g, \"compute_s\": %.9g, "
                "\"comm_s\": %.9g, \"comm_exposed_s\": %.9g, \"bubble\": %.6f, \"allreduce_s\": "
                "%.9g, \"optimizer_s\": %.9g, \"mem_bytes\": %.6g, \"mfu\": %.6f}", i ? "," : "",
                plan_flags(&p[i].lay, flags, sizeof(flags)), p[i].fits, p[i].step, p[i].compute,
                p[i].comm, p[i].comm_exposed, p[i].bubble, p[i].allreduce, p[i].optimizer,
                p[i].mem, p[i].mfu);
      fprintf(f, "\n]}\n");
      if (fclose(f)) rc = 1;
    }
  }
  free(p);
  moecclSimDestroy(mc.sim);
  return rc;
}
