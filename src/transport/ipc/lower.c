/*
 * The ipc transport (ipc_int.h): lowering a device schedule -- on the host
 * (lower_begin) the descriptors of the sends are published and those of
 * the receives resolved and mapped; on the stream (lower_step) the flag
 * waits and writes and the copies of each step's two phases.
 */
#include "transport/ipc/ipc_int.h"

#include "kernels/devkern.h"
#include "kernels/reduce.h"
#include "kernels/rows.h"

static int was_exported(ipeer_t* p, uint64_t id) {
  for (int i = 0; i < p->nexported; i++)
    if (p->exported[i] == id) return 1;
  return 0;
}

/* The receiver keeps every allocation it mapped until the communicator
 * goes (it cannot know when the sender frees one), so the sender never
 * forgets what it handed over either. */
static int mark_exported(ipeer_t* p, uint64_t id) {
  if (p->nexported == p->exported_cap) {
    int cap = p->exported_cap ? 2 * p->exported_cap : 16;
    uint64_t* e = realloc(p->exported, sizeof(*e) * (size_t)cap);
    if (!e) return -1;
    p->exported = e, p->exported_cap = cap;
  }
  p->exported[p->nexported++] = id;
  return 0;
}

/* The descriptor of a send of [ptr, ptr+bytes) to local rank l; its
 * allocation is handed over the first time (a descriptor over the socket,
 * or its legacy handle in the descriptor).  0: try again (socket full). */
static int describe(ipc_state_t* s, int l, int buf, const char* ptr, uint64_t bytes, desc_t* out,
                    moecclResult_t* rc) {
  ipeer_t* p = &s->peers[l];
  memset(out, 0, sizeof(*out));
  /* one look-up per buffer and call (an all-to-all sends from one) */
  if (s->range.buf != buf || ptr < (char*)s->range.base ||
      ptr + bytes > (char*)s->range.base + s->range.size) {
    if (s->d->range(ptr, &s->range.base, &s->range.size, &s->range.id) != moecclSuccess ||
        !s->d->pointer(ptr, &s->range.device)) {
      s->range.buf = -1;
      *rc = moeccl_error(s->comm, moecclInvalidArgument,
                         "ipc: %p (a send to rank %d) is not device memory of this process", ptr,
                         p->comm_rank);
      return -1;
    }
    s->range.buf = buf;
    s->stats.range_queries++;
  }
  void* base = s->range.base;
  size_t size = s->range.size;
  uint64_t id = s->range.id;
  int device = s->range.device;
  *out = (desc_t){.id = id,
                  .off = (uint64_t)(ptr - (char*)base),
                  .bytes = bytes,
                  .alloc_bytes = size,
                  .device = device,
                  .how = HOW_KNOWN};
  if (was_exported(p, id)) return 1;
  int fd = -1;
  size_t xbytes = 0;
  if (s->d->export_fd(base, &fd, &xbytes) == moecclSuccess) {
    msg_t m = {
        .magic = MSG_MAGIC, .from = s->me, .kind = 1, .id = id, .bytes = xbytes, .device = device};
    int r = moeccl_ipc_send_msg(s, l, &m, fd);
    close(fd);
    if (r == 0) { /* its socket is full: ask it to read it */
      atomic_fetch_add_explicit(&((seg_hdr_t*)p->seg)->blocked, 1, memory_order_relaxed);
      return 0;
    }
    if (r < 0) {
      *rc = moeccl_comm_fail(s->comm, moecclRemoteError,
                             "ipc: passing a device allocation's descriptor to rank %d failed: %s",
                             p->comm_rank, strerror(errno));
      return -1;
    }
    out->how = HOW_FD, out->alloc_bytes = xbytes;
    s->stats.fds_sent++;
  } else if (s->d->ipc_export(base, out->ipc) == moecclSuccess) {
    out->how = HOW_IPC;
    s->stats.handles_sent++;
  } else {
    *rc = moeccl_error(s->comm, moecclInvalidArgument,
                       "ipc: device buffer %p (a send to rank %d) can be exported neither as a "
                       "descriptor nor by a legacy IPC handle",
                       ptr, p->comm_rank);
    return -1;
  }
  if (mark_exported(p, id) != 0) {
    *rc = moeccl_comm_fail(s->comm, moecclSystemError, "ipc: out of memory");
    return -1;
  }
  return 1;
}

static import_t* find_import(ipeer_t* p, uint64_t id) {
  for (int i = 0; i < p->nimports; i++)
    if (p->imports[i].id == id) return &p->imports[i];
  return NULL;
}

/* Reads every allocation descriptor waiting on the socket into the
 * senders' stashes.  -1: an error. */
static int drain_socket(ipc_state_t* s) {
  for (;;) {
    msg_t m;
    int fd, from, r = moeccl_ipc_recv_msg(s, &m, &fd, &from);
    if (r < 0) return -1;
    if (r == 0) break;
    ipeer_t* q = &s->peers[from];
    if (m.kind != 1) {
      close(fd);
      continue;
    }
    if (q->nstash == q->stash_cap) {
      int cap = q->stash_cap ? 2 * q->stash_cap : 8;
      stash_t* st = realloc(q->stash, sizeof(*st) * (size_t)cap);
      if (!st) return close(fd), -1;
      q->stash = st, q->stash_cap = cap;
    }
    q->stash[q->nstash++] = (stash_t){m.id, m.bytes, fd, m.device};
  }
  return 0;
}

/* Takes the descriptor of allocation id from l's stash, reading the socket
 * into the stashes first.  -1: an error; 0: not there yet; 1: *e. */
static int take_stashed(ipc_state_t* s, int l, uint64_t id, stash_t* e) {
  if (drain_socket(s) < 0) return -1;
  ipeer_t* p = &s->peers[l];
  for (int i = 0; i < p->nstash; i++)
    if (p->stash[i].id == id) {
      *e = p->stash[i];
      p->stash[i] = p->stash[--p->nstash];
      return 1;
    }
  return 0;
}

/* The sender's memory a descriptor names, mapped here.  0: its allocation's
 * file descriptor has not arrived yet. */
static int resolve(ipc_state_t* s, int l, const desc_t* e, const char** src, moecclResult_t* rc) {
  ipeer_t* p = &s->peers[l];
  import_t* im = find_import(p, e->id);
  if (im && e->how == HOW_FD) { /* handed over again (the sender's list forgot it) */
    stash_t st;
    if (take_stashed(s, l, e->id, &st) > 0) close(st.fd);
  }
  if (!im && e->how == HOW_KNOWN) { /* we dropped it? the sender thinks we have it */
    *rc =
        moeccl_comm_fail(s->comm, moecclInternalError,
                         "ipc: rank %d's message names allocation %llu, which it never handed over",
                         p->comm_rank, (unsigned long long)e->id);
    return -1;
  }
  if (!im) {
    void* base = NULL;
    moecclResult_t r;
    int device = s->d->current();
    if (e->how == HOW_FD) {
      stash_t st;
      int got = take_stashed(s, l, e->id, &st);
      if (got <= 0) {
        if (got < 0)
          *rc = moeccl_comm_fail(s->comm, moecclSystemError, "ipc: socket: %s", strerror(errno));
        return got;
      }
      r = s->d->import_fd(st.fd, st.bytes, device, &base);
      close(st.fd);
    } else {
      r = moeccl_ipc_open(s->d, p->pid, e->id, e->ipc, &base);
    }
    if (r != moecclSuccess) {
      *rc = moeccl_comm_fail(s->comm, r,
                             "ipc: mapping rank %d's device allocation (%llu bytes) failed",
                             p->comm_rank, (unsigned long long)e->alloc_bytes);
      return -1;
    }
    if (p->nimports == p->imports_cap) {
      int cap = p->imports_cap ? 2 * p->imports_cap : 8;
      import_t* a = realloc(p->imports, sizeof(*a) * (size_t)cap);
      if (!a) {
        if (e->how == HOW_IPC) moeccl_ipc_unref(s->d, base);
        else s->d->unimport(base, e->alloc_bytes);
        *rc = moeccl_comm_fail(s->comm, moecclSystemError, "ipc: out of memory");
        return -1;
      }
      p->imports = a, p->imports_cap = cap;
    }
    im = &p->imports[p->nimports++];
    *im = (import_t){e->id, base, e->alloc_bytes, e->how == HOW_IPC};
    s->stats.imports++;
  }
  if (e->off > im->bytes || e->bytes > im->bytes - e->off) {
    *rc = moeccl_comm_fail(s->comm, moecclInternalError,
                           "ipc: rank %d's message lies outside its allocation", p->comm_rank);
    return -1;
  }
  *src = (const char*)im->base + e->off;
  return 1;
}

static char* buf_at(const moeccl_sched_t* s, uint32_t b, uint64_t off) {
  return (char*)s->bufs[b] + off;
}

/* The local index of comm rank r (a peer this transport reaches). */
static int local_of(const ipc_state_t* s, int r) { return s->comm->peer_local_index[r]; }

/* Publishes SEND op i; 0: no room yet (the receiver's ring is full, or
 * its socket). */
static int publish(ipc_state_t* s, const moeccl_sched_t* sc, int i, moecclResult_t* rc) {
  const moeccl_sched_op_t* op = &sc->ops[i];
  int l = local_of(s, op->peer);
  ipeer_t* p = &s->peers[l];
  ring_t* ring = ring_of(s->peers[s->me].seg, s->nlocal, l);
  uint64_t head = atomic_load_explicit(&ring->head, memory_order_relaxed);
  if (head - atomic_load_explicit(&ring->tail, memory_order_acquire) >= RING) return 0;
  desc_t e;
  /* a gathered send hands over the whole buffer its rows are picked from:
   * the receiver's program reads them there, nothing is packed */
  int gathered = (op->flags & MOECCL_OPF_ROWS) != 0;
  uint64_t bytes = gathered ? sc->rows[op->prog].span : op->bytes;
  int r = describe(s, l, (int)op->src_buf, buf_at(sc, op->src_buf, op->src_off), bytes, &e, rc);
  if (r <= 0) return r;
  e.gathered = gathered ? op->bytes : 0;
  ring->ent[head % RING] = e;
  atomic_store_explicit(&ring->head, head + 1, memory_order_release);
  s->match[i] = (match_t){NULL, op->bytes, __atomic_add_fetch(&p->sent, 1, __ATOMIC_RELAXED), 0};
  return 1;
}

/* Matches RECV op i with its sender's next descriptor; 0: not there yet. */
static int consume(ipc_state_t* s, const moeccl_sched_t* sc, int i, moecclResult_t* rc) {
  const moeccl_sched_op_t* op = &sc->ops[i];
  int l = local_of(s, op->peer);
  ipeer_t* p = &s->peers[l];
  ring_t* ring = ring_of(p->seg, s->nlocal, s->me);
  uint64_t tail = atomic_load_explicit(&ring->tail, memory_order_relaxed);
  if (atomic_load_explicit(&ring->head, memory_order_acquire) == tail) return 0;
  const desc_t* e = &ring->ent[tail % RING];
  const char* src = NULL;
  int r = resolve(s, l, e, &src, rc);
  if (r <= 0) return r;
  uint64_t bytes = e->gathered ? e->gathered : e->bytes;
  uint64_t span = e->gathered ? e->bytes : 0;
  int consuming = (op->flags & MOECCL_OPF_ROWS) != 0;
  if (bytes > op->bytes || (!sc->inexact && bytes != op->bytes) ||
      (e->gathered && (!consuming || !sc->rows[op->prog].terms_idx))) {
    /* the flags still go on the stream (the sender's stream waits for them) */
    *rc = moeccl_comm_fail(s->comm, moecclInvalidArgument,
                           "ipc: rank %d sent %llu bytes%s to a receive of %llu%s: the ranks' "
                           "calls disagree",
                           p->comm_rank, (unsigned long long)bytes,
                           e->gathered ? " (rows to pick)" : "", (unsigned long long)op->bytes,
                           consuming ? " (rows to consume)" : "");
    bytes = 0;
  }
  s->match[i] = (match_t){src, bytes, __atomic_add_fetch(&p->recvd, 1, __ATOMIC_RELAXED), span};
  atomic_store_explicit(&ring->tail, tail + 1, memory_order_release);
  return 1;
}

/* Whether peer l's process still runs; a dead one fails the communicator. */
static moecclResult_t check_alive(ipc_state_t* s, int l) {
  ipeer_t* p = &s->peers[l];
  if (moeccl_process_alive(p->pid, p->pid_start)) return moecclSuccess;
  return moeccl_comm_peer_lost(s->comm, p->comm_rank, "rank %d (pid %d) died", p->comm_rank,
                               (int)p->pid);
}

/* A message: a send, or a receive (copied or reduced), with a peer. */
static int is_peer_op(const moeccl_sched_op_t* op, int rank) {
  return (op->type == MOECCL_OP_SEND || op->type == MOECCL_OP_RECV ||
          op->type == MOECCL_OP_RECV_REDUCE) &&
         op->peer != rank;
}

moecclResult_t moeccl_ipc_lower_begin(void* state, const moeccl_sched_t* sc) {
  ipc_state_t* s = state;
  int n = sc->nops, rank = s->comm->rank;
  if (n > s->match_cap) {
    match_t* m = realloc(s->match, sizeof(*m) * (size_t)n);
    if (!m) return moeccl_error(s->comm, moecclSystemError, "out of memory");
    s->match = m, s->match_cap = n;
  }
  int lost = atomic_load(&s->lost);
  if (lost)
    return moeccl_comm_peer_lost(s->comm, lost - 1,
                                 "rank %d (pid %d) died with device work queued with this rank",
                                 lost - 1, (int)s->comm->peers[lost - 1].pid);
  s->stats.calls++;
  s->range.buf = -1;
  moeccl_ipc_announce_freed(s);
  moeccl_ipc_drop_freed(s);
  /* Every send first, then the receives; a full ring or socket lets the
   * receives go on meanwhile, so two ranks far ahead of each other still
   * meet. */
  int si = 0, ri = 0, waited = 0;
  double deadline = 0, check = 0;
  moecclResult_t rc = moecclSuccess;
  while (rc == moecclSuccess) {
    int moved = 0, r = 1;
    for (; si < n && r > 0 && rc == moecclSuccess; si += r > 0) {
      const moeccl_sched_op_t* op = &sc->ops[si];
      if (!is_peer_op(op, rank) || op->type != MOECCL_OP_SEND) continue;
      r = publish(s, sc, si, &rc);
      moved |= r > 0;
    }
    r = 1;
    for (; ri < n && r > 0 && rc == moecclSuccess; ri += r > 0) {
      const moeccl_sched_op_t* op = &sc->ops[ri];
      if (!is_peer_op(op, rank) || op->type == MOECCL_OP_SEND) continue;
      r = consume(s, sc, ri, &rc);
      moved |= r > 0;
    }
    if (rc != moecclSuccess || (si == n && ri == n)) break;
    if (moved) continue;
    /* A peer has not made its side of the call yet (its host): wait.  A
     * sender may be blocked on this rank's full socket (a call that hands
     * over more allocations than the socket queues: two per peer for
     * AllReduce, from 6 peers on) while this rank waits for another
     * blocked on it: empty the socket when a sender says so. */
    uint64_t blocked = atomic_load_explicit(&((seg_hdr_t*)s->peers[s->me].seg)->blocked,
                                            memory_order_relaxed);
    if (blocked != s->blocked_seen) {
      s->blocked_seen = blocked;
      if (drain_socket(s) < 0) {
        rc = moeccl_comm_fail(s->comm, moecclSystemError, "ipc: socket: %s", strerror(errno));
        break;
      }
      continue;
    }
    double now = moeccl_now();
    if (!waited)
      waited = 1, deadline = now + s->comm->timeout, check = now + 0.1, s->stats.host_waits++;
    const moeccl_sched_op_t* op = &sc->ops[ri < n ? ri : si];
    int l = local_of(s, op->peer);
    if (now > check) {
      rc = check_alive(s, l);
      check = now + 0.1;
    } else if (now > deadline) {
      rc = moeccl_comm_peer_lost(s->comm, op->peer,
                                 "ipc: rank %d made no matching call within %.0f s (waiting for "
                                 "its side of a device call)",
                                 op->peer, s->comm->timeout);
    } else if (s->comm->aborting) {
      rc = moeccl_error(s->comm, moecclInvalidUsage, "communicator was aborted");
    } else {
      sched_yield();
      if (now - (deadline - s->comm->timeout) > 0.002) usleep(50);
    }
  }
  return rc;
}

/* The slot of stream's passed flag (the last one is shared past
 * STREAM_SLOTS streams: destroy may then wait its timeout for it). */
static int stream_slot(ipc_state_t* s, void* stream) {
  for (int k = 0; k < s->nstreams; k++)
    if (s->streams[k].stream == stream) return k;
  if (s->nstreams == STREAM_SLOTS) return STREAM_SLOTS - 1;
  s->streams[s->nstreams].stream = stream;
  return s->nstreams++;
}

/* Room for n copies (or fold operands) in the state's arrays. */
static moecclResult_t grow_copies(ipc_state_t* s, int n) {
  if (n <= s->copies_cap) return moecclSuccess;
  int cap = s->copies_cap ? 2 * s->copies_cap : 16;
  if (cap < n) cap = n;
  void** d = realloc(s->copy_dst, sizeof(*d) * (size_t)cap);
  if (d) s->copy_dst = d;
  const void** sr = realloc(s->copy_src, sizeof(*sr) * (size_t)cap);
  if (sr) s->copy_src = sr;
  size_t* b = realloc(s->copy_bytes, sizeof(*b) * (size_t)cap);
  if (b) s->copy_bytes = b;
  if (!d || !sr || !b) return moeccl_error(s->comm, moecclSystemError, "out of memory");
  s->copies_cap = cap;
  return moecclSuccess;
}

/* The RECV_REDUCE op after i in [i+1, end) that goes on folding into op
 * i's destination (its local operand is that destination, only sends
 * between them), or -1. */
static int next_fold(const moeccl_sched_t* sc, int i, int end, int rank) {
  const moeccl_sched_op_t* op = &sc->ops[i];
  char* dst = buf_at(sc, op->dst_buf, op->dst_off);
  for (int j = i + 1; j < end; j++) {
    const moeccl_sched_op_t* q = &sc->ops[j];
    if (q->type == MOECCL_OP_SEND) continue;
    if (q->type != MOECCL_OP_RECV_REDUCE || !is_peer_op(q, rank) || q->bytes != op->bytes ||
        (q->flags & MOECCL_OPF_PRE_A) || buf_at(sc, q->dst_buf, q->dst_off) != dst ||
        buf_at(sc, q->src_buf, q->src_off) != dst)
      return -1;
    return j;
  }
  return -1;
}

/* The reducing receives of ops [begin, end), straight out of the senders'
 * mapped memory (no copy): each run of them folding into one destination
 * (the direct algorithm's reduce-scatter: own block, then each peer's in
 * turn) is one kernel launch on the stream, the same order of operations
 * as the host path's. */
static moecclResult_t reduce_received(ipc_state_t* s, const moeccl_sched_t* sc, int begin, int end,
                                      void* stream) {
  int rank = s->comm->rank;
  for (int i = begin; i < end; i++) {
    const moeccl_sched_op_t* op = &sc->ops[i];
    if (op->type != MOECCL_OP_RECV_REDUCE || !is_peer_op(op, rank)) continue;
    int k = 0, last = i;
    uint32_t raw = (op->flags & MOECCL_OPF_PRE_A) ? 1u : 0u;
    MOECCL_CHECK(grow_copies(s, 1));
    s->copy_src[k++] = buf_at(sc, op->src_buf, op->src_off);
    /* up to the raw mask's width; a longer run goes on in a next launch,
     * from the destination */
    for (int j = i; j >= 0 && k < 32; j = next_fold(sc, j, end, rank)) {
      const moeccl_sched_op_t* q = &sc->ops[j];
      if (s->match[j].bytes != q->bytes)
        return moeccl_comm_fail(s->comm, moecclInternalError,
                                "ipc: a reducing receive from rank %d has no matching message",
                                q->peer);
      MOECCL_CHECK(grow_copies(s, k + 1));
      if (q->flags & MOECCL_OPF_PRE_B) raw |= 1u << k;
      s->copy_src[k++] = s->match[j].src;
      last = j;
    }
    MOECCL_CHECK(moeccl_devkern_fold_async(sc->red, buf_at(sc, op->dst_buf, op->dst_off),
                                           s->copy_src, k, raw, op->bytes / sc->red->elem_size,
                                           stream));
    i = last;
  }
  return moecclSuccess;
}

/* Whether the rows program p's terms pick from a buffer of span bytes. */
static int rows_within(const moeccl_rows_t* p, const moeccl_row_term_t* terms, uint64_t span) {
  moeccl_rows_t q = *p;
  q.terms = terms;
  uint32_t lo, hi;
  moeccl_rows_span(&q, MOECCL_ROWS_FIELD_SRC, &lo, &hi);
  size_t rb = moeccl_rows_row_bytes(p);
  return lo > hi || ((uint64_t)hi + 1) * rb <= span;
}

/* The consuming receives of ops [begin, end) (MOECCL_OPF_ROWS: the MoE
 * dispatch's expansion, the combine's sums), each one launch of its row
 * program reading the sender's mapped memory: the message, or for a
 * gathered one the sender's whole buffer, whose rows the program's
 * terms_idx pick.  In op order on the stream, as the host path runs the
 * adding ones, so the sums come out the same. */
static moecclResult_t rows_received(ipc_state_t* s, const moeccl_sched_t* sc, int begin, int end,
                                    void* stream) {
  int rank = s->comm->rank;
  for (int i = begin; i < end; i++) {
    const moeccl_sched_op_t* op = &sc->ops[i];
    if (op->type != MOECCL_OP_RECV || !(op->flags & MOECCL_OPF_ROWS) || !is_peer_op(op, rank))
      continue;
    const moeccl_rows_t* p = &sc->rows[op->prog];
    const match_t* m = &s->match[i];
    const moeccl_row_term_t* terms = m->span ? p->terms_idx : p->terms;
    if (m->bytes != op->bytes || !rows_within(p, terms, m->span ? m->span : m->bytes))
      return moeccl_comm_fail(s->comm, moecclInternalError,
                              "ipc: a consuming receive from rank %d has no matching message, "
                              "or rows outside it",
                              op->peer);
    const void* aux = p->aux_buf == UINT32_MAX ? NULL : buf_at(sc, p->aux_buf, p->aux_off);
    MOECCL_CHECK(moeccl_devkern_rows_async(p, terms, buf_at(sc, p->out_buf, p->out_off), m->src,
                                           aux, sc->arena, stream));
  }
  return moecclSuccess;
}

moecclResult_t moeccl_ipc_lower_step(void* state, const moeccl_sched_t* sc, int step, int phase,
                                     void* stream) {
  ipc_state_t* s = state;
  int begin = step ? sc->step_end[step - 1] : 0, end = sc->step_end[step], rank = s->comm->rank;
  int L = s->nlocal;
  uint64_t *last_send = s->agg, *last_recv = s->agg + L;
  memset(s->agg, 0, 2 * (size_t)L * sizeof(*s->agg));
  for (int i = begin; i < end; i++) {
    const moeccl_sched_op_t* op = &sc->ops[i];
    if (!is_peer_op(op, rank)) continue;
    int l = local_of(s, op->peer);
    if (op->type == MOECCL_OP_SEND) last_send[l] = s->match[i].count;
    else last_recv[l] = s->match[i].count;
  }
  char* mine = s->peers[s->me].seg;
  int k = 0;
  /* phase 0: my sends ready, wait for my senders'; phase 1: my receives
   * read, wait for my readers.  Writes first, so two ranks that wait on
   * each other both get there. */
  for (int l = 0; l < L; l++) {
    uint64_t v = phase == 0 ? last_send[l] : last_recv[l];
    if (!v) continue;
    flag_t* f = phase == 0 ? ready_of(s->peers[l].seg, s->me) : done_of(s->peers[l].seg, L, s->me);
    s->memops[k++] = (moeccl_dev_memop_t){dev_addr(s, l, f), v, 0};
  }
  for (int l = 0; l < L; l++) {
    uint64_t v = phase == 0 ? last_recv[l] : last_send[l];
    if (!v) continue;
    flag_t* f = phase == 0 ? ready_of(mine, l) : done_of(mine, L, l);
    s->memops[k++] = (moeccl_dev_memop_t){dev_addr(s, s->me, f), v, 1};
  }
  if (phase == 1 && step == sc->nsteps - 1) { /* the call passed: destroy may go on */
    int slot = stream_slot(s, stream);
    s->memops[k++] = (moeccl_dev_memop_t){dev_addr(s, s->me, passed_of(mine, L, slot)),
                                          ++s->streams[slot].lowered, 0};
  }
  for (int i = 0; i < k; i += MOECCL_DEV_MEMOPS_MAX) {
    int c = k - i < MOECCL_DEV_MEMOPS_MAX ? k - i : MOECCL_DEV_MEMOPS_MAX;
    MOECCL_CHECK(s->d->mem_ops(stream, s->memops + i, c));
    s->stats.batches++;
  }
  s->stats.memops += (uint64_t)k;
  if (phase != 0) return moecclSuccess;
  int c = 0;
  for (int i = begin; i < end; i++) {
    const moeccl_sched_op_t* op = &sc->ops[i];
    if (!is_peer_op(op, rank) || op->type != MOECCL_OP_RECV || !s->match[i].bytes ||
        (op->flags & MOECCL_OPF_ROWS))
      continue;
    MOECCL_CHECK(grow_copies(s, c + 1));
    s->copy_dst[c] = buf_at(sc, op->dst_buf, op->dst_off);
    s->copy_src[c] = s->match[i].src;
    s->copy_bytes[c++] = s->match[i].bytes;
  }
  if (c) MOECCL_CHECK(s->d->copy_batch(s->copy_dst, s->copy_src, s->copy_bytes, c, stream));
  s->stats.copies += (uint64_t)c;
  s->stats.copy_calls += c > 0;
  MOECCL_CHECK(reduce_received(s, sc, begin, end, stream));
  return rows_received(s, sc, begin, end, stream);
}
