/* moe_train --plan: the planner (plan.h) on the ranks moe_train runs, with
 * their communicator's topology and costs and this host's probed compute;
 * rank 0 plans and prints, every rank takes the winner's layout. */
#ifndef MOE_TRAIN_PLAN_H_
#define MOE_TRAIN_PLAN_H_

#include "moeccl.h"
#include "train_options.h"

/* Collective over world.  Replaces o's layout (pp, ep, dp, microbatches,
 * schedule, vstages, chunks, overlap, the layers' split) with the plan's
 * winner; 0, or -1 (said). */
int train_plan(train_options_t* o, moecclComm_t world, int rank, int nranks);

#endif
