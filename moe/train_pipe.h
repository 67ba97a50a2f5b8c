/* moe_train's pipeline: one step of a rank's stage is its list of the
 * schedule's ops (moe/pp_sched.h), walked in order: forwards and backwards
 * of its model pieces on micro-batches (train_layer.h), the weight halves of
 * the schedules that split them, and the activations and their gradients
 * sent to and received from the neighbouring stages with moecclSend and
 * moecclRecv in groups on the pipeline communicator.  A piece's buffers (a
 * "slot") are taken when its micro-batch arrives and given back after its
 * last op, so a stage holds what its schedule keeps in flight.  Without
 * --pp, --microbatches and --vstages the schedule is one forward and one
 * backward of the whole model on the rank's rows, as before pipelines. */
#ifndef MOE_TRAIN_PIPE_H_
#define MOE_TRAIN_PIPE_H_

#include <stdio.h>

#include "backend.h"
#include "model.h"
#include "pp_sched.h"
#include "train_dist.h"
#include "train_layer.h"
#include "train_options.h"

typedef struct pipe_slot {
  int used, mb, chunk;
  dws_t w;
} pipe_slot_t;

/* Measured on this rank over the steps since pipe_stats_reset. */
typedef struct pipe_stats {
  int steps;
  double step;           /* seconds in pipe_step */
  double f, b, w;        /* seconds in forwards, backwards, weight halves */
  int nf, nb, nw;        /* how many */
  double comm;           /* seconds in the pipeline's send/receive groups */
  double fused;          /* seconds in overlapped forward + backward pairs */
  int nfused;
  double xf, xb, xfused; /* EP exchanges not hidden (time split's dispatch, combine
                            and backward exchanges) in forwards, backwards, pairs */
} pipe_stats_t;

typedef struct pipe {
  pp_sched_t sc;
  pp_check_t check;   /* the schedule's check: peak activations per stage */
  int s, nops;
  const pp_op_t* ops; /* this stage's */
  int* last;          /* [nops]: the op is the last of its (mb, chunk) here */
  pipe_slot_t** slot;
  int nslots, peak;   /* slots allocated (the most held at once) */
  int chunks, maxl, tokens, overlap;
  size_t rows;        /* expert rows this rank computed in the last step's forwards */
  pipe_stats_t st;
  double* ev;         /* [nops][2]: the last step's start and end of each op,
                         seconds from the step's start */
} pipe_t;

/* The schedule of o for this rank's stage; 0, or -1 (said). */
int pipe_init(pipe_t* pp, const train_options_t* o, const dist_t* ds);
void pipe_free(pipe_t* pp);

/* One step of the global batch on this rank's stage.  x, target: this
 * rank's rows of every micro-batch ([ds->n][H], train_dist.h's order); g
 * is zeroed and gets this rank's local gradient sums; out (the last stage:
 * the model's output) and grad_x (the first stage: dL/dx) get its rows.
 * sums[4] gets this rank's share of the loss: the squared error, the token
 * count and the baseline's squared error (the last stage) and the
 * load-balancing loss (each stage's q = 0). */
int pipe_step(pipe_t* pp, const moe_backend_ops_t* be, const moe_config_t* c, const dist_t* ds,
              const moe_params_t* p, const float* x, const float* target, moe_params_t* g,
              float* out, float* grad_x, double sums[4], step_timing_t* tm);

void pipe_stats_reset(pipe_t* pp);

/* Rank 0's report of the pipeline, after the steps: the schedule, its
 * bubble by its formula, simulated with the measured op times, and measured
 * per stage (the time a stage is not computing); the peak activations; and
 * with --timeline the last step's ops as JSON.  Collective over the world. */
int pipe_report(pipe_t* pp, const train_options_t* o, const dist_t* ds, FILE* json);

#endif
