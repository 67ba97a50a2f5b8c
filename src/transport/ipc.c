/*
 * The ipc transport: device memory between the ranks of one node, moved by
 * the copy engine on the caller's stream (CUDA IPC over NVLink or PCIe, or
 * one GPU shared by several ranks; the emulation in CI).  It is a stream
 * transport (transport.h: MOECCL_TRANSPORT_CAP_STREAM): the executor hands
 * it a whole device schedule, and
 *   - on the host (lower_begin), each rank writes one descriptor per SEND
 *     op (its allocation's id and offset, the size) into a ring in shared
 *     memory towards the receiver, and reads the descriptors of the
 *     messages its RECV ops match from its senders' rings, in posting order
 *     per pair.  A peer's allocation is mapped once and cached by its id
 *     (VMM memory by a file descriptor passed once over a Unix socket,
 *     cudaMalloc memory by its legacy IPC handle in the descriptor), so a
 *     repeated call passes no descriptor and makes no system call.  The
 *     host may wait for a peer to have made its side of the call (its
 *     descriptors), with the communicator's deadline, never for a device;
 *   - on the stream (lower_step), per step: the rank marks its sends ready
 *     (a counter per pair in the receiver's shared memory, written by the
 *     stream), waits until its senders' streams marked theirs, copies each
 *     message straight from the sender's buffer into its own (one copy,
 *     pulled by the receiver), marks them read, and waits until its
 *     receivers read its sends.  Waits and writes of a phase go in one batch
 *     of stream memory operations.  No library thread, no host function and
 *     no spinning kernel is involved: when the stream passes the call, the
 *     receive buffers hold the result and the send buffers may be reused.
 * The counters live in host memory every rank maps and registers with the
 * device, so the host can see how far each stream got: destroy waits for
 * its streams' work with the peers to be past before it unmaps anything,
 * and an abort releases this rank's waits.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "comm/bootstrap.h"
#include "device/device.h"
#include "base/param.h"
#include "base/sha256.h"
#include "transport/transport.h"

#define RING 256 /* descriptors in flight per ordered pair */
#define LINE 64
#define MSG_MAGIC 0x6d6f6563636c4950ULL /* "moecclIP" */
#define SEG_MAGIC 0x6d6f6563636c5347ULL

/* How a descriptor names its allocation. */
enum { HOW_KNOWN = 0, HOW_FD = 1, HOW_IPC = 2 };

/* One message of a sender, in its ring towards the receiver. */
typedef struct {
  uint64_t id;    /* the allocation (device.h range: never reused in the sender) */
  uint64_t off;   /* of the message in it */
  uint64_t bytes; /* of the message */
  uint64_t alloc_bytes;
  int32_t device, how;
  unsigned char ipc[MOECCL_IPC_HANDLE_BYTES]; /* HOW_IPC: the legacy handle */
} desc_t;

typedef struct {
  _Atomic uint64_t head; /* descriptors written (the sender's) */
  char pad0[LINE - 8];
  _Atomic uint64_t tail; /* descriptors read (the receiver's) */
  char pad1[LINE - 8];
  desc_t ent[RING];
} ring_t;

typedef struct {
  volatile uint64_t v;
  char pad[LINE - 8];
} flag_t;

/* A rank's shared segment (a memfd every local peer maps):
 *   ready[l]  messages local rank l made ready for this rank (l's stream writes)
 *   done[l]   messages of this rank that local rank l has read (l's stream writes)
 *   passed[k] calls this rank lowered on its k-th stream that the stream
 *             has passed (its own stream writes: destroy waits for them)
 *   freed     ids of this rank's allocations freed (moecclMemFree) that it
 *             had handed over: the peers unmap them
 *   ring[l]   this rank's descriptors towards local rank l */
typedef struct {
  uint64_t magic;
  int32_t nlocal, pid;
  char pad[LINE - 16];
} seg_hdr_t;

/* A datagram on a rank's socket: a segment (at init) or an allocation's
 * descriptor (HOW_FD), with the file descriptor as SCM_RIGHTS. */
typedef struct {
  uint64_t magic;
  int32_t from, kind; /* kind 0: segment, 1: allocation */
  uint64_t id, bytes;
  int32_t device, pad;
} msg_t;

typedef struct {
  uint64_t id;
  void* base;
  size_t bytes;
  int ipc; /* opened by legacy handle (else imported from a descriptor) */
} import_t;

typedef struct {
  uint64_t id, bytes;
  int fd, device;
} stash_t;

typedef struct {
  int comm_rank, in_use;
  pid_t pid;
  uint64_t pid_start;
  char* seg;          /* its segment, mapped here (this rank's own for l == me) */
  char* seg_dev;      /* the same, as the device sees it (host_register) */
  uint64_t sent;      /* messages this rank lowered towards it */
  uint64_t recvd;     /* messages of it this rank lowered */
  uint64_t* exported; /* ids of allocations whose descriptor it has */
  int nexported, exported_cap;
  import_t* imports; /* its allocations mapped here */
  int nimports, imports_cap;
  stash_t* stash; /* descriptors received ahead of need */
  int nstash, stash_cap;
  uint64_t freed_tail; /* entries of its freed ring this rank has acted on */
  struct sockaddr_un addr;
  socklen_t addr_len;
} ipeer_t;

/* What lower_begin decided per op of the schedule, for lower_step. */
typedef struct {
  const char* src; /* RECV: the sender's memory, mapped here */
  uint64_t bytes;  /* RECV: what to copy */
  uint64_t count;  /* the pair's message count after this one (ready / done value) */
} match_t;

#define STREAM_SLOTS 16 /* streams whose progress the segment shows */
#define FREED_RING 256  /* allocations freed lately, in a rank's segment */
#define FREED_LOG 1024  /* ... and in the process, for its communicators */

typedef struct ipc_state {
  moeccl_comm_t* comm;
  const moeccl_device_ops_t* d;
  int me, nlocal, sock;
  size_t seg_bytes;
  int seg_fd;
  ipeer_t* peers; /* by local index */
  match_t* match;
  int match_cap;
  uint64_t* agg; /* lower_step: per local index, last send count / last recv count */
  moeccl_dev_memop_t* memops;
  int registered; /* segments registered with the device */
  /* lower_begin: the allocation of the schedule's buffer last looked up */
  struct {
    int buf; /* -1: none this call */
    void* base;
    size_t size;
    uint64_t id;
    int device;
  } range;
  struct {
    void* stream;
    uint64_t lowered; /* calls lowered on it (the value its passed flag reaches) */
  } streams[STREAM_SLOTS];
  int nstreams;
  uint64_t freed_seen; /* entries of the process's freed log handled */
  /* the watchdog's: 1 + the comm rank of a peer that died with work queued
   * (its waits were released); the next call fails naming it */
  _Atomic int lost;
  struct ipc_state* next_watched;
  /* lower_step's copies of a step, queued in one batch */
  void** copy_dst;
  const void** copy_src;
  size_t* copy_bytes;
  int copies_cap;
  moeccl_ipc_stats_t stats;
} ipc_state_t;

static size_t off_ready(void) { return sizeof(seg_hdr_t); }
static size_t off_done(int nlocal) { return off_ready() + (size_t)nlocal * sizeof(flag_t); }
static size_t off_passed(int nlocal) { return off_done(nlocal) + (size_t)nlocal * sizeof(flag_t); }
typedef struct {
  _Atomic uint64_t head;
  char pad[LINE - 8];
  uint64_t id[FREED_RING];
} freed_ring_t;

static size_t off_freed(int nlocal) { return off_passed(nlocal) + STREAM_SLOTS * sizeof(flag_t); }
static size_t off_ring(int nlocal) { return off_freed(nlocal) + sizeof(freed_ring_t); }
static size_t seg_size(int nlocal) {
  size_t b = off_ring(nlocal) + (size_t)nlocal * sizeof(ring_t);
  long page = sysconf(_SC_PAGESIZE);
  return (b + (size_t)page - 1) / (size_t)page * (size_t)page;
}

static flag_t* ready_of(char* seg, int l) { return (flag_t*)(seg + off_ready()) + l; }
/* Flags are written by streams (and, on a failure, by hosts) of several
 * processes: read and written whole, atomically. */
static uint64_t flag_get(const flag_t* f) { return __atomic_load_n(&f->v, __ATOMIC_ACQUIRE); }
static void flag_set(flag_t* f, uint64_t v) { __atomic_store_n(&f->v, v, __ATOMIC_RELEASE); }
static flag_t* done_of(char* seg, int nlocal, int l) {
  return (flag_t*)(seg + off_done(nlocal)) + l;
}
static flag_t* passed_of(char* seg, int nlocal, int k) {
  return (flag_t*)(seg + off_passed(nlocal)) + k;
}
static ring_t* ring_of(char* seg, int nlocal, int l) {
  return (ring_t*)(seg + off_ring(nlocal)) + l;
}
static freed_ring_t* freed_of(char* seg, int nlocal) {
  return (freed_ring_t*)(seg + off_freed(nlocal));
}

/* A flag of peer l's segment as the device addresses it. */
static volatile uint64_t* dev_addr(const ipc_state_t* s, int l, const flag_t* f) {
  const ipeer_t* p = &s->peers[l];
  return (volatile uint64_t*)(p->seg_dev + ((const char*)f - p->seg));
}

static int can_reach(const moeccl_comm_t* comm, int peer) {
  return comm->peers[peer].host_hash == comm->peers[comm->rank].host_hash &&
         comm->peers[peer].machine_hash == comm->peers[comm->rank].machine_hash;
}

/* Local rank l's socket: an abstract Unix name derived one-way from the
 * secret and the node. */
static void sock_name(const uint8_t* digest, int l, ipeer_t* p) {
  struct sockaddr_un* a = &p->addr;
  memset(a, 0, sizeof(*a));
  a->sun_family = AF_UNIX;
  size_t cap = sizeof(a->sun_path) - 1;
  int o = snprintf(a->sun_path + 1, cap, "moeccl-ipc-");
  for (int i = 0; i < 16; i++)
    o += snprintf(a->sun_path + 1 + o, cap - (size_t)o, "%02x", digest[i]);
  o += snprintf(a->sun_path + 1 + o, cap - (size_t)o, "-%d", l);
  p->addr_len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)o);
}

static int send_msg(ipc_state_t* s, int l, const msg_t* m, int fd) {
  char ctl[CMSG_SPACE(sizeof(int))];
  memset(ctl, 0, sizeof(ctl));
  struct iovec iov = {(void*)m, sizeof(*m)};
  struct msghdr mh = {.msg_name = &s->peers[l].addr,
                      .msg_namelen = s->peers[l].addr_len,
                      .msg_iov = &iov,
                      .msg_iovlen = 1,
                      .msg_control = ctl,
                      .msg_controllen = sizeof(ctl)};
  struct cmsghdr* c = CMSG_FIRSTHDR(&mh);
  c->cmsg_level = SOL_SOCKET, c->cmsg_type = SCM_RIGHTS, c->cmsg_len = CMSG_LEN(sizeof(int));
  memcpy(CMSG_DATA(c), &fd, sizeof(fd));
  ssize_t n;
  do n = sendmsg(s->sock, &mh, MSG_DONTWAIT | MSG_NOSIGNAL);
  while (n < 0 && errno == EINTR);
  s->stats.syscalls++;
  if (n == (ssize_t)sizeof(*m)) return 1;
  return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) ? 0 : -1;
}

/* Reads one datagram: 1 (message and *fd, the sender's local index in
 * *from), 0 none waiting, -1 an error.  A message no local peer sent (by
 * its credentials) is dropped. */
static int recv_msg(ipc_state_t* s, msg_t* m, int* fd, int* from) {
  for (;;) {
    char ctl[CMSG_SPACE(sizeof(int)) + CMSG_SPACE(sizeof(struct ucred))];
    struct iovec iov = {m, sizeof(*m)};
    struct msghdr mh = {
        .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl, .msg_controllen = sizeof(ctl)};
    ssize_t n = recvmsg(s->sock, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
    s->stats.syscalls++;
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return errno == EAGAIN || errno == EWOULDBLOCK ? 0 : -1;
    *fd = -1;
    pid_t pid = 0;
    for (struct cmsghdr* c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c)) {
      if (c->cmsg_level != SOL_SOCKET) continue;
      if (c->cmsg_type == SCM_RIGHTS && c->cmsg_len >= CMSG_LEN(sizeof(int)))
        memcpy(fd, CMSG_DATA(c), sizeof(int));
      if (c->cmsg_type == SCM_CREDENTIALS && c->cmsg_len >= CMSG_LEN(sizeof(struct ucred))) {
        struct ucred cr;
        memcpy(&cr, CMSG_DATA(c), sizeof(cr));
        pid = cr.pid;
      }
    }
    int l = n == (ssize_t)sizeof(*m) && m->magic == MSG_MAGIC ? m->from : -1;
    if (l < 0 || l >= s->nlocal || l == s->me || pid != s->peers[l].pid || *fd < 0) {
      WARN(SHM, "ipc: dropped a message (%zd bytes, pid %d) that no local peer sent", n, (int)pid);
      if (*fd >= 0) close(*fd);
      continue;
    }
    *from = l;
    return 1;
  }
}

/* ---- allocations freed ------------------------------------------------------ */

/* moecclMemFree's log of freed device allocations, for every communicator
 * of the process.  Lossy past FREED_LOG: a missed id only stays mapped in
 * the peers until the communicator goes. */
static pthread_mutex_t freed_lock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t freed_log[FREED_LOG];
static uint64_t freed_count;

void moeccl_ipc_forget(uint64_t id) {
  pthread_mutex_lock(&freed_lock);
  freed_log[freed_count++ % FREED_LOG] = id;
  pthread_mutex_unlock(&freed_lock);
}

/* The ids freed since the last look that this rank had handed over go into
 * its segment's freed ring (and out of its lists). */
static void announce_freed(ipc_state_t* s) {
  pthread_mutex_lock(&freed_lock);
  if (freed_count - s->freed_seen > FREED_LOG) s->freed_seen = freed_count - FREED_LOG;
  freed_ring_t* ring = freed_of(s->peers[s->me].seg, s->nlocal);
  for (; s->freed_seen < freed_count; s->freed_seen++) {
    uint64_t id = freed_log[s->freed_seen % FREED_LOG];
    int handed = 0;
    for (int l = 0; l < s->nlocal; l++) {
      ipeer_t* p = &s->peers[l];
      for (int i = 0; i < p->nexported; i++)
        if (p->exported[i] == id) p->exported[i--] = p->exported[--p->nexported], handed = 1;
    }
    if (!handed) continue;
    uint64_t head = atomic_load_explicit(&ring->head, memory_order_relaxed);
    ring->id[head % FREED_RING] = id;
    atomic_store_explicit(&ring->head, head + 1, memory_order_release);
  }
  pthread_mutex_unlock(&freed_lock);
}

/* Legacy IPC handles opened by this process, shared by its communicators:
 * CUDA maps a handle once per process (and refuses to open it again), so
 * two communicators with the same peer share the mapping, counted.  Keyed
 * by the owner and its allocation id (a handle's bytes may come back for a
 * later allocation once one is freed). */
typedef struct {
  pid_t pid;
  uint64_t id;
  void* base;
  int refs;
} ipc_open_t;
static pthread_mutex_t opens_lock = PTHREAD_MUTEX_INITIALIZER;
static ipc_open_t* opens;
static int nopens, opens_cap;

static moecclResult_t ipc_open(const moeccl_device_ops_t* d, pid_t pid, uint64_t id,
                               const unsigned char* handle, void** base) {
  pthread_mutex_lock(&opens_lock);
  moecclResult_t rc = moecclSuccess;
  int i = 0;
  while (i < nopens && !(opens[i].pid == pid && opens[i].id == id)) i++;
  if (i < nopens) {
    opens[i].refs++, *base = opens[i].base;
  } else {
    if (nopens == opens_cap) {
      int cap = opens_cap ? 2 * opens_cap : 16;
      ipc_open_t* a = realloc(opens, sizeof(*a) * (size_t)cap);
      if (a) opens = a, opens_cap = cap;
      else rc = moecclSystemError;
    }
    if (rc == moecclSuccess && (rc = d->ipc_import(handle, base)) == moecclSuccess) {
      opens[nopens++] = (ipc_open_t){pid, id, *base, 1};
    }
  }
  pthread_mutex_unlock(&opens_lock);
  return rc;
}

static void ipc_unref(const moeccl_device_ops_t* d, void* base) {
  pthread_mutex_lock(&opens_lock);
  for (int i = 0; i < nopens; i++)
    if (opens[i].base == base) {
      if (--opens[i].refs == 0) {
        d->ipc_close(base);
        opens[i] = opens[--nopens];
      }
      break;
    }
  pthread_mutex_unlock(&opens_lock);
}

static void unmap_import(ipc_state_t* s, const import_t* im) {
  if (im->ipc) ipc_unref(s->d, im->base);
  else s->d->unimport(im->base, im->bytes);
}

/* Unmaps what the peers freed.  Safe at once: the owner freed after its
 * streams were done (moecclMemFree waits for the device), and each of its
 * sends waited for this rank's stream to have copied the message. */
static void drop_freed(ipc_state_t* s) {
  for (int l = 0; l < s->nlocal; l++) {
    ipeer_t* p = &s->peers[l];
    if (l == s->me || !p->seg || !p->nimports) continue;
    freed_ring_t* ring = freed_of(p->seg, s->nlocal);
    uint64_t head = atomic_load_explicit(&ring->head, memory_order_acquire);
    if (head - p->freed_tail > FREED_RING) p->freed_tail = head - FREED_RING; /* missed some */
    for (; p->freed_tail < head; p->freed_tail++) {
      uint64_t id = ring->id[p->freed_tail % FREED_RING];
      if (atomic_load_explicit(&ring->head, memory_order_acquire) - p->freed_tail > FREED_RING)
        continue; /* overwritten while read */
      for (int i = 0; i < p->nimports; i++)
        if (p->imports[i].id == id) {
          unmap_import(s, &p->imports[i]);
          p->imports[i] = p->imports[--p->nimports];
          s->stats.unmaps++;
          break;
        }
    }
  }
}

/* ---- setup -------------------------------------------------------------- */

static void state_free(ipc_state_t* s) {
  for (int l = 0; s->peers && l < s->nlocal; l++) {
    ipeer_t* p = &s->peers[l];
    for (int i = 0; i < p->nimports; i++) unmap_import(s, &p->imports[i]);
    for (int i = 0; i < p->nstash; i++) close(p->stash[i].fd);
    if (p->seg && s->registered) s->d->host_unregister(p->seg);
    if (p->seg) munmap(p->seg, s->seg_bytes);
    free(p->exported), free(p->imports), free(p->stash);
  }
  if (s->sock >= 0) close(s->sock);
  if (s->seg_fd >= 0) close(s->seg_fd);
  free(s->peers), free(s->match), free(s->agg), free(s->memops);
  free(s->copy_dst), free(s->copy_src), free(s->copy_bytes);
  free(s);
}

static moecclResult_t map_seg(ipc_state_t* s, int l, int fd) {
  void* p = mmap(NULL, s->seg_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) return moecclSystemError;
  s->peers[l].seg = p;
  return moecclSuccess;
}

/* Creates and maps this rank's segment and opens its socket. */
static moecclResult_t setup_local(ipc_state_t* s) {
  s->seg_fd = memfd_create("moeccl-ipc", MFD_CLOEXEC);
  if (s->seg_fd < 0 || ftruncate(s->seg_fd, (off_t)s->seg_bytes) != 0) return moecclSystemError;
  MOECCL_CHECK(map_seg(s, s->me, s->seg_fd));
  seg_hdr_t* h = (seg_hdr_t*)s->peers[s->me].seg;
  h->magic = SEG_MAGIC, h->nlocal = s->nlocal, h->pid = (int32_t)getpid();
  int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0), on = 1;
  if (fd < 0) return moecclSystemError;
  s->sock = fd;
  const ipeer_t* me = &s->peers[s->me];
  if (setsockopt(fd, SOL_SOCKET, SO_PASSCRED, &on, sizeof(on)) != 0 ||
      bind(fd, (const struct sockaddr*)&me->addr, me->addr_len) != 0)
    return moecclSystemError;
  return moecclSuccess;
}

/* Maps a peer's segment, received on the socket. */
static moecclResult_t take_segment(ipc_state_t* s, const msg_t* got, int fd, int from) {
  moecclResult_t rc = got->kind == 0 && s->peers[from].in_use && !s->peers[from].seg
                          ? map_seg(s, from, fd)
                          : moecclInternalError;
  close(fd);
  if (rc != moecclSuccess) return rc;
  const seg_hdr_t* h = (const seg_hdr_t*)s->peers[from].seg;
  return h->magic == SEG_MAGIC && h->nlocal == s->nlocal ? moecclSuccess : moecclInternalError;
}

/* Sends this rank's segment to every peer in use and maps theirs, receiving
 * while sending: a socket queues only a few datagrams
 * (net.unix.max_dgram_qlen), fewer than a node may have ranks. */
static moecclResult_t swap_segments(ipc_state_t* s, double deadline) {
  msg_t m = {.magic = MSG_MAGIC, .from = s->me, .kind = 0};
  int want = 0, next = 0;
  for (int l = 0; l < s->nlocal; l++) want += s->peers[l].in_use;
  while (want > 0 || next < s->nlocal) {
    int moved = 0;
    while (next < s->nlocal) {
      if (!s->peers[next].in_use) {
        next++;
        continue;
      }
      int r = send_msg(s, next, &m, s->seg_fd);
      if (r < 0) return moecclSystemError;
      if (r == 0) break; /* its queue is full: receive meanwhile */
      next++, moved = 1;
    }
    msg_t got;
    int fd, from, r;
    while (want > 0 && (r = recv_msg(s, &got, &fd, &from)) != 0) {
      if (r < 0) return moecclSystemError;
      MOECCL_CHECK(take_segment(s, &got, fd, from));
      want--, moved = 1;
    }
    if (moved) continue;
    if (moeccl_now() > deadline) return moecclTimeout;
    usleep(200);
  }
  return moecclSuccess;
}

static moecclResult_t register_segments(ipc_state_t* s) {
  for (int l = 0; l < s->nlocal; l++) {
    ipeer_t* p = &s->peers[l];
    if (!p->seg) continue;
    void* dev = NULL;
    if (s->d->host_register(p->seg, s->seg_bytes, &dev) != moecclSuccess) {
      for (int k = 0; k < l; k++)
        if (s->peers[k].seg) s->d->host_unregister(s->peers[k].seg);
      return moecclSystemError;
    }
    p->seg_dev = dev;
  }
  s->registered = 1;
  return moecclSuccess;
}

static moecclResult_t state_alloc(moeccl_comm_t* comm, const uint8_t* use, ipc_state_t** out) {
  ipc_state_t* s = calloc(1, sizeof(*s));
  if (!s) return moecclSystemError;
  s->comm = comm, s->d = moeccl_device(), s->sock = -1, s->seg_fd = -1;
  s->me = comm->local_rank, s->nlocal = comm->nlocal;
  s->seg_bytes = seg_size(s->nlocal);
  s->peers = calloc((size_t)s->nlocal, sizeof(*s->peers));
  s->agg = calloc(2 * (size_t)s->nlocal, sizeof(*s->agg));
  s->memops = calloc(2 * (size_t)s->nlocal + 1, sizeof(*s->memops));
  *out = s;
  if (!s->peers || !s->agg || !s->memops || !s->d) return moecclSystemError;
  uint8_t in[MOECCL_SECRET_BYTES + 8], dg[32];
  memcpy(in, comm->secret, MOECCL_SECRET_BYTES);
  memcpy(in + MOECCL_SECRET_BYTES, &comm->peers[comm->rank].host_hash, 8);
  moeccl_sha256_labelled("moeccl-ipc", in, sizeof(in), dg);
  for (int l = 0; l < s->nlocal; l++) {
    ipeer_t* p = &s->peers[l];
    int r = comm->local_ranks[l];
    p->comm_rank = r, p->pid = comm->peers[r].pid, p->pid_start = comm->peers[r].pid_start;
    p->in_use = use[r];
    sock_name(dg, l, p);
  }
  return moecclSuccess;
}

static void watch(ipc_state_t* s);

/* Collective: every rank makes the same two allgathers, contributing a
 * failure mark where its own part failed. */
static moecclResult_t ipc_init(moeccl_comm_t* comm, const uint8_t* use, int needed, void** state) {
  *state = NULL;
  if (!needed) return moecclSuccess;
  int mine = 0;
  for (int p = 0; p < comm->nranks; p++) mine |= use[p];
  ipc_state_t* s = NULL;
  moecclResult_t rc = mine ? state_alloc(comm, use, &s) : moecclSuccess;
  if (rc == moecclSuccess && mine) rc = setup_local(s);
  int32_t* ok = calloc((size_t)comm->nranks, sizeof(*ok));
  if (!ok) rc = moecclSystemError;
  for (int step = 0; step < 2 && ok; step++) { /* 0: sockets bound; 1: segments mapped */
    ok[comm->rank] = rc == moecclSuccess;
    if (moeccl_bootstrap_allgather(comm->boot, ok, sizeof(*ok)) != moecclSuccess) {
      rc = moecclRemoteError;
      break;
    }
    for (int r = 0; r < comm->nranks; r++)
      if (!ok[r] && rc == moecclSuccess) rc = moecclRemoteError; /* some rank failed: all do */
    if (step == 0 && rc == moecclSuccess && mine)
      rc = swap_segments(s, moeccl_now() + comm->timeout);
    if (step == 0 && rc == moecclSuccess && mine) rc = register_segments(s);
  }
  free(ok);
  if (rc != moecclSuccess) {
    if (s) state_free(s);
    return rc;
  }
  if (s) {
    s->stats.syscalls = 0; /* counted per call from here */
    pthread_mutex_lock(&freed_lock);
    s->freed_seen = freed_count; /* frees before it named nothing it handed over */
    pthread_mutex_unlock(&freed_lock);
    INFO(INIT, "ipc: rank %d maps %d local peer segment(s) of %zu bytes", comm->rank, s->nlocal - 1,
         s->seg_bytes);
    watch(s);
  }
  *state = s;
  return moecclSuccess;
}

static void release_waits(ipc_state_t* s);

/* Whether this rank's queued work with peer l has passed (visible in the
 * segments: its sends read, its receives marked read). */
static int passed_with(ipc_state_t* s, int l) {
  ipeer_t* p = &s->peers[l];
  /* the watchdog asks too: the counts are read and written atomically */
  return flag_get(done_of(s->peers[s->me].seg, s->nlocal, l)) >=
             __atomic_load_n(&p->sent, __ATOMIC_RELAXED) &&
         flag_get(done_of(p->seg, s->nlocal, s->me)) >=
             __atomic_load_n(&p->recvd, __ATOMIC_RELAXED);
}

/* Waits up to the communicator's timeout for this rank's streams to have
 * passed everything they were given (all visible in the segments), so that
 * nothing queued still uses what is unmapped here.  A peer that died never
 * writes its counters: this rank's waits on it are released instead. */
static void drain(ipc_state_t* s) {
  double deadline = moeccl_now() + s->comm->timeout, check = 0;
  char* own = s->peers[s->me].seg;
  for (;;) {
    int left = 0;
    for (int k = 0; k < s->nstreams; k++)
      left |= flag_get(passed_of(own, s->nlocal, k)) < s->streams[k].lowered;
    for (int l = 0; l < s->nlocal; l++)
      if (l != s->me && s->peers[l].seg && !passed_with(s, l)) {
        left = 1;
        if (moeccl_now() > check && !moeccl_process_alive(s->peers[l].pid, s->peers[l].pid_start)) {
          WARN(SHM, "ipc: rank %d: rank %d died with work queued: its waits are released",
               s->comm->rank, s->peers[l].comm_rank);
          release_waits(s);
        }
      }
    if (!left || s->comm->aborting) return;
    if (moeccl_now() > deadline) break;
    if (moeccl_now() > check) check = moeccl_now() + 0.1;
    usleep(100);
  }
  WARN(SHM,
       "ipc: rank %d: work queued on its streams had not passed when the communicator was "
       "destroyed (%.0f s)",
       s->comm->rank, s->comm->timeout);
}

/* ---- the watchdog ----------------------------------------------------------- */

/* A stream waits for flags its peers' streams write: if a peer dies with
 * work queued, nothing the host does would ever end that wait (a user's
 * synchronize would hang).  One thread per process looks, every 100 ms, at
 * the communicators whose queued work has not passed, and releases the
 * waits of one whose peer died; the next call fails naming it.  It makes
 * no driver call and is on no call's path. */
static pthread_mutex_t watch_lock = PTHREAD_MUTEX_INITIALIZER;
static ipc_state_t* watched;
static int watch_started;

static void watch_one(ipc_state_t* s) {
  if (atomic_load(&s->lost)) return;
  for (int l = 0; l < s->nlocal; l++) {
    ipeer_t* p = &s->peers[l];
    if (l == s->me || !p->seg || passed_with(s, l) || moeccl_process_alive(p->pid, p->pid_start))
      continue;
    WARN(SHM,
         "ipc: rank %d: rank %d (pid %d) died with work queued on this rank's streams: "
         "their waits on it are released",
         s->comm->rank, p->comm_rank, (int)p->pid);
    release_waits(s);
    atomic_store(&s->lost, 1 + p->comm_rank);
    return;
  }
}

static void* watchdog(void* arg) {
  (void)arg;
  for (;;) {
    usleep(100 * 1000);
    pthread_mutex_lock(&watch_lock);
    for (ipc_state_t* s = watched; s; s = s->next_watched) watch_one(s);
    pthread_mutex_unlock(&watch_lock);
  }
  return NULL;
}

static void watch(ipc_state_t* s) {
  pthread_mutex_lock(&watch_lock);
  s->next_watched = watched, watched = s;
  if (!watch_started) {
    pthread_t t;
    pthread_attr_t a;
    pthread_attr_init(&a);
    pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
    watch_started = pthread_create(&t, &a, watchdog, NULL) == 0;
    pthread_attr_destroy(&a);
  }
  pthread_mutex_unlock(&watch_lock);
}

static void unwatch(ipc_state_t* s) {
  pthread_mutex_lock(&watch_lock);
  ipc_state_t** p = &watched;
  while (*p && *p != s) p = &(*p)->next_watched;
  if (*p) *p = s->next_watched;
  pthread_mutex_unlock(&watch_lock);
}

static void ipc_fini(void* state) {
  ipc_state_t* s = state;
  if (!s) return;
  unwatch(s);
  drain(s);
  INFO(SHM,
       "ipc: rank %d: %llu calls lowered, %llu descriptors passed, %llu handles, %llu "
       "imports, %llu host waits",
       s->comm->rank, (unsigned long long)s->stats.calls, (unsigned long long)s->stats.fds_sent,
       (unsigned long long)s->stats.handles_sent, (unsigned long long)s->stats.imports,
       (unsigned long long)s->stats.host_waits);
  state_free(s);
}

/* ---- the host side of a call -------------------------------------------- */

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
    int r = send_msg(s, l, &m, fd);
    close(fd);
    if (r == 0) return 0;
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

/* Takes the descriptor of allocation id from l's stash, reading the socket
 * into the stashes first.  -1: an error; 0: not there yet; 1: *e. */
static int take_stashed(ipc_state_t* s, int l, uint64_t id, stash_t* e) {
  for (;;) {
    msg_t m;
    int fd, from, r = recv_msg(s, &m, &fd, &from);
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
      r = ipc_open(s->d, p->pid, e->id, e->ipc, &base);
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
        if (e->how == HOW_IPC) ipc_unref(s->d, base);
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
  int r = describe(s, l, (int)op->src_buf, buf_at(sc, op->src_buf, op->src_off), op->bytes, &e, rc);
  if (r <= 0) return r;
  ring->ent[head % RING] = e;
  atomic_store_explicit(&ring->head, head + 1, memory_order_release);
  s->match[i] = (match_t){NULL, op->bytes, __atomic_add_fetch(&p->sent, 1, __ATOMIC_RELAXED)};
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
  uint64_t bytes = e->bytes;
  if (bytes > op->bytes || (!sc->inexact && bytes != op->bytes)) {
    /* the flags still go on the stream (the sender's stream waits for them) */
    *rc = moeccl_comm_fail(s->comm, moecclInvalidArgument,
                           "ipc: rank %d sent %llu bytes to a receive of %llu: the ranks' calls "
                           "disagree",
                           p->comm_rank, (unsigned long long)bytes, (unsigned long long)op->bytes);
    bytes = 0;
  }
  s->match[i] = (match_t){src, bytes, __atomic_add_fetch(&p->recvd, 1, __ATOMIC_RELAXED)};
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

static int is_peer_op(const moeccl_sched_op_t* op, int rank) {
  return (op->type == MOECCL_OP_SEND || op->type == MOECCL_OP_RECV) && op->peer != rank;
}

static moecclResult_t ipc_lower_begin(void* state, const moeccl_sched_t* sc) {
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
  announce_freed(s);
  drop_freed(s);
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
      if (!is_peer_op(op, rank) || op->type != MOECCL_OP_RECV) continue;
      r = consume(s, sc, ri, &rc);
      moved |= r > 0;
    }
    if (rc != moecclSuccess || (si == n && ri == n)) break;
    if (moved) continue;
    /* A peer has not made its side of the call yet (its host): wait. */
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

/* ---- the stream side ----------------------------------------------------- */

/* The slot of stream's passed flag (the last one is shared past
 * STREAM_SLOTS streams: destroy may then wait its timeout for it). */
static int stream_slot(ipc_state_t* s, void* stream) {
  for (int k = 0; k < s->nstreams; k++)
    if (s->streams[k].stream == stream) return k;
  if (s->nstreams == STREAM_SLOTS) return STREAM_SLOTS - 1;
  s->streams[s->nstreams].stream = stream;
  return s->nstreams++;
}

static moecclResult_t ipc_lower_step(void* state, const moeccl_sched_t* sc, int step, int phase,
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
    if (!is_peer_op(op, rank) || op->type != MOECCL_OP_RECV || !s->match[i].bytes) continue;
    if (c == s->copies_cap) {
      int cap = s->copies_cap ? 2 * s->copies_cap : 16;
      void** d = realloc(s->copy_dst, sizeof(*d) * (size_t)cap);
      if (d) s->copy_dst = d;
      const void** sr = realloc(s->copy_src, sizeof(*sr) * (size_t)cap);
      if (sr) s->copy_src = sr;
      size_t* b = realloc(s->copy_bytes, sizeof(*b) * (size_t)cap);
      if (b) s->copy_bytes = b;
      if (!d || !sr || !b) return moeccl_error(s->comm, moecclSystemError, "out of memory");
      s->copies_cap = cap;
    }
    s->copy_dst[c] = buf_at(sc, op->dst_buf, op->dst_off);
    s->copy_src[c] = s->match[i].src;
    s->copy_bytes[c++] = s->match[i].bytes;
  }
  if (c) MOECCL_CHECK(s->d->copy_batch(s->copy_dst, s->copy_src, s->copy_bytes, c, stream));
  s->stats.copies += (uint64_t)c;
  s->stats.copy_calls += c > 0;
  return moecclSuccess;
}

/* ---- the rest of the contract ---------------------------------------------- */

static moecclResult_t ipc_post(void* state, moeccl_req_t* req) {
  ipc_state_t* s = state;
  (void)req;
  return moeccl_error(s->comm, moecclInternalError,
                      "ipc: a request was posted to a stream transport");
}

static moecclResult_t ipc_progress(void* state, int* progressed) {
  (void)state, (void)progressed;
  return moecclSuccess;
}

static void ipc_arm(void* state) { (void)state; }

static void ipc_wait(void* state, int64_t timeout_us) {
  (void)state;
  usleep((useconds_t)(timeout_us > 1000 ? 1000 : timeout_us));
}

static moecclResult_t ipc_check_peers(void* state) {
  (void)state;
  return moecclSuccess;
}

/* A lost peer never writes its counters again: this rank's stream is let
 * go past every wait (its results are then undefined, as with NCCL after
 * an abort). */
static void release_waits(ipc_state_t* s) {
  char* mine = s->peers[s->me].seg;
  for (int l = 0; l < s->nlocal; l++) {
    flag_set(ready_of(mine, l), UINT64_MAX);
    flag_set(done_of(mine, s->nlocal, l), UINT64_MAX);
  }
  atomic_thread_fence(memory_order_seq_cst);
}

static void ipc_notify_abort(void* state, int culprit) {
  (void)culprit;
  release_waits(state);
}

/* This rank failed part way through queueing a call (its peers may have
 * queued theirs): its own waits and its peers' waits on it are released,
 * so no stream waits for a flag that will never be written; the
 * communicator is broken and the results undefined. */
static void ipc_cancel_all(void* state) {
  ipc_state_t* s = state;
  release_waits(s);
  for (int l = 0; l < s->nlocal; l++) {
    if (l == s->me || !s->peers[l].seg) continue;
    flag_set(ready_of(s->peers[l].seg, s->me), UINT64_MAX);
    flag_set(done_of(s->peers[l].seg, s->nlocal, s->me), UINT64_MAX);
  }
  atomic_thread_fence(memory_order_seq_cst);
}

void moeccl_ipc_stats(const moeccl_comm_t* comm, moeccl_ipc_stats_t* out) {
  memset(out, 0, sizeof(*out));
  for (int t = 0; t < comm->ntransports; t++)
    if (comm->transport_ops[t] == &moeccl_ipc_ops && comm->transport_state[t])
      *out = ((const ipc_state_t*)comm->transport_state[t])->stats;
}

const moeccl_transport_ops_t moeccl_ipc_ops = {
    .name = "ipc",
    .caps = MOECCL_TRANSPORT_CAP_STREAM,
    .mem_types = MOECCL_MEM_TYPE_DEVICE,
    .link = {.latency_us = 5.0, .overhead_us = 1.0, .bw_GBps = 500.0, .rndv_bytes = 0},
    .can_reach = can_reach,
    .init = ipc_init,
    .post = ipc_post,
    .progress = ipc_progress,
    .arm = ipc_arm,
    .wait = ipc_wait,
    .check_peers = ipc_check_peers,
    .notify_abort = ipc_notify_abort,
    .cancel_all = ipc_cancel_all,
    .fini = ipc_fini,
    .lower_begin = ipc_lower_begin,
    .lower_step = ipc_lower_step,
};
