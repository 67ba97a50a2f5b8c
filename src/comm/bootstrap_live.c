/*
 * Bootstrap: the waits that watch the peers (bootstrap.h).  While a rank
 * waits on a bootstrap socket it checks that its peers live, /proc for a
 * peer on its host and the liveness socket for the others, so that a rank
 * that dies during setup fails the others at once, by name.  Also the
 * probes of liveness sockets and this process's own liveness socket.
 */
#include "comm/bootstrap_int.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <unistd.h>

#define PROBES_PER_CHECK 16 /* remote peers probed per check (round robin), at once */
#define PROBE_WAIT_MS 100   /* the probes' one budget */
#define DEATH_GRACE 1.0     /* seconds a lost connection waits for its peer's death to show */

/* 1 when peer's process is known to be gone: /proc for a peer on this
 * host, else its liveness socket refuses connections. */
static int peer_gone(const moeccl_bootstrap_t* b, int peer) {
  const moeccl_peer_info_t* p = &b->peers[peer];
  if (p->host_hash == b->peers[b->rank].host_hash)
    return p->pid > 0 && !moeccl_process_alive(p->pid, p->pid_start);
  return p->alive_addr.sin.sin_port != 0 &&
         moeccl_bootstrap_probe(&p->alive_addr, PROBE_WAIT_MS) == 0;
}

/* A peer known dead, or -1.  Peers on this host are all checked in /proc
 * (cheap); remote ones by their liveness sockets, PROBES_PER_CHECK at a
 * time, the neighbours first, all at once within one PROBE_WAIT_MS (a
 * refusal comes back in microseconds; a peer that does not answer, say
 * behind a cut link, is not taken for dead). */
int moeccl_boot_find_dead(moeccl_bootstrap_t* b) {
  int n = b->nranks, me = b->rank;
  uint64_t host = b->peers[me].host_hash;
  for (int p = 0; p < n; p++) {
    const moeccl_peer_info_t* q = &b->peers[p];
    if (p != me && q->host_hash == host && q->pid > 0 &&
        !moeccl_process_alive(q->pid, q->pid_start))
      return p;
  }
  int who[PROBES_PER_CHECK + 2], m = 0;
  const moeccl_sockaddr_t* addrs[PROBES_PER_CHECK + 2] = {0};
  int first[2] = {(me + 1) % n, (me - 1 + n) % n};
  for (int i = 0; i < 2 + PROBES_PER_CHECK && i < 2 + n; i++) {
    int p = i < 2 ? first[i] : b->scan_next++ % n;
    const moeccl_peer_info_t* q = &b->peers[p];
    int dup = 0;
    for (int k = 0; k < m; k++) dup |= who[k] == p;
    if (p == me || dup || q->host_hash == host || q->alive_addr.sin.sin_port == 0) continue;
    who[m] = p, addrs[m++] = &q->alive_addr;
  }
  int states[PROBES_PER_CHECK + 2];
  moeccl_bootstrap_probe_many(addrs, m, PROBE_WAIT_MS, states);
  for (int k = 0; k < m; k++)
    if (states[k] == 0) return who[k];
  return -1;
}

/* Records b's failure (sticky) and returns it as the last error. */
moecclResult_t moeccl_boot_fail(moeccl_bootstrap_t* b, moecclResult_t rc, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(b->fail_text, sizeof(b->fail_text), fmt, ap);
  va_end(ap);
  b->failed = rc;
  return moeccl_error(NULL, rc, "%s", b->fail_text);
}

moecclResult_t moeccl_boot_dead_peer(moeccl_bootstrap_t* b, int dead, const char* doing) {
  const moeccl_peer_info_t* p = &b->peers[dead];
  if (b->failed == moecclSuccess) b->dead = dead;
  return moeccl_boot_fail(b, moecclRemoteError,
                          "bootstrap: rank %d (pid %d on %s) died while rank %d was %s", dead,
                          (int)p->pid, p->hostname, b->rank, doing);
}

/* After a lost connection or a deadline: names the dead rank if there is
 * one, else says whom this rank lost while doing what. */
moecclResult_t moeccl_boot_peer_lost(moeccl_bootstrap_t* b, moecclResult_t rc, int peer,
                                     const char* doing) {
  /* A killed process's sockets close while it exits, a moment before /proc
   * shows it gone and before its liveness socket refuses: look a while. */
  int dead = -1;
  for (double until = moeccl_now() + DEATH_GRACE; dead < 0;) {
    dead = peer_gone(b, peer) ? peer : moeccl_boot_find_dead(b);
    if (dead >= 0 || rc == moecclTimeout || moeccl_now() > until) break;
    usleep(10000);
  }
  if (dead >= 0) return moeccl_boot_dead_peer(b, dead, doing);
  if (rc == moecclTimeout)
    return moeccl_boot_fail(
        b, rc,
        "bootstrap: rank %d heard nothing from rank %d for %.0f s while it was %s "
        "(MOECCL_TIMEOUT)",
        b->rank, peer, b->timeout, doing);
  return moeccl_boot_fail(
      b, rc,
      "bootstrap: rank %d closed its connection while rank %d was %s (it failed; "
      "its own log says why)",
      peer, b->rank, doing);
}

/* Waits until fd is ready for events or deadline, checking the peers'
 * liveness after LIVENESS_EVERY, then at doubling intervals up to
 * LIVENESS_MAX: 1 ready, 0 deadline, -1 error, -2 - r when rank r is dead. */
static int boot_wait(moeccl_bootstrap_t* b, int fd, short events, double deadline) {
  /* The interval doubles while the wait lasts, up to LIVENESS_MAX: a death
   * early in setup is seen within 0.1 s, and thousands of ranks waiting
   * long on a slow one do not keep probing each other ten times a second. */
  double every = LIVENESS_EVERY;
  for (;;) {
    double now = moeccl_now(), left = deadline - now;
    if (left <= 0) return 0;
    double step = left < every ? left : every;
    every = every * 2 < LIVENESS_MAX ? every * 2 : LIVENESS_MAX;
    struct pollfd pf = {.fd = fd, .events = events};
    int rc = poll(&pf, 1, (int)(step * 1000.0) + 1);
    if (rc > 0) return 1;
    if (rc < 0 && errno != EINTR) return -1;
    if (rc == 0) {
      int dead = moeccl_boot_find_dead(b);
      if (dead >= 0) return -2 - dead;
    }
  }
}

/* Exactly len bytes to / from a ring neighbour before deadline; a peer's
 * death anywhere ends the wait (and names it). */
moecclResult_t moeccl_boot_xfer(moeccl_bootstrap_t* b, int fd, int send, void* buf, size_t len,
                                double deadline, int peer, const char* doing) {
  char* p = buf;
  while (len > 0) {
    ssize_t n = send ? write_nosig(fd, p, len) : recv(fd, p, len, MSG_DONTWAIT);
    if (n > 0) {
      p += n, len -= (size_t)n;
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
      int w = boot_wait(b, fd, send ? POLLOUT : POLLIN, deadline);
      if (w == 1) continue;
      if (w <= -2) return moeccl_boot_dead_peer(b, -2 - w, doing);
      return moeccl_boot_peer_lost(b, w == 0 ? moecclTimeout : moecclSystemError, peer, doing);
    }
    return moeccl_boot_peer_lost(b, moecclRemoteError, peer, doing); /* closed or reset */
  }
  return moecclSuccess;
}

int moeccl_bootstrap_probe(const moeccl_sockaddr_t* addr, int timeout_ms) {
  int state;
  moeccl_bootstrap_probe_many(&addr, 1, timeout_ms, &state);
  return state;
}

void moeccl_bootstrap_probe_many(const moeccl_sockaddr_t* const* addrs, int n, int timeout_ms,
                                 int* states) {
  struct pollfd p[MOECCL_PROBE_MAX];
  int k = 0; /* connections still waiting: p[0, k), for states[idx[i]] */
  int idx[MOECCL_PROBE_MAX];
  for (int i = 0; i < n; i++) states[i] = -1; /* past MOECCL_PROBE_MAX: not probed, unknown */
  if (n > MOECCL_PROBE_MAX) n = MOECCL_PROBE_MAX;
  for (int i = 0; i < n; i++) {
    const moeccl_sockaddr_t* a = addrs[i];
    int fd = socket(a->sa.sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) continue;
    if (connect(fd, &a->sa, moeccl_sockaddr_len(a)) == 0) states[i] = 1;
    else if (errno == ECONNREFUSED) states[i] = 0;
    else if (errno == EINPROGRESS) {
      p[k] = (struct pollfd){.fd = fd, .events = POLLOUT};
      idx[k++] = i;
      continue;
    }
    close(fd);
  }
  /* One budget for all: the connects run at once. */
  double deadline = moeccl_now() + timeout_ms / 1000.0;
  while (k > 0) {
    int ms = (int)((deadline - moeccl_now()) * 1000.0 + 0.5);
    if (ms <= 0 || poll(p, (nfds_t)k, ms) <= 0) break; /* silence, or EINTR near the end */
    for (int i = 0; i < k; i++) {
      if (!p[i].revents) continue;
      int err = 0;
      socklen_t len = sizeof(err);
      getsockopt(p[i].fd, SOL_SOCKET, SO_ERROR, &err, &len);
      states[idx[i]] = err == 0 ? 1 : err == ECONNREFUSED ? 0 : -1;
      close(p[i].fd);
      p[i] = p[--k], idx[i] = idx[k];
      i--;
    }
  }
  for (int i = 0; i < k; i++) close(p[i].fd); /* no answer: unknown */
}

static pthread_mutex_t alive_lock = PTHREAD_MUTEX_INITIALIZER;
static int alive_fd = -1;
static moeccl_sockaddr_t alive_addr;

void moeccl_bootstrap_alive_socket(const moeccl_sockaddr_t* local, moeccl_sockaddr_t* addr) {
  pthread_mutex_lock(&alive_lock);
  if (alive_fd < 0) {
    moeccl_sockaddr_t a = *local;
    if (a.sa.sa_family == AF_INET6) a.sin6.sin6_port = 0;
    else a.sin.sin_port = 0;
    int fd;
    if (moeccl_socket_listen(&a, &fd) == moecclSuccess) {
      fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK); /* drained, never waited on */
      alive_fd = fd, alive_addr = a;
    }
  }
  if (alive_fd >= 0) *addr = alive_addr;
  else memset(addr, 0, sizeof(*addr));
  pthread_mutex_unlock(&alive_lock);
}

void moeccl_bootstrap_drain(void) {
  if (alive_fd < 0) return;
  for (int i = 0; i < 64; i++) {
    int fd = accept4(alive_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) break;
    close(fd);
  }
}
