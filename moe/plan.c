/* The planner's resource model and search (plan.h).  Every time below is in
 * seconds for one rank of the busiest stage unless it says otherwise. */
#define _GNU_SOURCE
#include "plan.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pp_sched.h"

/* The GEMM rate at m rows: interpolated in log(m) between the probed
 * sizes, the ends held. */
static double rate_at(const plan_machine_t* mc, double m) {
  if (mc->nrates < 1) return 1e9;
  if (m <= mc->rate_rows[0]) return mc->rate[0];
  for (int i = 1; i < mc->nrates; i++)
    if (m <= mc->rate_rows[i]) {
      double a = log(mc->rate_rows[i - 1]), b = log(mc->rate_rows[i]), t = (log(m) - a) / (b - a);
      return mc->rate[i - 1] + t * (mc->rate[i] - mc->rate[i - 1]);
    }
  return mc->rate[mc->nrates - 1];
}

/* flops of GEMMs whose row count is m, at the rate of that m. */
static double gemm(const plan_machine_t* mc, double flops, double m) {
  return m > 0 && flops > 0 ? flops / rate_at(mc, m) : 0.0;
}

/* Whether a node's ranks outnumber its cores. */
static int shared(const plan_machine_t* mc) {
  int rpn = mc->ranks_per_node < mc->ranks ? mc->ranks_per_node : mc->ranks;
  return mc->cores > 0 && rpn > mc->cores;
}

/* What a call among g ranks costs beyond its price: call2_s for 2, call_s
 * for all ranks, between by log2 g.  On ranks that share cores the measured
 * costs are mostly waits for peers the scheduler has not run: a call of one
 * rank has none. */
static double call_cost(const plan_machine_t* mc, int g) {
  if (g <= 1 && shared(mc)) return 0;
  if (mc->call2_s <= 0) return mc->call_s;
  if (g <= 2 || mc->ranks <= 2) return mc->call2_s;
  if (g >= mc->ranks) return mc->call_s;
  double t = log((double)g / 2) / log(mc->ranks / 2.0);
  return mc->call2_s + t * (mc->call_s - mc->call2_s);
}

static double elem(const plan_machine_t* mc, double bytes) {
  return mc->elem_rate > 0 ? bytes / mc->elem_rate : 0.0;
}

/* The prices of the calls the search asks for again and again (the same
 * group size and bytes for many layouts), kept per simulator. */
typedef struct price_key {
  const void* sim;
  int kind, n, stride;
  double bytes;
} price_key_t;

#define PRICE_CACHE 4096
static price_key_t cache_key[PRICE_CACHE];
static double cache_val[PRICE_CACHE];
static const char* cache_algo[PRICE_CACHE];
static int cache_n;

static int cached(const price_key_t* k, double* v, const char** algo) {
  static const void* cache_sim;
  if (k->sim != cache_sim) cache_sim = k->sim, cache_n = 0; /* another simulator */
  for (int i = 0; i < cache_n; i++)
    if (!memcmp(&cache_key[i], k, sizeof(*k))) {
      *v = cache_val[i];
      if (algo) *algo = cache_algo[i];
      return 1;
    }
  return 0;
}

static void remember(const price_key_t* k, double v, const char* algo) {
  int i = cache_n < PRICE_CACHE ? cache_n++ : (int)((unsigned long long)k->bytes % PRICE_CACHE);
  cache_key[i] = *k, cache_val[i] = v, cache_algo[i] = algo;
}

enum { K_A2AV, K_A2A, K_AR, K_P2P };

/* One of the calls below, priced once: an all-to-all(v) of n members
 * 0..n-1 with `bytes` from each to each, an all-reduce of n members
 * spaced by stride, a send from 0 to n. */
static moecclResult_t price(moecclSim_t sim, int kind, int n, int stride, double bytes,
                            double* seconds, const char** algo) {
  price_key_t k;
  memset(&k, 0, sizeof(k));
  k.sim = sim, k.kind = kind, k.n = n, k.stride = stride, k.bytes = bytes;
  if (cached(&k, seconds, algo)) return moecclSuccess;
  int* members = calloc((size_t)n + 1, sizeof(int));
  size_t* mat = kind == K_A2AV ? calloc((size_t)n * n, sizeof(size_t)) : NULL;
  const char* used = NULL;
  moecclResult_t r = moecclSystemError;
  if (members && (kind != K_A2AV || mat)) {
    for (int i = 0; i < n; i++) members[i] = i * stride;
    switch (kind) {
      case K_A2AV:
        for (size_t i = 0; i < (size_t)n * n; i++) mat[i] = (size_t)bytes;
        r = moecclSimAlltoAllv(sim, members, n, mat, NULL, seconds, &used);
        break;
      case K_A2A: r = moecclSimAlltoAll(sim, members, n, (size_t)bytes, NULL, seconds, &used); break;
      case K_AR:
        r = moecclSimCollective(sim, moecclSimAllReduce, members, n, (size_t)bytes, seconds, &used);
        break;
      default: r = moecclSimSendRecv(sim, 0, n, (size_t)bytes, seconds); break;
    }
  }
  free(members), free(mat);
  if (r == moecclSuccess) remember(&k, *seconds, used);
  if (algo) *algo = used;
  return r;
}

#define SIM_TRY(call)                                                                          \
  do {                                                                                         \
    if ((call) != moecclSuccess) {                                                             \
      snprintf(err, len, "pricing: %s", moecclGetLastError(NULL));                             \
      goto fail;                                                                               \
    }                                                                                          \
  } while (0)

/* A stage's times: what one piece (one micro-batch through the layers of one
 * virtual stage) costs in compute and in EP communication. */
typedef struct piece_cost {
  double f, b, w;          /* compute of the forward, the backward's input half, its weight half */
  double cf, cb;           /* EP communication of the forward and the backward */
  double cf_a2a, cb_a2a;   /* of which the row exchanges (what chunks and overlap can hide) */
} piece_cost_t;

int plan_predict(const plan_model_t* m, const plan_machine_t* mc, const plan_layout_t* lay,
                 plan_pred_t* out, char* err, size_t len) {
  memset(out, 0, sizeof(*out));
  out->lay = *lay;
  int S = lay->S, P = lay->P, D = lay->D, V = lay->V, M = lay->M, C = lay->C;
  int R = S * P * D, Q = P * D, L = m->layers, E = m->experts, K = m->topk;
  double H = m->hidden, F = m->ffn;
  pp_sched_t sc = {0};
  if (S < 1 || P < 1 || D < 1 || V < 1 || M < 1 || C < 1 || R != mc->ranks) {
    snprintf(err, len, "%d x %d x %d ranks, the cluster has %d", S, P, D, mc->ranks);
    return -1;
  }
  if (E % P || L < S * V || (long long)M * Q > m->tokens) {
    snprintf(err, len, "EP %d, %d virtual stages or %d micro-batches do not fit the model", P,
             S * V, M);
    return -1;
  }
  if (pp_sched_build(&sc, lay->schedule, S, V, M, err, len)) return -1;
  pp_check_t chk;
  if (pp_sched_check(&sc, &chk, err, len)) goto fail;
  int nexp = E / P;
  double n = (double)m->tokens / ((double)M * Q); /* tokens of a rank in a micro-batch */
  double rows = n * K;                            /* expert rows a rank computes (even routing) */
  double rows_e = rows / nexp / C;                /* rows of one expert GEMM */
  int nl = (L + S * V - 1) / (S * V);            /* layers of the largest piece */
  double ab = m->act_bytes;

  /* compute of one layer on one micro-batch */
  double dense = m->dense_flops_tok * n;
  /* The rate by rows per expert is that of a whole layer's work over its
   * experts' FLOPs (the probe's): the router and the elementwise work ride
   * on it at E = 8; the router's share beyond that is added. */
  double router = E > 8 ? gemm(mc, 2 * n * H * (E - 8), n) : 0;
  /* an accelerator's rates are its GEMMs': the elementwise work (SwiGLU,
   * softmaxes, residual) is added at its memory rate */
  double ew = mc->cores == 0 ? elem(mc, ab * (6 * rows * F + 3 * n * H + 4 * n * E)) : 0;
  /* Ranks that outnumber their node's cores run at their share of a core
   * all step: a waiting rank spins and yields before it sleeps, and its
   * peers wait for it in turn (measured: a 2-stage pipeline of 4 ranks on 2
   * cores takes its bubble at the shared rate, not at the floor of all
   * work over the cores); what a call's wait adds beyond that is in
   * call_s, measured with the ranks computing between calls. */
  int rpn = mc->ranks_per_node < R ? mc->ranks_per_node : R;
  double sl = mc->cores > 0 && rpn > mc->cores ? (double)rpn / mc->cores : 1;
  double lf = sl * (router + gemm(mc, 6 * rows * H * F, rows_e) + gemm(mc, dense, n) + ew);
  double lb = lf;
  double lw = sl * (router + gemm(mc, 6 * rows * H * F, rows_e) + gemm(mc, dense, n));

  /* the EP exchanges of one layer on one micro-batch, on EP group 0 of
   * stage 0 (ranks d * P + p, as moe_train lays them out), with even
   * routing: n K / P rows from each rank to each, a C-th of them per chunk */
  double per = n * K / P * H * ab / C;
  double a2a = 0, lay_t = 0, stats = 0, p2p = 0, ar = 0;
  out->algo = "local";
  if (P > 1) {
    SIM_TRY(price(mc->sim, K_A2AV, P, 1, per, &a2a, &out->algo));
    SIM_TRY(price(mc->sim, K_A2A, P, 1, (double)nexp * 8, &lay_t, NULL));
  } else if (mc->cores == 0) {
    a2a = elem(mc, 2 * rows / C * H * ab); /* the rows copied in and out */
  } /* on a host the probe's layer copied them (its local dispatch and combine) */
  if (Q > 1) SIM_TRY(price(mc->sim, K_AR, Q, 1, (2.0 * E + 1) * 4, &stats, NULL));
  if (S > 1) SIM_TRY(price(mc->sim, K_P2P, Q, 0, n * H * ab, &p2p, NULL));
  a2a *= sl, lay_t *= sl, stats *= sl, p2p *= sl;
  /* the gradients' sums after the step: the routers' over the stage, each
   * expert's over its D replicas (ranks p + d * P), per layer of a stage */
  double ar_router = 0, ar_exp = 0, cs = call_cost(mc, P);
  if (Q > 1) SIM_TRY(price(mc->sim, K_AR, Q, 1, H * E * 4, &ar_router, NULL));
  if (D > 1) SIM_TRY(price(mc->sim, K_AR, D, P, (double)nexp * H * F * 4, &ar_exp, NULL));
  ar = nl * V * ((Q > 1) * (sl * ar_router + call_cost(mc, Q)) +
                 (D > 1) * 3 * (sl * ar_exp + call_cost(mc, D)));

  /* Hiding needs a core for the stream's thread (or an accelerator whose
   * copies and network run beside its compute). */
  int hide = mc->cores == 0 || mc->cores >= 2 * rpn;
  piece_cost_t pc;
  pc.f = nl * lf, pc.b = nl * lb, pc.w = nl * lw;
  /* per layer and chunk: the forward's layout, dispatch and combine, the
   * backward's two exchanges; per layer the statistics' sum; each call also
   * pays call_s */
  double csx = (C > 1 || lay->overlap) && mc->stream_call_s > 0 ? mc->stream_call_s : cs;
  pc.cf_a2a = pc.cb_a2a = nl * C * 2 * (a2a + csx);
  pc.cf = pc.cf_a2a + nl * (C * (lay_t + cs) + stats + cs), pc.cb = pc.cb_a2a;
  double exf = pc.cf, exb = pc.cb;
  if (C > 1 && hide) { /* chunk k's experts under k+1's dispatch and k-1's combine */
    double ef = sl * nl * gemm(mc, 6 * rows * H * F, rows_e), eb = 2 * ef;
    exf -= fmin(pc.cf_a2a * (C - 1) / C, ef);
    exb -= fmin(pc.cb_a2a * (C - 1) / C, eb);
  }
  /* --overlap: a forward next to another micro-batch's backward hides each
   * one's exchanges under the other's compute; the share of such pairs is
   * the schedule's */
  int pairs = 0, slots = 0;
  for (int i = 0; i + 1 < sc.nops[0]; i++) {
    const pp_op_t *a = &sc.ops[0][i], *b = &sc.ops[0][i + 1];
    slots += a->kind == PP_F;
    pairs += a->kind == PP_F && b->kind == PP_B && a->mb != b->mb;
  }
  if (lay->overlap && hide && slots > 0) {
    double share = (double)pairs / slots;
    double hid = fmin(pc.cf_a2a + pc.cb_a2a, pc.f + pc.b + (sc.split_w ? 0 : pc.w));
    exf -= share * hid / 2, exb -= share * hid / 2;
  }
  pp_times_t t = {0};
  for (int s = 0; s < S && s < 64; s++) {
    t.f[s] = pc.f + exf;
    t.b[s] = pc.b + exb + (sc.split_w ? 0 : pc.w);
    t.w[s] = sc.split_w ? pc.w : 0;
  }
  t.comm = S > 1 ? p2p + call_cost(mc, 2) : 0;
  pp_sim_t sim;
  if (pp_sched_simulate(&sc, &t, 0, &sim, err, len)) goto fail;
  out->pipe = sim.makespan;
  out->bubble = sim.bubble;
  double pieces = (double)M * V;
  out->compute = pieces * (pc.f + pc.b + pc.w);
  out->comm = pieces * (pc.cf + pc.cb);
  out->comm_exposed = pieces * (exf + exb);
  out->p2p = S > 1 ? pieces * 2 * p2p : 0;
  out->allreduce = ar;
  /* Adam over the parameters a rank holds: 4 reads and 3 writes each */
  double params = nl * V * (H * E + 3.0 * nexp * H * F + m->dense_params);
  out->optimizer = sl * (mc->adam_rate > 0 ? params / mc->adam_rate : elem(mc, 28.0 * params));
  out->step = out->pipe + out->allreduce + out->optimizer;
  /* memory per rank */
  double pb = mc->param_bytes;
  out->mem_weights = params * pb;
  out->mem_optim = mc->mixed ? params * (4 + 12.0 / D) : 3 * params * pb;
  out->peak_act = 0;
  for (int s = 0; s < S && s < 64; s++)
    if (chk.peak_act[s] > out->peak_act) out->peak_act = chk.peak_act[s];
  /* the row buffers a piece keeps per layer: moe_train on a host sizes
   * them for the worst routing (P ranks' chunk tokens, min(K, E/P) rows
   * each, in each of C chunks); at scale a capacity of 1.25 x even routing */
  double kr = K < nexp ? K : nexp;
  double rows_buf = mc->cores > 0 ? P * ceil(n / C) * kr * C : 1.25 * rows;
  double act_layer = n * H + n * E + 2.0 * n * K + rows_buf * (2 * H + 3 * F) +
                     (sc.split_w ? rows_buf * (H + 2 * F) + n * E : 0);
  out->mem_act = out->peak_act * (nl * act_layer + n * H) * ab;
  out->mem_buf = ab * (3 * n * H + n * (E + K) + (rows_buf / C) * (4 * H + 3 * F));
  out->mem = out->mem_weights + out->mem_optim + out->mem_act + out->mem_buf;
  out->fits = mc->mem <= 0 || out->mem <= mc->mem;
  out->flops = 3.0 * m->tokens * L * (2 * H * E + K * 6 * H * F + m->dense_flops_tok);
  out->mfu = mc->peak > 0 && out->step > 0 ? out->flops / (out->step * R * mc->peak) : 0;
  pp_sched_free(&sc);
  return 0;
fail:
  pp_sched_free(&sc);
  return -1;
}

const char* plan_flags(const plan_layout_t* lay, char* buf, size_t len) {
  int k = snprintf(buf, len, "--pp %d --ep %d --dp %d --microbatches %d --schedule %s", lay->S,
                   lay->P, lay->D, lay->M, pp_sched_name(lay->schedule));
  if (lay->V > 1 && k > 0 && (size_t)k < len)
    k += snprintf(buf + k, len - k, " --vstages %d", lay->V);
  if (k > 0 && (size_t)k < len) k += snprintf(buf + k, len - k, " --chunks %d", lay->C);
  if (lay->overlap && k > 0 && (size_t)k < len) snprintf(buf + k, len - k, " --overlap");
  return buf;
}

static int by_time(const void* a, const void* b) {
  const plan_pred_t *x = a, *y = b;
  if (x->fits != y->fits) return y->fits - x->fits;
  return x->step < y->step ? -1 : x->step > y->step;
}

int plan_search(const plan_model_t* m, const plan_machine_t* mc, plan_pred_t** out) {
  int R = mc->ranks, cap = 256, n = 0;
  plan_pred_t* p = malloc(cap * sizeof(*p));
  if (!p) return -1;
  static const int Ms[] = {1, 2, 4, 8, 16, 32, 64, 128, 256}, Cs[] = {1, 2, 4}, Vs[] = {1, 2};
  char err[256];
  for (int S = 1; S <= R && S <= 64; S++) {
    if (R % S || S > m->layers) continue;
    int Q = R / S;
    for (int P = 1; P <= Q; P++) {
      if (Q % P || m->experts % P) continue;
      for (size_t mi = 0; mi < sizeof Ms / sizeof Ms[0]; mi++)
        for (size_t vi = 0; vi < sizeof Vs / sizeof Vs[0]; vi++)
          for (int sch = 0; sch < PP_NSCHEDULES; sch++)
            for (size_t ci = 0; ci < sizeof Cs / sizeof Cs[0]; ci++)
              for (int ov = 0; ov < 2; ov++) {
                plan_layout_t lay = {S, P, Q / P, Vs[vi], Ms[mi], Cs[ci], sch, ov};
                if (S == 1 && sch != PP_1F1B) continue; /* one stage: the same step */
                if ((lay.V > 1) != (sch == PP_INTERLEAVED) || (S == 1 && lay.V > 1)) continue;
                if (ov && (lay.C > 1 || lay.M < 2 || sch != PP_INTERLEAVED)) continue;
                if ((long long)lay.M * Q > m->tokens) continue; /* a token per rank at least */
                if (n == cap) {
                  plan_pred_t* q = realloc(p, 2 * cap * sizeof(*p));
                  if (!q) {
                    free(p);
                    return -1;
                  }
                  p = q, cap *= 2;
                }
                if (plan_predict(m, mc, &lay, &p[n], err, sizeof(err)) == 0) n++;
              }
    }
  }
  qsort(p, n, sizeof(*p), by_time);
  *out = p;
  return n;
}

static void gib(char* buf, size_t len, double bytes) {
  if (bytes >= 1 << 30) snprintf(buf, len, "%.1f GiB", bytes / (1 << 30));
  else if (bytes >= 1 << 20) snprintf(buf, len, "%.1f MiB", bytes / (1 << 20));
  else snprintf(buf, len, "%.0f KiB", bytes / 1024);
}

/* The winner against the runner-up: which part of the step made the
 * difference. */
static void why(FILE* f, const plan_pred_t* a, const plan_pred_t* b) {
  const char* names[] = {"pipeline compute", "exposed EP communication", "pipeline bubble",
                         "gradient all-reduce", "optimizer"};
  double da[5] = {a->compute, a->comm_exposed, a->pipe * a->bubble, a->allreduce, a->optimizer};
  double db[5] = {b->compute, b->comm_exposed, b->pipe * b->bubble, b->allreduce, b->optimizer};
  int worst = 0;
  for (int i = 1; i < 5; i++)
    if (db[i] - da[i] > db[worst] - da[worst]) worst = i;
  fprintf(f, "# the runner-up is %.1f%% slower, most of it in %s (%.3f ms against %.3f ms)\n",
          a->step > 0 ? 100 * (b->step / a->step - 1) : 0, names[worst], 1e3 * db[worst],
          1e3 * da[worst]);
}

void plan_report(FILE* f, const plan_model_t* m, const plan_machine_t* mc, const plan_pred_t* p,
                 int n, int top) {
  char flags[160], mem[32];
  fprintf(f, "# model: L=%d E=%d K=%d H=%d F=%d, %lld tokens per step%s; cluster: %s, %d ranks\n",
          m->layers, m->experts, m->topk, m->hidden, m->ffn, m->tokens,
          m->dense_flops_tok > 0 ? " (+ a dense part per layer)" : "", mc->name, mc->ranks);
  fprintf(f, "# compute: GFLOP/s of the experts by rows per expert");
  for (int i = 0; i < mc->nrates; i++)
    fprintf(f, "%s %d: %.1f", i ? "," : "", mc->rate_rows[i], mc->rate[i] / 1e9);
  fprintf(f, "; elementwise %.2f GB/s; Adam %.0f M parameters/s; a call beyond its price: "
          "%.1f us", mc->elem_rate / 1e9, mc->adam_rate / 1e6, 1e6 * mc->call_s);
  if (mc->call2_s > 0 && mc->ranks > 2)
    fprintf(f, " (%.1f us between 2 ranks)", 1e6 * mc->call2_s);
  if (mc->stream_call_s > 0) fprintf(f, ", %.1f us on a host stream", 1e6 * mc->stream_call_s);
  fprintf(f, "; %s\n",
          !mc->cores   ? "a device per rank"
          : shared(mc) ? "ranks share the cores (each runs at its share all step)"
                       : "a core per rank");
  fprintf(f, "# %4s %10s %8s %8s %8s %8s %8s %10s %6s  %s\n", "rank", "step ms", "compute",
          "comm", "exposed", "bubble%", "a2a", "mem/rank", "MFU%", "layout (moe_train flags)");
  for (int i = 0; i < n && i < top; i++) {
    gib(mem, sizeof(mem), p[i].mem);
    fprintf(f, "# %4d %10.3f %8.3f %8.3f %8.3f %8.1f %8s %10s %6.2f  %s%s\n", i + 1,
            1e3 * p[i].step, 1e3 * p[i].compute, 1e3 * p[i].comm, 1e3 * p[i].comm_exposed,
            100 * p[i].bubble, p[i].algo, mem, 100 * p[i].mfu,
            plan_flags(&p[i].lay, flags, sizeof(flags)), p[i].fits ? "" : " (does not fit)");
  }
  if (n < 1) return;
  const plan_pred_t* w = &p[0];
  char a[32], b[32], c[32], d[32];
  gib(a, sizeof(a), w->mem_weights), gib(b, sizeof(b), w->mem_optim), gib(c, sizeof(c), w->mem_act),
      gib(d, sizeof(d), w->mem_buf);
  fprintf(f, "# winner: %s\n#   time per step %.3f ms: pipeline %.3f (compute %.3f, EP exchanges "
          "%.3f of which %.3f exposed, sends %.3f, bubble %.1f%%), gradient all-reduce %.3f, "
          "optimizer %.3f%s\n",
          plan_flags(&w->lay, flags, sizeof(flags)), 1e3 * w->step, 1e3 * w->pipe,
          1e3 * w->compute, 1e3 * w->comm, 1e3 * w->comm_exposed, 1e3 * w->p2p, 100 * w->bubble,
          1e3 * w->allreduce, 1e3 * w->optimizer,
          shared(mc) ? " (every part at the ranks' share of the cores)" : "");
  fprintf(f, "#   memory per rank: weights %s, gradients and Adam %s, activations %s (%d in "
          "flight), buffers %s\n", a, b, c, w->peak_act, d);
  if (n > 1) why(f, w, &p[1]);
}
