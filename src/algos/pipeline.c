/* Stage-pipelined relayed schedules: chunks generated with open steps,
 * their scratch moved into slots, their ops merged into overlapped steps
 * (pipeline.h). */
#include "pipeline.h"

#include <string.h>

#include "base/check.h"

int moeccl_pipeline_chunks(const moeccl_a2a_desc_t* d) {
  int c = d->chunks > 0 ? d->chunks : MOECCL_PIPELINE_DEFAULT_CHUNKS;
  return c < MOECCL_PIPELINE_MAX_CHUNKS ? c : MOECCL_PIPELINE_MAX_CHUNKS;
}

static uint64_t align64(uint64_t v) { return (v + 63) & ~(uint64_t)63; }

/* Moves the scratch offsets of ops [begin, end) up by shift (the relay's
 * rule: a receive names scratch only as its destination, a send only as
 * its source). */
static void shift_scratch(moeccl_sched_t* s, int begin, int end, uint64_t shift) {
  for (int i = begin; i < end; i++) {
    moeccl_sched_op_t* op = &s->ops[i];
    if (op->type != MOECCL_OP_RECV && op->src_buf == MOECCL_BUF_SCRATCH) op->src_off += shift;
    if (op->type != MOECCL_OP_SEND && op->dst_buf == MOECCL_BUF_SCRATCH) op->dst_off += shift;
  }
}

/* Rewrites ops [first, nops), chunk after chunk, as merged steps: step j
 * holds logical step j - c of every chunk c that has one. */
static moecclResult_t merge_steps(moeccl_sched_t* s, int first, int chunks, int lsteps,
                                  const int* ends) {
  int n = s->nops - first;
  moeccl_sched_op_t* ops;
  MOECCL_CHECK(moeccl_sched_workspace(s, (size_t)n * sizeof(*ops) + 1, (void**)&ops));
  if (n > 0) memcpy(ops, s->ops + first, (size_t)n * sizeof(*ops)); /* none: s->ops may be NULL */
  s->nops = first;
  int nsteps = chunks - 1 + lsteps;
  MOECCL_CHECK(moeccl_sched_reserve(s, 0, nsteps));
  for (int j = 0; j < nsteps; j++) {
    for (int c = 0; c < chunks; c++) {
      int k = j - c;
      if (k < 0 || k >= lsteps) continue;
      int begin = k ? ends[c * lsteps + k - 1] : c ? ends[c * lsteps - 1] : first;
      int end = ends[c * lsteps + k];
      for (int i = begin; i < end; i++) s->ops[s->nops++] = ops[i - first];
    }
    MOECCL_CHECK(moeccl_sched_end_step(s));
  }
  return moecclSuccess;
}

moecclResult_t moeccl_pipeline_run(const moeccl_a2a_desc_t* d, moeccl_sched_t* s, int nphases,
                                   moeccl_pipeline_chunk_fn fn) {
  if (nphases < 1 || nphases > MOECCL_PIPELINE_MAX_PHASES) return moecclInternalError;
  int chunks = moeccl_pipeline_chunks(d), lsteps = 2 * nphases + 1;
  int slots = chunks < lsteps ? chunks : lsteps;
  int ends[MOECCL_PIPELINE_MAX_CHUNKS * (2 * MOECCL_PIPELINE_MAX_PHASES + 1)];
  uint64_t scratch[MOECCL_PIPELINE_MAX_CHUNKS], slot = 0;
  size_t scratch_before = s->scratch_bytes;
  int first = s->nops;
  for (int c = 0; c < chunks; c++) {
    moeccl_a2a_desc_t part = *d;
    part.slice = c, part.nslices = chunks;
    MOECCL_CHECK(fn(&part, s, &ends[c * lsteps], &scratch[c]));
    if (scratch[c] > slot) slot = scratch[c];
  }
  slot = align64(slot);
  for (int c = 0; c < chunks; c++) {
    int begin = c ? ends[c * lsteps - 1] : first;
    shift_scratch(s, begin, ends[(c + 1) * lsteps - 1], (uint64_t)(c % slots) * slot);
  }
  s->scratch_bytes = scratch_before;
  if (slot && (size_t)(slots * slot) > s->scratch_bytes) s->scratch_bytes = (size_t)(slots * slot);
  return merge_steps(s, first, chunks, lsteps, ends);
}
