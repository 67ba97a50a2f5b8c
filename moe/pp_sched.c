/* Pipeline schedules as data: the four generators, the bubble formulas, the
 * printout and the JSON of a simulation.  The checker and the simulation are
 * in pp_sched_sim.c.  See pp_sched.h for the model and the rules every
 * schedule keeps. */
#include "pp_sched.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "pp_sched_int.h"

/* --- names ----------------------------------------------------------------------- */

static const char* const sched_names[PP_NSCHEDULES] = {"gpipe", "1f1b", "interleaved", "zb-h1"};
static const char* const kind_names[PP_NKINDS] = {"F",      "B",      "W",     "SEND_F",
                                                  "RECV_F", "SEND_B", "RECV_B"};

const char* pp_sched_name(int id) { return id >= 0 && id < PP_NSCHEDULES ? sched_names[id] : NULL; }

int pp_sched_lookup(const char* name) {
  if (!name) return -1;
  for (int id = 0; id < PP_NSCHEDULES; id++)
    if (!strcasecmp(name, sched_names[id])) return id;
  if (!strcasecmp(name, "zb") || !strcasecmp(name, "zbh1")) return PP_ZB_H1;
  return -1;
}

const char* pp_sched_names(void) { return "gpipe, 1f1b, interleaved, zb-h1"; }

const char* pp_kind_name(int kind) {
  return kind >= 0 && kind < PP_NKINDS ? kind_names[kind] : "?";
}

int pp_comm_peer(const pp_sched_t* s, int stage, int kind, int chunk) {
  int S = s->stages, j = chunk * S + stage;
  int k = kind == PP_SEND_F || kind == PP_RECV_B ? j + 1 : j - 1;
  if (k < 0 || k >= S * s->vstages) return -1;
  return k % S == stage ? -1 : k % S;
}

void pp_op_describe(const pp_sched_t* s, int stage, int index, char* buf, size_t len) {
  const pp_op_t* op = &s->ops[stage][index];
  if (op->kind >= PP_SEND_F && op->kind < PP_NKINDS)
    snprintf(buf, len, "%s %d.%d %s%d g%d", pp_kind_name(op->kind), op->mb, op->chunk,
             op->kind == PP_SEND_F || op->kind == PP_SEND_B ? "->" : "<-", op->peer, op->group);
  else snprintf(buf, len, "%s %d.%d", pp_kind_name(op->kind), op->mb, op->chunk);
}

void pp_sched_print(const pp_sched_t* s, int stage, void* file) {
  char line[96];
  if (stage < 0 || stage >= s->stages) return;
  for (int i = 0; i < s->nops[stage]; i++) {
    pp_op_describe(s, stage, i, line, sizeof(line));
    fprintf((FILE*)file, "%s\n", line);
  }
}

int pp_sched_write_json(const pp_sched_t* s, const pp_sim_t* sim, void* file) {
  FILE* f = file;
  if (!sim->events || sim->nevents <= 0) return -1;
  fprintf(f, "{\"schedule\": \"%s\", \"stages\": %d, \"vstages\": %d, \"microbatches\": %d,\n",
          pp_sched_name(s->id), s->stages, s->vstages, s->microbatches);
  fprintf(f, " \"makespan\": %.9g, \"bubble\": %.9g, \"events\": [\n", sim->makespan, sim->bubble);
  for (int k = 0; k < sim->nevents; k++) {
    const pp_event_t* e = &sim->events[k];
    const pp_op_t* op = &s->ops[e->stage][e->op];
    fprintf(f,
            "  {\"stage\": %d, \"kind\": \"%s\", \"mb\": %d, \"chunk\": %d, \"start\": %.9g, "
            "\"end\": %.9g}%s\n",
            e->stage, pp_kind_name(op->kind), op->mb, op->chunk, e->start, e->end,
            k + 1 < sim->nevents ? "," : "");
  }
  fprintf(f, "]}\n");
  return ferror(f) ? -1 : 0;
}

/* --- building a stage's list ------------------------------------------------------- */

/* The lists grow by doubling; a failed allocation is remembered and reported
 * once at the end, so the generators need no error paths. */
typedef struct builder {
  pp_sched_t* s;
  int* cap;        /* [stages] ops allocated */
  int* next_group; /* [stages] the number the stage's next group takes */
  int* open;       /* [stages] the group being filled, or -1: the next comm op opens one */
  int nomem;
} builder_t;

static void push(builder_t* b, int stage, int kind, int mb, int chunk, int peer, int group) {
  pp_sched_t* s = b->s;
  if (b->nomem) return;
  if (s->nops[stage] == b->cap[stage]) {
    int cap = b->cap[stage] ? 2 * b->cap[stage] : 64;
    pp_op_t* ops = realloc(s->ops[stage], (size_t)cap * sizeof(*ops));
    if (!ops) {
      b->nomem = 1;
      return;
    }
    s->ops[stage] = ops;
    b->cap[stage] = cap;
  }
  s->ops[stage][s->nops[stage]++] = (pp_op_t){kind, mb, chunk, peer, group};
}

static void compute(builder_t* b, int stage, int kind, int mb, int chunk) {
  b->open[stage] = -1;
  push(b, stage, kind, mb, chunk, -1, -1);
}

/* The communication ops that follow, up to the next compute op or group(),
 * are posted together.  A group that gets no op takes no number. */
static void group(builder_t* b, int stage) { b->open[stage] = -1; }

/* Adds a send or receive of (mb, chunk) when its neighbouring virtual stage
 * is on another stage; nothing otherwise (the first or last virtual stage,
 * or S = 1 where the driver hands the tensor over locally). */
static void comm(builder_t* b, int stage, int kind, int mb, int chunk) {
  int peer = pp_comm_peer(b->s, stage, kind, chunk);
  if (peer < 0) return;
  if (b->open[stage] < 0) b->open[stage] = b->next_group[stage]++;
  push(b, stage, kind, mb, chunk, peer, b->open[stage]);
}

static int min_int(int a, int b) { return a < b ? a : b; }

/* --- GPipe, 1F1B and ZB-H1 ------------------------------------------------------------ */

/* Every forward, then every backward in micro-batch order; each receive and
 * each send is a group of its own. */
static void gen_gpipe(builder_t* b, int st) {
  int M = b->s->microbatches;
  for (int m = 0; m < M; m++) {
    group(b, st);
    comm(b, st, PP_RECV_F, m, 0);
    compute(b, st, PP_F, m, 0);
    group(b, st);
    comm(b, st, PP_SEND_F, m, 0);
  }
  for (int m = 0; m < M; m++) {
    group(b, st);
    comm(b, st, PP_RECV_B, m, 0);
    compute(b, st, PP_B, m, 0);
    group(b, st);
    comm(b, st, PP_SEND_B, m, 0);
  }
}

/* Megatron's forward_backward_pipelining_without_interleaving: S-s-1
 * warm-up forwards with a receive group and a send group each, then the
 * steady state's F, {send F, receive B}, B, {receive the next F, send B},
 * then the cool-down's {receive B}, B, {send B}.  In the steady state each
 * stage's groups meet its neighbours' groups of the same step whole, so
 * the groups pair up and no stage waits on one that waits on it.
 *
 * zb (ZB-H1): B computes the input gradient only and W follows it.  When the
 * group after B receives the next forward's input, W goes before that group,
 * so that the input never arrives while W still holds its activations and
 * the memory stays 1F1B's; when it does not (the last steady step and the
 * cool-down) W goes after it, so the gradient leaves before W runs: the
 * backward wave of the cool-down then moves at B's pace, not B+W's, and W
 * fills the wait for the next gradient. */
static void gen_1f1b(builder_t* b, int st, int zb) {
  int S = b->s->stages, M = b->s->microbatches;
  int warm = min_int(S - st - 1, M), steady = M - warm;
  for (int m = 0; m < warm; m++) {
    group(b, st);
    comm(b, st, PP_RECV_F, m, 0);
    compute(b, st, PP_F, m, 0);
    group(b, st);
    comm(b, st, PP_SEND_F, m, 0);
  }
  group(b, st);
  if (steady > 0) comm(b, st, PP_RECV_F, warm, 0);
  for (int i = 0; i < M; i++) {
    int next_f = i + 1 < steady; /* the group after B(i) receives F(warm + i + 1) */
    if (i < steady) {
      compute(b, st, PP_F, warm + i, 0);
      group(b, st);
      comm(b, st, PP_SEND_F, warm + i, 0);
    } else {
      group(b, st);
    }
    comm(b, st, PP_RECV_B, i, 0);
    compute(b, st, PP_B, i, 0);
    if (zb && next_f) compute(b, st, PP_W, i, 0);
    group(b, st);
    if (next_f) comm(b, st, PP_RECV_F, warm + i + 1, 0);
    comm(b, st, PP_SEND_B, i, 0);
    if (zb && !next_f) compute(b, st, PP_W, i, 0);
  }
}

/* --- interleaved 1F1B ------------------------------------------------------------------- */

/* Megatron's forward_backward_pipelining_with_interleaving.  Forward number k
 * (0..M*V-1) of every stage is micro-batch il_mb(k) on chunk il_chunk(k):
 * micro-batches go in groups of S through chunk 0, then the same S through
 * chunk 1, and so on; backward number k runs the chunks the other way. */
static int il_mb(const pp_sched_t* s, int k) {
  int S = s->stages;
  return k / (S * s->vstages) * S + k % S;
}

static int il_chunk(const pp_sched_t* s, int k, int forward) {
  int c = k % (s->stages * s->vstages) / s->stages;
  return forward ? c : s->vstages - 1 - c;
}

/* Warm-up forwards of a stage: 2(S-s-1) + (V-1)S, or all of them when M = S. */
static int il_warmup(const pp_sched_t* s, int st) {
  int total = s->microbatches * s->vstages;
  if (s->microbatches == s->stages) return total;
  return min_int(2 * (s->stages - st - 1) + (s->vstages - 1) * s->stages, total);
}

/* Stage st's receive of what stage `from` sends after its forward (RECV_F)
 * or backward (RECV_B) number k, if that exists and goes to st: named for
 * the receiver's chunk, the sender's next or previous virtual stage. */
static void il_recv(builder_t* b, int st, int kind, int k, int from) {
  const pp_sched_t* s = b->s;
  int total = s->microbatches * s->vstages, S = s->stages;
  if (k < 0 || k >= total) return;
  int j = il_chunk(s, k, kind == PP_RECV_F) * S + from;
  j += kind == PP_RECV_F ? 1 : -1;
  if (j < 0 || j >= S * s->vstages) return;
  comm(b, st, kind, il_mb(s, k), j / S);
}

/* Round r (-1 .. M*V+warm-1) of stage st: forward r, backward r - warm
 * (those that exist), then one group with their sends and the receives that
 * the neighbours' sends of the paired rounds carry (Megatron's
 * send_forward_backward_recv_forward_backward).  Megatron's warm-up counts,
 * two apart on neighbouring stages, make round r of stage s pair with round
 * r + s - p of stage p in both directions, the wrap from stage S-1 to stage
 * 0 included (the chunk order, S micro-batches per chunk, makes up for the
 * 2(S-1) there).  So each group meets one group on each neighbour, whole:
 * groups of equal r + s complete together, in order of r + s. */
static void il_round(builder_t* b, int st, int r) {
  const pp_sched_t* s = b->s;
  int S = s->stages, total = s->microbatches * s->vstages, warm = il_warmup(s, st);
  int prev = (st + S - 1) % S, next = (st + 1) % S;
  int f = r >= 0 && r < total ? r : -1, bw = r >= warm ? r - warm : -1;
  if (f >= 0) compute(b, st, PP_F, il_mb(s, f), il_chunk(s, f, 1));
  if (bw >= 0) compute(b, st, PP_B, il_mb(s, bw), il_chunk(s, bw, 0));
  group(b, st);
  if (f >= 0) comm(b, st, PP_SEND_F, il_mb(s, f), il_chunk(s, f, 1));
  il_recv(b, st, PP_RECV_F, r + st - prev, prev);
  if (bw >= 0) comm(b, st, PP_SEND_B, il_mb(s, bw), il_chunk(s, bw, 0));
  il_recv(b, st, PP_RECV_B, r + st - next - il_warmup(s, next), next);
}

/* M = S: Megatron runs every forward as warm-up, then one receive of the
 * first gradient alone, then the backwards with {send B, receive the next}.
 * In that backward phase round r of stage s pairs with round r + p - s of
 * stage p (the wave goes the other way). */
static void il_all_warmup(builder_t* b, int st) {
  const pp_sched_t* s = b->s;
  int S = s->stages, total = s->microbatches * s->vstages;
  int prev = (st + S - 1) % S, next = (st + 1) % S;
  for (int r = -1; r < total; r++) {
    if (r >= 0) compute(b, st, PP_F, il_mb(s, r), il_chunk(s, r, 1));
    group(b, st);
    if (r >= 0) comm(b, st, PP_SEND_F, il_mb(s, r), il_chunk(s, r, 1));
    il_recv(b, st, PP_RECV_F, r + st - prev, prev);
  }
  for (int r = -1; r < total; r++) {
    if (r >= 0) compute(b, st, PP_B, il_mb(s, r), il_chunk(s, r, 0));
    group(b, st);
    if (r >= 0) comm(b, st, PP_SEND_B, il_mb(s, r), il_chunk(s, r, 0));
    il_recv(b, st, PP_RECV_B, r + next - st, next);
  }
}

static void gen_interleaved(builder_t* b, int st) {
  const pp_sched_t* s = b->s;
  if (s->microbatches == s->stages) {
    il_all_warmup(b, st);
    return;
  }
  int rounds = s->microbatches * s->vstages + il_warmup(s, st);
  for (int r = -1; r < rounds; r++) il_round(b, st, r);
}

/* --- build and free ------------------------------------------------------------------- */

static const char* build_refusal(int id, int S, int V, int M) {
  if (S < 1) return "stages must be at least 1";
  if (M < 1) return "micro-batches must be at least 1";
  if (V < 1) return "virtual stages must be at least 1";
  if (V > 1 && id != PP_INTERLEAVED) return "virtual stages above 1 need the interleaved schedule";
  if (id == PP_INTERLEAVED && S > 1 && M % S)
    return "interleaved needs micro-batches a multiple of stages";
  if ((long long)S * V * M * 8 > 1 << 30)
    return "stages * virtual stages * micro-batches too large";
  return NULL;
}

int pp_sched_build(pp_sched_t* s, int id, int stages, int vstages, int microbatches, char* err,
                   size_t len) {
  memset(s, 0, sizeof(*s));
  if (id < 0 || id >= PP_NSCHEDULES) {
    if (err && len) snprintf(err, len, "unknown schedule id %d (known: %s)", id, pp_sched_names());
    return -1;
  }
  const char* bad = build_refusal(id, stages, vstages, microbatches);
  if (bad) {
    if (err && len)
      snprintf(err, len, "%s: %s (S=%d V=%d M=%d)", pp_sched_name(id), bad, stages, vstages,
               microbatches);
    return -1;
  }
  builder_t b = {s, calloc(stages, sizeof(int)), calloc(stages, sizeof(int)),
                 calloc(stages, sizeof(int)), 0};
  s->id = id;
  s->stages = stages;
  s->vstages = vstages;
  s->microbatches = microbatches;
  s->split_w = id == PP_ZB_H1;
  s->nops = calloc(stages, sizeof(int));
  s->ops = calloc(stages, sizeof(pp_op_t*));
  b.nomem = !b.cap || !b.next_group || !b.open || !s->nops || !s->ops;
  for (int st = 0; st < stages && !b.nomem; st++) {
    b.open[st] = -1;
    switch (id) {
      case PP_GPIPE: gen_gpipe(&b, st); break;
      case PP_1F1B: gen_1f1b(&b, st, 0); break;
      case PP_INTERLEAVED: gen_interleaved(&b, st); break;
      default: gen_1f1b(&b, st, 1); break;
    }
  }
  free(b.cap);
  free(b.next_group);
  free(b.open);
  if (b.nomem) {
    pp_sched_free(s);
    if (err && len) snprintf(err, len, "%s: out of memory", pp_sched_name(id));
    return -1;
  }
  return 0;
}

void pp_sched_free(pp_sched_t* s) {
  for (int st = 0; s->ops && st < s->stages; st++) free(s->ops[st]);
  free(s->ops);
  free(s->nops);
  memset(s, 0, sizeof(*s));
}

/* --- the bubble formulas ------------------------------------------------------------------ */

double pp_sched_bubble_formula(const pp_sched_t* s, double tf, double tb, double tw) {
  double S = s->stages, M = s->microbatches, V = s->vstages;
  switch (s->id) {
    case PP_GPIPE:
    case PP_1F1B: return (S - 1) / (M + S - 1);
    case PP_INTERLEAVED: return (S - 1) / (V * M + S - 1);
    case PP_ZB_H1: {
      double fill = (S - 1) * (tf + tb), all = M * (tf + tb + tw) + fill;
      return all > 0 ? fill / all : 0.0;
    }
    default: return 0.0;
  }
}
