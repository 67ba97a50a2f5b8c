/*
 * The transport contract.  A transport moves the bytes of SEND and RECV ops
 * between this rank and the peers it reaches; the executor drives it through
 * this table and never knows which one it drives.  Selection (transport.c,
 * moeccl_transports_init) is collective and agreed by every rank: shared
 * memory takes the peers its can_reach says share this rank's host (unless
 * MOECCL_SHM_DISABLE); one network transport takes every peer left (the one
 * MOECCL_NET names, else net_transports[] in the order of the ranks' summed
 * score(); one whose init fails on any rank is dropped everywhere and the
 * next is tried); then stream transports take the (peer, device memory)
 * pairs their can_reach accepts.  Once started, each
 * reports what it moves and what its links cost (query, in the manner of
 * UCX's uct_iface_query): the tuner prices links from that alone.
 *
 * A transport that moves only device memory (ipc.c is the first) drops in
 * as a stream transport: mem_types MOECCL_MEM_TYPE_DEVICE, caps
 * MOECCL_TRANSPORT_CAP_STREAM, listed in transport.c's stream_transports[].
 * Selection gives it the (peer, device memory) pairs it reaches
 * (comm->peer_stream_transport) after the host transports took theirs, and
 * the executor hands it whole schedules (lower_begin, lower_step), never a
 * request: post may refuse one, progress, arm and wait do nothing.  At
 * most MOECCL_MAX_TRANSPORTS (comm.h) start on one communicator.
 *
 * Matching: messages between one sender and one receiver on a communicator
 * match in the order they were posted on each side.  A message shorter than
 * the receive completes it; a longer one is an error (truncation).  A
 * consumed receive (req->consumer) must get exactly its length: anything
 * else is an error, since what the consumer does needs the whole message.
 */
#ifndef MOECCL_TRANSPORT_H_
#define MOECCL_TRANSPORT_H_

#include "comm/comm.h"
#include "sched/schedule.h" /* lower_begin and lower_step take a schedule */
#include "topo/topo.h"

typedef enum { MOECCL_REQ_SEND = 0, MOECCL_REQ_RECV = 1 } moeccl_req_type_t;

/* What a receive does with its message in place of writing buf, filled by
 * the executor (a reduction as the bytes arrive, or a MoE row program): the
 * transport hands it the bytes where they lie -- a slot, the peer's mapped
 * memory, a bounce buffer -- and never learns what it computes.  Only a
 * transport with the capability (MOECCL_TRANSPORT_CAP_REDUCE for unit > 0,
 * MOECCL_TRANSPORT_CAP_ROWS for unit 0) sees a consumer; msg is always host
 * memory. */
typedef struct moeccl_consumer {
  /* > 0: every byte of the message goes through consume, in pieces of
   *   whole units of this many bytes (a reduction's elements), and buf is
   *   never written.
   * 0: the transport may consume the whole message at once (off 0) once
   *   ready() says so, or else land it in buf as a plain receive; the
   *   executor then consumes it from there. */
  size_t unit;
  /* Consumes bytes [off, off + n) of the message, which msg holds.  A
   * failure has already failed the communicator; pass it on. */
  moecclResult_t (*consume)(struct moeccl_consumer* c, const void* msg, size_t off, size_t n);
  /* A gathered message (the sender's req->gather_span): span is the
   * sender's whole buffer; the consumer picks its rows from it.  NULL where
   * the receive cannot pick rows from a whole buffer (the ranks disagree
   * on the call). */
  moecclResult_t (*consume_gathered)(struct moeccl_consumer* c, const void* span);
  /* Whether consume may run now (NULL: always): consumers whose sums must
   * come out the same run to run take their turn in op order.  Until then
   * the transport waits, or lands the message in buf (unit 0). */
  int (*ready)(const struct moeccl_consumer* c);
  /* A gathered message, for a transport that cannot hand over the span
   * (it reads the rows into buf instead, in message order): message row i
   * is row map[i] of the sender's buffer, rows of row_bytes bytes. */
  const uint32_t* map;
  size_t row_bytes;
} moeccl_consumer_t;

/* One posted send or receive.  Owned by the executor (inside a request of
 * its own); the transport links it into its queues between post() and
 * completion and must not touch it after setting done. */
typedef struct moeccl_req {
  int type; /* moeccl_req_type_t */
  int peer; /* comm rank */
  void* buf;
  moeccl_mem_t mem; /* where buf lives; the transport was chosen for it */
  size_t bytes;
  volatile int done;
  int stream_copy; /* copy into buf with streaming stores (executor's choice) */
  /* A receive whose message is exactly bytes long when the ranks' calls
   * agree (every collective's schedule; not moecclRecv, which takes a
   * shorter message): a transport may act on the size before the message
   * arrives, and may fail a call whose ranks disagree. */
  int exact;
  /* A receive consumed in place (above), or NULL: a plain receive. */
  moeccl_consumer_t* consumer;
  /* A gathered send (can_gather said yes): buf is the sender's whole
   * buffer of gather_span bytes; bytes is the message the receiver's
   * consumer reads, picking its rows (consume_gathered, map); 0 else. */
  size_t gather_span;
  /* the transport's own */
  struct moeccl_req* next; /* queue link */
  size_t progress;         /* bytes moved so far */
  uint64_t seq;            /* message sequence number */
  uint64_t aux;
} moeccl_req_t;

/* Whether r's consumer may consume now (r a receive). */
static inline int moeccl_req_ready(const moeccl_req_t* r) {
  const moeccl_consumer_t* c = r->consumer;
  return !c || !c->ready || c->ready(c);
}

/* Capabilities a transport reports (ops->caps). */
enum {
  /* Receives can consume in place piece by piece (a consumer of unit > 0:
   * reducing as the bytes arrive), straight out of the peer's memory or a
   * slot, with no staging copy.  Without it the executor receives into
   * staging memory and reduces when the receive completes. */
  MOECCL_TRANSPORT_CAP_REDUCE = 1,
  /* Receives can consume a whole message in place (a consumer of unit 0:
   * a row program), straight out of the peer's memory (shm: a mapped
   * moecclMemAlloc region), and take gathered messages.  Without it the
   * message lands in buf and the executor consumes it from there. */
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

/* What a transport reports about itself (ops->query): what it moves, and
 * the costs of the links it carries with its own settings applied, for the
 * tuner's model (topo.h: moeccl_link_t; a tune or topology file overrides
 * the costs). */
typedef struct moeccl_transport_attr {
  const char* name;   /* the transport's */
  unsigned mem_types; /* MOECCL_MEM_TYPE_* it moves */
  int network;        /* it reaches other nodes (MOECCL_TRANSPORT_CAP_NETWORK) */
  int stream;         /* it lowers device schedules (MOECCL_TRANSPORT_CAP_STREAM) */
  double latency_us;  /* a message's one-way start-up time */
  double overhead_us; /* CPU time per message on each end */
  double bw_GBps;     /* GB/s per rank under all-to-all load */
  size_t eager_bytes; /* messages up to this go without the receiver's word (0: not known) */
  /* larger ones wait a round trip for the receiver (0: never, or the
   * transport's library decides) */
  size_t rndv_bytes;
} moeccl_transport_attr_t;

typedef struct moeccl_transport_ops {
  const char* name;
  unsigned caps;      /* MOECCL_TRANSPORT_CAP_* */
  unsigned mem_types; /* MOECCL_MEM_TYPE_* it can move */
  /* Network transports only (NULL for shm): how well this transport would do
   * here, from local facts alone (its providers or devices), without talking
   * to peers: 0 cannot run, 1 sockets only, 2 a kernel-bypass fabric.
   * MOECCL_NET=auto tries network transports in order of the ranks' summed
   * scores, so every rank tries them in the same order. */
  int (*score)(void);
  /* Whether this transport can reach peer, from the peer table alone.  Must
   * give the same answer on both ranks of a pair.  Called before init, for
   * shared memory and the stream transports; a network transport is given
   * every peer left (its init may fail, and selection then tries the next). */
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
  /* What it moves and what its links cost, as it runs on comm (every field;
   * moeccl_transport_attr_of gives the static ones).  state is init's, or
   * NULL where it did not start on comm (selection asks shared memory so,
   * to price a class of link no pair of ranks uses here): answer from the
   * settings alone, or fail where that cannot be done (a network module not
   * loaded).  Local; never blocks. */
  moecclResult_t (*query)(void* state, const moeccl_comm_t* comm, moeccl_transport_attr_t* out);
  /* Optional (NULL: no): whether a send to peer may hand over the whole
   * buffer [buf, buf + bytes) for the receiver to pick rows from
   * (req->gather_span); the receiver's consumer then picks its rows from
   * it (consume_gathered), or its transport reads them by the consumer's
   * map. */
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
   *     marked ready, waits for its senders, the copies, and the reducing
   *     and consuming receives as kernels reading the senders' memory, in
   *     op order, with the schedule's reduction or the receive's row
   *     program, whose terms go to s->arena; a SEND with MOECCL_OPF_ROWS
   *     hands over its program's whole span for the receiver to pick the
   *     rows from), phase 1 after them
   *     (its receives marked read, waits for the readers of its sends): once
   *     the stream passes phase 1 every receive of the step holds its
   *     message and every buffer the step sent from may be written.
   * Never blocks on the device; the stream does the waiting. */
  moecclResult_t (*lower_begin)(void* state, const moeccl_sched_t* s);
  moecclResult_t (*lower_step)(void* state, const moeccl_sched_t* s, int step, int phase,
                               void* stream);
} moeccl_transport_ops_t;

/* The attributes ops's table already says (name, memory kinds, network,
 * stream), costs zero: where a query starts. */
static inline moeccl_transport_attr_t moeccl_transport_attr_of(const moeccl_transport_ops_t* ops) {
  return (moeccl_transport_attr_t){.name = ops->name,
                                   .mem_types = ops->mem_types,
                                   .network = (ops->caps & MOECCL_TRANSPORT_CAP_NETWORK) != 0,
                                   .stream = (ops->caps & MOECCL_TRANSPORT_CAP_STREAM) != 0};
}

/* What the transport that carries link class cls between this rank and its
 * peers reports: within a node the host transport of ranks on one node
 * (shared memory, asked without a state where no two ranks share a node;
 * the network transport with MOECCL_SHM_DISABLE=1), between nodes the
 * network transport, which every rank agreed on.  out->name is NULL when
 * none does (between nodes on a communicator of one node; MOECCL_LINK_SELF,
 * whose copies are no transport's).  After moeccl_transports_init. */
moecclResult_t moeccl_transport_attr(const moeccl_comm_t* comm, moeccl_link_class_t cls,
                                     moeccl_transport_attr_t* out);
/* What moving host memory between processes of this machine costs: shared
 * memory's attributes, whether or not selection uses it here (nodes that
 * share a machine reach each other through the same cores). */
moecclResult_t moeccl_transport_attr_machine(const moeccl_comm_t* comm,
                                             moeccl_transport_attr_t* out);

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
#ifdef MOECCL_TRANSPORT_OFI
extern const moeccl_transport_ops_t moeccl_ofi_ops;
#endif
#ifdef MOECCL_TRANSPORT_UCX
extern const moeccl_transport_ops_t moeccl_ucx_ops;
#endif

#endif
