/*
 * Shared memory (shm_int.h): setting up and tearing down the segment (a
 * memfd the first local rank creates and passes to the others), this rank's
 * descriptor socket for device memory, the doorbells that wake a sleeping
 * rank, and the node's abort word.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/uio.h>

#include "base/param.h"
#include "base/sha256.h"
#include "comm/bootstrap.h"
#include "device/device.h"
#include "transport/shm/shm_int.h"

/* Wakes local rank `local` after this rank published or freed a slot (or
 * set the abort word) for it, if it sleeps.  The doorbell is rung only
 * then: an atomic add on a line every sender shares cost each message a
 * cache-line transfer between cores (4 ranks on 2 cores, 1 KiB per rank:
 * six per rank and call).  The fence pairs with shm_wait's: either this
 * rank sees `sleeping` set, or the sleeper's re-check (shm_ready) sees
 * what was just published. */
void moeccl_shm_ring(shm_state_t* s, int local) {
  rank_area_t* r = &s->ranks[local];
  atomic_thread_fence(memory_order_seq_cst);
  if (!atomic_load_explicit(&r->sleeping, memory_order_relaxed)) return;
  atomic_fetch_add(&r->doorbell, 1);
  moeccl_futex_wake(&r->doorbell);
}

void moeccl_shm_ring_due(shm_state_t* s) {
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

int moeccl_shm_can_reach(const moeccl_comm_t* comm, int peer) {
  return comm->peers[peer].host_hash == comm->peers[comm->rank].host_hash;
}

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

/* Maps the segment from fd (closed here); the creator sizes it first and
 * writes its header. */
static int map_segment(shm_state_t* s, int fd, int create) {
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

/* Local rank l's socket named prefix: an abstract Unix name (no file; the
 * network namespace's) derived one-way from the secret and the node. */
static void sock_name(const uint8_t* digest, const char* prefix, int l, struct sockaddr_un* a,
                      socklen_t* len) {
  memset(a, 0, sizeof(*a));
  a->sun_family = AF_UNIX;
  size_t cap = sizeof(a->sun_path) - 1; /* sun_path[0] = 0: abstract */
  int o = snprintf(a->sun_path + 1, cap, "%s", prefix);
  for (int i = 0; i < 16; i++)
    o += snprintf(a->sun_path + 1 + o, cap - (size_t)o, "%02x", digest[i]);
  o += snprintf(a->sun_path + 1 + o, cap - (size_t)o, "-%d", l);
  *len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)o);
}

static moecclResult_t state_alloc(moeccl_comm_t* comm, shm_state_t** out) {
  shm_state_t* s = calloc(1, sizeof(*s));
  if (!s) return moecclSystemError;
  s->comm = comm;
  s->nlocal = comm->nlocal;
  s->me = comm->local_rank;
  s->nslots = (int)moeccl_param_shm_slots();
  if (s->nslots < 2) s->nslots = 2;
  if ((s->nslots & (s->nslots - 1)) == 0) s->slot_mask = (uint64_t)s->nslots - 1;
  s->slot_bytes = moeccl_param_shm_eager_size();
  if (s->slot_bytes < 256) s->slot_bytes = 256;
  s->slot_bytes = align_up(s->slot_bytes, CACHELINE);
  s->slot_stride = sizeof(slot_hdr_t) + s->slot_bytes;
  s->chunk = moeccl_param_shm_chunk_size();
  if (s->chunk < 4096) s->chunk = 4096;
  s->chunk &= ~(size_t)(CACHELINE - 1); /* whole units for receives consumed in pieces */
  s->peers = calloc((size_t)s->nlocal, sizeof(*s->peers));
  s->due = calloc((size_t)s->nlocal, sizeof(*s->due));
  if (!s->peers || !s->due) return free(s->peers), free(s->due), free(s), moecclSystemError;
  for (int l = 0; l < s->nlocal; l++) {
    const moeccl_peer_info_t* pi = &comm->peers[comm->local_ranks[l]];
    s->peers[l] =
        (shm_peer_t){.comm_rank = comm->local_ranks[l], .pid = pi->pid, .pid_start = pi->pid_start};
  }
  /* the segment's name (the memfd's, in logs and /proc/PID/maps) and its
   * socket's: one-way functions of the secret and the node, giving away
   * neither the secret nor the tag that joins the bootstrap */
  uint8_t in[MOECCL_SECRET_BYTES + 8], d[32];
  memcpy(in, comm->secret, MOECCL_SECRET_BYTES);
  memcpy(in + MOECCL_SECRET_BYTES, &comm->peers[comm->rank].host_hash, 8);
  moeccl_sha256_labelled("moeccl-shm", in, sizeof(in), d);
  int o = snprintf(s->name, sizeof(s->name), "moeccl-");
  for (int i = 0; i < 16 && o + 3 < (int)sizeof(s->name); i++)
    o += snprintf(s->name + o, sizeof(s->name) - (size_t)o, "%02x", d[i]);
  s->size = segment_size(s);
  s->dev_fd = -1;
  moeccl_sha256_labelled("moeccl-shm-devfd", in, sizeof(in), d);
  for (int l = 0; l < s->nlocal; l++)
    sock_name(d, "moeccl-dev-", l, &s->peers[l].dev_addr, &s->peers[l].dev_addr_len);
  moeccl_sha256_labelled("moeccl-shm-segfd", in, sizeof(in), s->seg_key);
  moeccl_sha256_labelled("moeccl-shm-segauth", in, sizeof(in), s->seg_auth);
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
void moeccl_shm_dev_unmap(const peer_map_t* m) {
  if (m->ipc) moeccl_device()->ipc_close(m->base);
  else moeccl_device()->unimport(m->base, m->size);
}

/* The segment is a memfd with no name in any file system: the first local
 * rank creates it and hands the descriptor to the others over their
 * sockets (SCM_RIGHTS), so the kernel frees it with the last descriptor or
 * mapping, whichever rank dies when; a named file (shm_open) outlived
 * every rank killed between its creation and its unlink. */
/* Local rank l's segment socket: a name one-way from the key and l, so
 * that the names listed in /proc/net/unix give away no other rank's. */
static void seg_name(const shm_state_t* s, int l, struct sockaddr_un* a, socklen_t* len) {
  uint8_t in[36], d[32];
  memcpy(in, s->seg_key, 32);
  memcpy(in + 32, &l, sizeof(int32_t));
  moeccl_sha256_labelled("moeccl-shm-seg-rank", in, sizeof(in), d);
  sock_name(d, "moeccl-seg-", l, a, len);
}

static int seg_sock_open(const shm_state_t* s) {
  struct sockaddr_un a;
  socklen_t len;
  seg_name(s, s->me, &a, &len);
  int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0 || bind(fd, (struct sockaddr*)&a, len) != 0) {
    WARN(SHM, "shm: no socket to receive the segment on (%s)", strerror(errno));
    if (fd >= 0) close(fd);
    fd = -1;
  }
  return fd;
}

/* What passes the segment: its descriptor rides along (SCM_RIGHTS). */
typedef struct {
  uint64_t magic;
  uint8_t auth[32]; /* seg_auth */
} seg_msg_t;

/* The creator: sends the segment's descriptor to every other local rank
 * (whose socket is bound: the barrier before this says so).  A rank that
 * gets nothing says it could not map the segment. */
static void seg_send(const shm_state_t* s, int seg_fd) {
  int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) WARN(SHM, "shm: no socket to pass segment %s on (%s)", s->name, strerror(errno));
  seg_msg_t msg = {.magic = SHM_MAGIC};
  memcpy(msg.auth, s->seg_auth, sizeof(msg.auth));
  for (int l = 1; fd >= 0 && l < s->nlocal; l++) {
    struct sockaddr_un a;
    socklen_t len;
    seg_name(s, l, &a, &len);
    char ctl[CMSG_SPACE(sizeof(int))];
    memset(ctl, 0, sizeof(ctl));
    struct iovec iov = {&msg, sizeof(msg)};
    struct msghdr mh = {.msg_name = &a, .msg_namelen = len, .msg_iov = &iov, .msg_iovlen = 1,
                        .msg_control = ctl, .msg_controllen = sizeof(ctl)};
    struct cmsghdr* c = CMSG_FIRSTHDR(&mh);
    c->cmsg_level = SOL_SOCKET, c->cmsg_type = SCM_RIGHTS, c->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(c), &seg_fd, sizeof(seg_fd));
    ssize_t n;
    do n = sendmsg(fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT); /* never blocks init */
    while (n < 0 && errno == EINTR);
    if (n != (ssize_t)sizeof(msg))
      WARN(SHM, "shm: passing segment %s to local rank %d failed: %s", s->name, l,
           n < 0 ? strerror(errno) : "short write");
  }
  if (fd >= 0) close(fd);
}

/* The others: the descriptor the creator sent (already queued: it sent
 * before the barrier that precedes this), or -1.  A message that does not
 * carry the node's proof (a one-way function of the communicator's
 * secret, which only its members know; not the sender's pid, which another
 * PID namespace shows differently) is dropped, and every descriptor it
 * brought closed. */
static int seg_receive(const shm_state_t* s, int sock) {
  for (;;) {
    seg_msg_t msg;
    memset(&msg, 0, sizeof(msg));
    char ctl[CMSG_SPACE(4 * sizeof(int)) + CMSG_SPACE(sizeof(struct ucred))];
    struct iovec iov = {&msg, sizeof(msg)};
    struct msghdr mh = {
        .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl, .msg_controllen = sizeof(ctl)};
    ssize_t n = recvmsg(sock, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      WARN(SHM, "shm: segment %s did not arrive from local rank 0 (%s)", s->name, strerror(errno));
      return -1;
    }
    int fd = -1, extra = 0;
    for (struct cmsghdr* c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c)) {
      if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
      size_t k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      for (size_t i = 0; i < k; i++) { /* keep the first, close any other */
        int got;
        memcpy(&got, CMSG_DATA(c) + i * sizeof(int), sizeof(got));
        if (fd < 0) fd = got;
        else close(got), extra++;
      }
    }
    int good = n == (ssize_t)sizeof(msg) && msg.magic == SHM_MAGIC && fd >= 0 && !extra &&
               !(mh.msg_flags & (MSG_CTRUNC | MSG_TRUNC)) &&
               memcmp(msg.auth, s->seg_auth, sizeof(msg.auth)) == 0;
    if (good) return fd;
    WARN(SHM, "shm: dropped a message (%zd bytes, %s) that is not segment %s from local rank 0",
         n, fd < 0 ? "no descriptor" : "no proof of the communicator's secret", s->name);
    if (fd >= 0) close(fd);
  }
}

/* Collective: the first local rank creates the segment and, after a
 * barrier, passes it to the others, which map it after a second one; then
 * every rank says whether it has it. */
moecclResult_t moeccl_shm_init(moeccl_comm_t* comm, const uint8_t* use, int needed_anywhere,
                               void** state) {
  *state = NULL;
  if (!needed_anywhere) return moecclSuccess;
  shm_state_t* s;
  MOECCL_CHECK(state_alloc(comm, &s));
  int needed = comm->nlocal > 1, ok = 1, sock = -1, seg_fd = -1;
  if (needed && moeccl_device()) dev_open(s); /* before the barriers: peers may send after */
  if (needed && s->me != 0) ok = (sock = seg_sock_open(s)) >= 0;
  if (needed && s->me == 0) {
    seg_fd = memfd_create(s->name, MFD_CLOEXEC);
    if (seg_fd < 0) WARN(SHM, "shm: memfd_create for segment %s: %s", s->name, strerror(errno));
    ok = seg_fd >= 0 && map_segment(s, dup(seg_fd), 1) == 0;
    if (seg_fd >= 0 && !ok)
      WARN(SHM, "shm: sizing or mapping segment %s (%zu bytes) failed: %s", s->name, s->size,
           strerror(errno));
    INFO(SHM, "shm: segment %s of %zu bytes for %d local ranks", s->name, s->size, comm->nlocal);
  }
  moecclResult_t rc = moeccl_bootstrap_barrier(comm->boot);
  if (rc == moecclSuccess && needed && s->me == 0 && ok) seg_send(s, seg_fd);
  if (seg_fd >= 0) close(seg_fd);
  if (rc == moecclSuccess) rc = moeccl_bootstrap_barrier(comm->boot);
  if (rc == moecclSuccess && needed && s->me != 0 && ok)
    ok = map_segment(s, seg_receive(s, sock), 0) == 0;
  if (sock >= 0) close(sock);
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
  s->use_cma = s->can_reach_memory && !moeccl_param_cma_disable();
  s->no_map = s->use_cma && moeccl_param_shm_map_disable();
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
  if (s->can_reach_memory && !s->no_map && !moeccl_param_shm_map_small_disable())
    s->map_min = SHM_MAP_MIN;
  if (rc != moecclSuccess) {
    /* A rank died during the exchanges: a local peer that completed them
     * before it did uses the segment now, and learns of it here. */
    int dead = moeccl_bootstrap_dead(comm->boot);
    if (dead >= 0 && s->hdr) moeccl_shm_notify_abort(s, dead);
    moeccl_shm_fini(s);
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

void moeccl_shm_fini(void* state) {
  shm_state_t* s = state;
  if (!s) return;
  for (int l = 0; l < s->nlocal; l++) {
    shm_peer_t* p = &s->peers[l];
    for (int i = 0; i < MAP_CACHE; i++) {
      if (p->maps[i].base) munmap(p->maps[i].base, p->maps[i].size);
      if (p->dev_maps[i].base) moeccl_shm_dev_unmap(&p->dev_maps[i]);
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

moecclResult_t moeccl_shm_truncated(shm_state_t* s, shm_peer_t* p, uint64_t got, size_t posted) {
  return moeccl_comm_fail(
      s->comm, moecclInvalidUsage,
      "message from rank %d is %llu bytes but the receive posted for it is %zu bytes", p->comm_rank,
      (unsigned long long)got, posted);
}

moecclResult_t moeccl_shm_check_abort(shm_state_t* s) {
  int32_t dead = atomic_load_explicit(&s->hdr->abort_rank, memory_order_relaxed);
  if (dead == 0) return moecclSuccess;
  const moeccl_peer_info_t* pi = &s->comm->peers[dead - 1];
  return moeccl_comm_peer_lost(s->comm, dead - 1,
                               "rank %d (pid %d on %s) died; communicator aborted", dead - 1,
                               (int)pi->pid, pi->hostname);
}

/* A peer this rank depends on is gone: tell every rank of the node (they may
 * wait on ranks that wait on it), then fail naming it. */
moecclResult_t moeccl_shm_peer_died(shm_state_t* s, const shm_peer_t* p) {
  int32_t expected = 0;
  atomic_compare_exchange_strong(&s->hdr->abort_rank, &expected, p->comm_rank + 1);
  for (int o = 0; o < s->nlocal; o++) moeccl_shm_ring(s, o);
  return moeccl_shm_check_abort(s);
}

/* The abort word already tells every local rank; set it if no one has. */
void moeccl_shm_notify_abort(void* state, int culprit) {
  shm_state_t* s = state;
  if (!s->base) return;
  int32_t expected = 0;
  atomic_compare_exchange_strong(&s->hdr->abort_rank, &expected, culprit + 1);
  for (int o = 0; o < s->nlocal; o++) moeccl_shm_ring(s, o);
}
