/*
 * Bootstrap: the ring (bootstrap.h).  Every rank connects to rank+1, each
 * connection authenticated by the communicator's secret, and the ring
 * carries the small collectives of setup: allgather and barrier.
 */
#include "comm/bootstrap_int.h"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

typedef struct {
  uint32_t magic;
  int32_t rank;
  uint64_t nonce;
  uint8_t mac[32];
} ring_hello_t;

moecclResult_t moeccl_bootstrap_check_ring_hello(const void* msg, size_t len, uint64_t nonce,
                                                 const uint8_t key[32], const uint8_t* challenge,
                                                 int prev) {
  ring_hello_t h;
  if (len < sizeof(h)) return moecclInProgress;
  memcpy(&h, msg, sizeof(h));
  if (h.magic != HELLO_MAGIC || h.nonce != nonce || h.rank != prev) return moecclInvalidArgument;
  uint8_t mac[32];
  hello_mac(key, challenge, &h, offsetof(ring_hello_t, mac), mac);
  return same_mac(mac, h.mac) ? moecclSuccess : moecclInvalidArgument;
}

/* Connects to rank next's ring socket (refused until it listens, so
 * retried), watching the peers while it waits. */
static moecclResult_t ring_connect(moeccl_bootstrap_t* b, int next, double deadline) {
  char doing[64];
  snprintf(doing, sizeof(doing), "connecting to rank %d's ring socket", next);
  for (double every = LIVENESS_EVERY;;
       every = every * 2 < LIVENESS_MAX ? every * 2 : LIVENESS_MAX) {
    double step = moeccl_now() + every;
    moecclResult_t rc = moeccl_socket_try_connect(&b->peers[next].listen_addr,
                                                  step < deadline ? step : deadline, &b->next_fd);
    if (rc == moecclSuccess) return rc;
    if (rc != moecclTimeout || moeccl_now() >= deadline)
      return moeccl_boot_peer_lost(b, rc, next, doing);
    int dead = moeccl_boot_find_dead(b);
    if (dead >= 0) return moeccl_boot_dead_peer(b, dead, doing);
  }
}

/* A connection to this rank's ring socket that has not yet proved to be
 * rank prev's: it must send an authentic hello within HELLO_WAIT seconds
 * of connecting.  Up to MAX_CANDIDATES are served at once (the oldest
 * makes room for a newer one), so strangers cannot hold the ring up. */
#define MAX_CANDIDATES 64
typedef struct {
  int fd;
  double deadline;
  size_t got;
  uint8_t challenge[CHALLENGE_BYTES];
  ring_hello_t msg;
} cand_t;

static void cand_drop(const moeccl_bootstrap_t* b, cand_t* c, int* nc, int i, const char* why) {
  WARN(BOOT,
       "rank %d: dropped a connection to its ring socket: %s (%zu of %zu bytes of rank %d's hello)",
       b->rank, why, c[i].got, sizeof(c[i].msg), (b->rank - 1 + b->nranks) % b->nranks);
  close(c[i].fd);
  c[i] = c[--*nc];
}

/* Takes a connection from the ring socket and sends it a challenge. */
static void cand_accept(moeccl_bootstrap_t* b, cand_t* c, int* nc) {
  int fd = accept4(b->listen_fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
  if (fd < 0) return;          /* EAGAIN, ECONNABORTED, EINTR: poll again */
  if (*nc == MAX_CANDIDATES) { /* the oldest, which had longest to speak */
    int oldest = 0;
    for (int i = 1; i < *nc; i++)
      if (c[i].deadline < c[oldest].deadline) oldest = i;
    cand_drop(b, c, nc, oldest, "too many connections wait for a hello; this one longest");
  }
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  cand_t* q = &c[(*nc)++];
  memset(q, 0, sizeof(*q));
  q->fd = fd, q->deadline = moeccl_now() + HELLO_WAIT;
  /* 16 bytes into a fresh socket's empty buffer: the send completes */
  if (random_bytes(q->challenge, CHALLENGE_BYTES) != 0 ||
      send(fd, q->challenge, CHALLENGE_BYTES, MSG_NOSIGNAL | MSG_DONTWAIT) != CHALLENGE_BYTES)
    cand_drop(b, c, nc, *nc - 1, "could not be sent a challenge");
}

/* Reads what candidate i sent; 1 when it is rank prev's authentic hello. */
static int cand_read(moeccl_bootstrap_t* b, cand_t* c, int* nc, int i, const uint8_t key[32]) {
  ssize_t n = recv(c[i].fd, (char*)&c[i].msg + c[i].got, sizeof(c[i].msg) - c[i].got, MSG_DONTWAIT);
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return 0;
  if (n <= 0) {
    cand_drop(b, c, nc, i, "closed before its hello");
    return 0;
  }
  c[i].got += (size_t)n;
  if (c[i].got < sizeof(c[i].msg)) return 0;
  int prev = (b->rank - 1 + b->nranks) % b->nranks;
  if (moeccl_bootstrap_check_ring_hello(&c[i].msg, c[i].got, b->nonce, key, c[i].challenge, prev) ==
      moecclSuccess)
    return 1;
  cand_drop(b, c, nc, i, "not an authentic hello");
  return 0;
}

/* Every rank connects to rank+1 (its ring socket refuses until it
 * listens, so the connect is retried), then, in one poll loop: accepts
 * connections to its own ring socket and challenges each, reads rank+1's
 * challenge and answers it with its hello, and reads each accepted
 * connection's hello until one is rank-1's, authentic.  Each connection
 * gets HELLO_WAIT seconds of its own, and all are served at once: no
 * stranger, however many, holds a rank back, and no rank waits on its
 * neighbour before serving its own socket (which, with strangers on every
 * socket, would wait round the ring).  The waits watch the peers, so a
 * rank that died fails the others at once, by name. */
static moecclResult_t ring_handshake(moeccl_bootstrap_t* b, const uint8_t key[32],
                                     double deadline) {
  int next = (b->rank + 1) % b->nranks, prev = (b->rank - 1 + b->nranks) % b->nranks;
  cand_t* c = malloc(sizeof(cand_t) * MAX_CANDIDATES);
  if (!c)
    return moeccl_boot_fail(b, moecclSystemError, "bootstrap: out of memory forming the ring");
  int nc = 0;
  uint8_t theirs[CHALLENGE_BYTES];
  size_t theirs_got = 0, sent = 0;
  ring_hello_t h = {HELLO_MAGIC, b->rank, b->nonce, {0}};
  double every = LIVENESS_EVERY, check = moeccl_now() + every;
  char doing[96];
  moecclResult_t rc = moecclSuccess;
  while (rc == moecclSuccess && (b->prev_fd < 0 || sent < sizeof(h))) {
    double now = moeccl_now(), wake = deadline < check ? deadline : check;
    for (int i = 0; i < nc; i++) {
      if (now > c[i].deadline) cand_drop(b, c, &nc, i--, "no hello in time");
      else if (c[i].deadline < wake) wake = c[i].deadline;
    }
    if (b->prev_fd < 0) snprintf(doing, sizeof(doing), "waiting for rank %d's ring hello", prev);
    else snprintf(doing, sizeof(doing), "forming the ring with rank %d", next);
    if (now >= deadline) {
      rc = moeccl_boot_peer_lost(b, moecclTimeout, b->prev_fd < 0 ? prev : next, doing);
      break;
    }
    if (now >= check) {
      int dead = moeccl_boot_find_dead(b);
      if (dead >= 0) {
        rc = moeccl_boot_dead_peer(b, dead, doing);
        break;
      }
      every = every * 2 < LIVENESS_MAX ? every * 2 : LIVENESS_MAX;
      check = moeccl_now() + every;
      continue;
    }
    struct pollfd fds[MAX_CANDIDATES + 2];
    int k = 0, at_listen = -1, at_next = -1;
    if (b->prev_fd < 0) {
      at_listen = k;
      fds[k++] = (struct pollfd){.fd = b->listen_fd, .events = POLLIN};
    }
    if (sent < sizeof(h)) {
      at_next = k;
      fds[k++] = (struct pollfd){.fd = b->next_fd,
                                 .events = theirs_got < sizeof(theirs) ? POLLIN : POLLOUT};
    }
    int first_cand = k;
    for (int i = 0; i < nc; i++) fds[k++] = (struct pollfd){.fd = c[i].fd, .events = POLLIN};
    int ms = (int)((wake - now) * 1000.0) + 1;
    if (poll(fds, (nfds_t)k, ms > 0 ? ms : 1) < 0 && errno != EINTR) {
      rc = moeccl_boot_fail(b, moecclSystemError, "bootstrap: rank %d: poll failed while %s: %s",
                            b->rank, doing, strerror(errno));
      break;
    }
    /* the candidates first: cand_accept and cand_drop reorder the array */
    for (int i = nc - 1; i >= 0 && b->prev_fd < 0; i--) {
      if (!(fds[first_cand + i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      if (cand_read(b, c, &nc, i, key)) {
        b->prev_fd = c[i].fd;
        c[i] = c[--nc];
      }
    }
    if (at_next >= 0 && fds[at_next].revents) {
      ssize_t n = 0;
      if (theirs_got < sizeof(theirs)) {
        n = recv(b->next_fd, theirs + theirs_got, sizeof(theirs) - theirs_got, MSG_DONTWAIT);
        if (n > 0 && (theirs_got += (size_t)n) == sizeof(theirs))
          hello_mac(key, theirs, &h, offsetof(ring_hello_t, mac), h.mac);
      } else {
        n = write_nosig(b->next_fd, (char*)&h + sent, sizeof(h) - sent);
        if (n > 0) sent += (size_t)n;
      }
      if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
        snprintf(doing, sizeof(doing), "forming the ring with rank %d", next);
        rc = moeccl_boot_peer_lost(b, moecclRemoteError, next, doing); /* closed or reset */
        break;
      }
    }
    if (at_listen >= 0 && b->prev_fd < 0 && (fds[at_listen].revents & POLLIN))
      cand_accept(b, c, &nc);
  }
  while (nc > 0) cand_drop(b, c, &nc, nc - 1, "the ring formed without it");
  free(c);
  return rc;
}

moecclResult_t moeccl_bootstrap_ring(const uint8_t secret[MOECCL_SECRET_BYTES], int rank,
                                     int nranks, double timeout, int listen_fd,
                                     const moeccl_peer_info_t* peers, moeccl_bootstrap_t** out) {
  moeccl_bootstrap_t* b = calloc(1, sizeof(*b));
  if (!b) return close(listen_fd), moecclSystemError;
  uint64_t nonce = moeccl_secret_tag(secret);
  *b = (moeccl_bootstrap_t){rank, nranks, nonce, listen_fd, -1, -1, timeout};
  b->peers = peers;
  b->scan_next = rank + 2;
  b->dead = -1;
  moecclResult_t rc = moecclSuccess;
  double deadline = moeccl_now() + timeout;
  if (nranks > 1) {
    uint8_t key[32];
    moeccl_bootstrap_auth_key(secret, key);
    rc = ring_connect(b, (rank + 1) % nranks, deadline);
    if (rc == moecclSuccess) rc = ring_handshake(b, key, deadline);
  }
  if (rc != moecclSuccess) {
    char text[sizeof(b->fail_text)];
    snprintf(text, sizeof(text), "%s", b->fail_text);
    int recorded = b->failed != moecclSuccess;
    moeccl_bootstrap_close(b);
    if (recorded) return moeccl_error(NULL, rc, "%s", text);
    return moeccl_error(NULL, rc, "bootstrap: ring setup failed on rank %d", rank);
  }
  *out = b;
  return moecclSuccess;
}

moecclResult_t moeccl_bootstrap_error(const moeccl_bootstrap_t* b) {
  if (!b || b->failed == moecclSuccess) return moecclSuccess;
  return moeccl_error(NULL, b->failed, "%s", b->fail_text);
}

moecclResult_t moeccl_bootstrap_allgather(moeccl_bootstrap_t* b, void* data, size_t bytes) {
  if (b->failed != moecclSuccess) return moeccl_bootstrap_error(b);
  int n = b->nranks, next = (b->rank + 1) % n, prev = (b->rank - 1 + n) % n;
  double deadline = moeccl_now() + b->timeout;
  char* d = data;
  char doing[64];
  /* Step s: pass along the block that originated s ranks behind us. */
  for (int s = 0; s < n - 1; s++) {
    int send_block = (b->rank - s + n) % n, recv_block = (b->rank - s - 1 + n) % n;
    snprintf(doing, sizeof(doing), "in a setup exchange (allgather step %d of %d)", s + 1, n - 1);
    MOECCL_CHECK(moeccl_boot_xfer(b, b->next_fd, 1, d + (size_t)send_block * bytes, bytes, deadline,
                                  next, doing));
    MOECCL_CHECK(moeccl_boot_xfer(b, b->prev_fd, 0, d + (size_t)recv_block * bytes, bytes, deadline,
                                  prev, doing));
  }
  return moecclSuccess;
}

int moeccl_bootstrap_dead(const moeccl_bootstrap_t* b) { return b ? b->dead : -1; }

moecclResult_t moeccl_bootstrap_barrier(moeccl_bootstrap_t* b) {
  char* flags = calloc((size_t)b->nranks, 1);
  if (!flags) return moecclSystemError;
  moecclResult_t rc = moeccl_bootstrap_allgather(b, flags, 1);
  free(flags);
  return rc;
}

void moeccl_bootstrap_close(moeccl_bootstrap_t* b) {
  if (!b) return;
  if (b->next_fd >= 0) close(b->next_fd);
  if (b->prev_fd >= 0) close(b->prev_fd);
  if (b->listen_fd >= 0) close(b->listen_fd);
  free(b);
}
