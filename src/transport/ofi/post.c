/*
 * libfabric transport (ofi.h): posting requests (eager sends, rendezvous
 * headers, early CTS) and issuing the operations they need (tagged sends
 * and receives, RMA writes), with a backlog for what the provider cannot
 * take yet.
 */
#include "transport/ofi/ofi.h"

static ssize_t issue_write(ofi_state_t* s, ofi_op_t* op) {
  ofi_xfer_t* x = op->x;
  size_t off = (size_t)op->idx * x->chunk;
  struct iovec iov = {(char*)x->req->buf + off, chunk_len(x, op->idx)};
  void* desc = ofi_mr_desc(x->mr);
  struct fi_rma_iov rma = {x->raddr + off, iov.iov_len, x->rkey};
  struct fi_msg_rma msg = {.msg_iov = &iov,
                           .desc = &desc,
                           .iov_count = 1,
                           .addr = addr_of(s, x),
                           .rma_iov = &rma,
                           .rma_iov_count = 1,
                           .context = op};
  if (x->rma == CTS_RMA_WDATA) { /* the receiver counts remote completions */
    msg.data = make_wdata(s->comm->rank, x->seq);
    return fi_writemsg(ep_of(s, x), &msg, FI_COMPLETION | FI_REMOTE_CQ_DATA);
  }
  /* FIN must not overtake the data: delivery complete means the data is
   * visible at the target when this write completes here. */
  uint64_t flags = FI_COMPLETION | (s->delivery_complete ? FI_DELIVERY_COMPLETE : 0);
  ssize_t rc = fi_writemsg(ep_of(s, x), &msg, flags);
  if (s->delivery_complete && (rc == -FI_EBADFLAGS || rc == -FI_ENOSYS || rc == -FI_EOPNOTSUPP)) {
    /* Then FIN relies on the provider's send-after-write order. */
    INFO(NET, "ofi: provider refuses FI_DELIVERY_COMPLETE writes (%s)", fi_strerror((int)-rc));
    s->delivery_complete = 0;
    rc = fi_writemsg(ep_of(s, x), &msg, FI_COMPLETION);
  }
  return rc;
}

/* Calls the libfabric function for op.  Returns 0, -FI_EAGAIN, or an error. */
ssize_t ofi_issue(ofi_state_t* s, ofi_op_t* op) {
  ofi_xfer_t* x = op->x;
  moeccl_req_t* r = x ? x->req : NULL;
  if (x && !r) return -FI_ECANCELED;
  uint64_t seq = x ? x->seq : 0;
  int rts_data = x && s->peers[x->peer].rts_data;
  switch (op->kind) {
    case OP_EAGER_SEND:
      return fi_tsend(ep_of(s, x), r->buf, r->bytes, ofi_mr_desc(x->mr), addr_of(s, x),
                      make_tag(K_DATA, seq, 0), op);
    case OP_RTS_SEND:
      if (rts_data)
        return fi_tsenddata(ep_of(s, x), &x->rts_out, sizeof(x->rts_out), x->ctrl_desc, RTS_DATA,
                            addr_of(s, x), make_tag(K_DATA, seq, 0), op);
      return fi_tsend(ep_of(s, x), &x->rts_out, sizeof(x->rts_out), x->ctrl_desc, addr_of(s, x),
                      make_tag(K_DATA, seq, 0) | TAG_RTS, op);
    case OP_CTS_RECV:
      return fi_trecv(ep_of(s, x), &x->cts, sizeof(x->cts), x->ctrl_desc, addr_of(s, x),
                      make_tag(K_CTS, seq, 0), 0, op);
    case OP_WRITE: return issue_write(s, op);
    case OP_FIN_SEND:
      return fi_tsend(ep_of(s, x), &x->fin, sizeof(x->fin), x->ctrl_desc, addr_of(s, x),
                      make_tag(K_FIN, seq, 0), op);
    case OP_CHUNK_SEND:
      return fi_tsend(ep_of(s, x), (char*)r->buf + (size_t)op->idx * x->chunk,
                      chunk_len(x, op->idx), ofi_mr_desc(x->mr), addr_of(s, x),
                      make_tag(K_CHUNK, seq, op->idx), op);
    case OP_MSG_RECV:
      return fi_trecv(ep_of(s, x), r->buf, r->bytes, ofi_mr_desc(x->mr), addr_of(s, x),
                      make_tag(K_DATA, seq, 0), rts_data ? 0 : TAG_RTS, op);
    case OP_CTS_SEND:
      return fi_tsend(ep_of(s, x), &x->cts, sizeof(x->cts), x->ctrl_desc, addr_of(s, x),
                      make_tag(K_CTS, seq, 0), op);
    case OP_FIN_RECV:
      return fi_trecv(ep_of(s, x), &x->fin, sizeof(x->fin), x->ctrl_desc, addr_of(s, x),
                      make_tag(K_FIN, seq, 0), 0, op);
    case OP_CHUNK_RECV:
      return fi_trecv(ep_of(s, x), (char*)r->buf + (size_t)op->idx * x->chunk,
                      chunk_len(x, op->idx), ofi_mr_desc(x->mr), addr_of(s, x),
                      make_tag(K_CHUNK, seq, op->idx), 0, op);
    case OP_ABORT_RECV:
      return fi_trecv(s->ep[0], &s->ctl.abort_in, sizeof(s->ctl.abort_in),
                      s->ctl_mr ? fi_mr_desc(s->ctl_mr) : NULL, FI_ADDR_UNSPEC,
                      make_tag(K_ABORT, 0, 0), 0, op);
    case OP_ABORT_SEND:
      return fi_tsend(s->ep[0], &s->ctl.abort_out, sizeof(s->ctl.abort_out),
                      s->ctl_mr ? fi_mr_desc(s->ctl_mr) : NULL, s->peers[op->peer].addr[0],
                      make_tag(K_ABORT, 0, 0), op);
    case OP_HELLO_SEND:
      return fi_tsend(s->ep[0], &s->ctl.hello_out, sizeof(s->ctl.hello_out),
                      s->ctl_mr ? fi_mr_desc(s->ctl_mr) : NULL, s->peers[op->peer].addr[0],
                      make_tag(K_HELLO, 0, 0), op);
    case OP_HELLO_RECV:
      return fi_trecv(s->ep[0], &s->ctl.hello_in, sizeof(s->ctl.hello_in),
                      s->ctl_mr ? fi_mr_desc(s->ctl_mr) : NULL, s->peers[op->peer].addr[0],
                      make_tag(K_HELLO, 0, 0), 0, op);
    case OP_RTS_RECV:
      return fi_trecv(ep_of(s, x), &x->rts_in, sizeof(x->rts_in), x->ctrl_desc, addr_of(s, x),
                      make_tag(K_DATA, seq, 0), rts_data ? 0 : TAG_RTS, op);
  }
  return -FI_EINVAL;
}

static void backlog_push(ofi_state_t* s, ofi_op_t* op) {
  op->next = NULL;
  if (s->backlog_tail) s->backlog_tail->next = op;
  else s->backlog = op;
  s->backlog_tail = op;
}

/* Posts an operation of x (or of the state, x NULL); a full provider queue
 * (-FI_EAGAIN) parks it in the backlog that progress() retries. */
moecclResult_t ofi_submit(ofi_state_t* s, int kind, ofi_xfer_t* x, uint32_t idx, int peer) {
  ofi_op_t* op = ofi_pool_get(s, &s->ops, 0);
  if (!op) return moeccl_error(s->comm, moecclSystemError, "ofi: out of memory for operations");
  *op = (ofi_op_t){.kind = kind, .x = x, .idx = idx, .peer = x ? x->peer : peer};
  if (x) x->ops_out++;
  ssize_t rc = ofi_issue(s, op);
  if (transient(rc)) return backlog_push(s, op), moecclSuccess;
  if (rc == 0) return moecclSuccess;
  if (x) x->ops_out--;
  int to = op->peer;
  op->x = NULL;
  ofi_pool_put(&s->ops, op);
  return ofi_peer_error(s, to, op_names[kind], fi_strerror((int)-rc));
}

moecclResult_t ofi_retry_backlog(ofi_state_t* s, int* progressed) {
  while (s->backlog) {
    ofi_op_t* op = s->backlog;
    ssize_t rc = ofi_issue(s, op);
    if (transient(rc)) return moecclSuccess;
    s->backlog = op->next;
    if (!s->backlog) s->backlog_tail = NULL;
    *progressed = 1;
    if (rc == 0) continue;
    if (op->x) op->x->ops_out--;
    int peer = op->peer, kind = op->kind;
    op->x = NULL;
    ofi_pool_put(&s->ops, op);
    if (rc == -FI_ECANCELED) continue;
    return ofi_peer_error(s, peer, op_names[kind], fi_strerror((int)-rc));
  }
  return moecclSuccess;
}

void ofi_xfer_maybe_free(ofi_state_t* s, ofi_xfer_t* x) {
  if (x->req || x->ops_out > 0) return;
  ofi_mr_put(x->mr);
  x->mr = NULL;
  ofi_pool_put(&s->xfers, x);
}

/* Takes x off its peer's write-data list, where it is. */
static void wd_unlink(ofi_state_t* s, ofi_xfer_t* x) {
  for (ofi_xfer_t** p = &s->peers[x->peer].wd_head; *p; p = &(*p)->next_wd)
    if (*p == x) {
      *p = x->next_wd;
      x->next_wd = NULL;
      return;
    }
}

void ofi_complete(ofi_state_t* s, ofi_xfer_t* x) {
  moeccl_req_t* r = x->req;
  if (x->rma == CTS_RMA_WDATA && r->type == MOECCL_REQ_RECV) wd_unlink(s, x);
  x->req = NULL;
  s->peers[x->peer].pending--;
  r->done = 1;
  ofi_xfer_maybe_free(s, x);
}

static uint32_t count_chunks(size_t bytes, size_t chunk) {
  return (uint32_t)((bytes + chunk - 1) / chunk);
}

/* Whether the receiver asks for a message of this size in tagged pieces
 * although RMA works (tagged_min; the pair shares the provider). */
int ofi_goes_tagged(const ofi_state_t* s, size_t bytes) {
  return s->tagged_min && bytes >= s->tagged_min;
}

/* Receiver: registers the receive buffer and puts its address and key in
 * the CTS. */
moecclResult_t ofi_cts_rma_target(ofi_state_t* s, ofi_xfer_t* x) {
  moeccl_req_t* r = x->req;
  if (!x->mr) x->mr = ofi_mr_get(s, r->buf, r->bytes);
  if (!x->mr) return moeccl_error(s->comm, moecclSystemError, "ofi: registration failed");
  x->cts.key = fi_mr_key(x->mr->mr);
  x->cts.addr = (s->mr_mode & FI_MR_VIRT_ADDR) ? (uint64_t)(uintptr_t)r->buf
                                               : (uint64_t)((uintptr_t)r->buf - x->mr->addr);
  return moecclSuccess;
}

/* Receiver: x waits for write data, listed under its peer before the CTS
 * leaves (no write can come first). */
void ofi_wd_list(ofi_state_t* s, ofi_xfer_t* x) {
  ofi_peer_t* pe = &s->peers[x->peer];
  x->cts.rma = x->rma = CTS_RMA_WDATA;
  x->completed = 0;
  x->next_wd = pe->wd_head;
  pe->wd_head = x;
}

/* Receiver: the size and pieces a rendezvous header announces. */
void ofi_take_header(ofi_xfer_t* x, const rts_t* h) {
  x->msg_bytes = h->bytes, x->chunk = h->chunk ? h->chunk : 1;
  x->nchunks = count_chunks(x->msg_bytes, x->chunk);
}

/* Receiver: the CTS for a receive whose size is known goes at once (see
 * early CTS above); the header comes into x->rts_in. */
static moecclResult_t post_early(ofi_state_t* s, ofi_xfer_t* x) {
  x->cts = (cts_t){.status = CTS_OK, .posted = x->req->bytes};
  MOECCL_CHECK(ofi_cts_rma_target(s, x));
  ofi_wd_list(s, x);
  x->nchunks = UINT32_MAX; /* until the header tells; writes are counted meanwhile */
  MOECCL_CHECK(ofi_submit(s, OP_RTS_RECV, x, 0, -1));
  return ofi_submit(s, OP_CTS_SEND, x, 0, -1);
}

moecclResult_t ofi_post(void* state, moeccl_req_t* r) {
  ofi_state_t* s = state;
  if (s->failed != moecclSuccess) return s->failed;
  ofi_peer_t* p = &s->peers[r->peer];
  if (!p->nch) return moecclInternalError;
  ofi_xfer_t* x = ofi_pool_get(s, &s->xfers, 1);
  if (!x) return moeccl_error(s->comm, moecclSystemError, "ofi: out of memory for requests");
  int send = r->type == MOECCL_REQ_SEND;
  *x = (ofi_xfer_t){.req = r, .peer = r->peer, .seq = send ? p->send_seq++ : p->recv_seq++};
  x->ch = (int)(x->seq % (uint64_t)p->nch);
  x->ctrl_desc = ofi_pool_desc(&s->xfers, x);
  r->aux = (uint64_t)(uintptr_t)x;
  r->progress = 0;
  p->pending++;
  if (s->mr_mode & FI_MR_LOCAL) {
    x->mr = ofi_mr_get(s, r->buf, r->bytes);
    if (!x->mr)
      return moeccl_error(s->comm, moecclSystemError, "ofi: no registration for %zu bytes",
                          r->bytes);
  }
  if (!send) {
    if (r->exact && r->bytes > p->eager && p->wdata && !ofi_goes_tagged(s, r->bytes))
      return post_early(s, x);
    return ofi_submit(s, OP_MSG_RECV, x, 0, -1);
  }
  if (r->bytes <= p->eager) return ofi_submit(s, OP_EAGER_SEND, x, 0, -1);
  x->msg_bytes = r->bytes;
  x->chunk = s->chunk;
  if (x->msg_bytes / x->chunk >= MAX_CHUNKS) x->chunk = x->msg_bytes / (MAX_CHUNKS - 1) + 1;
  x->nchunks = count_chunks(x->msg_bytes, x->chunk);
  x->rts_out = (rts_t){x->msg_bytes, x->chunk};
  MOECCL_CHECK(ofi_submit(s, OP_CTS_RECV, x, 0, -1));
  return ofi_submit(s, OP_RTS_SEND, x, 0, -1);
}

/* Keeps up to WINDOW chunk operations of x in flight. */
moecclResult_t ofi_pump(ofi_state_t* s, ofi_xfer_t* x, int kind) {
  while (x->posted < x->nchunks && x->posted - x->completed < WINDOW)
    MOECCL_CHECK(ofi_submit(s, kind, x, x->posted++, -1));
  return moecclSuccess;
}
