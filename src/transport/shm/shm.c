/*
 * Shared memory (shm_int.h): the transport's ops table, posting, the eager
 * slots (a message of up to one slot is copied in and out), the progress
 * of every channel's queues, and waiting on the doorbell.
 */
#include <limits.h>
#include <string.h>

#include "transport/shm/shm_int.h"
#include "base/param.h"

/* Whether send r goes by single copy, decided once per send (a pass asks
 * several times; large.c decides). */
static inline int moeccl_shm_is_rndv(const shm_state_t* s, moeccl_req_t* r) {
  if (!(r->aux & AUX_DECIDED))
    r->aux |= AUX_DECIDED | (moeccl_shm_decide_rndv(s, r) ? AUX_RNDV : 0);
  return (r->aux & AUX_RNDV) != 0;
}

static void enqueue(moeccl_req_t** head, moeccl_req_t** tail, moeccl_req_t* r) {
  r->next = NULL;
  if (*tail) (*tail)->next = r;
  else *head = r;
  *tail = r;
}

/* This rank has read the slot of channel ch at recv_seq: hand it back to
 * the sender (whose send may complete by it). */
static void free_slot(shm_state_t* s, int l, shm_peer_t* p, int ch) {
  p->recv_seq++;
  atomic_store_explicit(&s->ctrl[ch].tail, p->recv_seq, memory_order_release);
  moeccl_shm_ring_later(s, l);
}

/* A send of at most one slot from host memory, eager: into the next slot
 * of an idle channel with room (the tail as last read, then as it is now).
 * Returns 1 when sent, 0 to queue it instead.  The caller has ruled out
 * the single copy (mapped memory past map_min). */
static int send_small(shm_state_t* s, int l, shm_peer_t* p, const void* buf, size_t bytes) {
  if (bytes > s->slot_bytes) return 0;
  int ch = chan(s, s->me, l);
  if (p->send_seq - p->tail_seen >= (uint64_t)s->nslots) {
    p->tail_seen = atomic_load_explicit(&s->ctrl[ch].tail, memory_order_acquire);
    if (p->send_seq - p->tail_seen >= (uint64_t)s->nslots) return 0;
  }
  slot_hdr_t* h = slot_at(s, ch, p->send_seq);
  h->kind = SLOT_FRAG;
  h->msg_bytes = h->frag_bytes = bytes;
  memcpy((char*)(h + 1), buf, bytes);
  atomic_store_explicit(&h->seq, p->send_seq + 1, memory_order_release);
  p->send_seq++;
  moeccl_shm_ring_later(s, l);
  return 1;
}

/* A plain receive into host memory whose whole message already waits in
 * the next slot of an idle channel: copied out.  Returns the message's
 * length, or -1 to queue the receive instead; a message longer than bytes
 * fails the communicator (*rc). */
static int64_t recv_small(shm_state_t* s, int l, shm_peer_t* p, void* buf, size_t bytes,
                          moecclResult_t* rc) {
  int ch = chan(s, l, s->me);
  const slot_hdr_t* h = slot_at(s, ch, p->recv_seq);
  if (atomic_load_explicit(&h->seq, memory_order_acquire) != p->recv_seq + 1 ||
      h->kind != SLOT_FRAG || h->frag_bytes != h->msg_bytes)
    return -1;
  if (h->msg_bytes > bytes) {
    *rc = moeccl_shm_truncated(s, p, h->msg_bytes, bytes);
    return -1;
  }
  size_t got = h->msg_bytes;
  memcpy(buf, (const char*)(h + 1), got);
  free_slot(s, l, p, ch);
  return (int64_t)got;
}

/* The executor's request-free path (transport.h).  On an idle channel a
 * message of one slot of host memory moves at once: an eager send is
 * copied in, a receive whose message is already there is copied out.  A
 * small call whose peers are ready then needs neither requests nor a
 * progress pass; the order of the channel is kept, as nothing is queued
 * before them.  Larger messages wait for progress, so that a long copy
 * does not hold back the posting of the step's other messages. */
static moecclResult_t shm_post_now(void* state, int peer, int send, void* buf, size_t bytes,
                                   int* done) {
  shm_state_t* s = state;
  int l = s->comm->peer_local_index[peer];
  if (l < 0) return moecclInternalError;
  shm_peer_t* p = &s->peers[l];
  moecclResult_t rc = moecclSuccess;
  /* past map_min the request's path decides eager or single copy (one
   * lookup of the memory, kept in the request) */
  if (send)
    *done = !p->send_head && !(s->map_min && bytes > s->map_min) && send_small(s, l, p, buf, bytes);
  else *done = !p->recv_head && recv_small(s, l, p, buf, bytes, &rc) >= 0;
  return rc;
}

static moecclResult_t shm_post(void* state, moeccl_req_t* r) {
  shm_state_t* s = state;
  int l = s->comm->peer_local_index[r->peer];
  if (l < 0) return moecclInternalError;
  shm_peer_t* p = &s->peers[l];
  r->progress = 0;
  r->aux = 0;
  if (r->type == MOECCL_REQ_SEND) enqueue(&p->send_head, &p->send_tail, r);
  else enqueue(&p->recv_head, &p->recv_tail, r);
  return moecclSuccess;
}

/* Whether every slot r needs has been written. */
static int fully_pushed(const shm_state_t* s, moeccl_req_t* r) {
  return moeccl_shm_is_rndv(s, r) ? (r->aux & AUX_PUBLISHED) != 0 : r->progress >= r->bytes;
}

/* Fills as many slots as the ring allows with r's next bytes.  Returns 1 when
 * anything was written. */
static int push_send(shm_state_t* s, int l, shm_peer_t* p, moeccl_req_t* r) {
  int ch = chan(s, s->me, l), moved = 0;
  /* The tail is a line the receiver writes: read it only when the ring
   * looks full by the last value read (a stale tail only understates the
   * room), not before every message. */
  uint64_t tail = p->tail_seen;
  if (p->send_seq - tail >= (uint64_t)s->nslots)
    tail = p->tail_seen = atomic_load_explicit(&s->ctrl[ch].tail, memory_order_acquire);
  while (!fully_pushed(s, r) && p->send_seq - tail < (uint64_t)s->nslots) {
    slot_hdr_t* h = slot_at(s, ch, p->send_seq);
    h->msg_bytes = r->bytes;
    if (r->mem.kind == MOECCL_MEM_DEVICE) {
      if (moeccl_shm_send_device(s, p, r, h) <= 0) break; /* full: next pass; failed: dev_error */
      h->kind = SLOT_RNDV;
      h->addr = (uint64_t)(uintptr_t)r->buf;
      h->frag_bytes = 0;
      r->seq = p->send_seq; /* done when the receiver frees this slot */
      r->aux |= AUX_PUBLISHED;
    } else if (moeccl_shm_is_rndv(s, r)) {
      h->kind = SLOT_RNDV;
      h->addr = (uint64_t)(uintptr_t)r->buf;
      h->flags = r->gather_span ? HDR_GATHERED : 0;
      h->frag_bytes = r->gather_span; /* a gathered message: the span the receiver reads */
      moeccl_mem_handle_t mh;
      size_t span = r->gather_span ? r->gather_span : r->bytes;
      h->region_fd = moeccl_mem_lookup(r->buf, span, &mh) ? mh.fd : -1;
      h->region_id = h->region_fd >= 0 ? mh.id : 0;
      h->region_off = h->region_fd >= 0 ? mh.offset : 0;
      r->seq = p->send_seq; /* done when the receiver frees this slot */
      TRACE(SHM, "rndv to rank %d seq %llu addr %p bytes %zu", p->comm_rank,
            (unsigned long long)p->send_seq, r->buf, r->bytes);
      r->aux |= AUX_PUBLISHED;
    } else {
      size_t n = r->bytes - r->progress < s->slot_bytes ? r->bytes - r->progress : s->slot_bytes;
      h->kind = SLOT_FRAG;
      h->frag_bytes = n;
      memcpy((char*)(h + 1), (char*)r->buf + r->progress, n);
      r->progress += n;
    }
    atomic_store_explicit(&h->seq, p->send_seq + 1, memory_order_release);
    p->send_seq++;
    moved = 1;
  }
  if (moved) moeccl_shm_ring_later(s, l);
  return moved;
}

static int send_complete(shm_state_t* s, int l, moeccl_req_t* r) {
  if (!fully_pushed(s, r)) return 0;
  if (!moeccl_shm_is_rndv(s, r)) return 1; /* eager: complete once copied into the slots */
  return atomic_load_explicit(&s->ctrl[chan(s, s->me, l)].tail, memory_order_acquire) > r->seq;
}

static int progress_sends(shm_state_t* s, int l, shm_peer_t* p) {
  int moved = 0, blocked = 0;
  moeccl_req_t *prev = NULL, *r = p->send_head;
  while (r) {
    moeccl_req_t* next = r->next;
    /* Messages enter the ring in order: stop pushing at the first that does not fit. */
    if (!blocked && !fully_pushed(s, r)) {
      moved |= push_send(s, l, p, r);
      blocked = !fully_pushed(s, r);
    }
    if (send_complete(s, l, r)) {
      if (prev) prev->next = next;
      else p->send_head = next;
      if (p->send_tail == r) p->send_tail = prev;
      r->done = 1;
      moved = 1;
    } else {
      prev = r;
    }
    r = next;
  }
  return moved;
}

/* Consumes ready slots into the posted receives, in order. */
static moecclResult_t progress_recvs(shm_state_t* s, int l, shm_peer_t* p, int* moved) {
  int ch = chan(s, l, s->me);
  while (p->recv_head) {
    moeccl_req_t* r = p->recv_head;
    slot_hdr_t* h = slot_at(s, ch, p->recv_seq);
    if (atomic_load_explicit(&h->seq, memory_order_acquire) != p->recv_seq + 1)
      return moecclSuccess;
    if (h->msg_bytes > r->bytes || (r->consumer && h->msg_bytes != r->bytes))
      return moeccl_shm_truncated(s, p, h->msg_bytes, r->bytes);
    moeccl_consumer_t* c = r->consumer;
    int slot_done;
    if (r->mem.kind == MOECCL_MEM_DEVICE || (h->kind == SLOT_RNDV && (h->flags & HDR_DEVICE))) {
      int wait = 0;
      MOECCL_CHECK(moeccl_shm_pull_device(s, p, h, r, &wait));
      if (wait) return moecclSuccess;
      slot_done = h->kind == SLOT_FRAG || r->progress == h->msg_bytes;
    } else if (h->kind == SLOT_RNDV) {
      int wait = 0;
      MOECCL_CHECK(moeccl_shm_pull_rndv(s, p, h, r, &wait));
      if (wait) return moecclSuccess;
      slot_done = r->progress == h->msg_bytes;
    } else {
      if (c && c->unit) MOECCL_CHECK(c->consume(c, h + 1, r->progress, h->frag_bytes));
      else memcpy((char*)r->buf + r->progress, (const char*)(h + 1), h->frag_bytes);
      r->progress += h->frag_bytes;
      slot_done = 1;
    }
    *moved = 1;
    if (!slot_done) return moecclSuccess; /* one chunk per pass: let other peers move */
    int msg_done = r->progress == h->msg_bytes;
    free_slot(s, l, p, ch);
    if (msg_done) {
      r->bytes = r->progress; /* a shorter message completes the receive */
      p->recv_head = r->next;
      if (!p->recv_head) p->recv_tail = NULL;
      r->done = 1;
    }
  }
  return moecclSuccess;
}

static moecclResult_t shm_progress(void* state, int* progressed) {
  shm_state_t* s = state;
  if (!s->base) return moecclSuccess;
  MOECCL_CHECK(moeccl_shm_check_abort(s));
  /* Whenever descriptors wait: the socket's queue is short
   * (net.unix.max_dgram_qlen, 10 here), and a peer's sends must not wait
   * until this rank needs one of them.  A load of a shared word a pass. */
  if (s->dev_fd >= 0 &&
      atomic_load_explicit(&s->ranks[s->me].dev_sent, memory_order_acquire) != s->dev_drained)
    MOECCL_CHECK(moeccl_shm_drain_dev_fds(s));
  moecclResult_t rc = moecclSuccess;
  for (int l = 0; l < s->nlocal && rc == moecclSuccess; l++) {
    shm_peer_t* p = &s->peers[l];
    if (p->send_head) *progressed |= progress_sends(s, l, p);
    if (p->recv_head) rc = progress_recvs(s, l, p, progressed);
  }
  moeccl_shm_ring_due(s);
  return rc != moecclSuccess ? rc : s->dev_error;
}

/* What post_now moved is rung for here (transport.h). */
static void shm_flush(void* state) { moeccl_shm_ring_due(state); }

static void shm_arm(void* state) {
  shm_state_t* s = state;
  if (s->base) s->armed = atomic_load(&s->ranks[s->me].doorbell);
}

/* Whether a progress pass could move anything now: a slot to read, room
 * or a freed slot for a send, a descriptor, the abort word.  The re-check
 * of shm_wait after `sleeping` is set (see ring). */
static int shm_ready(shm_state_t* s) {
  if (atomic_load(&s->hdr->abort_rank) != 0) return 1;
  if (s->dev_fd >= 0 && atomic_load(&s->ranks[s->me].dev_sent) != s->dev_drained) return 1;
  for (int l = 0; l < s->nlocal; l++) {
    shm_peer_t* p = &s->peers[l];
    /* (an adding receive whose turn has not come waits for another
     * channel's message, which rings) */
    if (p->recv_head && moeccl_req_ready(p->recv_head) &&
        atomic_load_explicit(&slot_at(s, chan(s, l, s->me), p->recv_seq)->seq,
                             memory_order_acquire) == p->recv_seq + 1)
      return 1;
    if (!p->send_head) continue;
    uint64_t tail = atomic_load(&s->ctrl[chan(s, s->me, l)].tail);
    for (moeccl_req_t* r = p->send_head; r; r = r->next)
      if (fully_pushed(s, r) ? send_complete(s, l, r) : p->send_seq - tail < (uint64_t)s->nslots)
        return 1;
  }
  return 0;
}

static void shm_wait(void* state, int64_t timeout_us) {
  shm_state_t* s = state;
  if (!s->base) {
    usleep((useconds_t)timeout_us);
    return;
  }
  rank_area_t* me = &s->ranks[s->me];
  atomic_store(&me->sleeping, 1); /* seq_cst: the fence ring pairs with */
  if (!shm_ready(s) && atomic_load(&me->doorbell) == s->armed) {
    struct timespec ts = {timeout_us / 1000000, (timeout_us % 1000000) * 1000};
    moeccl_futex_wait(&me->doorbell, s->armed, &ts);
  }
  atomic_store(&me->sleeping, 0);
}

static moecclResult_t shm_check_peers(void* state) {
  shm_state_t* s = state;
  if (!s->base) return moecclSuccess;
  MOECCL_CHECK(moeccl_shm_check_abort(s));
  for (int l = 0; l < s->nlocal; l++) {
    shm_peer_t* p = &s->peers[l];
    /* Only peers this rank waits on: a peer that finished its part and
     * exited is no failure. */
    if (l == s->me || (!p->send_head && !p->recv_head) ||
        moeccl_process_alive(p->pid, p->pid_start))
      continue;
    return moeccl_shm_peer_died(s, p);
  }
  return moecclSuccess;
}

static void shm_cancel_all(void* state) {
  shm_state_t* s = state;
  for (int l = 0; l < s->nlocal; l++) {
    s->peers[l].send_head = s->peers[l].send_tail = NULL;
    s->peers[l].recv_head = s->peers[l].recv_tail = NULL;
  }
}

/* What a node's links cost over shared memory (transport.h: query; the
 * numbers are fitted as tuner.c says).  A message up to the slot size is
 * done once in the slots; a longer one is published, pulled and its slot
 * freed: a round trip more before the sender's step ends.  Without a state
 * (no two ranks share a node) the slot is what state_alloc would make of
 * MOECCL_SHM_EAGER_SIZE. */
static moecclResult_t shm_query(void* state, const moeccl_comm_t* comm,
                                moeccl_transport_attr_t* out) {
  (void)comm;
  const shm_state_t* s = state;
  size_t slot = s ? s->slot_bytes : moeccl_param_shm_eager_size();
  if (!s) slot = align_up(slot < 256 ? 256 : slot, CACHELINE);
  *out = moeccl_transport_attr_of(&moeccl_shm_ops);
  out->latency_us = 1.5, out->overhead_us = 0.3, out->bw_GBps = 10.0;
  out->eager_bytes = out->rndv_bytes = slot;
  return moecclSuccess;
}

const moeccl_transport_ops_t moeccl_shm_ops = {
    .name = "shm",
    .caps = MOECCL_TRANSPORT_CAP_REDUCE | MOECCL_TRANSPORT_CAP_ROWS,
    .mem_types = MOECCL_MEM_TYPE_HOST | MOECCL_MEM_TYPE_DEVICE,
    .can_gather = moeccl_shm_can_gather,
    .score = NULL,
    .can_reach = moeccl_shm_can_reach,
    .init = moeccl_shm_init,
    .query = shm_query,
    .post = shm_post,
    .post_now = shm_post_now,
    .flush = shm_flush,
    .progress = shm_progress,
    .arm = shm_arm,
    .wait = shm_wait,
    .check_peers = shm_check_peers,
    .notify_abort = moeccl_shm_notify_abort,
    .cancel_all = shm_cancel_all,
    .fini = moeccl_shm_fini,
};
