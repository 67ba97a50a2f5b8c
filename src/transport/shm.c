/*
 * Shared-memory transport: ranks of one node, host memory.
 *
 * One segment per communicator and node holds, for every ordered pair of
 * local ranks, a ring of slots.  A message up to one slot travels eagerly:
 * the sender copies it into a slot, the receiver copies it out.  A larger
 * message is copied once (from moecclMemAlloc memory also one that fits a
 * slot, past SHM_MAP_MIN bytes: see map_min): the sender publishes its
 * address in a slot and the
 * receiver pulls it with process_vm_readv (Linux cross-memory attach) in
 * chunks, then frees the slot, which completes the send.  Without CMA, large
 * messages stream through the slots (two copies, pipelined).
 *
 * Device memory (where a device backend is in use, device/device.h): a
 * send from device memory is always published (never copied into a slot,
 * which the host may not touch), with its allocation's id and offset; just
 * before, the sender exports the allocation and passes the descriptor to
 * the receiver's Unix datagram socket (SCM_RIGHTS; one per rank, in the
 * abstract namespace under a name derived from the communicator's secret;
 * the kernel's SCM_CREDENTIALS must show the peer's pid).  The receiver
 * imports the allocation (cached by id), has the copy engine copy the
 * message straight into its receive buffer, then frees the slot: one copy,
 * device to device (CUDA IPC over NVLink or PCIe).  Eager messages into
 * device memory and host-published messages into device memory are copied
 * by the copy engine too.
 *
 * Waiting: a rank that finds nothing to do spins, then sleeps on a futex in
 * its own doorbell word; whoever publishes or frees a slot for it rings it.
 */
#include "base/futex.h"
#include "kernels/copy.h"
#include "device/device.h"
#include "base/param.h"
#include "kernels/reduce.h"
#include "kernels/rows.h"
#include "base/sha256.h"
#include "transport/transport.h"

#include <errno.h>
#include <stdarg.h>
#include <fcntl.h>
#include <limits.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "comm/bootstrap.h"

#define SHM_MAGIC 0x6d6f6573686d3031ULL
#define CACHELINE 64

enum { SLOT_FRAG = 1, SLOT_RNDV = 2 };
/* A gathered rendezvous (req->gather_span): addr and the region cover the
 * sender's whole buffer of frag_bytes bytes; the receiver picks its
 * msg_bytes of rows from it by its program (rows->terms_idx, rows->map). */
enum { HDR_GATHERED = 1, HDR_DEVICE = 2 };

typedef struct {
  _Atomic uint64_t seq; /* slot sequence + 1 once the slot is filled */
  uint32_t kind;
  uint32_t flags;      /* SLOT_RNDV: HDR_GATHERED */
  uint64_t msg_bytes;  /* whole message (every fragment carries it) */
  uint64_t frag_bytes; /* SLOT_FRAG: bytes in this slot */
  uint64_t addr;       /* SLOT_RNDV: the sender's buffer */
  uint64_t region_id;  /* SLOT_RNDV from moecclMemAlloc or device memory: region to map */
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
  _Atomic uint32_t dev_sent; /* device descriptors peers sent this rank's socket */
  char pad[CACHELINE - 12];
} rank_area_t;

typedef struct {
  _Atomic uint64_t tail; /* slots the receiver has consumed */
  char pad[CACHELINE - 8];
} chan_ctrl_t;

#define MAP_CACHE 16
#define SHM_MAP_MIN 4096 /* see map_min */

/* A peer's moecclMemAlloc region mapped into this process. */
typedef struct {
  uint64_t id;
  void* base;
  size_t size;
  uint64_t last_use;
  int ipc; /* a device allocation opened by legacy IPC handle (else imported by fd) */
} peer_map_t;

/* A descriptor of a peer's device allocation, received ahead of the slot
 * that names it (one per published device message, in slot order). */
typedef struct {
  uint64_t id, bytes;
  int32_t device;
  int fd; /* -1: the allocation comes by its legacy IPC handle */
  unsigned char ipc[MOECCL_IPC_HANDLE_BYTES];
} dev_fd_t;

/* What travels with the descriptor. */
#define DEV_MAGIC 0x6d6f656363646576ULL
typedef struct {
  uint64_t magic, id, bytes;
  int32_t device, from; /* from: the sender's local index */
  int32_t by_ipc, pad;  /* 1: no descriptor, ipc holds a legacy IPC handle */
  unsigned char ipc[MOECCL_IPC_HANDLE_BYTES];
} dev_msg_t;

typedef struct {
  int comm_rank;
  pid_t pid;
  peer_map_t maps[MAP_CACHE];
  peer_map_t dev_maps[MAP_CACHE]; /* its device allocations imported here */
  dev_fd_t* stash;                /* received descriptors not yet used, a ring */
  int stash_head, stash_count;
  struct sockaddr_un dev_addr; /* its descriptor socket */
  socklen_t dev_addr_len;
  uint64_t pid_start;
  moeccl_req_t *send_head, *send_tail;
  moeccl_req_t *recv_head, *recv_tail;
  uint64_t send_seq; /* next slot this rank fills towards the peer */
  uint64_t recv_seq; /* next slot this rank reads from the peer */
  uint64_t tail_seen; /* the peer's tail of this rank's ring as last read */
  int ring_due;       /* in shm_state_t.due: to be rung at the next ring_due() */
} shm_peer_t;

typedef struct {
  moeccl_comm_t* comm;
  char name[96];
  void* base;
  size_t size;
  int nlocal, me, nslots;
  uint64_t slot_mask; /* nslots - 1 when a power of two (the default), else 0 */
  int can_reach_memory; /* every local peer may read this rank's memory (probed) */
  int use_cma;          /* ... and MOECCL_CMA_DISABLE does not forbid CMA */
  int no_map;           /* MOECCL_SHM_MAP_DISABLE: read peers' memory by CMA only */
  size_t map_min;       /* sends from mapped moecclMemAlloc memory larger than this are
                         * published even when they fit a slot; 0: never */
  size_t slot_bytes, slot_stride, chunk;
  seg_header_t* hdr;
  rank_area_t* ranks;
  chan_ctrl_t* ctrl;
  char* slots;
  shm_peer_t* peers; /* by local index */
  int* due;          /* local indices of the peers ring_later() marked, ndue of them */
  int ndue;
  uint32_t armed;
  uint64_t map_clock; /* LRU clock of the peers' mapping caches */
  /* Reducing receives by CMA: a chunk is read here, then reduced into the
   * destination while it is still in cache. */
  char* bounce;
  size_t bounce_bytes;
  /* Device messages: this rank's descriptor socket (-1: no device path) and
   * the first failure of a device send, which progress reports. */
  int dev_fd, stash_cap;
  uint32_t dev_drained; /* descriptors read from the socket (rank_area_t.dev_sent) */
  moecclResult_t dev_error;
} shm_state_t;

static size_t align_up(size_t v, size_t a) { return (v + a - 1) / a * a; }

static int chan(const shm_state_t* s, int from, int to) { return from * s->nlocal + to; }

static slot_hdr_t* slot_at(const shm_state_t* s, int ch, uint64_t seq) {
  /* a division is tens of cycles on the path of every message */
  uint64_t in_ring = s->slot_mask ? seq & s->slot_mask : seq % (uint64_t)s->nslots;
  size_t idx = (size_t)ch * (size_t)s->nslots + (size_t)in_ring;
  return (slot_hdr_t*)(s->slots + idx * s->slot_stride);
}

/* Wakes local rank `local` after this rank published or freed a slot (or
 * set the abort word) for it, if it sleeps.  The doorbell is rung only
 * then: an atomic add on a line every sender shares cost each message a
 * cache-line transfer between cores (4 ranks on 2 cores, 1 KiB per rank:
 * six per rank and call).  The fence pairs with shm_wait's: either this
 * rank sees `sleeping` set, or the sleeper's re-check (shm_ready) sees
 * what was just published. */
static void ring(shm_state_t* s, int local) {
  rank_area_t* r = &s->ranks[local];
  atomic_thread_fence(memory_order_seq_cst);
  if (!atomic_load_explicit(&r->sleeping, memory_order_relaxed)) return;
  atomic_fetch_add(&r->doorbell, 1);
  moeccl_futex_wake(&r->doorbell);
}

/* The data path rings later, once per post or progress pass for every peer
 * it published or freed slots for (ring_due): the fence waits for this
 * rank's stores to reach the other cores, and paying it once per message
 * (six times a small call on 4 ranks) stalled the path that many times. */
static void ring_later(shm_state_t* s, int local) {
  shm_peer_t* p = &s->peers[local];
  if (p->ring_due) return;
  p->ring_due = 1;
  s->due[s->ndue++] = local;
}

static void ring_due(shm_state_t* s) {
  if (!s->ndue) return;
  atomic_thread_fence(memory_order_seq_cst); /* as ring's, once for all */
  for (int i = 0; i < s->ndue; i++) {
    int l = s->due[i];
    rank_area_t* r = &s->ranks[l];
    s->peers[l].ring_due = 0;
    if (!atomic_load_explicit(&r->sleeping, memory_order_relaxed)) continue;
    atomic_fetch_add(&r->doorbell, 1);
    moeccl_futex_wake(&r->doorbell);
  }
  s->ndue = 0;
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

/* Local rank l's descriptor socket: an abstract Unix name (no file; the
 * network namespace's) derived one-way from the secret and the node. */
static void dev_name(const uint8_t* digest, int l, shm_peer_t* p) {
  struct sockaddr_un* a = &p->dev_addr;
  memset(a, 0, sizeof(*a));
  a->sun_family = AF_UNIX;
  size_t cap = sizeof(a->sun_path) - 1; /* sun_path[0] = 0: abstract */
  int o = snprintf(a->sun_path + 1, cap, "moeccl-dev-");
  for (int i = 0; i < 16; i++) o += snprintf(a->sun_path + 1 + o, cap - (size_t)o, "%02x", digest[i]);
  o += snprintf(a->sun_path + 1 + o, cap - (size_t)o, "-%d", l);
  p->dev_addr_len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)o);
}

static moecclResult_t state_alloc(moeccl_comm_t* comm, shm_state_t** out) {
  shm_state_t* s = calloc(1, sizeof(*s));
  if (!s) return moecclSystemError;
  s->comm = comm;
  s->nlocal = comm->nlocal;
  s->me = comm->local_rank;
  s->nslots = (int)moeccl_param_int("MOECCL_SHM_SLOTS");
  if (s->nslots < 2) s->nslots = 2;
  if ((s->nslots & (s->nslots - 1)) == 0) s->slot_mask = (uint64_t)s->nslots - 1;
  s->slot_bytes = moeccl_param_size("MOECCL_SHM_EAGER_SIZE");
  if (s->slot_bytes < 256) s->slot_bytes = 256;
  s->slot_bytes = align_up(s->slot_bytes, CACHELINE);
  s->slot_stride = sizeof(slot_hdr_t) + s->slot_bytes;
  s->chunk = moeccl_param_size("MOECCL_SHM_CHUNK_SIZE");
  if (s->chunk < 4096) s->chunk = 4096;
  s->chunk &= ~(size_t)(CACHELINE - 1); /* whole elements for reducing receives */
  s->peers = calloc((size_t)s->nlocal, sizeof(*s->peers));
  s->due = calloc((size_t)s->nlocal, sizeof(*s->due));
  if (!s->peers || !s->due) return free(s->peers), free(s->due), free(s), moecclSystemError;
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
  s->dev_fd = -1;
  moeccl_sha256_labelled("moeccl-shm-devfd", in, sizeof(in), d);
  for (int l = 0; l < s->nlocal; l++) dev_name(d, l, &s->peers[l]);
  *out = s;
  return moecclSuccess;
}

/* Opens this rank's descriptor socket (device messages): the kernel adds
 * the sender's credentials to every message (SO_PASSCRED).  Without it the
 * device path is off, and a device message to or from this rank fails. */
static void dev_open(shm_state_t* s) {
  shm_peer_t* me = &s->peers[s->me];
  s->stash_cap = s->nslots + 1; /* a peer has at most nslots slots published */
  for (int l = 0; l < s->nlocal; l++) {
    s->peers[l].stash = calloc((size_t)s->stash_cap, sizeof(dev_fd_t));
    if (!s->peers[l].stash) return;
  }
  int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0), on = 1;
  if (fd < 0) return;
  if (setsockopt(fd, SOL_SOCKET, SO_PASSCRED, &on, sizeof(on)) != 0 ||
      bind(fd, (struct sockaddr*)&me->dev_addr, me->dev_addr_len) != 0) {
    INFO(SHM, "shm: no descriptor socket for device memory (%s): device messages fail",
         strerror(errno));
    close(fd);
    return;
  }
  s->dev_fd = fd;
}

/* Unmaps a peer's device allocation this rank imported. */
static void dev_unmap(const peer_map_t* m) {
  if (m->ipc) moeccl_device()->ipc_close(m->base);
  else moeccl_device()->unimport(m->base, m->size);
}

static void shm_fini(void* state);
static void shm_notify_abort(void* state, int culprit);

/* Collective: the first local rank creates the segment, the others map it
 * after a barrier, and it is unlinked once all have it (or by every rank
 * when a barrier fails), so nothing is left in /dev/shm even if a rank
 * dies, the creator included. */
static moecclResult_t shm_init(moeccl_comm_t* comm, const uint8_t* use, int needed_anywhere,
                               void** state) {
  *state = NULL;
  if (!needed_anywhere) return moecclSuccess;
  shm_state_t* s;
  MOECCL_CHECK(state_alloc(comm, &s));
  int needed = comm->nlocal > 1, ok = 1;
  if (needed && moeccl_device()) dev_open(s); /* before the barriers: peers may send after */
  if (needed && s->me == 0) ok = map_segment(s, 1) == 0;
  if (needed && s->me == 0)
    INFO(SHM, "shm: segment %s of %zu bytes for %d local ranks", s->name, s->size, comm->nlocal);
  moecclResult_t rc = moeccl_bootstrap_barrier(comm->boot);
  if (rc == moecclSuccess && needed && s->me != 0 && ok) ok = map_segment(s, 0) == 0;
  if (rc == moecclSuccess) rc = moeccl_bootstrap_barrier(comm->boot);
  /* Every rank knows the name and unlinks it (the others' unlinks find it
   * gone): the creator may die after the last barrier and before its own
   * unlink, or a setup fail with the creator dead. */
  if (needed) shm_unlink(s->name);
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
  /* A message that fits a slot costs two copies there, the second reading
   * lines the sender has just written in its own cache; from mapped
   * moecclMemAlloc memory the receiver copies it once from lines that are
   * clean.  The send then completes only when the receiver has copied: a
   * round trip, where an eager send is done once it is in the slot.  Past
   * SHM_MAP_MIN bytes the copy saved is worth the round trip (a2a_perf -M,
   * medians of 4-5 interleaved runs, ratio to MPI: 2 ranks, 2 KiB blocks
   * 0.96x at 512 -> 1.19x at 4096; 4 KiB and 16 KiB blocks 4.9x-5.3x
   * either way; 4 ranks on 2 cores, 1 KiB blocks 1.10x -> 1.36x, 4 and 16
   * KiB blocks 3.3x-3.7x either way). */
  if (s->can_reach_memory && !s->no_map && !moeccl_param_bool("MOECCL_SHM_MAP_SMALL_DISABLE"))
    s->map_min = SHM_MAP_MIN;
  if (rc != moecclSuccess) {
    /* A rank died during the exchanges: a local peer that completed them
     * before it did uses the segment now, and learns of it here. */
    int dead = moeccl_bootstrap_dead(comm->boot);
    if (dead >= 0 && s->hdr) shm_notify_abort(s, dead);
    shm_fini(s);
    return rc;
  }
  if (needed)
    INFO(SHM, "rank %d: shm segment %s, %d local ranks, %d slots of %zu bytes, single copy: %s%s",
         comm->rank, s->name, s->nlocal, s->nslots, s->slot_bytes,
         s->use_cma            ? "CMA and mapped moecclMemAlloc memory"
         : s->can_reach_memory ? "mapped moecclMemAlloc memory only"
                               : "off",
         s->map_min ? " (also mapped messages that fit a slot)" : "");
  *state = s;
  return moecclSuccess;
}

static void shm_fini(void* state) {
  shm_state_t* s = state;
  if (!s) return;
  for (int l = 0; l < s->nlocal; l++) {
    shm_peer_t* p = &s->peers[l];
    for (int i = 0; i < MAP_CACHE; i++) {
      if (p->maps[i].base) munmap(p->maps[i].base, p->maps[i].size);
      if (p->dev_maps[i].base) dev_unmap(&p->dev_maps[i]);
    }
    for (int k = 0; p->stash && k < p->stash_count; k++)
      if (p->stash[(p->stash_head + k) % s->stash_cap].fd >= 0)
        close(p->stash[(p->stash_head + k) % s->stash_cap].fd);
    free(p->stash);
  }
  if (s->dev_fd >= 0) close(s->dev_fd);
  if (s->base) munmap(s->base, s->size);
  free(s->bounce);
  free(s->peers);
  free(s->due);
  free(s);
}

/* ---- data path ---------------------------------------------------------- */

static void enqueue(moeccl_req_t** head, moeccl_req_t** tail, moeccl_req_t* r) {
  r->next = NULL;
  if (*tail) (*tail)->next = r;
  else *head = r;
  *tail = r;
}

static moecclResult_t truncated(shm_state_t* s, shm_peer_t* p, uint64_t got, size_t posted);

/* This rank has read the slot of channel ch at recv_seq: hand it back to
 * the sender (whose send may complete by it). */
static void free_slot(shm_state_t* s, int l, shm_peer_t* p, int ch) {
  p->recv_seq++;
  atomic_store_explicit(&s->ctrl[ch].tail, p->recv_seq, memory_order_release);
  ring_later(s, l);
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
  ring_later(s, l);
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
    *rc = truncated(s, p, h->msg_bytes, bytes);
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
  if (send) *done = !p->send_head && !(s->map_min && bytes > s->map_min) &&
                    send_small(s, l, p, buf, bytes);
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

/* r->aux bits (shm_post clears them). */
enum {
  AUX_PUBLISHED = 1, /* the descriptor is in a slot */
  AUX_DECIDED = 2,   /* AUX_RNDV holds is_rndv's answer */
  AUX_RNDV = 4,
};

/* Single copy for a large message (by CMA, or from moecclMemAlloc memory
 * that the receiver maps) and for one past SHM_MAP_MIN bytes that fits a
 * slot, from mapped memory, unless MOECCL_SHM_MAP_SMALL_DISABLE.  Decided
 * once per send: a pass asks several times. */
static int decide_rndv(const shm_state_t* s, const moeccl_req_t* r) {
  if (r->gather_span) return 1; /* shm_can_gather checked the memory */
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

static int is_rndv(const shm_state_t* s, moeccl_req_t* r) {
  if (!(r->aux & AUX_DECIDED)) r->aux |= AUX_DECIDED | (decide_rndv(s, r) ? AUX_RNDV : 0);
  return (r->aux & AUX_RNDV) != 0;
}

/* Whether every slot r needs has been written. */
static int fully_pushed(const shm_state_t* s, moeccl_req_t* r) {
  return is_rndv(s, r) ? (r->aux & AUX_PUBLISHED) != 0 : r->progress >= r->bytes;
}

/* A gathered send needs memory the receiver can map: moecclMemAlloc's. */
static int shm_can_gather(void* state, int peer, const void* buf, size_t bytes) {
  const shm_state_t* s = state;
  moeccl_mem_handle_t mh;
  (void)peer;
  return s->can_reach_memory && bytes && moeccl_mem_lookup(buf, bytes, &mh);
}

/* The first failure of the device path: kept, reported by progress. */
static int dev_fail(shm_state_t* s, moecclResult_t rc, const char* fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int dev_fail(shm_state_t* s, moecclResult_t rc, const char* fmt, ...) {
  if (s->dev_error != moecclSuccess) return -1;
  char text[256];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(text, sizeof(text), fmt, ap);
  va_end(ap);
  s->dev_error = moeccl_comm_fail(s->comm, rc, "shm: %s", text);
  /* The peers may wait on this rank's slots or descriptors: the node's
   * abort word tells them at once instead of after MOECCL_TIMEOUT. */
  int32_t expected = 0;
  atomic_compare_exchange_strong(&s->hdr->abort_rank, &expected, s->comm->rank + 1);
  for (int o = 0; o < s->nlocal; o++) ring(s, o);
  return -1;
}

/* Peer p's local index. */
static int chan_peer_index(const shm_state_t* s, const shm_peer_t* p) { return (int)(p - s->peers); }

/* A device send: exports r's allocation and passes the descriptor to peer
 * p, then fills h's region fields.  1 when sent, 0 when p's socket queue is
 * full (try again later), -1 on failure (dev_error). */
static int send_device_fd(shm_state_t* s, shm_peer_t* p, moeccl_req_t* r, slot_hdr_t* h) {
  const moeccl_device_ops_t* d = moeccl_device();
  void* base;
  size_t bytes, xbytes;
  uint64_t id;
  int fd = -1;
  if (s->dev_fd < 0)
    return dev_fail(s, moecclSystemError, "no descriptor socket: cannot send device memory");
  dev_msg_t m = {.magic = DEV_MAGIC, .device = r->mem.device, .from = s->me};
  /* VMM memory (moecclMemAllocDevice) by descriptor; other device memory
   * (cudaMalloc's) by its legacy IPC handle. */
  if (d->range(r->buf, &base, &bytes, &id) != moecclSuccess ||
      (d->export_fd(base, &fd, &xbytes) != moecclSuccess &&
       (m.by_ipc = d->ipc_export(base, m.ipc) == moecclSuccess) == 0))
    return dev_fail(s, moecclInvalidArgument,
                    "device buffer %p (to rank %d) can be exported neither as a descriptor nor "
                    "by a legacy IPC handle",
                    r->buf, p->comm_rank);
  m.id = id, m.bytes = bytes;
  char ctl[CMSG_SPACE(sizeof(int))];
  memset(ctl, 0, sizeof(ctl));
  struct iovec iov = {&m, sizeof(m)};
  struct msghdr mh = {.msg_name = &p->dev_addr,
                      .msg_namelen = p->dev_addr_len,
                      .msg_iov = &iov,
                      .msg_iovlen = 1,
                      .msg_control = m.by_ipc ? NULL : ctl,
                      .msg_controllen = m.by_ipc ? 0 : sizeof(ctl)};
  if (!m.by_ipc) {
    struct cmsghdr* c = CMSG_FIRSTHDR(&mh);
    c->cmsg_level = SOL_SOCKET, c->cmsg_type = SCM_RIGHTS, c->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(c), &fd, sizeof(fd));
  }
  ssize_t n;
  do n = sendmsg(s->dev_fd, &mh, MSG_DONTWAIT | MSG_NOSIGNAL);
  while (n < 0 && errno == EINTR);
  int err = errno;
  if (fd >= 0) close(fd);
  if (n < 0 && (err == EAGAIN || err == EWOULDBLOCK)) return 0;
  if (n != (ssize_t)sizeof(m))
    return dev_fail(s, moecclRemoteError, "passing a device descriptor to rank %d failed: %s",
                    p->comm_rank, n < 0 ? strerror(err) : "short write");
  atomic_fetch_add(&s->ranks[chan_peer_index(s, p)].dev_sent, 1);
  h->flags = HDR_DEVICE;
  h->region_id = id;
  h->region_off = (uint64_t)((char*)r->buf - (char*)base);
  h->region_fd = -1;
  return 1;
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
      if (send_device_fd(s, p, r, h) <= 0) break; /* full: next pass; failed: dev_error */
      h->kind = SLOT_RNDV;
      h->addr = (uint64_t)(uintptr_t)r->buf;
      h->frag_bytes = 0;
      r->seq = p->send_seq; /* done when the receiver frees this slot */
      r->aux |= AUX_PUBLISHED;
    } else if (is_rndv(s, r)) {
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
  if (moved) ring_later(s, l);
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
static moecclResult_t bounce_alloc(shm_state_t* s) {
  if (s->bounce) return moecclSuccess;
  s->bounce = malloc(BOUNCE_BYTES);
  if (!s->bounce)
    return moeccl_comm_fail(s->comm, moecclSystemError, "shm: out of memory for a bounce buffer");
  s->bounce_bytes = BOUNCE_BYTES;
  return moecclSuccess;
}

/* Reads up to n bytes of h's message from r->progress on into the bounce
 * buffer by CMA; *got: the bytes read. */
static moecclResult_t cma_to_bounce(shm_state_t* s, shm_peer_t* p, const slot_hdr_t* h,
                                    const moeccl_req_t* r, size_t n, size_t* got) {
  *got = 0; /* also on EINTR, which cma_failed lets pass */
  MOECCL_CHECK(bounce_alloc(s));
  if (n > s->bounce_bytes) n = s->bounce_bytes;
  struct iovec local = {s->bounce, n};
  struct iovec remote = {(void*)(uintptr_t)(h->addr + r->progress), n};
  ssize_t k = process_vm_readv(p->pid, &local, 1, &remote, 1, 0);
  if (k <= 0) return cma_failed(s, p, k, n);
  *got = (size_t)k;
  return moecclSuccess;
}

static moecclResult_t pull_reduce_cma(shm_state_t* s, shm_peer_t* p, const slot_hdr_t* h,
                                      moeccl_req_t* r, size_t n) {
  size_t got = 0;
  MOECCL_CHECK(cma_to_bounce(s, p, h, r, n, &got));
  if (!got) return moecclSuccess; /* EINTR: next pass */
  size_t elem = r->red->elem_size, whole = got / elem;
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

/* Reads every descriptor waiting on this rank's socket into its sender's
 * stash.  A message whose credentials are not a local peer's is dropped. */
static moecclResult_t drain_dev_fds(shm_state_t* s) {
  for (;;) {
    dev_msg_t m;
    char ctl[CMSG_SPACE(sizeof(int)) + CMSG_SPACE(sizeof(struct ucred))];
    struct iovec iov = {&m, sizeof(m)};
    struct msghdr mh = {
        .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl, .msg_controllen = sizeof(ctl)};
    ssize_t n = recvmsg(s->dev_fd, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return moecclSuccess;
    if (n < 0) {
      dev_fail(s, moecclSystemError, "descriptor socket: %s", strerror(errno));
      return s->dev_error;
    }
    int fd = -1;
    pid_t pid = 0;
    for (struct cmsghdr* c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c)) {
      if (c->cmsg_level != SOL_SOCKET) continue;
      if (c->cmsg_type == SCM_RIGHTS && c->cmsg_len >= CMSG_LEN(sizeof(int)))
        memcpy(&fd, CMSG_DATA(c), sizeof(fd));
      if (c->cmsg_type == SCM_CREDENTIALS && c->cmsg_len >= CMSG_LEN(sizeof(struct ucred))) {
        struct ucred cr;
        memcpy(&cr, CMSG_DATA(c), sizeof(cr));
        pid = cr.pid;
      }
    }
    int from = n == (ssize_t)sizeof(m) && m.magic == DEV_MAGIC ? m.from : -1;
    if (from < 0 || from >= s->nlocal || from == s->me || (fd < 0) != (m.by_ipc != 0) ||
        pid != s->peers[from].pid) {
      WARN(SHM, "shm: dropped a descriptor message (%zd bytes, pid %d) that no local peer sent", n,
           (int)pid);
      if (fd >= 0) close(fd);
      continue;
    }
    s->dev_drained++;
    shm_peer_t* p = &s->peers[from];
    if (p->stash_count == s->stash_cap) {
      close(fd);
      dev_fail(s, moecclInternalError, "rank %d sent more descriptors than slots", p->comm_rank);
      return s->dev_error;
    }
    dev_fd_t* e = &p->stash[(p->stash_head + p->stash_count++) % s->stash_cap];
    *e = (dev_fd_t){m.id, m.bytes, m.device, fd, {0}};
    memcpy(e->ipc, m.ipc, sizeof(e->ipc));
  }
}

/* The peer's device allocation a published slot names, imported here and
 * cached by its id (the descriptor that came with the slot is closed).
 * NULL with *wait set when the descriptor has not arrived, NULL alone on a
 * failure (dev_error). */
static const char* import_peer_device(shm_state_t* s, shm_peer_t* p, const slot_hdr_t* h,
                                      int device, int* wait) {
  if (s->dev_fd < 0) {
    dev_fail(s, moecclSystemError, "no descriptor socket: cannot receive device memory");
    return NULL;
  }
  if (!p->stash_count && drain_dev_fds(s) != moecclSuccess) return NULL;
  if (!p->stash_count) return *wait = 1, NULL;
  dev_fd_t e = p->stash[p->stash_head];
  p->stash_head = (p->stash_head + 1) % s->stash_cap, p->stash_count--;
  if (e.id != h->region_id || h->region_off + h->msg_bytes > e.bytes) {
    if (e.fd >= 0) close(e.fd);
    dev_fail(s, moecclInternalError,
             "rank %d's device message names allocation %llu at %llu, its descriptor %llu",
             p->comm_rank, (unsigned long long)h->region_id, (unsigned long long)h->region_off,
             (unsigned long long)e.id);
    return NULL;
  }
  peer_map_t* victim = &p->dev_maps[0];
  for (int i = 0; i < MAP_CACHE; i++) {
    peer_map_t* m = &p->dev_maps[i];
    if (m->base && m->id == e.id) {
      if (e.fd >= 0) close(e.fd);
      m->last_use = ++s->map_clock;
      return m->base;
    }
    if (!m->base || (victim->base && m->last_use < victim->last_use)) victim = m;
  }
  void* ptr = NULL;
  if (device < 0) device = e.device;
  moecclResult_t rc = e.fd >= 0 ? moeccl_device()->import_fd(e.fd, e.bytes, device, &ptr)
                                : moeccl_device()->ipc_import(e.ipc, &ptr);
  if (e.fd >= 0) close(e.fd);
  if (rc != moecclSuccess) {
    dev_fail(s, rc, "importing rank %d's device allocation (%llu bytes) failed", p->comm_rank,
             (unsigned long long)e.bytes);
    return NULL;
  }
  if (victim->base) dev_unmap(victim);
  *victim = (peer_map_t){e.id, ptr, (size_t)e.bytes, ++s->map_clock, e.fd < 0};
  TRACE(SHM, "imported device allocation %llu of rank %d (%llu bytes)", (unsigned long long)e.id,
        p->comm_rank, (unsigned long long)e.bytes);
  return ptr;
}

/* A reducing receive into host memory (the executor reduces in place
 * only there) of a message in a peer's device memory: the copy engine
 * brings it to the bounce buffer a piece at a time, the host kernel
 * reduces each piece; the whole message in this pass (its descriptor was
 * taken for this slot). */
static moecclResult_t reduce_device_message(shm_state_t* s, shm_peer_t* p, moeccl_req_t* r,
                                            const char* src, size_t n) {
  MOECCL_CHECK(bounce_alloc(s));
  size_t es = r->red->elem_size, piece = s->bounce_bytes / es * es;
  for (size_t off = 0; off < n; off += piece) {
    size_t k = n - off < piece ? n - off : piece;
    moecclResult_t rc = moeccl_device_copy(s->bounce, src + off, k);
    if (rc != moecclSuccess)
      return moeccl_comm_fail(s->comm, rc, "shm: copying %zu bytes from rank %d failed", k,
                              p->comm_rank);
    moeccl_reduce(r->red, (char*)r->buf + off, (const char*)r->operand + off, s->bounce, k / es,
                  r->red_flags);
  }
  r->progress = n;
  return moecclSuccess;
}

/* A receive where device memory is on either side: the copy engine copies
 * into r's buffer, from the sender's imported device allocation, from the
 * slot (eager), or from its mapped moecclMemAlloc memory; from other host
 * memory a chunk is read by CMA into the bounce buffer first.  No kernel
 * runs on device memory here: a consuming receive lands the message and
 * the executor runs its program (the executor stages reducing ones). */
static moecclResult_t pull_device(shm_state_t* s, shm_peer_t* p, const slot_hdr_t* h,
                                  moeccl_req_t* r, int* wait) {
  int dev_src = h->kind == SLOT_RNDV && (h->flags & HDR_DEVICE);
  if ((r->red && !dev_src) || (h->kind == SLOT_RNDV && (h->flags & HDR_GATHERED)))
    return moeccl_comm_fail(s->comm, moecclInvalidUsage,
                            "shm: rank %d's message %s, which this build cannot do with device "
                            "memory on either side",
                            p->comm_rank,
                            r->red ? "is to be reduced in place" : "is a whole gathered buffer");
  char* dst = (char*)r->buf + r->progress;
  const char* src;
  size_t n;
  if (h->kind == SLOT_FRAG) {
    src = (const char*)(h + 1), n = h->frag_bytes;
  } else if (dev_src) {
    int device = r->mem.kind == MOECCL_MEM_DEVICE ? r->mem.device : -1; /* -1: the sender's */
    const char* base = import_peer_device(s, p, h, device, wait);
    if (!base) return *wait ? moecclSuccess : s->dev_error;
    src = base + h->region_off, n = h->msg_bytes;
    if (r->red) return reduce_device_message(s, p, r, src, n); /* host result, device message */
  } else {
    const char* region = h->region_fd >= 0 ? map_peer_region(s, p, h) : NULL;
    n = h->msg_bytes - r->progress;
    if (region) {
      src = region + h->region_off + r->progress;
    } else {
      MOECCL_CHECK(cma_to_bounce(s, p, h, r, n, &n));
      if (!n) return moecclSuccess; /* EINTR: next pass */
      src = s->bounce;
    }
  }
  moecclResult_t rc = moeccl_device_copy(dst, src, n);
  if (rc != moecclSuccess)
    return moeccl_comm_fail(s->comm, rc, "shm: copying %zu bytes from rank %d failed", n,
                            p->comm_rank);
  r->progress += n;
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
    if (r->mem.kind == MOECCL_MEM_DEVICE || r->rows_device ||
        (h->kind == SLOT_RNDV && (h->flags & HDR_DEVICE))) {
      int wait = 0;
      MOECCL_CHECK(pull_device(s, p, h, r, &wait));
      if (wait) return moecclSuccess;
      slot_done = h->kind == SLOT_FRAG || r->progress == h->msg_bytes;
    } else if (h->kind == SLOT_RNDV) {
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
  MOECCL_CHECK(check_abort(s));
  /* Whenever descriptors wait: the socket's queue is short
   * (net.unix.max_dgram_qlen, 10 here), and a peer's sends must not wait
   * until this rank needs one of them.  A load of a shared word a pass. */
  if (s->dev_fd >= 0 &&
      atomic_load_explicit(&s->ranks[s->me].dev_sent, memory_order_acquire) != s->dev_drained)
    MOECCL_CHECK(drain_dev_fds(s));
  moecclResult_t rc = moecclSuccess;
  for (int l = 0; l < s->nlocal && rc == moecclSuccess; l++) {
    shm_peer_t* p = &s->peers[l];
    if (p->send_head) *progressed |= progress_sends(s, l, p);
    if (p->recv_head) rc = progress_recvs(s, l, p, progressed);
  }
  ring_due(s);
  return rc != moecclSuccess ? rc : s->dev_error;
}

/* What post_now moved is rung for here (transport.h). */
static void shm_flush(void* state) { ring_due(state); }

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
    if (p->recv_head && moeccl_req_rows_turn(p->recv_head) &&
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
    .mem_types = MOECCL_MEM_TYPE_HOST | MOECCL_MEM_TYPE_DEVICE,
    /* a message past the slot size is published, pulled and its slot
     * freed: a round trip more before the sender's step ends */
    .link = {1.5, 0.3, 10.0, MOECCL_LINK_RNDV_SHM_SLOT},
    .can_gather = shm_can_gather,
    .score = NULL,
    .can_reach = shm_can_reach,
    .init = shm_init,
    .post = shm_post,
    .post_now = shm_post_now,
    .flush = shm_flush,
    .progress = shm_progress,
    .arm = shm_arm,
    .wait = shm_wait,
    .check_peers = shm_check_peers,
    .notify_abort = shm_notify_abort,
    .cancel_all = shm_cancel_all,
    .fini = shm_fini,
};
