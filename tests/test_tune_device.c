/*
 * test_tune_device.c - the tuner prices calls on device buffers with the
 * topology's device costs (src/topo/topo.h, moeccl_topo_device_t), calls on
 * host buffers as before, and ranks must agree on the device costs.
 *
 * In this process, without a communicator:
 *   file      the tune file's 'device' statement: values read, defaults
 *             where absent, bad values and keys refused with a text naming
 *             the line, a dump that reads back the same
 *   view      moeccl_topo_device_view: the node link and copies take the
 *             device costs, the network classes keep the host's
 *   price     hand-computed prices of small schedules on the view; the host
 *             prices of a tune file do not change when it adds a device
 *             statement; a direct all-to-all of 1 MiB per peer on 2 nodes x
 *             4 ranks is priced lower on device memory than on host memory
 * On 2 forked ranks (MOECCL_DEVICE=emu, MOECCL_TUNE_FILE with a device
 * statement):
 *   tuner     the communicator's tuner prices host calls on comm->topo and
 *             device calls on the view with the file's device costs; an
 *             all-to-all and an AllGather on device buffers and on host
 *             buffers deliver their bytes, and an AllReduce, which the
 *             tuner prices on the view for device buffers (the choice
 *             cached per kind)
 *   differ    rank 1's tune file gives other device costs: every rank's
 *             init fails (the consistency check), none hangs
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "comm/comm.h"
#include "device/device.h"
#include "mp_harness.h"
#include "sched/schedule.h"
#include "topo/topo.h"
#include "tune/cost_model.h"
#include "tune/tuner.h"
#include "unit_check.h"

#define NEAR(got, want)                                                                            \
  CHECK_EXPR(fabs((got) - (want)) < 1e-6 * (1.0 + fabs(want)), "got %.9g, want %.9g", (double)(got), \
             (double)(want))

static const char* const device_line = "device hbm_GBps=2000 link_GBps=100 copy_us=2 launch_us=1\n";
static const char* const host_lines = "link node latency_us=0.5 overhead_us=0.25 bw_GBps=10\n"
                                      "link group latency_us=5 overhead_us=1 bw_GBps=2\n"
                                      "copy overhead_us=0.1 bw_GBps=20\n";

static int parse_costs(moeccl_topo_t* t, const char* text, char* err, size_t n) {
  return moeccl_topo_parse_costs(t, "tune", text, strlen(text), err, n) == moecclSuccess ? 0 : -1;
}

/* A topology of nodes nodes of 8 / nodes ranks with the default costs. */
static void shape(moeccl_topo_t* t, int nodes) {
  if (moeccl_topo_regular_shape(t, nodes, 8 / nodes, 0, 1) != moecclSuccess) {
    fprintf(stderr, "cannot build a topology\n");
    exit(1);
  }
}
static void two_nodes(moeccl_topo_t* t) { shape(t, 2); }

static void test_file(void) {
  moeccl_topo_t t;
  char err[256];
  two_nodes(&t);
  CHECK_EXPR(!t.dev.given && t.dev.hbm_GBps == MOECCL_DEV_DEFAULT_HBM_GBPS &&
                 t.dev.link_GBps == MOECCL_DEV_DEFAULT_LINK_GBPS,
             "defaults %g %g", t.dev.hbm_GBps, t.dev.link_GBps);
  CHECK(parse_costs(&t, "device link_GBps=300\n", err, sizeof(err)) == 0, "%s", err);
  CHECK_EXPR(t.dev.given && t.dev.link_GBps == 300 &&
                 t.dev.hbm_GBps == MOECCL_DEV_DEFAULT_HBM_GBPS &&
                 t.dev.copy_us == MOECCL_DEV_DEFAULT_COPY_US,
             "partial: %g %g %g", t.dev.link_GBps, t.dev.hbm_GBps, t.dev.copy_us);
  static const char* const bad[][2] = {
      {"device\n", "no costs given"},
      {"device hbm_GBps=0\n", "hbm_GBps=0: must be greater than 0"},
      {"device copy_us=-1\n", "copy_us=-1: must be 0 or more"},
      {"device launch_us=x\n", "bad launch_us 'x'"},
      {"device nvlink=3\n", "unknown device key 'nvlink'"},
      {"device link_GBps=1 link_GBps=2\n", "link_GBps given twice"},
      {"device link_GBps\n", "expected key=value"},
  };
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    moeccl_topo_device_t before = t.dev;
    err[0] = '\0';
    CHECK(parse_costs(&t, bad[i][0], err, sizeof(err)) != 0, "accepted: %s", bad[i][0]);
    CHECK(strstr(err, bad[i][1]) && strstr(err, "tune:1"), "'%s': error '%s'", bad[i][0], err);
    CHECK(memcmp(&before, &t.dev, sizeof(before)) == 0, "'%s' changed the costs", bad[i][0]);
  }
  /* A dump with the statement reads back the same costs. */
  CHECK(parse_costs(&t, device_line, err, sizeof(err)) == 0, "%s", err);
  char path[] = "/tmp/test_tune_device.XXXXXX";
  int fd = mkstemp(path);
  CHECK(fd >= 0, "mkstemp");
  if (fd >= 0) close(fd);
  CHECK(moeccl_topo_dump(&t, path, err, sizeof(err)) == moecclSuccess, "dump: %s", err);
  moeccl_topo_t back;
  CHECK(moeccl_topo_load(&back, path, 8, err, sizeof(err)) == moecclSuccess, "load: %s", err);
  CHECK_EXPR(back.dev.given && back.dev.hbm_GBps == 2000 && back.dev.link_GBps == 100 &&
                 back.dev.copy_us == 2 && back.dev.launch_us == 1,
             "read back %g %g %g %g", back.dev.hbm_GBps, back.dev.link_GBps, back.dev.copy_us,
             back.dev.launch_us);
  moeccl_topo_free(&back);
  unlink(path);
  moeccl_topo_free(&t);
}

static void test_view(void) {
  moeccl_topo_t t, v;
  char err[256];
  two_nodes(&t);
  CHECK(parse_costs(&t, host_lines, err, sizeof(err)) == 0, "%s", err);
  CHECK(parse_costs(&t, device_line, err, sizeof(err)) == 0, "%s", err);
  moeccl_topo_device_view(&t, &v);
  const moeccl_link_t* n = &v.link[MOECCL_LINK_NODE];
  NEAR(n->bw_GBps, 100.0);
  NEAR(n->latency_us, 1.0);
  NEAR(n->overhead_us, 1.0); /* a copy's launch, half on each end */
  NEAR(v.copy_GBps, 1000.0);
  NEAR(v.copy_overhead_us, 2.0);
  CHECK(memcmp(&v.link[MOECCL_LINK_GROUP], &t.link[MOECCL_LINK_GROUP], sizeof(moeccl_link_t)) == 0,
        "the network class changed");
  CHECK(v.rank_node == t.rank_node, "the view has its own placement");
  /* The host topology is untouched. */
  NEAR(t.link[MOECCL_LINK_NODE].bw_GBps, 10.0);
  NEAR(t.copy_GBps, 20.0);
  moeccl_topo_free(&t);
}

static double price_direct(const moeccl_topo_t* t, int rank, size_t block, moeccl_sched_t* s) {
  moeccl_a2a_desc_t d = {.nranks = t->nranks, .rank = rank, .block_bytes = block, .elem_size = 1,
                         .topo = t};
  moeccl_sched_reset(s);
  uint32_t b;
  if (moeccl_sched_add_buf(s, NULL, &b) || moeccl_sched_add_buf(s, NULL, &b) ||
      moeccl_sched_add_buf(s, NULL, &b))
    return -1;
  s->scratch_buf = (int)b;
  if (moeccl_a2a_algos[MOECCL_A2A_DIRECT].schedule(&d, s) != moecclSuccess) return -1;
  return moeccl_model_price(t, s, rank, NULL);
}

static void test_price(void) {
  moeccl_topo_t t, v, plain;
  char err[256];
  two_nodes(&t);
  two_nodes(&plain);
  CHECK(parse_costs(&plain, host_lines, err, sizeof(err)) == 0, "%s", err);
  char both[512];
  snprintf(both, sizeof(both), "%s%s", host_lines, device_line);
  CHECK(parse_costs(&t, both, err, sizeof(err)) == 0, "%s", err);
  moeccl_topo_device_view(&t, &v);
  moeccl_sched_t s;
  memset(&s, 0, sizeof(s));
  /* Rank 0 sends and receives 1 MB within its node in one step: on the
   * view two launches' halves (1 us each), 1e6 B at 100 GB/s = 10 us on the
   * link, one kernel launch (1 us) as the step's latency: 11 us.  On the
   * host: 0.5 us of overheads, 100 us on the link (the larger of sent and
   * received), 0.5 us latency. */
  moeccl_sched_reset(&s);
  CHECK(moeccl_sched_add(&s, MOECCL_OP_SEND, 1, 0, 0, 1, 0, 1000000) == moecclSuccess, "add");
  CHECK(moeccl_sched_add(&s, MOECCL_OP_RECV, 1, 0, 0, 1, 0, 1000000) == moecclSuccess, "add");
  CHECK(moeccl_sched_end_step(&s) == moecclSuccess, "end");
  NEAR(moeccl_model_price(&v, &s, 0, NULL), 11.0);
  NEAR(moeccl_model_price(&t, &s, 0, NULL), 101.0 - 0.5);
  /* A local copy of 1 MB: 2 us launch + 1e6 B at 2000 / 2 GB/s = 3 us. */
  moeccl_sched_reset(&s);
  CHECK(moeccl_sched_add(&s, MOECCL_OP_COPY, -1, 0, 0, 1, 0, 1000000) == moecclSuccess, "add");
  CHECK(moeccl_sched_end_step(&s) == moecclSuccess, "end");
  NEAR(moeccl_model_price(&v, &s, 0, NULL), 3.0);
  NEAR(moeccl_model_price(&t, &s, 0, NULL), 0.1 + 1e6 / 20e3);
  moeccl_sched_free(&s);
  moeccl_topo_free(&t);
  moeccl_topo_free(&plain);
  /* Whole calls: host prices do not depend on the device statement;
   * device memory prices its node traffic on the device link, so on one
   * node it is cheaper, while across nodes the network (the same for
   * both) bounds the call. */
  for (int nodes = 1; nodes <= 2; nodes++) {
    shape(&t, nodes);
    shape(&plain, nodes);
    CHECK(parse_costs(&t, both, err, sizeof(err)) == 0, "%s", err);
    CHECK(parse_costs(&plain, host_lines, err, sizeof(err)) == 0, "%s", err);
    moeccl_topo_device_view(&t, &v);
    for (int r = 0; r < 8; r += 3) {
      double host = price_direct(&t, r, 1 << 20, &s);
      double host_plain = price_direct(&plain, r, 1 << 20, &s);
      double dev = price_direct(&v, r, 1 << 20, &s);
      CHECK(host > 0 && host == host_plain, "rank %d: host %g, without device %g", r, host,
            host_plain);
      CHECK(dev > 0 && (nodes == 1 ? dev < host / 5 : dev <= host), "%d nodes, rank %d: device %g, host %g",
            nodes, r, dev, host);
      printf("direct all-to-all, 1 MiB per peer, %d x %d ranks, rank %d: host %.1f us, device "
             "%.1f us\n",
             nodes, 8 / nodes, r, host, dev);
    }
    moeccl_sched_free(&s);
    moeccl_topo_free(&t);
    moeccl_topo_free(&plain);
  }
}

/* ---- on a communicator -------------------------------------------------- */

static char tune_path[64], other_path[64];

static int write_file(char* path, const char* text) {
  int fd = mkstemp(path);
  if (fd < 0) return -1;
  size_t n = strlen(text);
  int ok = write(fd, text, n) == (ssize_t)n;
  close(fd);
  return ok ? 0 : -1;
}

/* A copy through the device seam after the NULL stream's work (the calls
 * run there; the seam's copies on the library's copy stream). */
static moecclResult_t dev_copy(void* dst, const void* src, size_t bytes) {
  moecclResult_t rc = moeccl_device()->synchronize(NULL);
  return rc == moecclSuccess ? moeccl_device_copy(dst, src, bytes) : rc;
}

/* An all-to-all and an AllGather on host buffers and on device buffers. */
static int run_calls(moecclComm_t comm, int rank, int n, int device) {
  size_t block = 4096, bytes = block * (size_t)n;
  unsigned char* hs = mp_xmalloc(bytes);
  unsigned char* hr = mp_xmalloc(bytes);
  void *s = hs, *r = hr;
  for (size_t i = 0; i < bytes; i++) hs[i] = (unsigned char)(rank * 31 + i / block * 7 + i);
  if (device) {
    MP_OK_COMM(comm, moecclMemAllocDevice(&s, bytes, 0));
    MP_OK_COMM(comm, moecclMemAllocDevice(&r, bytes, 0));
    MP_OK_COMM(comm, dev_copy(s, hs, bytes));
  }
  MP_OK_COMM(comm, moecclAlltoAll(s, r, block, moecclUint8, comm, NULL));
  if (device) MP_OK_COMM(comm, dev_copy(hr, r, bytes));
  for (int p = 0; p < n; p++)
    for (size_t i = 0; i < block; i++) {
      size_t at = (size_t)rank * block + i; /* what p sent rank */
      unsigned char want = (unsigned char)(p * 31 + at / block * 7 + at);
      MP_CHECK(hr[(size_t)p * block + i] == want, "%s all-to-all: byte %zu from rank %d",
               device ? "device" : "host", i, p);
    }
  MP_OK_COMM(comm, moecclAllGather(s, r, block, moecclUint8, comm, NULL));
  if (device) MP_OK_COMM(comm, dev_copy(hr, r, bytes));
  for (int p = 0; p < n; p++)
    MP_CHECK(hr[(size_t)p * block + 5] == (unsigned char)(p * 31 + 5), "%s AllGather: rank %d",
             device ? "device" : "host", p);
  /* A reduction: on device buffers it is planned through the tuner (the
   * copy-only calls above, lowered onto the stream, run direct). */
  float* f = (float*)hs;
  for (size_t i = 0; i < block / sizeof(float); i++) f[i] = (float)(rank + 1) * (float)i;
  if (device) MP_OK_COMM(comm, dev_copy(s, hs, block));
  MP_OK_COMM(comm, moecclAllReduce(s, r, block / sizeof(float), moecclFloat, moecclSum, comm, NULL));
  if (device) MP_OK_COMM(comm, dev_copy(hr, r, block));
  float* g = (float*)hr;
  for (size_t i = 0; i < block / sizeof(float); i++)
    MP_CHECK(g[i] == (float)(n * (n + 1) / 2) * (float)i, "%s AllReduce: element %zu: %g",
             device ? "device" : "host", i, (double)g[i]);
  if (device) {
    MP_OK_COMM(comm, moecclMemFree(s));
    MP_OK_COMM(comm, moecclMemFree(r));
  }
  free(hs);
  free(hr);
  return 0;
}

static int body_tuner(moecclComm_t comm, int rank, int n, void* arg) {
  (void)arg;
  moeccl_comm_t* c = (moeccl_comm_t*)comm;
  const moeccl_topo_t* host = moeccl_tuner_topo(c, 0);
  const moeccl_topo_t* dev = moeccl_tuner_topo(c, 1);
  MP_CHECK(host && dev && host != dev, "no topologies");
  MP_CHECK(host->link[MOECCL_LINK_NODE].bw_GBps == 10.0 && host->copy_GBps == 20.0,
           "host costs %g %g", host->link[MOECCL_LINK_NODE].bw_GBps, host->copy_GBps);
  MP_CHECK(dev->link[MOECCL_LINK_NODE].bw_GBps == 100.0 && dev->copy_GBps == 1000.0 &&
               dev->link[MOECCL_LINK_NODE].latency_us == 1.0 && dev->copy_overhead_us == 2.0,
           "device costs %g %g", dev->link[MOECCL_LINK_NODE].bw_GBps, dev->copy_GBps);
  for (int round = 0; round < 2; round++) { /* the second from the tuner's caches */
    if (run_calls(comm, rank, n, 0)) return 1;
    if (run_calls(comm, rank, n, 1)) return 1;
  }
  return 0;
}

static int body_differ(moecclComm_t unused, int rank, int n, void* arg) {
  (void)unused, (void)arg;
  if (rank == 1) setenv("MOECCL_TUNE_FILE", other_path, 1);
  moecclComm_t comm = NULL;
  moecclResult_t rc = moecclCommInitRank(&comm, n, mp_unique_id, rank);
  MP_CHECK(rc != moecclSuccess, "rank %d: init succeeded with differing device costs", rank);
  return 0;
}

int main(int argc, char** argv) {
  (void)argc, (void)argv;
  test_file();
  test_view();
  test_price();
  if (failures) {
    fprintf(stderr, "%d of %d checks failed\n", failures, checks);
    return 1;
  }
  printf("file, view, price: %d checks passed\n", checks);
  mp_env_defaults();
  setenv("MOECCL_DEVICE", "emu", 0);
  char both[512];
  snprintf(both, sizeof(both), "%s%s", host_lines, device_line);
  snprintf(tune_path, sizeof(tune_path), "/tmp/test_tune_device.XXXXXX");
  snprintf(other_path, sizeof(other_path), "/tmp/test_tune_device.XXXXXX");
  if (write_file(tune_path, both) ||
      write_file(other_path, "device hbm_GBps=2000 link_GBps=101 copy_us=2 launch_us=1\n")) {
    perror("tune file");
    return 1;
  }
  setenv("MOECCL_TUNE_FILE", tune_path, 1);
  int overall = mp_run(2, body_tuner, NULL, 60);
  printf("tuner: %s\n", overall == MP_EXIT_PASS ? "pass" : overall == MP_EXIT_SKIP ? "skip" : "FAIL");
  mp_opts opts = MP_OPTS_DEFAULT;
  opts.deadline_s = 60;
  opts.no_init = 1;
  int differ = mp_run_opts(2, body_differ, NULL, &opts);
  printf("differ: %s\n", differ == MP_EXIT_PASS ? "pass" : "FAIL");
  overall = mp_fold(overall, differ);
  unlink(tune_path);
  unlink(other_path);
  return overall;
}
