/*
 * test_tune_probe.c - the costs the tuner measures at creation
 * (src/tune/probe.h, MOECCL_TUNE_PROBE).
 *
 * In this process, without a communicator:
 *   agree     the agreed values from a made-up table: a machine's copy rate
 *             is its bytes over its ranks' time, at most the window times
 *             its cores; the slowest machine's; device costs the median
 *             per machine, then the worst; zeros (nothing measured) ignored
 *   host      one probe copies for about the window; a window already
 *             over or far ahead is one from now; the start is after the
 *             machine's last entry
 * On 3 forked ranks (MOECCL_DEVICE=emu, MOECCL_DEBUG=INFO to a file):
 *   measured  the copy rate and the device's HBM, copy and launch costs
 *             are measured, the same on every rank, and rank 0 logs where
 *             they came from; a split communicator keeps its parent's
 *   none      MOECCL_TUNE_PROBE=none: the defaults, logged as such
 *   nodevice  MOECCL_DEVICE=none: the copy rate measured, the device
 *             costs the defaults (no rank reaches a peer through a device)
 *   file      a tune file's copy and device lines win over the probes
 *   differ    ranks with different MOECCL_TUNE_PROBE all fail creation
 * Then the time a creation takes on 2 ranks, probes on and off (printed,
 * medians of 15; not checked: the machine may be busy).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "comm/comm.h"
#include "device/device.h"
#include "mp_harness.h"
#include "topo/topo.h"
#include "tune/probe.h"
#include "tune/tuner.h"
#include "unit_check.h"

#define LOG_PATH "/tmp/test_tune_probe.log"

/* ---- without a communicator ---------------------------------------------- */

static void test_agree(void) {
  /* Machine A (ranks 0, 1; 2 cores), B (2, 3, 4; 1 core), C (5; 4 cores). */
  enum { N = 6 };
  moeccl_peer_info_t peers[N];
  memset(peers, 0, sizeof(peers));
  const uint64_t machine[N] = {7, 7, 3, 3, 3, 9};
  const uint64_t mask[N] = {0x1, 0x2, 0x1, 0x1, 0x1, 0xf};
  for (int r = 0; r < N; r++) peers[r].machine_hash = machine[r], peers[r].cpu_mask[0] = mask[r];
  moeccl_comm_t c;
  memset(&c, 0, sizeof(c));
  c.nranks = N, c.peers = peers;
  const double w = (double)MOECCL_PROBE_WINDOW_NS * 1e-9;
  moeccl_probe_t all[N] = {
      /* A: 20e6 bytes over 2 windows: 10 GB/s */
      {10e6, w, 100, 2, 1},
      {10e6, w, 300, 4, 3},
      /* B: 3 ranks share a core: 6e6 bytes over one window (not 3): 6 GB/s */
      {2e6, w, 200, 1, 5},
      {2e6, w, 0, 0, 0},
      {2e6, w, 400, 3, 2},
      /* C: nothing measured on the host; the device alone */
      {0, 0, 50, 1, 0},
  };
  double copy = -1;
  moeccl_probe_dev_t d;
  CHECK(moeccl_probe_agree(&c, all, &copy, &d) == moecclSuccess, "agree failed");
  CHECK_EXPR(fabs(copy - 6.0) < 1e-9, "copy %g", copy);
  /* hbm: medians A 200, B 300, C 50: the least; copy_us: A 3, B 2, C 1:
   * the most; launch_us: A 2, B 3.5, C none. */
  CHECK_EXPR(d.hbm_GBps == 50 && d.copy_us == 3 && d.launch_us == 3.5, "dev %g %g %g", d.hbm_GBps,
             d.copy_us, d.launch_us);
  /* A rank that came during the window counts for its part: A with rank 1 there for half
   * the window: 15e6 bytes over 1.5 windows. */
  all[1].host_bytes = 5e6, all[1].host_ready_s = w / 2;
  all[2].host_bytes = all[3].host_bytes = all[4].host_bytes = 20e6;
  CHECK(moeccl_probe_agree(&c, all, &copy, &d) == moecclSuccess, "agree failed");
  CHECK_EXPR(fabs(copy - 10.0) < 1e-9, "copy %g", copy);
  /* Late ranks (each in a window of its own) count only where no rank of
   * their machine copied in the common one: then their median rate. */
  all[2].host_late = all[3].host_late = 1; /* B: rank 4 on time alone */
  all[2].host_bytes = 9e6, all[3].host_bytes = 1e6;
  CHECK(moeccl_probe_agree(&c, all, &copy, &d) == moecclSuccess, "agree failed");
  CHECK_EXPR(fabs(copy - 10.0) < 1e-9, "copy %g (B: 20 GB/s on time)", copy);
  all[4].host_late = 1, all[4].host_bytes = 5e6; /* B all late: median of 9, 1, 5 GB/s */
  CHECK(moeccl_probe_agree(&c, all, &copy, &d) == moecclSuccess, "agree failed");
  CHECK_EXPR(fabs(copy - 5.0) < 1e-9, "copy %g (B: late median 5)", copy);
  /* Nothing measured anywhere: zeros. */
  memset(all, 0, sizeof(all));
  CHECK(moeccl_probe_agree(&c, all, &copy, &d) == moecclSuccess, "agree failed");
  CHECK_EXPR(copy == 0 && d.hbm_GBps == 0 && d.copy_us == 0 && d.launch_us == 0, "zeros %g %g",
             copy, d.hbm_GBps);
  /* 3 significant digits. */
  all[0] = (moeccl_probe_t){12345678.0, w, 1234.5678, 0.123456, 0};
  CHECK(moeccl_probe_agree(&c, all, &copy, &d) == moecclSuccess, "agree failed");
  CHECK_EXPR(fabs(copy - 12.3) < 1e-9 && fabs(d.hbm_GBps - 1230) < 1e-9 &&
                 fabs(d.copy_us - 0.123) < 1e-12,
             "rounded %.9g %.9g %.9g", copy, d.hbm_GBps, d.copy_us);
}

static void test_host(void) {
  moeccl_probe_t p;
  moeccl_probe_host_prepare(); /* faulting the buffer in may take longer than the window */
  int64_t t0 = moeccl_probe_clock_ns();
  moeccl_probe_host(t0, &p);
  double took = (double)(moeccl_probe_clock_ns() - t0) * 1e-9;
  const double w = (double)MOECCL_PROBE_WINDOW_NS * 1e-9;
  CHECK_EXPR(p.host_bytes > 0 && p.host_ready_s > 0 && p.host_ready_s <= w, "%g bytes, %g s",
             p.host_bytes, p.host_ready_s);
  CHECK_EXPR(took >= w, "took %g s", took);
  /* A start 1 ms ahead: sleeps first, then the whole window. */
  t0 = moeccl_probe_clock_ns();
  moeccl_probe_host(t0 + 1000000, &p);
  took = (double)(moeccl_probe_clock_ns() - t0) * 1e-9;
  CHECK_EXPR(took >= 2 * w && p.host_ready_s == w, "took %g s, ready %g s", took, p.host_ready_s);
  CHECK_EXPR(p.host_late == 0, "late %g", p.host_late);
  /* A window already over (a busy machine): one of its own, from now. */
  moeccl_probe_host(moeccl_probe_clock_ns() - 2 * MOECCL_PROBE_WINDOW_NS, &p);
  CHECK_EXPR(p.host_bytes > 0 && p.host_ready_s == w && p.host_late == 1, "%g bytes, %g s",
             p.host_bytes, p.host_ready_s);
  /* A start an hour ahead (a clock that is not shared) starts now. */
  t0 = moeccl_probe_clock_ns();
  moeccl_probe_host(t0 + 3600LL * 1000000000LL, &p);
  took = (double)(moeccl_probe_clock_ns() - t0) * 1e-9;
  CHECK_EXPR(took < 1.0 && p.host_bytes > 0, "took %g s", took);
  /* The window starts after the last entry of this rank's machine. */
  moeccl_peer_info_t peers[3];
  memset(peers, 0, sizeof(peers));
  peers[0].machine_hash = peers[1].machine_hash = 1, peers[2].machine_hash = 2;
  moeccl_comm_t c;
  memset(&c, 0, sizeof(c));
  c.nranks = 3, c.peers = peers, c.rank = 0;
  const int64_t entered[3] = {1000, 5000, 900000000};
  int64_t s = moeccl_probe_host_start(&c, entered);
  CHECK_EXPR(s > 5000 && s < 5000 + 10000000, "start %lld", (long long)s);
}

/* ---- on communicators ---------------------------------------------------- */

typedef struct {
  double copy, hbm, copy_us, launch_us;
} costs_t;

static costs_t costs_of(moecclComm_t comm) {
  const moeccl_topo_t* t = moeccl_tuner_topo((moeccl_comm_t*)comm, 0);
  return (costs_t){t->copy_GBps, t->dev.hbm_GBps, t->dev.copy_us, t->dev.launch_us};
}

/* Every rank holds the same costs (exact: they are agreed, not measured
 * apart). */
static int same_everywhere(moecclComm_t comm, int rank, int n, costs_t mine) {
  costs_t* all = mp_xmalloc(sizeof(costs_t) * (size_t)n);
  MP_OK_COMM(comm, moecclAllGather(&mine, all, sizeof(costs_t), moecclUint8, comm, NULL));
  for (int r = 0; r < n; r++)
    MP_CHECK(memcmp(&all[r], &all[0], sizeof(costs_t)) == 0,
             "rank %d: rank %d holds copy %g hbm %g copy_us %g launch_us %g, rank 0 %g %g %g %g",
             rank, r, all[r].copy, all[r].hbm, all[r].copy_us, all[r].launch_us, all[0].copy,
             all[0].hbm, all[0].copy_us, all[0].launch_us);
  free(all);
  return 0;
}

static int body_measured(moecclComm_t comm, int rank, int n, void* arg) {
  (void)arg;
  costs_t k = costs_of(comm);
  MP_CHECK(k.copy > 0 && k.copy < 1000, "copy rate %g", k.copy);
  MP_CHECK(k.hbm > 0 && k.hbm != MOECCL_DEV_DEFAULT_HBM_GBPS, "hbm %g", k.hbm);
  /* (that these two were measured, not kept, the log line says: a
   * measurement may round to the default) */
  MP_CHECK(k.copy_us > 0 && k.launch_us > 0, "copy_us %g, launch_us %g", k.copy_us, k.launch_us);
  if (same_everywhere(comm, rank, n, k)) return 1;
  if (rank == 0)
    printf("  measured: copies %g GB/s per rank; emulated device: HBM %g GB/s, copy %g us, "
           "launch %g us\n",
           k.copy, k.hbm, k.copy_us, k.launch_us);
  /* A split keeps its parent's costs (it measures nothing). */
  moecclComm_t sub = NULL;
  MP_OK_COMM(comm, moecclCommSplit(comm, rank % 2, rank, &sub, NULL));
  costs_t s = costs_of(sub);
  MP_CHECK(memcmp(&s, &k, sizeof(s)) == 0, "rank %d: split's costs %g %g differ from %g %g", rank,
           s.copy, s.hbm, k.copy, k.hbm);
  MP_OK_COMM(sub, moecclCommDestroy(sub));
  return 0;
}

static int body_none(moecclComm_t comm, int rank, int n, void* arg) {
  (void)arg;
  costs_t k = costs_of(comm);
  MP_CHECK(k.copy == 20.0 && k.hbm == MOECCL_DEV_DEFAULT_HBM_GBPS &&
               k.copy_us == MOECCL_DEV_DEFAULT_COPY_US &&
               k.launch_us == MOECCL_DEV_DEFAULT_LAUNCH_US,
           "defaults: %g %g %g %g", k.copy, k.hbm, k.copy_us, k.launch_us);
  return same_everywhere(comm, rank, n, k);
}

static int body_nodevice(moecclComm_t comm, int rank, int n, void* arg) {
  (void)arg;
  costs_t k = costs_of(comm);
  MP_CHECK(k.hbm == MOECCL_DEV_DEFAULT_HBM_GBPS && k.copy_us == MOECCL_DEV_DEFAULT_COPY_US &&
               k.launch_us == MOECCL_DEV_DEFAULT_LAUNCH_US,
           "device defaults: %g %g %g", k.hbm, k.copy_us, k.launch_us);
  return same_everywhere(comm, rank, n, k);
}

static int body_file(moecclComm_t comm, int rank, int n, void* arg) {
  (void)arg;
  costs_t k = costs_of(comm);
  MP_CHECK(k.copy == 3.5 && k.hbm == 2000 && k.copy_us == MOECCL_DEV_DEFAULT_COPY_US,
           "file: %g %g %g", k.copy, k.hbm, k.copy_us);
  return same_everywhere(comm, rank, n, k);
}

static int body_differ(moecclComm_t unused, int rank, int n, void* arg) {
  (void)unused, (void)arg;
  if (rank == 1) setenv("MOECCL_TUNE_PROBE", "none", 1);
  moecclComm_t comm = NULL;
  moecclResult_t rc = moecclCommInitRank(&comm, n, mp_unique_id, rank);
  MP_CHECK(rc != moecclSuccess, "rank %d: init succeeded with differing MOECCL_TUNE_PROBE", rank);
  return 0;
}

static void sort(double* t, int n) {
  for (int i = 1; i < n; i++)
    for (int j = i; j > 0 && t[j] < t[j - 1]; j--) {
      double x = t[j];
      t[j] = t[j - 1], t[j - 1] = x;
    }
}

/* Times creations with the probes off and on, alternating (rank 0's time:
 * the ranks leave the creation's last exchange together). */
static int body_time(moecclComm_t world, int rank, int n, void* arg) {
  (void)arg;
  enum { ROUNDS = 15 };
  double t[2][ROUNDS];
  for (int i = 0; i < 2 * ROUNDS; i++) {
    setenv("MOECCL_TUNE_PROBE", i % 2 ? "all" : "none", 1);
    moecclUniqueId id;
    memset(&id, 0, sizeof(id));
    if (rank == 0) MP_OK(moecclGetUniqueId(&id));
    MP_OK(moecclBroadcast(&id, &id, sizeof(id), moecclUint8, 0, world, NULL));
    double t0 = mp_now();
    moecclComm_t comm = NULL;
    MP_OK(moecclCommInitRank(&comm, n, id, rank));
    t[i % 2][i / 2] = mp_now() - t0;
    MP_OK(moecclCommDestroy(comm));
  }
  sort(t[0], ROUNDS), sort(t[1], ROUNDS);
  if (rank == 0)
    printf("  %d ranks, creation median of %d: %.2f ms without the probes, %.2f ms with them\n", n,
           ROUNDS, t[0][ROUNDS / 2] * 1e3, t[1][ROUNDS / 2] * 1e3);
  return 0;
}

/* Whether the log holds a line with both texts. */
static int logged(const char* a, const char* b) {
  FILE* f = fopen(LOG_PATH, "r");
  if (!f) return 0;
  char line[2048];
  int found = 0;
  while (!found && fgets(line, sizeof(line), f)) found = strstr(line, a) && strstr(line, b);
  fclose(f);
  return found;
}

static int report(const char* name, int rc) {
  printf("%s: %s\n", name, rc == MP_EXIT_PASS ? "pass" : rc == MP_EXIT_SKIP ? "skip" : "FAIL");
  return rc;
}

/* Runs body on 3 ranks and checks the log's copy and device lines. */
static int run_logged(const char* name, mp_body_fn body, const char* copy_text,
                      const char* dev_text) {
  if (truncate(LOG_PATH, 0) != 0) perror("truncate " LOG_PATH);
  int rc = mp_run(3, body, NULL, 60);
  if (rc == MP_EXIT_PASS && !logged("INFO copies:", copy_text)) {
    fprintf(stderr, "%s: no 'copies:' line with '%s' in %s\n", name, copy_text, LOG_PATH);
    rc = MP_EXIT_FAIL;
  }
  if (rc == MP_EXIT_PASS && !logged("INFO device buffers", dev_text)) {
    fprintf(stderr, "%s: no 'device buffers' line with '%s' in %s\n", name, dev_text, LOG_PATH);
    rc = MP_EXIT_FAIL;
  }
  return report(name, rc);
}

int main(int argc, char** argv) {
  (void)argc, (void)argv;
  test_agree();
  test_host();
  if (failures) {
    fprintf(stderr, "%d of %d checks failed\n", failures, checks);
    return 1;
  }
  printf("agree, host: %d checks passed\n", checks);
  mp_env_defaults();
  setenv("MOECCL_DEVICE", "emu", 1);
  setenv("MOECCL_DEBUG", "INFO", 1);
  setenv("MOECCL_DEBUG_SUBSYS", "ALGO", 1);
  setenv("MOECCL_DEBUG_FILE", LOG_PATH, 1);
  unsetenv("MOECCL_TUNE_FILE");
  unsetenv("MOECCL_TOPO_FILE");
  FILE* f = fopen(LOG_PATH, "w");
  if (f) fclose(f);

  setenv("MOECCL_TUNE_PROBE", "all", 1);
  int overall = run_logged("measured", body_measured, "(measured at creation",
                           "(measured at creation: HBM, copy-engine and kernel launch");
  setenv("MOECCL_TUNE_PROBE", "none", 1);
  overall = mp_fold(overall, run_logged("none", body_none, "(default, not measured)",
                                        "(H200-class defaults, not measured)"));
  setenv("MOECCL_TUNE_PROBE", "all", 1);
  setenv("MOECCL_DEVICE", "none", 1);
  overall = mp_fold(overall, run_logged("nodevice", body_nodevice, "(measured at creation",
                                        "(H200-class defaults, not measured)"));
  setenv("MOECCL_DEVICE", "emu", 1);
  char tune[] = "/tmp/test_tune_probe.XXXXXX";
  int fd = mkstemp(tune);
  const char* text = "copy overhead_us=0.1 bw_GBps=3.5\ndevice hbm_GBps=2000\n";
  if (fd < 0 || write(fd, text, strlen(text)) != (ssize_t)strlen(text)) {
    perror("tune file");
    return 1;
  }
  close(fd);
  setenv("MOECCL_TUNE_FILE", tune, 1);
  overall =
      mp_fold(overall, run_logged("file", body_file, "(from the file)", "(costs from the file)"));
  unsetenv("MOECCL_TUNE_FILE");
  unlink(tune);

  mp_opts opts = MP_OPTS_DEFAULT;
  opts.deadline_s = 60;
  opts.no_init = 1;
  overall = mp_fold(overall, report("differ", mp_run_opts(3, body_differ, NULL, &opts)));

  unsetenv("MOECCL_DEVICE");
  setenv("MOECCL_DEBUG", "WARN", 1);
  printf("time (host memory, not checked):\n");
  overall = mp_fold(overall, mp_run(2, body_time, NULL, 120));
  if (getenv("TEST_TUNE_PROBE_RANKS"))
    overall = mp_fold(overall, mp_run(atoi(getenv("TEST_TUNE_PROBE_RANKS")), body_time, NULL, 300));
  unlink(LOG_PATH);
  return overall;
}
