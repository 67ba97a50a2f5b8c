/*
 * Unit test of the simulator API (include/moeccl_sim.h, src/api/sim*.c):
 * uniform all-to-alls priced exactly as perf/a2a_sim prices them (its
 * sample and its loop, written out again here), even all-to-allvs as the
 * same plus the count exchange their algorithm runs, the cheapest
 * algorithm picked, more bytes costing more, sub-groups on one node
 * cheaper than across nodes, send/recv within, between nodes and between
 * groups, a topology file, cost overrides, a simulator from a live
 * one-rank communicator, every refusal, and the time to price an even
 * all-to-allv over 4,096 dragonfly ranks (TEST_SIM_NO_TIMING=1 skips its
 * bound, for valgrind).
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "algos/algos.h"
#include "comm/comm.h"
#include "moeccl_sim.h"
#include "topo/topo.h"
#include "tune/cost_model.h"
#include "unit_check.h"

#define REQUIRE_OK(call)                                                                           \
  do {                                                                                             \
    moecclResult_t rc_ = (call);                                                                   \
    if (rc_ != moecclSuccess) {                                                                    \
      fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, #call,                         \
              moecclGetLastError(NULL));                                                           \
      exit(1);                                                                                     \
    }                                                                                              \
  } while (0)

/* rel. 1e-12: the same sums in the same order, or nearly */
#define EXPECT_SAME(got, want)                                                                     \
  CHECK_EXPR(fabs((got) - (want)) <= 1e-12 * fabs(want) + 1e-15, "got %.15g, want %.15g", (got),   \
             (want))

/* CPU seconds of this process: what pricing costs, whatever else shares
 * the machine's cores (the suite runs tests side by side). */
static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static moecclSim_t make(const char* cluster, int nranks) {
  moecclSim_t s = NULL;
  REQUIRE_OK(moecclSimCreate(&s, cluster, nranks));
  return s;
}

/* first, first + stride, ... (n of them) */
static int* ranks_from(int n, int first, int stride) {
  int* r = malloc(sizeof(int) * (size_t)n);
  for (int i = 0; i < n; i++) r[i] = first + i * stride;
  return r;
}

static size_t* even(int n, size_t bytes) {
  size_t* b = malloc(sizeof(size_t) * (size_t)n * (size_t)n);
  for (size_t i = 0; i < (size_t)n * (size_t)n; i++) b[i] = bytes;
  return b;
}

static double a2av(moecclSim_t s, const int* r, int n, const size_t* b, const char* algo,
                   const char** used) {
  double sec = -1;
  REQUIRE_OK(moecclSimAlltoAllv(s, r, n, b, algo, &sec, used));
  return sec;
}

static double coll(moecclSim_t s, moecclSimColl_t c, const int* r, int n, size_t bytes) {
  double sec = -1;
  REQUIRE_OK(moecclSimCollective(s, c, r, n, bytes, &sec, NULL));
  return sec;
}

static double sendrecv(moecclSim_t s, int src, int dst, size_t bytes) {
  double sec = -1;
  REQUIRE_OK(moecclSimSendRecv(s, src, dst, bytes, &sec));
  return sec;
}

/* ---- a2a_sim's numbers, computed here as a2a_sim does ----------------------- */

static int add_rank(int* out, int k, int r) {
  for (int i = 0; i < k; i++)
    if (out[i] == r) return k;
  out[k] = r;
  return k + 1;
}

/* a2a_sim's default sample: ranks 0 and n-1, then 16 spread over nodes. */
static int a2a_sim_sample(const moeccl_topo_t* t, int* out) {
  int k = add_rank(out, 0, 0);
  k = add_rank(out, k, t->nranks - 1);
  for (int i = 0; i < 16; i++) {
    int node = (int)((long long)i * t->nnodes / 16);
    int size = t->node_first[node + 1] - t->node_first[node];
    k = add_rank(out, k, t->node_ranks[t->node_first[node] + i % size]);
  }
  return k;
}

/* What a2a_sim prints as algo a's time (us) of a uniform call (window 64). */
static double a2a_sim_us(const moeccl_topo_t* t, const moeccl_a2a_algo_t* a, size_t block) {
  int sample[18], k = a2a_sim_sample(t, sample);
  moeccl_sched_t s = {0};
  double worst = -1;
  for (int i = 0; i < k; i++) {
    moeccl_a2a_desc_t d = {.rank = sample[i],
                           .nranks = t->nranks,
                           .block_bytes = block,
                           .elem_size = 1,
                           .window = 64,
                           .topo = t};
    moeccl_sched_reset(&s);
    REQUIRE_OK(a->schedule(&d, &s));
    double us = moeccl_model_price(t, &s, sample[i], NULL);
    if (us > worst) worst = us;
  }
  moeccl_sched_free(&s);
  return worst;
}

/* The count exchange an alltoallv of a runs first, on rank (0 if none). */
static double meta_us(const moeccl_topo_t* t, const moeccl_a2a_algo_t* a, int rank) {
  if (a->meta == MOECCL_META_NONE) return 0.0;
  moeccl_a2a_desc_t d = {.nranks = t->nranks, .topo = t};
  if (a->applies && !a->applies(&d)) return 0.0;
  int* index = malloc(sizeof(int) * (size_t)t->nranks);
  moeccl_sched_t s = {0};
  uint32_t b;
  moeccl_meta_members(t, rank, a->meta, index);
  REQUIRE_OK(moeccl_sched_add_buf(&s, NULL, &b));
  REQUIRE_OK(moeccl_meta_schedule(t, rank, a->meta, index, b, &s));
  double us = moeccl_model_price(t, &s, rank, NULL);
  moeccl_sched_free(&s);
  free(index);
  return us;
}

/* Every algorithm on a preset: uniform calls as a2a_sim prices them, even
 * v-calls as that plus the count exchange, and the cheapest picked. */
static void test_like_a2a_sim(const char* preset, int nranks, size_t block) {
  moecclSim_t s = make(preset, nranks);
  moeccl_topo_t t;
  char err[256];
  REQUIRE_OK(moeccl_topo_preset(&t, preset, nranks, err, sizeof err));
  int n = t.nranks;
  int* all = ranks_from(n, 0, 1);
  size_t* b = even(n, block);
  double best = -1, best_v = -1;
  const char *best_name = NULL, *best_v_name = NULL;
  for (int i = 0; i < MOECCL_A2A_NALGOS; i++) {
    const moeccl_a2a_algo_t* a = &moeccl_a2a_algos[i];
    double want = a2a_sim_us(&t, a, block), sec = -1;
    const char* used = NULL;
    REQUIRE_OK(moecclSimAlltoAll(s, all, n, block, a->name, &sec, &used));
    EXPECT_SAME(sec * 1e6, want);
    moeccl_a2a_desc_t shape = {.nranks = n, .topo = &t};
    const char* runs = a->applies && !a->applies(&shape) ? "direct" : a->name;
    CHECK(strcmp(used, runs) == 0, "%s: %s ran as %s, not %s", preset, a->name, used, runs);
    if (best < 0 || want < best) best = want, best_name = a->name;
    /* alltoallv: the count exchange first (its price is alike on every
     * rank of these regular clusters) */
    double want_v = want + meta_us(&t, a, 0);
    double got_v = a2av(s, all, n, b, a->name, &used) * 1e6;
    if (i == MOECCL_A2A_BRUCK) { /* packs exact sizes: not the uniform schedule */
      CHECK(got_v >= want, "%s: bruck v %.3f us < uniform %.3f us", preset, got_v, want);
    } else {
      EXPECT_SAME(got_v, want_v);
    }
    if (best_v < 0 || got_v < best_v) best_v = got_v, best_v_name = a->name;
  }
  double sec = -1;
  const char* used = NULL;
  REQUIRE_OK(moecclSimAlltoAll(s, all, n, block, NULL, &sec, &used));
  EXPECT_SAME(sec * 1e6, best);
  CHECK(strcmp(used, best_name) == 0, "%s: picked %s, cheapest %s", preset, used, best_name);
  double v = a2av(s, all, n, b, NULL, &used) * 1e6;
  EXPECT_SAME(v, best_v);
  CHECK(strcmp(used, best_v_name) == 0, "%s v: picked %s, cheapest %s", preset, used, best_v_name);
  printf("%-9s %5d ranks, %zu B per peer: best %s %.2f us, alltoallv %s %.2f us\n", preset, n,
         block, best_name, best, best_v_name, best_v);
  moeccl_topo_free(&t);
  free(all);
  free(b);
  moecclSimDestroy(s);
}

/* ---- properties ------------------------------------------------------------ */

static void test_monotonic(void) {
  moecclSim_t s = make("dragonfly", 512);
  int n = 64;
  int* r = ranks_from(n, 0, 8); /* every other node, across groups */
  double prev[4 + 3] = {0};
  for (size_t bytes = 1024; bytes <= (16u << 20); bytes *= 8) {
    size_t* b = even(n, bytes / (size_t)n + 1);
    double t[4 + 3] = {a2av(s, r, n, b, NULL, NULL), a2av(s, r, n, b, "direct", NULL),
                       sendrecv(s, 0, 1, bytes), sendrecv(s, 0, 300, bytes)};
    for (int c = 0; c < 3; c++) t[4 + c] = coll(s, (moecclSimColl_t)c, r, n, bytes);
    /* more bytes, more time; the same only where a message's overhead
     * outweighs its bytes (a small send/recv within the node) */
    for (int i = 0; i < 7; i++)
      CHECK(t[i] > prev[i] || (i == 2 && t[i] == prev[i] && bytes < 65536),
            "measure %d at %zu bytes: %.9f s, not more than %.9f s", i, bytes, t[i], prev[i]);
    memcpy(prev, t, sizeof t);
    free(b);
  }
  double bc1 = coll(s, moecclSimBroadcast, r, n, 1 << 10);
  double bc2 = coll(s, moecclSimBroadcast, r, n, 1 << 24);
  CHECK(bc2 > bc1, "broadcast: %.9f s for 16 MiB, %.9f s for 1 KiB", bc2, bc1);
  double zero = -1;
  const char* used = NULL;
  REQUIRE_OK(moecclSimCollective(s, moecclSimAllReduce, r, n, 0, &zero, &used));
  CHECK(zero == 0.0 && strcmp(used, "none") == 0, "0 bytes: %g s by %s", zero, used);
  free(r);
  moecclSimDestroy(s);
}

/* On fattree (8 ranks per node): 8 members on one node against 8 on 8 nodes. */
static void test_subgroups(void) {
  moecclSim_t s = make("fattree", 0);
  int* one = ranks_from(8, 0, 1);
  int* spread = ranks_from(8, 0, 8);
  size_t* b = even(8, 1 << 16);
  CHECK(a2av(s, one, 8, b, NULL, NULL) < a2av(s, spread, 8, b, NULL, NULL),
        "alltoallv on one node not cheaper");
  for (int c = 0; c < moecclSimNumColls; c++)
    CHECK(coll(s, (moecclSimColl_t)c, one, 8, 1 << 20) <
              coll(s, (moecclSimColl_t)c, spread, 8, 1 << 20),
          "collective %d on one node not cheaper", c);
  /* The order of the members is the communicator's: reversed, the same
   * shape is the same price. */
  int rev[8];
  for (int i = 0; i < 8; i++) rev[i] = spread[7 - i];
  EXPECT_SAME(coll(s, moecclSimAllReduce, rev, 8, 1 << 20),
              coll(s, moecclSimAllReduce, spread, 8, 1 << 20));
  /* A member alone is a copy at most. */
  CHECK(coll(s, moecclSimAllReduce, one, 1, 1 << 20) < coll(s, moecclSimAllReduce, one, 2, 1 << 20),
        "one member not cheaper than two");
  free(one), free(spread), free(b);
  moecclSimDestroy(s);

  /* dragonfly: 2 nodes x 4 in one group against 2 nodes in two groups */
  s = make("dragonfly", 0);
  int same_group[8] = {0, 1, 2, 3, 4, 5, 6, 7}, two_groups[8] = {0, 1, 2, 3, 128, 129, 130, 131};
  b = even(8, 1 << 20);
  CHECK(a2av(s, same_group, 8, b, NULL, NULL) < a2av(s, two_groups, 8, b, NULL, NULL),
        "alltoallv within a group not cheaper than across groups");
  free(b);
  moecclSimDestroy(s);
}

static void test_sendrecv(void) {
  moecclSim_t s = make("dragonfly", 0);
  size_t m = 1 << 20;
  double self = sendrecv(s, 5, 5, m), node = sendrecv(s, 0, 1, m), group = sendrecv(s, 0, 4, m),
         global = sendrecv(s, 0, 4095, m);
  CHECK(self < node && node < group && group < global,
        "send/recv: self %g, node %g, group %g, global %g s", self, node, group, global);
  EXPECT_SAME(sendrecv(s, 4, 0, m), group);
  /* by hand: the latency, then the bytes at the bandwidth (more than the
   * overhead of one message) */
  EXPECT_SAME(node * 1e6, 2.0 + (double)m / 200e3);
  EXPECT_SAME(global * 1e6, 5.0 + (double)m / 12.5e3);
  CHECK(sendrecv(s, 0, 1, 0) == 0.0, "0 bytes cost something");
  moecclSimDestroy(s);
}

/* A topology file: 2 nodes x 2, its costs, groups of one node. */
static void test_topo_file(const char* path) {
  FILE* f = fopen(path, "w");
  fprintf(f, "moeccl-topo 1\nnodes 2\nranks_per_node 2\nrails 1\n"
             "link node latency_us=1 overhead_us=0.5 bw_GBps=10\n"
             "link group latency_us=20 overhead_us=2 bw_GBps=1\n"
             "copy overhead_us=0.1 bw_GBps=20\n");
  fclose(f);
  moecclSim_t s = make(path, 0);
  int n = -1;
  REQUIRE_OK(moecclSimRanks(s, &n));
  CHECK(n == 4, "file: %d ranks", n);
  char text[1024];
  REQUIRE_OK(moecclSimDescribe(s, text, sizeof text));
  CHECK(strstr(text, "4 ranks = 2 nodes x 2") && strstr(text, "link group  latency_us=20"),
        "file described as: %s", text);
  /* latency + the larger of the message's overhead and its bytes' time */
  EXPECT_SAME(sendrecv(s, 0, 2, 1000) * 1e6, 20.0 + 2.0);
  EXPECT_SAME(sendrecv(s, 0, 1, 1000) * 1e6, 1.0 + 0.5);
  EXPECT_SAME(sendrecv(s, 0, 1, 100000) * 1e6, 1.0 + 10.0);
  int pair_node[2] = {0, 1}, pair_nodes[2] = {1, 2};
  size_t b[4] = {0, 4096, 4096, 0};
  CHECK(a2av(s, pair_node, 2, b, NULL, NULL) < a2av(s, pair_nodes, 2, b, NULL, NULL),
        "file: one node not cheaper");
  moecclSimDestroy(s);
  moecclSim_t again = NULL;
  CHECK(moecclSimCreate(&again, path, 8) == moecclInvalidArgument && again == NULL,
        "a 4-rank file taken for 8 ranks");
  REQUIRE_OK(moecclSimCreate(&again, path, 4));
  moecclSimDestroy(again);
}

/* moecclSimSetCosts: a2a_sim's --link/--copy values, all or nothing. */
static void test_costs(void) {
  moecclSim_t s = make("dragonfly", 0);
  double before = sendrecv(s, 0, 4095, 1 << 20);
  REQUIRE_OK(
      moecclSimSetCosts(s, "global:bw_GBps=25,latency_us=1 copy:bw_GBps=500;node:overhead_us=1"));
  double after = sendrecv(s, 0, 4095, 1 << 20);
  EXPECT_SAME(after * 1e6, 1.0 + (double)(1 << 20) / 25e3);
  CHECK(after < before, "faster global links: %g s, before %g s", after, before);
  char text[1024];
  REQUIRE_OK(moecclSimDescribe(s, text, sizeof text));
  CHECK(strstr(text, "link global latency_us=1 overhead_us=0.5 bw_GBps=25") &&
            strstr(text, "copy        overhead_us=0.05 bw_GBps=500") &&
            strstr(text, "link node   latency_us=2 overhead_us=1 "),
        "costs described as: %s", text);
  /* A bad statement after a good one changes nothing. */
  CHECK(moecclSimSetCosts(s, "global:bw_GBps=1 group:bw_GBps=0") == moecclInvalidArgument,
        "zero bandwidth taken");
  EXPECT_SAME(sendrecv(s, 0, 4095, 1 << 20), after);
  /* Overrides reach the all-to-all as a2a_sim's --link does. */
  moeccl_topo_t t;
  char err[256], list[] = "bw_GBps=25,latency_us=1";
  REQUIRE_OK(moeccl_topo_preset(&t, "dragonfly", 0, err, sizeof err));
  CHECK(moeccl_topo_apply_costs(&t, MOECCL_LINK_GLOBAL, list) == 0, "apply_costs");
  char copy[] = "bw_GBps=500";
  char node[] = "overhead_us=1";
  moeccl_topo_apply_costs(&t, -1, copy);
  moeccl_topo_apply_costs(&t, MOECCL_LINK_NODE, node);
  int* all = ranks_from(t.nranks, 0, 1);
  double sec = -1;
  REQUIRE_OK(moecclSimAlltoAll(s, all, t.nranks, 4096, "hier3", &sec, NULL));
  EXPECT_SAME(sec * 1e6, a2a_sim_us(&t, moeccl_a2a_algo_by_name("hier3"), 4096));
  free(all);
  moeccl_topo_free(&t);
  moecclSimDestroy(s);
}

/* ---- refusals ---------------------------------------------------------------- */

#define REFUSED(call, want, ...)                                                                   \
  do {                                                                                             \
    moecclResult_t got_ = (call);                                                                  \
    const char* why_ = moecclGetLastError(NULL);                                                   \
    CHECK(got_ == (want) && why_ && strstr(why_, "moecclSim"), "%s: %d (%s), want %d", #call,      \
          (int)got_, why_ ? why_ : "no text", (int)(want));                                        \
  } while (0)

static void test_refusals(const char* missing) {
  moecclSim_t s = NULL;
  REFUSED(moecclSimCreate(NULL, "fattree", 0), moecclInvalidArgument);
  REFUSED(moecclSimCreate(&s, NULL, 0), moecclInvalidArgument);
  REFUSED(moecclSimCreate(&s, "", 0), moecclInvalidArgument);
  REFUSED(moecclSimCreate(&s, "torus", 0), moecclInvalidArgument);
  CHECK(strstr(moecclGetLastError(NULL), "fattree, dragonfly") != NULL, "presets not listed: %s",
        moecclGetLastError(NULL));
  REFUSED(moecclSimCreate(&s, missing, 0), moecclInvalidArgument);
  REFUSED(moecclSimCreate(&s, "fattree", -8), moecclInvalidArgument);
  REFUSED(moecclSimCreate(&s, "fattree", 12), moecclInvalidArgument);
  REFUSED(moecclSimCreate(&s, "dragonfly", MOECCL_TOPO_MAX_RANKS + 4), moecclInvalidArgument);
  CHECK(s == NULL, "a refused create set its handle");
  REFUSED(moecclSimCreateFromComm(&s, NULL), moecclInvalidArgument);

  s = make("fattree", 16); /* 2 nodes of 8 */
  int ranks[4] = {0, 1, 9, 3}, out_of_range[2] = {0, 16}, negative[2] = {-1, 0},
      twice[3] = {2, 5, 2};
  size_t b[16] = {0};
  double sec = 42.0;
  const char* used = "untouched";
  REFUSED(moecclSimAlltoAllv(NULL, ranks, 4, b, NULL, &sec, &used), moecclInvalidArgument);
  REFUSED(moecclSimAlltoAllv(s, NULL, 4, b, NULL, &sec, &used), moecclInvalidArgument);
  REFUSED(moecclSimAlltoAllv(s, ranks, 4, NULL, NULL, &sec, &used), moecclInvalidArgument);
  REFUSED(moecclSimAlltoAllv(s, ranks, 4, b, NULL, NULL, &used), moecclInvalidArgument);
  REFUSED(moecclSimAlltoAllv(s, ranks, 0, b, NULL, &sec, &used), moecclInvalidArgument);
  REFUSED(moecclSimAlltoAllv(s, ranks, -3, b, NULL, &sec, &used), moecclInvalidArgument);
  REFUSED(moecclSimAlltoAllv(s, ranks, 17, b, NULL, &sec, &used), moecclInvalidArgument);
  REFUSED(moecclSimAlltoAllv(s, out_of_range, 2, b, NULL, &sec, &used), moecclInvalidArgument);
  REFUSED(moecclSimAlltoAllv(s, negative, 2, b, NULL, &sec, &used), moecclInvalidArgument);
  REFUSED(moecclSimAlltoAllv(s, twice, 3, b, NULL, &sec, &used), moecclInvalidArgument);
  CHECK(strstr(moecclGetLastError(NULL), "repeats") != NULL, "repeat: %s",
        moecclGetLastError(NULL));
  REFUSED(moecclSimAlltoAllv(s, ranks, 4, b, "fastest", &sec, &used), moecclInvalidArgument);
  REFUSED(moecclSimAlltoAll(s, ranks, 4, 8, "ring", &sec, &used), moecclInvalidArgument);
  REFUSED(moecclSimAlltoAll(s, twice, 3, 8, NULL, &sec, &used), moecclInvalidArgument);
  REFUSED(moecclSimCollective(s, moecclSimNumColls, ranks, 4, 8, &sec, &used),
          moecclInvalidArgument);
  REFUSED(moecclSimCollective(s, (moecclSimColl_t)-1, ranks, 4, 8, &sec, &used),
          moecclInvalidArgument);
  REFUSED(moecclSimCollective(s, moecclSimAllReduce, out_of_range, 2, 8, &sec, &used),
          moecclInvalidArgument);
  REFUSED(moecclSimCollective(s, moecclSimAllReduce, ranks, 4, 8, NULL, &used),
          moecclInvalidArgument);
  REFUSED(moecclSimSendRecv(s, 0, 16, 8, &sec), moecclInvalidArgument);
  REFUSED(moecclSimSendRecv(s, -1, 0, 8, &sec), moecclInvalidArgument);
  REFUSED(moecclSimSendRecv(s, 0, 1, 8, NULL), moecclInvalidArgument);
  REFUSED(moecclSimSendRecv(NULL, 0, 1, 8, &sec), moecclInvalidArgument);
  size_t huge[4] = {SIZE_MAX, 1, 0, 0}; /* member 0 sends more than a size_t */
  int pair[2] = {0, 1};
  REFUSED(moecclSimAlltoAllv(s, pair, 2, huge, NULL, &sec, &used), moecclInvalidArgument);
  REFUSED(moecclSimAlltoAll(s, pair, 2, SIZE_MAX / 2 + 1, NULL, &sec, &used),
          moecclInvalidArgument);
  REFUSED(moecclSimCollective(s, moecclSimAllGather, pair, 2, SIZE_MAX / 2 + 1, &sec, &used),
          moecclInvalidArgument);
  CHECK(sec == 42.0 && strcmp(used, "untouched") == 0, "a refused call wrote its outputs");
  const char* bad_costs[] = {"",
                             " ; ",
                             "spine:bw_GBps=1",
                             "node",
                             "node:",
                             "node:bw_GBps=0",
                             "node:speed=1",
                             "copy:latency_us=1",
                             "group:latency_us=-1",
                             "global:bw_GBps=inf",
                             "node:bw_GBps=1x",
                             "node:rndv_bytes"};
  for (size_t i = 0; i < sizeof bad_costs / sizeof bad_costs[0]; i++)
    REFUSED(moecclSimSetCosts(s, bad_costs[i]), moecclInvalidArgument);
  REFUSED(moecclSimSetCosts(s, NULL), moecclInvalidArgument);
  REFUSED(moecclSimSetCosts(NULL, "node:bw_GBps=1"), moecclInvalidArgument);
  char text[8];
  int n = 0;
  REFUSED(moecclSimDescribe(s, NULL, 8), moecclInvalidArgument);
  REFUSED(moecclSimDescribe(s, text, 0), moecclInvalidArgument);
  REFUSED(moecclSimRanks(s, NULL), moecclInvalidArgument);
  REFUSED(moecclSimRanks(NULL, &n), moecclInvalidArgument);
  REFUSED(moecclSimDestroy(NULL), moecclInvalidArgument);
  /* Truncation is not an error. */
  REQUIRE_OK(moecclSimDescribe(s, text, sizeof text));
  CHECK(strlen(text) == sizeof text - 1 && strncmp(text, "cluster", 7) == 0, "truncated: '%s'",
        text);
  moecclSimDestroy(s);
}

/* ---- from a live communicator ------------------------------------------------ */

static void test_from_comm(const char* tune_path) {
  /* Costs the communicator's tuner takes from a tune file. */
  FILE* f = fopen(tune_path, "w");
  fprintf(f, "link node latency_us=3 overhead_us=0.75 bw_GBps=7\ncopy overhead_us=0.3 bw_GBps=9\n");
  fclose(f);
  setenv("MOECCL_TUNE_FILE", tune_path, 1);
  moecclUniqueId id;
  moecclComm_t comm = NULL;
  REQUIRE_OK(moecclGetUniqueId(&id));
  REQUIRE_OK(moecclCommInitRank(&comm, 1, id, 0));
  unsetenv("MOECCL_TUNE_FILE");
  moecclSim_t s = NULL;
  REFUSED(moecclSimCreateFromComm(NULL, comm), moecclInvalidArgument);
  REQUIRE_OK(moecclSimCreateFromComm(&s, comm));
  const moeccl_topo_t* live = comm->topo;
  int window = comm->a2a_window;
  char text[1024];
  REQUIRE_OK(moecclSimDescribe(s, text, sizeof text));
  CHECK(strstr(text, "link node   latency_us=3 overhead_us=0.75 bw_GBps=7") &&
            strstr(text, "copy        overhead_us=0.3 bw_GBps=9") && strstr(text, "communicator"),
        "from the communicator: %s", text);
  char want[64];
  snprintf(want, sizeof want, "direct window %d\n", window);
  CHECK(strstr(text, want) != NULL, "window %d not in: %s", window, text);
  CHECK(live->link[MOECCL_LINK_NODE].bw_GBps == 7.0 && live->copy_GBps == 9.0,
        "the communicator's own costs are not the tune file's");
  REQUIRE_OK(moecclCommDestroy(comm)); /* the simulator outlives it */
  int n = -1, me = 0;
  REQUIRE_OK(moecclSimRanks(s, &n));
  CHECK(n == 1, "from a 1-rank communicator: %d ranks", n);
  double sec = -1;
  const char* used = NULL;
  size_t b = 1 << 20;
  REQUIRE_OK(moecclSimAlltoAllv(s, &me, 1, &b, NULL, &sec, &used));
  /* one rank: the block to itself, one copy */
  EXPECT_SAME(sec * 1e6, 0.3 + (double)b / 9e3);
  REQUIRE_OK(moecclSimCollective(s, moecclSimAllReduce, &me, 1, b, &sec, &used));
  CHECK(sec >= 0.0, "one-rank allreduce: %g s", sec);
  moecclSimDestroy(s);
}

/* ---- scale ------------------------------------------------------------------- */

static void test_scale(void) {
  moecclSim_t s = make("dragonfly", 0);
  int n = 4096;
  int* all = ranks_from(n, 0, 1);
  size_t* b = even(n, 1024);
  const char* used = NULL;
  double t0 = now_s();
  double sec = a2av(s, all, n, b, NULL, &used);
  double took = now_s() - t0;
  printf("even alltoallv over 4,096 dragonfly ranks, 1 KiB per peer: %s, %.1f us predicted, "
         "priced in %.3f CPU s\n",
         used, sec * 1e6, took);
  double bound = 1.0;
#ifdef __SANITIZE_ADDRESS__
  bound = 4.0; /* about 4x slower under AddressSanitizer */
#endif
  if (!getenv("TEST_SIM_NO_TIMING")) CHECK(took < bound, "pricing 4,096 ranks took %.3f CPU s", took);
  free(all);
  free(b);
  moecclSimDestroy(s);
}

int main(void) {
  char dir[] = "/tmp/test_sim.XXXXXX";
  if (!mkdtemp(dir)) return perror("mkdtemp"), 1;
  char topo[64], tune[64], missing[64];
  snprintf(topo, sizeof topo, "%s/2x2.topo", dir);
  snprintf(tune, sizeof tune, "%s/costs.tune", dir);
  snprintf(missing, sizeof missing, "%s/none.topo", dir);

  test_like_a2a_sim("fattree", 0, 4096);
  test_like_a2a_sim("dragonfly", 512, 64);
  test_like_a2a_sim("dragonfly", 512, 65536);
  test_monotonic();
  test_subgroups();
  test_sendrecv();
  test_topo_file(topo);
  test_costs();
  test_refusals(missing);
  test_from_comm(tune);
  test_scale();

  unlink(topo), unlink(tune), rmdir(dir);
  printf("test_sim: %d checks, %d failures\n", checks, failures);
  return failures ? 1 : 0;
}
