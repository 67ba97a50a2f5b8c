/* The pipeline schedules of moe/pp_sched.h, generated and checked.
 *
 * Every schedule for every S in 1..8 and M in 1..32 (interleaved: V in 1..4
 * where M % S == 0 or S == 1) builds and passes pp_sched_check: each op once,
 * dependencies in order, peers, FIFO matching per ordered pair and a
 * rendezvous run without deadlock; with S = 1 there is no send or receive.
 * Peak activations: GPipe M on every stage, 1F1B min(M, S-s), ZB-H1 equal to
 * 1F1B's on every stage, interleaved min(M*V, 2(S-s-1)+(V-1)S+1) (M*V when
 * M = S).  Simulated bubbles with comm = 0 and equal times on every stage,
 * against the formulas within 1e-9 (the largest difference measured is
 * 1.1e-16, rounding): GPipe and 1F1B (S-1)/(M+S-1) with tf = tb and with
 * tf != tb; interleaved (S-1)/(V*M+S-1) likewise (measured 5.6e-17: Megatron's
 * interleaved schedule reaches its formula exactly under rendezvous groups);
 * ZB-H1 (S-1)(tf+tb)/(M(tf+tb+tw)+(S-1)(tf+tb)) for tf = tb = tw and for
 * tw = tb/2, and below 1F1B's (B + W in one) for tf = tb = tw whenever S > 1.
 * Refusals with a message: S = 0, M = 0, V = 0, V > 1 outside interleaved,
 * M % S != 0 for interleaved, an unknown id or name.  Broken schedules the
 * check must catch: two groups swapped (deadlock), two receives swapped in
 * one group (FIFO mismatch of an activation and a gradient, S = 2), a
 * receive dropped, F and B swapped, a wrong peer, a W without split_w, group
 * numbers going down.  Also the events of a simulation, the printout and
 * the JSON for scripts/pp_timeline.py.
 * Exit 0 pass, 1 fail. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pp_sched.h"
#include "unit_check.h"

static const double bubble_tol = 1e-9;

static int vmax(int id) { return id == PP_INTERLEAVED ? 4 : 1; }

static void uniform(pp_times_t* t, int stages, double tf, double tb, double tw) {
  memset(t, 0, sizeof(*t));
  for (int st = 0; st < stages; st++) t->f[st] = tf, t->b[st] = tb, t->w[st] = tw;
}

static double sim_bubble(const pp_sched_t* s, const pp_times_t* t) {
  pp_sim_t sim;
  char err[256] = "";
  int rc = pp_sched_simulate(s, t, 0, &sim, err, sizeof(err));
  CHECK(rc == 0, "%s S=%d V=%d M=%d: simulate: %s", pp_sched_name(s->id), s->stages, s->vstages,
        s->microbatches, err);
  return rc ? -1.0 : sim.bubble;
}

static int expected_peak(const pp_sched_t* s, int st) {
  int S = s->stages, M = s->microbatches, V = s->vstages;
  switch (s->id) {
    case PP_GPIPE: return M;
    case PP_INTERLEAVED: {
      int w = 2 * (S - st - 1) + (V - 1) * S + 1;
      return M == S || w > M * V ? M * V : w;
    }
    default: return M < S - st ? M : S - st;
  }
}

static int count_comm(const pp_sched_t* s) {
  int n = 0;
  for (int st = 0; st < s->stages; st++)
    for (int i = 0; i < s->nops[st]; i++) n += s->ops[st][i].kind >= PP_SEND_F;
  return n;
}

/* Check, peaks and the formula of one built schedule. */
static void check_one(const pp_sched_t* s) {
  const char* name = pp_sched_name(s->id);
  int S = s->stages, V = s->vstages, M = s->microbatches;
  char err[512] = "";
  pp_check_t c;
  if (pp_sched_check(s, &c, err, sizeof(err))) {
    CHECK(0, "%s S=%d V=%d M=%d: %s", name, S, V, M, err);
    return;
  }
  for (int st = 0; st < S; st++)
    CHECK(c.peak_act[st] == expected_peak(s, st), "%s S=%d V=%d M=%d stage %d: peak %d, want %d",
          name, S, V, M, st, c.peak_act[st], expected_peak(s, st));
  if (S == 1) CHECK(count_comm(s) == 0, "%s S=1 V=%d M=%d: %d comm ops", name, V, M, count_comm(s));
  /* tf = tb (tw 0 or in B), and tf != tb: the formulas take no times but ZB-H1's */
  static const double times[][3] = {{1, 1, 0}, {1, 2, 0}, {1, 1, 1}, {1, 1, 0.5}};
  for (int k = 0; k < 4; k++) {
    pp_times_t t;
    double tf = times[k][0], tb = times[k][1], tw = times[k][2];
    if ((tw > 0) != (s->split_w != 0)) continue;
    uniform(&t, S, tf, tb, tw);
    double got = sim_bubble(s, &t), want = pp_sched_bubble_formula(s, tf, tb, tw);
    CHECK(fabs(got - want) <= bubble_tol,
          "%s S=%d V=%d M=%d tf %g tb %g tw %g: bubble %.12f, "
          "formula %.12f",
          name, S, V, M, tf, tb, tw, got, want);
  }
}

static void check_all(void) {
  char err[256];
  int built = 0;
  for (int id = 0; id < PP_NSCHEDULES; id++)
    for (int S = 1; S <= 8; S++)
      for (int M = 1; M <= 32; M++)
        for (int V = 1; V <= vmax(id); V++) {
          pp_sched_t s;
          int valid = !(id == PP_INTERLEAVED && S > 1 && M % S);
          int rc = pp_sched_build(&s, id, S, V, M, err, sizeof(err));
          CHECK(rc == (valid ? 0 : -1), "%s S=%d V=%d M=%d: build %d (%s)", pp_sched_name(id), S, V,
                M, rc, rc ? err : "");
          if (rc) continue;
          check_one(&s);
          built++;
          pp_sched_free(&s);
        }
  printf("%d schedules built and checked\n", built);
}

/* ZB-H1 against 1F1B with B + W as one op, tf = tb = tw: peaks no higher
 * on any stage, bubble lower whenever there is a pipeline. */
static void check_zb_vs_1f1b(void) {
  char err[256];
  double worst = 1.0;
  for (int S = 1; S <= 8; S++)
    for (int M = 1; M <= 32; M++) {
      pp_sched_t a, z;
      pp_check_t ca, cz;
      pp_times_t t;
      if (pp_sched_build(&a, PP_1F1B, S, 1, M, err, sizeof(err)) ||
          pp_sched_build(&z, PP_ZB_H1, S, 1, M, err, sizeof(err))) {
        CHECK(0, "S=%d M=%d: %s", S, M, err);
        return;
      }
      if (!pp_sched_check(&a, &ca, err, sizeof(err)) && !pp_sched_check(&z, &cz, err, sizeof(err)))
        for (int st = 0; st < S; st++)
          CHECK(cz.peak_act[st] <= ca.peak_act[st], "S=%d M=%d stage %d: zb-h1 peak %d > 1f1b %d",
                S, M, st, cz.peak_act[st], ca.peak_act[st]);
      uniform(&t, S, 1, 2, 0);
      double b1 = sim_bubble(&a, &t);
      uniform(&t, S, 1, 1, 1);
      double bz = sim_bubble(&z, &t);
      if (S > 1) CHECK(bz < b1, "S=%d M=%d: zb-h1 bubble %.6f, 1f1b %.6f", S, M, bz, b1);
      if (S > 1 && bz / b1 < worst) worst = bz / b1;
      pp_sched_free(&a);
      pp_sched_free(&z);
    }
  printf("zb-h1 bubble / 1f1b bubble at tf = tb = tw: down to %.3f\n", worst);
}

static void expect_refused(int id, int S, int V, int M, const char* word) {
  pp_sched_t s;
  char err[256] = "";
  int rc = pp_sched_build(&s, id, S, V, M, err, sizeof(err));
  CHECK(rc == -1 && strstr(err, word), "id %d S=%d V=%d M=%d: rc %d, message '%s' (want '%s')", id,
        S, V, M, rc, err, word);
  if (!rc) pp_sched_free(&s);
}

static void check_refusals_and_names(void) {
  expect_refused(PP_1F1B, 0, 1, 4, "stages");
  expect_refused(PP_GPIPE, 4, 1, 0, "micro-batches");
  expect_refused(PP_INTERLEAVED, 2, 0, 4, "virtual stages");
  expect_refused(PP_1F1B, 4, 2, 8, "interleaved");
  expect_refused(PP_ZB_H1, 4, 2, 8, "interleaved");
  expect_refused(PP_INTERLEAVED, 4, 2, 6, "multiple");
  expect_refused(PP_NSCHEDULES, 4, 1, 8, "unknown");
  expect_refused(pp_sched_lookup("pipedream"), 4, 1, 8, "unknown");
  for (int id = 0; id < PP_NSCHEDULES; id++) {
    CHECK(pp_sched_lookup(pp_sched_name(id)) == id, "name %d", id);
    CHECK(strstr(pp_sched_names(), pp_sched_name(id)) != NULL, "names() lacks %s",
          pp_sched_name(id));
  }
  CHECK(pp_sched_lookup("zb") == PP_ZB_H1 && pp_sched_lookup("zbh1") == PP_ZB_H1 &&
            pp_sched_lookup("ZB-H1") == PP_ZB_H1 && pp_sched_lookup("1F1B") == PP_1F1B,
        "aliases");
  CHECK(pp_sched_lookup("pipedream") == -1 && pp_sched_lookup("") == -1 &&
            pp_sched_lookup(NULL) == -1,
        "unknown names");
  CHECK(pp_sched_name(-1) == NULL && pp_sched_name(PP_NSCHEDULES) == NULL, "names out of range");
}

/* --- broken schedules -------------------------------------------------------------------- */

static int find_op(const pp_sched_t* s, int st, int kind, int mb, int chunk) {
  for (int i = 0; i < s->nops[st]; i++) {
    const pp_op_t* op = &s->ops[st][i];
    if (op->kind == kind && op->mb == mb && op->chunk == chunk) return i;
  }
  return -1;
}

/* Swaps two ops; the group numbers stay in their places. */
static void swap_ops(pp_sched_t* s, int st, int a, int b) {
  pp_op_t t = s->ops[st][a];
  int ga = s->ops[st][a].group, gb = s->ops[st][b].group;
  s->ops[st][a] = s->ops[st][b];
  s->ops[st][b] = t;
  s->ops[st][a].group = ga;
  s->ops[st][b].group = gb;
}

static void expect_caught(const pp_sched_t* s, const char* what, const char* word) {
  char err[512] = "";
  int rc = pp_sched_check(s, NULL, err, sizeof(err));
  CHECK(rc == -1 && strstr(err, word), "%s: rc %d, message '%s' (want '%s')", what, rc, err, word);
  if (rc == -1 && strstr(err, word)) printf("caught, %s: %s\n", what, err);
}

static int build(pp_sched_t* s, int id, int S, int V, int M) {
  char err[256];
  int rc = pp_sched_build(s, id, S, V, M, err, sizeof(err));
  CHECK(rc == 0, "build: %s", err);
  return rc;
}

static void check_broken(void) {
  pp_sched_t s;
  /* GPipe S=2 M=2: stage 0 waits for gradient 0 before sending forward 1,
   * which stage 1 needs before its backward 0: each waits on the other. */
  if (!build(&s, PP_GPIPE, 2, 1, 2)) {
    swap_ops(&s, 0, find_op(&s, 0, PP_SEND_F, 1, 0), find_op(&s, 0, PP_RECV_B, 0, 0));
    expect_caught(&s, "groups swapped", "deadlock");
    pp_sched_free(&s);
  }
  /* Interleaved S=2: stage 0 receives an activation and a gradient from
   * stage 1 in one group; the other order takes the gradient for the
   * activation (one queue per pair of stages). */
  if (!build(&s, PP_INTERLEAVED, 2, 2, 4)) {
    int i = 0;
    while (i + 1 < s.nops[0] &&
           !(s.ops[0][i].kind == PP_RECV_F && s.ops[0][i + 1].kind == PP_RECV_B))
      i++;
    CHECK(i + 1 < s.nops[0], "no RECV_F, RECV_B pair on stage 0");
    if (i + 1 < s.nops[0]) swap_ops(&s, 0, i, i + 1);
    expect_caught(&s, "receives swapped in a group", "meets");
    pp_sched_free(&s);
  }
  /* 1F1B S=3 M=4: stage 1 drops the receive of forward 2. */
  if (!build(&s, PP_1F1B, 3, 1, 4)) {
    int i = find_op(&s, 1, PP_RECV_F, 2, 0);
    memmove(&s.ops[1][i], &s.ops[1][i + 1], (size_t)(s.nops[1] - i - 1) * sizeof(pp_op_t));
    s.nops[1]--;
    expect_caught(&s, "receive dropped", "no RECV_F of micro-batch 2");
    pp_sched_free(&s);
  }
  if (!build(&s, PP_1F1B, 3, 1, 4)) {
    swap_ops(&s, 2, find_op(&s, 2, PP_F, 1, 0), find_op(&s, 2, PP_B, 1, 0));
    expect_caught(&s, "F and B swapped", "before its F");
    pp_sched_free(&s);
  }
  if (!build(&s, PP_1F1B, 3, 1, 4)) {
    s.ops[1][find_op(&s, 1, PP_SEND_B, 0, 0)].peer = 2;
    expect_caught(&s, "wrong peer", "peer should be stage 0");
    pp_sched_free(&s);
  }
  if (!build(&s, PP_ZB_H1, 3, 1, 4)) {
    s.split_w = 0;
    expect_caught(&s, "W without split_w", "W in a schedule");
    pp_sched_free(&s);
  }
  if (!build(&s, PP_GPIPE, 3, 1, 4)) {
    s.ops[1][find_op(&s, 1, PP_SEND_F, 2, 0)].group = 0;
    expect_caught(&s, "group numbers going down", "group number");
    pp_sched_free(&s);
  }
}

/* --- events, printout, JSON ----------------------------------------------------------------- */

static void check_events(void) {
  pp_sched_t s;
  pp_times_t t;
  pp_sim_t sim;
  char err[256] = "";
  if (build(&s, PP_ZB_H1, 4, 1, 8)) return;
  uniform(&t, 4, 1.0, 1.0, 0.5);
  t.comm = 0.125;
  if (pp_sched_simulate(&s, &t, 1, &sim, err, sizeof(err))) {
    CHECK(0, "simulate with events: %s", err);
    pp_sched_free(&s);
    return;
  }
  int total = 0;
  for (int st = 0; st < 4; st++) total += s.nops[st];
  CHECK(sim.nevents == total, "%d events for %d ops", sim.nevents, total);
  for (int k = 1; k < sim.nevents; k++) {
    const pp_event_t *e = &sim.events[k], *p = &sim.events[k - 1];
    CHECK(e->end >= e->start && e->end <= sim.makespan + 1e-12, "event %d: %g..%g", k, e->start,
          e->end);
    if (e->stage == p->stage)
      CHECK(e->start >= p->start, "event %d starts before event %d", k, k - 1);
  }
  for (int st = 0; st < 4; st++)
    CHECK(fabs(sim.busy[st] - 8 * 2.5) < 1e-12 &&
              fabs(sim.idle[st] + sim.busy[st] - sim.makespan) < 1e-12,
          "stage %d: busy %g idle %g makespan %g", st, sim.busy[st], sim.idle[st], sim.makespan);
  FILE* f = tmpfile();
  if (f) {
    char head[64] = "";
    CHECK(pp_sched_write_json(&s, &sim, f) == 0, "write json");
    rewind(f);
    CHECK(fgets(head, sizeof(head), f) && !strncmp(head, "{\"schedule\": \"zb-h1\"", 20),
          "json starts '%s'", head);
    fclose(f);
  }
  free(sim.events);
  pp_sched_free(&s);
  /* More than 64 stages: checked, not simulated. */
  if (!build(&s, PP_GPIPE, 65, 1, 2)) {
    uniform(&t, 64, 1, 1, 0);
    CHECK(pp_sched_check(&s, NULL, err, sizeof(err)) == 0, "65 stages: %s", err);
    CHECK(pp_sched_simulate(&s, &t, 0, &sim, err, sizeof(err)) == -1 && strstr(err, "64"),
          "65 stages simulated: '%s'", err);
    pp_sched_free(&s);
  }
}

static void check_print(void) {
  pp_sched_t s;
  char text[256] = "";
  FILE* f = tmpfile();
  if (!f || build(&s, PP_1F1B, 2, 1, 2)) {
    if (f) fclose(f);
    return;
  }
  pp_sched_print(&s, 1, f);
  rewind(f);
  size_t n = fread(text, 1, sizeof(text) - 1, f);
  text[n] = 0;
  CHECK(!strcmp(text, "RECV_F 0.0 <-0 g0\nF 0.0\nB 0.0\nRECV_F 1.0 <-0 g1\nSEND_B 0.0 ->0 g1\n"
                      "F 1.0\nB 1.0\nSEND_B 1.0 ->0 g2\n"),
        "stage 1 of 1f1b S=2 M=2 printed:\n%s", text);
  fclose(f);
  pp_sched_free(&s);
}

int main(void) {
  check_all();
  check_zb_vs_1f1b();
  check_refusals_and_names();
  check_broken();
  check_events();
  check_print();
  printf("%d checks\n", checks);
  if (failures) printf("%d check(s) failed\n", failures);
  return failures ? 1 : 0;
}
