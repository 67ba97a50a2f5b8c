/* Pipeline schedules as data.  A schedule says, for each of S pipeline
 * stages, the ordered list of steps that stage runs for the M micro-batches
 * of one global batch: forwards, backwards (and, for the schedules that
 * split them, the weight-gradient halves), and the sends and receives of
 * activations and their gradients between neighbouring stages.
 *
 * Model chunks.  With V virtual stages per stage (interleaved 1F1B) the L
 * layers split into S*V contiguous pieces, "virtual stages" j = 0..S*V-1;
 * piece j lives on stage j % S as its chunk j / S.  V = 1: stage s holds
 * piece s.  An op names (mb, chunk); the virtual stage is chunk * S + stage.
 *
 * Communication.  A forward of virtual stage j > 0 needs the activations
 * that virtual stage j - 1 produced (RECV_F on this stage, SEND_F on the
 * stage of j - 1); a backward of j < S*V - 1 needs the gradient from j + 1
 * (RECV_B here, SEND_B there).  Consecutive communication ops with the same
 * `group` number are posted together (one moecclGroupStart/End) and the
 * stage waits for all of them before its next op: rendezvous semantics, a
 * send completes only while its receiver has the matching receive posted.
 * Group numbers count up from 0 along each stage's list.  Sends and receives
 * match in issue order per ordered pair of stages (sender, receiver), as
 * moecclSend/Recv do: activations and gradients from a to b share one queue
 * (with S = 2 both go between the same two stages).  So the n-th send from a
 * to b must carry the message the n-th receive at b from a names: a SEND_F
 * of (mb, c) on a meets a RECV_F of mb for virtual stage c*S + a + 1 on b
 * (the same chunk, or chunk c + 1 where the chain wraps from stage S-1 to
 * stage 0), a SEND_B the RECV_B of virtual stage c*S + a - 1.  Within a
 * group the generators put SEND_F, RECV_F before SEND_B, RECV_B.
 *
 * Neighbours on the same stage.  With S = 1 (interleaved with V > 1) every
 * virtual stage is on stage 0: no SEND/RECV op is emitted at all; the driver
 * hands chunk c's output to chunk c + 1 (and the gradient back) in memory.
 * The list keeps the order that needs: F of (mb, c) after F of (mb, c - 1),
 * B of (mb, c) after B of (mb, c + 1).
 *
 * The generators.  GPipe: per micro-batch {RECV_F}, F, {SEND_F}, then per
 * micro-batch {RECV_B}, B, {SEND_B}.  1F1B (Megatron's non-interleaved
 * schedule): S-s-1 warm-up forwards as GPipe's, then per steady step F,
 * {SEND_F, RECV_B}, B, {RECV_F of the next, SEND_B}, then the cool-down's
 * {RECV_B}, B, {SEND_B}.  Interleaved (Megatron's): 2(S-s-1) + (V-1)S
 * warm-up forwards (all of them when M = S); round r of a stage runs forward
 * r and backward r - warm-up (those that exist), then one group with their
 * sends and the receives its neighbours' sends of the paired round carry.
 * ZB-H1: 1F1B's groups; W right before the group after B when that group
 * receives the next forward's input (memory stays 1F1B's), right after it
 * otherwise (the last steady step and the cool-down: the gradient goes
 * upstream before W runs).
 *
 * Everything here is pure data and arithmetic: no library calls.  The
 * driver (train_pipe.c) walks one stage's list; tests/test_pp_sched.c
 * checks every generated schedule with pp_sched_check; the planner prices
 * a schedule with pp_sched_simulate. */
#ifndef MOE_PP_SCHED_H_
#define MOE_PP_SCHED_H_

#include <stddef.h>

typedef enum pp_kind {
  PP_F = 0,  /* forward of (mb, chunk) */
  PP_B,      /* backward: the input gradient, and the weight gradient too
                unless the schedule splits W (then only the input gradient) */
  PP_W,      /* weight gradient of (mb, chunk); only in split_w schedules */
  PP_SEND_F, /* send (mb, chunk)'s output activations to peer */
  PP_RECV_F, /* receive (mb, chunk)'s input activations from peer */
  PP_SEND_B, /* send (mb, chunk)'s input gradient to peer */
  PP_RECV_B, /* receive (mb, chunk)'s output gradient from peer */
  PP_NKINDS
} pp_kind_t;

typedef struct pp_op {
  int kind;  /* pp_kind_t */
  int mb;    /* micro-batch, 0..M-1 */
  int chunk; /* model chunk on this stage, 0..V-1 */
  int peer;  /* communication ops: the other stage; -1 otherwise */
  int group; /* communication ops: posted together with the neighbouring ops
                of the same number; -1 for compute ops */
} pp_op_t;

typedef enum pp_schedule_id {
  PP_GPIPE = 0,   /* all forwards, then all backwards */
  PP_1F1B,        /* PipeDream-flush / Megatron 1F1B */
  PP_INTERLEAVED, /* Megatron interleaved 1F1B with V virtual stages */
  PP_ZB_H1,       /* zero bubble H1 (Qi et al. 2023) within 1F1B's memory on
                     every stage: B and W split, W after the gradient's send
                     where no input is received, filling the cool-down */
  PP_NSCHEDULES
} pp_schedule_id_t;

typedef struct pp_sched {
  int id; /* pp_schedule_id_t */
  int stages, vstages, microbatches;
  int split_w;   /* PP_W ops present: PP_B computes only the input gradient */
  int* nops;     /* [stages] */
  pp_op_t** ops; /* [stages][nops[s]] */
} pp_sched_t;

/* "gpipe", "1f1b", "interleaved", "zb-h1"; NULL for an id out of range. */
const char* pp_sched_name(int id);
/* The id of a name (as above, any case; "zb" and "zbh1" too), or -1. */
int pp_sched_lookup(const char* name);
/* The names, comma-separated ("gpipe, 1f1b, interleaved, zb-h1"), for help
 * texts. */
const char* pp_sched_names(void);

/* Builds schedule `id` for S stages, V virtual stages per stage and M
 * micro-batches.  Constraints: S >= 1, M >= 1, V >= 1; V > 1 only for
 * interleaved, which also needs M % S == 0 when S > 1 (as Megatron).
 * 0, or -1 with a sentence in err (a bad combination, no memory); s is then
 * empty (pp_sched_free on it is harmless). */
int pp_sched_build(pp_sched_t* s, int id, int stages, int vstages, int microbatches, char* err,
                   size_t len);
void pp_sched_free(pp_sched_t* s);

/* What pp_sched_check measured. */
typedef struct pp_check {
  int peak_act[64]; /* per stage (first 64): the most (mb, chunk) whose
                       activations it holds at once: from its RECV_F (or its
                       F when it has none: virtual stage 0, or S = 1) to the
                       later of its B and W.  GPipe: M; 1F1B and ZB-H1:
                       min(M, S-s); interleaved: min(M*V, 2(S-s-1)+(V-1)S+1)
                       (M*V when M = S) */
  int max_peak;
} pp_check_t;

/* Checks a schedule: every (mb, chunk) of every stage has exactly one F, one
 * B and (split_w) one W; F after its RECV_F, B after its F and its RECV_B,
 * W after its B, SEND_F after F, SEND_B after B; peers are the neighbouring
 * virtual stages' stages; sends and receives match in FIFO order per
 * ordered pair (sender, receiver), activations and gradients in one queue
 * as above; and a simulation with rendezvous semantics (a group waits
 * until every op in it meets its matching op in a group its peer has
 * posted) runs to the end without deadlock.  Also refused: a send or
 * receive where the neighbouring virtual stage is on the same stage or
 * missing, W in a schedule without split_w, group numbers that do not go up.
 * 0 and out filled (out may be NULL), or -1 with the first violation in err
 * ("stage 1 op 7 (RECV_B 2.0 <-2 g5): ...", or "deadlock: stage ... waits
 * at op ... for stage ...'s op ..., which is at op ..."). */
int pp_sched_check(const pp_sched_t* s, pp_check_t* out, char* err, size_t len);

/* The bubble fraction by the schedule's formula, for forward,
 * backward and weight-gradient times tf, tb, tw per (mb, chunk) on every
 * stage (tb includes tw when the schedule does not split W):
 * GPipe and 1F1B (S-1)/(M+S-1), interleaved (S-1)/(V*M+S-1), ZB-H1
 * (S-1)(tf+tb) / (M(tf+tb+tw) + (S-1)(tf+tb)) with tb the B half alone.
 * ZB-H1's is the least any schedule reaches with at most S-s micro-batches
 * held on stage s (equal times, comm 0): the last stage then finishes each
 * W before its next F,
 * so its last B ends at (S-1)tf + M(tf+tb+tw) - tw at best, and that
 * gradient needs (S-1)tb to reach stage 0, which then runs a W.  (The
 * paper's ZB-H1 figure, (S-1)(tf+tb-tw) in place of (S-1)(tf+tb), lets
 * every stage hold up to S micro-batches waiting for their W.)  With
 * comm = 0 and equal times on every stage pp_sched_simulate gives exactly
 * these for every S <= 8, M <= 32, V <= 4 tested (ZB-H1 for tw <= tb;
 * above, e.g. tf = tb = 1, tw = 2, it stays between this and 1F1B's).
 * The fraction of a stage's time idle. */
double pp_sched_bubble_formula(const pp_sched_t* s, double tf, double tb, double tw);

/* Times for the simulation: per stage, seconds of one F, B and W of one
 * (mb, chunk) (B without W when split_w, B with W otherwise), and the
 * seconds a group of communication takes once both sides posted it. */
typedef struct pp_times {
  double f[64], b[64], w[64];
  double comm;
} pp_times_t;

/* One simulated op, for timelines. */
typedef struct pp_event {
  int stage, op; /* index into s->ops[stage] */
  double start, end;
} pp_event_t;

typedef struct pp_sim {
  double makespan;           /* the step's pipeline time */
  double busy[64], idle[64]; /* per stage: compute time, and makespan - busy */
  double bubble;             /* mean over stages of idle / makespan */
  pp_event_t* events;        /* every op of every stage when asked (caller frees) */
  int nevents;
} pp_sim_t;

/* Simulates the schedule with those times under the same rendezvous
 * semantics as pp_sched_check (a group starts when its stage reaches it and
 * ends `comm` seconds after the last of its ops' peers posted its match).
 * busy counts compute ops only; time in groups is idle.  with_events: fills
 * out->events (malloc'd, nevents = every op of every stage, stage after
 * stage in list order); a communication op's event runs from its group's
 * post to its own match + comm (the stage leaves the group at the latest of
 * its ops' ends).  At most 64 stages.  0 and out filled, or -1 (a schedule
 * pp_sched_check refuses, deadlock, no memory) with err. */
int pp_sched_simulate(const pp_sched_t* s, const pp_times_t* t, int with_events, pp_sim_t* out,
                      char* err, size_t len);

/* Writes a stage's list in a line per op ("F 3.0", "SEND_F 3.0 ->1 g7",
 * "RECV_B 2.1 <-2 g8": kind, mb.chunk, peer, group). */
void pp_sched_print(const pp_sched_t* s, int stage, void* file /* FILE* */);

/* Writes a simulation's events (pp_sched_simulate with with_events) as the
 * JSON that scripts/pp_timeline.py draws: {"schedule": name, "stages": S,
 * "vstages": V, "microbatches": M, "makespan": t, "bubble": b, "events":
 * [{"stage": s, "kind": "F", "mb": m, "chunk": c, "start": t0, "end": t1},
 * ...]}.  0, or -1 when sim has no events or the write failed. */
int pp_sched_write_json(const pp_sched_t* s, const pp_sim_t* sim, void* file /* FILE* */);

#endif
