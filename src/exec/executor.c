/*
 * The executor runs host schedules.  For each step it posts every SEND and
 * RECV to the transport of its peer, performs the step's local ops while
 * the peers start pulling (local.c), then progresses the transports until
 * the step is done.  It owns waiting: spin, then yield, then sleep in the
 * transport, with a liveness check of the peers and a deadline
 * (MOECCL_TIMEOUT without progress; wait.c).  What receives do with their
 * messages besides landing them is consume.c's; device schedules lowered
 * onto a stream are lower.c's.
 */
#include <sched.h>
#include <stdlib.h>

#include "device/device.h"
#include "exec/executor_int.h"
#include "kernels/copy.h"
#include "kernels/reduce.h"
#include "kernels/rows.h"

#define LIVENESS_PERIOD 0.1 /* seconds between peer checks while waiting */

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ volatile("yield");
#endif
}

/* The buffer a SEND, RECV or RECV_REDUCE op moves. */
static uint32_t net_buf(const moeccl_sched_op_t* op) {
  return op->type == MOECCL_OP_SEND ? op->src_buf : op->dst_buf;
}

static moecclResult_t reserve_reqs(moeccl_comm_t* comm, int n) {
  if (n <= comm->reqs_cap) return moecclSuccess;
  moeccl_xreq_t* r = realloc(comm->reqs, sizeof(*r) * (size_t)n);
  if (!r) return moeccl_error(comm, moecclSystemError, "out of memory for %d requests", n);
  comm->reqs = r;
  comm->reqs_cap = n;
  return moecclSuccess;
}

/* Whether transport t reduces RECV_REDUCE op as it arrives: it has the
 * capability (host kernels) and the op's buffers are host memory. */
static int reduces_in_place(const moeccl_comm_t* c, int t, const moeccl_sched_op_t* op,
                            const moeccl_sched_t* s) {
  return (c->transport_ops[t]->caps & MOECCL_TRANSPORT_CAP_REDUCE) &&
         moeccl_exec_mem(s, op->dst_buf).kind == MOECCL_MEM_HOST &&
         moeccl_exec_mem(s, op->src_buf).kind == MOECCL_MEM_HOST;
}

/* A gathered send: the whole buffer where the receiver can pick the rows
 * itself, else the rows packed here. */
static moecclResult_t make_gathered(moeccl_job_t* j, const moeccl_sched_op_t* op, int t,
                                    moeccl_req_t* r) {
  const moeccl_sched_t* s = j->sched;
  moeccl_comm_t* c = j->comm;
  const moeccl_rows_t* p = &s->rows[op->prog];
  const moeccl_transport_ops_t* ops = c->transport_ops[t];
  if (ops->can_gather && ops->can_gather(c->transport_state[t], op->peer, r->buf, p->span)) {
    r->gather_span = p->span;
    return moecclSuccess;
  }
  void* packed = moeccl_exec_buf(s, p->out_buf, p->out_off);
  const moeccl_mem_ops_t* m = moeccl_exec_work_mem(s, p->out_buf, op->src_buf);
  MOECCL_CHECK(moeccl_exec_kernel_done(c, m, m->rows(p, packed, r->buf, NULL)));
  r->buf = packed;
  r->mem = moeccl_exec_mem(s, p->out_buf);
  return moecclSuccess;
}

/* A receive consumed by a row program: in place by a transport that can
 * (a program of host memory only), else from buf once it is done. */
static void make_rows_recv(moeccl_job_t* j, const moeccl_sched_op_t* op, int t, moeccl_xreq_t* x) {
  const moeccl_sched_t* s = j->sched;
  const moeccl_rows_t* p = &s->rows[op->prog];
  x->rows = p;
  x->rows_dst = moeccl_exec_buf(s, p->out_buf, p->out_off);
  x->rows_aux = p->aux_buf == UINT32_MAX ? NULL : moeccl_exec_buf(s, p->aux_buf, p->aux_off);
  x->rows_device =
      moeccl_exec_mem(s, p->out_buf).kind != MOECCL_MEM_HOST ||
      (p->aux_buf != UINT32_MAX && moeccl_exec_mem(s, p->aux_buf).kind != MOECCL_MEM_HOST);
  x->stage_bytes = op->bytes;
  if (!x->rows_device && (j->comm->transport_ops[t]->caps & MOECCL_TRANSPORT_CAP_ROWS))
    moeccl_exec_consume_rows(x);
}

/* Fills the request of a SEND, RECV or RECV_REDUCE op.  A reducing receive
 * from a transport that cannot reduce (or of device memory) lands in
 * staging memory of its kind first (staged[kind == DEVICE]: the bytes the
 * step took of each), so that a device one is reduced by a kernel. */
static moecclResult_t make_req(moeccl_job_t* j, const moeccl_sched_op_t* op, int t,
                               moeccl_xreq_t* x, size_t* staged) {
  const moeccl_sched_t* s = j->sched;
  moeccl_comm_t* c = j->comm;
  int send = op->type == MOECCL_OP_SEND;
  /* inline zeroing: a memset call was a tenth of the executor's share of
   * a small call */
  *x = (moeccl_xreq_t){
      .req =
          {
              .type = send ? MOECCL_REQ_SEND : MOECCL_REQ_RECV,
              .peer = op->peer,
              .buf = send ? moeccl_exec_buf(s, op->src_buf, op->src_off)
                          : moeccl_exec_buf(s, op->dst_buf, op->dst_off),
              .mem = moeccl_exec_mem(s, net_buf(op)),
              .bytes = op->bytes,
              .stream_copy = j->stream_copy,
              .exact = !send && !s->inexact,
          },
      .comm = c,
  };
  if (send && (op->flags & MOECCL_OPF_ROWS)) return make_gathered(j, op, t, &x->req);
  if (op->type == MOECCL_OP_RECV && (op->flags & MOECCL_OPF_ROWS)) {
    make_rows_recv(j, op, t, x);
    return moecclSuccess;
  }
  if (op->type != MOECCL_OP_RECV_REDUCE) return moecclSuccess;
  x->red = s->red;
  x->operand = moeccl_exec_buf(s, op->src_buf, op->src_off);
  x->red_flags = op->flags;
  if (reduces_in_place(c, t, op, s)) {
    moeccl_exec_consume_reduce(x);
    return moecclSuccess;
  }
  x->stage_dst = x->req.buf;
  x->stage_bytes = op->bytes;
  int dev = x->req.mem.kind == MOECCL_MEM_DEVICE;
  x->req.buf = (char*)(dev ? c->dev_staging : c->staging) + staged[dev];
  staged[dev] += op->bytes;
  return moecclSuccess;
}

/* A pass between the pieces of a long local op progresses the step's
 * transports that only move bytes and mark requests done (no CAP_REDUCE,
 * no CAP_ROWS: shared memory may consume a receive in its progress, whose
 * order against the step's local ops is fixed); start_step collects them
 * as it posts.  What their requests need done after arrival (staged
 * reductions, row programs) count_pending does after the local ops, in op
 * order, as without the passes. */
#define PASS_CAPS (MOECCL_TRANSPORT_CAP_REDUCE | MOECCL_TRANSPORT_CAP_ROWS)

static moecclResult_t count_pending(moeccl_job_t* j);

/* Posts the network ops of job's current step and does its local ops. */
static moecclResult_t start_step(moeccl_job_t* j) {
  moeccl_comm_t* c = j->comm;
  const moeccl_sched_t* s = j->sched;
  int begin = j->step ? s->step_end[j->step - 1] : 0, end = s->step_end[j->step];
  size_t staged[2] = {0, 0};
  const moeccl_xreq_t* last_add = NULL; /* the step's adding receives add in op order */
  j->pending = 0;
  j->passes = 0;
  unsigned mask = 0;  /* transports a pass may progress (PASS_CAPS) */
  unsigned moved = 0; /* transports whose post_now moved a message */
  for (int i = begin; i < end; i++) {
    const moeccl_sched_op_t* op = &s->ops[i];
    if (moeccl_exec_is_local(op)) continue;
    if (op->peer == c->rank) {
      if (op->type == MOECCL_OP_RECV_REDUCE || (op->flags & MOECCL_OPF_ROWS))
        return moeccl_error(c, moecclInternalError,
                            "a reducing or consuming receive from self (rank %d)", c->rank);
      continue;
    }
    moeccl_mem_t mem = moeccl_exec_mem(s, net_buf(op));
    int t = moeccl_peer_transport(c, op->peer, mem); /* prepare checked */
    if (t < 0)
      return moeccl_error(c, moecclInternalError, "no transport to rank %d for a %s message",
                          op->peer, moeccl_mem_name(mem));
    const moeccl_transport_ops_t* ops = c->transport_ops[t];
    /* A plain message of host memory the transport can move right now
     * needs no request (a small call's peers are often ready). */
    if (ops->post_now && mem.kind == MOECCL_MEM_HOST && !(op->flags & MOECCL_OPF_ROWS) &&
        (op->type == MOECCL_OP_SEND || op->type == MOECCL_OP_RECV)) {
      int send = op->type == MOECCL_OP_SEND, done = 0;
      void* buf = send ? moeccl_exec_buf(s, op->src_buf, op->src_off)
                       : moeccl_exec_buf(s, op->dst_buf, op->dst_off);
      MOECCL_CHECK(ops->post_now(c->transport_state[t], op->peer, send, buf, op->bytes, &done));
      if (done) {
        moved |= 1u << t;
        continue;
      }
    }
    moeccl_xreq_t* x = &c->reqs[j->nreqs++];
    MOECCL_CHECK(make_req(j, op, t, x, staged));
    if (moeccl_exec_is_adding(x)) x->rows_after = last_add, last_add = x;
    MOECCL_CHECK(ops->post(c->transport_state[t], &x->req));
    j->pending++;
    if (!(ops->caps & PASS_CAPS)) mask |= 1u << t;
  }
  for (int t = 0; moved; t++, moved >>= 1)
    if ((moved & 1) && c->transport_ops[t]->flush)
      c->transport_ops[t]->flush(c->transport_state[t]);
  for (int i = begin; i < end; i++)
    if (moeccl_exec_is_local(&s->ops[i])) MOECCL_CHECK(moeccl_exec_local_op(j, mask, &s->ops[i]));
  if (s->self_ops) MOECCL_CHECK(moeccl_exec_self_ops(j, begin, end, mask));
  /* Requests the passes saw complete are counted (and finished) now. */
  return j->passes ? count_pending(j) : moecclSuccess;
}

/* Starts steps until one has network ops pending or the schedule is done. */
static moecclResult_t advance(moeccl_job_t* j) {
  while (j->pending == 0 && j->step < j->sched->nsteps) {
    j->first_req = j->nreqs = 0;
    MOECCL_CHECK(start_step(j));
    j->step++;
  }
  return moecclSuccess;
}

/* Counts the current step's pending requests into j->pending, finishing
 * staged reducing receives and consumed receives that completed; an adding
 * receive's program waits for those of the adding receives before it. */
static moecclResult_t count_pending(moeccl_job_t* j) {
  int pending = 0, held = 0;
  for (int i = j->first_req; i < j->nreqs; i++) {
    moeccl_xreq_t* x = &j->comm->reqs[i];
    if (!x->req.done) {
      pending++;
      held |= moeccl_exec_is_adding(x);
      continue;
    }
    if (x->stage_dst) MOECCL_CHECK(moeccl_exec_finish_staged(x));
    if (x->rows && !(held && moeccl_exec_is_adding(x))) MOECCL_CHECK(moeccl_exec_finish_rows(x));
    if (i == j->first_req && !x->rows) j->first_req++;
  }
  j->pending = pending;
  return moecclSuccess;
}

/* Waits for the jobs' current steps; starts the next steps as steps finish.
 * Idle waiting goes spin -> yield -> sleep: spinning answers fastest when
 * every rank has a core; yielding hands the core to a peer that has work
 * when ranks outnumber cores; after YIELD_WINDOW of nothing the rank sleeps
 * in the transport (futex) and burns no core. */
#define YIELD_WINDOW 0.002
static moecclResult_t drive(moeccl_job_t* jobs, int njobs) {
  int spins = 0, spin_max = moeccl_exec_spin_limit(jobs[0].comm);
  /* The clock is read only once the jobs wait: a call that never idles
   * (small, peers ready) does not pay for it. */
  double timeout = jobs[0].comm->timeout, now = 0;
  double idle_since = 0, next_check = 0;
  for (;;) {
    int active = 0, progressed = 0;
    for (int k = 0; k < njobs; k++) {
      MOECCL_CHECK(advance(&jobs[k]));
      active += jobs[k].pending > 0;
    }
    if (!active) return moecclSuccess;
    int sleepy = idle_since != 0 && now - idle_since > YIELD_WINDOW;
    MOECCL_CHECK(moeccl_exec_progress_all(jobs, njobs, &progressed, sleepy));
    if (progressed) {
      for (int k = 0; k < njobs; k++) MOECCL_CHECK(count_pending(&jobs[k]));
      spins = 0;
      idle_since = 0;
      continue;
    }
    if (++spins < spin_max) {
      cpu_relax();
      continue;
    }
    now = moeccl_now();
    if (next_check == 0) next_check = now + LIVENESS_PERIOD;
    if (idle_since == 0) idle_since = now;
    for (int k = 0; k < njobs; k++)
      if (jobs[k].comm->aborting)
        return moeccl_comm_fail(jobs[k].comm, moecclInvalidUsage,
                                "communicator aborted during an operation");
    if (now - idle_since > timeout) return moeccl_exec_timed_out(jobs, njobs);
    if (now >= next_check) {
      MOECCL_CHECK(moeccl_exec_check_peers(jobs, njobs));
      next_check = now + LIVENESS_PERIOD;
    }
    if (!sleepy) {
      sched_yield();
      continue;
    }
    moeccl_exec_idle_wait(jobs, njobs);
  }
}

/* Device staging of at least bytes on device (the old one is idle between
 * calls: its receives were reduced before their call returned). */
static moecclResult_t reserve_dev_staging(moeccl_comm_t* c, size_t bytes, int device) {
  if (bytes <= c->dev_staging_bytes) return moecclSuccess;
  const moeccl_device_ops_t* d = moeccl_device();
  void* p = NULL;
  moecclResult_t rc = d ? d->alloc(&p, bytes, device) : moecclInvalidUsage;
  if (rc != moecclSuccess)
    return moeccl_error(c, rc, "no %zu bytes of device memory on device %d for staging", bytes,
                        device);
  if (c->dev_staging) d->free(c->dev_staging);
  c->dev_staging = p;
  c->dev_staging_bytes = bytes;
  return moecclSuccess;
}

/* Staging for reducing receives from transports that cannot reduce: the
 * most any step receives that way, in host memory and, for receives into
 * device memory, in device memory (reduced there by a kernel). */
static moecclResult_t reserve_staging(moeccl_job_t* j) {
  moeccl_comm_t* c = j->comm;
  const moeccl_sched_t* s = j->sched;
  size_t most[2] = {0, 0};
  int device = 0;
  for (int step = 0, i = 0; step < s->nsteps; step++) {
    size_t bytes[2] = {0, 0};
    for (; i < s->step_end[step]; i++) {
      const moeccl_sched_op_t* op = &s->ops[i];
      if (op->type != MOECCL_OP_RECV_REDUCE || op->peer == c->rank) continue;
      moeccl_mem_t mem = moeccl_exec_mem(s, op->dst_buf);
      int t = moeccl_peer_transport(c, op->peer, mem);
      if (reduces_in_place(c, t, op, s)) continue;
      int dev = mem.kind == MOECCL_MEM_DEVICE;
      bytes[dev] += op->bytes;
      if (dev) device = mem.device;
    }
    for (int k = 0; k < 2; k++)
      if (bytes[k] > most[k]) most[k] = bytes[k];
  }
  if (most[1]) MOECCL_CHECK(reserve_dev_staging(c, most[1], device));
  if (most[0] <= c->staging_bytes) return moecclSuccess;
  void* p = realloc(c->staging, most[0]);
  if (!p)
    return moeccl_error(c, moecclSystemError, "out of memory for %zu bytes of staging", most[0]);
  c->staging = p;
  c->staging_bytes = most[0];
  return moecclSuccess;
}

/* The kernel op needs that the table of its buffers' kind lacks (NULL when
 * it has all; the host and device tables have every kernel, a new kind
 * may start with copies only). */
static const char* missing_kernel(const moeccl_sched_t* s, const moeccl_sched_op_t* op) {
  uint32_t b = op->type == MOECCL_OP_SEND ? op->src_buf : op->dst_buf;
  const moeccl_mem_ops_t* m = moeccl_exec_op_mem(s, b);
  const moeccl_mem_ops_t* src = op->type == MOECCL_OP_COPY || op->type == MOECCL_OP_REDUCE ||
                                        op->type == MOECCL_OP_RECV_REDUCE
                                    ? moeccl_exec_op_mem(s, op->src_buf)
                                    : m;
  int reduce = op->type == MOECCL_OP_REDUCE || op->type == MOECCL_OP_RECV_REDUCE;
  if (reduce && (!m->reduce || !src->reduce)) return "a reduction";
  if ((op->type == MOECCL_OP_ROWS || (op->flags & MOECCL_OPF_ROWS)) && !m->rows)
    return "the MoE row kernels";
  if (op->type == MOECCL_OP_COPY && (op->flags & MOECCL_OPF_DIV) && !m->postdiv)
    return "a division (integer average)";
  if (op->type == MOECCL_OP_COPY && (op->flags & MOECCL_OPF_PRE_B) && s->red && s->red->premul &&
      !m->scale)
    return "a scaling (pre-multiplied sum)";
  return NULL;
}

moecclResult_t moeccl_mem_check(moeccl_comm_t* c, moeccl_mem_t m, int peer, const char* what,
                                const void* buf) {
  /* Host memory has its table and every peer a transport for it (init
   * fails otherwise): the common case costs one compare, every call. */
  if (m.kind == MOECCL_MEM_HOST) return moecclSuccess;
  int first = peer < 0 ? 0 : peer, last = peer < 0 ? c->nranks - 1 : peer;
  for (int p = first; p <= last; p++)
    if (p != c->rank && moeccl_peer_transport(c, p, m) < 0)
      return moeccl_error(c, moecclInvalidArgument,
                          "%s %p is %s memory, which no transport moves between rank %d and rank "
                          "%d (%s)%s",
                          what, buf, moeccl_mem_name(m), c->rank, p, c->peers[p].hostname,
                          m.kind == MOECCL_MEM_DEVICE ? ": device buffers work between the ranks "
                                                        "of one node in this build"
                                                      : "");
  if (moeccl_mem_ops(m)) return moecclSuccess;
  return moeccl_error(c, moecclInvalidArgument,
                      "%s %p is %s memory (device %d), which this build cannot operate on yet",
                      what, buf, moeccl_mem_name(m), m.device);
}

/* Every buffer's kind has a local-work table, every op has the kernels it
 * needs for its buffers' kind, and a transport moves each message's kind
 * to its peer (moeccl_mem_check, as at the entry points): checked before
 * anything is posted, so a call refused here sends nothing. */
static moecclResult_t check_kinds(moeccl_job_t* j) {
  moeccl_comm_t* c = j->comm;
  const moeccl_sched_t* s = j->sched;
  int all_host = 1;
  for (int b = 0; b < s->nbufs; b++) {
    all_host &= moeccl_exec_mem(s, (uint32_t)b).kind == MOECCL_MEM_HOST;
    MOECCL_CHECK(moeccl_mem_check(c, moeccl_exec_mem(s, (uint32_t)b), c->rank,
                                  "a buffer of the schedule", s->bufs[b]));
  }
  /* host buffers only (every call today): host has its table and every
   * transport moves it, so the per-op pass is not on that path */
  if (all_host) return moecclSuccess;
  for (int i = 0; i < s->nops; i++) {
    const moeccl_sched_op_t* op = &s->ops[i];
    const char* kernel = missing_kernel(s, op);
    if (kernel)
      return moeccl_error(c, moecclInvalidArgument,
                          "this call needs %s on %s memory, which this build cannot do yet", kernel,
                          moeccl_mem_name(moeccl_exec_mem(s, op->dst_buf)));
    /* local ops of mixed kinds run by the device table (work_mem) */
    if (op->type == MOECCL_OP_COPY || op->type == MOECCL_OP_REDUCE || op->type == MOECCL_OP_ROWS)
      continue;
    if (op->peer == c->rank) continue;
    MOECCL_CHECK(moeccl_mem_check(c, moeccl_exec_mem(s, net_buf(op)), op->peer,
                                  "a message's buffer", s->bufs[net_buf(op)]));
  }
  return moecclSuccess;
}

/* The communicator's device scratch, for host-run and lowered schedules
 * alike: grown, never freed while the communicator lives (work a lowered
 * call queued on some stream may still use the old one; comm.c frees them
 * all after the transports drained). */
moecclResult_t moeccl_exec_dev_scratch(moeccl_comm_t* c, moeccl_sched_t* s) {
  size_t need = s->scratch_bytes;
  if (need > c->dev_scratch_bytes) {
    if (c->dev_scratch) {
      void** old = realloc(c->dev_scratch_old, sizeof(void*) * (size_t)(c->ndev_scratch_old + 1));
      if (!old) return moeccl_error(c, moecclSystemError, "out of memory");
      c->dev_scratch_old = old;
      old[c->ndev_scratch_old++] = c->dev_scratch;
    }
    c->dev_scratch = NULL, c->dev_scratch_bytes = 0;
    moeccl_mem_t m = moeccl_exec_mem(s, (uint32_t)s->scratch_buf);
    moecclResult_t rc = moeccl_device()->alloc(&c->dev_scratch, need, m.device);
    if (rc != moecclSuccess)
      return moeccl_error(c, rc, "no device memory for %zu bytes of scratch on device %d", need,
                          m.device);
    c->dev_scratch_bytes = need;
  }
  s->bufs[s->scratch_buf] = c->dev_scratch;
  return moecclSuccess;
}

/* The schedule's scratch buffer, of its kind (the receive buffer's): the
 * communicator's host scratch, or its device scratch for calls on device
 * buffers (which peers import like any device buffer).  Both only grow. */
static moecclResult_t provide_scratch(moeccl_comm_t* c, moeccl_sched_t* s) {
  moeccl_mem_t m = moeccl_exec_mem(s, (uint32_t)s->scratch_buf);
  size_t need = s->scratch_bytes;
  if (m.kind == MOECCL_MEM_DEVICE) return moeccl_exec_dev_scratch(c, s);
  if (need > c->scratch_bytes) {
    void* p = realloc(c->scratch, need);
    if (!p)
      return moeccl_error(c, moecclSystemError, "out of memory for %zu bytes of scratch", need);
    c->scratch = p;
    c->scratch_bytes = need;
  }
  s->bufs[s->scratch_buf] = c->scratch;
  return moecclSuccess;
}

static moecclResult_t prepare(moeccl_job_t* j) {
  moeccl_comm_t* c = j->comm;
  if (c->async_error != moecclSuccess)
    return moeccl_error(c, c->async_error,
                        "communicator is broken by an earlier error (%s); abort it", c->fail_text);
  moeccl_sched_t* s = j->sched;
  MOECCL_CHECK(reserve_reqs(c, s->nops));
  if (s->scratch_buf >= 0) MOECCL_CHECK(provide_scratch(c, s));
  /* A repeated call's unchanged schedule passed the rest before (the
   * staging and the kinds' tables only grow or stay). */
  if (!s->prepared) {
    MOECCL_CHECK(check_kinds(j));
    MOECCL_CHECK(reserve_staging(j));
    size_t written = 0; /* bytes this rank writes: receives and local copies */
    s->self_ops = 0;
    for (int i = 0; i < s->nops; i++) {
      if (s->ops[i].type != MOECCL_OP_SEND) written += s->ops[i].bytes;
      s->self_ops |= !moeccl_exec_is_local(&s->ops[i]) && s->ops[i].peer == c->rank;
    }
    s->stream_copy = moeccl_copy_streaming(written);
    s->prepared = 1;
  }
  j->stream_copy = s->stream_copy;
  j->step = j->first_req = j->nreqs = j->pending = 0;
  return moecclSuccess;
}

static void cancel(moeccl_job_t* jobs, int njobs, moecclResult_t rc) {
  for (int k = 0; k < njobs; k++) {
    moeccl_comm_t* c = jobs[k].comm;
    for (int t = 0; t < c->ntransports; t++) c->transport_ops[t]->cancel_all(c->transport_state[t]);
    if (c->async_error == moecclSuccess)
      moeccl_comm_fail(c, rc, "operation failed: %s", moecclGetErrorString(rc));
    if (c->failed_peer >= 0 && !c->abort_notified) {
      c->abort_notified = 1;
      moeccl_transports_notify_abort(c, c->failed_peer);
    }
  }
}

moecclResult_t moeccl_executor_run(moeccl_job_t* jobs, int njobs) {
  moecclResult_t rc = moecclSuccess;
  /* A job that cannot start (broken communicator, no memory) fails them
   * all: their peers have started and would wait for this rank. */
  for (int k = 0; k < njobs && rc == moecclSuccess; k++) rc = prepare(&jobs[k]);
  if (rc == moecclSuccess) rc = drive(jobs, njobs);
  if (rc != moecclSuccess) cancel(jobs, njobs, rc);
  return rc;
}
