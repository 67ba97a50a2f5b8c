/*
 * Shared-memory transport: ranks of one node, host memory.
 *
 * One segment per communicator and node holds, for every ordered pair of
 * local ranks, a ring of slots.  A message up to one slot travels eagerly:
 * the sender copies it into a slot, the receiver copies it out.  A larger
 * message is copied once: the sender publishes its address in a slot and the
 * receiver pulls it with process_vm_readv (Linux cross-memory attach) in
 * chunks, then frees the slot, which completes the send.  Without CMA, large
 * messages stream through the slots (two copies, pipelined).
 *
 * Waiting: a rank that finds nothing to do spins, then sleeps on a futex in
 * its own doorbell word; whoever publishes or frees a slot for it rings it.
 */
#include "copy.h"
#include "param.h"
#include "reduce.h"
#include "rows.h"
#include "sha256.h"
#include "transport/transport.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "bootstrap.h"

#define SHM_MAGIC 0x6d6f6573686d3031ULL
#define CACHELINE 64

enum { SLOT_FRAG = 1, SLOT_RNDV = 2 };
/* A gathered rendezvous (req->gather_span): addr and the region cover the
 * sender's whole buffer of frag_bytes bytes; the receiver picks its
 * msg_bytes of rows from it by its program (rows->terms_idx, rows->map). */
enum { HDR_GATHERED = 1 };

typedef struct {
  _Atomic uint64_t seq; /* slot sequence + 1 once the slot is filled */
  uint32_t kind;
  uint32_t flags;      /* SLOT_RNDV: HDR_GATHERED */
  uint64_t msg_bytes;  /* whole message (every fragment carries it) */
  uint64_t frag_bytes; /* SLOT_FRAG: bytes in this slot */
  uint64_t addr;       /* SLOT_RNDV: the sender's buffer */
  uint64_t region_id;  /* SLOT_RNDV from moecclMemAlloc memory: region to map */
  uint64_t region_off; /* offset of the buffer in that region */
  int32_t region_fd;   /* fd of the region in the sender, -1 if not mapped memory */
  uint32_t pad2;
} slot_hdr_t;
_Static_assert(sizeof(slot_hdr_t) == CACHELINE, "slot header is one cache line");

typedef struct {
  uint64_t magic;
  int32_t nlocal;
  int32_t nslots;
  uint64_t slot_bytes;
  _Atomic int32_t abort_rank; /* comm rank + 1 of a dead rank, 0 if none */
} seg_header_t;

typedef struct {
  _Atomic uint32_t doorbell;
  _Atomic uint32_t sleeping;
  char pad[CACHELINE - 8];
} rank_area_t;

typedef struct {
  _Atomic uint64_t tail; /* slots the receiver has consumed */
  char pad[CACHELINE - 8];
} chan_ctrl_t;

#define MAP_CACHE 16

/* A peer's moecclMemAlloc region mapped into this process. */
typedef struct {
  uint64_t id;
  void* base;
  size_t size;
  uint64_t last_use;
} peer_map_t;

typedef struct {
  int comm_rank;
  pid_t pid;
  peer_map_t maps[MAP_CACHE];
  uint64_t pid_start;
  moeccl_req_t *send_head, *send_tail;
  moeccl_req_t *recv_head, *recv_tail;
  uint64_t send_seq; /* next slot this rank fills towards the peer */
  uint64_t recv_seq; /* next slot this rank reads from the peer */
} shm_peer_t;

typedef struct {
  moeccl_comm_t* comm;
  char name[96];
  void* base;
  size_t size;
  int nlocal, me, nslots;
  int can_reach_memory; /* every local peer may read this rank's memory (probed) */
  int use_cma;          /* ... and MOECCL_CMA_DISABLE does not forbid CMA */
  int no_map;           /* MOECCL_SHM_MAP_DISABLE: read peers' memory by CMA only */
  size_t slot_bytes, slot_stride, chunk;
  seg_header_t* hdr;
  rank_area_t* ranks;
  chan_ctrl_t* ctrl;
  char* slots;
  shm_peer_t* peers; /* by local index */
  uint32_t armed;
  uint64_t map_clock; /* LRU clock of the peers' mapping caches */
  /* Reducing receives by CMA: a chunk is read here, then reduced into the
   * destination while it is still in cache. */
  char* bounce;
  size_t bounce_bytes;
} shm_state_t;

static long futex(_Atomic uint32_t* addr, int op, uint32_t val, const struct timespec* ts) {
  return syscall(SYS_futex, (uint32_t*)addr, op, val, ts, NULL, 0);
}

static size_t align_up(size_t v, size_t a) { return (v + a - 1) / a * a; }

static int chan(const shm_state_t* s, int from, int to) { return from * s->nlocal + to; }

static slot_hdr_t* slot_at(const shm_state_t* s, int ch, uint64_t seq) {
  size_t idx = (size_t)ch * (size_t)s->nslots + (size_t)(seq % (uint64_t)s->nslots);
  return (slot_hdr_t*)(s->slots + idx * s->slot_stride);
}

static void ring(shm_state_t* s, int local) {
  rank_area_t* r = &s->ranks[local];
  atomic_fetch_add(&r->doorbell, 1);
  if (atomic_load(&r->sleeping)) futex(&r->doorbell, FUTEX_WAKE, INT_MAX, NULL);
}

static int shm_can_reach(const moeccl_comm_t* comm, int peer) {
  return comm->peers[peer].host_hash == comm->peers[comm->rank].host_hash;
}

/* ---- setup ------------------------------------------------------------- */

static size_t segment_size(const shm_state_t* s) {
  size_t pairs = (size_t)s->nlocal * (size_t)s->nlocal;
  return 4096 + align_up(sizeof(rank_area_t) * (size_t)s->nlocal, 4096) +
         align_up(sizeof(chan_ctrl_t) * pairs, 4096) + pairs * (size_t)s->nslots * s->slot_stride;
}

static void layout(shm_state_t* s) {
  char* p = s->base;
  s->hdr = (seg_header_t*)p;
  p += 4096;
  s->ranks = (rank_area_t*)p;
  p += align_up(sizeof(rank_area_t) * (size_t)s->nlocal, 4096);
  s->ctrl = (chan_ctrl_t*)p;
  p += align_up(sizeof(chan_ctrl_t) * (size_t)s->nlocal * (size_t)s->nlocal, 4096);
  s->slots = p;
}

static int map_segment(shm_state_t* s, int create) {
  int fd = shm_open(s->name, create ? O_RDWR | O_CREAT | O_EXCL : O_RDWR, 0600);
  if (fd < 0) return -1;
  int ok = !create || ftruncate(fd, (off_t)s->size) == 0;
  struct stat st;
  /* Ranks with other MOECCL_SHM_* values compute another layout: refuse the
   * segment rather than touch memory past its end. */
  if (ok && !create && (fstat(fd, &st) != 0 || (size_t)st.st_size != s->size)) {
    WARN(SHM,
         "shm segment %s is %lld bytes, this rank expects %zu: are MOECCL_SHM_SLOTS and "
         "MOECCL_SHM_EAGER_SIZE the same on every rank?",
         s->name, (long long)st.st_size, s->size);
    ok = 0;
  }
  if (ok) {
    s->base = mmap(NULL, s->size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    ok = s->base != MAP_FAILED;
    if (!ok) s->base = NULL;
  }
  close(fd);
  if (!ok) return -1;
  layout(s);
  if (create) {
    s->hdr->magic = SHM_MAGIC;
    s->hdr->nlocal = s->nlocal;
    s->hdr->nslots = s->nslots;
    s->hdr->slot_bytes = s->slot_bytes;
  } else if (s->hdr->magic != SHM_MAGIC || s->hdr->nslots != s->nslots ||
             s->hdr->slot_bytes != s->slot_bytes || s->hdr->nlocal != s->nlocal) {
    WARN(SHM,
         "shm segment %s has another layout (slots %d of %llu bytes, this rank %d of %zu): "
         "set MOECCL_SHM_* alike on every rank",
         s->name, s->hdr->nslots, (unsigned long long)s->hdr->slot_bytes, s->nslots, s->slot_bytes);
    return -1; /* shm_fini unmaps */
  }
  return 0;
}

/* Reads one word from every local peer's memory: CMA works only if the
 * kernel allows this process to ptrace the peer. */
static int probe_cma(const shm_state_t* s) {
  for (int l = 0; l < s->nlocal; l++) {
    if (l == s->me) continue;
    const moeccl_peer_info_t* pi = &s->comm->peers[s->peers[l].comm_rank];
    uint64_t word = 0;
    struct iovec local = {&word, sizeof(word)},
                 remote = {(void*)(uintptr_t)pi->cma_probe_addr, sizeof(word)};
    if (process_vm_readv(pi->pid, &local, 1, &remote, 1, 0) != sizeof(word) ||
        word != 0x6d6f6563636c2121ULL) {
      INFO(SHM, "CMA from pid %d failed (%s): large messages use the slots", pi->pid,
           strerror(errno));
      return 0;
    }
  }
  return 1;
}

static moecclResult_t state_alloc(moeccl_comm_t* comm, shm_state_t** out) {
  shm_state_t* s = calloc(1, sizeof(*s));
  if (!s) return moecclSystemError;
  s->comm = comm;
  s->nlocal = comm->nlocal;
  s->me = comm->local_rank;
  s->nslots = (int)moeccl_param_int("MOECCL_SHM_SLOTS");
  if (s->nslots < 2) s->nslots = 2;
  s->slot_bytes = moeccl_param_size("MOECCL_SHM_EAGER_SIZE");
  if (s->slot_bytes < 256) s->slot_bytes = 256;
  s->slot_bytes = align_up(s->slot_bytes, CACHELINE);
  s->slot_stride = sizeof(slot_hdr_t) + s->slot_bytes;
  s->chunk = moeccl_param_size("MOECCL_SHM_CHUNK_SIZE");
  if (s->chunk < 4096) s->chunk = 4096;
  s->chunk &= ~(size_t)(CACHELINE - 1); /* whole elements for reducing receives */
  s->peers = calloc((size_t)s->nlocal, sizeof(*s->peers));
  if (!s->peers) return free(s), moecclSystemError;
  for (int l = 0; l < s->nlocal; l++) {
    const moeccl_peer_info_t* pi = &comm->peers[comm->local_ranks[l]];
    s->peers[l] =
        (shm_peer_t){.comm_rank = comm->local_ranks[l], .pid = pi->pid, .pid_start = pi->pid_start};
  }
  /* named by a one-way function of the secret and the node: anyone may list
   * /dev/shm, and a name must give away neither the secret nor the tag
   * that joins the bootstrap */
  uint8_t in[MOECCL_SECRET_BYTES + 8], d[32];
  memcpy(in, comm->secret, MOECCL_SECRET_BYTES);
  memcpy(in + MOECCL_SECRET_BYTES, &comm->peers[comm->rank].host_hash, 8);
  moeccl_sha256_labelled("moeccl-shm", in, sizeof(in), d);
  int o = snprintf(s->name, sizeof(s->name), "/moeccl-");
  for (int i = 0; i < 16 && o + 3 < (int)sizeof(s->name); i++)
    o += snprintf(s->name + o, sizeof(s->name) - (size_t)o, "%02x", d[i]);
  s->size = segment_size(s);
  *out = s;
  return moecclSuccess;
}

static void shm_fini(void* state);

/* Collective: the first local rank creates the segment, the others map it
 * after a barrier, and it is unlinked once all have it, so nothing is left
 * in /dev/shm even if a rank dies later. */
static moecclResult_t shm_init(moeccl_comm_t* comm, const uint8_t* use, int needed_anywhere,
                               void** state) {
  *state = NULL;
  if (!needed_anywhere) return moecclSuccess;
  shm_state_t* s;
  MOECCL_CHECK(state_alloc(comm, &s));
  int needed = comm->nlocal > 1, ok = 1;
  if (needed && s->me == 0) ok = map_segment(s, 1) == 0;
  if (needed && s->me == 0)
    INFO(SHM, "shm: segment %s of %zu bytes for %d local ranks", s->name, s->size, comm->nlocal);
  moecclResult_t rc = moeccl_bootstrap_barrier(comm->boot);
  if (rc == moecclSuccess && needed && s->me != 0 && ok) ok = map_segment(s, 0) == 0;
  if (rc == moecclSuccess) rc = moeccl_bootstrap_barrier(comm->boot);
  if (needed && s->me == 0) shm_unlink(s->name);
  int32_t* flags = calloc((size_t)comm->nranks * 2, sizeof(int32_t));
  if (!flags) rc = moecclSystemError;
  if (rc == moecclSuccess) {
    flags[2 * comm->rank] = ok;
    flags[2 * comm->rank + 1] = needed && ok && probe_cma(s);
    rc = moeccl_bootstrap_allgather(comm->boot, flags, 2 * sizeof(int32_t));
  }
  s->can_reach_memory = needed;
  for (int l = 0; rc == moecclSuccess && l < s->nlocal; l++) {
    int r = s->peers[l].comm_rank;
    if (!flags[2 * r])
      rc = moeccl_error(comm, moecclSystemError,
                        "shm: rank %d could not map segment %s (%zu bytes)", r, s->name, s->size);
    s->can_reach_memory &= flags[2 * r + 1];
  }
  free(flags);
  s->use_cma = s->can_reach_memory && !moeccl_param_bool("MOECCL_CMA_DISABLE");
  s->no_map = s->use_cma && moeccl_param_bool("MOECCL_SHM_MAP_DISABLE");
  if (rc != moecclSuccess) {
    shm_fini(s);
    return rc;
  }
  if (needed)
    INFO(SHM, "rank %d: shm segment %s, %d local ranks, %d slots of %zu bytes, single copy: %s",
         comm->rank, s->name, s->nlocal, s->nslots, s->slot_bytes,
         s->use_cma            ? "CMA and mapped moecclMemAlloc memory"
         : s->can_reach_memory ? "mapped moecclMemAlloc memory only"
                               : "off");
  *state = s;
  return moecclSuccess;
}

static void shm_fini(void* state) {
  shm_state_t* s = state;
  if (!s) return;
  for (int l = 0; l < s->nlocal; l++)
    for (int i = 0; i < MAP_CACHE; i++)
      if (s->peers[l].maps[i].base) munmap(s->peers[l].maps[i].base, s->peers[l].maps[i].size);
  if (s->base) munmap(s->base, s->size);
  free(s->bounce);
  free(s->peers);
  free(s);
}

/* ---- data path ---------------------------------------------------------- */

static void enqueue(moeccl_req_t** head, moeccl_req_t** tail, moeccl_req_t* r) {
  r->next = NULL;
  if (*tail) (*tail)->next = r;
  else *head = r;
  *tail = r;
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

/* Single copy for a large message: by CMA, or from moecclMemAlloc memory that
 * the receiver maps.  r->aux bits: 1 descriptor published, 2 memory looked
 * up, 4 memory is moecclMemAlloc's. */
static int is_rndv(const shm_state_t* s, moeccl_req_t* r) {
  if (r->gather_span) return 1; /* shm_can_gather checked the memory */
  if (r->bytes <= s->slot_bytes || !s->can_reach_memory) return 0;
  if (s->use_cma) return 1;
  if (!(r->aux & 2)) {
    moeccl_mem_handle_t mh;
    r->aux |= 2 | (moeccl_mem_lookup(r->buf, r->bytes, &mh) ? 4 : 0);
  }
  return (r->aux & 4) != 0;
}

/* Whether every slot r needs has been written. */
static int fully_pushed(const shm_state_t* s, moeccl_req_t* r) {
  return is_rndv(s, r) ? (r->aux & 1) != 0 : r->progress >= r->bytes;
}

/* A gathered send needs memory the receiver can map: moecclMemAlloc's. */
static int shm_can_gather(void* state, int peer, const void* buf, size_t bytes) {
  const shm_state_t* s = state;
  moeccl_mem_handle_t mh;
  (void)peer;
  return s->can_reach_memory && bytes && moeccl_mem_lookup(buf, bytes, &mh);
}

/* Fills as many slots as the ring allows with r's next bytes.  Returns 1 when
 * anything was written. */
static int push_send(shm_state_t* s, int l, shm_peer_t* p, moeccl_req_t* r) {
  int ch = chan(s, s->me, l), moved = 0;
  uint64_t tail = atomic_load_explicit(&s->ctrl[ch].tail, memory_order_acquire);
  while (!fully_pushed(s, r) && p->send_seq - tail < (uint64_t)s->nslots) {
    slot_hdr_t* h = slot_at(s, ch, p->send_seq);
    h->msg_bytes = r->bytes;
    if (is_rndv(s, r)) {
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
      r->aux |= 1;
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
  if (moved) ring(s, l);
  return moved;
}

static int send_complete(shm_state_t* s, int l, moeccl_req_t* r) {
  if (!fully_pushed(s, r)) return 0;
  if (!is_rndv(s, r)) return 1; /* eager: complete once copied into the slots */
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

static moecclResult_t truncated(shm_state_t* s, shm_peer_t* p, uint64_t got, size_t posted) {
  return moeccl_comm_fail(
      s->comm, moecclInvalidUsage,
      "message from rank %d is %llu bytes but the receive posted for it is %zu bytes", p->comm_rank,
      (unsigned long long)got, posted);
}

static moecclResult_t check_abort(shm_state_t* s) {
  int32_t dead = atomic_load_explicit(&s->hdr->abort_rank, memory_order_relaxed);
  if (dead == 0) return moecclSuccess;
  const moeccl_peer_info_t* pi = &s->comm->peers[dead - 1];
  return moeccl_comm_peer_lost(s->comm, dead - 1,
                               "rank %d (pid %d on %s) died; communicator aborted", dead - 1,
                               (int)pi->pid, pi->hostname);
}

/* A peer this rank depends on is gone: tell every rank of the node (they may
 * wait on ranks that wait on it), then fail naming it. */
static moecclResult_t peer_died(shm_state_t* s, const shm_peer_t* p) {
  int32_t expected = 0;
  atomic_compare_exchange_strong(&s->hdr->abort_rank, &expected, p->comm_rank + 1);
  for (int o = 0; o < s->nlocal; o++) ring(s, o);
  return check_abort(s);
}

/* Maps the sender's moecclMemAlloc region (cached); NULL when it cannot be
 * mapped, in which case the caller falls back to CMA. */
static const char* map_peer_region(shm_state_t* s, shm_peer_t* p, const slot_hdr_t* h) {
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
    return peer_died(s, p);
  return moeccl_comm_fail(s->comm, moecclRemoteError,
                          "shm: reading %zu bytes from rank %d (pid %d) failed: %s", n,
                          p->comm_rank, (int)p->pid, got < 0 ? strerror(errno) : "short read");
}

/* A reducing receive from memory that cannot be mapped: CMA reads a piece
 * into the bounce buffer, small enough to stay in cache, and it is reduced
 * from there; whole elements only (a short read leaves the rest). */
#define BOUNCE_BYTES (256 << 10)
static moecclResult_t pull_reduce_cma(shm_state_t* s, shm_peer_t* p, const slot_hdr_t* h,
                                      moeccl_req_t* r, size_t n) {
  if (!s->bounce) {
    s->bounce = malloc(BOUNCE_BYTES);
    if (!s->bounce)
      return moeccl_comm_fail(s->comm, moecclSystemError, "shm: out of memory for a bounce buffer");
    s->bounce_bytes = BOUNCE_BYTES;
  }
  if (n > s->bounce_bytes) n = s->bounce_bytes;
  struct iovec local = {s->bounce, n};
  struct iovec remote = {(void*)(uintptr_t)(h->addr + r->progress), n};
  ssize_t got = process_vm_readv(p->pid, &local, 1, &remote, 1, 0);
  if (got <= 0) return cma_failed(s, p, got, n);
  size_t elem = r->red->elem_size, whole = (size_t)got / elem;
  moeccl_reduce(r->red, (char*)r->buf + r->progress, (const char*)r->operand + r->progress,
                s->bounce, whole, r->red_flags);
  r->progress += whole * elem;
  return moecclSuccess;
}

/* A gathered message: the receive's program picks its rows straight from
 * the sender's mapped buffer, or, where it cannot be mapped, CMA reads
 * them by the map into buf (message order) and the executor runs the
 * program from there.  Whole message at once. */
static moecclResult_t pull_gathered(shm_state_t* s, shm_peer_t* p, const slot_hdr_t* h,
                                    moeccl_req_t* r) {
  if (!r->rows || !r->rows->terms_idx || !r->rows->map)
    return moeccl_comm_fail(s->comm, moecclInvalidUsage,
                            "shm: rank %d sent gathered rows to a receive that cannot pick them "
                            "(the ranks disagree on the call)",
                            p->comm_rank);
  const char* region = h->region_fd >= 0 ? map_peer_region(s, p, h) : NULL;
  TRACE(SHM, "gathered %llu bytes from rank %d's %llu (%s)", (unsigned long long)h->msg_bytes,
        p->comm_rank, (unsigned long long)h->frag_bytes, region ? "mapped" : "CMA");
  if (region) {
    moeccl_rows_t prog = *r->rows;
    prog.terms = prog.terms_idx;
    moeccl_rows_run(&prog, r->rows_dst, region + h->region_off, r->rows_aux);
    r->consumed = 1;
    r->progress = h->msg_bytes;
    return moecclSuccess;
  }
  size_t rb = moeccl_rows_row_bytes(r->rows), rows = rb ? h->msg_bytes / rb : 0;
  /* up to 64 runs per call: rows consecutive in the sender's buffer merge
   * into one remote iovec (the local side is one contiguous range) */
  const uint32_t* map = r->rows->map;
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
static moecclResult_t pull_rndv(shm_state_t* s, shm_peer_t* p, const slot_hdr_t* h, moeccl_req_t* r,
                                int* wait) {
  if (h->flags & HDR_GATHERED) return pull_gathered(s, p, h, r);
  size_t n = h->msg_bytes - r->progress;
  if (n > s->chunk) n = s->chunk;
  const char* region = h->region_fd >= 0 ? map_peer_region(s, p, h) : NULL;
  if (region && r->rows && r->progress == 0) { /* the whole message, consumed in place */
    if (!moeccl_req_rows_turn(r)) {
      *wait = 1;
      return moecclSuccess;
    }
    moeccl_rows_run(r->rows, r->rows_dst, region + h->region_off, r->rows_aux);
    r->consumed = 1;
    r->progress = h->msg_bytes;
    return moecclSuccess;
  }
  if (region) {
    const char* from = region + h->region_off + r->progress;
    if (r->red)
      moeccl_reduce(r->red, (char*)r->buf + r->progress, (const char*)r->operand + r->progress,
                    from, n / r->red->elem_size, r->red_flags);
    else moeccl_copy((char*)r->buf + r->progress, from, n, r->stream_copy);
    r->progress += n;
    return moecclSuccess;
  }
  if (r->red) return pull_reduce_cma(s, p, h, r, n);
  struct iovec local = {(char*)r->buf + r->progress, n};
  struct iovec remote = {(void*)(uintptr_t)(h->addr + r->progress), n};
  ssize_t got = process_vm_readv(p->pid, &local, 1, &remote, 1, 0);
  TRACE(SHM, "pull from rank %d seq %llu addr %p bytes %zu", p->comm_rank,
        (unsigned long long)p->recv_seq, (void*)(uintptr_t)h->addr, n);
  if (got <= 0) return cma_failed(s, p, got, n);
  r->progress += (size_t)got;
  return moecclSuccess;
}

/* Consumes ready slots into the posted receives, in order. */
static moecclResult_t progress_recvs(shm_state_t* s, int l, shm_peer_t* p, int* moved) {
  int ch = chan(s, l, s->me);
  while (p->recv_head) {
    moeccl_req_t* r = p->recv_head;
    slot_hdr_t* h = slot_at(s, ch, p->recv_seq);
    if (atomic_load_explicit(&h->seq, memory_order_acquire) != p->recv_seq + 1)
      return moecclSuccess;
    if (h->msg_bytes > r->bytes || ((r->red || r->rows) && h->msg_bytes != r->bytes))
      return truncated(s, p, h->msg_bytes, r->bytes);
    int slot_done;
    if (h->kind == SLOT_RNDV) {
      int wait = 0;
      MOECCL_CHECK(pull_rndv(s, p, h, r, &wait));
      if (wait) return moecclSuccess;
      slot_done = r->progress == h->msg_bytes;
    } else {
      if (r->red)
        moeccl_reduce(r->red, (char*)r->buf + r->progress, (const char*)r->operand + r->progress,
                      h + 1, h->frag_bytes / r->red->elem_size, r->red_flags);
      else memcpy((char*)r->buf + r->progress, (const char*)(h + 1), h->frag_bytes);
      r->progress += h->frag_bytes;
      slot_done = 1;
    }
    *moved = 1;
    if (!slot_done) return moecclSuccess; /* one chunk per pass: let other peers move */
    int msg_done = r->progress == h->msg_bytes;
    p->recv_seq++;
    atomic_store_explicit(&s->ctrl[ch].tail, p->recv_seq, memory_order_release);
    ring(s, l);
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
  MOECCL_CHECK(check_abort(s));
  for (int l = 0; l < s->nlocal; l++) {
    shm_peer_t* p = &s->peers[l];
    if (p->send_head) *progressed |= progress_sends(s, l, p);
    if (p->recv_head) MOECCL_CHECK(progress_recvs(s, l, p, progressed));
  }
  return moecclSuccess;
}

static void shm_arm(void* state) {
  shm_state_t* s = state;
  if (s->base) s->armed = atomic_load(&s->ranks[s->me].doorbell);
}

static void shm_wait(void* state, int64_t timeout_us) {
  shm_state_t* s = state;
  if (!s->base) {
    usleep((useconds_t)timeout_us);
    return;
  }
  rank_area_t* me = &s->ranks[s->me];
  atomic_store(&me->sleeping, 1);
  if (atomic_load(&me->doorbell) == s->armed) {
    struct timespec ts = {timeout_us / 1000000, (timeout_us % 1000000) * 1000};
    futex(&me->doorbell, FUTEX_WAIT, s->armed, &ts);
  }
  atomic_store(&me->sleeping, 0);
}

static moecclResult_t shm_check_peers(void* state) {
  shm_state_t* s = state;
  if (!s->base) return moecclSuccess;
  MOECCL_CHECK(check_abort(s));
  for (int l = 0; l < s->nlocal; l++) {
    shm_peer_t* p = &s->peers[l];
    /* Only peers this rank waits on: a peer that finished its part and
     * exited is no failure. */
    if (l == s->me || (!p->send_head && !p->recv_head) ||
        moeccl_process_alive(p->pid, p->pid_start))
      continue;
    return peer_died(s, p);
  }
  return moecclSuccess;
}

/* The abort word already tells every local rank; set it if no one has. */
static void shm_notify_abort(void* state, int culprit) {
  shm_state_t* s = state;
  if (!s->base) return;
  int32_t expected = 0;
  atomic_compare_exchange_strong(&s->hdr->abort_rank, &expected, culprit + 1);
  for (int o = 0; o < s->nlocal; o++) ring(s, o);
}

static void shm_cancel_all(void* state) {
  shm_state_t* s = state;
  for (int l = 0; l < s->nlocal; l++) {
    s->peers[l].send_head = s->peers[l].send_tail = NULL;
    s->peers[l].recv_head = s->peers[l].recv_tail = NULL;
  }
}

const moeccl_transport_ops_t moeccl_shm_ops = {
    .name = "shm",
    .caps = MOECCL_TRANSPORT_CAP_REDUCE | MOECCL_TRANSPORT_CAP_ROWS,
    .mem_types = MOECCL_MEM_TYPE_HOST,
    /* a message past the slot size is published, pulled and its slot
     * freed: a round trip more before the sender's step ends */
    .link = {1.5, 0.3, 10.0, MOECCL_LINK_RNDV_SHM_SLOT},
    .can_gather = shm_can_gather,
    .score = NULL,
    .can_reach = shm_can_reach,
    .init = shm_init,
    .post = shm_post,
    .progress = shm_progress,
    .arm = shm_arm,
    .wait = shm_wait,
    .check_peers = shm_check_peers,
    .notify_abort = shm_notify_abort,
    .cancel_all = shm_cancel_all,
    .fini = shm_fini,
};
