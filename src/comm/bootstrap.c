/* Bootstrap: rendezvous at the root, then a TCP ring for setup collectives. */
#include "comm/bootstrap.h"
#include "base/param.h"
#include "base/sha256.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#define ID_MAGIC 0x4d4f4549u /* "MOEI" */
/* The ring hello's magic; also the rendezvous hello's before it carried
 * the rank's wait (a root that reads it names the other version). */
#define HELLO_MAGIC 0x4d4f4548u
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

/* Authentication: whoever accepts a bootstrap connection first sends a
 * fresh random challenge; the hello that comes back carries
 * HMAC-SHA-256(key, challenge || the hello's fields), the key derived
 * one-way from the communicator's secret (moeccl_bootstrap_auth_key).  So a hello
 * proves knowledge of the secret without showing it, and a recorded one
 * does not pass for another connection.  The other way, a joining rank's
 * hello carries a challenge of its own, and the root's answer (status
 * word, peer table) ends with a MAC over it (moeccl_bootstrap_reply_mac):
 * a process that took the root's address without the id cannot hand
 * the ranks a table of its own, nor tell them a rank is missing. */
#define CHALLENGE_BYTES MOECCL_BOOT_CHALLENGE_BYTES

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

void moeccl_bootstrap_auth_key(const uint8_t secret[MOECCL_SECRET_BYTES], uint8_t key[32]) {
  moeccl_sha256_labelled("moeccl-auth", secret, MOECCL_SECRET_BYTES, key);
}

/* The MAC of a message of n bytes (its mac field excluded: it comes last)
 * answering challenge. */
static void hello_mac(const uint8_t key[32], const uint8_t* challenge, const void* msg, size_t n,
                      uint8_t out[32]) {
  uint8_t buf[CHALLENGE_BYTES + 64];
  memcpy(buf, challenge, CHALLENGE_BYTES);
  memcpy(buf + CHALLENGE_BYTES, msg, n);
  moeccl_hmac_sha256(key, 32, buf, CHALLENGE_BYTES + n, out);
}

void moeccl_bootstrap_reply_mac(const uint8_t key[32], const uint8_t* challenge, int32_t status,
                                const void* table, size_t table_bytes, uint8_t out[32]) {
  static const char label[] = "moeccl-root-reply"; /* never the start of a hello's MAC input */
  uint8_t buf[sizeof(label) + CHALLENGE_BYTES + sizeof(status) + 32];
  uint8_t* q = buf;
  memcpy(q, label, sizeof(label)), q += sizeof(label);
  memcpy(q, challenge, CHALLENGE_BYTES), q += CHALLENGE_BYTES;
  memcpy(q, &status, sizeof(status)), q += sizeof(status);
  moeccl_sha256_t c; /* the table's digest: the root hashes it once for all ranks */
  moeccl_sha256_init(&c);
  if (table_bytes) moeccl_sha256_update(&c, table, table_bytes);
  moeccl_sha256_final(&c, q);
  moeccl_hmac_sha256(key, 32, buf, sizeof(buf), out);
}

static int same_mac(const uint8_t* a, const uint8_t* b) { /* constant time */
  uint8_t d = 0;
  for (int i = 0; i < 32; i++) d |= a[i] ^ b[i];
  return d == 0;
}

static int random_bytes(uint8_t* p, size_t n) { return getrandom(p, n, 0) == (ssize_t)n ? 0 : -1; }

static ssize_t write_nosig(int fd, const void* p, size_t n) {
  return send(fd, p, n, MSG_NOSIGNAL | MSG_DONTWAIT);
}

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
#define HELLO_WAIT 5.0
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

/* ---- waits that watch the peers ------------------------------------------ */

#define LIVENESS_EVERY 0.1  /* seconds to a wait's first liveness check */
#define LIVENESS_MAX 1.0    /* seconds between its checks once it lasts */
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
static int find_dead(moeccl_bootstrap_t* b) {
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
static moecclResult_t boot_fail(moeccl_bootstrap_t* b, moecclResult_t rc, const char* fmt, ...)
    __attribute__((format(printf, 3, 4)));
static moecclResult_t boot_fail(moeccl_bootstrap_t* b, moecclResult_t rc, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(b->fail_text, sizeof(b->fail_text), fmt, ap);
  va_end(ap);
  b->failed = rc;
  return moeccl_error(NULL, rc, "%s", b->fail_text);
}

static moecclResult_t dead_peer(moeccl_bootstrap_t* b, int dead, const char* doing) {
  const moeccl_peer_info_t* p = &b->peers[dead];
  if (b->failed == moecclSuccess) b->dead = dead;
  return boot_fail(b, moecclRemoteError,
                   "bootstrap: rank %d (pid %d on %s) died while rank %d was %s", dead, (int)p->pid,
                   p->hostname, b->rank, doing);
}

/* After a lost connection or a deadline: names the dead rank if there is
 * one, else says whom this rank lost while doing what. */
static moecclResult_t peer_lost(moeccl_bootstrap_t* b, moecclResult_t rc, int peer,
                                const char* doing) {
  /* A killed process's sockets close while it exits, a moment before /proc
   * shows it gone and before its liveness socket refuses: look a while. */
  int dead = -1;
  for (double until = moeccl_now() + DEATH_GRACE; dead < 0;) {
    dead = peer_gone(b, peer) ? peer : find_dead(b);
    if (dead >= 0 || rc == moecclTimeout || moeccl_now() > until) break;
    usleep(10000);
  }
  if (dead >= 0) return dead_peer(b, dead, doing);
  if (rc == moecclTimeout)
    return boot_fail(b, rc,
                     "bootstrap: rank %d heard nothing from rank %d for %.0f s while it was %s "
                     "(MOECCL_TIMEOUT)",
                     b->rank, peer, b->timeout, doing);
  return boot_fail(b, rc,
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
      int dead = find_dead(b);
      if (dead >= 0) return -2 - dead;
    }
  }
}

/* Exactly len bytes to / from a ring neighbour before deadline; a peer's
 * death anywhere ends the wait (and names it). */
static moecclResult_t boot_xfer(moeccl_bootstrap_t* b, int fd, int send, void* buf, size_t len,
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
      if (w <= -2) return dead_peer(b, -2 - w, doing);
      return peer_lost(b, w == 0 ? moecclTimeout : moecclSystemError, peer, doing);
    }
    return peer_lost(b, moecclRemoteError, peer, doing); /* closed or reset */
  }
  return moecclSuccess;
}

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
    if (rc != moecclTimeout || moeccl_now() >= deadline) return peer_lost(b, rc, next, doing);
    int dead = find_dead(b);
    if (dead >= 0) return dead_peer(b, dead, doing);
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
  WARN(BOOT, "rank %d: dropped a connection to its ring socket: %s (%zu of %zu bytes of rank %d's hello)",
       b->rank, why, c[i].got, sizeof(c[i].msg), (b->rank - 1 + b->nranks) % b->nranks);
  close(c[i].fd);
  c[i] = c[--*nc];
}

/* Takes a connection from the ring socket and sends it a challenge. */
static void cand_accept(moeccl_bootstrap_t* b, cand_t* c, int* nc) {
  int fd = accept4(b->listen_fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
  if (fd < 0) return; /* EAGAIN, ECONNABORTED, EINTR: poll again */
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
  if (moeccl_bootstrap_check_ring_hello(&c[i].msg, c[i].got, b->nonce, key, c[i].challenge,
                                        prev) == moecclSuccess)
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
static moecclResult_t ring_handshake(moeccl_bootstrap_t* b, const uint8_t key[32], double deadline) {
  int next = (b->rank + 1) % b->nranks, prev = (b->rank - 1 + b->nranks) % b->nranks;
  cand_t* c = malloc(sizeof(cand_t) * MAX_CANDIDATES);
  if (!c) return boot_fail(b, moecclSystemError, "bootstrap: out of memory forming the ring");
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
      rc = peer_lost(b, moecclTimeout, b->prev_fd < 0 ? prev : next, doing);
      break;
    }
    if (now >= check) {
      int dead = find_dead(b);
      if (dead >= 0) {
        rc = dead_peer(b, dead, doing);
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
      rc = boot_fail(b, moecclSystemError, "bootstrap: rank %d: poll failed while %s: %s",
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
        rc = peer_lost(b, moecclRemoteError, next, doing); /* closed or reset */
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
    MOECCL_CHECK(
        boot_xfer(b, b->next_fd, 1, d + (size_t)send_block * bytes, bytes, deadline, next, doing));
    MOECCL_CHECK(
        boot_xfer(b, b->prev_fd, 0, d + (size_t)recv_block * bytes, bytes, deadline, prev, doing));
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
