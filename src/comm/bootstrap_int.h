/*
 * What the bootstrap's files share, and no other file uses: bootstrap.c
 * (the unique id and the rendezvous at the root), bootstrap_ring.c (the
 * ring and its collectives), bootstrap_live.c (the waits that watch the
 * peers, the probes, the liveness socket), bootstrap_auth.c (the keys and
 * MACs).  Each calls only those after it in this list.
 */
#ifndef MOECCL_BOOTSTRAP_INT_H_
#define MOECCL_BOOTSTRAP_INT_H_

#include "base/sha256.h"
#include "comm/bootstrap.h"

#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>

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

/* The ring hello's magic; also the rendezvous hello's before it carried
 * the rank's wait (a root that reads it names the other version). */
#define HELLO_MAGIC 0x4d4f4548u
/* Seconds an accepted connection (at the root, or on a ring socket) has to
 * send its hello before it is dropped. */
#define HELLO_WAIT 5.0

/* A wait checks the peers' liveness after LIVENESS_EVERY seconds, then at
 * doubling intervals up to LIVENESS_MAX (bootstrap.h). */
#define LIVENESS_EVERY 0.1
#define LIVENESS_MAX 1.0

/* The MAC of a message of n bytes (its mac field excluded: it comes last)
 * answering challenge. */
static inline void hello_mac(const uint8_t key[32], const uint8_t* challenge, const void* msg,
                             size_t n, uint8_t out[32]) {
  uint8_t buf[CHALLENGE_BYTES + 64];
  memcpy(buf, challenge, CHALLENGE_BYTES);
  memcpy(buf + CHALLENGE_BYTES, msg, n);
  moeccl_hmac_sha256(key, 32, buf, CHALLENGE_BYTES + n, out);
}

static inline int same_mac(const uint8_t* a, const uint8_t* b) { /* constant time */
  uint8_t d = 0;
  for (int i = 0; i < 32; i++) d |= a[i] ^ b[i];
  return d == 0;
}

static inline int random_bytes(uint8_t* p, size_t n) {
  return getrandom(p, n, 0) == (ssize_t)n ? 0 : -1;
}

static inline ssize_t write_nosig(int fd, const void* p, size_t n) {
  return send(fd, p, n, MSG_NOSIGNAL | MSG_DONTWAIT);
}

/* ---- bootstrap_live.c ---------------------------------------------------- */

/* A peer known dead, or -1 (those on this host by /proc, a few remote ones
 * by their liveness sockets, round robin). */
int moeccl_boot_find_dead(moeccl_bootstrap_t* b);
/* Records b's failure (sticky) and returns it as the last error. */
moecclResult_t moeccl_boot_fail(moeccl_bootstrap_t* b, moecclResult_t rc, const char* fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* b failed because rank dead died while this rank was doing `doing`. */
moecclResult_t moeccl_boot_dead_peer(moeccl_bootstrap_t* b, int dead, const char* doing);
/* After a lost connection or a deadline: names the dead rank if there is
 * one, else says whom this rank lost while doing what. */
moecclResult_t moeccl_boot_peer_lost(moeccl_bootstrap_t* b, moecclResult_t rc, int peer,
                                     const char* doing);
/* Exactly len bytes to (send) or from a ring neighbour before deadline; a
 * peer's death anywhere ends the wait (and names it). */
moecclResult_t moeccl_boot_xfer(moeccl_bootstrap_t* b, int fd, int send, void* buf, size_t len,
                                double deadline, int peer, const char* doing);

#endif
