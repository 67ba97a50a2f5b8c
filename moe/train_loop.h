/* One rank's run of moe_train, as a forked rank, an MPI rank or the only
 * one. */
#ifndef MOE_TRAIN_LOOP_H_
#define MOE_TRAIN_LOOP_H_

#include "moeccl.h"
#include "train_options.h"

/* Rank `rank` of nranks, on the communicator of id; 0, 1 on failure. */
int train_rank(const train_options_t* o, int rank, int nranks, moecclUniqueId id);

#endif
