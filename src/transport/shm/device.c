/*
 * Shared memory (shm_int.h): device memory on either side.  A device send is
 * always published, its allocation exported and passed to the receiver's
 * descriptor socket (SCM_RIGHTS, or a legacy IPC handle); the receiver
 * imports it (cached by id) and the copy engine copies.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "device/device.h"
#include "transport/shm/shm_int.h"

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
  for (int o = 0; o < s->nlocal; o++) moeccl_shm_ring(s, o);
  return -1;
}

/* Peer p's local index. */
static int chan_peer_index(const shm_state_t* s, const shm_peer_t* p) {
  return (int)(p - s->peers);
}

/* A device send: exports r's allocation and passes the descriptor to peer
 * p, then fills h's region fields.  1 when sent, 0 when p's socket queue is
 * full (try again later), -1 on failure (dev_error). */
int moeccl_shm_send_device(shm_state_t* s, shm_peer_t* p, moeccl_req_t* r, slot_hdr_t* h) {
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

/* Reads every descriptor waiting on this rank's socket into its sender's
 * stash.  A message whose credentials are not a local peer's is dropped. */
moecclResult_t moeccl_shm_drain_dev_fds(shm_state_t* s) {
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
  if (!p->stash_count && moeccl_shm_drain_dev_fds(s) != moecclSuccess) return NULL;
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
  if (victim->base) moeccl_shm_dev_unmap(victim);
  *victim = (peer_map_t){e.id, ptr, (size_t)e.bytes, ++s->map_clock, e.fd < 0};
  TRACE(SHM, "imported device allocation %llu of rank %d (%llu bytes)", (unsigned long long)e.id,
        p->comm_rank, (unsigned long long)e.bytes);
  return ptr;
}

/* A receive consumed piece by piece (a reduction into host memory: the
 * executor consumes in place only there) of a message in a peer's device
 * memory: the copy engine brings it to the bounce buffer a piece at a
 * time, the consumer takes each piece; the whole message in this pass (its
 * descriptor was taken for this slot). */
static moecclResult_t consume_device_message(shm_state_t* s, shm_peer_t* p, moeccl_req_t* r,
                                             const char* src, size_t n) {
  MOECCL_CHECK(moeccl_shm_bounce_alloc(s));
  moeccl_consumer_t* c = r->consumer;
  size_t piece = s->bounce_bytes / c->unit * c->unit;
  for (size_t off = 0; off < n; off += piece) {
    size_t k = n - off < piece ? n - off : piece;
    moecclResult_t rc = moeccl_device_copy(s->bounce, src + off, k);
    if (rc != moecclSuccess)
      return moeccl_comm_fail(s->comm, rc, "shm: copying %zu bytes from rank %d failed", k,
                              p->comm_rank);
    MOECCL_CHECK(c->consume(c, s->bounce, off, k));
  }
  r->progress = n;
  return moecclSuccess;
}

/* A receive where device memory is on either side: the copy engine copies
 * into r's buffer, from the sender's imported device allocation, from the
 * slot (eager), or from its mapped moecclMemAlloc memory; from other host
 * memory a chunk is read by CMA into the bounce buffer first.  No kernel
 * consumes device memory here: a receive consumed whole lands the message
 * and the executor consumes it (the executor stages reducing ones). */
moecclResult_t moeccl_shm_pull_device(shm_state_t* s, shm_peer_t* p, const slot_hdr_t* h,
                                      moeccl_req_t* r, int* wait) {
  int dev_src = h->kind == SLOT_RNDV && (h->flags & HDR_DEVICE);
  int pieces = r->consumer && r->consumer->unit; /* consumed piece by piece */
  if ((pieces && !dev_src) || (h->kind == SLOT_RNDV && (h->flags & HDR_GATHERED)))
    return moeccl_comm_fail(s->comm, moecclInvalidUsage,
                            "shm: rank %d's message %s, which this build cannot do with device "
                            "memory on either side",
                            p->comm_rank,
                            pieces ? "is to be reduced in place" : "is a whole gathered buffer");
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
    if (pieces) return consume_device_message(s, p, r, src, n); /* host result, device message */
  } else {
    const char* region = h->region_fd >= 0 ? moeccl_shm_map_region(s, p, h) : NULL;
    n = h->msg_bytes - r->progress;
    if (region) {
      src = region + h->region_off + r->progress;
    } else {
      MOECCL_CHECK(moeccl_shm_cma_to_bounce(s, p, h, r, n, &n));
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
