/*
 * The transport contract.  A transport moves the bytes of SEND and RECV ops
 * between this rank and the peers it reaches; the executor drives it through
 * this table and never knows which one it drives.  Transports live in a
 * priority-ordered array (transport.c); for each peer the first one that can
 * reach it wins, unless the environment vetoes it.
 *
 * Matching: messages between one sender and one receiver on a communicator
 * match in the order they were posted on each side.  A message shorter than
 * the receive completes it; a longer one is an error (truncation).  A
 * reducing receive (req->red) must get exactly its length: anything else is
 * an error, since the bytes past a short message would stay unreduced.
 */
#ifndef MOECCL_TRANSPORT_H_
#define MOECCL_TRANSPORT_H_

#include "comm/comm.h"
#include "topo/topo.h"

typedef enum { MOECCL_REQ_SEND = 0, MOECCL_REQ_RECV = 1 } moeccl_req_type_t;

struct moeccl_red;

/* One posted send or receive.  Owned by the executor; the transport links it
 * into its queues between post() and completion and must not touch it after
 * setting done. */
typedef struct moeccl_req {
  int type; /* moeccl_req_type_t */
  int peer; /* comm rank */
  void* buf;
  moeccl_mem_t mem; /* where buf lives; the transport was chosen for it */
  size_t bytes;
  volatile int done;
  int stream_copy; /* copy into buf with streaming stores (executor's choice) */
  /* A receive that reduces (MOECCL_OP_RECV_REDUCE), posted only to a
   * transport with MOECCL_TRANSPORT_CAP_REDUCE: buf = operand (+) message,
   * with moeccl_reduce(red, ..., red_flags) over whole elements (operand
   * may equal buf).  red is NULL for a plain receive. */
  const struct moeccl_red* red;
  const void* operand;
  unsigned red_flags;
  /* executor's: a reducing receive staged for a transport without the
   * capability, or of device memory (buf is staging memory, red is NULL;
   * reduce by stage_red into stage_dst when done; the message must be
   * stage_bytes long) */
  void* stage_dst;
  size_t stage_bytes;
  const struct moeccl_red* stage_red;
  /* A receive consumed by a row program (MOECCL_OPF_ROWS): the message
   * must be exactly bytes long.  A transport with MOECCL_TRANSPORT_CAP_ROWS
   * may run moeccl_rows_run(rows, rows_dst, <the message>, rows_aux)
   * instead of writing buf, and then sets consumed; otherwise the executor
   * runs it from buf once the receive is done. */
  const struct moeccl_rows* rows;
  void* rows_dst;
  const void* rows_aux;
  int consumed;
  /* the program writes or reads device memory: no transport runs it (host
   * code); the message lands in buf and the executor runs it */
  int rows_device;
  /* An adding program (MOECCL_ROWS_ADD) runs after the one of the step's
   * previous adding receive, rows_after (NULL for the first), so that sums
   * come out the same run to run: a transport consumes such a receive in
   * place only once moeccl_req_rows_turn() says so, and otherwise waits or
   * writes buf (the executor then runs the programs in op order). */
  const struct moeccl_req* rows_after;
  /* A gathered send (MOECCL_OPF_ROWS, can_gather said yes): buf is the
   * sender's whole buffer of gather_span bytes; bytes is the message the
   * receiver's program reads, gathered by rows->map there. */
  size_t gather_span;
  /* A receive whose message is exactly bytes long when the ranks' calls
   * agree (every collective's schedule; not moecclRecv, which takes a
   * shorter message): a transport may act on the size before the message
   * arrives, and may fail a call whose ranks disagree. */
  int exact;
  struct moeccl_req* next; /* transport's queue link */
  size_t progress;         /* transport's: bytes moved so far */
  uint64_t seq;            /* transport's: message sequence number */
  uint64_t aux;            /* transport's */
} moeccl_req_t;

/* Whether r's program may run now: the previous adding receive of its step
 * has run its program (consumed in place, or by the executor). */
static inline int moeccl_req_rows_turn(const moeccl_req_t* r) {
  const moeccl_req_t* a = r->rows_after;
  return !a || !a->rows || a->consumed;
}

/* Capabilities a transport reports (ops->caps). */
enum {
  /* Receives can reduce as the bytes arrive (req->red), straight out of the
   * peer's memory or a slot, with no staging copy.  Without it the executor
   * receives into staging memory and reduces when the receive completes. */
  MOECCL_TRANSPORT_CAP_REDUCE = 1,
  /* Receives with a row program (req->rows) can run it straight out of the
   * peer's memory (shm: a mapped moecclMemAlloc region). */
  MOECCL_TRANSPORT_CAP_ROWS = 2,
  /* A network transport: it reaches other nodes (selection tries it after
   * shared memory, in order of score), its peers are probed through their
   * liveness sockets while a rank waits on them, and its link costs price
   * the links between nodes. */
  MOECCL_TRANSPORT_CAP_NETWORK = 4,
  /* A stream transport: it moves device memory by lowering a schedule onto
   * a device stream (lower_begin, lower_step) rather than by requests the
   * host progresses; selection gives it the (peer, device memory) pairs it
   * reaches in comm->peer_stream_transport, and calls whose schedules it
   * can lower go through it (moeccl_executor_lower). */
  MOECCL_TRANSPORT_CAP_STREAM = 8
};

/* Memory a transport moves (ops->mem_types): bits of the kinds (mem.h). */
enum {
  MOECCL_MEM_TYPE_HOST = 1u << MOECCL_MEM_HOST,
  MOECCL_MEM_TYPE_DEVICE = 1u << MOECCL_MEM_DEVICE
};

/* The transport that moves memory of kind m to peer, or -1 when none does. */
static inline int moeccl_peer_transport(const moeccl_comm_t* c, int peer, moeccl_mem_t m) {
  int t = m.kind < MOECCL_MEM_NKINDS && c->peer_transport[m.kind] ? c->peer_transport[m.kind][peer]
                                                                  : 0xff;
  return t == 0xff ? -1 : t;
}

/* The stream transport that lowers device schedules with peer, or -1. */
static inline int moeccl_peer_stream_transport(const moeccl_comm_t* c, int peer) {
  int t = c->peer_stream_transport ? c->peer_stream_transport[peer] : 0xff;
  return t == 0xff ? -1 : t;
}

/* link.rndv_bytes values that stand for a variable's current value. */
#define MOECCL_LINK_RNDV_NET_EAGER (-1.0) /* MOECCL_NET_EAGER_SIZE */
#define MOECCL_LINK_RNDV_SHM_SLOT (-2.0)  /* the shm slot size (MOECCL_SHM_EAGER_SIZE) */

typedef struct moeccl_transport_ops {
  const char* name;
  unsigned caps;      /* MOECCL_TRANSPORT_CAP_* */
  unsigned mem_types; /* MOECCL_MEM_TYPE_* it can move */
  /* The default costs of the links it carries, for the tuner's model
   * (topo.h: latency, per-message overhead, GB/s per rank under all-to-all
   * load, rendezvous threshold or a MOECCL_LINK_RNDV_* value); a tune or
   * topology file overrides them. */
  moeccl_link_t link;
  /* Network transports only (NULL for shm): how well this transport would do
   * here, from local facts alone (its providers or devices), without talking
   * to peers: 0 cannot run, 1 sockets only, 2 a kernel-bypass fabric.
   * MOECCL_NET=auto tries network transports in order of the ranks' summed
   * scores, so every rank tries them in the same order. */
  int (*score)(void);
  /* Whether this transport can reach peer, from the peer table alone.  Must
   * give the same answer on both ranks of a pair.  Called before init. */
  int (*can_reach)(const moeccl_comm_t* comm, int peer);
  /* Collective: every rank calls it, in the same order, with the same
   * `needed` (some rank of the communicator uses this transport).  Sets up
   * what the peers marked in use[] (nranks entries, 1 = this transport)
   * need; exchanges addresses with moeccl_bootstrap_allgather(comm->boot).
   * When needed is 0 it must return at once with *state NULL and talk to no
   * one.  A rank that fails locally still makes the same bootstrap calls as
   * the others (contributing a failure mark), then returns its error: the
   * selection in transport.c agrees on the outcome and may fall back to the
   * next transport on every rank. */
  moecclResult_t (*init)(moeccl_comm_t* comm, const uint8_t* use, int needed, void** state);
  /* Optional (NULL: no): whether a send to peer may hand over the whole
   * buffer [buf, buf + bytes) for the receiver to pick rows from
   * (req->gather_span); the receiver then needs a gathered message's
   * program (rows->terms_idx) or reads the rows by rows->map. */
  int (*can_gather)(void* state, int peer, const void* buf, size_t bytes);
  /* Queues req; never blocks.  Errors here are local (no resources). */
  moecclResult_t (*post)(void* state, moeccl_req_t* req);
  /* Optional (NULL: none): moves a plain send (send 1) or receive of host
   * memory at once when it can, with no request: sets *done, else leaves
   * it 0 and the executor posts a request as usual.  The channel's order
   * must hold (nothing queued for the peer in that direction).  Errors as
   * post's, or a receive's message longer than bytes. */
  moecclResult_t (*post_now)(void* state, int peer, int send, void* buf, size_t bytes, int* done);
  /* Optional (NULL: none): tells peers that wait (asleep) about what
   * post_now moved since the last call, so that a transport may wake each
   * peer once per step rather than once per message.  The executor calls it
   * after posting a step, for every transport whose post_now moved
   * anything, before the step's local work; progress() does the same for
   * what it moves.  Never blocks. */
  void (*flush)(void* state);
  /* Moves whatever can move without waiting; may copy up to one chunk per
   * request.  Sets req->done on completion and *progressed when anything
   * moved.  A failure (dead or aborted peer, truncation) marks the
   * communicator failed through moeccl_comm_fail, naming the peer. */
  moecclResult_t (*progress)(void* state, int* progressed);
  /* Remembers what the transport has seen, before a progress() pass that may
   * find nothing; wait() then sleeps only if nothing changed since. */
  void (*arm)(void* state);
  /* Sleeps until a peer may have made progress for us, or timeout_us passed.
   * May return early.  Called only when this transport alone has pending
   * requests. */
  void (*wait)(void* state, int64_t timeout_us);
  /* Checks that the peers this rank waits on through this transport are
   * alive; a dead one fails the communicator (naming it). */
  moecclResult_t (*check_peers)(void* state);
  /* The communicator failed because comm rank `culprit` died: tell every
   * peer this transport reaches, best effort and without blocking, so that
   * ranks waiting on others stop too and name the culprit. */
  void (*notify_abort)(void* state, int culprit);
  /* Drops every queued request (after a failure); the buffers are the
   * caller's again once it returns. */
  void (*cancel_all)(void* state);
  /* Local: frees the state.  Never waits on peers (a stream transport may
   * wait, up to the communicator's timeout, for its own streams' queued
   * work with them to have passed, before it unmaps what that work uses). */
  void (*fini)(void* state);
  /* Stream transports only (MOECCL_TRANSPORT_CAP_STREAM; NULL elsewhere).
   * A schedule whose buffers are all device memory is lowered onto a device
   * stream in two calls:
   *   lower_begin: on the host, before anything is queued: hands this
   *     rank's SEND ops of the whole schedule to their peers and matches its
   *     RECV ops with the peers' sends (in posting order per pair), mapping
   *     the memory they name (once per allocation, cached).  It may wait,
   *     up to the communicator's timeout and watching the peers' processes,
   *     for peers to have made their side of the call (their hosts), never
   *     for a device.  On failure nothing was queued.
   *   lower_step: queues step `step`'s messages on stream (NULL: the legacy
   *     default stream), phase 0 before the step's local ops (its sends
   *     marked ready, waits for its senders, the copies), phase 1 after them
   *     (its receives marked read, waits for the readers of its sends): once
   *     the stream passes phase 1 every receive of the step holds its
   *     message and every buffer the step sent from may be written.
   * Never blocks on the device; the stream does the waiting. */
  moecclResult_t (*lower_begin)(void* state, const moeccl_sched_t* s);
  moecclResult_t (*lower_step)(void* state, const moeccl_sched_t* s, int step, int phase,
                               void* stream);
} moeccl_transport_ops_t;

extern const moeccl_transport_ops_t moeccl_shm_ops;
/* Device memory between the ranks of one node, stream-ordered (ipc.c). */
extern const moeccl_transport_ops_t moeccl_ipc_ops;
/* What the ipc transport did on this rank since the communicator was made:
 * the structure of its calls, counted (docs/ARCHITECTURE.md). */
typedef struct {
  uint64_t calls;         /* schedules lowered */
  uint64_t fds_sent;      /* allocations handed over as file descriptors */
  uint64_t handles_sent;  /* allocations handed over as legacy IPC handles */
  uint64_t imports;       /* peers' allocations mapped here */
  uint64_t unmaps;        /* of them, unmapped when their owner freed them */
  uint64_t host_waits;    /* calls whose host waited for a peer's side of the call */
  uint64_t range_queries; /* allocation look-ups of send buffers (a driver query each) */
  uint64_t batches;       /* batches of stream memory operations queued */
  uint64_t memops;        /* stream memory operations (flag waits and writes) in them */
  uint64_t copies;        /* copies queued */
  uint64_t copy_calls;    /* batches of them (one driver call each where it batches) */
  uint64_t syscalls;      /* sendmsg / recvmsg on its socket after init */
} moeccl_ipc_stats_t;
void moeccl_ipc_stats(const moeccl_comm_t* comm, moeccl_ipc_stats_t* out);
/* moecclMemFree of device allocation id (device.h range): the peers of this
 * process's communicators unmap it at their next call. */
void moeccl_ipc_forget(uint64_t id);
/* The network transports built in, in selection order on equal scores:
 * the i-th, or NULL past the last; and the index of ops among them, or -1. */
const moeccl_transport_ops_t* moeccl_net_transport(int i);
int moeccl_net_transport_index(const moeccl_transport_ops_t* ops);
#ifdef MOECCL_TRANSPORT_OFI
extern const moeccl_transport_ops_t moeccl_ofi_ops;
#endif
#ifdef MOECCL_TRANSPORT_UCX
extern const moeccl_transport_ops_t moeccl_ucx_ops;
#endif

#endif
