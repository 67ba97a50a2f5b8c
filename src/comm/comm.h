/* The communicator and the internal helpers every layer uses. */
#ifndef MOECCL_CORE_H_
#define MOECCL_CORE_H_

#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <sys/types.h>

#include "base/check.h"
#include "base/debug.h"
#include "base/host.h"
#include "base/result.h"
#include "kernels/mem.h"
#include "moeccl.h"
#include "base/socket.h"

#define MOECCL_COMM_MAGIC 0x6d6f6563636c436dULL /* "moecclCm" */
#define MOECCL_HOSTNAME_MAX 64

/* What every rank tells every other at init. */
typedef struct {
  int32_t rank;
  int32_t pid;
  uint64_t pid_start;    /* process start time, guards against pid reuse */
  uint64_t host_hash;    /* node identity (MOECCL_HOSTID or hostname + boot id) */
  uint64_t machine_hash; /* the machine (hostname + boot id), whatever MOECCL_HOSTID says */
  char hostname[MOECCL_HOSTNAME_MAX];
  moeccl_sockaddr_t listen_addr; /* bootstrap ring socket */
  moeccl_sockaddr_t alive_addr;  /* process liveness socket (bootstrap_live.c), port 0 if none */
  uint64_t cma_probe_addr;       /* address of a known word, to test CMA */
  uint64_t cpu_mask[16];         /* CPUs this process may run on (affinity), one bit each */
} moeccl_peer_info_t;

/* A reduction op made by moecclRedOpCreatePreMulSum: value moecclNumOps +
 * its index in comm->redops. */
typedef struct {
  int in_use;
  moecclDataType_t type;
  moecclScalarResidence_t residence;
  unsigned char scalar[8]; /* HostImmediate: the element, read at creation */
  const void* ptr;         /* Device: read when each operation is planned */
} moeccl_redop_t;

struct moeccl_bootstrap;
struct moeccl_transport_ops;
struct moeccl_req;
struct moeccl_plan_cache;
/* Transports one communicator may start: shared memory, one network
 * transport, the stream transports (transport.c: stream_transports[]), with
 * room to spare; below 0xff, which marks "none" in the peer tables. */
#define MOECCL_MAX_TRANSPORTS 4

#define MOECCL_SECRET_BYTES 16
/* The public tag of a secret: the first 8 bytes of SHA-256("moeccl-comm", secret). */
uint64_t moeccl_secret_tag(const uint8_t secret[MOECCL_SECRET_BYTES]);
/* A split communicator's secret from its parent's, the split's sequence
 * number and the new communicator's color (one-way: a child's name or tag
 * gives away neither its parent's nor a sibling's). */
void moeccl_secret_split(const uint8_t parent[MOECCL_SECRET_BYTES], uint64_t split_count,
                         int32_t color, uint8_t out[MOECCL_SECRET_BYTES]);

struct moecclComm {
  uint64_t magic;
  int rank, nranks;
  /* The unique id's 128-bit secret (a split's is derived from its parent's,
   * moeccl_secret_split): never logged, never in a name or on the wire
   * itself; what is public comes from it by one-way functions (sha256.h):
   * nonce, the communicator's tag in the bootstrap's messages and logs,
   * and the shared-memory segment's name (shm.c). */
  uint8_t secret[MOECCL_SECRET_BYTES];
  uint64_t nonce;
  char name[64];
  moeccl_peer_info_t* peers;
  int local_rank, nlocal;
  int nmachine; /* ranks on this machine (>= nlocal with MOECCL_HOSTID): they share its cores */
  int machine_cores;     /* CPUs those ranks may run on together (union of their affinity) */
  int* local_ranks;      /* comm ranks on this node, ascending */
  int* peer_local_index; /* comm rank -> local index or -1 */
  struct moeccl_bootstrap* boot;
  double timeout; /* seconds; MOECCL_TIMEOUT */
  int split_count;

  /* Transports: the ones started on this communicator (at most one per
   * role: shared memory, one network, the stream transports; transport.c
   * refuses more), and per memory kind (mem.h) and peer, which one moves
   * that kind to it (index into ops/state), 0xff none
   * (moeccl_peer_transport). */
  const struct moeccl_transport_ops* transport_ops[MOECCL_MAX_TRANSPORTS];
  void* transport_state[MOECCL_MAX_TRANSPORTS];
  int ntransports;
  uint8_t* peer_transport[MOECCL_MEM_NKINDS];
  /* Per peer, the stream transport (MOECCL_TRANSPORT_CAP_STREAM) that
   * lowers device schedules with it, 0xff none (moeccl_peer_stream_transport). */
  uint8_t* peer_stream_transport;

  moeccl_redop_t* redops; /* PreMulSum ops (moecclRedOpCreatePreMulSum) */
  int nredops;
  int a2a_window;             /* MOECCL_A2A_WINDOW */
  struct moeccl_topo* topo;   /* where the ranks sit, link costs (src/topo) */
  struct moeccl_tuner* tuner; /* the tuner's cache, scratch and forced choices (src/tune) */
  /* During moecclCommSplit only: the parent's topology and each new rank's
   * parent rank, so the child inherits placement, groups and costs. */
  const struct moeccl_topo* parent_topo;
  const int* parent_ranks;

  pthread_mutex_t lock; /* one operation at a time per communicator */
  /* Operations run in the order they were issued, whatever stream or thread
   * issued them: each takes a ticket at issue and runs when exec_ticket
   * reaches it.  pending counts issued operations not yet retired, so
   * destroy can wait for operations queued on host streams. */
  pthread_mutex_t order_lock;
  pthread_cond_t order_cond;
  uint64_t issue_ticket, exec_ticket;
  int pending;
  int order_waiters;     /* threads in a wait on order_cond: retire wakes only if some */
  volatile int aborting; /* moecclCommAbort: queued and running work stops */
  /* The planner's schedules and what it keeps between calls (src/plan). */
  struct moeccl_plan_cache* plan;
  struct moeccl_xreq* reqs; /* the executor's requests (exec/executor_int.h) */
  int reqs_cap;
  void* scratch;
  size_t scratch_bytes;
  void* dev_scratch; /* scratch of calls on device buffers (device memory) */
  size_t dev_scratch_bytes;
  void** dev_scratch_old; /* outgrown by lowered calls, freed at destroy */
  int ndev_scratch_old;
  void* staging; /* reducing receives from transports that cannot reduce */
  size_t staging_bytes;
  void* dev_staging; /* the same for receives into device memory (device memory) */
  size_t dev_staging_bytes;
  struct moeccl_term_ring* terms; /* lowered calls' row programs' pinned memory (exec/terms.c) */

  volatile moecclResult_t async_error; /* sticky: set when the comm broke */
  char last_error[512];
  char fail_text[512];   /* why async_error was set */
  int failed_peer;       /* comm rank whose loss broke the communicator, or -1 */
  int abort_notified;    /* the transports were told about failed_peer */
  unsigned probe_cursor; /* rotates the liveness probes over pending peers */
};
typedef struct moecclComm moeccl_comm_t;

/* Records err's text as comm's (or this thread's, comm NULL) last error and
 * logs it at WARN; returns err so callers can `return moeccl_error(...)`. */
moecclResult_t moeccl_error(moeccl_comm_t* comm, moecclResult_t err, const char* fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Marks comm broken with err (first one wins) and records the text. */
/* The set of live communicators (error.c): made ones are registered, and
 * unregistered before they are freed, so a stale handle is recognised
 * without reading freed memory. */
void moeccl_comm_register(moeccl_comm_t* c);
void moeccl_comm_unregister(moeccl_comm_t* c);
int moeccl_comm_live(const moeccl_comm_t* c);
moecclResult_t moeccl_comm_fail(moeccl_comm_t* comm, moecclResult_t err, const char* fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Like moeccl_comm_fail, for the loss of peer `rank` (dead, unreachable, or
 * reported dead by another rank): records it so that the executor tells the
 * peers of every transport once (moeccl_transports_notify_abort). */
moecclResult_t moeccl_comm_peer_lost(moeccl_comm_t* comm, int rank, const char* fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* The recording half of moeccl_comm_peer_lost (error.c): rank is the cause. */
moecclResult_t moeccl_comm_vfail_peer(moeccl_comm_t* comm, int rank, const char* fmt, va_list ap);
/* moecclSuccess, or an argument error with text, for a NULL/freed comm. */
moecclResult_t moeccl_comm_check(moeccl_comm_t* comm, const char* argname);

/* moecclMemAlloc memory (lookup, extent): comm/memreg.h. */
#include "comm/memreg.h"

/* Issue order (enqueue.c).  issue takes n consecutive tickets and returns
 * the first; wait_turn blocks until ticket is next; retire ends n. */
uint64_t moeccl_comm_issue(moeccl_comm_t* comm, int n);
void moeccl_comm_wait_turn(moeccl_comm_t* comm, uint64_t ticket);
/* issue(comm, 1) and wait_turn for it, in one critical section (a call run
 * at once, on the caller's thread). */
void moeccl_comm_issue_wait(moeccl_comm_t* comm);
void moeccl_comm_retire(moeccl_comm_t* comm, int n);
/* Waits until every issued operation of comm has retired. */
void moeccl_comm_drain(moeccl_comm_t* comm);

/* Why the device backend MOECCL_DEVICE names explicitly (cuda) cannot run
 * here, or NULL (device/device.c; asking picks the backend). */
const char* moeccl_device_refusal(void);

/* The peer table read (comm/peers.c).  CPUs the ranks on rank's machine
 * may use together: the union of their masks (ranks bound to one core each
 * still have the machine's cores). */
int moeccl_machine_cores(const moeccl_comm_t* comm, int rank);
/* Builds local_ranks etc. from peers[]. */
moecclResult_t moeccl_comm_setup_node(moeccl_comm_t* comm);
/* Chooses and initialises transports for every peer (collective). */
moecclResult_t moeccl_transports_init(moeccl_comm_t* comm);
void moeccl_transports_fini(moeccl_comm_t* comm);
/* Tells every transport's peers that comm rank culprit is lost (once). */
void moeccl_transports_notify_abort(moeccl_comm_t* comm, int culprit);

#endif
