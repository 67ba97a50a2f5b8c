/*
 * Shared memory (shm_int.h): single-copy messages.  The sender publishes its
 * buffer's address (and its moecclMemAlloc region) in a slot; the receiver
 * maps the region or reads by CMA (process_vm_readv), a chunk per pass, and
 * frees the slot.  Gathered messages and consumers that take the message
 * where it lies are served here.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/uio.h>

#include "transport/shm/shm_int.h"

/* Single copy for a large message (by CMA, or from moecclMemAlloc memory
 * that the receiver maps) and for one past SHM_MAP_MIN bytes that fits a
 * slot, from mapped memory, unless MOECCL_SHM_MAP_SMALL_DISABLE.  Decided
 * once per send: a pass asks several times. */
int moeccl_shm_decide_rndv(const shm_state_t* s, const moeccl_req_t* r) {
  if (r->gather_span) return 1;                   /* shm_can_gather checked the memory */
  if (r->mem.kind == MOECCL_MEM_DEVICE) return 1; /* never through the slots */
  if (!s->can_reach_memory) return 0;
  if (r->bytes <= s->slot_bytes) {
    if (!s->map_min || r->bytes <= s->map_min) return 0;
  } else if (s->use_cma) {
    return 1;
  }
  moeccl_mem_handle_t mh;
  return moeccl_mem_lookup(r->buf, r->bytes, &mh);
}

/* A gathered send needs memory the receiver can map: moecclMemAlloc's. */
int moeccl_shm_can_gather(void* state, int peer, const void* buf, size_t bytes) {
  const shm_state_t* s = state;
  moeccl_mem_handle_t mh;
  (void)peer;
  return s->can_reach_memory && bytes && moeccl_mem_lookup(buf, bytes, &mh);
}

/* Maps the sender's moecclMemAlloc region (cached); NULL when it cannot be
 * mapped, in which case the caller falls back to CMA. */
const char* moeccl_shm_map_region(shm_state_t* s, shm_peer_t* p, const slot_hdr_t* h) {
  if (s->no_map) return NULL;
  peer_map_t* victim = &p->maps[0];
  for (int i = 0; i < MAP_CACHE; i++) {
    peer_map_t* m = &p->maps[i];
    if (m->base && m->id == h->region_id) return m->last_use = ++s->map_clock, m->base;
    if (!m->base || m->last_use < victim->last_use) victim = m;
  }
  char path[64];
  snprintf(path, sizeof(path), "/proc/%d/fd/%d", (int)p->pid, h->region_fd);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return NULL;
  struct stat st;
  void* base = MAP_FAILED;
  uint64_t span = h->flags & HDR_GATHERED ? h->frag_bytes : h->msg_bytes;
  if (fstat(fd, &st) == 0 && (uint64_t)st.st_size >= h->region_off + span)
    base = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
  close(fd);
  if (base == MAP_FAILED) return NULL;
  if (victim->base) munmap(victim->base, victim->size);
  *victim = (peer_map_t){h->region_id, base, (size_t)st.st_size, ++s->map_clock};
  TRACE(SHM, "mapped region %llu of rank %d (%zu bytes)", (unsigned long long)h->region_id,
        p->comm_rank, victim->size);
  return base;
}

/* A process_vm_readv of n bytes from p returned got <= 0. */
static moecclResult_t cma_failed(shm_state_t* s, shm_peer_t* p, ssize_t got, size_t n) {
  if (got < 0 && errno == EINTR) return moecclSuccess;
  /* ESRCH: the process is gone or exiting (its memory already released,
   * while /proc may still show it running). */
  if ((got < 0 && errno == ESRCH) || !moeccl_process_alive(p->pid, p->pid_start))
    return moeccl_shm_peer_died(s, p);
  return moeccl_comm_fail(s->comm, moecclRemoteError,
                          "shm: reading %zu bytes from rank %d (pid %d) failed: %s", n,
                          p->comm_rank, (int)p->pid, got < 0 ? strerror(errno) : "short read");
}

/* A receive consumed piece by piece (a reduction) from memory that cannot
 * be mapped: CMA reads a piece into the bounce buffer, small enough to stay
 * in cache, and it is consumed from there; whole units only (a short read
 * leaves the rest). */
#define BOUNCE_BYTES (256 << 10)
moecclResult_t moeccl_shm_bounce_alloc(shm_state_t* s) {
  if (s->bounce) return moecclSuccess;
  s->bounce = malloc(BOUNCE_BYTES);
  if (!s->bounce)
    return moeccl_comm_fail(s->comm, moecclSystemError, "shm: out of memory for a bounce buffer");
  s->bounce_bytes = BOUNCE_BYTES;
  return moecclSuccess;
}

/* Reads up to n bytes of h's message from r->progress on into the bounce
 * buffer by CMA; *got: the bytes read. */
moecclResult_t moeccl_shm_cma_to_bounce(shm_state_t* s, shm_peer_t* p, const slot_hdr_t* h,
                                        const moeccl_req_t* r, size_t n, size_t* got) {
  *got = 0; /* also on EINTR, which cma_failed lets pass */
  MOECCL_CHECK(moeccl_shm_bounce_alloc(s));
  if (n > s->bounce_bytes) n = s->bounce_bytes;
  struct iovec local = {s->bounce, n};
  struct iovec remote = {(void*)(uintptr_t)(h->addr + r->progress), n};
  ssize_t k = process_vm_readv(p->pid, &local, 1, &remote, 1, 0);
  if (k <= 0) return cma_failed(s, p, k, n);
  *got = (size_t)k;
  return moecclSuccess;
}

static moecclResult_t pull_consume_cma(shm_state_t* s, shm_peer_t* p, const slot_hdr_t* h,
                                       moeccl_req_t* r, size_t n) {
  size_t got = 0;
  MOECCL_CHECK(moeccl_shm_cma_to_bounce(s, p, h, r, n, &got));
  if (!got) return moecclSuccess; /* EINTR: next pass */
  moeccl_consumer_t* c = r->consumer;
  size_t whole = got / c->unit * c->unit;
  MOECCL_CHECK(c->consume(c, s->bounce, r->progress, whole));
  r->progress += whole;
  return moecclSuccess;
}

/* A gathered message: the receive's consumer picks its rows straight from
 * the sender's mapped buffer, or, where it cannot be mapped, CMA reads
 * them by the map into buf (message order) and the executor consumes the
 * message from there.  Whole message at once. */
static moecclResult_t pull_gathered(shm_state_t* s, shm_peer_t* p, const slot_hdr_t* h,
                                    moeccl_req_t* r) {
  moeccl_consumer_t* c = r->consumer;
  if (!c || c->unit || !c->consume_gathered || !c->map)
    return moeccl_comm_fail(s->comm, moecclInvalidUsage,
                            "shm: rank %d sent gathered rows to a receive that cannot pick them "
                            "(the ranks disagree on the call)",
                            p->comm_rank);
  const char* region = h->region_fd >= 0 ? moeccl_shm_map_region(s, p, h) : NULL;
  TRACE(SHM, "gathered %llu bytes from rank %d's %llu (%s)", (unsigned long long)h->msg_bytes,
        p->comm_rank, (unsigned long long)h->frag_bytes, region ? "mapped" : "CMA");
  if (region) {
    MOECCL_CHECK(c->consume_gathered(c, region + h->region_off));
    r->progress = h->msg_bytes;
    return moecclSuccess;
  }
  size_t rb = c->row_bytes, rows = rb ? h->msg_bytes / rb : 0;
  /* up to 64 runs per call: rows consecutive in the sender's buffer merge
   * into one remote iovec (the local side is one contiguous range) */
  const uint32_t* map = c->map;
  struct iovec remote[64];
  for (size_t i = 0; i < rows;) {
    size_t end = i;
    int n = 0;
    while (end < rows && n < 64) {
      size_t run = 1;
      while (end + run < rows && map[end + run] == map[end] + run) run++;
      remote[n++] = (struct iovec){(void*)(uintptr_t)(h->addr + (uint64_t)map[end] * rb), run * rb};
      end += run;
    }
    size_t want = (end - i) * rb;
    struct iovec local = {(char*)r->buf + i * rb, want};
    ssize_t got = process_vm_readv(p->pid, &local, 1, remote, (unsigned long)n, 0);
    if (got < 0 && errno == EINTR) continue;
    if (got != (ssize_t)want) return cma_failed(s, p, got < 0 ? got : 0, want);
    i = end;
  }
  r->progress = h->msg_bytes;
  return moecclSuccess;
}

/* Pulls up to one chunk of a single-copy message from the sender: a plain
 * copy from its mapped moecclMemAlloc memory, else process_vm_readv.  A
 * receive consumed in place whose turn has not come (an adding one behind
 * another) sets *wait and moves nothing. */
moecclResult_t moeccl_shm_pull_rndv(shm_state_t* s, shm_peer_t* p, const slot_hdr_t* h,
                                    moeccl_req_t* r, int* wait) {
  if (h->flags & HDR_GATHERED) return pull_gathered(s, p, h, r);
  size_t n = h->msg_bytes - r->progress;
  if (n > s->chunk) n = s->chunk;
  const char* region = h->region_fd >= 0 ? moeccl_shm_map_region(s, p, h) : NULL;
  moeccl_consumer_t* c = r->consumer;
  if (region && c && !c->unit && r->progress == 0) { /* the whole message, consumed in place */
    if (!moeccl_req_ready(r)) {
      *wait = 1;
      return moecclSuccess;
    }
    MOECCL_CHECK(c->consume(c, region + h->region_off, 0, h->msg_bytes));
    r->progress = h->msg_bytes;
    return moecclSuccess;
  }
  if (region) {
    const char* from = region + h->region_off + r->progress;
    if (c && c->unit) MOECCL_CHECK(c->consume(c, from, r->progress, n));
    else moeccl_host_mem_ops.copy((char*)r->buf + r->progress, from, n, r->stream_copy);
    r->progress += n;
    return moecclSuccess;
  }
  if (c && c->unit) return pull_consume_cma(s, p, h, r, n);
  struct iovec local = {(char*)r->buf + r->progress, n};
  struct iovec remote = {(void*)(uintptr_t)(h->addr + r->progress), n};
  ssize_t got = process_vm_readv(p->pid, &local, 1, &remote, 1, 0);
  TRACE(SHM, "pull from rank %d seq %llu addr %p bytes %zu", p->comm_rank,
        (unsigned long long)p->recv_seq, (void*)(uintptr_t)h->addr, n);
  if (got <= 0) return cma_failed(s, p, got, n);
  r->progress += (size_t)got;
  return moecclSuccess;
}
