/*
 * a2a_dev_perf (dev_perf.c) - all-to-all(v) on device buffers, moeccl next
 * to the vendor library (NCCL, loaded with dlopen, never linked) and next
 * to the device copy roofline, all measured in the same run.
 *
 * The ranks are forked processes of one node (-n R, no MPI: a GPU machine
 * need not have it), each calling on moecclMemAllocDevice buffers and a
 * stream of its own.  MOECCL_DEVICE picks the device backend: the CUDA
 * driver, or the host emulation (emu), on which the tool runs in CI.
 *
 * Per size and rep, interleaved so that the ratios see the same machine:
 *   roof    every rank copies, at once, the bytes it receives from its send
 *           buffer into its receive buffer (one copy_async on its stream):
 *           the bytes an all-to-all moves through device memory, with no
 *           communication at all;
 *   moeccl  moecclAlltoAll / moecclAlltoAllv on the stream;
 *   nccl    ncclAlltoAll, and for all-to-allv grouped ncclSend/ncclRecv (as
 *           frameworks do it with NCCL), on the same buffers and stream.
 * A time is the slowest rank's, over --iters calls queued back to back and
 * one stream synchronize, after a barrier of all ranks; the table shows
 * the median over --reps.  With -c 1 every series is followed by one call
 * on patterned data, checked element by element on the host.
 *
 * NCCL 2.28 refuses two ranks on one GPU ("Duplicate GPU"); newer NCCL
 * allows it with NCCL_MULTI_RANK_GPU_ENABLE=1, which the tool sets unless
 * it is set.  Where NCCL cannot run, the tool says why and compares with
 * the roofline only.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "dev_ranks.h"
#include "device/device.h"
#include "kernels/devkern.h"
#include "kernels/devmath.h"
#include "moeccl.h"
#include "perf_parse.h"

#define MAX_RANKS DEV_RANKS_MAX
#define MAX_REPS 101
#define SKEW_S 1.2 /* zipf exponent of the receivers' popularity in -o alltoallv */

/* ---- options ------------------------------------------------------------ */

enum op_kind { OP_A2A = 1, OP_A2AV = 2 };

typedef struct options {
  int ranks;
  size_t minbytes, maxbytes, step;
  int iters, warmup, reps, check, ops;
  int nccl;              /* --baseline nccl */
  const char* nccl_path; /* --nccl-lib */
  const char* json;
  const char* costs; /* --costs: the device costs measured, as a tune file */
} options_t;

/* ---- what the forked ranks share (one anonymous shared mapping) ----------- */

typedef struct shared {
  dev_ranks_head_t head; /* the barrier, the failure flag, moeccl's id (dev_ranks.h) */
  dev_nccl_id_t nccl_id;
  int nccl_ok[MAX_RANKS];
  char nccl_why[320]; /* "rank R: " and a reason of up to 255 */
  double t[MAX_RANKS];   /* each rank's seconds of the series just timed */
  long wrong[MAX_RANKS]; /* each rank's wrong elements of the check just run */
} shared_t;

static shared_t* S;

/* The slowest rank's value of S->t, after the barrier every rank passed. */
static double slowest(double mine) {
  S->t[dev_me] = mine;
  dev_barrier();
  double m = 0;
  for (int r = 0; r < dev_nranks; r++) m = S->t[r] > m ? S->t[r] : m;
  dev_barrier(); /* nobody writes t again before everyone read it */
  return m;
}

static long total_wrong(long mine) {
  S->wrong[dev_me] = mine;
  dev_barrier();
  long w = 0;
  for (int r = 0; r < dev_nranks; r++) w += S->wrong[r];
  dev_barrier();
  return w;
}

/* ---- the layout of one size ------------------------------------------------ */

/* Elements (float32) rank src sends rank dst: all-to-all S/(R*4) each;
 * all-to-allv the MoE skew: every source favours the same receivers (hot
 * experts; rank 0 hottest, zipf SKEW_S) with +-25% per source, rows summing
 * to the all-to-all's total per rank. */
static size_t count_of(enum op_kind op, size_t bytes, int src, int dst) {
  size_t total = bytes / 4;
  if (op == OP_A2A) return total / (size_t)dev_nranks;
  double w[MAX_RANKS], sum = 0;
  for (int p = 0; p < dev_nranks; p++) {
    uint64_t h = ((uint64_t)(src + 1) * 0x9E3779B97F4A7C15ull) ^ ((uint64_t)(p + 1) << 32);
    h ^= h >> 29, h *= 0xBF58476D1CE4E5B9ull, h ^= h >> 32;
    double jitter = 0.75 + 0.5 * (double)(h % 1000) / 1000.0;
    w[p] = jitter * pow((double)(p + 1), -SKEW_S);
    sum += w[p];
  }
  return (size_t)((double)(total / (size_t)dev_nranks) * (double)dev_nranks * w[dst] / sum);
}

typedef struct layout {
  size_t sc[MAX_RANKS], sd[MAX_RANKS], rc[MAX_RANKS], rd[MAX_RANKS];
  size_t send_total, recv_total; /* elements */
} layout_t;

static void make_layout(enum op_kind op, size_t bytes, layout_t* l) {
  l->send_total = l->recv_total = 0;
  for (int p = 0; p < dev_nranks; p++) {
    l->sc[p] = count_of(op, bytes, dev_me, p), l->rc[p] = count_of(op, bytes, p, dev_me);
    l->sd[p] = l->send_total, l->send_total += l->sc[p];
    l->rd[p] = l->recv_total, l->recv_total += l->rc[p];
  }
}

/* The value element i of the block src sends dst holds in the check. */
static float pattern(int src, int dst, size_t i) {
  return (float)((src * 131 + dst * 17 + (int)(i % 1021)) % 4096) - 2048.0f;
}

/* ---- one rank ------------------------------------------------------------- */

typedef struct bench {
  const options_t* o;
  const moeccl_device_ops_t* d;
  moecclComm_t comm;
  dev_nccl_t* nccl;
  void* ncomm;
  void* stream;
  float *send, *recv; /* device */
  float* host;        /* staging for fills and checks */
  size_t cap;         /* bytes of send, recv and host */
} bench_t;

enum lib_kind { LIB_ROOF, LIB_MOECCL, LIB_NCCL };

static void sync_stream(bench_t* b) {
  moecclResult_t r = b->d->synchronize(b->stream);
  if (r != moecclSuccess) dev_die("stream synchronize: %s", moecclGetErrorString(r));
}

/* One call of lib on layout l, queued on the stream. */
static void issue_op(bench_t* b, enum lib_kind lib, enum op_kind op, const layout_t* l) {
  if (lib == LIB_ROOF) {
    moecclResult_t r = b->d->copy_async(
        b->recv, b->send, l->recv_total * 4 > b->cap ? b->cap : l->recv_total * 4, b->stream);
    if (r != moecclSuccess) dev_die("copy_async: %s", moecclGetErrorString(r));
    return;
  }
  if (lib == LIB_MOECCL) {
    moecclResult_t r =
        op == OP_A2A ? moecclAlltoAll(b->send, b->recv, l->sc[0], moecclFloat32, b->comm, b->stream)
                     : moecclAlltoAllv(b->send, l->sc, l->sd, b->recv, l->rc, l->rd, moecclFloat32,
                                       b->comm, b->stream);
    if (r != moecclSuccess)
      dev_die("moeccl %s: %s: %s", op == OP_A2A ? "AlltoAll" : "AlltoAllv", moecclGetErrorString(r),
          moecclGetLastError(b->comm));
    return;
  }
  dev_nccl_t* n = b->nccl;
  int r;
  if (op == OP_A2A) {
    r = n->alltoall(b->send, b->recv, l->sc[0], DEV_NCCL_FLOAT32, b->ncomm, b->stream);
  } else {
    r = n->group_start();
    for (int p = 0; p < dev_nranks && r == 0; p++) {
      if (l->sc[p]) r = n->send(b->send + l->sd[p], l->sc[p], DEV_NCCL_FLOAT32, p, b->ncomm, b->stream);
      if (r == 0 && l->rc[p])
        r = n->recv(b->recv + l->rd[p], l->rc[p], DEV_NCCL_FLOAT32, p, b->ncomm, b->stream);
    }
    int e = n->group_end();
    if (r == 0) r = e;
  }
  if (r != 0)
    dev_die("NCCL %s: %s: %s", op == OP_A2A ? "ncclAlltoAll" : "ncclSend/ncclRecv", n->error_string(r),
        n->last_error ? n->last_error(b->ncomm) : "");
}

static void to_device(bench_t* b, void* dst, size_t bytes) {
  if (moeccl_device_copy(dst, b->host, bytes) != moecclSuccess) dev_die("copy to the device failed");
}

/* One call on patterned data; the wrong elements of this rank's receive
 * blocks and of the GUARD bytes after them, which must stay untouched.
 * Only that span is filled and read back: the buffers are sized for the
 * largest row. */
#define GUARD 4096
static long check_op(bench_t* b, enum lib_kind lib, enum op_kind op, const layout_t* l) {
  for (int p = 0; p < dev_nranks; p++)
    for (size_t i = 0; i < l->sc[p]; i++) b->host[l->sd[p] + i] = pattern(dev_me, p, i);
  to_device(b, b->send, l->send_total * 4);
  size_t span = l->recv_total * 4 + GUARD;
  if (span > b->cap) span = b->cap;
  for (size_t i = 0; i < span / 4; i++) b->host[i] = 12345.0f;
  to_device(b, b->recv, span);
  issue_op(b, lib, op, l);
  sync_stream(b);
  if (moeccl_device_copy(b->host, b->recv, span) != moecclSuccess)
    dev_die("copy from the device failed");
  long wrong = 0;
  size_t end = 0;
  for (int p = 0; p < dev_nranks; p++) {
    for (size_t i = 0; i < l->rc[p]; i++) wrong += b->host[l->rd[p] + i] != pattern(p, dev_me, i);
    end = l->rd[p] + l->rc[p] > end ? l->rd[p] + l->rc[p] : end;
  }
  for (size_t i = end; i < span / 4; i++) wrong += b->host[i] != 12345.0f;
  return wrong;
}

/* Seconds per call of lib (the slowest rank's), over o->iters calls. */
static double series(bench_t* b, enum lib_kind lib, enum op_kind op, const layout_t* l) {
  for (int i = 0; i < b->o->warmup; i++) issue_op(b, lib, op, l);
  sync_stream(b);
  dev_barrier();
  double t0 = dev_now();
  for (int i = 0; i < b->o->iters; i++) issue_op(b, lib, op, l);
  sync_stream(b);
  return slowest((dev_now() - t0) / b->o->iters);
}

static FILE* json_out;
static int json_rows;
/* --costs: the largest all-to-all's medians (rank 0), what each rank receives */
static double costs_roof, costs_moeccl, costs_recv, costs_bus;

/* Measures and prints one (op, size) row on rank 0; 0, or 1 when a value was
 * wrong. */
static int row(bench_t* b, enum op_kind op, size_t bytes) {
  const options_t* o = b->o;
  layout_t l;
  make_layout(op, bytes, &l);
  int nlib = b->ncomm ? 3 : 2;
  double t[3][MAX_REPS];
  for (int rep = 0; rep < o->reps; rep++)
    for (int k = 0; k < nlib; k++) t[k][rep] = series(b, (enum lib_kind)k, op, &l);
  double med[3] = {0, 0, 0};
  for (int k = 0; k < nlib; k++) med[k] = dev_median(t[k], o->reps);
  long wrong[3] = {0, 0, 0};
  if (o->check)
    for (int k = 1; k < nlib; k++) wrong[k] = total_wrong(check_op(b, (enum lib_kind)k, op, &l));
  if (dev_me != 0) return wrong[1] || wrong[2];
  /* bytes: what each rank sends (the all-to-all's size); busbw as nccl-tests */
  double sent = (double)l.send_total * 4, f = (double)(dev_nranks - 1) / dev_nranks;
  double bus = sent / med[1] * f / 1e9, roof_pct = 100.0 * med[0] / med[1];
  if (op == OP_A2A)
    costs_roof = med[0], costs_moeccl = med[1], costs_recv = (double)l.recv_total * 4,
    costs_bus = bus;
  printf("%12zu %9s %10.1f %8.2f %6.1f", bytes, op == OP_A2A ? "alltoall" : "alltoallv",
         med[1] * 1e6, bus, roof_pct);
  if (b->ncomm)
    printf(" %10.1f %8.2f %6.2f", med[2] * 1e6, sent / med[2] * f / 1e9, med[2] / med[1]);
  else printf(" %10s %8s %6s", "-", "-", "-");
  printf(" %9.1f %6ld %6ld\n", med[0] * 1e6, wrong[1], wrong[2]);
  fflush(stdout);
  if (json_out) {
    fprintf(json_out,
            "%s\n  {\"op\": \"%s\", \"bytes\": %zu, \"ranks\": %d, \"moeccl_us\": %.3f, "
            "\"moeccl_busbw\": %.4f, \"roof_us\": %.3f, \"pct_roof\": %.2f, \"wrong\": %ld",
            json_rows++ ? "," : "", op == OP_A2A ? "alltoall" : "alltoallv", bytes, dev_nranks,
            med[1] * 1e6, bus, med[0] * 1e6, roof_pct, wrong[1]);
    if (b->ncomm)
      fprintf(json_out,
              ", \"nccl_us\": %.3f, \"nccl_busbw\": %.4f, \"vs_nccl\": %.4f, \"nccl_wrong\": %ld",
              med[2] * 1e6, sent / med[2] * f / 1e9, med[2] / med[1], wrong[2]);
    fputs("}", json_out);
  }
  return wrong[1] || wrong[2];
}

/* ---- --costs: the device costs the tuner prices device calls with ---------- */

/* Microseconds a copy and a kernel launch cost when queued back to back on
 * the stream (every rank at once, the slowest rank's): 200 copies of 256
 * bytes, 200 launches of the library's row-copy kernel with no rows (the
 * smallest launch there is); launch -1 when the kernels do not load. */
static void latencies(bench_t* b, double* copy_us, double* launch_us) {
  enum { N = 200 };
  sync_stream(b);
  dev_barrier();
  double t0 = dev_now();
  for (int i = 0; i < N; i++) {
    moecclResult_t r = b->d->copy_async(b->recv, b->send, 256, b->stream);
    if (r != moecclSuccess) dev_die("copy_async: %s", moecclGetErrorString(r));
  }
  sync_stream(b);
  *copy_us = 1e6 * slowest((dev_now() - t0) / N);
  const moeccl_dev_image_t image = {moeccl_kernels_fatbin, moeccl_kernels_fatbin_bytes,
                                    moeccl_kernel_twins, MOECCL_K_COUNT};
  void *module = NULL, *fn = NULL;
  int ok = b->d->module_load(&image, &module) == moecclSuccess &&
           b->d->function(module, "moeccl_k_rows_copy", &fn) == moecclSuccess;
  moeccl_krows_args_t g = {.dst = b->recv, .src = b->send, .nterms = 0, .unit = 4};
  dev_barrier();
  t0 = dev_now();
  for (int i = 0; ok && i < N; i++)
    ok = b->d->launch(fn, 1, 32, &g, sizeof g, b->stream) == moecclSuccess;
  sync_stream(b);
  double t = slowest(ok ? (dev_now() - t0) / N : -1.0);
  *launch_us = ok && t >= 0 ? 1e6 * t : -1.0;
}

/* Rank 0 writes the costs as a tune file's device line (MOECCL_TUNE_FILE):
 * HBM from the roofline copy at the largest all-to-all size (every rank
 * copies what it receives at once: N x bytes read and written), the peer
 * link from moeccl's all-to-all there (its bus bandwidth per rank), the
 * copy and launch latencies measured before the series. */
static void write_costs(const bench_t* b, double copy_us, double launch_us) {
  const char* path = b->o->costs;
  if (!(costs_roof > 0 && costs_moeccl > 0)) dev_die("--costs: no all-to-all row was measured");
  FILE* f = fopen(path, "w");
  if (!f) dev_die("--costs %s: %s", path, strerror(errno));
  double hbm = 2.0 * dev_nranks * costs_recv / costs_roof / 1e9;
  fprintf(f,
          "# device costs measured by a2a_dev_perf: %d ranks on device 0 (%s backend); HBM from\n"
          "# the roofline copy of %.0f bytes per rank (%.1f us), the link from moeccl's\n"
          "# all-to-all there (bus bandwidth per rank), copy and launch latencies from 200\n"
          "# queued copies of 256 bytes and launches of an empty kernel\n"
          "device hbm_GBps=%.4g link_GBps=%.4g copy_us=%.3g",
          dev_nranks, b->d->name, costs_recv, costs_roof * 1e6, hbm, costs_bus, copy_us);
  if (launch_us >= 0) fprintf(f, " launch_us=%.3g", launch_us);
  fputc('\n', f);
  if (fclose(f) != 0) dev_die("--costs %s: %s", path, strerror(errno));
  printf("# costs written to %s: device hbm_GBps=%.4g link_GBps=%.4g copy_us=%.3g launch_us=%.3g\n",
         path, hbm, costs_bus, copy_us, launch_us);
}

/* ---- NCCL ------------------------------------------------------------------ */

/* Every rank loads NCCL and joins one communicator, or every rank learns
 * why not (rank 0 tells).  1 with b->ncomm set, else 0. */
static int nccl_start(bench_t* b, dev_nccl_t* n) {
  char why[256] = "";
  int ok = b->d->count() > 0 && strcmp(b->d->name, "cuda") == 0;
  if (!ok) snprintf(why, sizeof why, "the device backend is %s, not cuda", b->d->name);
  if (ok) ok = dev_nccl_load(n, b->o->nccl_path, 0, why, sizeof why) == 0;
  if (ok && dev_me == 0) {
    int r = n->get_unique_id(&S->nccl_id);
    if (r != 0) {
      snprintf(why, sizeof why, "ncclGetUniqueId: %s", n->error_string(r));
      ok = 0;
    }
  }
  S->nccl_ok[dev_me] = ok;
  if (!ok && !S->nccl_why[0]) snprintf(S->nccl_why, sizeof S->nccl_why, "rank %d: %s", dev_me, why);
  dev_barrier();
  for (int r = 0; r < dev_nranks; r++) ok &= S->nccl_ok[r];
  dev_barrier();
  if (ok) {
    int r = n->init_rank(&b->ncomm, dev_nranks, S->nccl_id, dev_me);
    S->nccl_ok[dev_me] = r == 0;
    if (r != 0) {
      const char* last = n->last_error ? n->last_error(NULL) : "";
      if (dev_me == 0 || !S->nccl_why[0])
        snprintf(S->nccl_why, sizeof S->nccl_why, "rank %d: ncclCommInitRank: %s%s%s", dev_me,
                 n->error_string(r), last && *last ? ": " : "", last ? last : "");
      b->ncomm = NULL;
    }
    dev_barrier();
    for (int q = 0; q < dev_nranks; q++) ok &= S->nccl_ok[q];
    dev_barrier();
    if (!ok && b->ncomm) {
      n->destroy(b->ncomm);
      b->ncomm = NULL;
    }
  }
  return ok;
}

/* ---- the rank's main -------------------------------------------------------- */

static int rank_main(const options_t* o) {
  bench_t b = {.o = o};
  b.d = moeccl_device();
  if (!b.d || b.d->count() < 1)
    dev_die("no device backend (MOECCL_DEVICE=cuda needs a CUDA driver and device; emu emulates one)");
  int dev = 0; /* the seam's streams live on the current device: every rank on device 0 */
  /* both buffers hold the largest receive (the hot rank's, in all-to-allv)
   * and the largest send: all-to-allv's blocks round down, never up */
  layout_t l;
  b.cap = o->maxbytes;
  for (int op = OP_A2A; op <= OP_A2AV; op <<= 1) {
    make_layout((enum op_kind)op, o->maxbytes, &l);
    if (l.recv_total * 4 > b.cap) b.cap = l.recv_total * 4;
  }
  b.cap += GUARD;
  if (moecclMemAllocDevice((void**)&b.send, b.cap, dev) != moecclSuccess ||
      moecclMemAllocDevice((void**)&b.recv, b.cap, dev) != moecclSuccess)
    dev_die("moecclMemAllocDevice(%zu): %s", b.cap, moecclGetLastError(NULL));
  if (!(b.host = malloc(b.cap))) dev_die("out of host memory (%zu bytes)", b.cap);
  moecclResult_t r = b.d->stream_create(&b.stream);
  if (r != moecclSuccess) dev_die("stream_create: %s", moecclGetErrorString(r));
  r = moecclCommInitRank(&b.comm, dev_nranks, *dev_ranks_id(), dev_me);
  if (r != moecclSuccess)
    dev_die("moecclCommInitRank: %s: %s", moecclGetErrorString(r), moecclGetLastError(NULL));
  dev_nccl_t nccl;
  b.nccl = &nccl;
  if (o->nccl) nccl_start(&b, &nccl);
  if (dev_me == 0) {
    char devname[160] = "";
    snprintf(devname, sizeof devname, "%s backend, %d device(s)", b.d->name, b.d->count());
    printf("# a2a_dev_perf: %d ranks, %s, all on device 0 of %d; float32; %d reps of %d calls "
           "(median), %d warm-up\n",
           dev_nranks, devname, b.d->count(), o->reps, o->iters, o->warmup);
    if (b.ncomm) printf("# baseline: NCCL %d (%s)\n", nccl.version, nccl.path);
    else if (o->nccl) printf("# baseline: none: NCCL could not run here: %s\n", S->nccl_why);
    else printf("# baseline: none (--baseline none)\n");
    printf("# roof: each rank copies the bytes it receives within device memory, all at once "
           "(%%roof = roof time / moeccl time); vs_nccl = NCCL time / moeccl time;\n"
           "# alltoallv: MoE skew (receivers zipf %.1f, rank 0 hottest); wrong: checked elements "
           "(-c)\n",
           SKEW_S);
    printf("# %10s %9s %10s %8s %6s %10s %8s %6s %9s %6s %6s\n", "bytes", "op", "moeccl_us",
           "busbw", "%roof", "nccl_us", "busbw", "vs_nccl", "roof_us", "wrong", "nwrong");
    if (o->json && !(json_out = fopen(o->json, "w")))
      dev_die("--json %s: %s", o->json, strerror(errno));
    if (json_out) fputs("[", json_out);
  }
  double copy_us = 0, launch_us = -1;
  if (o->costs) latencies(&b, &copy_us, &launch_us);
  int bad = 0;
  for (int op = OP_A2A; op <= OP_A2AV; op <<= 1) {
    if (!(o->ops & op)) continue;
    for (size_t s = o->minbytes; s && s <= o->maxbytes;) {
      bad |= row(&b, (enum op_kind)op, s);
      if (o->step < 2 || s > o->maxbytes / o->step) break;
      s *= o->step;
    }
  }
  if (json_out) {
    fputs("\n]\n", json_out);
    fclose(json_out);
  }
  if (o->costs && dev_me == 0) write_costs(&b, copy_us, launch_us);
  dev_barrier();
  if (b.ncomm) nccl.destroy(b.ncomm);
  moecclCommDestroy(b.comm);
  b.d->stream_destroy(b.stream);
  moecclMemFree(b.send);
  moecclMemFree(b.recv);
  free(b.host);
  if (bad && dev_me == 0) fprintf(stderr, "a2a_dev_perf: wrong values (see the wrong columns)\n");
  return bad;
}

/* ---- options and the launcher ----------------------------------------------- */

static void usage(void) {
  printf("usage: a2a_dev_perf -n RANKS [options]   (MOECCL_DEVICE=cuda|emu picks the backend)\n"
         "  -n, --ranks R          forked ranks on this node (2..%d)\n"
         "  -b, --minbytes SIZE    smallest size: bytes each rank sends (K/M/G; default 1M)\n"
         "  -e, --maxbytes SIZE    largest size (default 64M)\n"
         "  -f, --stepfactor N     multiply the size by N each step (default 2)\n"
         "  -i, --iters N          timed calls per series (default 20)\n"
         "  -w, --warmup N         untimed calls before each series (default 3)\n"
         "  -r, --reps N           series per library and size; the median is shown (default 5)\n"
         "  -c, --check 0|1        one checked call per library and size (default 1)\n"
         "  -o, --op OP            alltoall, alltoallv (MoE skew) or both (default both)\n"
         "      --baseline nccl|none  NCCL in the same run (default nccl)\n"
         "      --nccl-lib PATH    the real NCCL (default %s, else libnccl.so.2)\n"
         "      --json FILE        also write every row to FILE as a JSON array\n"
         "      --costs FILE       write the device costs measured (HBM, link, copy and\n"
         "                         launch latency) as a tune file (MOECCL_TUNE_FILE)\n"
         "  -h, --help             this text\n",
         MAX_RANKS, DEV_NCCL_DEFAULT_LIB);
}

static int parse_opts(int argc, char** argv, options_t* o) {
  static const struct option lo[] = {
      {"ranks", required_argument, NULL, 'n'},    {"minbytes", required_argument, NULL, 'b'},
      {"maxbytes", required_argument, NULL, 'e'}, {"stepfactor", required_argument, NULL, 'f'},
      {"iters", required_argument, NULL, 'i'},    {"warmup", required_argument, NULL, 'w'},
      {"reps", required_argument, NULL, 'r'},     {"check", required_argument, NULL, 'c'},
      {"op", required_argument, NULL, 'o'},       {"baseline", required_argument, NULL, 'B'},
      {"nccl-lib", required_argument, NULL, 'L'}, {"json", required_argument, NULL, 'J'},
      {"costs", required_argument, NULL, 'C'},
      {"help", no_argument, NULL, 'h'},           {NULL, 0, NULL, 0}};
  *o = (options_t){.minbytes = 1u << 20,
                   .maxbytes = 64u << 20,
                   .step = 2,
                   .iters = 20,
                   .warmup = 3,
                   .reps = 5,
                   .check = 1,
                   .ops = OP_A2A | OP_A2AV,
                   .nccl = 1,
                   .nccl_path = DEV_NCCL_DEFAULT_LIB};
  int c, step;
  while ((c = getopt_long(argc, argv, "n:b:e:f:i:w:r:c:o:h", lo, NULL)) != -1) {
    int bad = 0;
    switch (c) {
      case 'n': bad = perf_parse_int(optarg, 2, MAX_RANKS, &o->ranks); break;
      case 'b': bad = perf_parse_size(optarg, &o->minbytes); break;
      case 'e': bad = perf_parse_size(optarg, &o->maxbytes); break;
      case 'f': bad = perf_parse_int(optarg, 1, 1 << 20, &step), o->step = (size_t)step; break;
      case 'i': bad = perf_parse_int(optarg, 1, 1 << 20, &o->iters); break;
      case 'w': bad = perf_parse_int(optarg, 0, 1 << 20, &o->warmup); break;
      case 'r': bad = perf_parse_int(optarg, 1, MAX_REPS, &o->reps); break;
      case 'c': bad = perf_parse_int(optarg, 0, 1, &o->check); break;
      case 'o':
        o->ops = !strcmp(optarg, "alltoall")    ? OP_A2A
                 : !strcmp(optarg, "alltoallv") ? OP_A2AV
                 : !strcmp(optarg, "both")      ? OP_A2A | OP_A2AV
                                                : 0;
        bad = !o->ops;
        break;
      case 'B':
        o->nccl = !strcmp(optarg, "nccl");
        bad = !o->nccl && strcmp(optarg, "none");
        break;
      case 'L': o->nccl_path = optarg; break;
      case 'J': o->json = optarg; break;
      case 'C': o->costs = optarg; break;
      case 'h': usage(); return 1;
      default: return 2;
    }
    if (bad) {
      fprintf(stderr, "a2a_dev_perf: bad value '%s' for -%c (see -h)\n", optarg, c);
      return 2;
    }
  }
  const char* why = NULL;
  if (optind < argc) why = "unexpected argument";
  else if (!o->ranks) why = "-n RANKS is required";
  else if (o->minbytes == 0 || o->minbytes > o->maxbytes) why = "need 0 < minbytes <= maxbytes";
  else if (o->step < 2 && o->minbytes != o->maxbytes)
    why = "stepfactor must be >= 2 unless minbytes == maxbytes";
  else if (o->maxbytes > ((size_t)1 << 40)) why = "maxbytes above 1 TiB";
  else if (o->costs && !(o->ops & OP_A2A)) why = "--costs needs the all-to-all (-o alltoall or both)";
  if (why) fprintf(stderr, "a2a_dev_perf: %s (see -h)\n", why);
  return why ? 2 : 0;
}

static int run_rank(void* o) { return rank_main(o) ? 1 : 0; }

int main(int argc, char** argv) {
  options_t o;
  int rc = parse_opts(argc, argv, &o);
  if (rc) return rc == 1 ? 0 : 2;
  /* NCCL newer than 2.28 runs several ranks on one GPU only when asked */
  setenv("NCCL_MULTI_RANK_GPU_ENABLE", "1", 0);
  return dev_ranks_run("a2a_dev_perf", o.ranks, sizeof *S, (void**)&S, run_rank, &o, 0);
}
