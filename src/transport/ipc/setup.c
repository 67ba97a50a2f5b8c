/*
 * The ipc transport (ipc_int.h): setup and teardown -- each rank's shared
 * segment of counters (mapped by every local peer and registered with the
 * device), the Unix socket that passes descriptors, and the state.
 */
#include "transport/ipc/ipc_int.h"

int moeccl_ipc_can_reach(const moeccl_comm_t* comm, int peer) {
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

int moeccl_ipc_send_msg(ipc_state_t* s, int l, const msg_t* m, int fd) {
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
int moeccl_ipc_recv_msg(ipc_state_t* s, msg_t* m, int* fd, int* from) {
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

static void state_free(ipc_state_t* s) {
  for (int l = 0; s->peers && l < s->nlocal; l++) {
    ipeer_t* p = &s->peers[l];
    for (int i = 0; i < p->nimports; i++) moeccl_ipc_unmap_import(s, &p->imports[i]);
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
      int r = moeccl_ipc_send_msg(s, next, &m, s->seg_fd);
      if (r < 0) return moecclSystemError;
      if (r == 0) break; /* its queue is full: receive meanwhile */
      next++, moved = 1;
    }
    msg_t got;
    int fd, from, r;
    while (want > 0 && (r = moeccl_ipc_recv_msg(s, &got, &fd, &from)) != 0) {
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

/* Collective: every rank makes the same two allgathers, contributing a
 * failure mark where its own part failed. */
moecclResult_t moeccl_ipc_init(moeccl_comm_t* comm, const uint8_t* use, int needed, void** state) {
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
    moeccl_ipc_freed_start(s);
    INFO(INIT, "ipc: rank %d maps %d local peer segment(s) of %zu bytes", comm->rank, s->nlocal - 1,
         s->seg_bytes);
    moeccl_ipc_watch(s);
  }
  *state = s;
  return moecclSuccess;
}

void moeccl_ipc_fini(void* state) {
  ipc_state_t* s = state;
  if (!s) return;
  moeccl_ipc_unwatch(s);
  moeccl_ipc_drain(s);
  INFO(SHM,
       "ipc: rank %d: %llu calls lowered, %llu descriptors passed, %llu handles, %llu "
       "imports, %llu host waits",
       s->comm->rank, (unsigned long long)s->stats.calls, (unsigned long long)s->stats.fds_sent,
       (unsigned long long)s->stats.handles_sent, (unsigned long long)s->stats.imports,
       (unsigned long long)s->stats.host_waits);
  state_free(s);
}
