/*
 * Bootstrap (bootstrap.h), the first half: the unique id and the rendezvous
 * at the root, which hands every rank the peer table.  The ring formed
 * afterwards is bootstrap_ring.c's; the waits that watch the peers are
 * bootstrap_live.c's.
 */
#include "base/param.h"
#include "comm/bootstrap_int.h"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#define ID_MAGIC 0x4d4f4549u /* "MOEI" */
/* The rendezvous hello's magic since it carries the rank's wait: a new
 * magic, so that ranks and roots of the two versions refuse each other
 * by name instead of misreading the field. */
#define JOIN_MAGIC 0x4d4f454au /* "MOEJ" */

typedef struct {
  uint32_t magic;
  uint32_t version;
  uint8_t secret[MOECCL_SECRET_BYTES];
  moeccl_sockaddr_t root;
} id_layout_t;
_Static_assert(sizeof(id_layout_t) <= MOECCL_UNIQUE_ID_BYTES, "unique id layout too large");

typedef struct {
  uint32_t magic; /* JOIN_MAGIC */
  int32_t rank;
  int32_t nranks;
  /* How long the rank still waits for the root's answer, in ms: relative,
   * since the hosts' clocks differ.  The root answers before the first
   * joined rank stops waiting (answer_by), so a rank missing from the
   * rendezvous is named to every one that came, whichever gives up first.
   * Under the MAC: no stranger can make the root answer early. */
  uint32_t wait_ms;
  uint64_t nonce;                     /* the communicator's public tag */
  uint8_t challenge[CHALLENGE_BYTES]; /* the root's answer must prove the secret over it */
  uint8_t mac[32];
} hello_t;

/* Seconds a joining rank waits for the root's answer past its own
 * deadline: the root answers before it (answer_margin), unless slowed. */
#define VERDICT_GRACE 2.0

typedef struct {
  int listen_fd;
  uint64_t nonce;
  uint8_t key[32];
  double timeout;
} root_args_t;

moecclResult_t moeccl_bootstrap_check_hello(const void* msg, size_t len, uint64_t nonce,
                                            const uint8_t key[32], const uint8_t* challenge,
                                            int* rank, int* nranks, double* wait) {
  hello_t h;
  if (len < sizeof(h)) return moecclInProgress;
  memcpy(&h, msg, sizeof(h));
  if (h.magic == HELLO_MAGIC) return moecclInvalidUsage; /* an older moeccl's hello */
  if (h.magic != JOIN_MAGIC || h.nonce != nonce || h.nranks <= 0 || h.rank < 0 ||
      h.rank >= h.nranks)
    return moecclInvalidArgument;
  uint8_t mac[32];
  hello_mac(key, challenge, &h, offsetof(hello_t, mac), mac);
  if (!same_mac(mac, h.mac)) return moecclInvalidArgument;
  *rank = h.rank, *nranks = h.nranks, *wait = h.wait_ms / 1000.0;
  return moecclSuccess;
}

/* How long before a rank stops waiting the root answers it: a tenth of
 * the wait, at least 0.2 s (the answer's way and the scheduler), at most
 * 1 s (a rendezvous that could still complete is not given up long before
 * it must be).  A rank waits VERDICT_GRACE past its deadline besides. */
static double answer_margin(double wait) {
  double m = wait / 10;
  return m < 0.2 ? 0.2 : m > 1.0 ? 1.0 : m;
}

/* A connection the root has accepted and not yet placed: it must send its
 * hello and peer info within HELLO_WAIT seconds of connecting, or it is
 * dropped (and logged); many are served at once, so none can hold up the
 * rendezvous. */
#define MAX_PENDING 256
typedef struct {
  int fd;
  double deadline;
  size_t got;
  uint8_t challenge[CHALLENGE_BYTES];
  moeccl_sockaddr_t from;
  struct {
    hello_t h;
    moeccl_peer_info_t info;
  } msg;
} pending_t;

static void drop(pending_t* p, const char* why) {
  char s[64];
  WARN(BOOT, "rendezvous: dropped a connection from %s: %s (%zu of %zu bytes)",
       moeccl_sockaddr_str(&p->from, s, sizeof(s)), why, p->got, sizeof(p->msg));
  close(p->fd);
  p->fd = -1;
}

/* Answers every rank that joined: status (n: the table follows; -1: the
 * job was inconsistent, two ranks claimed one rank or nranks differed;
 * -2 - r: rank r never came), the table when it follows, and the MAC over
 * the rank's own challenge, status and table. */
static void root_reply(const root_args_t* a, int* fds, uint8_t (*challenges)[CHALLENGE_BYTES],
                       int n, const moeccl_peer_info_t* infos, int32_t status, double deadline) {
  size_t table = status == n ? sizeof(*infos) * (size_t)n : 0;
  for (int i = 0; i < n; i++) {
    if (fds[i] < 0) continue;
    uint8_t mac[32];
    moeccl_bootstrap_reply_mac(a->key, challenges[i], status, infos, table, mac);
    if (moeccl_socket_send(fds[i], &status, sizeof(status), deadline) == moecclSuccess &&
        (!table || moeccl_socket_send(fds[i], infos, table, deadline) == moecclSuccess))
      moeccl_socket_send(fds[i], mac, sizeof(mac), deadline);
  }
}

/* Serves the listening socket and every pending connection with poll until
 * one pending connection has sent a whole hello and info (returns its
 * index, the message in p[i].msg, the fd still open) or the deadline. */
static int next_hello(const root_args_t* a, pending_t* p, int* np, double deadline) {
  struct pollfd fds[MAX_PENDING + 1];
  for (;;) {
    double now = moeccl_now(), wake = deadline;
    int k = 0;
    for (int i = 0; i < *np; i++) {
      if (p[i].fd >= 0 && now > p[i].deadline) drop(&p[i], "no hello in time");
      if (p[i].fd < 0) { /* compact */
        p[i--] = p[--*np];
        continue;
      }
      if (p[i].deadline < wake) wake = p[i].deadline;
    }
    if (now > deadline) return -1;
    fds[k++] = (struct pollfd){.fd = a->listen_fd, .events = POLLIN};
    for (int i = 0; i < *np; i++) fds[k++] = (struct pollfd){.fd = p[i].fd, .events = POLLIN};
    int ms = (int)((wake - now) * 1000.0) + 1;
    if (poll(fds, (nfds_t)k, ms > 0 ? ms : 1) < 0 && errno != EINTR) return -1;
    if (fds[0].revents & POLLIN) {
      moeccl_sockaddr_t from;
      socklen_t len = sizeof(from);
      memset(&from, 0, sizeof(from));
      int fd = accept4(a->listen_fd, &from.sa, &len, SOCK_CLOEXEC | SOCK_NONBLOCK);
      if (fd >= 0 && *np == MAX_PENDING) {
        /* Room for the newcomer (a rank sends its hello at once): the
         * oldest, which had longest to speak, goes. */
        int oldest = 0;
        for (int i = 1; i < *np; i++)
          if (p[i].deadline < p[oldest].deadline) oldest = i;
        drop(&p[oldest], "too many connections wait for a hello; this one longest");
        p[oldest] = p[--*np];
      }
      if (fd >= 0) {
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        pending_t* q = &p[(*np)++];
        memset(q, 0, sizeof(*q));
        q->fd = fd, q->deadline = moeccl_now() + HELLO_WAIT, q->from = from;
        /* 16 bytes into a fresh socket's empty buffer: the send completes */
        if (random_bytes(q->challenge, CHALLENGE_BYTES) != 0 ||
            send(fd, q->challenge, CHALLENGE_BYTES, MSG_NOSIGNAL | MSG_DONTWAIT) != CHALLENGE_BYTES)
          drop(q, "could not be sent a challenge");
      }
    }
    for (int i = 0, j = 1; i < *np && j < k; i++, j++) {
      if (!(fds[j].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      ssize_t r = recv(p[i].fd, (char*)&p[i].msg + p[i].got, sizeof(p[i].msg) - p[i].got, 0);
      if (r <= 0) {
        if (r < 0 && (errno == EAGAIN || errno == EINTR)) continue;
        drop(&p[i], "closed before its hello");
        continue;
      }
      p[i].got += (size_t)r;
      int rank, nranks;
      double wait;
      moecclResult_t rc = p[i].got < sizeof(p[i].msg.h)
                              ? moecclInProgress
                              : moeccl_bootstrap_check_hello(&p[i].msg, p[i].got, a->nonce, a->key,
                                                             p[i].challenge, &rank, &nranks, &wait);
      if (rc == moecclInvalidUsage) {
        drop(&p[i], "a hello of an older moeccl (every rank must run the same version)");
        continue;
      }
      if (rc != moecclSuccess && rc != moecclInProgress) {
        drop(&p[i], "not an authentic hello of this rendezvous");
        continue;
      }
      if (p[i].got == sizeof(p[i].msg)) return i;
    }
  }
}

static void* root_thread(void* arg) {
  root_args_t a = *(root_args_t*)arg;
  free(arg);
  /* answer_by: the root's own deadline, or earlier the time a joined rank
   * stops waiting (less answer_margin), whichever comes first: past it,
   * the rendezvous cannot complete, and the ranks that came learn which
   * one did not before any of them gives up. */
  double deadline = moeccl_now() + a.timeout, answer_by = deadline;
  int n = -1, joined = 0, ok = 1, np = 0, first_out = -1;
  int* fds = NULL;
  moeccl_peer_info_t* infos = NULL;
  uint8_t(*challenges)[CHALLENGE_BYTES] = NULL;
  pending_t* pend = malloc(sizeof(pending_t) * MAX_PENDING);
  while (pend && (n < 0 || joined < n)) {
    int i = next_hello(&a, pend, &np, answer_by);
    if (i < 0) break;
    int fd = pend[i].fd;
    hello_t h = pend[i].msg.h;
    double wait = h.wait_ms / 1000.0, leaves = moeccl_now() + wait - answer_margin(wait);
    moeccl_peer_info_t info = pend[i].msg.info;
    pend[i] = pend[--np];
    if (n < 0) {
      n = h.nranks;
      fds = malloc(sizeof(int) * (size_t)n);
      infos = calloc((size_t)n, sizeof(*infos));
      challenges = calloc((size_t)n, sizeof(*challenges));
      if (!fds || !infos || !challenges) break;
      for (int i = 0; i < n; i++) fds[i] = -1;
    }
    if (h.nranks != n || fds[h.rank] >= 0) {
      WARN(BOOT, "rendezvous: rank %d says nranks=%d (expected %d%s)", h.rank, h.nranks, n,
           h.nranks == n ? ", rank joined twice" : "");
      ok = 0;
      close(fd);
      continue;
    }
    fds[h.rank] = fd;
    infos[h.rank] = info;
    memcpy(challenges[h.rank], h.challenge, CHALLENGE_BYTES);
    joined++;
    if (leaves < answer_by) answer_by = leaves, first_out = h.rank;
  }
  if (n > 0 && fds && infos && challenges && joined == n) {
    root_reply(&a, fds, challenges, n, infos, ok ? n : -1, deadline);
  } else if (n > 0 && fds && challenges) {
    /* Tell the ranks that came which one did not, so their error names it. */
    int missing = 0;
    while (missing < n && fds[missing] >= 0) missing++;
    char when[96] = "the root's deadline (MOECCL_TIMEOUT)";
    if (first_out >= 0)
      snprintf(when, sizeof(when), "rank %d stops waiting (its MOECCL_TIMEOUT)", first_out);
    WARN(BOOT, "rendezvous: %d of %d ranks joined before %s; rank %d is missing", joined, n, when,
         missing);
    root_reply(&a, fds, challenges, n, infos, -2 - missing, moeccl_now() + 1.0);
  }
  for (int i = 0; fds && i < n; i++)
    if (fds[i] >= 0) close(fds[i]);
  for (int i = 0; pend && i < np; i++) drop(&pend[i], "no hello when the rendezvous ended");
  free(pend);
  free(fds);
  free(infos);
  free(challenges);
  close(a.listen_fd);
  return NULL;
}

moecclResult_t moeccl_bootstrap_unique_id(moecclUniqueId* id) {
  id_layout_t l;
  memset(&l, 0, sizeof(l));
  l.magic = ID_MAGIC;
  l.version = MOECCL_VERSION_CODE;
  if (getrandom(l.secret, sizeof(l.secret), 0) != (ssize_t)sizeof(l.secret))
    return moeccl_error(NULL, moecclSystemError,
                        "moecclGetUniqueId: no random bytes for the id's secret (getrandom)");
  const char* fixed = moeccl_param_comm_id();
  if (fixed && *fixed) {
    if (moeccl_sockaddr_parse(fixed, &l.root) != moecclSuccess)
      return moeccl_error(NULL, moecclInvalidArgument, "MOECCL_COMM_ID=%s is not host:port", fixed);
  } else {
    MOECCL_CHECK(moeccl_socket_pick_addr(&l.root));
  }
  int fd;
  if (moeccl_socket_listen(&l.root, &fd) != moecclSuccess)
    return moeccl_error(NULL, moecclSystemError, "cannot open the bootstrap root socket");
  root_args_t* a = malloc(sizeof(*a));
  if (!a) return close(fd), moecclSystemError;
  a->listen_fd = fd;
  a->nonce = moeccl_secret_tag(l.secret);
  moeccl_bootstrap_auth_key(l.secret, a->key);
  a->timeout = moeccl_param_timeout();
  pthread_t t;
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  int rc = pthread_create(&t, &attr, root_thread, a); /* a is the thread's from here on */
  pthread_attr_destroy(&attr);
  if (rc != 0) {
    free(a);
    close(fd);
    return moeccl_error(NULL, moecclSystemError, "cannot start the bootstrap root thread");
  }
  char s[64];
  INFO(BOOT, "bootstrap root listening on %s (communicator tag %016llx)",
       moeccl_sockaddr_str(&l.root, s, sizeof(s)), (unsigned long long)moeccl_secret_tag(l.secret));
  moeccl_bootstrap_id_encode(l.secret, &l.root, id);
  return moecclSuccess;
}

void moeccl_bootstrap_id_encode(const uint8_t secret[MOECCL_SECRET_BYTES],
                                const moeccl_sockaddr_t* root, moecclUniqueId* id) {
  id_layout_t l;
  memset(&l, 0, sizeof(l));
  l.magic = ID_MAGIC;
  l.version = MOECCL_VERSION_CODE;
  memcpy(l.secret, secret, sizeof(l.secret));
  l.root = *root;
  memset(id, 0, sizeof(*id));
  memcpy(id->internal, &l, sizeof(l));
}

moecclResult_t moeccl_bootstrap_id_decode(const moecclUniqueId* id,
                                          uint8_t secret[MOECCL_SECRET_BYTES],
                                          moeccl_sockaddr_t* root) {
  id_layout_t l;
  memcpy(&l, id->internal, sizeof(l));
  if (l.magic != ID_MAGIC) return moecclInvalidArgument;
  /* Another version's ranks may speak another protocol: refuse, by name. */
  if (l.version != MOECCL_VERSION_CODE) return moecclInvalidUsage;
  memcpy(secret, l.secret, sizeof(l.secret));
  if (root) *root = l.root;
  return moecclSuccess;
}

moecclResult_t moeccl_bootstrap_id_secret(const moecclUniqueId* id,
                                          uint8_t secret[MOECCL_SECRET_BYTES]) {
  return moeccl_bootstrap_id_decode(id, secret, NULL);
}

moecclResult_t moeccl_bootstrap_listen(moeccl_sockaddr_t* addr, int* fd) {
  return moeccl_socket_listen(addr, fd);
}

moecclResult_t moeccl_bootstrap_check_status(const void* msg, size_t len, int nranks,
                                             int* missing) {
  int32_t status;
  if (len < sizeof(status)) return moecclInProgress;
  memcpy(&status, msg, sizeof(status));
  if (status <= -2) {
    /* in 64 bits: -INT32_MIN is no int32_t (a bogus root may send it) */
    *missing = (int)(-2 - (int64_t)status);
    return moecclRemoteError;
  }
  return status == nranks ? moecclSuccess : moecclInvalidUsage;
}

/* Connects to the root, sends our info, receives the table.  Our listening
 * socket is bound to the local address that reaches the root. */
static moecclResult_t join_root(const id_layout_t* l, int rank, int nranks, double deadline,
                                moeccl_peer_info_t* self, moeccl_peer_info_t* peers, int* listen_fd,
                                int* missing, int* forged) {
  int fd;
  MOECCL_CHECK(moeccl_socket_connect(&l->root, deadline, &fd));
  moeccl_sockaddr_t local;
  memset(&local, 0, sizeof(local)); /* an IPv4 address leaves the IPv6 tail unset */
  socklen_t len = sizeof(local);
  moecclResult_t rc = getsockname(fd, &local.sa, &len) == 0 ? moecclSuccess : moecclSystemError;
  if (rc == moecclSuccess) {
    if (local.sa.sa_family == AF_INET6) local.sin6.sin6_port = 0;
    else local.sin.sin_port = 0;
    rc = moeccl_socket_listen(&local, listen_fd);
  }
  self->listen_addr = local;
  moeccl_bootstrap_alive_socket(&local, &self->alive_addr);
  hello_t h = {JOIN_MAGIC, rank, nranks, 0, moeccl_secret_tag(l->secret), {0}, {0}};
  uint8_t challenge[CHALLENGE_BYTES], key[32], mac[32], want[32];
  if (rc == moecclSuccess && random_bytes(h.challenge, CHALLENGE_BYTES) != 0)
    rc = moecclSystemError;
  if (rc == moecclSuccess) rc = moeccl_socket_recv(fd, challenge, sizeof(challenge), deadline);
  moeccl_bootstrap_auth_key(l->secret, key);
  double left = deadline - moeccl_now(); /* as late as can be: the root counts from its arrival */
  h.wait_ms = left <= 0 ? 0 : left < 4e6 ? (uint32_t)(left * 1000.0) : UINT32_MAX;
  hello_mac(key, challenge, &h, offsetof(hello_t, mac), h.mac);
  if (rc == moecclSuccess) rc = moeccl_socket_send(fd, &h, sizeof(h), deadline);
  if (rc == moecclSuccess) rc = moeccl_socket_send(fd, self, sizeof(*self), deadline);
  int32_t status = 0;
  /* The root answers before our deadline (hello_t.wait_ms), even when the
   * rendezvous fails; a root slowed down may be late: wait VERDICT_GRACE
   * more to learn which rank was missing. */
  double answer = deadline + VERDICT_GRACE;
  if (rc == moecclSuccess) rc = moeccl_socket_recv(fd, &status, sizeof(status), answer);
  size_t table = status == nranks ? sizeof(*peers) * (size_t)nranks : 0;
  if (rc == moecclSuccess && table) rc = moeccl_socket_recv(fd, peers, table, answer);
  if (rc == moecclSuccess) rc = moeccl_socket_recv(fd, mac, sizeof(mac), answer);
  /* Nothing the answer says counts before its MAC is checked. */
  if (rc == moecclSuccess) {
    moeccl_bootstrap_reply_mac(key, h.challenge, status, peers, table, want);
    if (!same_mac(mac, want)) rc = moecclRemoteError, *forged = 1;
  }
  if (rc == moecclSuccess)
    rc = moeccl_bootstrap_check_status(&status, sizeof(status), nranks, missing);
  /* The table's strings reach logs and texts: end them whatever came. */
  for (int i = 0; rc == moecclSuccess && i < nranks; i++)
    peers[i].hostname[sizeof(peers[i].hostname) - 1] = '\0';
  close(fd);
  if (rc != moecclSuccess && *listen_fd >= 0) close(*listen_fd), *listen_fd = -1;
  return rc;
}

moecclResult_t moeccl_bootstrap_init(const moecclUniqueId* id, int rank, int nranks, double timeout,
                                     moeccl_peer_info_t* self, moeccl_peer_info_t* peers,
                                     moeccl_bootstrap_t** out) {
  id_layout_t l;
  memcpy(&l, id->internal, sizeof(l));
  double deadline = moeccl_now() + timeout;
  int listen_fd = -1, missing = -1, forged = 0;
  moecclResult_t rc =
      join_root(&l, rank, nranks, deadline, self, peers, &listen_fd, &missing, &forged);
  char s[64];
  if (forged)
    return moeccl_error(NULL, rc,
                        "bootstrap: the rendezvous at %s answered without proof of this unique "
                        "id's secret (not the root that made the id); its answer was ignored",
                        moeccl_sockaddr_str(&l.root, s, sizeof(s)));
  if (rc == moecclInvalidUsage)
    return moeccl_error(NULL, rc, "bootstrap: ranks disagree on nranks or two ranks share a rank");
  if (missing >= 0)
    return moeccl_error(NULL, moecclTimeout,
                        "bootstrap: rank %d never joined the rendezvous (MOECCL_TIMEOUT=%.0f s)",
                        missing, timeout);
  if (rc != moecclSuccess)
    return moeccl_error(NULL, rc, "bootstrap: could not join the rendezvous within %.0f s",
                        timeout);
  INFO(BOOT, "rank %d: joined the rendezvous of %d ranks", rank, nranks);
  return moeccl_bootstrap_ring(l.secret, rank, nranks, timeout, listen_fd, peers, out);
}
