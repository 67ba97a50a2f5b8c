/*
 * Pinned memory for the row programs of calls lowered onto a stream
 * (docs/ARCHITECTURE.md, "MoE calls on the stream"): a kernel reads its
 * program's terms (indices) from pinned host memory, and a MoE combine's
 * weights, which the caller gives in host memory, are copied from there
 * too.  The stream reads that memory after the call returned, so each
 * call takes one buffer of a ring per communicator and the stream writes
 * the buffer's flag once it has passed the call; a buffer is reused only
 * once its flag says so.  The host waits only when every buffer of the
 * ring is still in use by queued work (counted).
 */
#include <sched.h>
#include <stdlib.h>
#include <unistd.h>

#include "base/debug.h"
#include "device/device.h"
#include "exec/executor_int.h"

#define TERM_SLOTS 8 /* calls with row programs a stream may hold before the host waits */
#define FLAG_STRIDE 8 /* uint64_t words between two slots' flags (a cache line) */

typedef struct {
  char* mem; /* pinned host memory (host_alloc) */
  size_t bytes;
  uint64_t seq; /* the flag's value once the stream passed its last call; 0: never used */
} term_slot_t;

struct moeccl_term_ring {
  term_slot_t slot[TERM_SLOTS];
  volatile uint64_t* flags; /* [TERM_SLOTS * FLAG_STRIDE], pinned (host_flags) */
  int next;
  uint64_t seq;
  uint64_t calls, waits;
};

static moecclResult_t ring_of(moeccl_comm_t* c, struct moeccl_term_ring** out) {
  if (!c->terms) {
    struct moeccl_term_ring* r = calloc(1, sizeof(*r));
    if (!r) return moeccl_error(c, moecclSystemError, "out of memory");
    void* f = NULL;
    moecclResult_t rc =
        moeccl_device()->host_flags(&f, TERM_SLOTS * FLAG_STRIDE * sizeof(uint64_t));
    if (rc != moecclSuccess) {
      free(r);
      return moeccl_error(c, rc, "no pinned host memory for the row programs' flags");
    }
    r->flags = f;
    for (int k = 0; k < TERM_SLOTS * FLAG_STRIDE; k++) r->flags[k] = 0;
    c->terms = r;
  }
  *out = c->terms;
  return moecclSuccess;
}

static volatile uint64_t* flag_of(struct moeccl_term_ring* r, int k) {
  return r->flags + (size_t)k * FLAG_STRIDE;
}

static int slot_free(struct moeccl_term_ring* r, int k) {
  return __atomic_load_n(flag_of(r, k), __ATOMIC_ACQUIRE) >= r->slot[k].seq;
}

/* Waits, up to the communicator's timeout, for the stream to pass the
 * call that last used slot k. */
static moecclResult_t wait_slot(moeccl_comm_t* c, struct moeccl_term_ring* r, int k) {
  r->waits++;
  double deadline = moeccl_now() + c->timeout;
  while (!slot_free(r, k)) {
    if (c->aborting) return moeccl_error(c, moecclInvalidUsage, "communicator was aborted");
    if (c->async_error != moecclSuccess)
      return moeccl_error(c, c->async_error, "communicator is broken by an earlier error (%s)",
                          c->fail_text);
    if (moeccl_now() > deadline)
      return moeccl_comm_fail(c, moecclTimeout,
                              "the stream did not pass a call with row programs within %.0f s "
                              "(%d such calls queued on rank %d)",
                              c->timeout, TERM_SLOTS, c->rank);
    sched_yield();
    usleep(50);
  }
  return moecclSuccess;
}

moecclResult_t moeccl_exec_terms_take(moeccl_comm_t* c, size_t bytes, moeccl_term_use_t* use) {
  struct moeccl_term_ring* r = NULL;
  MOECCL_CHECK(ring_of(c, &r));
  int k = r->next;
  term_slot_t* t = &r->slot[k];
  if (!slot_free(r, k)) MOECCL_CHECK(wait_slot(c, r, k));
  if (bytes > t->bytes) { /* idle now: its last call has passed */
    const moeccl_device_ops_t* d = moeccl_device();
    size_t want = bytes > 2 * t->bytes ? bytes : 2 * t->bytes;
    void* m = NULL;
    moecclResult_t rc = d->host_alloc(&m, want);
    if (rc != moecclSuccess)
      return moeccl_error(c, rc, "no %zu bytes of pinned host memory for row programs", want);
    if (t->mem) d->host_free(t->mem);
    t->mem = m, t->bytes = want;
  }
  r->next = (k + 1) % TERM_SLOTS;
  r->calls++;
  t->seq = ++r->seq;
  *use = (moeccl_term_use_t){.arena = {t->mem, t->bytes, 0}, .flag = flag_of(r, k), .seq = t->seq};
  return moecclSuccess;
}

moecclResult_t moeccl_exec_terms_passed(const moeccl_term_use_t* use, void* stream) {
  moeccl_dev_memop_t op = {use->flag, use->seq, 0};
  return moeccl_device()->mem_ops(stream, &op, 1);
}

void moeccl_exec_terms_stats(const moeccl_comm_t* c, uint64_t* calls, uint64_t* waits) {
  *calls = c->terms ? c->terms->calls : 0;
  *waits = c->terms ? c->terms->waits : 0;
}

/* A stream may still read a buffer whose call it has not passed (a call
 * with no message on this rank is not among the work the transports
 * drain): destroy waits for it, up to the communicator's timeout, and
 * leaves what a stream may still read allocated. */
void moeccl_exec_terms_free(moeccl_comm_t* c) {
  struct moeccl_term_ring* r = c->terms;
  if (!r) return;
  const moeccl_device_ops_t* d = moeccl_device();
  double deadline = moeccl_now() + c->timeout;
  int held = 0;
  for (int k = 0; k < TERM_SLOTS; k++) {
    while (!slot_free(r, k) && moeccl_now() < deadline) usleep(100);
    if (!slot_free(r, k)) {
      held++;
      continue;
    }
    if (r->slot[k].mem) d->host_free(r->slot[k].mem);
  }
  if (held) {
    WARN(INIT,
         "rank %d: %d calls with row programs had not passed their stream after %.0f s; their "
         "pinned memory stays allocated",
         c->rank, held, c->timeout);
    return; /* the flags too: the stream still writes them */
  }
  d->host_free((void*)r->flags);
  free(r);
  c->terms = NULL;
}
