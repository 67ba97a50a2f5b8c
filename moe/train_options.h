/* moe_train's command line: the options, their parsing, the shapes --load's
 * files give, and the rank layout R = P x D resolved from the flags. */
#ifndef MOE_TRAIN_OPTIONS_H_
#define MOE_TRAIN_OPTIONS_H_

#include "model.h"

typedef struct train_options {
  moe_config_t cfg;
  int tokens, steps, threads;
  float lr;
  unsigned long seed;
  const char *load, *dump, *json;
  int fresh;                    /* a new synthetic batch every step */
  int ranks, ep, dp, chunks;    /* -n, --ep, --dp (0: not given), --chunks */
  int pp, vstages, microbatches; /* --pp S, --vstages V, --microbatches M */
  int schedule;                 /* --schedule: a pp_schedule_id_t */
  const char* split;            /* --split: layers per virtual stage, "2,1,1" */
  int* layer_start;             /* [S*V + 1]: virtual stage j holds layers
                                   [layer_start[j], layer_start[j + 1]) */
  int overlap;                  /* --overlap: a forward and the backward of
                                   another micro-batch next to it overlapped */
  int rebalance_every, replicas; /* --rebalance-every N, --replicas X */
  float skew;                   /* --skew A: hot experts in the synthetic task */
  int plan;                     /* --plan: the planner picks the layout */
  int device;                   /* --device: TRAIN_DEVICE_HOST, _CUDA or _AUTO */
  int gemm_bf16;                /* --gemm bf16: the products' inputs in bfloat16 */
  const char* plan_json;        /* --plan-json FILE: every layout's prediction */
  const char* timeline;         /* --timeline FILE: the last step's ops as JSON */
  int set_layers, set_experts, set_hidden, set_ffn, set_tokens; /* given on the command line */
} train_options_t;

enum { TRAIN_DEVICE_HOST, TRAIN_DEVICE_CUDA, TRAIN_DEVICE_AUTO };

/* 0, 1 when help was asked, -1 on a bad argument. */
int parse_options(int argc, char** argv, train_options_t* o);
/* The shapes the flags left open, from the files of --load; 0 or -1. */
int infer_shapes(train_options_t* o);
/* R = S x P x D from the flags (and the launcher's R), and the layers'
 * split over the S x V virtual stages; 0, or -1 with a message. */
int resolve_layout(train_options_t* o, int launched);

#endif
