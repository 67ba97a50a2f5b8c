/*
 * Unit test of the cost model (src/tune/cost_model.c): prices of tiny schedules
 * computed by hand, the detail counters, invalid input, monotonicity in the
 * bytes, and the property the tuner relies on at scale: on a dragonfly-like
 * topology with small blocks, a schedule that sends fewer messages over the
 * global links is cheaper than the direct one that moves the same bytes.
 * And the shared NIC (moeccl_model_price_nic): a rank sending while its
 * NIC-mates are idle gets the NIC's whole rate, all sending alike gives the
 * per-rank price, rails keep their ranks apart.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "algos/algos.h"
#include "tune/cost_model.h"
#include "unit_check.h"

#define EXPECT_NEAR(got, want)                                                                     \
  CHECK_EXPR(fabs((got) - (want)) < 1e-9, "got %.12g, want %.12g", (got), (want))

#define REQUIRE_OK(call)                                                                           \
  do {                                                                                             \
    if ((call) != moecclSuccess) {                                                                 \
      fprintf(stderr, "%s:%d: %s failed\n", __FILE__, __LINE__, #call);                            \
      exit(1);                                                                                     \
    }                                                                                              \
  } while (0)

/* Costs with round numbers, distinct per class so that a wrong class shows. */
static void set_costs(moeccl_topo_t* t) {
  t->link[MOECCL_LINK_SELF] = (moeccl_link_t){0.0, 0.0, 0.0};
  t->link[MOECCL_LINK_NODE] = (moeccl_link_t){1.0, 0.25, 10.0}; /* 10,000 B/us */
  t->link[MOECCL_LINK_GROUP] = (moeccl_link_t){5.0, 1.0, 2.0};  /* 2,000 B/us */
  t->link[MOECCL_LINK_GLOBAL] = (moeccl_link_t){9.0, 2.0, 1.0}; /* 1,000 B/us */
  t->copy_overhead_us = 0.5;
  t->copy_GBps = 4.0; /* 4,000 B/us */
}

/* 2 groups of 2 nodes of 2 ranks: ranks 0,1 | 2,3 (group 0) | 4,5 | 6,7 (group 1). */
static void small_topo(moeccl_topo_t* t) {
  REQUIRE_OK(moeccl_topo_regular_shape(t, 4, 2, 2, 1));
  set_costs(t);
}

static void add(moeccl_sched_t* s, moeccl_op_type_t type, int peer, uint64_t bytes) {
  REQUIRE_OK(moeccl_sched_add(s, type, peer, 0, 0, 1, 0, bytes));
}

static void test_one_send(const moeccl_topo_t* t, moeccl_sched_t* s) {
  moeccl_sched_reset(s);
  add(s, MOECCL_OP_SEND, 2, 6000); /* group: cpu 1, link 6000/2000 = 3, latency 5 */
  REQUIRE_OK(moeccl_sched_end_step(s));
  moeccl_cost_t d;
  EXPECT_NEAR(moeccl_model_price(t, s, 0, &d), 8.0);
  CHECK_EXPR(d.nsteps == 1 && d.msgs[MOECCL_LINK_GROUP] == 1, "nsteps %d msgs %d", d.nsteps,
             d.msgs[MOECCL_LINK_GROUP]);
  EXPECT_NEAR(d.bytes[MOECCL_LINK_GROUP], 6000.0);
  EXPECT_NEAR(d.cpu_us, 1.0);
  EXPECT_NEAR(d.link_us, 3.0);
  EXPECT_NEAR(d.latency_us, 5.0);
  /* A small message: the overhead outweighs the wire time (0.5 us). */
  moeccl_sched_reset(s);
  add(s, MOECCL_OP_SEND, 2, 1000);
  REQUIRE_OK(moeccl_sched_end_step(s));
  EXPECT_NEAR(moeccl_model_price(t, s, 0, NULL), 1.0 + 5.0);
  /* The same send from rank 2's point of view is a node message to rank 3. */
  moeccl_sched_reset(s);
  add(s, MOECCL_OP_SEND, 3, 20000); /* node: cpu 0.25, link 2, latency 1 */
  REQUIRE_OK(moeccl_sched_end_step(s));
  EXPECT_NEAR(moeccl_model_price(t, s, 2, &d), 3.0);
  CHECK_EXPR(d.msgs[MOECCL_LINK_NODE] == 1 && d.msgs[MOECCL_LINK_GROUP] == 0, "class of 2->3");
}

static void test_copy(const moeccl_topo_t* t, moeccl_sched_t* s) {
  moeccl_sched_reset(s);
  add(s, MOECCL_OP_COPY, -1, 8000); /* 0.5 + 8000/4000 */
  REQUIRE_OK(moeccl_sched_end_step(s));
  moeccl_cost_t d;
  EXPECT_NEAR(moeccl_model_price(t, s, 5, &d), 2.5);
  CHECK_EXPR(d.msgs[MOECCL_LINK_SELF] == 1, "copies counted under SELF: %d",
             d.msgs[MOECCL_LINK_SELF]);
  EXPECT_NEAR(d.bytes[MOECCL_LINK_SELF], 8000.0);
  EXPECT_NEAR(d.latency_us, 0.0);
  /* A copy next to a send adds to the CPU term, which then dominates. */
  moeccl_sched_reset(s);
  add(s, MOECCL_OP_SEND, 1, 10000); /* node: cpu 0.25, link 1, latency 1 */
  add(s, MOECCL_OP_COPY, -1, 8000); /* cpu + 2.5 */
  REQUIRE_OK(moeccl_sched_end_step(s));
  EXPECT_NEAR(moeccl_model_price(t, s, 0, NULL), 2.75 + 1.0);
}

/* Rendezvous: a group message above rndv_bytes costs a second overhead and
 * three latencies; at or below it, one of each. */
static void test_rendezvous(moeccl_topo_t* t, moeccl_sched_t* s) {
  t->link[MOECCL_LINK_GROUP].rndv_bytes = 4000;
  moeccl_sched_reset(s);
  add(s, MOECCL_OP_SEND, 2, 4000); /* eager: cpu 1, link 2, latency 5 */
  REQUIRE_OK(moeccl_sched_end_step(s));
  EXPECT_NEAR(moeccl_model_price(t, s, 0, NULL), 2.0 + 5.0);
  moeccl_sched_reset(s);
  add(s, MOECCL_OP_SEND, 2, 6000); /* rendezvous: cpu 2, link 3, latency 15 */
  REQUIRE_OK(moeccl_sched_end_step(s));
  moeccl_cost_t d;
  EXPECT_NEAR(moeccl_model_price(t, s, 0, &d), 3.0 + 15.0);
  EXPECT_NEAR(d.cpu_us, 2.0);
  EXPECT_NEAR(d.latency_us, 15.0);
  /* Another class's threshold does not apply, and a node message next to
   * the rendezvous does not raise the step's latency further. */
  moeccl_sched_reset(s);
  add(s, MOECCL_OP_SEND, 1, 6000); /* node: cpu 0.25 */
  add(s, MOECCL_OP_RECV, 2, 6000); /* group, rendezvous: cpu 2 */
  REQUIRE_OK(moeccl_sched_end_step(s));
  EXPECT_NEAR(moeccl_model_price(t, s, 0, NULL), 3.0 + 15.0);
  t->link[MOECCL_LINK_GROUP].rndv_bytes = 0;
}

static void test_two_steps(const moeccl_topo_t* t, moeccl_sched_t* s) {
  moeccl_sched_reset(s);
  add(s, MOECCL_OP_SEND, 1, 50000); /* step 1 (node): max(0.25, 5) + 1 = 6 */
  REQUIRE_OK(moeccl_sched_end_step(s));
  add(s, MOECCL_OP_RECV, 4, 3000); /* step 2 (global): max(2, 3) + 9 = 12 */
  REQUIRE_OK(moeccl_sched_end_step(s));
  moeccl_cost_t d;
  EXPECT_NEAR(moeccl_model_price(t, s, 0, &d), 18.0);
  CHECK_EXPR(d.nsteps == 2, "nsteps %d", d.nsteps);
  CHECK_EXPR(d.msgs[MOECCL_LINK_GLOBAL] == 0, "a receive is not a message sent");
  EXPECT_NEAR(d.cpu_us, 2.25);
  EXPECT_NEAR(d.link_us, 8.0);
  EXPECT_NEAR(d.latency_us, 10.0);
  /* An open step (no end_step) is not part of the schedule. */
  add(s, MOECCL_OP_SEND, 7, 1 << 20);
  EXPECT_NEAR(moeccl_model_price(t, s, 0, NULL), 18.0);
}

/* Every class in one step: the slowest class wins, overheads add up, the
 * farthest latency is paid once, and sent and received bytes of a class
 * share its bandwidth only as the larger of the two. */
static void test_mixed(const moeccl_topo_t* t, moeccl_sched_t* s) {
  moeccl_sched_reset(s);
  add(s, MOECCL_OP_SEND, 1, 30000); /* node 3 us, cpu 0.25 */
  add(s, MOECCL_OP_RECV, 1, 10000); /* node, cpu 0.25 */
  add(s, MOECCL_OP_SEND, 3, 4000);  /* group, cpu 1 */
  add(s, MOECCL_OP_RECV, 2, 8000);  /* group 8000/2000 = 4 us, cpu 1 */
  add(s, MOECCL_OP_SEND, 6, 2500);  /* global 2.5 us, cpu 2 */
  add(s, MOECCL_OP_COPY, -1, 400);  /* cpu 0.5 + 0.1 */
  REQUIRE_OK(moeccl_sched_end_step(s));
  moeccl_cost_t d;
  /* cpu 5.1, links: node 3, group 4, global 2.5 -> max 5.1; latency 9 */
  EXPECT_NEAR(moeccl_model_price(t, s, 0, &d), 5.1 + 9.0);
  CHECK_EXPR(d.msgs[MOECCL_LINK_NODE] == 1 && d.msgs[MOECCL_LINK_GROUP] == 1 &&
                 d.msgs[MOECCL_LINK_GLOBAL] == 1 && d.msgs[MOECCL_LINK_SELF] == 1,
             "per-class messages");
  EXPECT_NEAR(d.link_us, 4.0);
  /* Receiving 12,000 more bytes over the group class in the same step makes
   * it the bottleneck: 20,000 received / 2,000 B/us = 10 us > cpu 6.1 us. */
  s->nsteps = 0;
  add(s, MOECCL_OP_RECV, 3, 12000);
  REQUIRE_OK(moeccl_sched_end_step(s));
  EXPECT_NEAR(moeccl_model_price(t, s, 0, &d), 10.0 + 9.0);
  EXPECT_NEAR(d.cpu_us, 6.1);
  EXPECT_NEAR(d.link_us, 10.0);
}

static void test_invalid(const moeccl_topo_t* t, moeccl_sched_t* s) {
  moeccl_cost_t d;
  memset(&d, 0x5a, sizeof(d));
  moeccl_cost_t before = d;
  moeccl_sched_reset(s);
  EXPECT_NEAR(moeccl_model_price(t, s, 0, NULL), 0.0); /* empty schedule */
  CHECK_EXPR(moeccl_model_price(t, s, 8, &d) < 0, "rank out of range");
  CHECK_EXPR(moeccl_model_price(NULL, s, 0, &d) < 0, "NULL topology");
  CHECK_EXPR(moeccl_model_price(t, NULL, 0, &d) < 0, "NULL schedule");
  add(s, MOECCL_OP_SEND, 8, 1);
  REQUIRE_OK(moeccl_sched_end_step(s));
  CHECK_EXPR(moeccl_model_price(t, s, 0, &d) < 0, "peer out of range");
  CHECK_EXPR(memcmp(&d, &before, sizeof(d)) == 0, "detail written on error");
}

static uint64_t rng = 0x9e3779b97f4a7c15ULL;
static uint64_t rnd(void) {
  rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
  return rng;
}

/* Random schedules: growing any op's bytes never lowers the price. */
static void test_monotone_random(const moeccl_topo_t* t, moeccl_sched_t* s) {
  for (int trial = 0; trial < 2000; trial++) {
    moeccl_sched_reset(s);
    int nsteps = 1 + (int)(rnd() % 4);
    for (int st = 0; st < nsteps; st++) {
      int nops = 1 + (int)(rnd() % 6);
      for (int i = 0; i < nops; i++) {
        moeccl_op_type_t type = (moeccl_op_type_t)(rnd() % 3);
        int peer = type == MOECCL_OP_COPY ? -1 : (int)(rnd() % 8);
        add(s, type, peer, 1 + rnd() % 100000);
      }
      REQUIRE_OK(moeccl_sched_end_step(s));
    }
    int rank = (int)(rnd() % 8);
    double before = moeccl_model_price(t, s, rank, NULL);
    s->ops[rnd() % (uint64_t)s->nops].bytes += 1 + rnd() % 100000;
    double after = moeccl_model_price(t, s, rank, NULL);
    CHECK_EXPR(after >= before, "trial %d: %g us became %g us with more bytes", trial, before,
               after);
    if (failures) return;
  }
}

/* Real generators: doubling the block never makes an algorithm cheaper. */
static void test_monotone_algos(moeccl_sched_t* s) {
  moeccl_topo_t t;
  REQUIRE_OK(moeccl_topo_regular_shape(&t, 8, 4, 2, 4));
  set_costs(&t);
  for (int a = 0; a < MOECCL_A2A_NALGOS; a++) {
    const moeccl_a2a_algo_t* algo = &moeccl_a2a_algos[a];
    if (!algo->name || !algo->schedule) continue;
    double prev = 0.0;
    for (size_t block = 1; block <= (1u << 20); block *= 2) {
      moeccl_a2a_desc_t d = {
          .rank = 5, .nranks = t.nranks, .block_bytes = block, .elem_size = 1, .topo = &t};
      moeccl_sched_reset(s);
      REQUIRE_OK(algo->schedule(&d, s));
      double us = moeccl_model_price(&t, s, d.rank, NULL);
      CHECK_EXPR(us >= prev, "%s: block %zu costs %g us < %g us for half of it", algo->name, block,
                 us, prev);
      prev = us;
    }
  }
  moeccl_topo_free(&t);
}

/* The same bytes, sent by one message per remote group (to the same-index
 * rank there) instead of one per remote rank.  Only what the model sees of
 * rank r's schedule matters here: how many messages per class, how many
 * bytes, how many steps. */
static void aggregated_schedule(const moeccl_topo_t* t, int r, size_t block, moeccl_sched_t* s) {
  int per_group = t->nranks / t->ngroups, g = r / per_group;
  for (int p = 0; p < t->nranks; p++) {
    if (p == r || p / per_group != g) continue;
    add(s, MOECCL_OP_SEND, p, block);
    add(s, MOECCL_OP_RECV, p, block);
  }
  add(s, MOECCL_OP_COPY, -1, block);
  REQUIRE_OK(moeccl_sched_end_step(s));
  for (int k = 1; k < t->ngroups; k++) {
    int peer = ((g + k) % t->ngroups) * per_group + r % per_group;
    add(s, MOECCL_OP_SEND, peer, block * (size_t)per_group);
    add(s, MOECCL_OP_RECV, peer, block * (size_t)per_group);
  }
  REQUIRE_OK(moeccl_sched_end_step(s));
}

/* The real three-level generator on the same dragonfly: one message per
 * remote group instead of one per remote rank, so with cheap packing copies
 * it is priced below direct for small blocks. */
static void test_hier3_small_blocks(const moeccl_topo_t* t, moeccl_sched_t* s) {
  const moeccl_a2a_algo_t* hier3 = moeccl_a2a_algo_by_name("hier3");
  if (!hier3 || !hier3->schedule) return; /* not in this build's table */
  moeccl_a2a_desc_t d = {
      .rank = 77, .nranks = t->nranks, .block_bytes = 64, .elem_size = 1, .topo = t};
  moeccl_cost_t direct, h3;
  moeccl_sched_reset(s);
  REQUIRE_OK(moeccl_a2a_direct(&d, s));
  double direct_us = moeccl_model_price(t, s, d.rank, &direct);
  moeccl_sched_reset(s);
  REQUIRE_OK(hier3->schedule(&d, s));
  double h3_us = moeccl_model_price(t, s, d.rank, &h3);
  CHECK_EXPR(h3.msgs[MOECCL_LINK_GLOBAL] <= t->ngroups - 1, "hier3 sends %d global messages",
             h3.msgs[MOECCL_LINK_GLOBAL]);
  CHECK_EXPR(h3_us < direct_us / 2, "hier3 %g us, direct %g us", h3_us, direct_us);
}

static void test_dragonfly_small_blocks(moeccl_sched_t* s) {
  moeccl_topo_t t; /* 4 ranks per node, 8 nodes per group, 16 groups: 512 ranks */
  REQUIRE_OK(moeccl_topo_regular_shape(&t, 128, 4, 8, 4));
  t.link[MOECCL_LINK_NODE] = (moeccl_link_t){2.0, 0.2, 100.0};
  t.link[MOECCL_LINK_GROUP] = (moeccl_link_t){3.0, 0.5, 25.0};
  t.link[MOECCL_LINK_GLOBAL] = (moeccl_link_t){5.0, 0.5, 12.5};
  t.copy_overhead_us = 0.05, t.copy_GBps = 1000.0;
  int r = 77;
  moeccl_a2a_desc_t d = {.rank = r, .nranks = t.nranks, .block_bytes = 64, .elem_size = 1};
  moeccl_cost_t direct, aggregated;
  moeccl_sched_reset(s);
  REQUIRE_OK(moeccl_a2a_direct(&d, s));
  double direct_us = moeccl_model_price(&t, s, r, &direct);
  moeccl_sched_reset(s);
  aggregated_schedule(&t, r, 64, s);
  double aggregated_us = moeccl_model_price(&t, s, r, &aggregated);
  CHECK_EXPR(aggregated.msgs[MOECCL_LINK_GLOBAL] < direct.msgs[MOECCL_LINK_GLOBAL],
             "global messages %d vs %d", aggregated.msgs[MOECCL_LINK_GLOBAL],
             direct.msgs[MOECCL_LINK_GLOBAL]);
  CHECK_EXPR(fabs(aggregated.bytes[MOECCL_LINK_GLOBAL] - direct.bytes[MOECCL_LINK_GLOBAL]) < 1e-9,
             "the same global bytes");
  CHECK_EXPR(aggregated_us < direct_us / 2, "aggregated %g us, direct %g us", aggregated_us,
             direct_us);
  /* With large blocks the global bytes dominate both and the extra step does
   * not pay: direct is at least as cheap. */
  d.block_bytes = 4u << 20;
  moeccl_sched_reset(s);
  REQUIRE_OK(moeccl_a2a_direct(&d, s));
  direct_us = moeccl_model_price(&t, s, r, NULL);
  moeccl_sched_reset(s);
  aggregated_schedule(&t, r, 4u << 20, s);
  aggregated_us = moeccl_model_price(&t, s, r, NULL);
  CHECK_EXPR(direct_us <= aggregated_us, "large blocks: direct %g us, aggregated %g us", direct_us,
             aggregated_us);
  test_hier3_small_blocks(&t, s);
  moeccl_topo_free(&t);
}

/* rank's one-step schedule: a send of bytes to peer (none when bytes is 0). */
static void one_send(moeccl_sched_t* s, int peer, uint64_t bytes) {
  moeccl_sched_reset(s);
  if (bytes) add(s, MOECCL_OP_SEND, peer, bytes);
  REQUIRE_OK(moeccl_sched_end_step(s));
}

/* Rank 0's send of 6000 B to rank 2 (group: 2000 B/us per rank, overhead 1,
 * latency 5) while rank 1, on its NIC, sends mate_bytes to rank 3. */
static double price_shared(moeccl_topo_t* t, moeccl_sched_t* s, moeccl_nic_load_t* nic,
                           uint64_t mate_bytes) {
  int mates[2];
  int k = moeccl_model_nic_mates(t, 0, mates);
  moeccl_model_nic_reset(nic);
  for (int i = 0; i < k; i++) {
    if (mates[i] == 0) continue;
    one_send(s, 3, mate_bytes);
    REQUIRE_OK(moeccl_model_nic_add(nic, t, s, mates[i]));
  }
  one_send(s, 2, 6000);
  REQUIRE_OK(moeccl_model_nic_add(nic, t, s, 0));
  return moeccl_model_price_nic(t, s, 0, nic, NULL);
}

static void test_nic(moeccl_topo_t* t, moeccl_sched_t* s) {
  moeccl_nic_load_t nic;
  memset(&nic, 0, sizeof(nic));
  int mates[2];
  CHECK_EXPR(moeccl_model_nic_mates(t, 3, mates) == 2 && mates[0] == 2 && mates[1] == 3,
             "rank 3's NIC: ranks 2 and 3");
  CHECK_EXPR(moeccl_model_nic_mates(t, 8, mates) == 0, "no rank 8");
  /* Alone on the NIC's 2 x 2000 B/us: cpu 1, link 1.5, latency 5. */
  EXPECT_NEAR(price_shared(t, s, &nic, 0), 6.5);
  /* Both send 6000: 12000 B at 4000 B/us, the per-rank price. */
  EXPECT_NEAR(price_shared(t, s, &nic, 6000), 8.0);
  EXPECT_NEAR(price_shared(t, s, &nic, 6000), moeccl_model_price(t, s, 0, NULL));
  /* The mate's 2000 B share the NIC: 8000 B, 2 us. */
  EXPECT_NEAR(price_shared(t, s, &nic, 2000), 7.0);
  /* Two rails: ranks 0 and 1 have a NIC each, priced alone whatever rank 1 sends. */
  t->nrails = 2;
  CHECK_EXPR(moeccl_model_nic_mates(t, 1, mates) == 1 && mates[0] == 1, "rank 1's rail: itself");
  EXPECT_NEAR(price_shared(t, s, &nic, 6000), 8.0);
  EXPECT_NEAR(price_shared(t, s, &nic, 0), 8.0);
  t->nrails = 1;
  /* Messages on the node do not load the NIC. */
  moeccl_model_nic_reset(&nic);
  one_send(s, 0, 1000000); /* rank 1 to rank 0 */
  REQUIRE_OK(moeccl_model_nic_add(&nic, t, s, 1));
  one_send(s, 2, 6000);
  REQUIRE_OK(moeccl_model_nic_add(&nic, t, s, 0));
  EXPECT_NEAR(moeccl_model_price_nic(t, s, 0, &nic, NULL), 6.5);
  /* Steps line up by their place in the algorithm: rank 1's first step was
   * empty (dropped), its send is the algorithm's second step, so rank 0's
   * send (the first) has the NIC alone although both are step 0 of their
   * schedules. */
  moeccl_model_nic_reset(&nic);
  moeccl_sched_reset(s);
  REQUIRE_OK(moeccl_sched_end_step(s));
  add(s, MOECCL_OP_SEND, 3, 6000);
  REQUIRE_OK(moeccl_sched_end_step(s));
  CHECK_EXPR(s->nsteps == 1 && s->step_id[0] == 1, "steps %d, id %d", s->nsteps, s->step_id[0]);
  REQUIRE_OK(moeccl_model_nic_add(&nic, t, s, 1));
  one_send(s, 2, 6000);
  REQUIRE_OK(moeccl_model_nic_add(&nic, t, s, 0));
  EXPECT_NEAR(moeccl_model_price_nic(t, s, 0, &nic, NULL), 6.5);
  /* The receiving side pools too: rank 0 receives 6000 B from rank 2, rank 1
   * nothing. */
  moeccl_model_nic_reset(&nic);
  one_send(s, 3, 0);
  REQUIRE_OK(moeccl_model_nic_add(&nic, t, s, 1));
  moeccl_sched_reset(s);
  add(s, MOECCL_OP_RECV, 2, 6000);
  REQUIRE_OK(moeccl_sched_end_step(s));
  REQUIRE_OK(moeccl_model_nic_add(&nic, t, s, 0));
  EXPECT_NEAR(moeccl_model_price_nic(t, s, 0, &nic, NULL), 6.5);
  /* No rank added: priced alone; a bad rank adds nothing. */
  moeccl_model_nic_reset(&nic);
  EXPECT_NEAR(moeccl_model_price_nic(t, s, 0, &nic, NULL), 8.0);
  CHECK_EXPR(moeccl_model_nic_add(&nic, t, s, 8) == moecclInvalidArgument, "rank 8");
  CHECK_EXPR(nic.nranks == 0, "nothing added");
  moeccl_model_nic_free(&nic);
}

int main(void) {
  moeccl_topo_t t;
  moeccl_sched_t s;
  memset(&s, 0, sizeof(s));
  small_topo(&t);
  test_one_send(&t, &s);
  test_copy(&t, &s);
  test_two_steps(&t, &s);
  test_mixed(&t, &s);
  test_rendezvous(&t, &s);
  test_invalid(&t, &s);
  test_monotone_random(&t, &s);
  test_monotone_algos(&s);
  test_dragonfly_small_blocks(&s);
  test_nic(&t, &s);
  moeccl_topo_free(&t);
  moeccl_sched_free(&s);
  if (failures) {
    fprintf(stderr, "test_model: %d failure(s)\n", failures);
    return 1;
  }
  printf("test_model: OK\n");
  return 0;
}
