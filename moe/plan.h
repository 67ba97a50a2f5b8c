/* The planner: a resource model of one training step of moe/'s model on a
 * cluster, for every parallel layout, and a search that ranks the layouts
 * that fit in memory.
 *
 * Resources.  Memory per rank (weights, gradients, Adam's moments of the
 * parameters a rank holds; the activations its pipeline schedule keeps in
 * flight; the dispatch's row buffers).  Compute: GEMM FLOPs over a rate
 * measured by the GEMM's row count (skinny GEMMs are slower) plus the
 * elementwise work over a memory rate; on a host whose ranks outnumber its
 * cores, every rank runs at its share of a core all step.  Communication: moeccl's own schedules of the
 * dispatch and combine (an all-to-allv of the expected row counts), the
 * statistics' all-reduce, the pipeline's sends and the gradients'
 * all-reduces, priced by the library's cost model on the cluster
 * (moeccl_sim.h), not by a closed formula.  The step: the pipeline
 * schedule's own simulation (pp_sched.h) with each piece's compute and
 * exposed communication, then the gradients' all-reduce and Adam.
 *
 * Only moeccl's public headers are used. */
#ifndef MOE_PLAN_H_
#define MOE_PLAN_H_

#include <stddef.h>
#include <stdio.h>

#include "moeccl_sim.h"

/* The model: moe/model.h's MoE layers, and optionally a dense part per
 * layer (attention and the like, which moe/ does not have) given as FLOPs
 * and parameters per layer for at-scale shapes. */
typedef struct plan_model {
  int layers, experts, topk, hidden, ffn;
  long long tokens;       /* global batch, tokens per optimizer step */
  int act_bytes;          /* bytes of an activation element on the wire (4: float32) */
  double dense_flops_tok; /* forward FLOPs per token per layer outside the experts */
  double dense_params;    /* parameters per layer outside the experts and router */
} plan_model_t;

#define PLAN_RATES 8

/* What computes, and how fast. */
typedef struct plan_machine {
  moecclSim_t sim;  /* the cluster's links (owned by the caller) */
  int ranks;        /* R */
  int ranks_per_node;
  int cores;        /* CPU cores a node's ranks share (0: each rank has its own
                       accelerator: no sharing, communication off the compute) */
  double mem;       /* bytes per rank */
  int nrates;
  int rate_rows[PLAN_RATES];  /* GEMM rows m (of m x H times H x F) */
  double rate[PLAN_RATES];    /* FLOP/s at that m, interpolated between */
  double elem_rate; /* bytes/s of elementwise work (memory-bound) */
  double adam_rate; /* parameters/s Adam updates (0: 28 bytes each at elem_rate) */
  double call_s;    /* seconds a communication call costs beyond the cost model's
                       price (the host's issue and completion path), measured by
                       moe_train --plan, given to moe_plan (--call-us) */
  double call2_s;   /* the same for a call among 2 ranks (0: call_s); between 2
                       and all ranks, by log2 of the group's size */
  double stream_call_s; /* the same for an exchange queued on a host stream
                           and waited for, the ranks computing between calls
                           (0: call_s): what --chunks and --overlap pay */
  double peak;      /* FLOP/s the MFU is a share of */
  int param_bytes;  /* bytes of a weight */
  int mixed;        /* mixed precision with a distributed optimizer (Megatron's,
                       ZeRO-1): fp32 gradients (4 bytes), and the fp32 master
                       weights and Adam's two moments (12 bytes) sharded over the
                       D data-parallel replicas; 0: float32 throughout, the
                       gradient and both moments whole on every rank */
  const char* name; /* in words, for the report */
} plan_machine_t;

typedef struct plan_layout {
  int S, P, D, V, M, C;
  int schedule; /* pp_schedule_id_t */
  int overlap;  /* --overlap */
} plan_layout_t;

typedef struct plan_pred {
  plan_layout_t lay;
  int fits;
  double step;           /* seconds per step */
  double pipe;           /* the pipeline's makespan */
  double compute;        /* per rank: forward + backward compute of a step (busiest stage) */
  double comm;           /* per rank: EP exchanges of a step (busiest stage) */
  double comm_exposed;   /* of which not hidden under compute */
  double p2p;            /* the pipeline's sends of a step */
  double bubble;         /* the schedule's idle share (simulated) */
  double allreduce, optimizer;
  double mem_weights, mem_optim, mem_act, mem_buf, mem; /* bytes per rank */
  double flops;          /* model FLOPs of a step (all ranks) */
  double mfu;
  const char* algo;      /* the dispatch's all-to-all algorithm */
  int peak_act;          /* micro-batch pieces held at once (busiest stage) */
} plan_pred_t;

/* Predicts one layout; 0, or -1 with a sentence in err when the layout does
 * not apply (R != S P D, E % P, layers < S V, the schedule refuses, ...). */
int plan_predict(const plan_model_t* m, const plan_machine_t* mc, const plan_layout_t* lay,
                 plan_pred_t* out, char* err, size_t len);

/* Every layout of R ranks (S, P, D, V, M, C, schedule, overlap within the
 * limits of moe_train) predicted; *out (malloc'd) sorted: fitting first,
 * fastest first.  Returns how many, or -1. */
int plan_search(const plan_model_t* m, const plan_machine_t* mc, plan_pred_t** out);

/* A layout as moe_train's flags ("--pp 2 --ep 2 --dp 1 --microbatches 4
 * --schedule 1f1b --chunks 1"). */
const char* plan_flags(const plan_layout_t* lay, char* buf, size_t len);

/* The ranking (top rows), the winner's time and memory split and why the
 * runner-up lost. */
void plan_report(FILE* f, const plan_model_t* m, const plan_machine_t* mc, const plan_pred_t* p,
                 int n, int top);

/* The host probe: the rates of the model's layers by rows per expert at
 * H x F (layers of experts each: what one rank of the plan holds; going
 * round pieces of step_tokens tokens, a rank's in a step), the elementwise
 * rate, Adam's, from the moe/ backend (seconds of work). */
struct moe_backend_ops;
void plan_probe(const struct moe_backend_ops* be, int hidden, int ffn, int layers, int experts,
                int step_tokens, plan_machine_t* mc);

#endif
