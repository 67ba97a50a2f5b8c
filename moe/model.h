/* The MoE model of moe/: L residual layers, each a top-K router over E
 * SwiGLU experts, float32, on one process's tokens.
 *
 *   layer l:  y = x + sum_{j<K} w_j * FFN_{e_j}(x)
 *             logits = x @ Wg_l                  Wg_l: [H][E]
 *             e_0..e_{K-1}: the K largest logits, ties to the lower expert
 *             w = softmax over those K logits
 *             FFN_e(x) = (silu(x @ W1_l[e]) * (x @ W3_l[e])) @ W2_l[e]
 *                                                W1, W3: [E][H][F], W2: [E][F][H]
 *   loss   = mean over N tokens and H features of (x_L - target)^2
 *            + aux * sum_l E * sum_e f_e * P_e
 *            f_e = #(token, j) with e_j = e, over N*K;  P_e = mean over the
 *            tokens of softmax(logits)_e (all E)
 *
 * N and the statistics f_e, P_e are over the global batch: every function
 * below works on a local part of it, and the sums that must be global pass
 * through a moe_sum_hook_t that a multi-rank driver makes an all-reduce.
 *
 * The per-layer pieces are separate so that a driver can put moeccl's
 * dispatch and combine between them: the router works on a set of tokens,
 * the experts on expert-major rows (the rows of expert e contiguous, counts
 * per expert), and the local plan below is the one-process stand-in for
 * dispatch/combine.  Gradient outputs are accumulated (+=), never
 * overwritten, so a caller can split tokens into chunks; the caller zeroes.
 * Only the public headers of moeccl are used here. */
#ifndef MOE_MODEL_H_
#define MOE_MODEL_H_

#include <stddef.h>
#include <stdint.h>

#include "backend.h"

typedef struct moe_config {
  int layers;  /* L >= 1 */
  int experts; /* E >= 1 */
  int topk;    /* 1 <= K <= E */
  int hidden;  /* H >= 1 */
  int ffn;     /* F >= 1 */
  float aux;   /* weight of the load-balancing loss, >= 0 */
} moe_config_t;

/* 0 when cfg is usable, else -1 with a sentence naming the field in err. */
int moe_config_check(const moe_config_t* cfg, char* err, size_t len);

/* --- parameters (and gradients: the same layout) --------------------------- */

typedef struct moe_layer_params {
  float* wg; /* [H][E] */
  float* w1; /* [E][H][F] */
  float* w3; /* [E][H][F] */
  float* w2; /* [E][F][H] */
} moe_layer_params_t;

typedef struct moe_params {
  moe_config_t cfg;
  size_t count;              /* floats in data */
  float* data;               /* every parameter, layer by layer: wg, w1, w3, w2 */
  moe_layer_params_t* layer; /* [L], pointers into data */
  const moe_backend_ops_t* mem; /* whose memory data is (NULL: the host's) */
} moe_params_t;

size_t moe_layer_param_count(const moe_config_t* cfg);
/* Allocates zeroed parameters in host memory; 0 or -1 (no memory, or a bad
 * cfg). */
int moe_params_alloc(moe_params_t* p, const moe_config_t* cfg);
/* The same in backend mem's memory (NULL: the host's). */
int moe_params_alloc_on(moe_params_t* p, const moe_config_t* cfg, const moe_backend_ops_t* mem);
void moe_params_free(moe_params_t* p);
/* Normal init: Wg, W1, W3 with std 1/sqrt(H), W2 with std 1/sqrt(F)
 * (drawn on the host, then copied to p's memory).  0, or -1 without host
 * memory for the draw. */
int moe_params_init_random(moe_params_t* p, uint64_t seed);
/* All p->count parameters between host memory and p's memory. */
void moe_params_to_host(const moe_params_t* p, float* host);
void moe_params_to_device(moe_params_t* p, const float* host);

/* A deterministic generator for inits and synthetic batches (splitmix64). */
typedef struct moe_rng {
  uint64_t state;
} moe_rng_t;
void moe_rng_seed(moe_rng_t* rng, uint64_t seed);
double moe_rng_uniform(moe_rng_t* rng); /* [0, 1) */
void moe_rng_normal(moe_rng_t* rng, float* dst, size_t count, float std);

/* --- the global sums --------------------------------------------------------- */

/* Sums count floats in place over every rank that holds part of the global
 * batch (an all-reduce with sum); on one process, identity.  Called in the
 * forward pass with the same counts in the same order on every rank.
 * float32 because the values are float32 sums (an expert's count is exact
 * up to 2^24 (token, j) pairs in the global batch).  Returns 0, or non-zero
 * to abort the pass. */
typedef struct moe_sum_hook {
  int (*sum)(void* ctx, float* values, int count);
  void* ctx;
} moe_sum_hook_t;

/* The identity hook of one process. */
extern const moe_sum_hook_t moe_sum_local;

/* A layer's router statistics: [0, E) the counts of (token, j) per expert,
 * [E, 2E) the sums over tokens of softmax(logits)_e, [2E] the token count;
 * local sums until the hook has summed them, global after. */
#define MOE_STATS_LEN(experts) (2 * (experts) + 1)

/* The load-balancing loss of one layer from global statistics:
 * aux * E * sum_e f_e P_e. */
double moe_stats_aux_loss(const moe_config_t* cfg, const float* stats);

/* --- router: a set of n tokens ---------------------------------------------- */

/* From x [n][H]: probs [n][E] = softmax of the logits over all E, expert
 * [n][K] the chosen ids in order (largest logit first, ties to the lower
 * id), gate [n][K] the softmax over the chosen logits; adds this set's
 * local statistics to stats (MOE_STATS_LEN(E) floats, zeroed by the
 * caller). */
void moe_router_forward(const moe_backend_ops_t* be, const moe_config_t* cfg, const float* wg,
                        const float* x, int n, float* probs, int32_t* expert, float* gate,
                        float* stats);

/* Backward of the router and the aux loss: from dgate [n][K] = dL/dgate and
 * the global stats (host memory: a mirror), adds dL/dWg to dwg [H][E] and
 * dL/dx to dx [n][H].
 * dlogits [n][E] is scratch. */
void moe_router_backward(const moe_backend_ops_t* be, const moe_config_t* cfg, const float* wg,
                         const float* x, int n, const float* probs, const int32_t* expert,
                         const float* gate, const float* dgate, const float* stats, float* dlogits,
                         float* dwg, float* dx);

/* The same in two halves, for pipeline schedules that run the weight
 * gradient later (zero-bubble): the input half writes dlogits [n][E] (kept
 * for the weight half) and adds dL/dx to dx; the weight half adds
 * x^T dlogits to dwg.  Together they compute exactly moe_router_backward. */
void moe_router_backward_input(const moe_backend_ops_t* be, const moe_config_t* cfg,
                               const float* wg, int n, const float* probs, const int32_t* expert,
                               const float* gate, const float* dgate, const float* stats,
                               float* dlogits, float* dx);
void moe_router_backward_weight(const moe_backend_ops_t* be, const moe_config_t* cfg,
                                const float* x, int n, const float* dlogits, float* dwg);

/* --- local dispatch / combine (the one-process stand-in for moeccl's) -------- */

typedef struct moe_local_plan {
  int experts, topk;
  int tokens;        /* n of the last build */
  int rows;          /* expert-major rows: the (token, j) with an expert */
  int capacity;      /* tokens the arrays below hold */
  int* counts;       /* [E] rows per expert */
  int* offsets;      /* [E + 1] first row of each expert */
  int32_t* row_of;   /* [n][K] the row of (token, j), -1 when expert = -1 */
  int32_t* token_of; /* [n * K] the token of each row */
  /* The same two in the memory of the backend the plan was allocated on
   * (what the ops read); row_of and token_of themselves without one. */
  int32_t *d_row_of, *d_token_of;
  const moe_backend_ops_t* mem;
} moe_local_plan_t;

/* Host memory (the counting sort's), and the ops' copies in mem's memory
 * (NULL: none, the ops read the host arrays). */
int moe_local_plan_alloc(moe_local_plan_t* plan, int experts, int topk, int max_tokens);
int moe_local_plan_alloc_on(moe_local_plan_t* plan, int experts, int topk, int max_tokens,
                            const moe_backend_ops_t* mem);
void moe_local_plan_free(moe_local_plan_t* plan);
/* Rows ordered by expert, then by (token, j); ids of -1 get no row.  expert
 * is host memory (a mirror of the router's); the ops' copies follow. */
void moe_local_plan_build(moe_local_plan_t* plan, const int32_t* expert, int n);
/* rows[r] = x[token_of[r]]  (rows: [plan->rows][H]) */
void moe_local_dispatch(const moe_backend_ops_t* be, const moe_local_plan_t* plan, int hidden,
                        const float* x, float* rows);
/* out[t] += sum_j gate[t][j] * y_rows[row_of[t][j]] */
void moe_local_combine(const moe_backend_ops_t* be, const moe_local_plan_t* plan, int hidden,
                       const float* gate, const float* y_rows, float* out);
/* From dout [n][H]: dy_rows[row(t,j)] = gate[t][j] * dout[t] (overwritten)
 * and dgate[t][j] = dout[t] . y_rows[row(t,j)] (overwritten; 0 without a row). */
void moe_local_combine_backward(const moe_backend_ops_t* be, const moe_local_plan_t* plan,
                                int hidden, const float* gate, const float* dout,
                                const float* y_rows, float* dy_rows, float* dgate);
/* dx[token_of[r]] += dx_rows[r] */
void moe_local_dispatch_backward(const moe_backend_ops_t* be, const moe_local_plan_t* plan,
                                 int hidden, const float* dx_rows, float* dx);

/* --- experts: expert-major rows ---------------------------------------------- */

/* For experts 0..nexp-1 of the arrays given (a driver passes the first of
 * its local experts: w1 + e0 * H * F, ...), counts[e] rows each, contiguous
 * in x_rows [sum counts][H]: a = x W1[e], b = x W3[e], h = silu(a) * b
 * ([rows][F] each, kept for the backward) and y_rows = h W2[e] [rows][H]. */
void moe_experts_forward(const moe_backend_ops_t* be, const moe_config_t* cfg, int nexp,
                         const int* counts, const float* w1, const float* w3, const float* w2,
                         const float* x_rows, float* a, float* b, float* h, float* y_rows);

/* From dy_rows: adds dW1, dW3, dW2 into dw1, dw3, dw2 (same offsets as the
 * weights) and writes dx_rows [rows][H]; da, db, dh [rows][F] are scratch. */
void moe_experts_backward(const moe_backend_ops_t* be, const moe_config_t* cfg, int nexp,
                          const int* counts, const float* w1, const float* w3, const float* w2,
                          const float* x_rows, const float* a, const float* b, const float* h,
                          const float* dy_rows, float* dw1, float* dw3, float* dw2, float* dx_rows,
                          float* da, float* db, float* dh);

/* The same in two halves: the input half writes dx_rows and keeps da, db
 * (dh is scratch); the weight half adds dW2 = h^T dy, dW1 = x^T da,
 * dW3 = x^T db from them.  Together: exactly moe_experts_backward. */
void moe_experts_backward_input(const moe_backend_ops_t* be, const moe_config_t* cfg, int nexp,
                                const int* counts, const float* w1, const float* w3,
                                const float* w2, const float* a, const float* b,
                                const float* dy_rows, float* dx_rows, float* da, float* db,
                                float* dh);
void moe_experts_backward_weight(const moe_backend_ops_t* be, const moe_config_t* cfg, int nexp,
                                 const int* counts, const float* x_rows, const float* h,
                                 const float* dy_rows, const float* da, const float* db,
                                 float* dw1, float* dw3, float* dw2);

/* --- the whole model on one process's tokens -------------------------------- */

typedef struct moe_layer_cache moe_layer_cache_t;

/* Activations and scratch for up to max_tokens tokens, in the memory of a
 * backend (mem; NULL: the host's). */
typedef struct moe_workspace {
  moe_config_t cfg;
  const moe_backend_ops_t* mem;
  int capacity; /* max_tokens */
  int tokens;   /* n of the last forward */
  float global_tokens;
  float* act; /* [L + 1][n][H]: x_0 (the input) .. x_L (the output) */
  moe_layer_cache_t* layer;
  float* grad; /* [n][H] dL/dx of the current layer's output */
  float* grad_next;
  float *dgate, *dlogits, *dy_rows, *dx_rows, *da, *db, *dh;
} moe_workspace_t;

typedef struct moe_loss {
  double mse;   /* mean over the global N * H */
  double aux;   /* aux * sum_l E * sum_e f_e P_e */
  double total; /* mse + aux */
} moe_loss_t;

int moe_workspace_alloc(moe_workspace_t* ws, const moe_config_t* cfg, int max_tokens);
int moe_workspace_alloc_on(moe_workspace_t* ws, const moe_config_t* cfg, int max_tokens,
                           const moe_backend_ops_t* mem);
void moe_workspace_free(moe_workspace_t* ws);

/* Time spent in each part of the last forward/backward, seconds. */
typedef struct moe_timing {
  double router, dispatch, experts, combine, backward;
} moe_timing_t;

/* Forward of every layer on x [n][H] (n <= capacity) and the loss against
 * target [n][H] (both in the workspace's memory; be computes, its memory
 * the workspace's and the parameters'); hook sums the statistics (host
 * mirrors) and the squared error (NULL: moe_sum_local).  timing may be NULL.  0, or -1 when the hook failed. */
int moe_model_forward(const moe_backend_ops_t* be, const moe_params_t* p, moe_workspace_t* ws,
                      const float* x, const float* target, int n, const moe_sum_hook_t* hook,
                      moe_loss_t* loss, moe_timing_t* timing);

/* The output x_L [n][H] of the last forward (the workspace's memory). */
const float* moe_model_output(const moe_workspace_t* ws);

/* Backward of the last forward: overwrites grads (same config as p) with
 * dL/dparameters of the local tokens, and grad_x [n][H] with dL/dx unless
 * NULL.  A multi-rank driver all-reduces grads afterwards. */
void moe_model_backward(const moe_backend_ops_t* be, const moe_params_t* p, moe_workspace_t* ws,
                        const float* target, moe_params_t* grads, float* grad_x,
                        moe_timing_t* timing);

#endif
