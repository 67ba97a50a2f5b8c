/* Checking and simulating pipeline schedules (pp_sched.h): the rules on each
 * stage's list, the matching of sends and receives in FIFO order per ordered
 * pair of stages, and one rendezvous engine that both the deadlock check
 * (every op takes no time) and the timed simulation run. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pp_sched.h"
#include "pp_sched_int.h"

/* What the rules and the engine share: each (stage, mb, chunk)'s op index
 * per kind, and the ops numbered stage after stage with each send's and
 * receive's partner. */
typedef struct tables {
  int* pos;     /* [stages][M][V][PP_NKINDS]: op index, or -1 */
  int n;        /* ops in all */
  int* first;   /* [stages + 1]: the number of each stage's op 0 */
  int* partner; /* [n]: the op a send or receive meets, or -1 */
} tables_t;

static int is_comm(int kind) { return kind >= PP_SEND_F && kind < PP_NKINDS; }

static int* pos_of(const pp_sched_t* s, const tables_t* tb, int st, int mb, int chunk) {
  return tb->pos + (((size_t)st * s->microbatches + mb) * s->vstages + chunk) * PP_NKINDS;
}

static int stage_of(const pp_sched_t* s, const tables_t* tb, int flat) {
  int st = 0;
  while (st + 1 < s->stages && tb->first[st + 1] <= flat) st++;
  return st;
}

/* "stage S op I (OP): what", or "stage S: what" for I < 0.  Returns -1. */
static int fail(const pp_sched_t* s, int st, int i, char* err, size_t len, const char* fmt, ...) {
  char what[160], op[96];
  va_list ap;
  if (!err || !len) return -1;
  va_start(ap, fmt);
  vsnprintf(what, sizeof(what), fmt, ap);
  va_end(ap);
  if (i < 0) {
    snprintf(err, len, "stage %d: %s", st, what);
    return -1;
  }
  pp_op_describe(s, st, i, op, sizeof(op));
  snprintf(err, len, "stage %d op %d (%s): %s", st, i, op, what);
  return -1;
}

/* --- the rules on each list ------------------------------------------------------------ */

/* Kinds, micro-batches and chunks in range; W only when split; a send or
 * receive only towards a neighbouring virtual stage on another stage, named
 * as its peer; groups numbered upwards, each one consecutive ops. */
static int check_fields(const pp_sched_t* s, char* err, size_t len) {
  for (int st = 0; st < s->stages; st++) {
    int last = -1, in_group = 0;
    for (int i = 0; i < s->nops[st]; i++) {
      const pp_op_t* op = &s->ops[st][i];
      if (op->kind < 0 || op->kind >= PP_NKINDS) return fail(s, st, i, err, len, "no such kind");
      if (op->mb < 0 || op->mb >= s->microbatches || op->chunk < 0 || op->chunk >= s->vstages)
        return fail(s, st, i, err, len, "micro-batch or chunk out of range");
      if (op->kind == PP_W && !s->split_w)
        return fail(s, st, i, err, len, "W in a schedule whose B includes W");
      if (!is_comm(op->kind)) {
        in_group = 0;
        continue;
      }
      int want = pp_comm_peer(s, st, op->kind, op->chunk);
      if (want < 0)
        return fail(s, st, i, err, len, "virtual stage %d has no neighbour on another stage there",
                    op->chunk * s->stages + st);
      if (op->peer != want) return fail(s, st, i, err, len, "peer should be stage %d", want);
      if (op->group < 0 || (!(in_group && op->group == last) && op->group <= last))
        return fail(s, st, i, err, len, "group number not above the previous group's (%d)", last);
      last = op->group;
      in_group = 1;
    }
  }
  return 0;
}

static int index_ops(const pp_sched_t* s, tables_t* tb, char* err, size_t len) {
  size_t count = (size_t)s->stages * s->microbatches * s->vstages * PP_NKINDS;
  for (size_t k = 0; k < count; k++) tb->pos[k] = -1;
  for (int st = 0; st < s->stages; st++)
    for (int i = 0; i < s->nops[st]; i++) {
      const pp_op_t* op = &s->ops[st][i];
      int* p = &pos_of(s, tb, st, op->mb, op->chunk)[op->kind];
      if (*p >= 0) return fail(s, st, i, err, len, "a second one (the first is op %d)", *p);
      *p = i;
    }
  return 0;
}

/* Op `later` comes after op `first`, both present; else the failure. */
static int after(const pp_sched_t* s, int st, int later, int first, const char* what, char* err,
                 size_t len) {
  if (later < 0 || first < 0 || later > first) return 0;
  return fail(s, st, later, err, len, "before its %s (op %d)", what, first);
}

/* Every op present once, and each after what it needs on its own stage. */
static int check_deps(const pp_sched_t* s, const tables_t* tb, char* err, size_t len) {
  int S = s->stages, V = s->vstages;
  for (int st = 0; st < S; st++)
    for (int mb = 0; mb < s->microbatches; mb++)
      for (int c = 0; c < V; c++) {
        const int* p = pos_of(s, tb, st, mb, c);
        for (int k = 0; k < PP_NKINDS; k++) {
          int need = k <= PP_B || (k == PP_W && s->split_w) ||
                     (is_comm(k) && pp_comm_peer(s, st, k, c) >= 0);
          if (need && p[k] < 0)
            return fail(s, st, -1, err, len, "no %s of micro-batch %d chunk %d", pp_kind_name(k),
                        mb, c);
        }
        /* S = 1: the neighbouring chunks are on this stage, in order. */
        const int* lo = c > 0 && S == 1 ? pos_of(s, tb, st, mb, c - 1) : NULL;
        const int* hi = c + 1 < V && S == 1 ? pos_of(s, tb, st, mb, c + 1) : NULL;
        if (after(s, st, p[PP_F], p[PP_RECV_F], "RECV_F", err, len) ||
            after(s, st, p[PP_F], lo ? lo[PP_F] : -1, "previous chunk's F", err, len) ||
            after(s, st, p[PP_B], p[PP_F], "F", err, len) ||
            after(s, st, p[PP_B], p[PP_RECV_B], "RECV_B", err, len) ||
            after(s, st, p[PP_B], hi ? hi[PP_B] : -1, "next chunk's B", err, len) ||
            after(s, st, p[PP_W], p[PP_B], "B", err, len) ||
            after(s, st, p[PP_SEND_F], p[PP_F], "F", err, len) ||
            after(s, st, p[PP_SEND_B], p[PP_B], "B", err, len))
          return -1;
      }
  return 0;
}

/* --- matching in FIFO order -------------------------------------------------------------- */

/* Messages from stage a to stage b go through one queue, as moeccl matches
 * point-to-point calls in issue order per (sender, receiver) whatever they
 * carry.  b is a's next or previous stage: queue 2a or 2a+1 (one queue when
 * they are the same stage, S = 2). */
static int queue_of(const pp_sched_t* s, int a, int b) {
  return 2 * a + (b == (a + 1) % s->stages ? 0 : 1);
}

/* The receiver's virtual stage that a send of (stage, op) is for. */
static int target_vstage(const pp_sched_t* s, int st, const pp_op_t* op) {
  return op->chunk * s->stages + st + (op->kind == PP_SEND_F ? 1 : -1);
}

static int compare(const pp_sched_t* s, int a, int i, int b, int k, int n, char* err, size_t len) {
  const pp_op_t *snd = &s->ops[a][i], *rcv = &s->ops[b][k];
  char other[96];
  if (rcv->kind == snd->kind + 1 && rcv->mb == snd->mb &&
      rcv->chunk * s->stages + b == target_vstage(s, a, snd))
    return 0;
  pp_op_describe(s, b, k, other, sizeof(other));
  return fail(s, a, i, err, len, "message %d to stage %d meets its op %d (%s)", n, b, k, other);
}

/* Sends and receives per queue in list order: the n-th send meets the n-th
 * receive, which must name the same message. */
static int match_fifo(const pp_sched_t* s, tables_t* tb, char* err, size_t len) {
  int nq = 2 * s->stages, rc = 0;
  int* count = calloc((size_t)nq * 4 + 1, sizeof(int)); /* sends, receives, offsets, fill */
  int* list = malloc((size_t)tb->n * 2 * sizeof(int) + sizeof(int));
  if (!count || !list) {
    free(count);
    free(list);
    return fail(s, 0, -1, err, len, "out of memory");
  }
  int *sends = count, *recvs = count + nq, *off = count + 2 * nq, *fill = count + 3 * nq + 1;
  for (int st = 0; st < s->stages; st++)
    for (int i = 0; i < s->nops[st]; i++) {
      const pp_op_t* op = &s->ops[st][i];
      if (op->kind == PP_SEND_F || op->kind == PP_SEND_B) sends[queue_of(s, st, op->peer)]++;
      if (op->kind == PP_RECV_F || op->kind == PP_RECV_B) recvs[queue_of(s, op->peer, st)]++;
    }
  for (int q = 0; q < nq && !rc; q++) {
    int a = q / 2, b = q % 2 ? (a + s->stages - 1) % s->stages : (a + 1) % s->stages;
    if (sends[q] != recvs[q])
      rc = fail(s, a, -1, err, len, "%d sends to stage %d, which posts %d receives from it",
                sends[q], b, recvs[q]);
    off[q + 1] = off[q] + sends[q];
  }
  /* list[2 * (off[q] + n)]: the n-th send's flat number; [.. + 1]: the receive's. */
  for (int st = 0; st < s->stages && !rc; st++)
    for (int i = 0; i < s->nops[st]; i++) {
      const pp_op_t* op = &s->ops[st][i];
      int flat = tb->first[st] + i, q;
      tb->partner[flat] = -1;
      if (op->kind == PP_SEND_F || op->kind == PP_SEND_B) {
        q = queue_of(s, st, op->peer);
        list[2 * (off[q] + fill[q]++)] = flat;
      }
    }
  memset(fill, 0, (size_t)nq * sizeof(int));
  for (int st = 0; st < s->stages && !rc; st++)
    for (int i = 0; i < s->nops[st]; i++) {
      const pp_op_t* op = &s->ops[st][i];
      if (op->kind == PP_RECV_F || op->kind == PP_RECV_B) {
        int q = queue_of(s, op->peer, st);
        list[2 * (off[q] + fill[q]++) + 1] = tb->first[st] + i;
      }
    }
  for (int q = 0; q < nq && !rc; q++)
    for (int n = 0; n < sends[q] && !rc; n++) {
      int snd = list[2 * (off[q] + n)], rcv = list[2 * (off[q] + n) + 1];
      int a = stage_of(s, tb, snd), b = stage_of(s, tb, rcv);
      rc = compare(s, a, snd - tb->first[a], b, rcv - tb->first[b], n, err, len);
      tb->partner[snd] = rcv;
      tb->partner[rcv] = snd;
    }
  free(count);
  free(list);
  return rc;
}

static void tables_free(tables_t* tb) {
  free(tb->pos);
  free(tb->first);
  free(tb->partner);
}

/* Every rule short of the run: 0, or -1 with the first violation. */
static int tables_build(const pp_sched_t* s, tables_t* tb, char* err, size_t len) {
  memset(tb, 0, sizeof(*tb));
  if (!s || s->stages < 1 || s->vstages < 1 || s->microbatches < 1 || !s->nops || !s->ops) {
    if (err && len) snprintf(err, len, "not a built schedule");
    return -1;
  }
  tb->first = malloc(((size_t)s->stages + 1) * sizeof(int));
  tb->pos = malloc((size_t)s->stages * s->microbatches * s->vstages * PP_NKINDS * sizeof(int));
  if (tb->first) {
    tb->first[0] = 0;
    for (int st = 0; st < s->stages; st++) tb->first[st + 1] = tb->first[st] + s->nops[st];
    tb->n = tb->first[s->stages];
    tb->partner = malloc(((size_t)tb->n + 1) * sizeof(int));
  }
  if (!tb->first || !tb->pos || !tb->partner) {
    tables_free(tb);
    if (err && len) snprintf(err, len, "out of memory");
    return -1;
  }
  if (check_fields(s, err, len) || index_ops(s, tb, err, len) || check_deps(s, tb, err, len) ||
      match_fifo(s, tb, err, len)) {
    tables_free(tb);
    return -1;
  }
  return 0;
}

/* --- the rendezvous engine ---------------------------------------------------------------- */

typedef struct engine {
  const pp_sched_t* s;
  const tables_t* tb;
  const pp_times_t* t; /* NULL: every op takes no time */
  int* pc;             /* [stages]: the op each stage is at */
  double* clock;       /* [stages]: when it got there */
  double* posted;      /* [n]: when the op's group was posted, or -1 */
  double* done;        /* [n]: when the op completed, or -1 */
  pp_event_t* events;  /* [n] or NULL */
} engine_t;

static double op_time(const engine_t* e, int st, int kind) {
  if (!e->t) return 0.0;
  return kind == PP_F ? e->t->f[st] : kind == PP_B ? e->t->b[st] : e->t->w[st];
}

static void record(engine_t* e, int st, int i, double start, double end) {
  if (e->events) e->events[e->tb->first[st] + i] = (pp_event_t){st, i, start, end};
}

/* The end (exclusive) of the group that starts at op i. */
static int group_end(const pp_sched_t* s, int st, int i) {
  int g = s->ops[st][i].group, k = i;
  while (k < s->nops[st] && is_comm(s->ops[st][k].kind) && s->ops[st][k].group == g) k++;
  return k;
}

/* Runs stage st as far as it can: compute ops take their time; a group is
 * posted when the stage reaches it, each of its ops completes `comm` after
 * both it and its partner are posted, and the stage waits for all of them.
 * Returns whether anything changed. */
static int stage_advance(engine_t* e, int st) {
  const pp_sched_t* s = e->s;
  int moved = 0, base = e->tb->first[st];
  double comm = e->t ? e->t->comm : 0.0;
  while (e->pc[st] < s->nops[st]) {
    int i = e->pc[st], kind = s->ops[st][i].kind;
    if (!is_comm(kind)) {
      double dt = op_time(e, st, kind);
      record(e, st, i, e->clock[st], e->clock[st] + dt);
      e->clock[st] += dt;
      e->pc[st]++;
      moved = 1;
      continue;
    }
    int end = group_end(s, st, i), all = 1;
    double finish = e->clock[st];
    for (int k = i; k < end; k++) {
      if (e->posted[base + k] < 0) e->posted[base + k] = e->clock[st], moved = 1;
    }
    for (int k = i; k < end; k++) {
      int me = base + k, other = e->tb->partner[me];
      if (e->done[me] < 0 && e->posted[other] >= 0) {
        double t = e->posted[me] > e->posted[other] ? e->posted[me] : e->posted[other];
        e->done[me] = e->done[other] = t + comm;
        moved = 1;
      }
      if (e->done[me] < 0) all = 0;
      else if (e->done[me] > finish) finish = e->done[me];
    }
    if (!all) break;
    for (int k = i; k < end; k++) record(e, st, k, e->posted[base + k], e->done[base + k]);
    e->clock[st] = finish;
    e->pc[st] = end;
  }
  return moved;
}

/* Names each stuck stage's first waiting op and where its partner's stage is. */
static int deadlock(const engine_t* e, char* err, size_t len) {
  const pp_sched_t* s = e->s;
  size_t used = 0;
  if (!err || !len) return -1;
  used += snprintf(err, len, "deadlock:");
  for (int st = 0; st < s->stages && used < len; st++) {
    int i = e->pc[st], base = e->tb->first[st];
    if (i >= s->nops[st]) continue;
    while (e->done[base + i] >= 0) i++;
    int other = e->tb->partner[base + i], ps = stage_of(s, e->tb, other);
    char op[96];
    pp_op_describe(s, st, i, op, sizeof(op));
    used += snprintf(err + used, len - used,
                     " stage %d waits at op %d (%s) for stage %d's op %d, "
                     "which is at op %d;",
                     st, i, op, ps, other - e->tb->first[ps], e->pc[ps]);
  }
  return -1;
}

/* 0 when every stage reaches its end; else -1 and the deadlock in err. */
static int engine_run(const pp_sched_t* s, const tables_t* tb, const pp_times_t* t,
                      pp_event_t* events, double* clock, char* err, size_t len) {
  engine_t e = {s,
                tb,
                t,
                calloc(s->stages, sizeof(int)),
                clock,
                malloc(((size_t)tb->n + 1) * sizeof(double)),
                malloc(((size_t)tb->n + 1) * sizeof(double)),
                events};
  int rc = 0;
  if (!e.pc || !e.posted || !e.done) {
    if (err && len) snprintf(err, len, "out of memory");
    rc = -1;
  } else {
    for (int k = 0; k < tb->n; k++) e.posted[k] = e.done[k] = -1.0;
    for (int st = 0; st < s->stages; st++) clock[st] = 0.0;
    for (int moved = 1; moved;) {
      moved = 0;
      for (int st = 0; st < s->stages; st++) moved |= stage_advance(&e, st);
    }
    for (int st = 0; st < s->stages && !rc; st++)
      if (e.pc[st] < s->nops[st]) rc = deadlock(&e, err, len);
  }
  free(e.pc);
  free(e.posted);
  free(e.done);
  return rc;
}

/* --- check and simulate ------------------------------------------------------------------- */

/* Activations of (mb, chunk) are held from its RECV_F (its F when it has
 * none) to its B, or its W when the schedule splits W. */
static void measure_peaks(const pp_sched_t* s, const tables_t* tb, pp_check_t* out) {
  memset(out, 0, sizeof(*out));
  for (int st = 0; st < s->stages; st++) {
    int held = 0, peak = 0;
    for (int i = 0; i < s->nops[st]; i++) {
      const pp_op_t* op = &s->ops[st][i];
      int has_recv = pos_of(s, tb, st, op->mb, op->chunk)[PP_RECV_F] >= 0;
      held += op->kind == PP_RECV_F || (op->kind == PP_F && !has_recv);
      held -= op->kind == (s->split_w ? PP_W : PP_B);
      peak = held > peak ? held : peak;
    }
    if (st < 64) out->peak_act[st] = peak;
    out->max_peak = peak > out->max_peak ? peak : out->max_peak;
  }
}

int pp_sched_check(const pp_sched_t* s, pp_check_t* out, char* err, size_t len) {
  tables_t tb;
  if (tables_build(s, &tb, err, len)) return -1;
  double* clock = malloc((size_t)s->stages * sizeof(double));
  int rc = clock ? engine_run(s, &tb, NULL, NULL, clock, err, len) : -1;
  if (!clock && err && len) snprintf(err, len, "out of memory");
  if (!rc && out) measure_peaks(s, &tb, out);
  free(clock);
  tables_free(&tb);
  return rc;
}

int pp_sched_simulate(const pp_sched_t* s, const pp_times_t* t, int with_events, pp_sim_t* out,
                      char* err, size_t len) {
  tables_t tb;
  if (s && s->stages > 64) {
    if (err && len) snprintf(err, len, "simulation takes at most 64 stages, not %d", s->stages);
    return -1;
  }
  if (tables_build(s, &tb, err, len)) return -1;
  double clock[64];
  pp_event_t* events = with_events ? malloc(((size_t)tb.n + 1) * sizeof(*events)) : NULL;
  int rc = with_events && !events ? -1 : engine_run(s, &tb, t, events, clock, err, len);
  if (with_events && !events && err && len) snprintf(err, len, "out of memory");
  if (!rc) {
    pp_sim_t sim;
    memset(&sim, 0, sizeof(sim));
    for (int st = 0; st < s->stages; st++)
      sim.makespan = clock[st] > sim.makespan ? clock[st] : sim.makespan;
    for (int st = 0; st < s->stages; st++) {
      for (int i = 0; i < s->nops[st]; i++)
        if (!is_comm(s->ops[st][i].kind)) {
          int k = s->ops[st][i].kind;
          sim.busy[st] += k == PP_F ? t->f[st] : k == PP_B ? t->b[st] : t->w[st];
        }
      sim.idle[st] = sim.makespan - sim.busy[st];
      sim.bubble += sim.makespan > 0 ? sim.idle[st] / sim.makespan / s->stages : 0.0;
    }
    sim.events = events;
    sim.nevents = with_events ? tb.n : 0;
    *out = sim;
  } else {
    free(events);
  }
  tables_free(&tb);
  return rc;
}
