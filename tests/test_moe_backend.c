/* The CUDA compute backend (moe/backend_cuda.c) against the host backend,
 * op by op, on the same random inputs: on its host stand-in (every run; the
 * kernels' host twins and OpenBLAS for cuBLAS) bit for bit, except the
 * column-major products and the blocked loss sum (within 1e-6 and 1e-12 of
 * the largest value); and on a GPU where one is found (libcuda, cuBLAS and
 * the kernels this build embeds), within 1e-5 of each output's largest
 * value (the GPU's expf and cuBLAS's order differ from the host's);
 * MOE_BACKEND_REQUIRE_GPU=1 fails the test where no GPU is found.  The
 * memory ops of both backends (alloc zeroed, to_device / to_host, comm_ptr);
 * on the stand-in, that its device memory faults when the host touches it
 * (a child process tries) while comm_ptr's shadow holds the same bytes; and
 * the one-process model (model.h) with its parameters, workspace and Adam
 * moments in the backend's memory against the host's: the loss, the
 * gradients and one Adam step within 1e-5 of each one's largest value.
 * Prints one line per op and table. */
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "adam.h"
#include "backend.h"
#include "cuda_api.h"
#include "kern_math.h"
#include "model.h"
#include "unit_check.h"

enum { N = 37, E = 8, K = 2, H = 24, F = 40 };

static const moe_cuda_api_t* api;
static const moe_backend_ops_t *host, *dev;
static double tol;  /* the tolerance of this table, of each output's largest value */
static int exact;   /* 1: bit for bit (the stand-in's twins) */

/* Device copies of host arrays, and back. */
static void* up(const void* src, size_t bytes) {
  void* d = NULL;
  if (api->alloc(&d, bytes) || api->to_device(d, src, bytes) || api->sync()) {
    fprintf(stderr, "test_moe_backend: %s: %s\n", api->name, api->last_error());
    exit(1);
  }
  return d;
}

static void down(void* dst, const void* d, size_t bytes) {
  if (api->sync() || api->to_host(dst, d, bytes) || api->sync()) {
    fprintf(stderr, "test_moe_backend: %s: %s\n", api->name, api->last_error());
    exit(1);
  }
}

static float* randf(size_t n, float scale, unsigned* seed) {
  float* p = malloc(n * sizeof(float));
  for (size_t i = 0; i < n; i++) {
    *seed = *seed * 1103515245u + 12345u;
    p[i] = scale * ((float)((*seed >> 8) & 0xffff) / 32768.0f - 1.0f);
  }
  return p;
}

/* The device's float output d (count) against the host's h. */
static void same(const char* op, const float* h, const void* d, size_t count, double t) {
  float* got = malloc(count * sizeof(float) + 1);
  down(got, d, count * sizeof(float));
  double big = 0, worst = 0;
  for (size_t i = 0; i < count; i++) big = fmax(big, fabs(h[i]));
  for (size_t i = 0; i < count; i++) worst = fmax(worst, fabs((double)got[i] - h[i]));
  int ok = t == 0 ? memcmp(got, h, count * sizeof(float)) == 0 : worst <= t * big + 1e-30;
  CHECK(ok, "%s on %s: differs from the host by %.3g (largest %.3g)", op, api->name, worst, big);
  printf("%-22s %-13s %zu values, largest difference %.3g of %.3g%s\n", op, api->name, count,
         worst, big, ok ? "" : "  FAIL");
  free(got);
}

static void same_ints(const char* op, const int32_t* h, const void* d, size_t count) {
  int32_t* got = malloc(count * sizeof(int32_t) + 1);
  down(got, d, count * sizeof(int32_t));
  CHECK(memcmp(got, h, count * sizeof(int32_t)) == 0, "%s on %s: ids differ", op, api->name);
  free(got);
}

static void check_sgemm(unsigned* seed) {
  for (int ta = 0; ta < 2; ta++)
    for (int tb = 0; tb < 2; tb++) {
      int m = 13, n = 11, k = 9, lda = (ta ? m : k) + 2, ldb = (tb ? k : n) + 1, ldc = n + 3;
      float *a = randf((size_t)(ta ? k : m) * lda, 1, seed);
      float *b = randf((size_t)(tb ? n : k) * ldb, 1, seed), *c = randf((size_t)m * ldc, 1, seed);
      void *da = up(a, (size_t)(ta ? k : m) * lda * 4), *db = up(b, (size_t)(tb ? n : k) * ldb * 4);
      void* dc = up(c, (size_t)m * ldc * 4);
      float* c0 = malloc((size_t)m * ldc * 4);
      memcpy(c0, c, (size_t)m * ldc * 4);
      host->sgemm(ta, tb, m, n, k, 0.5f, a, lda, b, ldb, 0.25f, c, ldc);
      dev->sgemm(ta, tb, m, n, k, 0.5f, da, lda, db, ldb, 0.25f, dc, ldc);
      char name[32];
      snprintf(name, sizeof(name), "sgemm %c%c", ta ? 'T' : 'N', tb ? 'T' : 'N');
      same(name, c, dc, (size_t)m * ldc, exact ? 1e-6 : tol);
      /* bfloat16 inputs (gemm_precision 1): both backends, and the products
       * of the rounded inputs summed in double, within float32's sums */
      float* cb = malloc((size_t)m * ldc * 4);
      memcpy(cb, c0, (size_t)m * ldc * 4);
      api->to_device(dc, c0, (size_t)m * ldc * 4);
      host->gemm_precision(1), dev->gemm_precision(1);
      host->sgemm(ta, tb, m, n, k, 0.5f, a, lda, b, ldb, 0.25f, cb, ldc);
      dev->sgemm(ta, tb, m, n, k, 0.5f, da, lda, db, ldb, 0.25f, dc, ldc);
      host->gemm_precision(0), dev->gemm_precision(0);
      snprintf(name, sizeof(name), "sgemm %c%c bf16", ta ? 'T' : 'N', tb ? 'T' : 'N');
      same(name, cb, dc, (size_t)m * ldc, exact ? 1e-6 : tol);
      double worst = 0, moved = 0;
      for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
          double r = 0;
          for (int l = 0; l < k; l++) {
            float x = ta ? a[(size_t)l * lda + i] : a[(size_t)i * lda + l];
            float y = tb ? b[(size_t)j * ldb + l] : b[(size_t)l * ldb + j];
            r += (double)moe_k_bf16_float(moe_k_bf16(x)) * moe_k_bf16_float(moe_k_bf16(y));
          }
          r = 0.5 * r + 0.25 * c0[(size_t)i * ldc + j];
          double d = fabs(r - cb[(size_t)i * ldc + j]);
          worst = d > worst ? d : worst;
          d = fabs(cb[(size_t)i * ldc + j] - c[(size_t)i * ldc + j]);
          moved = d > moved ? d : moved;
        }
      CHECK(worst <= 1e-5, "%s: %g from the rounded inputs' products", name, worst);
      CHECK(moved > 1e-4, "%s: the same as float32 (%g apart)", name, moved);
      api->free(da), api->free(db), api->free(dc);
      free(a), free(b), free(c), free(c0), free(cb);
    }
}

/* moe_k_bf16: to nearest, ties to even; infinities, NaN, overflow. */
static void check_bf16_rounding(void) {
  static const struct {
    uint32_t in;
    uint16_t out;
  } cases[] = {
      {0x3f800000u, 0x3f80}, /* 1 */
      {0x3f808000u, 0x3f80}, /* 1 + half an ulp: tie, to even (down) */
      {0x3f818000u, 0x3f82}, /* tie, to even (up) */
      {0x3f808001u, 0x3f81}, /* above the tie */
      {0x3f807fffu, 0x3f80}, /* below it */
      {0xbf808001u, 0xbf81}, /* negative */
      {0x7f7fffffu, 0x7f80}, /* the largest float: to infinity */
      {0x7f800000u, 0x7f80}, /* infinity */
      {0xff800000u, 0xff80},
      {0x00000001u, 0x0000}, /* the smallest subnormal: to zero */
      {0x80000000u, 0x8000}, /* -0 */
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    union {
      uint32_t u;
      float f;
    } v = {cases[i].in};
    uint16_t got = moe_k_bf16(v.f);
    CHECK(got == cases[i].out, "bf16(0x%08x) = 0x%04x, want 0x%04x", cases[i].in, got,
          cases[i].out);
  }
  union {
    uint32_t u;
    float f;
  } nan = {0x7f800001u}; /* a signalling NaN whose payload is in the low bits */
  uint16_t q = moe_k_bf16(nan.f);
  CHECK((q & 0x7f80) == 0x7f80 && (q & 0x7f), "bf16(sNaN) = 0x%04x: not a NaN", q);
  CHECK(moe_k_bf16_float(0x3f81) == 1.0078125f, "bf16 0x3f81 widened");
}

static void check_elementwise(unsigned* seed) {
  size_t n = (size_t)N * F;
  float *a = randf(n, 3, seed), *b = randf(n, 2, seed), *dh = randf(n, 1, seed);
  float *h = malloc(n * 4), *da = malloc(n * 4), *db = malloc(n * 4);
  void *d_a = up(a, n * 4), *d_b = up(b, n * 4), *d_dh = up(dh, n * 4);
  void *d_h = up(a, n * 4), *d_da = up(a, n * 4), *d_db = up(a, n * 4);
  host->swiglu_forward(n, a, b, h);
  dev->swiglu_forward(n, d_a, d_b, d_h);
  same("swiglu_forward", h, d_h, n, tol);
  host->swiglu_backward(n, a, b, dh, da, db);
  dev->swiglu_backward(n, d_a, d_b, d_dh, d_da, d_db);
  same("swiglu_backward da", da, d_da, n, tol);
  same("swiglu_backward db", db, d_db, n, tol);
  host->add(n, a, b, h);
  dev->add(n, d_a, d_b, d_h);
  same("add", h, d_h, n, tol);
  host->add(n, h, b, h); /* in place */
  dev->add(n, d_h, d_b, d_h);
  same("add in place", h, d_h, n, tol);
  host->scaled_diff(n, 0.125f, a, b, h);
  dev->scaled_diff(n, 0.125f, d_a, d_b, d_h);
  same("scaled_diff", h, d_h, n, tol);
  host->copy(n, dh, h);
  dev->copy(n, d_dh, d_h);
  same("copy", h, d_h, n, 0);
  host->zero(n, h);
  dev->zero(n, d_h);
  same("zero", h, d_h, n, 0);
  double sq_h = host->sq_dist(n, a, b), sq_d = dev->sq_dist(n, d_a, d_b);
  CHECK(fabs(sq_h - sq_d) <= (exact ? 1e-12 : tol) * sq_h, "sq_dist: %.17g against %.17g", sq_d,
        sq_h);
  printf("%-22s %-13s %.17g against %.17g\n", "sq_dist", api->name, sq_d, sq_h);
  /* Adam: two steps from zero moments */
  float *m = calloc(n, 4), *v = calloc(n, 4), *p = randf(n, 1, seed);
  void *d_m = up(m, n * 4), *d_v = up(v, n * 4), *d_p = up(p, n * 4);
  for (int t = 1; t <= 2; t++) {
    float c1 = (float)(1 / (1 - pow(0.9, t))), c2 = (float)(1 / (1 - pow(0.999, t)));
    host->adam(n, 0.01f, 0.9f, 0.999f, 1e-8f, c1, c2, p, t == 1 ? a : b, m, v);
    dev->adam(n, 0.01f, 0.9f, 0.999f, 1e-8f, c1, c2, d_p, t == 1 ? d_a : d_b, d_m, d_v);
  }
  same("adam p", p, d_p, n, tol);
  same("adam m", m, d_m, n, tol);
  same("adam v", v, d_v, n, tol);
  void* all[] = {d_a, d_b, d_dh, d_h, d_da, d_db, d_m, d_v, d_p};
  for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++) api->free(all[i]);
  free(a), free(b), free(dh), free(h), free(da), free(db), free(m), free(v), free(p);
}

static void check_router_and_rows(unsigned* seed) {
  float *probs = randf((size_t)N * E, 2, seed), *stats = randf(2 * E + 1, 3, seed);
  int32_t expert[N * K] = {0};
  float gate[N * K] = {0};
  probs[5 * E + 3] = probs[5 * E + 6] = 5.0f; /* a tie at the top: the lower id first */
  void* d_probs = up(probs, sizeof(float) * N * E);
  void* d_stats = up(stats, sizeof(float) * (2 * E + 1));
  void *d_expert = up(expert, sizeof(expert)), *d_gate = up(gate, sizeof(gate));
  host->router_select(N, E, K, probs, expert, gate, stats);
  CHECK(expert[5 * K] == 3 && expert[5 * K + 1] == 6, "the tie: %d %d", expert[5 * K],
        expert[5 * K + 1]);
  dev->router_select(N, E, K, d_probs, d_expert, d_gate, d_stats);
  same_ints("router_select ids", expert, d_expert, N * K);
  same("router_select gate", gate, d_gate, N * K, tol);
  same("router_select probs", probs, d_probs, (size_t)N * E, tol);
  same("router_select stats", stats, d_stats, 2 * E + 1, tol);
  float *dgate = randf(N * K, 1, seed), *g = randf(E, 0.1f, seed);
  float* dl = malloc(sizeof(float) * N * E);
  void *d_dgate = up(dgate, sizeof(float) * N * K), *d_g = up(g, sizeof(float) * E);
  void* d_dl = up(probs, sizeof(float) * N * E);
  host->router_dlogits(N, E, K, probs, expert, gate, dgate, g, dl);
  dev->router_dlogits(N, E, K, d_probs, d_expert, d_gate, d_dgate, d_g, d_dl);
  same("router_dlogits", dl, d_dl, (size_t)N * E, tol);
  /* the local rows, two slots dropped */
  expert[3] = -1, expert[2 * K + 1] = -1;
  moe_local_plan_t plan;
  CHECK(moe_local_plan_alloc(&plan, E, K, N) == 0, "plan");
  moe_local_plan_build(&plan, expert, N);
  size_t slots = (size_t)N * K, rows = plan.rows;
  void *d_row_of = up(plan.row_of, slots * 4), *d_token_of = up(plan.token_of, rows * 4);
  float *x = randf((size_t)N * H, 1, seed), *xr = calloc(rows * H + 1, 4);
  void *d_x = up(x, (size_t)N * H * 4), *d_xr = up(xr, rows * H * 4 + 4);
  host->gather_rows((int)rows, H, plan.token_of, x, xr);
  dev->gather_rows((int)rows, H, d_token_of, d_x, d_xr);
  same("gather_rows", xr, d_xr, rows * H, 0);
  float *y = randf(rows * H + 1, 1, seed), *out = randf((size_t)N * H, 1, seed);
  void *d_y = up(y, rows * H * 4 + 4), *d_out = up(out, (size_t)N * H * 4);
  host->combine_rows(slots, K, H, plan.row_of, gate, y, out);
  dev->combine_rows(slots, K, H, d_row_of, d_gate, d_y, d_out);
  same("combine_rows", out, d_out, (size_t)N * H, tol);
  float *dy = calloc(rows * H + 1, 4), *dg = malloc(slots * 4);
  void *d_dy = up(dy, rows * H * 4 + 4), *d_dg = up(gate, slots * 4);
  host->combine_rows_backward(slots, K, H, plan.row_of, gate, out, y, dy, dg);
  dev->combine_rows_backward(slots, K, H, d_row_of, d_gate, d_out, d_y, d_dy, d_dg);
  same("combine_rows_backward dy", dy, d_dy, rows * H, tol);
  same("combine_rows_backward dgate", dg, d_dg, slots, tol);
  host->scatter_add_rows(slots, K, H, plan.row_of, y, x);
  dev->scatter_add_rows(slots, K, H, d_row_of, d_y, d_x);
  same("scatter_add_rows", x, d_x, (size_t)N * H, tol);
  void* all[] = {d_probs, d_stats, d_expert, d_gate, d_dgate, d_g, d_dl, d_row_of, d_token_of,
                 d_x, d_xr, d_y, d_out, d_dy, d_dg};
  for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++) api->free(all[i]);
  moe_local_plan_free(&plan);
  free(probs), free(stats), free(dgate), free(g), free(dl), free(x), free(xr), free(y), free(out);
  free(dy), free(dg);
}

/* The memory ops of backend b: zeroed allocations, the copies both ways,
 * comm_ptr's address holding the same bytes; untouchable says that the
 * host must fault on b's memory (the stand-in). */
static void check_memory(const moe_backend_ops_t* b, int untouchable) {
  enum { COUNT = 1000 };
  float host_in[COUNT], host_out[COUNT];
  for (int i = 0; i < COUNT; i++) host_in[i] = (float)i - 0.5f, host_out[i] = -1.0f;
  float* d = b->alloc(sizeof(host_in));
  CHECK(d != NULL, "%s: alloc: %s", b->name, b->failed() ? b->failed() : "NULL");
  if (!d) return;
  b->to_host(host_out, d, sizeof(host_out));
  int zero = 1;
  for (int i = 0; i < COUNT; i++) zero &= host_out[i] == 0.0f;
  CHECK(zero, "%s: alloc's memory is not zeroed", b->name);
  b->to_device(d, host_in, sizeof(host_in));
  b->to_host(host_out, d, sizeof(host_out));
  CHECK(memcmp(host_in, host_out, sizeof(host_in)) == 0, "%s: to_device then to_host differ",
        b->name);
  /* an op on an inner address, then the comm address of the same element:
   * after sync (the stand-in, as a GPU, runs the op later: before sync
   * the zeros are not there yet) */
  b->zero(10, d + 500);
  const float* c = b->comm_ptr(d + 495);
  if (untouchable)
    CHECK(c != NULL && c[5] == 499.5f, "%s: the op ran before the host waited for it", b->name);
  b->sync();
  CHECK(c != NULL && c[0] == 494.5f && c[5] == 0.0f && c[15] == 509.5f,
        "%s: comm_ptr does not show the data", b->name);
  CHECK((c == (const float*)d + 495) == !untouchable, "%s: comm_ptr %s", b->name,
        untouchable ? "is the device address" : "is not the identity");
  if (untouchable) { /* a child reads the device address: it must fault */
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
      signal(SIGSEGV, SIG_DFL); /* a sanitizer's handler would exit instead */
      volatile const float* p = d;
      _exit(p[3] == 2.5f ? 0 : 1);
    }
    int st = 0;
    waitpid(pid, &st, 0);
    CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGSEGV,
          "%s: the host read device memory (status %#x)", b->name, st);
  }
  b->sync();
  b->free(d);
  b->free(NULL);
  CHECK(b->failed() == NULL, "%s: %s", b->name, b->failed() ? b->failed() : "");
  printf("%-22s %-13s alloc, copies, comm_ptr%s\n", "memory", b->name,
         untouchable ? ", the host faults on device memory" : "");
}

/* The largest difference of count floats got (b's memory) from want (host)
 * over want's largest value. */
static double rel_diff(const moe_backend_ops_t* b, const float* want, const float* got_dev,
                       size_t count) {
  float* got = malloc(count * sizeof(float) + 1);
  b->to_host(got, got_dev, count * sizeof(float));
  double big = 0, worst = 0;
  for (size_t i = 0; i < count; i++) big = fmax(big, fabs(want[i]));
  for (size_t i = 0; i < count; i++) worst = fmax(worst, fabs((double)got[i] - want[i]));
  free(got);
  return big > 0 ? worst / big : worst;
}

/* moe_model_forward / backward and Adam with every tensor in b's memory
 * against the host backend on host memory. */
static void check_model(const moe_backend_ops_t* b) {
  moe_config_t cfg = {.layers = 2, .experts = E, .topk = K, .hidden = H, .ffn = F, .aux = 0.01f};
  moe_params_t hp, hg, dp, dg;
  moe_workspace_t hw, dw;
  moe_adam_t ha, da;
  size_t nh = (size_t)N * H;
  unsigned seed = 99;
  float *x = randf(nh, 1, &seed), *t = randf(nh, 1, &seed);
  CHECK(moe_params_alloc(&hp, &cfg) == 0 && moe_params_alloc(&hg, &cfg) == 0 &&
            moe_workspace_alloc(&hw, &cfg, N) == 0 && moe_adam_init(&ha, hp.count, 0.01f) == 0,
        "host model");
  CHECK(moe_params_alloc_on(&dp, &cfg, b) == 0 && moe_params_alloc_on(&dg, &cfg, b) == 0 &&
            moe_workspace_alloc_on(&dw, &cfg, N, b) == 0 &&
            moe_adam_init_on(&da, dp.count, 0.01f, b) == 0,
        "%s model: %s", b->name, b->failed() ? b->failed() : "no memory");
  float *dx = b->alloc(nh * sizeof(float)), *dt = b->alloc(nh * sizeof(float));
  b->to_device(dx, x, nh * sizeof(float));
  b->to_device(dt, t, nh * sizeof(float));
  moe_params_init_random(&hp, 5);
  moe_params_init_random(&dp, 5);
  moe_loss_t hl, dl;
  CHECK(moe_model_forward(host, &hp, &hw, x, t, N, NULL, &hl, NULL) == 0, "host forward");
  CHECK(moe_model_forward(b, &dp, &dw, dx, dt, N, NULL, &dl, NULL) == 0, "%s forward", b->name);
  double dloss = fabs(hl.total - dl.total) / fabs(hl.total);
  CHECK(dloss <= 1e-5, "%s model loss %.9g against %.9g", b->name, dl.total, hl.total);
  double dout = rel_diff(b, moe_model_output(&hw), moe_model_output(&dw), nh);
  CHECK(dout <= 1e-5, "%s model output differs by %.3g", b->name, dout);
  moe_model_backward(host, &hp, &hw, t, &hg, NULL, NULL);
  moe_model_backward(b, &dp, &dw, dt, &dg, NULL, NULL);
  double dgrad = rel_diff(b, hg.data, dg.data, hg.count);
  CHECK(dgrad <= 1e-5, "%s model gradients differ by %.3g", b->name, dgrad);
  moe_adam_step(&ha, host, hp.data, hg.data);
  moe_adam_step(&da, b, dp.data, dg.data);
  double dpar = rel_diff(b, hp.data, dp.data, hp.count);
  CHECK(dpar <= 1e-5, "%s model after Adam differs by %.3g", b->name, dpar);
  CHECK(b->failed() == NULL, "%s: %s", b->name, b->failed() ? b->failed() : "");
  printf("%-22s %-13s loss %.3g, output %.3g, gradients %.3g, Adam %.3g of the largest\n",
         "model in its memory", b->name, dloss, dout, dgrad, dpar);
  b->free(dx), b->free(dt);
  moe_params_free(&hp), moe_params_free(&hg), moe_params_free(&dp), moe_params_free(&dg);
  moe_workspace_free(&hw), moe_workspace_free(&dw);
  moe_adam_free(&ha), moe_adam_free(&da);
  free(x), free(t);
}

static void run_table(const moe_cuda_api_t* with, int bit_exact, double t) {
  unsigned seed = 12345;
  api = with, exact = bit_exact, tol = t;
  dev = moe_backend_cuda(api);
  char buf[256];
  printf("# %s: %s\n", api->name, dev->describe(buf, sizeof(buf)));
  check_memory(dev, with == moe_cuda_api_standin());
  if (with == moe_cuda_api_standin()) { /* a kernel given host memory: refused, as a GPU faults */
    float h[4] = {0};
    CHECK(api->add(4, h, h, h) == -1 && strstr(api->last_error(), "host memory"),
          "%s: a kernel on host memory was not refused (%s)", api->name, api->last_error());
  }
  check_sgemm(&seed);
  check_elementwise(&seed);
  check_router_and_rows(&seed);
  check_model(dev);
  CHECK(dev->failed() == NULL, "%s: %s", api->name, dev->failed() ? dev->failed() : "");
}

int main(void) {
  check_bf16_rounding();
  host = moe_backend_blas(1);
  check_memory(host, 0);
  run_table(moe_cuda_api_standin(), 1, 0);
  char why[256];
  const moe_cuda_api_t* gpu = moe_cuda_api_load(why, sizeof(why));
  const char* need = getenv("MOE_BACKEND_REQUIRE_GPU");
  if (gpu) run_table(gpu, 0, 1e-5);
  else printf("# cuda: not run here: %s\n", why);
  CHECK(gpu || !need || strcmp(need, "1") != 0, "MOE_BACKEND_REQUIRE_GPU=1: %s", why);
  printf("%d checks, %d failed\n", checks, failures);
  return failures ? 1 : 0;
}
