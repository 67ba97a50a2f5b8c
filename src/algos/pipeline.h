/*
 * Stage-pipelined relayed schedules (hier2p): the blocks are cut into
 * chunks (every block into the same number of element-aligned parts, part c
 * of each block in chunk c), each chunk runs the algorithm's relay phases
 * (relay.h) as a call of its own, and chunk c+1 starts one step after
 * chunk c.  With the relay's layout of 2P+1 steps per chunk (P phases:
 * copies, exchange, copies, ...), the step in which chunk c exchanges
 * between nodes (hier2's logical step 3) holds chunk c+2's gather on the
 * node, chunk c-2's scatter on the node and the copies of chunks c+1 and
 * c-1: the links and the copying core work on five chunks at once.
 * C chunks take C-1 + 2P+1 steps.
 *
 * - Messages still match in posting order: every rank posts the steps in
 *   the same order and, within a step, the chunks in ascending order, each
 *   chunk's messages as the relay orders them.
 * - Scratch: 2P+1 chunks are in flight at most (chunk c+2P+1 starts after
 *   chunk c's last step), so min(C, 2P+1) slots, each the largest chunk's
 *   scratch (about 1/C of the unpipelined schedule's), chunk c in slot
 *   c mod slots.
 * - Planning: the chunks are generated one after another with the steps
 *   left open (the relay records where each of its logical steps ends),
 *   then the ops are reordered into the merged steps through the workspace:
 *   O(C x the relay's cost), no allocation once grown.
 */
#ifndef MOECCL_PIPELINE_H_
#define MOECCL_PIPELINE_H_

#include "algos.h"

/* Default chunks when desc->chunks is 0, and the most a schedule takes. */
#define MOECCL_PIPELINE_DEFAULT_CHUNKS 2
#define MOECCL_PIPELINE_MAX_CHUNKS 64
#define MOECCL_PIPELINE_MAX_PHASES 4

/* One chunk's phases: appends the ops of chunk desc d with steps left open
 * (moeccl_relay_plan_t's step_ends and scratch). */
typedef moecclResult_t (*moeccl_pipeline_chunk_fn)(const moeccl_a2a_desc_t* d, moeccl_sched_t* s,
                                                   int* step_ends, uint64_t* scratch);

/* The chunks of d (desc->chunks, 0: the default, clamped to 1..MAX), each
 * by fn with nphases relay phases, overlapped as above. */
moecclResult_t moeccl_pipeline_run(const moeccl_a2a_desc_t* d, moeccl_sched_t* s, int nphases,
                                   moeccl_pipeline_chunk_fn fn);

/* The chunk count a schedule of d uses. */
int moeccl_pipeline_chunks(const moeccl_a2a_desc_t* d);

#endif
