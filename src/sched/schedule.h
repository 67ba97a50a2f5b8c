/*
 * A schedule is data: the ordered steps one rank runs for one operation.
 * Each op moves a byte range: SEND from a buffer to a peer, RECV from a peer
 * into a buffer, COPY between two local buffers; reductions combine two
 * ranges with the schedule's reduction (s->red): REDUCE dst = dst (+) src,
 * RECV_REDUCE dst = src (+) incoming message (the transport reduces straight
 * out of the peer's memory where it can, else the executor stages it).  Ops in a step may run in
 * any order and concurrently; a step starts when the previous one finished.
 * Messages between a pair of ranks match in the order they are posted.
 * Buffers are named by index into the schedule's buffer table, so the same
 * schedule can be run by the executor, checked byte for byte by a unit test,
 * or priced by a simulator without memory.
 */
#ifndef MOECCL_SCHEDULE_H_
#define MOECCL_SCHEDULE_H_

#include <stddef.h>
#include <stdint.h>

#include "kernels/mem.h"
#include "moeccl.h"

typedef enum {
  MOECCL_OP_SEND = 0,
  MOECCL_OP_RECV = 1,
  MOECCL_OP_COPY = 2,
  MOECCL_OP_REDUCE = 3,      /* local: dst = dst (+) src, elementwise */
  MOECCL_OP_RECV_REDUCE = 4, /* dst = src (+) the message from peer (src may equal dst) */
  /* local: the row program s->rows[peer] (src/kernels/rows.h: the MoE combine's
   * weighted row sums and dots), src_off and dst_off its byte bases in
   * src_buf and dst_buf, bytes what it writes */
  MOECCL_OP_ROWS = 5,
  MOECCL_OP_NTYPES
} moeccl_op_type_t;

/* Op flags (moeccl_sched_op_t.flags), for reductions with a pre-multiplier
 * (PreMulSum, Avg on floating types): an operand that is some rank's raw
 * input is scaled by the scalar as it is read, so every contribution is
 * scaled exactly once.  Ignored when the schedule's reduction has none.
 *   REDUCE:      PRE_A: dst holds a raw input; PRE_B: src holds one.
 *   RECV_REDUCE: PRE_A: src holds a raw input; PRE_B: the message is one.
 *   COPY:        PRE_B: dst = scalar * src (a raw input copied as a result). */
enum { MOECCL_OPF_PRE_A = 1, MOECCL_OPF_PRE_B = 2 };
/* COPY: dst = src / the reduction's post-divisor (integer Avg); the planner
 * appends it over every rank's own result after the algorithm's steps. */
enum { MOECCL_OPF_DIV = 4 };
/* RECV: the message is consumed by the row program s->rows[op->prog]
 * (src rows index the message; it writes at the program's out_buf and
 * out_off): a transport with MOECCL_TRANSPORT_CAP_ROWS runs it straight out
 * of the peer's memory where it can, else the message lands at dst as for
 * any receive and the executor runs the program from there.
 * SEND: the message is the rows the COPY program s->rows[op->prog] gathers
 * from src (its span bytes), bytes long: a transport that can let the
 * receiver read the whole span (can_gather) sends it as is, and the
 * receiver's program picks the rows (its terms_idx); otherwise the executor
 * packs them at the program's out_buf and out_off and sends those. */
enum { MOECCL_OPF_ROWS = 8 };

/* Standard buffer indices of a collective's schedule. */
enum { MOECCL_BUF_SEND = 0, MOECCL_BUF_RECV = 1, MOECCL_BUF_SCRATCH = 2, MOECCL_BUF_NSTD = 3 };

typedef struct {
  uint8_t type;     /* moeccl_op_type_t */
  uint8_t flags;    /* MOECCL_OPF_* */
  uint16_t prog;    /* RECV with MOECCL_OPF_ROWS: its program in s->rows */
  int32_t peer;     /* SEND/RECV: comm rank; COPY: -1 */
  uint32_t src_buf; /* SEND/COPY */
  uint32_t dst_buf; /* RECV/COPY */
  uint64_t src_off;
  uint64_t dst_off;
  uint64_t bytes;
} moeccl_sched_op_t;

typedef struct {
  moeccl_sched_op_t* ops;
  int nops;
  size_t ops_cap;
  int* step_end; /* step s holds ops [step_end[s-1], step_end[s]) */
  int nsteps;
  size_t steps_cap;
  /* Step s was closed by the step_id[s]-th moeccl_sched_end_step since the
   * reset (empty steps are dropped, their numbers not reused): a step's
   * place in the algorithm, the same on every rank, which the cost model
   * lines ranks' steps up by.  NULL where steps were not ended that way. */
  int* step_id;
  size_t step_id_cap;
  int nends;          /* moeccl_sched_end_step calls since the reset */
  void** bufs;        /* buffer table; NULL entries are fine for schedule-only uses */
  moeccl_mem_t* mems; /* [nbufs]: where each buffer lives (mem.h) */
  int nbufs;
  size_t bufs_cap, mems_cap;
  size_t scratch_bytes; /* size of the scratch buffer the executor provides */
  int scratch_buf;      /* its index in bufs, or -1 when the schedule has none */
  void* work;           /* generators' planning memory (moeccl_sched_workspace) */
  size_t work_bytes;
  /* The reduction REDUCE and RECV_REDUCE ops apply (reduce.h); NULL when
   * the schedule has none.  Offsets and sizes of reduction ops are whole
   * elements of it. */
  const struct moeccl_red* red;
  /* The row programs MOECCL_OP_ROWS ops name (rows.h); NULL when none. */
  const struct moeccl_rows* rows;
  /* A receive may take a shorter message than its op's bytes (point to
   * point); otherwise every receive's message is exactly its bytes
   * (moeccl_req_t.exact). */
  int inexact;
  /* A lowered call's pinned memory for its row programs' terms (the
   * stream path, exec/lower.c: set in the schedule it hands the stream
   * transport); not read elsewhere. */
  struct moeccl_dev_arena* arena;
  /* executor's: the checks and reservations of its prepare were done for
   * this schedule as it stands (a repeated call runs it again unchanged);
   * reset and every addition clear it */
  int prepared;
  int stream_copy; /* what prepare chose then */
  int self_ops;    /* and whether a send or receive names this rank */
} moeccl_sched_t;

/* Empties a schedule, keeping its memory for the next call (MoE splits change
 * every step; planning must not allocate on the hot path). */
void moeccl_sched_reset(moeccl_sched_t* s);
void moeccl_sched_free(moeccl_sched_t* s);
/* Appends an op to the current step; zero-byte ops are dropped. */
moecclResult_t moeccl_sched_add(moeccl_sched_t* s, moeccl_op_type_t type, int peer,
                                uint32_t src_buf, uint64_t src_off, uint32_t dst_buf,
                                uint64_t dst_off, uint64_t bytes);
/* Like moeccl_sched_add, with op flags (MOECCL_OPF_*). */
moecclResult_t moeccl_sched_add_flags(moeccl_sched_t* s, moeccl_op_type_t type, int peer,
                                      uint32_t src_buf, uint64_t src_off, uint32_t dst_buf,
                                      uint64_t dst_off, uint64_t bytes, unsigned flags);
/* Closes the current step (an empty step is not recorded). */
moecclResult_t moeccl_sched_end_step(moeccl_sched_t* s);
/* Appends a host buffer to the table, returns its index in *index. */
moecclResult_t moeccl_sched_add_buf(moeccl_sched_t* s, void* buf, uint32_t* index);
/* Appends a buffer of memory kind mem. */
moecclResult_t moeccl_sched_add_buf_mem(moeccl_sched_t* s, void* buf, moeccl_mem_t mem,
                                        uint32_t* index);
/* Makes sure ops and steps can grow by at least n without reallocating. */
moecclResult_t moeccl_sched_reserve(moeccl_sched_t* s, int nops, int nsteps);
/* Memory of at least bytes (aligned for any type, contents undefined) for a
 * generator's own tables while it plans; kept for the next call like the op
 * array, so planning does not allocate on the hot path.  Valid until the
 * next call of this function or moeccl_sched_free. */
moecclResult_t moeccl_sched_workspace(moeccl_sched_t* s, size_t bytes, void** work);

struct moeccl_topo;

/* Description of one all-to-all(v) as the algorithms see it: byte counts and
 * byte displacements per peer.  For a uniform alltoall the arrays are NULL and
 * block_bytes is used. */
typedef struct {
  int rank, nranks;
  size_t block_bytes;        /* uniform: bytes per peer */
  const size_t* send_counts; /* v: elements */
  const size_t* send_displs;
  const size_t* recv_counts;
  const size_t* recv_displs;
  size_t elem_size;
  int window; /* direct: peers exchanged with per step (0: all in one step) */
  /* Hierarchical algorithms: where the ranks sit; NULL for flat ones. */
  const struct moeccl_topo* topo;
  /* v-calls of hierarchical algorithms: bytes rank src sends rank dst, for
   * pairs outside this rank's own row and column (which come from the arrays
   * above).  The caller gathers what the algorithm's meta scope needs (see
   * algos.h) before planning; NULL when nothing was gathered. */
  size_t (*pair_bytes)(const void* ctx, int src, int dst);
  const void* pair_ctx;
  /* Pipelined algorithms (hier2p): chunks every block is cut into (0: the
   * generator's default); the same on every rank. */
  int chunks;
  /* The part of every block this description stands for: part `slice` of
   * `nslices` element-aligned parts (nslices 0: whole blocks).  A pipelined
   * generator describes one chunk so to the phases it runs; the helpers
   * below answer for that part only. */
  int slice, nslices;
} moeccl_a2a_desc_t;

/* Where part k of a block of `bytes` starts (k == nslices: its end). */
static inline size_t moeccl_a2a_slice_at(const moeccl_a2a_desc_t* d, size_t bytes, int k) {
  if (!d->nslices || k >= d->nslices) return k ? bytes : 0;
  size_t unit = d->elem_size ? d->elem_size : 1;
  return bytes / unit * (size_t)k / (size_t)d->nslices * unit;
}
/* Bytes of this description's part of a block of `bytes`. */
static inline size_t moeccl_a2a_slice(const moeccl_a2a_desc_t* d, size_t bytes) {
  if (!d->nslices) return bytes;
  return moeccl_a2a_slice_at(d, bytes, d->slice + 1) - moeccl_a2a_slice_at(d, bytes, d->slice);
}

static inline size_t moeccl_a2a_full_send_bytes(const moeccl_a2a_desc_t* d, int peer) {
  return d->send_counts ? d->send_counts[peer] * d->elem_size : d->block_bytes;
}
static inline size_t moeccl_a2a_full_recv_bytes(const moeccl_a2a_desc_t* d, int peer) {
  return d->recv_counts ? d->recv_counts[peer] * d->elem_size : d->block_bytes;
}
static inline size_t moeccl_a2a_send_bytes(const moeccl_a2a_desc_t* d, int peer) {
  return moeccl_a2a_slice(d, moeccl_a2a_full_send_bytes(d, peer));
}
static inline size_t moeccl_a2a_send_off(const moeccl_a2a_desc_t* d, int peer) {
  size_t off = d->send_counts ? d->send_displs[peer] * d->elem_size : (size_t)peer * d->block_bytes;
  return off + moeccl_a2a_slice_at(d, moeccl_a2a_full_send_bytes(d, peer), d->slice);
}
static inline size_t moeccl_a2a_recv_bytes(const moeccl_a2a_desc_t* d, int peer) {
  return moeccl_a2a_slice(d, moeccl_a2a_full_recv_bytes(d, peer));
}
/* Bytes src sends dst in this call, for any pair the caller made known. */
static inline size_t moeccl_a2a_bytes(const moeccl_a2a_desc_t* d, int src, int dst) {
  size_t full = !d->send_counts   ? d->block_bytes
                : src == d->rank  ? d->send_counts[dst] * d->elem_size
                : dst == d->rank  ? d->recv_counts[src] * d->elem_size
                : d->pair_bytes   ? d->pair_bytes(d->pair_ctx, src, dst)
                                  : 0;
  return moeccl_a2a_slice(d, full);
}
static inline size_t moeccl_a2a_recv_off(const moeccl_a2a_desc_t* d, int peer) {
  size_t off = d->recv_counts ? d->recv_displs[peer] * d->elem_size : (size_t)peer * d->block_bytes;
  return off + moeccl_a2a_slice_at(d, moeccl_a2a_full_recv_bytes(d, peer), d->slice);
}

#endif
