/* moe_train's adaptive expert placement on the wire: moving experts (their
 * weights and Adam moments) when a layer's placement changes, and summing
 * the expert gradients over an expert's copies and the data-parallel
 * replicas.  The placements themselves, the routing to copies and the
 * periodic rebalance from the router's counts are in placement.h.
 *
 * Every rank holds full-size parameter, gradient and moment arrays
 * (moe_params_t, moe_adam_t); only the experts a rank holds are current
 * there, at the logical expert's offset.  The placement is the same in
 * every EP group d, so rank (d, p) holds the same experts in every d.
 * Both calls are collective: every rank of the world calls them with the
 * same arguments, between steps (nothing queued on the EP communicator's
 * host stream).  They use only dist_t's rank, P, D, p, d, ep and dp. */
#ifndef MOE_TRAIN_PLACE_H_
#define MOE_TRAIN_PLACE_H_

#include "adam.h"
#include "model.h"
#include "placement.h"
#include "train_dist.h"

/* Layer `layer`'s move from old to nw (same E = c->experts and P = ds->P;
 * X may differ): every rank that holds an expert in nw and did not in old
 * receives its w1, w3 and w2 from the old holder placement_moves chose,
 * and with them the expert's Adam first and second moments (adam NULL:
 * weights only); grouped sends and receives on the EP communicator.  0,
 * or -1 (said on stderr). */
int place_migrate(const moe_config_t* c, const dist_t* ds, int layer, const placement_t* old,
                  const placement_t* nw, moe_params_t* p, moe_adam_t* adam);

/* After the backward of layer `layer` under placement pl: this rank has
 * accumulated its slots' gradients in g at their logical experts'
 * offsets.  Afterwards every holder of expert e has in g the sum of e's
 * gradients over its copies in the EP group and over the D replicas, the
 * same bits on every holder.  The rank's held experts are packed into one
 * buffer ([w1 of each][w3 of each][w2 of each]) and summed over the DP
 * communicator (one all-reduce per tensor, each of the count
 * grad_allreduce uses for that tensor, so that with the default placement
 * and no replicas the result is bit for bit grad_allreduce's for any D);
 * then the holders of each replicated expert exchange their sums on the EP
 * communicator and add them in rank order.  The router's gradient is not
 * touched (grad_allreduce sums it).  0, or -1 (said). */
int place_sync_grads(const moe_config_t* c, const dist_t* ds, int layer, const placement_t* pl,
                     moe_params_t* g);

#endif
