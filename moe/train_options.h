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
  int set_layers, set_experts, set_hidden, set_ffn, set_tokens; /* given on the command line */
} train_options_t;

/* 0, 1 when help was asked, -1 on a bad argument. */
int parse_options(int argc, char** argv, train_options_t* o);
/* The shapes the flags left open, from the files of --load; 0 or -1. */
int infer_shapes(train_options_t* o);
/* R, P and D from the flags (and the launcher's R); 0, or -1 with a message. */
int resolve_layout(train_options_t* o, int launched);

#endif
