/* Relayed schedules: held-block tables, packing with merged runs, direct
 * sends and receives, scratch areas.  See relay.h for the step layout. */
#include "relay.h"

#include <string.h>

/* Where a byte range lies: a kind in the top bits, an offset below.  Scratch
 * offsets count from the start of their area until the end of the plan,
 * when the areas are laid out and every scratch offset in the ops is
 * relocated; ops carry them tagged with their kind until then. */
enum { LOC_SEND = 0, LOC_RECV = 1, LOC_PACK = 2, LOC_AREA0 = 3, LOC_AREA1 = 4, LOC_NKINDS = 5 };
#define LOC_SHIFT 60
#define LOC_OFF_MASK ((UINT64_C(1) << LOC_SHIFT) - 1)
typedef uint64_t loc_t;

static loc_t loc_make(int kind, uint64_t off) { return (uint64_t)kind << LOC_SHIFT | off; }
static int loc_kind(loc_t l) { return (int)(l >> LOC_SHIFT); }

typedef struct {
  loc_t loc;
  uint64_t bytes;
} held_t;

typedef struct {
  int peer;
  loc_t loc; /* where the message is sent from or received into */
  uint64_t bytes;
} msg_t;

enum { PASS_SEND, PASS_SIZE, PASS_UNPACK, PASS_STAY };

struct moeccl_relay {
  const moeccl_a2a_desc_t* d;
  moeccl_sched_t* s;
  held_t *cur, *next; /* held blocks of this stage and of the next */
  msg_t *sends, *recvs;
  int nblocks, max_msgs, nsends, nrecvs;
  int phase, pass;
  uint64_t used[LOC_NKINDS]; /* bytes of each scratch area this phase uses */
  uint64_t size[LOC_NKINDS]; /* the most any phase used */
  int* step_ends;            /* pipelined: logical step ends (relay.h), else NULL */
  int lsteps;
  /* The message being described. */
  int peer;
  loc_t start;                     /* its first byte (its area's next free byte while sizing) */
  uint64_t bytes;                  /* bytes described so far */
  int runs;                        /* send: copies already emitted; size: runs of final blocks */
  int all_final;                   /* size: no held block so far */
  int skip;                        /* unpack: received straight into place, or empty */
  uint64_t final_start, final_end; /* size: the run of final blocks */
  /* The copy being merged. */
  loc_t run_src, run_dst;
  uint64_t run_bytes;
  moecclResult_t rc;
};

static void fail(moeccl_relay_t* x, moecclResult_t rc) {
  if (x->rc == moecclSuccess) x->rc = rc;
}

static uint32_t op_buf(loc_t l) {
  int kind = loc_kind(l);
  return kind == LOC_SEND   ? MOECCL_BUF_SEND
         : kind == LOC_RECV ? MOECCL_BUF_RECV
                            : MOECCL_BUF_SCRATCH;
}

/* Offset an op carries: scratch ones keep their tag until relocate(). */
static uint64_t op_off(loc_t l) {
  return loc_kind(l) == LOC_SEND || loc_kind(l) == LOC_RECV ? l & LOC_OFF_MASK : l;
}

/* Sends pass dst 0 and receives src 0: the send buffer at 0, as the other
 * generators write the unused side. */
static void emit(moeccl_relay_t* x, moeccl_op_type_t type, int peer, loc_t src, loc_t dst,
                 uint64_t bytes) {
  if (x->rc == moecclSuccess)
    fail(x, moeccl_sched_add(x->s, type, peer, op_buf(src), op_off(src), op_buf(dst), op_off(dst),
                             bytes));
}

static void end_step(moeccl_relay_t* x) {
  if (x->step_ends) x->step_ends[x->lsteps++] = x->s->nops;
  else if (x->rc == moecclSuccess) fail(x, moeccl_sched_end_step(x->s));
}

static void copy_flush(moeccl_relay_t* x) {
  if (x->run_bytes) emit(x, MOECCL_OP_COPY, -1, x->run_src, x->run_dst, x->run_bytes);
  x->run_bytes = 0;
}

/* Adds a copy, merged with the previous one when both ends continue it. */
static void copy_add(moeccl_relay_t* x, loc_t src, loc_t dst, uint64_t bytes) {
  if (x->run_bytes && src == x->run_src + x->run_bytes && dst == x->run_dst + x->run_bytes) {
    x->run_bytes += bytes;
    return;
  }
  copy_flush(x);
  x->run_src = src, x->run_dst = dst, x->run_bytes = bytes;
}

static int recv_area(const moeccl_relay_t* x) { return LOC_AREA0 + x->phase % 2; }

static int block_ok(moeccl_relay_t* x, int block, int pass) {
  if (block >= 0 && block < x->nblocks && x->pass == pass) return 1;
  fail(x, moecclInternalError);
  return 0;
}

/* ---- sending ---- */

void moeccl_relay_send_begin(moeccl_relay_t* x, int peer) {
  if (x->pass != PASS_SEND) fail(x, moecclInternalError);
  x->peer = peer;
  x->start = loc_make(LOC_PACK, x->used[LOC_PACK]);
  x->bytes = 0, x->runs = 0, x->run_bytes = 0;
}

static void send_block(moeccl_relay_t* x, loc_t loc, uint64_t bytes) {
  if (!bytes) return;
  if (x->run_bytes && loc != x->run_src + x->run_bytes) x->runs++;
  copy_add(x, loc, x->start + x->bytes, bytes); /* the pack area always continues */
  x->bytes += bytes;
}

void moeccl_relay_send_own(moeccl_relay_t* x, int dst) {
  send_block(x, loc_make(LOC_SEND, moeccl_a2a_send_off(x->d, dst)),
             moeccl_a2a_send_bytes(x->d, dst));
}

void moeccl_relay_send_held(moeccl_relay_t* x, int block) {
  if (block_ok(x, block, PASS_SEND)) send_block(x, x->cur[block].loc, x->cur[block].bytes);
}

/* One run in the send buffer or in scratch this phase does not receive
 * into is sent from where it lies; anything else is sent packed. */
void moeccl_relay_send_end(moeccl_relay_t* x) {
  if (!x->bytes) return;
  if (x->nsends == x->max_msgs) {
    fail(x, moecclInternalError);
    return;
  }
  msg_t* m = &x->sends[x->nsends++];
  m->peer = x->peer, m->bytes = x->bytes;
  int kind = loc_kind(x->run_src);
  if (x->runs == 0 && (kind == LOC_SEND || kind == LOC_AREA0 + (x->phase + 1) % 2)) {
    m->loc = x->run_src, x->run_bytes = 0;
  } else {
    copy_flush(x);
    m->loc = x->start, x->used[LOC_PACK] += x->bytes;
  }
}

/* ---- receiving ---- */

void moeccl_relay_recv_begin(moeccl_relay_t* x, int peer) {
  x->peer = peer, x->bytes = 0;
  if (x->pass == PASS_SIZE) {
    x->runs = 0, x->all_final = 1;
  } else if (x->pass == PASS_UNPACK && x->nrecvs < x->max_msgs) {
    const msg_t* m = &x->recvs[x->nrecvs++];
    x->start = m->loc;
    x->skip = m->bytes == 0 || loc_kind(m->loc) == LOC_RECV;
  } else {
    fail(x, moecclInternalError);
  }
}

void moeccl_relay_recv_final(moeccl_relay_t* x, int src) {
  uint64_t bytes = moeccl_a2a_recv_bytes(x->d, src), off = moeccl_a2a_recv_off(x->d, src);
  if (!bytes) return;
  if (x->pass == PASS_SIZE) {
    if (x->runs == 0 || off != x->final_end) x->runs++, x->final_start = off;
    x->final_end = off + bytes;
  } else if (!x->skip) {
    copy_add(x, x->start + x->bytes, loc_make(LOC_RECV, off), bytes);
  }
  x->bytes += bytes;
}

void moeccl_relay_recv_held(moeccl_relay_t* x, int block, uint64_t bytes) {
  if (x->pass == PASS_SIZE) {
    if (bytes) x->all_final = 0;
  } else if (block_ok(x, block, PASS_UNPACK)) {
    x->next[block] = (held_t){x->start + x->bytes, bytes};
  }
  x->bytes += bytes;
}

/* Sizing: posts the receive, straight into the receive buffer when every
 * block is final and they form one run there. */
void moeccl_relay_recv_end(moeccl_relay_t* x) {
  if (x->pass == PASS_UNPACK) {
    if (x->bytes != x->recvs[x->nrecvs - 1].bytes) fail(x, moecclInternalError);
    return;
  }
  if (x->nrecvs == x->max_msgs) {
    fail(x, moecclInternalError);
    return;
  }
  msg_t* m = &x->recvs[x->nrecvs++];
  m->peer = x->peer, m->bytes = x->bytes;
  if (!x->bytes) return;
  int area = recv_area(x);
  if (x->all_final && x->runs == 1) {
    m->loc = loc_make(LOC_RECV, x->final_start);
  } else {
    m->loc = loc_make(area, x->used[area]);
    x->used[area] += x->bytes;
  }
  emit(x, MOECCL_OP_RECV, m->peer, 0, m->loc, m->bytes);
}

/* ---- blocks that stay ---- */

void moeccl_relay_stay_own(moeccl_relay_t* x, int block, int dst) {
  if (block_ok(x, block, PASS_STAY))
    x->next[block] = (held_t){loc_make(LOC_SEND, moeccl_a2a_send_off(x->d, dst)),
                              moeccl_a2a_send_bytes(x->d, dst)};
}

/* A block in the area this phase receives into would be overwritten. */
void moeccl_relay_stay_held(moeccl_relay_t* x, int block, int held) {
  if (!block_ok(x, block, PASS_STAY) || !block_ok(x, held, PASS_STAY)) return;
  if (x->cur[held].bytes && loc_kind(x->cur[held].loc) == recv_area(x))
    fail(x, moecclInternalError);
  else x->next[block] = x->cur[held];
}

/* ---- phases ---- */

static void run_phase(moeccl_relay_t* x, const moeccl_relay_phase_t* ph, const void* ctx) {
  x->used[LOC_PACK] = x->used[recv_area(x)] = 0;
  x->nsends = 0, x->pass = PASS_SEND;
  ph->send(x, ctx);
  end_step(x); /* the pack copies (and the previous phase's unpacking) */
  for (int i = 0; i < x->nsends; i++)
    emit(x, MOECCL_OP_SEND, x->sends[i].peer, x->sends[i].loc, 0, x->sends[i].bytes);
  x->nrecvs = 0, x->pass = PASS_SIZE;
  ph->recv(x, ctx);
  end_step(x); /* the exchange */
  memset(x->next, 0, (size_t)x->nblocks * sizeof(*x->next));
  x->nrecvs = 0, x->pass = PASS_UNPACK, x->run_bytes = 0;
  ph->recv(x, ctx);
  copy_flush(x);
  x->pass = PASS_STAY;
  if (ph->stay) ph->stay(x, ctx);
  for (int k = LOC_PACK; k < LOC_NKINDS; k++)
    if (x->used[k] > x->size[k]) x->size[k] = x->used[k];
  held_t* t = x->cur;
  x->cur = x->next, x->next = t;
  x->phase++;
}

static uint64_t align64(uint64_t v) { return (v + 63) & ~(uint64_t)63; }

/* Lays the scratch areas out one after another and rewrites the tagged
 * scratch offsets of ops [first, nops) into real ones. */
static uint64_t relocate(moeccl_relay_t* x, int first) {
  uint64_t base[LOC_NKINDS] = {0};
  base[LOC_AREA0] = align64(x->size[LOC_PACK]);
  base[LOC_AREA1] = base[LOC_AREA0] + align64(x->size[LOC_AREA0]);
  uint64_t total = base[LOC_AREA1] + x->size[LOC_AREA1];
  for (int i = first; i < x->s->nops; i++) {
    moeccl_sched_op_t* op = &x->s->ops[i];
    if (op->type != MOECCL_OP_RECV && op->src_buf == MOECCL_BUF_SCRATCH)
      op->src_off = base[loc_kind(op->src_off)] + (op->src_off & LOC_OFF_MASK);
    if (op->type != MOECCL_OP_SEND && op->dst_buf == MOECCL_BUF_SCRATCH)
      op->dst_off = base[loc_kind(op->dst_off)] + (op->dst_off & LOC_OFF_MASK);
  }
  if (total > x->s->scratch_bytes) x->s->scratch_bytes = (size_t)total;
  return total;
}

moecclResult_t moeccl_relay_run(const moeccl_a2a_desc_t* d, moeccl_sched_t* s,
                                const moeccl_relay_plan_t* plan, const void* ctx) {
  moeccl_relay_t x = {.d = d,
                      .s = s,
                      .nblocks = plan->nblocks,
                      .max_msgs = plan->max_msgs,
                      .step_ends = plan->step_ends};
  size_t held = (size_t)plan->nblocks * sizeof(held_t),
         msgs = (size_t)plan->max_msgs * sizeof(msg_t);
  void* work;
  moecclResult_t rc = moeccl_sched_workspace(s, 2 * held + 2 * msgs, &work);
  if (rc != moecclSuccess) return rc;
  x.cur = work, x.next = x.cur + plan->nblocks;
  x.sends = (msg_t*)(x.next + plan->nblocks), x.recvs = x.sends + plan->max_msgs;
  memset(x.cur, 0, held);
  int first = s->nops;
  fail(&x, moeccl_a2a_add_self_copy(d, s));
  for (int k = 0; k < plan->nphases; k++) run_phase(&x, &plan->phases[k], ctx);
  end_step(&x);
  if (x.rc != moecclSuccess) return x.rc;
  uint64_t total = relocate(&x, first);
  if (plan->scratch) *plan->scratch = total;
  return moecclSuccess;
}
