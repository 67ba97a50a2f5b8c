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
 * Sends and receives between one pair of stages match in order (FIFO per
 * ordered pair and direction), so the n-th send from a to b must name the
 * same (kind, mb, chunk) as the n-th receive at b from a.
 *
 * Everything here is pure data and arithmetic: no library calls.  The
 * driver (train_pipe.c) walks one stage's list; tests/test_pp_sched.c
 * checks every generated schedule with pp_sched_check; the planner prices
 * a schedule with pp_sched_simulate. */
#ifndef MOE_PP_SCHED_H_
#define MOE_PP_SCHED_H_

#include <stddef.h>

typedef enum pp_kind {
  PP_F = 0,   /* forward of (mb, chunk) */
  PP_B,       /* backward: the input gradient, and the weight gradient too
                 unless the schedule splits W (then only the input gradient) */
  PP_W,       /* weight gradient of (mb, chunk); only in split_w schedules */
  PP_SEND_F,  /* send (mb, chunk)'s output activations to peer */
  PP_RECV_F,  /* receive (mb, chunk)'s input activations from peer */
  PP_SEND_B,  /* send (mb, chunk)'s input gradient to peer */
  PP_RECV_B,  /* receive (mb, chunk)'s output gradient from peer */
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
  PP_GPIPE = 0,    /* all forwards, then all backwards */
  PP_1F1B,         /* PipeDream-flush / Megatron 1F1B */
  PP_INTERLEAVED,  /* Megatron interleaved 1F1B with V virtual stages */
  PP_ZB_H1,        /* zero bubble H1 (Qi et al. 2023): B and W split, W fills
                      the cool-down bubble, 1F1B's memory */
  PP_NSCHEDULES
} pp_schedule_id_t;

typedef struct pp_sched {
  int id; /* pp_schedule_id_t */
  int stages, vstages, microbatches;
  int split_w; /* PP_W ops present: PP_B computes only the input gradient */
  int* nops;   /* [stages] */
  pp_op_t** ops; /* [stages][nops[s]] */
} pp_sched_t;

/* "gpipe", "1f1b", "interleaved", "zb-h1"; NULL for an id out of range. */
const char* pp_sched_name(int id);
/* The id of a name (as above; "zb" and "zbh1" too), or -1. */
int pp_sched_lookup(const char* name);
/* The names, comma-separated, for help texts. */
const char* pp_sched_names(void);

/* Builds schedule `id` for S stages, V virtual stages per stage and M
 * micro-batches.  Constraints: S >= 1, M >= 1, V >= 1; V > 1 only for
 * interleaved, which also needs M % S == 0 when S > 1 (as Megatron).
 * 0, or -1 with a sentence in err (a bad combination, no memory). */
int pp_sched_build(pp_sched_t* s, int id, int stages, int vstages, int microbatches, char* err,
                   size_t len);
void pp_sched_free(pp_sched_t* s);

/* What pp_sched_check measured. */
typedef struct pp_check {
  int peak_act[64]; /* per stage (first 64): the most (mb, chunk) whose
                       activations it holds at once: from its RECV_F (or F
                       on virtual stage 0) to the later of its B and W */
  int max_peak;
} pp_check_t;

/* Checks a schedule: every (mb, chunk) of every stage has exactly one F, one
 * B and (split_w) one W; F after its RECV_F, B after its F and its RECV_B,
 * W after its B, SEND_F after F, SEND_B after B; peers are the neighbouring
 * virtual stages' stages; sends and receives match in FIFO order per pair
 * and direction; and a simulation with rendezvous semantics (a group waits
 * until every op in it meets its matching op in a group its peer has
 * posted) runs to the end without deadlock.  0, or -1 with the first
 * violation in err (stage, op index, what). */
int pp_sched_check(const pp_sched_t* s, pp_check_t* out, char* err, size_t len);

/* The bubble fraction of the schedule's textbook formula, for forward,
 * backward and weight-gradient times tf, tb, tw per (mb, chunk) on every
 * stage (tb includes tw when the schedule does not split W):
 * GPipe and 1F1B (S-1)/(M+S-1), interleaved (S-1)/(V*M+S-1), ZB-H1 its
 * paper's (S-1)(tf+tb-tw) / (M(tf+tb+tw) + (S-1)(tf+tb-tw)) with tb the B
 * half alone (floored at 0).
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
 * with_events: fills out->events (malloc'd).  0, or -1 (deadlock, no
 * memory) with err. */
int pp_sched_simulate(const pp_sched_t* s, const pp_times_t* t, int with_events, pp_sim_t* out,
                      char* err, size_t len);

/* Writes a stage's list in a line per op ("F 3.0", "SEND_F 3.0 ->1 g7"). */
void pp_sched_print(const pp_sched_t* s, int stage, void* file /* FILE* */);

#endif
