/*
 * roofline.c - what the MPI harness holds a call against, timed in the same
 * run (perf_common.h): the copy roofline (every rank's memcpy at once) and
 * the bare exchanges of the same blocks, over TCP sockets (--net-roofline)
 * or shared memory (--shm-roofline).
 */
#define _GNU_SOURCE /* sched_getaffinity, CPU_COUNT */
#include "perf_common.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/socket.h>

#define NET_SETUP_MS 20000 /* net roofline: wait for a peer's connection */
#define NET_STALL_S 60     /* net and shm rooflines: no byte moved for this long */

/* ---- copy roofline ------------------------------------------------------ */

/* The copy kernels the roofline tries: whichever moves the bytes fastest
 * on this machine at this size is the bound (glibc's memcpy switches to
 * streaming stores only past a threshold of its own; below it, and for
 * data that fits the caches, plain stores win). */
#if defined(__x86_64__) || defined(__SSE2__)
#include <emmintrin.h>
/* Streaming (non-temporal) stores: the destination bypasses the caches. */
static void copy_stream(void* dst, const void* src, size_t n)
{
  char* d = dst;
  const char* s = src;
  size_t head = (16 - ((uintptr_t)d & 15)) & 15;
  if (head > n)
    head = n;
  memcpy(d, s, head);
  d += head, s += head, n -= head;
  for (; n >= 64; n -= 64, d += 64, s += 64) {
    __m128i a = _mm_loadu_si128((const __m128i*)s), b = _mm_loadu_si128((const __m128i*)s + 1);
    __m128i e = _mm_loadu_si128((const __m128i*)s + 2), f = _mm_loadu_si128((const __m128i*)s + 3);
    _mm_stream_si128((__m128i*)d, a);
    _mm_stream_si128((__m128i*)d + 1, b);
    _mm_stream_si128((__m128i*)d + 2, e);
    _mm_stream_si128((__m128i*)d + 3, f);
  }
  memcpy(d, s, n);
  _mm_sfence();
}
#endif

static void copy_memcpy(void* dst, const void* src, size_t n)
{
  memcpy(dst, src, n);
}

static const struct {
  const char* name;
  void (*copy)(void* dst, const void* src, size_t n);
} copy_kernels[] = {
    {"memcpy", copy_memcpy},
#if defined(__x86_64__) || defined(__SSE2__)
    {"streaming stores", copy_stream},
#endif
};
#define NCOPY_KERNELS (int)(sizeof copy_kernels / sizeof copy_kernels[0])

const char* perf_roofline_kernels(void)
{
#if defined(__x86_64__) || defined(__SSE2__)
  return "memcpy or streaming stores";
#else
  return "memcpy";
#endif
}

/* One rep of one kernel: every rank copies at once; the slowest counts. */
static double copy_rep_us(struct perf_ctx* c, int k, size_t bytes, volatile unsigned char* sink)
{
  const struct perf_opts* o = c->o;
  MPI_Barrier(MPI_COMM_WORLD);
  double t0 = MPI_Wtime();
  for (int i = 0; i < o->iters; i++) {
    copy_kernels[k].copy(c->B.copy_dst, c->B.copy_src, bytes);
    /* Reading the copy keeps the compiler from dropping it. */
    *sink ^= (unsigned char)c->B.copy_dst[bytes ? (size_t)i % bytes : 0];
  }
  double t = (MPI_Wtime() - t0) / o->iters * 1e6;
  MPI_Allreduce(MPI_IN_PLACE, &t, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return t;
}

/* The fastest rep of the fastest kernel: a bound must be the best the
 * machine did, not a typical time (a median was beaten by 1.3-2.8x). */
double perf_roofline_us(struct perf_ctx* c, size_t bytes)
{
  const struct perf_opts* o = c->o;
  volatile unsigned char sink = 0;
  double best = -1.0;
  if (bytes > c->B.copy_cap)
    bytes = c->B.copy_cap;
  for (int rep = 0; rep < o->reps; rep++)
    for (int k = 0; k < NCOPY_KERNELS; k++) {
      double t = copy_rep_us(c, k, bytes, &sink);
      if (best < 0.0 || t < best)
        best = t;
    }
  (void)sink;
  return best;
}

/* ---- network roofline --------------------------------------------------- */

/* What bare kernel TCP does with the same blocks: every rank sends its block
 * to every peer and receives every peer's block over one connected socket
 * per pair, all peers in flight at once, and copies its own block.  One
 * thread busy-polls non-blocking sockets with calls as large as the blocks;
 * the socket buffers keep the kernel's defaults (and their autotuning). */

static void net_error(int me, const char* what, int peer, int err)
{
  char who[32] = "";
  if (peer >= 0)
    snprintf(who, sizeof who, " rank %d", peer);
  fprintf(stderr, "%s: rank %d: --net-roofline: %s%s: %s; the network roofline is skipped\n",
          perf_prog, me, what, who, err ? strerror(err) : "connection closed");
}

static int net_port(const struct sockaddr_storage* ss)
{
  if (ss->ss_family == AF_INET6)
    return ntohs(((const struct sockaddr_in6*)ss)->sin6_port);
  return ntohs(((const struct sockaddr_in*)ss)->sin_port);
}

static void net_set_port(struct sockaddr_storage* ss, int port)
{
  if (ss->ss_family == AF_INET6)
    ((struct sockaddr_in6*)ss)->sin6_port = htons((uint16_t)port);
  else
    ((struct sockaddr_in*)ss)->sin_port = htons((uint16_t)port);
}

/* A listening socket on addr, any free port; its address goes to *ss. */
static int net_listen(const char* addr, int n, int me, struct sockaddr_storage* ss, socklen_t* len)
{
  struct addrinfo hints, *ai = NULL;
  memset(&hints, 0, sizeof hints);
  hints.ai_flags = AI_NUMERICHOST | AI_NUMERICSERV;
  hints.ai_socktype = SOCK_STREAM;
  int rc = getaddrinfo(addr, "0", &hints, &ai);
  if (rc != 0) {
    fprintf(stderr, "%s: rank %d: --net-roofline: address %s: %s; the network roofline is "
            "skipped\n", perf_prog, me, addr, gai_strerror(rc));
    return -1;
  }
  int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  *len = sizeof *ss;
  if (fd < 0 || bind(fd, ai->ai_addr, ai->ai_addrlen) || listen(fd, n) ||
      getsockname(fd, (struct sockaddr*)ss, len)) {
    net_error(me, fd < 0 ? "socket" : "bind/listen on the address", -1, errno);
    if (fd >= 0)
      close(fd);
    fd = -1;
  }
  freeaddrinfo(ai);
  return fd;
}

/* Waits for ev on fd, at most NET_SETUP_MS; 0 when ready, else an errno. */
static int net_wait(int fd, short ev)
{
  struct pollfd p = {fd, ev, 0};
  int r;
  do
    r = poll(&p, 1, NET_SETUP_MS);
  while (r < 0 && errno == EINTR);
  return r > 0 ? 0 : r == 0 ? ETIMEDOUT : errno;
}

static int net_nodelay_nonblock(int fd)
{
  int one = 1, fl = fcntl(fd, F_GETFL);
  if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one) || fl < 0 ||
      fcntl(fd, F_SETFL, fl | O_NONBLOCK))
    return errno;
  return 0;
}

/* The lower rank connects and says who it is; returns the socket or -1. */
static int net_connect(const struct sockaddr_storage* ss, socklen_t len, int me, int peer)
{
  int fd = socket(ss->ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0), err = 0, soerr = 0;
  socklen_t sl = sizeof soerr;
  int32_t hello = me;
  if (fd < 0) {
    net_error(me, "socket for", peer, errno);
    return -1;
  }
  if ((err = net_nodelay_nonblock(fd)) == 0 && connect(fd, (const struct sockaddr*)ss, len) &&
      errno != EINPROGRESS)
    err = errno;
  if (!err && !(err = net_wait(fd, POLLOUT)) && getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl))
    err = errno;
  if (!err)
    err = soerr;
  /* Four bytes into the empty buffer of a new connection. */
  errno = 0;
  if (!err && send(fd, &hello, sizeof hello, MSG_NOSIGNAL) != (ssize_t)sizeof hello)
    err = errno ? errno : EIO;
  if (err) {
    net_error(me, "connect to", peer, err);
    close(fd);
    return -1;
  }
  return fd;
}

/* The higher rank accepts me connections and learns from each who it is. */
static int net_accept_all(struct perf_net* M, int lfd, int me)
{
  for (int k = 0; k < me; k++) {
    int32_t hello = -1;
    int err = net_wait(lfd, POLLIN), fd = -1;
    if (!err && (fd = accept(lfd, NULL, NULL)) < 0)
      err = errno;
    if (!err && fcntl(fd, F_SETFD, FD_CLOEXEC))
      err = errno;
    if (!err)
      err = net_wait(fd, POLLIN);
    errno = 0;
    if (!err && recv(fd, &hello, sizeof hello, MSG_WAITALL) != (ssize_t)sizeof hello)
      err = errno ? errno : EPROTO; /* 0: closed before saying who it is */
    if (!err && (hello < 0 || hello >= me || M->fd[hello] >= 0))
      err = EPROTO;
    if (!err)
      err = net_nodelay_nonblock(fd);
    if (err) {
      net_error(me, "accept", -1, err);
      if (fd >= 0)
        close(fd);
      return -1;
    }
    M->fd[hello] = fd;
  }
  return 0;
}

static int net_agree(int ok)
{
  MPI_Allreduce(MPI_IN_PLACE, &ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  return ok;
}

static void net_close(struct perf_net* M, int n)
{
  for (int j = 0; j < n && M->fd; j++) {
    if (M->fd[j] >= 0)
      close(M->fd[j]);
    M->fd[j] = -1;
  }
  M->on = 0;
}

/* The per-peer block tables both bare exchanges (sockets, shared memory)
 * work from. */
static void blocks_alloc(struct perf_net* M, int n)
{
  M->soff = perf_xcalloc((size_t)n, sizeof(size_t));
  M->slen = perf_xcalloc((size_t)n, sizeof(size_t));
  M->sdone = perf_xcalloc((size_t)n, sizeof(size_t));
  M->roff = perf_xcalloc((size_t)n, sizeof(size_t));
  M->rlen = perf_xcalloc((size_t)n, sizeof(size_t));
  M->rdone = perf_xcalloc((size_t)n, sizeof(size_t));
}

static void blocks_free(struct perf_net* M)
{
  free(M->soff); free(M->slen); free(M->sdone);
  free(M->roff); free(M->rlen); free(M->rdone);
}

/* Busy polling with more ranks than CPUs on a node spins away the time
 * slices of the ranks that have work; then an idle sweep yields the CPU, as
 * Open MPI does when oversubscribed (mpi_yield_when_idle).  The CPUs are the
 * union of the local ranks' affinity masks. */
static void net_node_cpus(struct perf_net* M)
{
  MPI_Comm node;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set)) {
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    CPU_ZERO(&set);
    for (long c = 0; c < online && c < CPU_SETSIZE; c++)
      CPU_SET((int)c, &set);
  }
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
  MPI_Comm_size(node, &M->local);
  MPI_Allreduce(MPI_IN_PLACE, &set, (int)sizeof set, MPI_BYTE, MPI_BOR, node);
  MPI_Comm_free(&node);
  M->cpus = CPU_COUNT(&set);
  M->yield = M->local > M->cpus;
}

/* A sweep of a bare exchange that moved nothing: yields the CPU when the
 * ranks outnumber it; 1 once nothing has moved for NET_STALL_S (the clock
 * is read on every 4096th idle sweep only). */
static int idle_stalled(const struct perf_net* M, unsigned* idle, double* t0)
{
  if (M->yield)
    sched_yield();
  if ((*idle)++ == 0) {
    *t0 = MPI_Wtime();
    return 0;
  }
  return *idle % 4096 == 0 && MPI_Wtime() - *t0 > NET_STALL_S;
}

/* Builds the full mesh at startup: every rank listens, the ports travel by
 * MPI_Allgather, the lower rank of each pair connects, the higher accepts.
 * Collective; on any failure every rank ends with no mesh (M->on == 0). */
void perf_net_open(struct perf_ctx* c)
{
  struct perf_net* M = &c->net;
  const char* addr = c->o->net_addr;
  int me = c->me, n = c->n;
  struct sockaddr_storage ss;
  socklen_t len = 0;
  int* ports = perf_xcalloc((size_t)n, sizeof *ports);
  M->fd = perf_xcalloc((size_t)n, sizeof *M->fd);
  for (int j = 0; j < n; j++)
    M->fd[j] = -1;
  blocks_alloc(M, n);
  memset(&ss, 0, sizeof ss);
  net_node_cpus(M);
  int lfd = net_listen(addr, n, me, &ss, &len);
  int port = lfd >= 0 ? net_port(&ss) : -1, ok = lfd >= 0;
  MPI_Allgather(&port, 1, MPI_INT, ports, 1, MPI_INT, MPI_COMM_WORLD);
  for (int j = 0; j < n; j++)
    ok &= ports[j] >= 0;
  /* Connecting needs no accept (the backlog holds n), so all connects come
   * first, and no rank waits in accept for a peer that gave up. */
  for (int j = me + 1; j < n && ok; j++) {
    struct sockaddr_storage peer = ss;
    net_set_port(&peer, ports[j]);
    ok = (M->fd[j] = net_connect(&peer, len, me, j)) >= 0;
  }
  if (net_agree(ok))
    ok = net_agree(net_accept_all(M, lfd, me) == 0);
  else
    ok = 0;
  if (lfd >= 0)
    close(lfd);
  free(ports);
  M->on = ok;
  if (!ok)
    net_close(M, n);
}

void perf_net_free(struct perf_ctx* c)
{
  struct perf_net* M = &c->net;
  net_close(M, c->n);
  free(M->fd);
  blocks_free(M);
}

/* Shuts every socket, so that peers waiting on this rank fail at once. */
static int net_fail(struct perf_ctx* c, const char* what, int peer, int err)
{
  net_error(c->me, what, peer, err);
  for (int j = 0; j < c->n; j++)
    if (c->net.fd[j] >= 0)
      shutdown(c->net.fd[j], SHUT_RDWR);
  return -1;
}

static int net_again(int err) { return err == EAGAIN || err == EWOULDBLOCK || err == EINTR; }

/* One exchange of the blocks in M->soff/slen and M->roff/rlen.  Returns 0,
 * or -1 after a socket error or NET_STALL_S without progress. */
static int net_once(struct perf_ctx* c)
{
  struct perf_net* M = &c->net;
  int n = c->n, me = c->me, pending = 0, copied = 0;
  unsigned idle = 0;
  double idle_t0 = 0.0;
  for (int j = 0; j < n; j++) {
    M->sdone[j] = M->rdone[j] = 0;
    pending += j != me && M->slen[j] > 0;
    pending += j != me && M->rlen[j] > 0;
  }
  for (;;) {
    int progress = 0;
    /* Starting at the next rank spreads the first sends over the peers. */
    for (int k = 1; k < n; k++) {
      int j = (me + k) % n, fd = M->fd[j];
      if (M->sdone[j] < M->slen[j]) {
        ssize_t w = send(fd, c->B.send + M->soff[j] + M->sdone[j], M->slen[j] - M->sdone[j],
                         MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w < 0 && !net_again(errno))
          return net_fail(c, "send to", j, errno);
        if (w > 0) {
          progress = 1;
          M->sdone[j] += (size_t)w;
          pending -= M->sdone[j] == M->slen[j];
        }
      }
      if (M->rdone[j] < M->rlen[j]) {
        ssize_t r = recv(fd, c->B.recv + M->roff[j] + M->rdone[j], M->rlen[j] - M->rdone[j],
                         MSG_DONTWAIT);
        if (r == 0 || (r < 0 && !net_again(errno)))
          return net_fail(c, "receive from", j, r == 0 ? 0 : errno);
        if (r > 0) {
          progress = 1;
          M->rdone[j] += (size_t)r;
          pending -= M->rdone[j] == M->rlen[j];
        }
      }
    }
    /* The own block, once the first sends are under way. */
    if (!copied) {
      memcpy(c->B.recv + M->roff[me], c->B.send + M->soff[me], M->slen[me]);
      copied = 1;
    }
    if (!pending)
      return 0;
    if (progress) {
      idle = 0;
      continue;
    }
    if (idle_stalled(M, &idle, &idle_t0)) {
      char what[48];
      snprintf(what, sizeof what, "no byte moved for %d s", NET_STALL_S);
      return net_fail(c, what, -1, ETIMEDOUT);
    }
  }
}

/* ---- shared-memory roofline --------------------------------------------- */

/* What a bare shared-memory exchange does with the same blocks: a rank
 * copies its block for each peer into that peer's inbox slot of this
 * exchange's parity and raises its sequence word there, copies its own
 * block, then waits for each peer's word and copies that block out.  One
 * copy in, one copy out and one signal line per pair and exchange: the
 * eager protocol of Open MPI's shared-memory fast boxes and of moeccl's
 * slots, without their matching, queues, tickets or flow control.  Two
 * slots per pair are enough: a sender at exchange k has seen the
 * receiver's word of k-1, which the receiver raised after reading all of
 * k-2.  Waiting polls; ranks that outnumber the CPUs yield after an idle
 * sweep, as moeccl and Open MPI do there. */
#define SHM_PART_MAX ((size_t)64 << 20) /* one rank's part of the segment, at most */
#define SHM_LINE 64

void perf_shm_open(struct perf_ctx* c, size_t max_block)
{
  struct perf_net* M = &c->net;
  int n = c->n;
  M->shm = 1;
  blocks_alloc(M, n);
  net_node_cpus(M);
  if (M->local != n)
    return; /* the header says why */
  size_t words = (size_t)n * SHM_LINE, slot = (max_block + SHM_LINE - 1) / SHM_LINE * SHM_LINE;
  if (slot == 0)
    slot = SHM_LINE;
  if (words + 2 * (size_t)n * slot > SHM_PART_MAX)
    slot = (SHM_PART_MAX - words) / (2 * (size_t)n) / SHM_LINE * SHM_LINE;
  M->slot = slot;
  M->part = words + 2 * (size_t)n * slot;
  MPI_Comm node;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
  char* mine = NULL;
  MPI_Aint size;
  int unit;
  /* Contiguous by default: rank r's part starts r parts after rank 0's. */
  MPI_Win_allocate_shared((MPI_Aint)M->part, 1, MPI_INFO_NULL, node, &mine, &M->win);
  MPI_Win_shared_query(M->win, 0, &size, &unit, &M->seg);
  MPI_Comm_free(&node);
  memset(mine, 0, words);
  MPI_Barrier(MPI_COMM_WORLD);
  M->on = 1;
}

void perf_shm_free(struct perf_ctx* c)
{
  struct perf_net* M = &c->net;
  if (M->seg)
    MPI_Win_free(&M->win);
  M->seg = NULL;
  M->on = 0;
  blocks_free(M);
}

static _Atomic uint64_t* shm_word(const struct perf_net* M, int to, int from)
{
  return (_Atomic uint64_t*)(M->seg + (size_t)to * M->part + (size_t)from * SHM_LINE);
}

static char* shm_slot(const struct perf_net* M, int n, int to, int from, uint64_t k)
{
  return M->seg + (size_t)to * M->part + (size_t)n * SHM_LINE +
         ((size_t)from * 2 + (size_t)(k & 1)) * M->slot;
}

/* One exchange; -1 after NET_STALL_S without a peer's word. */
static int shm_once(struct perf_ctx* c)
{
  struct perf_net* M = &c->net;
  int n = c->n, me = c->me, left = n - 1;
  uint64_t k = ++M->seq;
  for (int d = 1; d < n; d++) {
    int j = (me + d) % n;
    memcpy(shm_slot(M, n, j, me, k), c->B.send + M->soff[j], M->slen[j]);
    atomic_store_explicit(shm_word(M, j, me), k, memory_order_release);
    M->rdone[j] = 0;
  }
  memcpy(c->B.recv + M->roff[me], c->B.send + M->soff[me], M->slen[me]);
  unsigned idle = 0;
  double idle_t0 = 0.0;
  while (left > 0) {
    int progress = 0;
    for (int d = 1; d < n; d++) {
      int j = (me - d + n) % n;
      if (M->rdone[j] || atomic_load_explicit(shm_word(M, me, j), memory_order_acquire) < k)
        continue;
      memcpy(c->B.recv + M->roff[j], shm_slot(M, n, me, j, k), M->rlen[j]);
      M->rdone[j] = 1;
      left--;
      progress = 1;
    }
    if (progress || left == 0)
      continue;
    if (idle_stalled(M, &idle, &idle_t0)) {
      fprintf(stderr, "%s: rank %d: --shm-roofline: no peer's block for %d s\n", perf_prog, me,
              NET_STALL_S);
      return -1;
    }
  }
  return 0;
}

/* Whether every block of this exchange fits a slot, on every rank. */
static int shm_fits(struct perf_ctx* c)
{
  int fits = 1;
  for (int j = 0; j < c->n; j++)
    fits &= c->net.slen[j] <= c->net.slot;
  MPI_Allreduce(MPI_IN_PLACE, &fits, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  return fits;
}

double perf_net_roofline_us(struct perf_ctx* c, const struct perf_ops* ops, size_t bytes)
{
  struct perf_net* M = &c->net;
  const struct perf_opts* o = c->o;
  if (!M->on || (M->shm && !shm_fits(c)))
    return -1.0;
  if (o->check) {
    ops->fill(c);
    perf_clear_recv(c, ops);
  }
  double* t = perf_xcalloc((size_t)o->reps, sizeof *t);
  int bad = 0;
  MPI_Barrier(MPI_COMM_WORLD);
  int (*once)(struct perf_ctx*) = M->shm ? shm_once : net_once;
  for (int i = 0; i < o->warmup && !bad; i++)
    bad = once(c) != 0;
  for (int rep = 0; rep < o->reps; rep++) {
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    for (int i = 0; i < o->iters && !bad; i++)
      bad = once(c) != 0;
    t[rep] = (MPI_Wtime() - t0) / o->iters * 1e6;
  }
  c->lib = PERF_MOECCL;
  double v[3] = {perf_median(t, o->reps), bad, !bad && o->check ? (double)ops->verify(c) : 0.0};
  free(t);
  MPI_Allreduce(MPI_IN_PLACE, v, 2, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  MPI_Allreduce(MPI_IN_PLACE, &v[2], 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  const char* kind = M->shm ? "shm" : "net";
  if (v[1] > 0.0) {
    if (c->me == 0)
      printf("# %s roofline: %s at size %zu (see stderr); skipped from here on\n", kind,
             M->shm ? "a rank stalled" : "a socket failed", bytes);
    if (M->shm) /* a rank gave up mid-exchange: the words are out of step */
      M->on = 0;
    else
      net_close(M, c->n);
    return -1.0;
  }
  if (v[2] > 0.0) {
    if (c->me == 0)
      printf("# %s roofline: %.0f wrong elements at size %zu; not shown\n", kind, v[2], bytes);
    return -1.0;
  }
  return v[0];
}
