/* moe_train's distributed layer: the workspace of a rank (activations,
 * routing, each chunk's plan and expert rows, the backward's buffers), and
 * the forward and backward of every layer through moeccl's dispatch and
 * combine on the EP communicator, pipelined over --chunks on its host
 * stream; the time split of a step. */
#ifndef MOE_TRAIN_LAYER_H_
#define MOE_TRAIN_LAYER_H_

#include <stddef.h>
#include <stdint.h>

#include "backend.h"
#include "model.h"
#include "moeccl_moe.h"
#include "train_dist.h"

/* One chunk of a layer's tokens: its plan and expert rows. */
typedef struct dchunk {
  int t0, t;        /* its first local token and token count */
  moecclMoePlan_t plan;
  size_t* recv;     /* [nexp] rows per local expert */
  int* counts;      /* the same as int */
  size_t rows;      /* their sum */
  float *x_rows, *y_rows; /* [cap][H] */
  float *a, *b, *h;       /* [cap][F] */
} dchunk_t;

typedef struct dlayer {
  float* probs;     /* [n][E] */
  int32_t* expert;  /* [n][K] */
  float* gate;      /* [n][K] */
  float* stats;     /* MOE_STATS_LEN(E), global after the forward */
  dchunk_t* chunk;  /* [chunks] */
} dlayer_t;

typedef struct dws {
  int chunks;
  size_t cap; /* expert rows a chunk's buffers hold */
  float* act; /* [L + 1][n][H] */
  dlayer_t* layer;
  float *grad, *grad_next, *tok; /* [n][H] */
  float *dgate, *dlogits;        /* [n][K], [n][E] */
  float *dy_rows[2], *dx_rows[2]; /* [cap][H]; two with chunks, alternating */
  float *da, *db, *dh;           /* [cap][F] */
} dws_t;

typedef struct step_timing {
  double router, dispatch, experts, combine, backward, allreduce, optimizer;
  double bexch; /* of backward: in the EP exchanges (or waiting for them) */
} step_timing_t;

/* Seconds on the monotonic clock. */
double train_now(void);

/* Zeroed floats (at least one); sets *failed when there is no memory. */
float* falloc(size_t count, int* failed);

/* The buffers of a rank's layers in `chunks` chunks; 0 or -1 (no memory). */
int dws_alloc(dws_t* w, const moe_config_t* c, const dist_t* ds, int chunks);
void dws_free(dws_t* w, const moe_config_t* c);
/* Every chunk's plan on the EP communicator; 0 or -1 (said). */
int dws_plans(dws_t* w, const moe_config_t* c, const dist_t* ds);
/* The input of layer l ([n][H]); l = L: the model's output. */
float* act_of(const dws_t* w, const moe_config_t* c, const dist_t* ds, int l);

/* Forward of every layer on this rank's rows; the loss over the global batch.
 * base_sq: this rank's sum of (x - target)^2, summed into *baseline. */
int dist_forward(const moe_backend_ops_t* be, const moe_config_t* c, const dist_t* ds,
                 const moe_params_t* p, dws_t* w, const float* x, const float* target,
                 moe_loss_t* loss, double* baseline, step_timing_t* tm);
/* Backward of the last forward: g gets this rank's gradients (its experts'
 * slices and the router's, local sums), grad_x [n][H] dL/dx of its rows. */
int dist_backward(const moe_backend_ops_t* be, const moe_config_t* c, const dist_t* ds,
                  const moe_params_t* p, dws_t* w, const float* target, int tokens,
                  moe_params_t* g, float* grad_x, step_timing_t* tm);

#endif
