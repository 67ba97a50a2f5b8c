/* moe_train's distributed layers: the workspace of a piece of the model on
 * a micro-batch (activations, routing, each chunk's plan and expert rows,
 * the backward's buffers), and the forward and backward of its layers
 * through moeccl's dispatch and combine on the EP communicator, pipelined
 * over --chunks on its host stream (on a device: the backend's
 * communication stream and events); the time split of a step. */
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
  int t0, t;        /* its first token and token count in the micro-batch */
  moecclMoePlan_t plan;
  size_t* recv;     /* [nexp] rows per local expert */
  int* counts;      /* the same as int */
  size_t rows;      /* their sum */
  float *x_rows, *y_rows; /* [cap][H] */
  float *a, *b, *h;       /* [cap][F] */
  float *dy, *da, *db;    /* split_w: the row gradients the weight half needs
                             ([cap][H], [cap][F], [cap][F]); NULL otherwise */
  int plan_layer, plan_ver; /* with a placement: the layer and version the plan has */
} dchunk_t;

typedef struct dlayer {
  float* probs;     /* [n][E] */
  int32_t* expert;  /* [n][K] */
  float* gate;      /* [n][K] */
  float* stats;     /* MOE_STATS_LEN(E): the router's local sums */
  float* stats_host; /* their host mirror, global after the forward */
  int32_t* expert_host; /* expert's host mirror (moecclMoeLayout's ids) */
  float* gate_host; /* gate as moeccl reads it (host): a mirror on a device */
  float* dlogits;   /* split_w: [n][E], kept for the weight half; NULL otherwise */
  int32_t* slot;    /* with a placement: [n][K] the slots the choices go to */
  dchunk_t* chunk;  /* [chunks] */
} dlayer_t;

/* The buffers of one piece of the model (the layers of one virtual stage)
 * on one micro-batch's rows: the activations it keeps from its forward to
 * its backward.  A stage holds as many as its schedule keeps in flight. */
typedef struct dws {
  int chunks, layers, split_w; /* capacity: layers of the largest piece */
  int l0, l1, n;    /* the piece and the rows of its last forward */
  double auxw;      /* that micro-batch's share of the batch, N_m / N: its
                       load-balancing loss's weight */
  long long g0;     /* the global index of its first row (copies of an expert
                       take tokens by index) */
  size_t rows;      /* expert rows computed since the caller zeroed it */
  size_t cap;       /* expert rows a chunk's buffers hold */
  size_t rows_cap;  /* rows (tokens) the piece holds */
  float* act;       /* [layers + 1][rows_cap][H]: input, each layer's output */
  dlayer_t* layer;  /* [layers] */
  float *grad, *grad_next, *tok; /* [rows_cap][H]; grad: dL/d the output on
                                    entry to the backward, dL/d the input after */
  float *dgate, *dlogits;        /* [n][K], [n][E] */
  const moe_backend_ops_t* mem;  /* whose memory the buffers are (NULL: the host's) */
  int device;                    /* mirrors apart from their buffers */
  float *dy_rows[2], *dx_rows[2]; /* [cap][H]; two with chunks, alternating */
  float *da, *db, *dh;           /* [cap][F] */
} dws_t;

typedef struct step_timing {
  double router, dispatch, experts, combine, backward, allreduce, optimizer;
  double bexch; /* of backward: in the EP exchanges (or waiting for them) */
} step_timing_t;

/* Seconds on the monotonic clock, once the ops queued on the device backend
 * given to train_time_device (if any) are done: a device computes
 * asynchronously, and a phase's time must be its work, not the time to
 * queue it (the next phase would be charged for it). */
double train_now(void);
void train_time_device(const moe_backend_ops_t* be);

/* Zeroed floats (at least one); sets *failed when there is no memory. */
float* falloc(size_t count, int* failed);
/* The same in backend mem's memory (NULL: the host's). */
float* balloc(const moe_backend_ops_t* mem, size_t count, int* failed);

/* The buffers of a piece of up to `layers` layers on up to ds->maxn rows, in
 * `chunks` chunks, with the weight half's buffers when split_w, in ds->be's
 * memory (with host mirrors when ds->device); 0 or -1 (no memory). */
int dws_alloc(dws_t* w, const moe_config_t* c, const dist_t* ds, int chunks, int layers,
              int split_w);
void dws_free(dws_t* w);
/* Every chunk's plan on the EP communicator; 0 or -1 (said). */
int dws_plans(dws_t* w, const moe_config_t* c, const dist_t* ds);
/* Activation i of the piece ([n][H]): 0 the input, l1 - l0 the output. */
float* act_of(const dws_t* w, size_t H, int i);

/* Forward of layers [l0, l1) on the n rows of act_of(w, H, 0); adds the
 * pieces' load-balancing losses (weighted by auxw) to *aux. */
int piece_forward(const moe_backend_ops_t* be, const moe_config_t* c, const dist_t* ds,
                  const moe_params_t* p, dws_t* w, int l0, int l1, int n, double auxw,
                  double* aux, step_timing_t* tm);
/* Backward of the piece's last forward, from w->grad = dL/d its output to
 * w->grad = dL/d its input; the weight gradients are added to g (this rank's
 * experts' slices and the router's, local sums) unless the piece was
 * allocated split_w, when piece_weights adds them later. */
int piece_backward(const moe_backend_ops_t* be, const moe_config_t* c, const dist_t* ds,
                   const moe_params_t* p, dws_t* w, moe_params_t* g, step_timing_t* tm);
/* The forward of layers [l0, l1) on wf (as piece_forward) and the backward
 * of wb's last forward (as piece_backward), two micro-batches on the same
 * layers, interleaved layer by layer so that each one's EP exchanges run on
 * the host stream under the other's compute (Megatron-Core's combined 1F1B):
 * F's dispatch under B's experts, B's dispatch-backward under F's experts,
 * F's combine under B's router, B's next combine-backward under F's
 * residual and next router.  One chunk only.  Computes exactly what the two
 * calls compute. */
int pieces_fused(const moe_backend_ops_t* be, const moe_config_t* c, const dist_t* ds,
                 const moe_params_t* p, dws_t* wf, int l0, int l1, int n, double auxw,
                 double* aux, dws_t* wb, moe_params_t* g, step_timing_t* tm);
/* split_w: the weight gradients of the piece's last backward, into g. */
void piece_weights(const moe_backend_ops_t* be, const moe_config_t* c, const dist_t* ds,
                   dws_t* w, moe_params_t* g, step_timing_t* tm);

#endif
