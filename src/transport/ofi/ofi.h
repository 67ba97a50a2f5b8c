/*
 * libfabric transport: ranks on other nodes (or every peer, with
 * MOECCL_SHM_DISABLE=1), host memory, over a reliable-datagram (FI_EP_RDM)
 * endpoint with tagged messages.
 *
 * Matching.  Every message between an ordered pair carries the pair's next
 * sequence number in its tag and is received by a directed receive (source
 * fi_addr, exact tag), so posting order decides matching whatever order the
 * provider delivers in.  The tag's high bits name the message kind: data
 * (eager payload or rendezvous header), CTS, FIN, chunk, abort notice.  A
 * rendezvous header is told from an eager payload by its remote CQ data
 * (RTS_DATA) where the provider carries CQ data, else by a tag bit the
 * data receive ignores.  Ignore bits are avoided where possible: libfabric
 * 1.17-1.18's shm provider matches a receive against unexpected messages
 * with a stale ignore mask (not the receive's), so a header that arrived
 * before its receive was posted never matched and the exchange stalled.
 *
 * Protocols.  A message up to MOECCL_NET_EAGER_SIZE goes in one tagged send
 * straight into the posted receive.  A larger one sends a 16-byte header
 * (RTS: size, chunk size) into the same receive; the receiver answers CTS:
 *   - RMA (both ranks' providers offer FI_RMA, and MOECCL_OFI_RMA_DISABLE is
 *     unset): the CTS carries the receive buffer's address and key; the
 *     sender writes it in chunks with delivery-complete semantics, then sends
 *     FIN, which completes the receive (FIN posted right after the writes
 *     where the endpoint grants FI_ORDER_SAW was tried: over tcp;ofi_rxm,
 *     libfabric 1.17, a receiver under load then waited for ever for a
 *     message whose sender had completed it, 2 of 12 runs of mh_correctness
 *     under ASan, none of 12 without it);
 *   - RMA with write data (both providers carry 8 bytes of remote CQ data,
 *     MOECCL_OFI_WRITEDATA_DISABLE unset): every write carries the sender's
 *     rank and the message's sequence number as remote CQ data, and the
 *     receiver completes when it has seen each chunk's remote completion.
 *     No FIN, and no ordering between operations is relied on: a remote
 *     completion is raised only once that write's data is in place.  The
 *     writes are transmit-complete (the sender may reuse its buffer);
 *   - early CTS (write data, and a receive whose message size is known,
 *     req->exact: every collective's): the receiver sends the CTS when the
 *     receive is posted instead of when the header arrives, a one-way trip
 *     less before the data flows; the header then lands in a buffer of its
 *     own (the writes may reach the receive buffer first) and still tells
 *     the size and the pieces, so that a call whose ranks disagree fails;
 *   - tagged: the receiver posts one receive per chunk before the CTS; the
 *     sender sends the chunks as tagged messages (tag: sequence + index).
 * The receiver chooses by its CTS, so the two sides never disagree; over
 * tcp;ofi_rxm it asks for tagged pieces from TCP_TAGGED_MIN (see tagged_min).
 *
 * Channels: MOECCL_NET_NCHANNELS endpoints share one domain, AV and CQ; the
 * message with sequence s travels on channel s % nch (nch agreed per pair).
 *
 * Built as the module moeccl_net_ofi.so (net_module.h), which libmoeccl
 * loads only when a communicator needs the network (ofi_load.c): libfabric
 * links provider libraries whose constructors install signal handlers.
 *
 * This header holds what the module's files share: setup.c (the provider
 * choice, endpoints, wiring up, the ops table), mem.c (pools, memory
 * registrations, failures), post.c (posting requests and issuing
 * operations) and progress.c (completions, waiting, liveness, aborts).
 */
#ifndef MOECCL_OFI_H_
#define MOECCL_OFI_H_

#include "transport/net_module.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>
#include <rdma/fi_tagged.h>

#include "base/param.h"

#define OFI_API FI_VERSION(1, 10)
#define MAX_CH 8
#define NAME_MAX_BYTES 96
#define WINDOW 8    /* chunk operations in flight per message */
#ifndef MR_CACHE    /* (tests shrink it to exercise the overflow path) */
#define MR_CACHE 64 /* registrations kept per communicator */
#endif
#define SLAB 64           /* pool items allocated at once */
#define CQ_BATCH 16       /* completions read per fi_cq_read */
#define CQ_PASS_MAX 256   /* completions handled per progress pass */
#define ABORT_FLUSH_S 0.1 /* notify_abort: seconds spent pushing the notices out */

/* Tag layout: [52] RTS bit, [48..51] kind, [16..47] sequence, [0..15] chunk. */
#define TAG_KIND_SHIFT 48
#define TAG_RTS (1ULL << 52)
#define RTS_DATA 1 /* remote CQ data of a rendezvous header */
enum { K_DATA = 1, K_CTS = 2, K_FIN = 3, K_CHUNK = 4, K_ABORT = 5, K_HELLO = 6 };
#define MAX_CHUNKS 65536
#define TCP_TAGGED_MIN ((size_t)1 << 20) /* see tagged_min */

static inline uint64_t make_tag(int kind, uint64_t seq, uint32_t idx) {
  return ((uint64_t)kind << TAG_KIND_SHIFT) | ((seq & 0xffffffffULL) << 16) | (idx & 0xffff);
}

/* What travels in control messages. */
typedef struct {
  uint64_t bytes; /* message size */
  uint64_t chunk; /* tagged path: bytes per chunk message */
} rts_t;
enum { CTS_OK = 0, CTS_TRUNC = 1 };
enum { CTS_TAGGED = 0, CTS_RMA_FIN = 1, CTS_RMA_WDATA = 2 }; /* cts_t.rma */
/* Remote CQ data of a write: [63] marker, [32..62] sender's rank, [0..31]
 * the message's sequence number (RTS_DATA, on tagged headers, has bit 63
 * clear; writes' completions are told apart by their flags anyway). */
#define WDATA_MARK (1ULL << 63)
static inline uint64_t make_wdata(int rank, uint64_t seq) {
  return WDATA_MARK | ((uint64_t)(uint32_t)rank << 32) | (seq & 0xffffffffULL);
}
typedef struct {
  uint32_t status; /* CTS_* */
  uint32_t rma;    /* 1: write to addr/key; 0: send tagged chunks */
  uint64_t addr;   /* remote address (or offset, without FI_MR_VIRT_ADDR) */
  uint64_t key;
  uint64_t posted; /* bytes of the receive (for the sender's truncation text) */
} cts_t;
typedef struct {
  int32_t culprit, from;
} abort_msg_t;

/* A registration; refs counts the messages using it now. */
typedef struct {
  uintptr_t addr;
  size_t len;
  struct fid_mr* mr;
  int refs, cached, heap; /* heap: outside the cache (it was full), freed when unused */
  uint64_t last_use;
} mr_ent_t;

/* Transport state of one request (req->aux points here). */
typedef struct ofi_xfer {
  struct ofi_xfer* next_free;
  moeccl_req_t* req; /* NULL once done or cancelled */
  int peer, ch;
  uint64_t seq;
  size_t msg_bytes, chunk;
  uint32_t nchunks, posted, completed;
  int ops_out; /* operations the provider still holds (or backlogged) */
  int rma;     /* sender: CTS asked for writes */
  mr_ent_t* mr;
  uint64_t raddr, rkey;
  rts_t rts_out;
  cts_t cts;                /* sender: received; receiver: sent */
  struct ofi_xfer* next_wd; /* receiver: the peer's list of messages awaiting write data */
  rts_t rts_in;             /* receiver, early CTS: the header lands here */
  uint64_t fin;             /* FIN payload (either side) */
  void* ctrl_desc;
} ofi_xfer_t;

enum {
  OP_EAGER_SEND,
  OP_RTS_SEND,
  OP_CTS_RECV,
  OP_WRITE,
  OP_FIN_SEND,
  OP_CHUNK_SEND,
  OP_MSG_RECV,
  OP_CTS_SEND,
  OP_FIN_RECV,
  OP_CHUNK_RECV,
  OP_ABORT_RECV,
  OP_ABORT_SEND,
  OP_HELLO_SEND,
  OP_HELLO_RECV,
  OP_RTS_RECV
};
__attribute__((unused)) static const char* const op_names[] = {
    "eager send",       "rendezvous header", "CTS receive",
    "RMA write",        "FIN send",          "chunk send",
    "receive",          "CTS send",          "FIN receive",
    "chunk receive",    "abort receive",     "abort notice",
    "connection setup", "connection setup",  "rendezvous header receive"};

/* One posted libfabric operation; its context is the first member, as
 * FI_CONTEXT2 mode asks. */
typedef struct ofi_op {
  struct fi_context2 ctx;
  struct ofi_op* next; /* free list or backlog */
  int kind;
  int peer; /* abort notices */
  uint32_t idx;
  ofi_xfer_t* x;
} ofi_op_t;

/* Fixed-size items from slabs that live until fini (a cancelled operation
 * may still name one); optionally registered for FI_MR_LOCAL. */
typedef struct slab {
  struct slab* next;
  struct fid_mr* mr;
  char items[];
} slab_t;
typedef struct {
  size_t size;
  void* free;
  slab_t* slabs;
} pool_t;

typedef struct {
  int nch;                  /* channels agreed with this peer; 0: not reached */
  int rma;                  /* both sides can do RMA */
  int rts_data;             /* both sides carry CQ data: headers flagged by RTS_DATA, not TAG_RTS */
  int wdata;                /* both sides carry 8 bytes of CQ data on writes: no FIN */
  size_t eager;             /* the pair's eager size (the smaller of the two ranks') */
  struct ofi_xfer* wd_head; /* receives from this peer waiting for their writes */
  uint64_t send_seq, recv_seq;
  int pending; /* requests not done */
  fi_addr_t addr[MAX_CH];
} ofi_peer_t;

typedef struct {
  moeccl_comm_t* comm;
  struct fi_info* info;
  struct fid_fabric* fabric;
  struct fid_domain* domain;
  struct fid_av* av;
  struct fid_cq* cq;
  struct fid_ep* ep[MAX_CH];
  int nch, rma, rma_disabled, delivery_complete, pins, wait_fd, rts_data, wdata;
  size_t tagged_min; /* messages from this size go tagged even where RMA works (0: never) */
  uint64_t mr_mode, next_key;
  size_t eager, chunk, max_msg;
  ofi_peer_t* peers;
  pool_t xfers, ops;
  ofi_op_t *backlog, *backlog_tail;
  mr_ent_t mrs[MR_CACHE];
  uint64_t mr_clock;
  moecclResult_t failed; /* sticky: first error this transport reported */
  struct {
    abort_msg_t abort_in, abort_out;
    uint64_t hello_in, hello_out;
  } ctl; /* small internal buffers (one registration) */
  struct fid_mr* ctl_mr;
  int aborts_out; /* abort notices in flight */
  int hellos_out; /* connection setup messages in flight */
} ofi_state_t;

static inline struct fid_ep* ep_of(ofi_state_t* s, const ofi_xfer_t* x) { return s->ep[x->ch]; }

static inline fi_addr_t addr_of(ofi_state_t* s, const ofi_xfer_t* x) {
  return s->peers[x->peer].addr[x->ch];
}

static inline size_t chunk_len(const ofi_xfer_t* x, uint32_t idx) {
  size_t off = (size_t)idx * x->chunk;
  return x->msg_bytes - off < x->chunk ? x->msg_bytes - off : x->chunk;
}

/* Worth posting again later: a full queue, or (tcp;ofi_rxm) a connect that
 * collided with the peer's own connection to us, which rxm then adopts. */
static inline int transient(ssize_t rc) { return rc == -FI_EAGAIN || rc == -FI_EADDRNOTAVAIL; }

/* mem.c: pools, registrations and failures */
moecclResult_t ofi_mr_register(ofi_state_t* s, void* buf, size_t len, struct fid_mr** mr);
void* ofi_pool_get(ofi_state_t* s, pool_t* p, int registered);
void ofi_pool_put(pool_t* p, void* item);
void* ofi_pool_desc(const pool_t* p, const void* item);
void ofi_pool_free(pool_t* p);
mr_ent_t* ofi_mr_get(ofi_state_t* s, void* buf, size_t len);
void ofi_mr_put(mr_ent_t* e);
void ofi_mr_drop(mr_ent_t* e);
void* ofi_mr_desc(mr_ent_t* e);
moecclResult_t ofi_fail_keep(ofi_state_t* s, moecclResult_t rc);
moecclResult_t ofi_peer_error(ofi_state_t* s, int peer, const char* what, const char* why);
moecclResult_t ofi_truncated(ofi_state_t* s, int peer, uint64_t got, size_t posted);

/* post.c: posting and issuing */
ssize_t ofi_issue(ofi_state_t* s, ofi_op_t* op);
moecclResult_t ofi_submit(ofi_state_t* s, int kind, ofi_xfer_t* x, uint32_t idx, int peer);
moecclResult_t ofi_retry_backlog(ofi_state_t* s, int* progressed);
void ofi_xfer_maybe_free(ofi_state_t* s, ofi_xfer_t* x);
void ofi_complete(ofi_state_t* s, ofi_xfer_t* x);
int ofi_goes_tagged(const ofi_state_t* s, size_t bytes);
moecclResult_t ofi_cts_rma_target(ofi_state_t* s, ofi_xfer_t* x);
void ofi_wd_list(ofi_state_t* s, ofi_xfer_t* x);
void ofi_take_header(ofi_xfer_t* x, const rts_t* h);
moecclResult_t ofi_post(void* state, moeccl_req_t* r);
moecclResult_t ofi_pump(ofi_state_t* s, ofi_xfer_t* x, int kind);

/* progress.c: completions, waiting and liveness */
moecclResult_t ofi_progress(void* state, int* progressed);
void ofi_arm(void* state);
void ofi_wait(void* state, int64_t timeout_us);
moecclResult_t ofi_check_peers(void* state);
void ofi_notify_abort(void* state, int culprit);
void ofi_cancel_all(void* state);

#endif
