/*
 * moeccl_moe.h - Mixture-of-Experts dispatch and combine on an
 * expert-parallel (EP) communicator.  See moecclMoe(3).
 *
 * A plan holds the expert placement (expert -> rank of comm).  Each step,
 * moecclMoeLayout gives it this rank's router output, the top-k expert ids
 * of its T tokens, and exchanges the counts among the ranks; the plan then
 * drives every data call of the step, forward and backward:
 *
 *   moecclMoeDispatch          tokens [T][H] -> expert rows [R][H]
 *   moecclMoeCombine           expert rows [R][H] -> tokens [T][H], weighted
 *   moecclMoeDispatchBackward  = combine without weights (gradient of dispatch)
 *   moecclMoeCombineBackward   = dispatch of the output gradient, weighted,
 *                                plus the gradient of the gate weights
 *
 * A token's row crosses to a rank once, however many of its k experts that
 * rank holds; the receiver expands it into expert-major rows: the rows of
 * its first local expert (ascending expert ids), then the second's, ...,
 * each expert's rows ordered by source rank, then token, then slot, with no
 * padding.  Combine forms on each expert rank the weighted sum over the
 * experts it holds, so one row per (token, rank) crosses back, and the token
 * side sums those rows, ranks ascending.
 *
 * Like any collective, every rank passes the same hidden and datatype.
 * Every data call takes a stream: NULL runs it now; a host stream
 * (moecclHostStreamCreate) or a device stream queues it and returns.
 * Buffers must stay alive and unchanged until the stream is synchronized;
 * moecclMoeLayout and moecclMoePlanDestroy must not run while the plan's
 * calls are queued (moecclMoeLayout waits for the operations issued before
 * it on the communicator, so a layout issued after them is safe).  Token
 * and row buffers may be device memory (moecclMemAllocDevice); beside them
 * the gate weights may be too, and the combine backward's expert rows and
 * gate gradients are both device memory (its dots then run on the stream)
 * or both host memory (the host path).  The ids are read on the host.
 *
 * Across nodes the tuner picks per call between this flat path and a
 * hierarchical one that sends a token across the network once per
 * destination node and fans it out there (moecclMoe(3)); a chunked
 * pipeline (dispatch, expert compute and combine of different chunks
 * overlapping) is one plan per chunk on host streams, as moe_train
 * --chunks does.
 */
#ifndef MOECCL_MOE_H_
#define MOECCL_MOE_H_

#include <stddef.h>
#include <stdint.h>

#include "moeccl.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Opaque plan handle. */
typedef struct moecclMoePlan* moecclMoePlan_t;

/* Local: a plan for numExperts experts on comm.  placement[e] is the rank
 * holding expert e (every entry in [0, nranks); the same table on every
 * rank); NULL places contiguous blocks: rank r holds experts
 * [r*E/nranks, (r+1)*E/nranks) (E/nranks each when nranks divides E). */
moecclResult_t moecclMoePlanCreate(moecclMoePlan_t* plan, int numExperts, const int* placement,
                                   moecclComm_t comm);
/* Local: frees the plan (after its queued calls finished). */
moecclResult_t moecclMoePlanDestroy(moecclMoePlan_t plan);
/* The number of experts this rank holds and (localExperts, if not NULL,
 * with room for that many) their ids, ascending: the order of the rows a
 * dispatch delivers. */
moecclResult_t moecclMoeLocalExperts(moecclMoePlan_t plan, int* numLocalExperts, int* localExperts);

/* Collective over the plan's communicator, synchronous (not inside a
 * group).  topkIdx is [numTokens][topk] int32 expert ids of this rank's
 * tokens, -1 for no expert; numTokens may be 0 (topkIdx may then be NULL)
 * and differ between ranks; topk must be the same on every rank, as must
 * capacity.  capacity > 0 keeps at most capacity rows per expert, the first
 * in expert-major order (source rank, token, slot) -- Switch/GShard's drop
 * by position, deterministic -- and drops the rest: a dropped (token, slot)
 * is not sent, contributes nothing to combine and gets a zero gate
 * gradient.  On return recvCounts[i] (if not NULL; numLocalExperts entries)
 * holds the rows local expert i receives, and *numDropped (if not NULL) how
 * many of this rank's (token, slot) assignments were dropped.  O(T*k + E)
 * work; the plan's memory is reused by later layouts no larger than it. */
moecclResult_t moecclMoeLayout(moecclMoePlan_t plan, const int32_t* topkIdx, size_t numTokens,
                               int topk, size_t capacity, size_t* recvCounts, size_t* numDropped);

/* tokens [T][hidden] -> expertRows [R][hidden], R = the sum of recvCounts;
 * expertRowsCap is the rows expertRows holds (>= R).  Any datatype. */
moecclResult_t moecclMoeDispatch(moecclMoePlan_t plan, const void* tokens, void* expertRows,
                                 size_t expertRowsCap, size_t hidden, moecclDataType_t datatype,
                                 moecclStream_t stream);
/* expertRows [R][hidden] -> tokens [T][hidden]: token t gets the sum over
 * its slots j of weights[t][j] * (the row of (t, j)); weights is float32
 * [T][topk] (NULL only when T is 0).  Dropped and -1 slots add nothing; a
 * token with none gets a zero row.  float32, float16 or bfloat16 rows,
 * summed in float32: on each expert rank over its experts in slot order,
 * rounded to the datatype once; then on the token side over the ranks,
 * ascending, rounded once. */
moecclResult_t moecclMoeCombine(moecclMoePlan_t plan, const void* expertRows, size_t expertRowsCap,
                                const float* weights, void* tokens, size_t hidden,
                                moecclDataType_t datatype, moecclStream_t stream);
/* The gradient of moecclMoeDispatch: the gradient of its expert rows back
 * to gradTokens [T][hidden], summed per token (moecclMoeCombine without
 * weights). */
moecclResult_t moecclMoeDispatchBackward(moecclMoePlan_t plan, const void* gradExpertRows,
                                         size_t expertRowsCap, void* gradTokens, size_t hidden,
                                         moecclDataType_t datatype, moecclStream_t stream);
/* The gradient of moecclMoeCombine.  gradTokens [T][hidden] is the gradient
 * of its output, weights its weights; gradExpertRows [R][hidden] gets, for
 * the row of (t, j), weights[t][j] * gradTokens[t], and gradWeights
 * (float32 [T][topk]) gets dot(gradTokens[t], expertRows[row of (t, j)]),
 * expertRows being the forward's combine input, or 0 for dropped and -1
 * slots.  weights, gradTokens and gradWeights may be NULL only when T is
 * 0, expertRows and gradExpertRows only when R is 0.  Types as
 * moecclMoeCombine; dots are accumulated in float32 in element order.
 * Beside device gradTokens and gradExpertRows, expertRows and gradWeights
 * in device memory put the call on the stream (queued, no host wait); in
 * host memory it runs on the host path; one of each kind is refused.
 * (Without the weights this is moecclMoeDispatch of gradTokens.) */
moecclResult_t moecclMoeCombineBackward(moecclMoePlan_t plan, const void* gradTokens,
                                        const float* weights, const void* expertRows,
                                        void* gradExpertRows, size_t expertRowsCap,
                                        float* gradWeights, size_t hidden,
                                        moecclDataType_t datatype, moecclStream_t stream);

#ifdef __cplusplus
}
#endif

#endif /* MOECCL_MOE_H_ */
