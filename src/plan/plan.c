/* The planning module: algorithm choice and schedule for every call (plan.h). */
#include "plan/plan.h"

#include "device/device.h"
#include "kernels/mem.h"
#include "topo/topo.h"
#include "tune/tuner.h"

#include <stdlib.h>
#include <string.h>

/* ---- all-to-all ----------------------------------------------------------- */

/* Bytes src sends dst, from the count rows gathered by meta_plan. */
static size_t meta_pair_bytes(const void* ctx, int src, int dst) {
  const moeccl_comm_t* comm = ctx;
  const struct moeccl_plan_cache* c = comm->plan;
  size_t n = (size_t)comm->nranks;
  int m = c->meta_index[src];
  if (m >= 0) return c->meta_rows[(2 * (size_t)m) * n + (size_t)dst] * c->meta_elem;
  m = c->meta_index[dst];
  if (m >= 0) return c->meta_rows[(2 * (size_t)m + 1) * n + (size_t)src] * c->meta_elem;
  return 0; /* outside the algorithm's scope: test_sched checks none asks */
}

/* Gathers the count rows of the algorithm's scope (moeccl_meta_schedule)
 * into comm->plan->meta_rows, where meta_pair_bytes finds them. */
static moecclResult_t meta_plan(moeccl_comm_t* c, const moeccl_a2a_algo_t* a,
                                const moeccl_a2a_desc_t* d, moeccl_sched_t* s) {
  int n = c->nranks;
  struct moeccl_plan_cache* pc = c->plan;
  if (!pc->meta_index) {
    pc->meta_index = malloc(sizeof(int) * (size_t)n);
    if (!pc->meta_index) return moeccl_error(c, moecclSystemError, "out of memory");
  }
  int members = moeccl_meta_members(c->topo, c->rank, a->meta, pc->meta_index);
  size_t need = 2 * (size_t)members * (size_t)n;
  if (need > pc->meta_cap) {
    size_t* p = realloc(pc->meta_rows, need * sizeof(size_t));
    if (!p) return moeccl_error(c, moecclSystemError, "out of memory");
    pc->meta_rows = p, pc->meta_cap = need;
  }
  pc->meta_elem = d->elem_size;
  size_t* mine = pc->meta_rows + 2 * (size_t)pc->meta_index[c->rank] * (size_t)n;
  memcpy(mine, d->send_counts, (size_t)n * sizeof(size_t));
  memcpy(mine + n, d->recv_counts, (size_t)n * sizeof(size_t));
  moeccl_sched_reset(s);
  uint32_t rows;
  MOECCL_CHECK(moeccl_sched_add_buf(s, pc->meta_rows, &rows));
  return moeccl_meta_schedule(c->topo, c->rank, a->meta, pc->meta_index, rows, s);
}

static moecclResult_t a2a_prepare(moeccl_comm_t* comm, const moeccl_a2a_desc_t* desc, int device,
                                  moeccl_choice_t* choice) {
  const moeccl_a2a_algo_t* algo = moeccl_tuner_pick(comm, desc, device);
  if (!algo)
    return moeccl_comm_fail(comm, moecclSystemError,
                            "the tuner could not price the candidates (out of memory); the ranks "
                            "may now disagree, abort the communicator");
  choice->algo = (int)algo->id;
  choice->chunks = moeccl_tuner_a2a_chunks(comm);
  moeccl_a2a_desc_t d = *desc;
  d.topo = comm->topo;
  if (!moeccl_a2a_needs_meta(algo, &d)) return moecclSuccess;
  choice->need_meta = 1;
  moecclResult_t rc = meta_plan(comm, algo, desc, &comm->plan->meta_sched);
  if (rc != moecclSuccess)
    return moeccl_comm_fail(comm, rc, "planning the count exchange of %s failed (%s)", algo->name,
                            moecclGetErrorString(rc));
  return moecclSuccess;
}

/* A PreMulSum's moecclScalarDevice scalar, read now (the host path, when
 * the call runs): where it is device memory (a GPU framework's tensor),
 * through the copy engine.  The stream path reads none: its kernels read
 * the scalar as the stream reaches them (red.scalar_dev, set when the call
 * was routed there). */
static moecclResult_t read_scalar(moeccl_comm_t* comm, moeccl_call_t* call) {
  const void* p = call->scalar_ptr;
  uint64_t v = 0;
  if (moeccl_mem_of(p).kind == MOECCL_MEM_DEVICE) {
    moecclResult_t rc = moeccl_device_copy(&v, p, call->red.elem_size);
    if (rc != moecclSuccess)
      return moeccl_error(comm, rc, "reading the PreMulSum scalar at %p (device memory) failed", p);
    p = &v;
  }
  moeccl_red_set_premul(&call->red, p);
  return moecclSuccess;
}

/* SEND, RECV and SCRATCH, the buffers every collective's schedule names,
 * each with the memory kind its pointer has (scratch: the receive
 * buffer's; a NULL send buffer, as a receive-only rank passes, too). */
static moecclResult_t std_bufs(moeccl_sched_t* s, const void* sendbuf, void* recvbuf) {
  moeccl_sched_reset(s);
  uint32_t b;
  moeccl_mem_t rm = moeccl_mem_of(recvbuf), sm = sendbuf ? moeccl_mem_of(sendbuf) : rm;
  MOECCL_CHECK(moeccl_sched_add_buf_mem(s, (void*)sendbuf, sm, &b));
  MOECCL_CHECK(moeccl_sched_add_buf_mem(s, recvbuf, rm, &b));
  MOECCL_CHECK(moeccl_sched_add_buf_mem(s, NULL, rm, &b)); /* scratch, provided by the executor */
  s->scratch_buf = (int)b;
  return moecclSuccess;
}

/* In place (sendbuf == recvbuf, as nccl-tests' alltoall_perf calls it): the
 * bytes to send are the buffer's as the call starts, but a receive may
 * land on them before they are sent.  So a first step of its own copies the
 * send extent [0, E) of RECV to SCRATCH [0, E), and the generator's ops read
 * them there: every read of SEND becomes a read of SCRATCH at the same
 * offset, and the generator's own scratch moves up past E (rounded to 64
 * bytes, which keeps its areas' alignment).  The executor and the
 * generators need not know; the buffer table's SEND entry (the same memory)
 * is no longer named by any op.  The tuner prices the generators' schedules
 * without this step. */

/* Bytes of the send buffer the call reads: [0, E). */
static size_t a2a_send_extent(const moeccl_a2a_desc_t* d) {
  if (!d->send_counts) return (size_t)d->nranks * d->block_bytes;
  size_t top = 0;
  for (int p = 0; p < d->nranks; p++) {
    size_t bytes = moeccl_a2a_send_bytes(d, p), end = moeccl_a2a_send_off(d, p) + bytes;
    if (bytes && end > top) top = end;
  }
  return top;
}

static moecclResult_t inplace_stage(moeccl_sched_t* s, size_t extent) {
  MOECCL_CHECK(
      moeccl_sched_add(s, MOECCL_OP_COPY, -1, MOECCL_BUF_RECV, 0, MOECCL_BUF_SCRATCH, 0, extent));
  return moeccl_sched_end_step(s);
}

/* Points the reads of SEND by ops [first, nops) at the staged copy, and
 * moves their scratch up past it (the all-to-all generators name SEND only
 * as a source). */
static void inplace_redirect(moeccl_sched_t* s, int first, size_t extent) {
  uint64_t shift = ((uint64_t)extent + 63) & ~(uint64_t)63;
  for (int i = first; i < s->nops; i++) {
    moeccl_sched_op_t* op = &s->ops[i];
    if (op->type != MOECCL_OP_RECV) {
      if (op->src_buf == MOECCL_BUF_SEND) op->src_buf = MOECCL_BUF_SCRATCH;
      else if (op->src_buf == MOECCL_BUF_SCRATCH) op->src_off += shift;
    }
    if (op->type != MOECCL_OP_SEND && op->dst_buf == MOECCL_BUF_SCRATCH) op->dst_off += shift;
  }
  s->scratch_bytes = s->scratch_bytes ? (size_t)shift + s->scratch_bytes : extent;
}

static moecclResult_t a2a_build(moeccl_comm_t* comm, const moeccl_call_t* call,
                                const moeccl_choice_t* choice, moeccl_sched_t* s) {
  const moeccl_a2a_algo_t* algo = &moeccl_a2a_algos[choice->algo];
  const moeccl_a2a_desc_t* desc = &call->a2a;
  TRACE(ALGO, "rank %d: all-to-all%s%s with %s", comm->rank, desc->send_counts ? "v" : "",
        call->sendbuf == call->recvbuf ? " in place" : "", algo->name);
  moeccl_a2a_desc_t d = *desc;
  d.topo = comm->topo;
  d.window = comm->a2a_window;
  d.chunks = choice->chunks;
  if (choice->need_meta) d.pair_bytes = meta_pair_bytes, d.pair_ctx = comm;
  MOECCL_CHECK(std_bufs(s, call->sendbuf, call->recvbuf));
  size_t staged = call->sendbuf == call->recvbuf ? a2a_send_extent(&d) : 0;
  moecclResult_t rc = staged ? inplace_stage(s, staged) : moecclSuccess;
  int first = s->nops;
  if (rc == moecclSuccess) rc = algo->schedule(&d, s);
  if (rc != moecclSuccess)
    return moeccl_error(comm, rc, "planning the all-to-all%s with %s failed (%s)",
                        desc->send_counts ? "v" : "", algo->name, moecclGetErrorString(rc));
  if (staged) inplace_redirect(s, first, staged);
  return moecclSuccess;
}

/* ---- point-to-point ------------------------------------------------------- */

moecclResult_t moeccl_plan_p2p_check(moeccl_comm_t* comm, const moeccl_call_t* call) {
  int sends = 0, recvs = 0;
  for (int i = 0; i < call->np2p; i++) {
    if (call->p2p[i].peer != comm->rank) continue;
    if (call->p2p[i].type == MOECCL_OP_SEND) sends++;
    else recvs++;
  }
  if (sends == recvs) return moecclSuccess;
  return moeccl_error(comm, moecclInvalidUsage,
                      "%d send(s) to self but %d receive(s) from self (rank %d) in one group",
                      sends, recvs, comm->rank);
}

/* Every send and receive of the group in one step. */
static moecclResult_t p2p_build(moeccl_comm_t* comm, const moeccl_call_t* call, moeccl_sched_t* s) {
  MOECCL_CHECK(moeccl_plan_p2p_check(comm, call));
  moeccl_sched_reset(s);
  s->inexact = 1; /* moecclRecv takes a shorter message */
  MOECCL_CHECK(moeccl_sched_reserve(s, call->np2p, 1));
  for (int i = 0; i < call->np2p; i++) {
    const moeccl_p2p_op_t* op = &call->p2p[i];
    uint32_t b;
    MOECCL_CHECK(moeccl_sched_add_buf_mem(s, op->buf, moeccl_mem_of(op->buf), &b));
    if (op->type == MOECCL_OP_SEND)
      MOECCL_CHECK(moeccl_sched_add(s, MOECCL_OP_SEND, op->peer, b, 0, 0, 0, op->bytes));
    else MOECCL_CHECK(moeccl_sched_add(s, MOECCL_OP_RECV, op->peer, 0, 0, b, 0, op->bytes));
  }
  return moeccl_sched_end_step(s);
}

/* ---- the other collectives ------------------------------------------------ */

static moecclResult_t coll_prepare(moeccl_comm_t* comm, const moeccl_coll_desc_t* desc,
                                   int device, moeccl_choice_t* choice) {
  moeccl_coll_desc_t d = *desc;
  d.topo = comm->topo;
  int algo = moeccl_tuner_pick_coll(comm, &d, device);
  if (algo < 0)
    return moeccl_comm_fail(comm, moecclSystemError,
                            "the tuner could not price the %s candidates (out of memory); the "
                            "ranks may now disagree, abort the communicator",
                            moeccl_coll_kind_name(desc->kind));
  choice->algo = algo;
  return moecclSuccess;
}

/* Bytes of this rank's result in RECV, which an integer Avg divides. */
static size_t result_bytes(const moeccl_coll_desc_t* d) {
  if (d->kind == MOECCL_COLL_REDUCE && d->rank != d->root) return 0;
  return d->count * d->elem_size;
}

/* Integer Avg: every rank divides its own result once, after the algorithm
 * (values on the wire stay sums, so each copy is divided exactly once). */
static moecclResult_t add_postdiv(const moeccl_coll_desc_t* d, moeccl_sched_t* s) {
  size_t bytes = result_bytes(d);
  if (!bytes) return moecclSuccess;
  MOECCL_CHECK(moeccl_sched_end_step(s));
  MOECCL_CHECK(moeccl_sched_add_flags(s, MOECCL_OP_COPY, -1, MOECCL_BUF_RECV, 0, MOECCL_BUF_RECV, 0,
                                      bytes, MOECCL_OPF_DIV));
  return moeccl_sched_end_step(s);
}

static moecclResult_t coll_build(moeccl_comm_t* comm, moeccl_call_t* call,
                                 const moeccl_choice_t* choice, moeccl_sched_t* s) {
  const moeccl_coll_algo_t* algo = &moeccl_coll_algos[choice->algo];
  moeccl_coll_desc_t d = call->coll;
  d.topo = comm->topo;
  TRACE(ALGO, "rank %d: %s of %zu elements with %s", comm->rank, moeccl_coll_kind_name(d.kind),
        d.count, algo->name);
  MOECCL_CHECK(std_bufs(s, call->sendbuf, call->recvbuf));
  if (d.reduce) {
    if (call->scalar_ptr && !call->red.scalar_dev) MOECCL_CHECK(read_scalar(comm, call));
    s->red = &call->red;
  }
  moecclResult_t rc = algo->schedule[d.kind](&d, s);
  if (rc == moecclSuccess && d.reduce && call->red.postdiv) rc = add_postdiv(&d, s);
  if (rc == moecclSuccess) rc = moeccl_sched_end_step(s);
  if (rc != moecclSuccess)
    return moeccl_error(comm, rc, "planning the %s with %s failed (%s)",
                        moeccl_coll_kind_name(d.kind), algo->name, moecclGetErrorString(rc));
  return moecclSuccess;
}

/* ---- MoE dispatch and combine --------------------------------------------- */

static moecclResult_t moe_build(moeccl_comm_t* comm, const moeccl_call_t* call, moeccl_sched_t* s) {
  MOECCL_CHECK(std_bufs(s, call->sendbuf, call->recvbuf));
  moecclResult_t rc = moeccl_moe_schedule(&call->moe, s);
  if (rc == moecclSuccess) rc = moeccl_sched_end_step(s);
  if (rc != moecclSuccess)
    return moeccl_error(comm, rc, "planning the MoE %s failed (%s)",
                        moeccl_moe_op_name(call->moe.op), moecclGetErrorString(rc));
  return moecclSuccess;
}

/* ---- entry ---------------------------------------------------------------- */

/* Whether the tuner prices the call with the device costs: either buffer
 * in device memory (a rank that passes no send or receive buffer, as a
 * non-root may, still names the other, so the ranks of one call agree). */
static int call_on_device(const moeccl_call_t* call) {
  return (call->sendbuf && moeccl_mem_of(call->sendbuf).kind == MOECCL_MEM_DEVICE) ||
         (call->recvbuf && moeccl_mem_of(call->recvbuf).kind == MOECCL_MEM_DEVICE);
}

moecclResult_t moeccl_plan_prepare(moeccl_comm_t* comm, const moeccl_call_t* call,
                                   moeccl_choice_t* choice) {
  *choice = (moeccl_choice_t){0, 0};
  if (comm->aborting) return moeccl_error(comm, moecclInvalidUsage, "communicator was aborted");
  if (call->kind == MOECCL_CALL_A2A)
    return a2a_prepare(comm, &call->a2a, call_on_device(call), choice);
  if (call->kind == MOECCL_CALL_COLL)
    return coll_prepare(comm, &call->coll, call_on_device(call), choice);
  return moecclSuccess;
}

/* A uniform all-to-all with no count exchange: its schedule is a function
 * of the buffers, the block, the element size and the algorithm alone (the
 * topology and window are the communicator's), so a repeat of the call
 * that sched last held can run it again.  Training and inference loops
 * repeat one shape; building it was a quarter of a small call's
 * instructions. */
static int a2a_repeat(const moeccl_comm_t* comm, const moeccl_call_t* call,
                      const moeccl_choice_t* choice) {
  const moeccl_a2a_desc_t* d = &call->a2a;
  const struct moeccl_plan_cache* pc = comm->plan;
  return pc->last.valid && !d->send_counts && !choice->need_meta && pc->last.algo == choice->algo &&
         pc->last.sendbuf == call->sendbuf && pc->last.recvbuf == call->recvbuf &&
         pc->last.block == d->block_bytes && pc->last.elem == d->elem_size;
}

moecclResult_t moeccl_plan_build(moeccl_comm_t* comm, moeccl_call_t* call,
                                 const moeccl_choice_t* choice, moeccl_sched_t* sched) {
  if (comm->aborting) return moeccl_error(comm, moecclInvalidUsage, "communicator was aborted");
  struct moeccl_plan_cache* pc = comm->plan;
  int mine = sched == &pc->sched;
  if (mine && call->kind == MOECCL_CALL_A2A && a2a_repeat(comm, call, choice)) return moecclSuccess;
  if (mine) pc->last.valid = 0; /* sched is about to change */
  if (call->kind == MOECCL_CALL_A2A) {
    moecclResult_t rc = a2a_build(comm, call, choice, sched);
    const moeccl_a2a_desc_t* d = &call->a2a;
    if (mine && rc == moecclSuccess && !d->send_counts && !choice->need_meta)
      pc->last = (__typeof__(pc->last)){
          1, choice->algo, call->sendbuf, call->recvbuf, d->block_bytes, d->elem_size};
    return rc;
  }
  if (call->kind == MOECCL_CALL_COLL) return coll_build(comm, call, choice, sched);
  if (call->kind == MOECCL_CALL_MOE) return moe_build(comm, call, sched);
  return p2p_build(comm, call, sched);
}

moecclResult_t moeccl_plan_cache_create(moeccl_comm_t* comm) {
  comm->plan = calloc(1, sizeof(*comm->plan));
  return comm->plan ? moecclSuccess : moeccl_error(comm, moecclSystemError, "out of memory");
}

void moeccl_plan_cache_free(moeccl_comm_t* comm) {
  struct moeccl_plan_cache* pc = comm->plan;
  if (!pc) return;
  moeccl_sched_free(&pc->sched);
  moeccl_sched_free(&pc->meta_sched);
  free(pc->meta_rows);
  free(pc->meta_index);
  free(pc);
  comm->plan = NULL;
}
