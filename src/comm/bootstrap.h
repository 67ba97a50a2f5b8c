/*
 * Bootstrap: how ranks find each other.  The unique id carries the root's
 * socket address; the process that made the id runs a rendezvous thread there
 * that gathers every rank's moeccl_peer_info_t and sends back the table.  Then
 * the ranks form a TCP ring (each connects to rank+1) used for the small
 * collectives of setup: allgather and barrier.  Every wait has a deadline,
 * and while it waits a rank checks that its peers live (after 0.1 s, then
 * at doubling intervals up to 1 s)
 * (/proc for a peer on its host, the liveness socket for others): a rank
 * that dies during setup fails the others within a fraction of a second,
 * with its name, instead of at MOECCL_TIMEOUT.
 */
#ifndef MOECCL_BOOTSTRAP_H_
#define MOECCL_BOOTSTRAP_H_

#include "comm/comm.h"

typedef struct moeccl_bootstrap {
  int rank, nranks;
  uint64_t nonce;
  int listen_fd, next_fd, prev_fd;
  double timeout;
  /* The table (the communicator's), to tell a dead peer from a slow one. */
  const moeccl_peer_info_t* peers;
  int scan_next; /* next peer whose liveness socket a wait probes */
  /* Sticky: once an exchange failed, every later one fails the same way. */
  moecclResult_t failed;
  char fail_text[256];
  int dead; /* the rank that failure found dead; -1 when none was named */
} moeccl_bootstrap_t;

/* The rank a failed exchange of b found dead, or -1 (also for b NULL). */
int moeccl_bootstrap_dead(const moeccl_bootstrap_t* b);

/* Fills id with a fresh 128-bit secret (getrandom) and the root address and
 * starts the rendezvous thread (MOECCL_COMM_ID fixes the address). */
moecclResult_t moeccl_bootstrap_unique_id(moecclUniqueId* id);
/* Decodes the secret of a valid id; moecclInvalidArgument if it is not one. */
moecclResult_t moeccl_bootstrap_id_secret(const moecclUniqueId* id,
                                          uint8_t secret[MOECCL_SECRET_BYTES]);
/* The id's layout: moeccl_bootstrap_unique_id encodes the secret and root
 * address it made; decode gives both back from a valid id (root may be
 * NULL), moecclInvalidArgument from anything else. */
void moeccl_bootstrap_id_encode(const uint8_t secret[MOECCL_SECRET_BYTES],
                                const moeccl_sockaddr_t* root, moecclUniqueId* id);
moecclResult_t moeccl_bootstrap_id_decode(const moecclUniqueId* id,
                                          uint8_t secret[MOECCL_SECRET_BYTES],
                                          moeccl_sockaddr_t* root);
/* Joins the rendezvous of id; fills peers[nranks] (self's entry filled by the
 * caller except listen_addr) and returns the connected ring. */
moecclResult_t moeccl_bootstrap_init(const moecclUniqueId* id, int rank, int nranks, double timeout,
                                     moeccl_peer_info_t* self, moeccl_peer_info_t* peers,
                                     moeccl_bootstrap_t** out);
/* Opens the listening socket a rank will use in a new (split) communicator;
 * its address goes into the parent's allgather. */
moecclResult_t moeccl_bootstrap_listen(moeccl_sockaddr_t* addr, int* fd);
/* Forms the ring of a communicator whose table is already known, every
 * connection authenticated by the communicator's secret. */
moecclResult_t moeccl_bootstrap_ring(const uint8_t secret[MOECCL_SECRET_BYTES], int rank,
                                     int nranks, double timeout, int listen_fd,
                                     const moeccl_peer_info_t* peers, moeccl_bootstrap_t** out);
/* Every rank contributes bytes at data + rank*bytes; afterwards all hold all. */
moecclResult_t moeccl_bootstrap_allgather(moeccl_bootstrap_t* b, void* data, size_t bytes);
moecclResult_t moeccl_bootstrap_barrier(moeccl_bootstrap_t* b);
/* moecclSuccess, or the error that broke b (its text recorded again as the
 * last error, so a caller's own wrapping does not hide which rank died). */
moecclResult_t moeccl_bootstrap_error(const moeccl_bootstrap_t* b);
void moeccl_bootstrap_close(moeccl_bootstrap_t* b);

/* The checks of what the bootstrap receives, apart from its sockets, so
 * that tests/fuzz can feed them any bytes.  msg: the len bytes received so
 * far (moecclInProgress while short of a whole message); key:
 * moeccl_bootstrap_auth_key of the communicator's secret; challenge: the
 * MOECCL_BOOT_CHALLENGE_BYTES this side sent on the connection. */
#define MOECCL_BOOT_CHALLENGE_BYTES 16
void moeccl_bootstrap_auth_key(const uint8_t secret[MOECCL_SECRET_BYTES], uint8_t key[32]);
/* The root's check of a joining rank's hello (the peer info after it is
 * not looked at): moecclSuccess and the rank and nranks it claims and the
 * seconds it says it still waits for the root's answer (wait) when it is
 * of this rendezvous (nonce), answers challenge with key and claims a rank
 * in [0, nranks); moecclInvalidUsage, writing nothing, for the hello of an
 * older moeccl (its magic; nothing else checked: for the log's text only);
 * moecclInvalidArgument otherwise. */
moecclResult_t moeccl_bootstrap_check_hello(const void* msg, size_t len, uint64_t nonce,
                                            const uint8_t key[32], const uint8_t* challenge,
                                            int* rank, int* nranks, double* wait);
/* A rank's check of the hello on its ring socket: moecclSuccess when it is
 * of this communicator, answers challenge and comes from rank prev. */
moecclResult_t moeccl_bootstrap_check_ring_hello(const void* msg, size_t len, uint64_t nonce,
                                                 const uint8_t key[32], const uint8_t* challenge,
                                                 int prev);
/* The MAC that ends the root's answer to a joining rank: HMAC-SHA-256
 * under key of a label, the challenge the rank sent in its hello, the
 * status word and the SHA-256 of the table_bytes of peer table sent
 * (0 when none follows the status). */
void moeccl_bootstrap_reply_mac(const uint8_t key[32], const uint8_t* challenge, int32_t status,
                                const void* table, size_t table_bytes, uint8_t out[32]);
/* A joining rank's reading of the root's status word: moecclSuccess when
 * the table of nranks peers follows; moecclRemoteError and *missing when
 * the rendezvous timed out without rank *missing; moecclInvalidUsage when
 * the ranks disagreed (nranks, or a rank claimed twice). */
moecclResult_t moeccl_bootstrap_check_status(const void* msg, size_t len, int nranks, int* missing);

/* Every process that joins a communicator opens one listening socket that it
 * never closes, on the address that reached the root (the first one it
 * joins): its liveness socket.  A refused connection to it means the process
 * is gone, whatever its communicators did.  Fills *addr (port 0 on failure). */
void moeccl_bootstrap_alive_socket(const moeccl_sockaddr_t* local, moeccl_sockaddr_t* addr);
/* Probes a peer's liveness socket, waiting at most timeout_ms.  Returns 1
 * alive, 0 dead, -1 unknown (no answer, e.g. a cut link). */
int moeccl_bootstrap_probe(const moeccl_sockaddr_t* addr, int timeout_ms);
/* Probes n liveness sockets at once, all within one timeout_ms: states[i]
 * as moeccl_bootstrap_probe's result for addrs[i] (-1, unknown, for those
 * past the first MOECCL_PROBE_MAX, which are not probed). */
#define MOECCL_PROBE_MAX 64
void moeccl_bootstrap_probe_many(const moeccl_sockaddr_t* const* addrs, int n, int timeout_ms,
                                 int* states);
/* Accepts and closes the probes peers left on this process's liveness socket. */
void moeccl_bootstrap_drain(void);

#endif
