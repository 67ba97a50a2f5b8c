/*
 * moe_perf --device cuda (moe_dev.c) - one MoE layer's communication on
 * device buffers, moeccl against what a framework does without a dedicated
 * library, on the same ranks, router output, data and stream, interleaved
 * rep by rep, next to a device copy roofline:
 *
 *   moeccl  moecclMoeLayout + moecclMoeDispatch + moecclMoeCombine (the
 *           gate weights in host memory, as the API reads them);
 *   base    what a framework does without a dedicated library
 *           (moe_dev_base.c): permute on the device into send order, the
 *           counts' all-to-all, grouped ncclSend/ncclRecv of the rows
 *           there and back, unpermute with the weighted sum on the device;
 *           NCCL >= 2.30 by dlopen, as a2a_dev_perf, or with --baseline
 *           moeccl the same path on moeccl's calls of the same shape, so
 *           that it is checked where NCCL cannot run (the emulation);
 *   roof    every rank copies, at once, the expert rows dispatch writes
 *           and the token rows combine writes, within device memory.
 * The expert computation is the identity.  Router output and tokens as
 * moe_perf's host tool (seeded Zipf-ish top-K, elements -1/0/1, weights
 * 2^-(j+1)): every result is exact in float32 and bfloat16 and both are
 * checked element by element.  Ranks are forked (-n R, no MPI), all on
 * device 0, each with its own stream; MOECCL_DEVICE picks the backend.
 */
#define _GNU_SOURCE
#include "moe_dev.h"

#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "device/device.h"
#include "kernels/devmath.h"
#include "moe_dev_int.h"
#include "perf_parse.h"
#include "perf_rand.h"

#define SEED 0x6d6f6563636cULL /* moe_perf's: the same router output */
#define SENTINEL 0xA5          /* the bytes of an output before a check */

static shared_t* S;

/* n <= 4 values of every rank: their sums and their maxima over the ranks. */
static void gather(const double* mine, int n, double* sum, double* max) {
  memcpy(S->v[dev_me], mine, (size_t)n * sizeof *mine);
  dev_barrier();
  for (int i = 0; i < n; i++) {
    sum[i] = 0, max[i] = -INFINITY;
    for (int r = 0; r < dev_nranks; r++) sum[i] += S->v[r][i], max[i] = fmax(max[i], S->v[r][i]);
  }
  dev_barrier(); /* nobody writes v again before everyone read it */
}

static void* dev_alloc(size_t bytes) {
  void* p = NULL;
  if (moecclMemAllocDevice(&p, bytes ? bytes : 64, 0) != moecclSuccess)
    dev_die("moecclMemAllocDevice(%zu): %s", bytes, moecclGetLastError(NULL));
  return p;
}

static void* xcalloc(size_t n, size_t size) {
  void* p = calloc(n ? n : 1, size);
  if (!p) dev_die("out of host memory");
  return p;
}

static float bf2f(uint16_t b) {
  uint32_t u = (uint32_t)b << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

static float get_el(const bench_t* b, const char* row, size_t h) {
  float f;
  uint16_t v;
  if (b->dt == moecclFloat32) return memcpy(&f, row + 4 * h, 4), f;
  memcpy(&v, row + 2 * h, 2);
  return bf2f(v);
}

/* Top-K distinct experts per token (moe_perf's draw) and the weights. */
static void make_router(bench_t* b) {
  const options_t* o = b->o;
  if (perf_moe_router(o->E, b->K, b->T, o->skew, o->seed, dev_me, b->ids, b->w))
    dev_die("out of memory for the router output (%d experts)", o->E);
}

static void make_tokens(bench_t* b) {
  for (size_t t = 0; t < b->T; t++)
    for (size_t h = 0; h < b->H; h++) {
      uint64_t v = perf_mix64(b->o->seed ^ ((uint64_t)dev_me << 48) ^ (t * 0x10001ULL + h));
      float f = (float)((int)(v % 3) - 1);
      uint32_t u;
      memcpy(&u, &f, 4);
      uint16_t bf = (uint16_t)(u >> 16); /* -1, 0 and 1 are exact in bfloat16 */
      if (b->dt == moecclFloat32) memcpy(b->tok_h + t * b->rb + 4 * h, &f, 4);
      else memcpy(b->tok_h + t * b->rb + 2 * h, &bf, 2);
    }
}

/* ---- the three calls ----------------------------------------------------- */

static void issue_moeccl(bench_t* b) {
  moecclResult_t r = moecclMoeLayout(b->plan, b->ids, b->T, b->K, 0, b->recv_counts, NULL);
  if (r == moecclSuccess)
    r = moecclMoeDispatch(b->plan, b->tok, b->rows, b->R, b->H, b->dt, b->stream);
  if (r == moecclSuccess)
    r = moecclMoeCombine(b->plan, b->rows, b->R, b->w, b->out_moe, b->H, b->dt, b->stream);
  if (r != moecclSuccess)
    dev_die("moeccl MoE: %s: %s", moecclGetErrorString(r), moecclGetLastError(b->comm));
}

static void issue(bench_t* b, int lib) {
  if (lib == LIB_MOECCL) return issue_moeccl(b);
  if (lib == LIB_BASE) return moe_dev_base_issue(b);
  if (b->R)
    moe_dev_check(b->d->copy_async(b->roof, b->rows, b->R * b->rb, b->stream), "copy_async");
  moe_dev_check(b->d->copy_async(b->roof, b->tok, b->T * b->rb, b->stream), "copy_async");
}

/* Elements of out (device) that differ from x[t] * sum_j w[t][j]. */
static double wrong_of(bench_t* b, const char* out) {
  moe_dev_check(b->d->synchronize(b->stream), "stream synchronize");
  moe_dev_check(moeccl_device_copy(b->host, out, b->T * b->rb), "copy from the device");
  double bad = 0;
  for (size_t t = 0; t < b->T; t++) {
    float ws = 0;
    for (int j = 0; j < b->K; j++)
      if (b->ids[t * (size_t)b->K + (size_t)j] >= 0) ws += b->w[t * (size_t)b->K + (size_t)j];
    for (size_t h = 0; h < b->H; h++)
      bad += get_el(b, b->host + t * b->rb, h) != get_el(b, b->tok_h + t * b->rb, h) * ws;
  }
  return bad;
}

/* One call on an output filled with SENTINEL; its wrong elements. */
static double check_once(bench_t* b, int lib) {
  char* out = lib == LIB_MOECCL ? b->out_moe : b->out_base;
  memset(b->host, SENTINEL, b->T * b->rb);
  moe_dev_check(moeccl_device_copy(out, b->host, b->T * b->rb), "copy to the device");
  issue(b, lib);
  return wrong_of(b, out);
}

/* Seconds per call of lib, the slowest rank's, over o->iters calls. */
static double series(bench_t* b, int lib) {
  for (int i = 0; i < b->o->warmup; i++) issue(b, lib);
  moe_dev_check(b->d->synchronize(b->stream), "stream synchronize");
  dev_barrier();
  double t0 = dev_now();
  for (int i = 0; i < b->o->iters; i++) issue(b, lib);
  moe_dev_check(b->d->synchronize(b->stream), "stream synchronize");
  double mine = (dev_now() - t0) / b->o->iters, sum, max;
  gather(&mine, 1, &sum, &max);
  return max;
}

/* ---- one configuration ------------------------------------------------------ */

static void config_open(bench_t* b, size_t T, int K, moecclDataType_t dt) {
  const options_t* o = b->o;
  int E = o->E;
  b->T = T, b->K = K, b->dt = dt, b->H = o->H, b->TK = T * (size_t)K;
  b->rb = o->H * (dt == moecclFloat32 ? 4 : 2);
  b->ids = xcalloc(b->TK, sizeof *b->ids);
  b->w = xcalloc(b->TK, sizeof *b->w);
  b->owner = xcalloc((size_t)E, sizeof(int));
  b->ecnt = xcalloc((size_t)E, sizeof(int));
  b->eoff = xcalloc((size_t)E, sizeof(int));
  for (int e = 0; e < E; e++) /* the library's default placement */
    for (int r = 0; r < dev_nranks; r++)
      if ((long)r * E / dev_nranks <= e) b->owner[e] = r;
  make_router(b);
  b->tok_h = xcalloc(T, b->rb);
  b->host = xcalloc(T, b->rb);
  make_tokens(b);
  moe_dev_check(moecclMoePlanCreate(&b->plan, E, NULL, b->comm), "moecclMoePlanCreate");
  moe_dev_check(moecclMoeLocalExperts(b->plan, &b->nlocal, NULL), "moecclMoeLocalExperts");
  b->recv_counts = xcalloc((size_t)(b->nlocal > 0 ? b->nlocal : 1), sizeof(size_t));
  moecclResult_t r = moecclMoeLayout(b->plan, b->ids, T, K, 0, b->recv_counts, NULL);
  if (r != moecclSuccess)
    dev_die("moecclMoeLayout: %s: %s", moecclGetErrorString(r), moecclGetLastError(b->comm));
  b->R = 0;
  for (int i = 0; i < b->nlocal; i++) b->R += b->recv_counts[i];
  b->tok = dev_alloc(T * b->rb);
  moe_dev_check(moeccl_device_copy(b->tok, b->tok_h, T * b->rb), "copy to the device");
  b->out_moe = dev_alloc(T * b->rb);
  b->out_base = dev_alloc(T * b->rb);
  b->perm = dev_alloc(b->TK * b->rb);
  b->rows = dev_alloc(b->R * b->rb);
  b->roof = dev_alloc((b->R > T ? b->R : T) * b->rb);
  b->wdev = dev_alloc(b->TK * sizeof(float));
  moe_dev_check(moeccl_device_copy(b->wdev, b->w, b->TK * sizeof(float)), "copy to the device");
  b->off_cterms = sizeof(int64_t) * (size_t)dev_nranks;
  b->off_sterms = b->off_cterms + b->TK * sizeof(dm_term_t);
  b->off_first = b->off_sterms + b->TK * sizeof(dm_term_t);
  b->pin_bytes = (b->off_first + (T + 1) * sizeof(uint32_t) + 7) / 8 * 8;
  void* pin = NULL;
  moe_dev_check(b->d->host_alloc(&pin, b->pin_bytes + sizeof(int64_t) * (size_t)dev_nranks),
                "host_alloc");
  b->pin = pin;
  b->dterms = dev_alloc(b->pin_bytes);
  b->dcnt = dev_alloc(sizeof(int64_t) * (size_t)dev_nranks);
}

static void config_close(bench_t* b) {
  moe_dev_check(b->d->synchronize(b->stream), "stream synchronize");
  moecclMoePlanDestroy(b->plan);
  char* dev[] = {b->tok,  b->out_moe,     b->out_base, b->perm, b->rows,
                 b->roof, (char*)b->wdev, b->dterms,   b->dcnt};
  for (size_t i = 0; i < sizeof dev / sizeof *dev; i++) moecclMemFree(dev[i]);
  b->d->host_free(b->pin);
  free(b->ids), free(b->w), free(b->owner), free(b->ecnt), free(b->eoff);
  free(b->tok_h), free(b->host), free(b->recv_counts);
}

/* Rows dispatch sends to other ranks: moeccl one per (token, rank), the
 * baseline one per (token, expert). */
static void count_rows(const bench_t* b, double* v) {
  v[0] = v[1] = 0;
  for (size_t t = 0; t < b->T; t++) {
    int seen[MAX_RANKS] = {0};
    for (int j = 0; j < b->K; j++) {
      int e = b->ids[t * (size_t)b->K + (size_t)j];
      if (e < 0 || b->owner[e] == dev_me) continue;
      v[1] += 1, v[0] += !seen[b->owner[e]], seen[b->owner[e]] = 1;
    }
  }
}

static FILE* json_out;
static int json_rows;

/* Measures, checks and (rank 0) prints one configuration; 1 when a value
 * was wrong. */
static int row(bench_t* b, size_t T, int K, moecclDataType_t dt) {
  const options_t* o = b->o;
  config_open(b, T, K, dt);
  int nlib = b->xcomm ? 3 : 2;
  double wrong[3] = {0, 0, 0}, t[3][MAX_REPS], med[3] = {0, 0, 0};
  for (int k = 1; o->check && k < nlib; k++) wrong[k] = check_once(b, k);
  for (int rep = 0; rep < o->reps; rep++)
    for (int i = 0; i < nlib; i++) { /* the order turns from rep to rep */
      int k = (rep + i) % nlib;
      t[k][rep] = series(b, k);
    }
  for (int k = 0; k < nlib; k++) med[k] = dev_median(t[k], o->reps);
  for (int k = 1; o->check && k < nlib; k++) /* the timed calls' last results too */
    wrong[k] += wrong_of(b, k == LIB_MOECCL ? b->out_moe : b->out_base);
  double mine[3] = {wrong[1], wrong[2], (double)b->R}, sum[4], max[4], n[2];
  gather(mine, 3, sum, max);
  double w1 = sum[0], w2 = sum[1], hot = sum[2] > 0 ? max[2] / (sum[2] / dev_nranks) : 0;
  count_rows(b, n);
  gather(n, 2, sum, max);
  double moe_bytes = sum[0] * (double)b->rb, exp_bytes = sum[1] * (double)b->rb;
  config_close(b);
  if (dev_me != 0) return w1 > 0 || w2 > 0;
  const char* tn = dt == moecclFloat32 ? "float" : "bfloat16";
  char mw[24] = "-", bw[24] = "-", bus[24] = "-", sp[24] = "-"; /* "-": not run or not checked */
  if (o->check) snprintf(mw, sizeof mw, "%.0f", w1);
  if (b->xcomm) {
    if (o->check) snprintf(bw, sizeof bw, "%.0f", w2);
    snprintf(bus, sizeof bus, "%.1f", med[2] * 1e6);
    snprintf(sp, sizeof sp, "%.2fx", med[2] / med[1]);
  }
  printf("%-8s %3d %7zu %10.1f %10s %7s %9.1f %5.1f%% %10.2f %10.2f %5.2f %6s %6s\n", tn, K, T,
         med[1] * 1e6, bus, sp, med[0] * 1e6, 100 * med[0] / med[1], moe_bytes / 1e6,
         exp_bytes / 1e6, hot, mw, bw);
  fflush(stdout);
  if (json_out) { /* wrong counts: null when not checked (-c 0) */
    fprintf(json_out,
            "%s\n  {\"type\": \"%s\", \"ranks\": %d, \"tokens\": %zu, \"hidden\": %zu, "
            "\"experts\": %d, \"topk\": %d, \"skew\": %g, \"moeccl_us\": %.3f, "
            "\"roof_us\": %.3f, \"pct_roof\": %.2f, \"moeccl_bytes\": %.0f, "
            "\"per_expert_bytes\": %.0f, \"hot_rank_load\": %.3f, \"wrong\": %s",
            json_rows++ ? "," : "", tn, dev_nranks, T, o->H, o->E, K, o->skew, med[1] * 1e6,
            med[0] * 1e6, 100 * med[0] / med[1], moe_bytes, exp_bytes, hot, o->check ? mw : "null");
    if (b->xcomm)
      fprintf(json_out,
              ", \"baseline\": \"%s\", \"base_us\": %.3f, \"speedup\": %.4f, "
              "\"base_wrong\": %s",
              o->baseline == BASE_NCCL ? "nccl" : "moeccl", med[2] * 1e6, med[2] / med[1],
              o->check ? bw : "null");
    fputs("}", json_out);
  }
  return w1 > 0 || w2 > 0;
}

static char first_why[256]; /* the lowest failing rank's reason */

/* 1 when every rank says ok, else 0 with first_why set. */
static int all_ok(int ok, const char* why) {
  S->ok[dev_me] = ok;
  snprintf(S->why[dev_me], sizeof S->why[dev_me], "%s", ok ? "" : why);
  dev_barrier();
  int all = 1;
  for (int r = dev_nranks - 1; r >= 0; r--)
    if (!S->ok[r]) all = 0, snprintf(first_why, sizeof first_why, "rank %d: %s", r, S->why[r]);
  dev_barrier();
  return all;
}

/* Every rank starts the baseline or none does (rank 0 says why). */
static void base_start(bench_t* b) {
  char why[256] = "";
  moe_dev_base_load(b, &S->nccl_id, why, sizeof why);
  if (!all_ok(!why[0], why)) return;
  if (b->o->baseline == BASE_MOECCL) {
    b->xcomm = b->comm;
    return;
  }
  int r = b->x.init_rank(&b->xcomm, dev_nranks, S->nccl_id, dev_me);
  if (r != 0) {
    const char* last = b->x.last_error ? b->x.last_error(NULL) : NULL;
    snprintf(why, sizeof why, "ncclCommInitRank: %s%s%s", b->x.error_string(r),
             last && *last ? ": " : "", last && *last ? last : "");
    b->xcomm = NULL;
  }
  if (!all_ok(r == 0, why) && b->xcomm) {
    b->x.destroy(b->xcomm);
    b->xcomm = NULL;
  }
}

/* ---- the rank's main ---------------------------------------------------------- */

static void header(const bench_t* b) {
  const options_t* o = b->o;
  printf("# moe_perf --device cuda: %d ranks on device 0 (%s backend, %d device(s)); E %d "
         "(contiguous), H %zu, skew %g, %d reps of %d calls (median), %d warm-up, check %d\n",
         dev_nranks, b->d->name, b->d->count(), o->E, o->H, o->skew, o->reps, o->iters, o->warmup,
         o->check);
  if (b->xcomm && o->baseline == BASE_NCCL)
    printf("# baseline: NCCL %d (%s)\n", b->x.version, b->x.path);
  else if (b->xcomm)
    printf("# baseline: moeccl's grouped moecclSend/moecclRecv and moecclAlltoAll in NCCL's "
           "place (--baseline moeccl)\n");
  else if (o->baseline == BASE_NCCL)
    printf("# baseline: none: NCCL could not run here: %s\n", first_why);
  else if (o->baseline)
    printf("# baseline: none: the baseline could not run here: %s\n", first_why);
  else printf("# baseline: none (--baseline none)\n");
  printf("# us per call, the slowest rank's: moeccl = layout + dispatch + combine; base = "
         "device permute + counts all-to-all (waited for) + grouped send/recv there and back + "
         "device unpermute; roof = copy of the rows dispatch and combine write; speedup = "
         "base_us / moeccl_us; MB: dispatch rows to other ranks, all ranks; wrong, bwrong: "
         "elements off the exact value\n");
  printf("%-8s %3s %7s %10s %10s %7s %9s %6s %10s %10s %5s %6s %6s\n", "type", "K", "tokens",
         "moeccl_us", "base_us", "speedup", "roof_us", "%roof", "moeccl_MB", "perexp_MB", "hot",
         "wrong", "bwrong");
}

static int rank_main(const options_t* o) {
  bench_t b = {.o = o, .me = dev_me, .n = dev_nranks};
  b.d = moeccl_device();
  if (!b.d || b.d->count() < 1)
    dev_die(
        "no device backend (MOECCL_DEVICE=cuda needs a CUDA driver and device; emu emulates one)");
  moe_dev_check(b.d->stream_create(&b.stream), "stream_create");
  moecclResult_t r = moecclCommInitRank(&b.comm, dev_nranks, *dev_ranks_id(), dev_me);
  if (r != moecclSuccess)
    dev_die("moecclCommInitRank: %s: %s", moecclGetErrorString(r), moecclGetLastError(NULL));
  if (o->baseline) base_start(&b);
  if (dev_me == 0) {
    header(&b);
    if (o->json && !(json_out = fopen(o->json, "w")))
      dev_die("--json %s: %s", o->json, strerror(errno));
    if (json_out) fputs("[", json_out);
  }
  int bad = 0;
  for (int di = 0; di < o->ndt; di++)
    for (int ti = 0; ti < o->nt; ti++)
      for (int ki = 0; ki < o->nk; ki++) bad |= row(&b, o->ts[ti], o->ks[ki], o->dts[di]);
  if (json_out) {
    fputs("\n]\n", json_out);
    if (fclose(json_out) != 0) dev_die("--json %s: %s", o->json, strerror(errno));
  }
  dev_barrier();
  if (b.xcomm && b.xcomm != b.comm) b.x.destroy(b.xcomm);
  moecclCommDestroy(b.comm);
  b.d->stream_destroy(b.stream);
  if (bad && dev_me == 0) fprintf(stderr, "moe_perf --device: wrong values (the wrong columns)\n");
  return bad ? 3 : 0;
}

/* ---- options and the launcher ----------------------------------------------- */

static void usage(void) {
  printf(
      "usage: moe_perf --device cuda -n RANKS [options]   (MOECCL_DEVICE=cuda|emu: the backend)\n"
      "  -n, --ranks R          forked ranks, all on device 0 (2..%d)\n"
      "  -t, --tokens T[,T..]   tokens per rank (default 4096)\n"
      "  -H, --hidden H         elements per row (default 1024)\n"
      "  -E, --experts E        experts, placed in contiguous blocks (default 16)\n"
      "  -k, --topk K[,K..]     experts per token, distinct (default 2,6; <= 24, bfloat16 <= 8)\n"
      "  -s, --skew S           Zipf exponent of the expert popularity (default 1; 0 uniform)\n"
      "  -d, --dtype D          float, bfloat16 or all (default float)\n"
      "  -i, --iters N          timed calls per series (default 5)\n"
      "  -w, --warmup N         untimed calls before each series (default 2)\n"
      "  -r, --reps N           series per library; the median is shown (default 7)\n"
      "  -c, --check 0|1        check both results, before and after timing (default 1)\n"
      "      --baseline nccl|moeccl|none  the baseline's communication (default nccl)\n"
      "      --nccl-lib PATH    NCCL >= 2.30 (default %s, else libnccl.so.2)\n"
      "      --seed N           seed of the router output and tokens\n"
      "      --json FILE        the rows as a JSON array\n"
      "  -h, --help             this text\n",
      MAX_RANKS, DEV_NCCL_DEFAULT_LIB);
}

/* A comma list of sizes (T) or of ints in [1, MAX_K] (K): the count, or -1. */
static int parse_list(const char* s, size_t* sizes, int* ints) {
  char buf[256], *save = NULL;
  int n = 0;
  if (strlen(s) >= sizeof buf) return -1;
  strcpy(buf, s);
  for (char* tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
    if (n == MAX_LIST) return -1;
    if (sizes ? perf_parse_size(tok, &sizes[n]) || sizes[n] == 0 || sizes[n] > (1u << 24)
              : perf_parse_int(tok, 1, MAX_K, &ints[n]))
      return -1;
    n++;
  }
  return n ? n : -1;
}

static int parse_opts(int argc, char** argv, options_t* o) {
  static const struct option lo[] = {
      {"ranks", 1, 0, 'n'},    {"tokens", 1, 0, 't'}, {"hidden", 1, 0, 'H'},
      {"experts", 1, 0, 'E'},  {"topk", 1, 0, 'k'},   {"skew", 1, 0, 's'},
      {"dtype", 1, 0, 'd'},    {"iters", 1, 0, 'i'},  {"warmup", 1, 0, 'w'},
      {"reps", 1, 0, 'r'},     {"check", 1, 0, 'c'},  {"baseline", 1, 0, 'B'},
      {"nccl-lib", 1, 0, 'L'}, {"seed", 1, 0, 'S'},   {"json", 1, 0, 'J'},
      {"help", 0, 0, 'h'},     {0, 0, 0, 0}};
  *o = (options_t){.E = 16,
                   .nk = 2,
                   .ks = {2, 6},
                   .nt = 1,
                   .ts = {4096},
                   .H = 1024,
                   .ndt = 1,
                   .dts = {moecclFloat32},
                   .skew = 1.0,
                   .seed = SEED,
                   .iters = 5,
                   .warmup = 2,
                   .reps = 7,
                   .check = 1,
                   .baseline = BASE_NCCL,
                   .nccl_path = DEV_NCCL_DEFAULT_LIB};
  int c;
  char* end;
  while ((c = getopt_long(argc, argv, "n:t:H:E:k:s:d:i:w:r:c:h", lo, NULL)) != -1) {
    int bad = 0;
    switch (c) {
      case 'n': bad = perf_parse_int(optarg, 2, MAX_RANKS, &o->ranks); break;
      case 't': bad = (o->nt = parse_list(optarg, o->ts, NULL)) < 0; break;
      case 'H': bad = perf_parse_size(optarg, &o->H) || o->H == 0 || o->H > (1u << 24); break;
      case 'E': bad = perf_parse_int(optarg, 1, 1 << 16, &o->E); break;
      case 'k': bad = (o->nk = parse_list(optarg, NULL, o->ks)) < 0; break;
      case 's':
        o->skew = strtod(optarg, &end), bad = *end || end == optarg || !(o->skew >= 0);
        break;
      case 'd':
        o->ndt = !strcmp(optarg, "all") ? 2 : 1;
        o->dts[0] = !strcmp(optarg, "bfloat16") ? moecclBfloat16 : moecclFloat32;
        o->dts[1] = moecclBfloat16;
        bad = strcmp(optarg, "all") && strcmp(optarg, "float") && strcmp(optarg, "bfloat16");
        break;
      case 'i': bad = perf_parse_int(optarg, 1, 1 << 20, &o->iters); break;
      case 'w': bad = perf_parse_int(optarg, 0, 1 << 20, &o->warmup); break;
      case 'r': bad = perf_parse_int(optarg, 1, MAX_REPS, &o->reps); break;
      case 'c': bad = perf_parse_int(optarg, 0, 1, &o->check); break;
      case 'B':
        o->baseline = !strcmp(optarg, "nccl")     ? BASE_NCCL
                      : !strcmp(optarg, "moeccl") ? BASE_MOECCL
                                                  : BASE_NONE;
        bad = o->baseline == BASE_NONE && strcmp(optarg, "none");
        break;
      case 'L': o->nccl_path = optarg; break;
      case 'S': bad = perf_parse_u64(optarg, &o->seed); break;
      case 'J': o->json = optarg; break;
      case 'h': usage(); return 1;
      default: return 2;
    }
    if (bad) {
      const struct option* l = lo;
      while (l->name && l->val != c) l++;
      fprintf(stderr, "moe_perf --device: bad value '%s' for --%s (see -h)\n", optarg, l->name);
      return 2;
    }
  }
  const char* why = NULL;
  for (int i = 0; i < o->nk; i++)
    if (o->ks[i] > o->E) why = "every K must be at most E";
    else if (o->ks[i] > (o->dts[o->ndt - 1] == moecclBfloat16 ? 8 : 24))
      why = "K above 24 (float) or 8 (bfloat16): the gate weights' sums would not be exact";
  if (optind < argc) why = "unexpected argument";
  else if (!o->ranks) why = "-n RANKS is required";
  if (why) fprintf(stderr, "moe_perf --device: %s (see -h)\n", why);
  return why ? 2 : 0;
}

int moe_dev_select(int* argc, char** argv) {
  int want = 0;
  for (int i = 1; i < *argc; i++) {
    const char* v = NULL;
    int take = 1;
    if (!strcmp(argv[i], "--")) break;
    if (!strncmp(argv[i], "--device=", 9)) v = argv[i] + 9;
    else if (!strcmp(argv[i], "--device")) v = i + 1 < *argc ? argv[i + 1] : "", take = 2;
    if (!v) continue;
    if (strcmp(v, "cuda") && strcmp(v, "host")) {
      fprintf(stderr, "moe_perf: --device '%s': cuda or host\n", v);
      return -1;
    }
    want = !strcmp(v, "cuda");
    memmove(argv + i, argv + i + take, sizeof *argv * (size_t)(*argc - i - take + 1));
    *argc -= take, i--;
  }
  return want;
}

static int run_rank(void* o) { return rank_main(o); }

int moe_dev_main(int argc, char** argv) {
  options_t o;
  int rc = parse_opts(argc, argv, &o);
  if (rc) return rc == 1 ? 0 : 2;
  setenv("NCCL_MULTI_RANK_GPU_ENABLE", "1", 0); /* several ranks on one GPU, NCCL >= 2.30 */
  /* a wrong value (status 3) lets the other ranks finish */
  return dev_ranks_run("moe_perf --device", o.ranks, sizeof *S, (void**)&S, run_rank, &o, 3);
}
