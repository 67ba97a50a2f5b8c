/*
 * libfabric transport (ofi.h): the completion queue and what each
 * completion moves on (CTS, rendezvous headers, chunks, write data, abort
 * notices), errors, waiting on the queue's wait object, liveness and
 * aborts.
 */
#include "transport/ofi/ofi.h"

/* Sender: the receiver answered the rendezvous header. */
static moecclResult_t on_cts(ofi_state_t* s, ofi_xfer_t* x) {
  /* (an early CTS comes before the receiver saw the size: checked here) */
  if (x->cts.status == CTS_TRUNC || x->msg_bytes > x->cts.posted)
    return ofi_fail_keep(
        s, moeccl_comm_fail(s->comm, moecclInvalidUsage,
                            "message to rank %d is %zu bytes but the receive posted "
                            "for it is %llu bytes",
                            x->peer, x->msg_bytes, (unsigned long long)x->cts.posted));
  if (x->cts.rma > CTS_RMA_WDATA) return ofi_peer_error(s, x->peer, "CTS receive", "malformed CTS");
  x->rma = (int)x->cts.rma;
  if (x->rma == CTS_TAGGED) return ofi_pump(s, x, OP_CHUNK_SEND);
  x->raddr = x->cts.addr, x->rkey = x->cts.key;
  if (!x->mr && (s->mr_mode & FI_MR_LOCAL)) x->mr = ofi_mr_get(s, x->req->buf, x->msg_bytes);
  return ofi_pump(s, x, OP_WRITE);
}

/* Receiver: a rendezvous header arrived in the receive buffer. */
static moecclResult_t on_rts(ofi_state_t* s, ofi_xfer_t* x, size_t got) {
  moeccl_req_t* r = x->req;
  rts_t h = {0, 0};
  if (got != sizeof(h)) return ofi_peer_error(s, x->peer, "receive", "malformed rendezvous header");
  memcpy(&h, r->buf, sizeof(h));
  ofi_take_header(x, &h);
  x->cts = (cts_t){.status = CTS_OK, .posted = r->bytes};
  if (h.bytes > r->bytes) {
    x->cts.status = CTS_TRUNC; /* lets the sender fail too instead of waiting */
    ofi_submit(s, OP_CTS_SEND, x, 0, -1);
    return ofi_truncated(s, x->peer, h.bytes, r->bytes);
  }
  ofi_peer_t* pe = &s->peers[x->peer];
  if (pe->rma && !ofi_goes_tagged(s, h.bytes)) {
    MOECCL_CHECK(ofi_cts_rma_target(s, x));
    if (pe->wdata) {
      ofi_wd_list(s, x);
    } else {
      x->cts.rma = CTS_RMA_FIN;
      MOECCL_CHECK(ofi_submit(s, OP_FIN_RECV, x, 0, -1));
    }
  } else {
    MOECCL_CHECK(ofi_pump(s, x, OP_CHUNK_RECV));
  }
  return ofi_submit(s, OP_CTS_SEND, x, 0, -1);
}

/* A completion that is a peer's write with remote CQ data, not an
 * operation of ours: told by its flags, since providers fill op_context
 * differently (NULL, or 0x1 from libfabric 1.17's shm). */
static int is_remote_write(uint64_t flags) {
  return (flags & FI_REMOTE_WRITE) && (flags & FI_REMOTE_CQ_DATA);
}

/* Whether a data receive's completion is a rendezvous header. */
static int is_rts(const ofi_state_t* s, int peer, uint64_t flags, uint64_t data, uint64_t tag) {
  if (s->peers[peer].rts_data) return (flags & FI_REMOTE_CQ_DATA) && data == RTS_DATA;
  return (tag & TAG_RTS) != 0;
}

/* Receiver, early CTS: the rendezvous header (or, where the ranks disagree
 * on the call, a small message) arrived in x->rts_in. */
static moecclResult_t on_early_header(ofi_state_t* s, ofi_xfer_t* x, uint64_t flags, uint64_t data,
                                      uint64_t tag, size_t got) {
  moeccl_req_t* r = x->req;
  if (!is_rts(s, x->peer, flags, data, tag))
    return ofi_fail_keep(s,
                         moeccl_comm_fail(s->comm, moecclInvalidUsage,
                                          "rank %d sent a message of %zu bytes where this rank's "
                                          "call receives %zu bytes from it (the ranks disagree on "
                                          "the call)",
                                          x->peer, got, r->bytes));
  rts_t h = x->rts_in;
  if (got != sizeof(h)) return ofi_peer_error(s, x->peer, "receive", "malformed rendezvous header");
  if (h.bytes > r->bytes) return ofi_truncated(s, x->peer, h.bytes, r->bytes);
  ofi_take_header(x, &h);
  if (x->completed < x->nchunks) return moecclSuccess;
  r->bytes = x->msg_bytes;
  ofi_complete(s, x);
  return moecclSuccess;
}

static moecclResult_t on_abort_notice(ofi_state_t* s) {
  abort_msg_t m = s->ctl.abort_in;
  int n = s->comm->nranks;
  MOECCL_CHECK(ofi_submit(s, OP_ABORT_RECV, NULL, 0, -1));
  if (m.culprit < 0 || m.culprit >= n) m.culprit = m.from;
  return ofi_fail_keep(s,
                       moeccl_comm_peer_lost(s->comm, m.culprit,
                                             "rank %d died; communicator aborted (told by rank %d)",
                                             m.culprit, m.from));
}

/* A chunk operation finished: start the next, or finish the message. */
static moecclResult_t on_chunk(ofi_state_t* s, ofi_xfer_t* x, int kind) {
  x->completed++;
  if (x->completed < x->nchunks) return ofi_pump(s, x, kind);
  if (kind == OP_WRITE && x->rma != CTS_RMA_WDATA) return ofi_submit(s, OP_FIN_SEND, x, 0, -1);
  if (kind == OP_CHUNK_RECV) x->req->bytes = x->msg_bytes;
  ofi_complete(s, x);
  return moecclSuccess;
}

/* Receiver: a write carrying remote CQ data landed (data: make_wdata). */
static moecclResult_t on_wdata(ofi_state_t* s, uint64_t data) {
  uint64_t r = (data >> 32) & 0x7fffffffULL;
  uint32_t seq = (uint32_t)data;
  if (!(data & WDATA_MARK) || r >= (uint64_t)s->comm->nranks)
    return ofi_peer_error(s, -1, "an RMA write", "malformed remote completion data");
  ofi_xfer_t* x = s->peers[r].wd_head;
  while (x && (uint32_t)x->seq != seq) x = x->next_wd;
  if (!x) { /* its receive was cancelled (abort): nothing waits */
    INFO(NET, "ofi: write data for a message no receive waits for (rank %d, sequence %u)", (int)r,
         seq);
    return moecclSuccess;
  }
  if (++x->completed < x->nchunks) return moecclSuccess;
  x->req->bytes = x->msg_bytes;
  ofi_complete(s, x);
  return moecclSuccess;
}

/* A successful completion of op. */
static moecclResult_t on_done(ofi_state_t* s, ofi_op_t* op, const struct fi_cq_tagged_entry* e) {
  ofi_xfer_t* x = op->x;
  if (op->kind == OP_ABORT_RECV) return on_abort_notice(s);
  if (op->kind == OP_ABORT_SEND) return s->aborts_out--, moecclSuccess;
  if (op->kind == OP_HELLO_SEND || op->kind == OP_HELLO_RECV) return s->hellos_out--, moecclSuccess;
  if (!x->req) return moecclSuccess; /* cancelled meanwhile */
  switch (op->kind) {
    case OP_EAGER_SEND:
    case OP_FIN_SEND: ofi_complete(s, x); return moecclSuccess;
    case OP_CTS_RECV: return on_cts(s, x);
    case OP_WRITE:
    case OP_CHUNK_SEND:
    case OP_CHUNK_RECV: return on_chunk(s, x, op->kind);
    case OP_MSG_RECV:
      if (is_rts(s, x->peer, e->flags, e->data, e->tag)) return on_rts(s, x, e->len);
      x->req->bytes = e->len;
      ofi_complete(s, x);
      return moecclSuccess;
    case OP_FIN_RECV:
      x->req->bytes = x->msg_bytes;
      ofi_complete(s, x);
      return moecclSuccess;
    case OP_RTS_RECV: return on_early_header(s, x, e->flags, e->data, e->tag, e->len);
    default: return moecclSuccess; /* RTS and CTS sends: nothing waits on them */
  }
}

static void op_release(ofi_state_t* s, ofi_op_t* op) {
  ofi_xfer_t* x = op->x;
  op->x = NULL; /* cancel_all scans the slabs: a free op names no request */
  ofi_pool_put(&s->ops, op);
  if (x) x->ops_out--, ofi_xfer_maybe_free(s, x);
}

/* An error completion: truncation, cancellation, or a lost peer. */
static moecclResult_t on_error(ofi_state_t* s) {
  struct fi_cq_err_entry err;
  memset(&err, 0, sizeof(err));
  ssize_t n = fi_cq_readerr(s->cq, &err, 0);
  if (n == -FI_EAGAIN) return moecclSuccess;
  if (n < 0) return ofi_peer_error(s, -1, "reading the completion queue", fi_strerror((int)-n));
  ofi_op_t* op = err.op_context;
  if (!op || (err.flags & FI_REMOTE_WRITE))
    return ofi_peer_error(s, -1,
                          err.flags & FI_REMOTE_WRITE ? "a peer's RMA write" : "an operation",
                          fi_strerror(err.err));
  int kind = op->kind, peer = op->peer;
  ofi_xfer_t* x = op->x;
  size_t posted = x && x->req ? x->req->bytes : 0;
  int live = !x || x->req;
  if (kind == OP_ABORT_SEND) s->aborts_out--;
  if (kind == OP_HELLO_SEND || kind == OP_HELLO_RECV) s->hellos_out--;
  op_release(s, op);
  if (err.err == FI_ECANCELED || !live) return moecclSuccess;
  if (err.err == FI_ETRUNC && kind == OP_RTS_RECV)
    return ofi_fail_keep(s,
                         moeccl_comm_fail(s->comm, moecclInvalidUsage,
                                          "rank %d sent a message the size of neither the receive "
                                          "(%zu bytes) nor a rendezvous header (the ranks disagree "
                                          "on the call)",
                                          peer, posted));
  if (err.err == FI_ETRUNC && kind == OP_MSG_RECV) {
    if (is_rts(s, peer, err.flags, err.data,
               err.tag)) { /* even the header did not fit: tell the waiting sender */
      x->cts = (cts_t){.status = CTS_TRUNC, .posted = posted};
      ofi_submit(s, OP_CTS_SEND, x, 0, -1);
    }
    return ofi_truncated(s, peer, 0, posted);
  }
  char text[256];
  snprintf(text, sizeof(text), "%s", fi_strerror(err.err));
  if (err.prov_errno)
    snprintf(text + strlen(text), sizeof(text) - strlen(text), " (%s)",
             fi_cq_strerror(s->cq, err.prov_errno, err.err_data, NULL, 0));
  if (kind == OP_ABORT_SEND) return moecclSuccess; /* best effort */
  return ofi_peer_error(s, peer, op_names[kind], text);
}

static moecclResult_t poll_cq(ofi_state_t* s, int* progressed) {
  struct fi_cq_tagged_entry e[CQ_BATCH];
  for (int handled = 0; handled < CQ_PASS_MAX;) {
    ssize_t n = fi_cq_read(s->cq, e, CQ_BATCH);
    if (n == -FI_EAGAIN) return moecclSuccess;
    if (n == -FI_EAVAIL) {
      *progressed = 1;
      MOECCL_CHECK(on_error(s));
      continue;
    }
    if (n < 0) return ofi_peer_error(s, -1, "reading the completion queue", fi_strerror((int)-n));
    *progressed = 1;
    for (ssize_t i = 0; i < n; i++) {
      if (is_remote_write(e[i].flags)) {
        MOECCL_CHECK(on_wdata(s, e[i].data));
        continue;
      }
      ofi_op_t* op = e[i].op_context;
      moecclResult_t rc = on_done(s, op, &e[i]);
      op_release(s, op);
      if (rc != moecclSuccess) return rc;
    }
    handled += (int)n;
  }
  return moecclSuccess;
}

moecclResult_t ofi_progress(void* state, int* progressed) {
  ofi_state_t* s = state;
  if (s->failed != moecclSuccess) return s->failed;
  MOECCL_CHECK(poll_cq(s, progressed));
  return ofi_retry_backlog(s, progressed);
}

void ofi_arm(void* state) { (void)state; /* fi_trywait in wait() does the check */ }

void ofi_wait(void* state, int64_t timeout_us) {
  ofi_state_t* s = state;
  if (s->wait_fd < 0 || s->backlog) {
    usleep((useconds_t)(timeout_us < 100 ? timeout_us : 100));
    return;
  }
  struct fid* fids[1] = {&s->cq->fid};
  if (fi_trywait(s->fabric, fids, 1) != FI_SUCCESS) return; /* completions are ready */
  struct pollfd pfd = {s->wait_fd, POLLIN, 0};
  poll(&pfd, 1, (int)((timeout_us + 999) / 1000));
}

/* The provider reports lost connections through completions; peers on this
 * host are also checked in /proc (cheap).  Silent remote peers are the
 * executor's MOECCL_TIMEOUT to catch. */
moecclResult_t ofi_check_peers(void* state) {
  ofi_state_t* s = state;
  if (s->failed != moecclSuccess) return s->failed;
  moeccl_comm_t* c = s->comm;
  for (int p = 0; p < c->nranks; p++) {
    const moeccl_peer_info_t* pi = &c->peers[p];
    if (!s->peers[p].pending || pi->host_hash != c->peers[c->rank].host_hash) continue;
    if (!moeccl_process_alive(pi->pid, pi->pid_start))
      return ofi_fail_keep(s, moeccl_comm_peer_lost(c, p, "rank %d (pid %d on %s) died", p,
                                                    (int)pi->pid, pi->hostname));
  }
  return moecclSuccess;
}

/* Sends the notice to every reachable peer but the culprit, then spends at
 * most ABORT_FLUSH_S driving the provider so the notices leave (a manual-
 * progress provider sends nothing unless polled). */
void ofi_notify_abort(void* state, int culprit) {
  ofi_state_t* s = state;
  moeccl_comm_t* c = s->comm;
  s->ctl.abort_out = (abort_msg_t){culprit, c->rank};
  for (int p = 0; p < c->nranks; p++) {
    if (p == culprit || !s->peers[p].nch) continue;
    ofi_op_t* op = ofi_pool_get(s, &s->ops, 0);
    if (!op) return;
    *op = (ofi_op_t){.kind = OP_ABORT_SEND, .peer = p};
    ssize_t rc = ofi_issue(s, op);
    if (rc == 0) s->aborts_out++;
    else ofi_pool_put(&s->ops, op);
  }
  double end = moeccl_now() + ABORT_FLUSH_S;
  while (s->aborts_out > 0 && moeccl_now() < end) {
    struct fi_cq_tagged_entry e[CQ_BATCH];
    ssize_t n = fi_cq_read(s->cq, e, CQ_BATCH);
    for (ssize_t i = 0; i < n; i++) {
      if (is_remote_write(e[i].flags)) continue; /* the receives are being abandoned */
      ofi_op_t* op = e[i].op_context;
      if (op->kind == OP_ABORT_SEND) s->aborts_out--;
      op_release(s, op);
    }
    if (n == -FI_EAVAIL) on_error(s);
  }
}

/* Cancels what the provider holds for requests and forgets them; the
 * registrations of their buffers are closed so no late RMA write lands. */
void ofi_cancel_all(void* state) {
  ofi_state_t* s = state;
  for (slab_t* sl = s->ops.slabs; sl; sl = sl->next)
    for (int i = 0; i < SLAB; i++) {
      ofi_op_t* op = (ofi_op_t*)(sl->items + (size_t)i * s->ops.size);
      if (op->x && op->x->req) fi_cancel(&s->ep[op->x->ch]->fid, op);
    }
  for (slab_t* sl = s->xfers.slabs; sl; sl = sl->next)
    for (int i = 0; i < SLAB; i++) {
      ofi_xfer_t* x = (ofi_xfer_t*)(sl->items + (size_t)i * s->xfers.size);
      if (!x->req) continue;
      x->req = NULL;
      ofi_mr_drop(x->mr);
      x->mr = NULL;
    }
  for (int p = 0; p < s->comm->nranks; p++) s->peers[p].pending = 0, s->peers[p].wd_head = NULL;
}
