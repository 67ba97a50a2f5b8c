/* moe_train's ranks: the layout (EP group, experts and rows of a rank), its
 * three communicators, the failure report of a moeccl call, and the
 * collectives outside the layer (the gradients' sums, the dump's gathers). */
#ifndef MOE_TRAIN_DIST_H_
#define MOE_TRAIN_DIST_H_

#include "model.h"
#include "moeccl.h"
#include "train_options.h"

typedef struct dist {
  int rank, nranks;      /* in the world communicator */
  int P, D, d, p;        /* EP size, DP size, this rank's group and index in it */
  int e0, nexp;          /* first local expert, E/P */
  int n0, n, maxn;       /* first global row, local rows, the most any rank has */
  moecclComm_t world;    /* every rank: statistics, loss, router gradients */
  moecclComm_t ep;       /* EP group d: dispatch and combine */
  moecclComm_t dp;       /* the D ranks holding the same experts: expert gradients */
  moecclStream_t stream; /* --chunks > 1: the EP communicator's calls, queued */
} dist_t;

/* The first of rank r's rows when tokens split over nranks. */
int row_start(int r, int nranks, int tokens);

/* A failed moeccl call: says which, on which rank, and why; -1. */
int ccl_fail(const dist_t* ds, moecclComm_t comm, const char* what, moecclResult_t r);
#define CK(ds, comm, call)                                                                   \
  do {                                                                                       \
    moecclResult_t r_ = (call);                                                              \
    if (r_ != moecclSuccess) return ccl_fail(ds, comm, #call, r_);                          \
  } while (0)

/* Communicators: world from the id, EP group by d, replicas by p; 0 or -1. */
int dist_init(dist_t* ds, const train_options_t* o, int rank, int nranks, moecclUniqueId id);
/* After a failure the communicators are aborted first, so that whatever is
 * still queued on the stream fails at once instead of waiting for peers. */
void dist_fini(dist_t* ds, int failed);

/* Whether any rank raised flag (a max over the world): 0 when none did, -1
 * when one did or the all-reduce failed (said). */
int dist_any(const dist_t* ds, int flag);

/* The gradients' sums: the router's over every rank, each expert's over
 * its D replicas (the ranks with this EP index). */
int grad_allreduce(const moe_config_t* c, const dist_t* ds, moe_params_t* g);

/* Gathers the full shapes on rank 0: every expert's gradients (in place,
 * over the EP group: rank p's slice is block p) and the rows of out and
 * grad_x (padded to maxn rows per rank, compacted on rank 0). */
int gather_for_dump(const moe_config_t* c, const dist_t* ds, int tokens, moe_params_t* g,
                    const float* out, const float* grad_x, float* full_out, float* full_gx);

#endif
