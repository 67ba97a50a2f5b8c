/* Schedule storage: growable arrays reused across calls. */
#include "sched/schedule.h"

#include "base/grow.h"

#include <stdlib.h>
#include <string.h>

void moeccl_sched_reset(moeccl_sched_t* s) {
  s->nops = 0;
  s->nsteps = 0;
  s->nends = 0;
  s->nbufs = 0;
  s->scratch_bytes = 0;
  s->scratch_buf = -1;
  s->red = NULL;
  s->rows = NULL;
  s->inexact = 0;
  s->prepared = 0;
}

void moeccl_sched_free(moeccl_sched_t* s) {
  free(s->ops);
  free(s->step_end);
  free(s->step_id);
  free(s->bufs);
  free(s->mems);
  free(s->work);
  memset(s, 0, sizeof(*s));
}

moecclResult_t moeccl_sched_reserve(moeccl_sched_t* s, int nops, int nsteps) {
  if (moeccl_grow(&s->ops, &s->ops_cap, (size_t)(s->nops + nops), sizeof(*s->ops)) ||
      moeccl_grow(&s->step_end, &s->steps_cap, (size_t)(s->nsteps + nsteps),
                  sizeof(*s->step_end)) ||
      moeccl_grow(&s->step_id, &s->step_id_cap, (size_t)(s->nsteps + nsteps), sizeof(*s->step_id)))
    return moecclSystemError;
  return moecclSuccess;
}

moecclResult_t moeccl_sched_add(moeccl_sched_t* s, moeccl_op_type_t type, int peer,
                                uint32_t src_buf, uint64_t src_off, uint32_t dst_buf,
                                uint64_t dst_off, uint64_t bytes) {
  return moeccl_sched_add_flags(s, type, peer, src_buf, src_off, dst_buf, dst_off, bytes, 0);
}

moecclResult_t moeccl_sched_add_flags(moeccl_sched_t* s, moeccl_op_type_t type, int peer,
                                      uint32_t src_buf, uint64_t src_off, uint32_t dst_buf,
                                      uint64_t dst_off, uint64_t bytes, unsigned flags) {
  s->prepared = 0;
  if (bytes == 0) return moecclSuccess;
  if (moeccl_grow(&s->ops, &s->ops_cap, (size_t)(s->nops + 1), sizeof(*s->ops)))
    return moecclSystemError;
  moeccl_sched_op_t* op = &s->ops[s->nops++];
  memset(op, 0, sizeof(*op));
  op->type = (uint8_t)type;
  op->flags = (uint8_t)flags;
  op->peer = peer;
  op->src_buf = src_buf;
  op->src_off = src_off;
  op->dst_buf = dst_buf;
  op->dst_off = dst_off;
  op->bytes = bytes;
  return moecclSuccess;
}

moecclResult_t moeccl_sched_end_step(moeccl_sched_t* s) {
  int begin = s->nsteps ? s->step_end[s->nsteps - 1] : 0;
  int id = s->nends++;
  if (s->nops == begin) return moecclSuccess;
  if (moeccl_grow(&s->step_end, &s->steps_cap, (size_t)(s->nsteps + 1), sizeof(*s->step_end)) ||
      moeccl_grow(&s->step_id, &s->step_id_cap, (size_t)(s->nsteps + 1), sizeof(*s->step_id)))
    return moecclSystemError;
  s->step_id[s->nsteps] = id;
  s->step_end[s->nsteps++] = s->nops;
  return moecclSuccess;
}

moecclResult_t moeccl_sched_add_buf_mem(moeccl_sched_t* s, void* buf, moeccl_mem_t mem,
                                        uint32_t* index) {
  s->prepared = 0;
  if (moeccl_grow(&s->bufs, &s->bufs_cap, (size_t)(s->nbufs + 1), sizeof(*s->bufs)) ||
      moeccl_grow(&s->mems, &s->mems_cap, (size_t)(s->nbufs + 1), sizeof(*s->mems)))
    return moecclSystemError;
  s->bufs[s->nbufs] = buf;
  s->mems[s->nbufs] = mem;
  *index = (uint32_t)s->nbufs++;
  return moecclSuccess;
}

moecclResult_t moeccl_sched_add_buf(moeccl_sched_t* s, void* buf, uint32_t* index) {
  return moeccl_sched_add_buf_mem(s, buf, MOECCL_MEM_HOST_INIT, index);
}

moecclResult_t moeccl_sched_workspace(moeccl_sched_t* s, size_t bytes, void** work) {
  if (bytes > s->work_bytes) {
    void* p = realloc(s->work, bytes);
    if (!p) return moecclSystemError;
    s->work = p;
    s->work_bytes = bytes;
  }
  *work = s->work;
  return moecclSuccess;
}
