/* moe_train's ranks: the layout (EP group, experts and rows of a rank), its
 * three communicators, the failure report of a moeccl call, and the
 * collectives outside the layer (the gradients' sums, the dump's gathers). */
#ifndef MOE_TRAIN_DIST_H_
#define MOE_TRAIN_DIST_H_

#include "model.h"
#include "moeccl.h"
#include "placement.h"
#include "train_options.h"

typedef struct dist {
  int rank, nranks;      /* in the world communicator: rank = s * Q + q */
  int S, Q, s, q;        /* pipeline stages, ranks per stage, this rank's stage and index in it */
  int V;                 /* model chunks per stage (virtual stages: S * V) */
  int layers;            /* L */
  const int* layer_start; /* [S*V + 1]: virtual stage j holds layers [ls[j], ls[j + 1]) */
  int P, D, d, p;        /* EP size, DP size, this rank's group and index in it: q = d * P + p */
  int e0, nexp;          /* first local expert, E/P (the default blocks) */
  int nlocal;            /* experts a rank computes per layer: E/P, or (E + X)/P slots */
  placement_t* place;    /* [L] --rebalance-every or --replicas: each layer's placement on
                            the EP group (the same in every group d); NULL: the blocks */
  int* place_ver;        /* [L] bumped when a layer's placement changes */
  float* load;           /* [L][E] with a placement: the router's global counts per
                            expert summed over the step's micro-batches */
  int M;                 /* micro-batches: micro-batch m is the global rows
                            [m*N/M, (m+1)*N/M), split over the Q ranks of a stage */
  int *mb_n, *mb_off, *mb_g0; /* [M]: this rank's rows of micro-batch m, their
                                 offset in its arrays, the first one's global row */
  int n, maxn;           /* this rank's rows (all micro-batches), the most any
                            rank has of one micro-batch */
  moecclComm_t world;    /* every rank: the loss, the failure flag, --dump */
  moecclComm_t stage;    /* the Q ranks of stage s: statistics, router gradients */
  moecclComm_t ep;       /* EP group d of stage s: dispatch and combine */
  moecclComm_t dp;       /* the D ranks of stage s holding the same experts: their gradients */
  moecclComm_t pp;       /* the S ranks with this q, one per stage: activations and their
                            gradients (rank in it = stage) */
  moecclStream_t stream; /* --chunks > 1: the EP communicator's calls, queued */
  const moe_backend_ops_t* be; /* whose memory the layer's tensors are (NULL: the host's) */
  int device;            /* --device cuda: be's memory is not the host's (host mirrors for
                            what moeccl reads on the host) */
} dist_t;

/* The address moeccl is given for p, memory of ds->be (backend.h), once
 * the backend's queued ops are done (moeccl does not wait for its stream:
 * what they write is read, and what they read may be overwritten). */
static inline void* cptr(const dist_t* ds, const void* p) {
  if (!ds->be || !p) return (void*)p;
  if (ds->device) ds->be->sync();
  return ds->be->comm_ptr((void*)p);
}

/* The same without the wait, for a call whose order with the backend's ops
 * events give (backend.h: comm_stream, event_record, event_wait). */
static inline void* qptr(const dist_t* ds, const void* p) {
  if (!ds->be || !p) return (void*)p;
  return ds->be->comm_ptr((void*)p);
}

/* Whether the EP exchanges of --chunks run on the backend's communication
 * stream, ordered by events (a device backend), not on the host stream. */
static inline int dist_events(const dist_t* ds) {
  return ds->device && ds->be && ds->be->event_record && ds->be->comm_stream;
}

/* The first of rank r's rows when tokens split over nranks. */
int row_start(int r, int nranks, int tokens);

/* A failed moeccl call: says which, on which rank, and why; -1. */
int ccl_fail(const dist_t* ds, moecclComm_t comm, const char* what, moecclResult_t r);
#define CK(ds, comm, call)                                                                   \
  do {                                                                                       \
    moecclResult_t r_ = (call);                                                              \
    if (r_ != moecclSuccess) return ccl_fail(ds, comm, #call, r_);                          \
  } while (0)

/* The layout and communicators: world (made by the caller, then the
 * dist's), the stage by s, EP group by (s, d), replicas by (s, p), the
 * pipeline by q; 0 or -1. */
int dist_init(dist_t* ds, const train_options_t* o, int rank, int nranks, moecclComm_t world);
/* After a failure the communicators are aborted first, so that whatever is
 * still queued on the stream fails at once instead of waiting for peers. */
void dist_fini(dist_t* ds, int failed);

/* Whether any rank raised flag (a max over the world): 0 when none did, -1
 * when one did or the all-reduce failed (said). */
int dist_any(const dist_t* ds, int flag);

/* The logical expert of this rank's i-th local expert (slot) in layer l. */
static inline int local_expert(const dist_t* ds, int l, int i) {
  return ds->place ? ds->place[l].slot_expert[ds->p * ds->place[l].spr + i] : ds->e0 + i;
}

/* Whether this rank's stage holds layer l. */
int dist_has_layer(const dist_t* ds, int l);

/* This rank's rows of the global [N][H] array full (micro-batch by
 * micro-batch) into local [n][H], or back. */
void rows_take(const dist_t* ds, size_t H, const float* full, float* local);
void rows_put(const dist_t* ds, size_t H, const float* local, float* full);

/* The gradients' sums for the layers of this rank's stage: the router's over
 * the stage's ranks, each expert's over its D replicas (the ranks of the
 * stage with this EP index). */
int grad_allreduce(const moe_config_t* c, const dist_t* ds, moe_params_t* g);

/* Adam on what this rank holds: its stage's layers' routers and its
 * experts in them (every rank keeps whole arrays; the rest stays as it
 * was, unused here). */
struct moe_adam;
void adam_held(const moe_backend_ops_t* be, const moe_config_t* c, const dist_t* ds,
               struct moe_adam* adam, moe_params_t* p, const moe_params_t* g);

/* Sums on rank 0 the full shapes of --dump: every layer's gradients (from
 * the stage that holds it: the router's from its q = 0, each expert's from
 * its holder in group d = 0), out (the last stage's rows) and grad_x (the
 * first stage's), each taken once.  full_g, full_out, full_gx: rank 0's. */
int gather_for_dump(const moe_config_t* c, const dist_t* ds, int tokens, const moe_params_t* g,
                    const float* out, const float* grad_x, moe_params_t* full_g, float* full_out,
                    float* full_gx);

#endif
