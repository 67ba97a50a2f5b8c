/*
 * test_boot_reply.c - a joining rank believes only a root that proves the
 * unique id's secret.  A fake root listens on a port of its own, and an id
 * with a fresh secret names it: the fake plays a process that took the
 * root's address but never saw the id.  It speaks the wire format as the
 * real root does (a challenge; then the hello and peer info; then a status
 * word, the table when one follows, and the MAC) and may read the rank's
 * challenge from the hello, but signs with a key of its own.  Each such
 * answer must be refused by moeccl_bootstrap_init with moecclRemoteError
 * and a text saying the rendezvous gave no proof: a whole table (believed,
 * it would send the rank to addresses of the fake's choosing), "rank 5
 * never joined", "the ranks disagree", and an answer signed with the right
 * key over another connection's challenge (a replay).  The same fake
 * signing with the right key over this connection's challenge is believed
 * (so the refusals are the MAC's, not the format's), and so is the real
 * root (moeccl_bootstrap_unique_id).
 *
 * The hello says how long its rank still waits for the answer (its wait,
 * under the MAC, which the fake checks with the id's key), and the root
 * answers before then: a rank of 2 that waits 2 s at a real root that
 * would wait 20 (MOECCL_TIMEOUT) learns within those 2 s that rank 1
 * never joined, not only that it could not join.  A hello of the older
 * format (its magic, no wait) is told apart from a forged one.
 *
 * Also the liveness probes the waits use (moeccl_bootstrap_probe_many):
 * several sockets probed at once, each state in its own slot: a listening
 * socket is alive (1), a port nobody listens on refuses (0), in any mix
 * and order, and the single probe agrees.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "comm/bootstrap.h"
#include "comm/comm.h"
#include "unit_check.h"

/* The hello's wire format (bootstrap.c): magic, rank, nranks, the rank's
 * wait in ms, tag (8), the rank's challenge (16), MAC (32); then the peer
 * info. */
#define HELLO_BYTES 72
#define HELLO_CHALLENGE 24
#define OLD_HELLO_MAGIC 0x4d4f4548u /* before the wait */
#define CH MOECCL_BOOT_CHALLENGE_BYTES

enum sign { WRONG_KEY, REPLAY, RIGHT };

typedef struct {
  int listen_fd;
  int32_t status; /* what the fake answers; 1 (= nranks): the table follows */
  enum sign sign;
  uint8_t key[32]; /* the id's key (REPLAY, RIGHT) */
  uint8_t secret[MOECCL_SECRET_BYTES];
  int served;              /* 1 once the fake read a whole hello and answered */
  moecclResult_t hello_rc; /* the hello checked with the id's key */
  double wait;             /* the wait it says */
} fake_t;

static void* fake_root(void* arg) {
  fake_t* f = arg;
  int fd;
  if (moeccl_socket_accept(f->listen_fd, moeccl_now() + 20.0, &fd) != moecclSuccess) return NULL;
  double deadline = moeccl_now() + 20.0;
  uint8_t challenge[CH] = {1, 2, 3}, hello[HELLO_BYTES], mac[32];
  moeccl_peer_info_t info;
  if (moeccl_socket_send(fd, challenge, CH, deadline) == moecclSuccess &&
      moeccl_socket_recv(fd, hello, sizeof(hello), deadline) == moecclSuccess &&
      moeccl_socket_recv(fd, &info, sizeof(info), deadline) == moecclSuccess) {
    int rank, nranks;
    f->hello_rc = moeccl_bootstrap_check_hello(hello, sizeof(hello), moeccl_secret_tag(f->secret),
                                               f->key, challenge, &rank, &nranks, &f->wait);
    uint8_t key[32], other[CH];
    const uint8_t* theirs = hello + HELLO_CHALLENGE;
    memcpy(key, f->key, sizeof(key));
    if (f->sign == WRONG_KEY) memset(key, 0x77, sizeof(key)); /* the fake's own key */
    if (f->sign == REPLAY) {                                  /* another connection's challenge */
      memcpy(other, theirs, CH);
      other[0] ^= 1;
      theirs = other;
    }
    size_t table = f->status == 1 ? sizeof(info) : 0;
    moeccl_bootstrap_reply_mac(key, theirs, f->status, &info, table, mac);
    if (moeccl_socket_send(fd, &f->status, sizeof(f->status), deadline) == moecclSuccess &&
        (!table || moeccl_socket_send(fd, &info, table, deadline) == moecclSuccess) &&
        moeccl_socket_send(fd, mac, sizeof(mac), deadline) == moecclSuccess)
      f->served = 1;
  }
  /* Wait for the rank to close: the answer must be read whatever comes. */
  char c;
  while (recv(fd, &c, 1, 0) > 0) {
  }
  close(fd);
  return NULL;
}

/* Joins as rank 0 of 1 through a fake root answering status signed so;
 * returns init's result and, in text, the last error. */
static moecclResult_t join_fake(int32_t status, enum sign sign, char* text, size_t len) {
  fake_t f = {.status = status, .sign = sign, .hello_rc = moecclInternalError};
  moeccl_sockaddr_t addr;
  CHECK(moeccl_sockaddr_parse("127.0.0.1:0", &addr) == moecclSuccess, "parse");
  CHECK(moeccl_socket_listen(&addr, &f.listen_fd) == moecclSuccess, "listen");
  uint8_t secret[MOECCL_SECRET_BYTES];
  for (int i = 0; i < MOECCL_SECRET_BYTES; i++) secret[i] = (uint8_t)(rand() & 0xff);
  moeccl_bootstrap_auth_key(secret, f.key);
  memcpy(f.secret, secret, sizeof(secret));
  moecclUniqueId id;
  moeccl_bootstrap_id_encode(secret, &addr, &id);
  pthread_t t;
  CHECK(pthread_create(&t, NULL, fake_root, &f) == 0, "fake root thread");
  moeccl_peer_info_t self, peers[1];
  memset(&self, 0, sizeof(self));
  memset(peers, 0, sizeof(peers));
  moeccl_bootstrap_t* b = NULL;
  moecclResult_t rc = moeccl_bootstrap_init(&id, 0, 1, 20.0, &self, peers, &b);
  snprintf(text, len, "%s", moecclGetLastError(NULL));
  pthread_join(t, NULL);
  close(f.listen_fd);
  CHECK(f.served, "status %d: the fake root did not get to answer", (int)status);
  CHECK(f.hello_rc == moecclSuccess, "the rank's hello did not pass the check: %d", f.hello_rc);
  CHECK(f.wait > 19.0 && f.wait <= 20.0, "the hello says the rank waits %.3f s of its 20", f.wait);
  if (rc == moecclSuccess) {
    CHECK(b != NULL, "no bootstrap handle");
    CHECK(peers[0].listen_addr.sin.sin_port == self.listen_addr.sin.sin_port,
          "the believed table is not the one the fake echoed");
    moeccl_bootstrap_close(b);
  }
  return rc;
}

static void refused(int32_t status, enum sign sign, const char* what) {
  char text[512];
  moecclResult_t rc = join_fake(status, sign, text, sizeof(text));
  CHECK(rc == moecclRemoteError, "%s: result %d, want moecclRemoteError (%s)", what, rc, text);
  CHECK(strstr(text, "without proof of this unique id's secret") != NULL,
        "%s: the error does not say the answer had no proof: %s", what, text);
  CHECK(strstr(text, "never joined") == NULL && strstr(text, "disagree") == NULL,
        "%s: the error repeats what the forged answer said: %s", what, text);
}

/* A port that was just free: bound, then closed, so a connect is refused. */
static moeccl_sockaddr_t closed_port(void) {
  moeccl_sockaddr_t a;
  int fd;
  moeccl_sockaddr_parse("127.0.0.1:0", &a);
  if (moeccl_socket_listen(&a, &fd) == moecclSuccess) close(fd);
  return a;
}

static void probes(void) {
  moeccl_sockaddr_t live[2], dead[2];
  int fds[2];
  for (int i = 0; i < 2; i++) {
    moeccl_sockaddr_parse("127.0.0.1:0", &live[i]);
    CHECK(moeccl_socket_listen(&live[i], &fds[i]) == moecclSuccess, "listen");
    dead[i] = closed_port();
  }
  const moeccl_sockaddr_t* addrs[5] = {&dead[0], &live[0], &live[1], &dead[1], &live[0]};
  int want[5] = {0, 1, 1, 0, 1}, got[5] = {7, 7, 7, 7, 7};
  moeccl_bootstrap_probe_many(addrs, 5, 1000, got);
  for (int i = 0; i < 5; i++) {
    CHECK(got[i] == want[i], "probe %d of 5: state %d, want %d", i, got[i], want[i]);
    CHECK(moeccl_bootstrap_probe(addrs[i], 1000) == want[i], "single probe %d disagrees", i);
  }
  moeccl_bootstrap_probe_many(addrs, 0, 1000, got); /* nothing to probe: returns */
  for (int i = 0; i < 2; i++) close(fds[i]);
}

/* The hello of a moeccl before the wait: its own result, whatever follows
 * (a root logs the other version instead of a forgery). */
static void old_hello(void) {
  uint8_t secret[MOECCL_SECRET_BYTES] = {1}, key[32], ch[CH] = {2}, hello[HELLO_BYTES] = {0};
  moeccl_bootstrap_auth_key(secret, key);
  uint32_t magic = OLD_HELLO_MAGIC;
  int32_t one = 1;
  uint64_t tag = moeccl_secret_tag(secret);
  memcpy(hello, &magic, 4), memcpy(hello + 8, &one, 4), memcpy(hello + 16, &tag, 8);
  int rank = -7, nranks = -7;
  double wait = -7;
  moecclResult_t rc =
      moeccl_bootstrap_check_hello(hello, sizeof(hello), tag, key, ch, &rank, &nranks, &wait);
  CHECK(rc == moecclInvalidUsage, "an older moeccl's hello: %d, want moecclInvalidUsage", rc);
  CHECK(rank == -7 && nranks == -7 && wait == -7, "an older moeccl's hello wrote its fields");
}

int main(void) {
  setenv("MOECCL_TIMEOUT", "20", 1);
  srand((unsigned)getpid());
  refused(1, WRONG_KEY, "a table signed with another key");
  refused(-2 - 5, WRONG_KEY, "'rank 5 is missing' signed with another key");
  refused(-1, WRONG_KEY, "'the ranks disagree' signed with another key");
  refused(1, REPLAY, "a table signed over another challenge");

  char text[512];
  moecclResult_t rc = join_fake(1, RIGHT, text, sizeof(text));
  CHECK(rc == moecclSuccess, "the fake signing with the id's key was refused: %d (%s)", rc, text);
  rc = join_fake(-2 - 5, RIGHT, text, sizeof(text));
  CHECK(rc == moecclTimeout && strstr(text, "rank 5 never joined") != NULL,
        "a signed 'rank 5 is missing': %d (%s)", rc, text);

  /* The real root. */
  moecclUniqueId id;
  CHECK(moeccl_bootstrap_unique_id(&id) == moecclSuccess, "unique id");
  moeccl_peer_info_t self, peers[1];
  memset(&self, 0, sizeof(self));
  moeccl_bootstrap_t* b = NULL;
  rc = moeccl_bootstrap_init(&id, 0, 1, 20.0, &self, peers, &b);
  CHECK(rc == moecclSuccess, "the real root was not believed: %d (%s)", rc,
        moecclGetLastError(NULL));
  if (b) moeccl_bootstrap_close(b);

  /* A real root that would wait 20 s answers a rank that waits 2 s
   * before it gives up, naming the rank that never came. */
  CHECK(moeccl_bootstrap_unique_id(&id) == moecclSuccess, "unique id");
  moeccl_peer_info_t peers2[2];
  memset(&self, 0, sizeof(self));
  double t0 = moeccl_now();
  rc = moeccl_bootstrap_init(&id, 0, 2, 2.0, &self, peers2, &b);
  double took = moeccl_now() - t0;
  snprintf(text, sizeof(text), "%s", moecclGetLastError(NULL));
  CHECK(rc == moecclTimeout && strstr(text, "rank 1 never joined") != NULL,
        "rank 0 of 2 alone, waiting 2 s at a root of 20 s: %d (%s)", rc, text);
  CHECK(took < 2.0, "the root answered after %.2f s, past the rank's 2 s", took);

  old_hello();
  probes();

  if (failures) fprintf(stderr, "test_boot_reply: %d failures\n", failures);
  else printf("test_boot_reply: ok\n");
  return failures ? 1 : 0;
}
