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
 */
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

static uint64_t make_tag(int kind, uint64_t seq, uint32_t idx) {
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
static uint64_t make_wdata(int rank, uint64_t seq) {
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
static const char* const op_names[] = {
    "eager send",    "rendezvous header", "CTS receive",      "RMA write",       "FIN send",
    "chunk send",    "receive",           "CTS send",         "FIN receive",     "chunk receive",
    "abort receive", "abort notice",      "connection setup", "connection setup",
    "rendezvous header receive"};

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

/* ---- provider choice ------------------------------------------------------ */

/* Preference order (lower is better) and score of a provider name.  Over
 * TCP the provider with its own RDM endpoints ("tcp" from libfabric 1.18,
 * "net" in 1.16-1.17) comes before the rxm layering over connected
 * endpoints: rxm's extra layer cost 2 ranks here 7-10 us a message (0.51x-
 * 0.77x of Open MPI's TCP at 1-16 KiB per rank, against 0.79x-0.95x; 64
 * KiB 0.72x-0.83x against 0.99x-1.12x; 3 interleaved runs, af70547). */
static int prov_rank(const char* name) {
  static const char* const order[] = {"cxi", "verbs;ofi_rxm", "efa",         "tcp",
                                      "net", "tcp;ofi_rxm",   "net;ofi_rxm", "shm"};
  for (int i = 0; i < (int)(sizeof(order) / sizeof(order[0])); i++)
    if (strcmp(name, order[i]) == 0) return i;
  return 100;
}

static int prov_score(const char* name) {
  static const char* const fast[] = {"cxi", "verbs", "efa", "psm2", "psm3", "opx"};
  for (int i = 0; i < (int)(sizeof(fast) / sizeof(fast[0])); i++)
    if (strstr(name, fast[i])) return 2;
  return 1;
}

/* Defaults for libfabric's own variables, set before it reads them (at the
 * first fi_getinfo of the process) and only where the user left them unset
 * (setenv never overwrites).  rxm sends eagerly only up to 16 KiB by
 * default, and between that and moeccl's eager size it segments messages
 * through its bounce buffers: a 32 KiB message took 36 us there against 18
 * us eager (2 ranks over tcp;ofi_rxm here, a2a_perf 64 KiB per rank, 0.41x
 * -> 0.82x of MPI).  So rxm's eager limit follows MOECCL_NET_EAGER_SIZE;
 * above it moeccl's own rendezvous (RMA or chunks) takes over anyway.  Over
 * tcp the limit may exceed rxm's buffer size, which keeps its memory use. */
static void set_defaults_once(void) {
  char v[32];
  snprintf(v, sizeof(v), "%zu", moeccl_param_size("MOECCL_NET_EAGER_SIZE"));
  setenv("FI_OFI_RXM_EAGER_LIMIT", v, 0);
}

/* Once per process: setenv must not race with another thread's getenv
 * (two threads creating communicators). */
static void apply_defaults(void) {
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  pthread_once(&once, set_defaults_once);
}

/* fi_getinfo for RDM tagged messaging; rma adds the RMA capabilities,
 * mr_local lets the provider ask for registered local buffers. */
static struct fi_info* query(const char* prov, int rma, int mr_local) {
  apply_defaults();
  struct fi_info* hints = fi_allocinfo();
  if (!hints) return NULL;
  hints->caps = FI_TAGGED | FI_MSG | FI_DIRECTED_RECV;
  if (rma) hints->caps |= FI_RMA | FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE;
  hints->mode = FI_CONTEXT | FI_CONTEXT2;
  hints->ep_attr->type = FI_EP_RDM;
  hints->domain_attr->mr_mode = FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY | FI_MR_ENDPOINT;
  if (mr_local) hints->domain_attr->mr_mode |= FI_MR_LOCAL;
  hints->domain_attr->threading = FI_THREAD_DOMAIN; /* the comm lock serialises us */
  if (prov && *prov) hints->fabric_attr->prov_name = strdup(prov);
  struct fi_info* info = NULL;
  if (fi_getinfo(OFI_API, NULL, NULL, 0, hints, &info) != 0) info = NULL;
  fi_freeinfo(hints);
  return info;
}

/* The best entry of list, the most preferred provider's first (a forced
 * provider's list holds only its own entries; "tcp" may list both the
 * native and the rxm endpoints).  FI_MR_RAW is not supported. */
static struct fi_info* best_of(struct fi_info* list, int* rank) {
  struct fi_info* best = NULL;
  *rank = 1000;
  for (struct fi_info* i = list; i; i = i->next) {
    if (i->domain_attr->mr_mode & FI_MR_RAW) continue;
    int r = prov_rank(i->fabric_attr->prov_name);
    if (r < *rank) best = i, *rank = r;
  }
  return best;
}

/* Picks the provider: RMA-capable entries win ties; entries that need no
 * local registration are tried first.  Returns a copy the caller frees. */
static struct fi_info* choose_info(int allow_rma, const char** why) {
  const char* prov = moeccl_param_str("MOECCL_OFI_PROVIDER");
  int forced = prov && *prov;
  *why = forced ? "MOECCL_OFI_PROVIDER" : getenv("FI_PROVIDER") ? "FI_PROVIDER" : "best available";
  /* "tcp" names TCP: libfabric 1.16-1.17 call its native RDM provider
   * "net" (from 1.18 it is "tcp" itself), so both are asked for; the rxm
   * layering stays reachable as "tcp;ofi_rxm". */
  const char* names[2] = {prov, NULL};
  if (forced && strcmp(prov, "tcp") == 0) names[1] = "net";
  struct fi_info* chosen = NULL;
  int chosen_rank = 1000;
  for (int mr_local = 0; mr_local < 2 && !chosen; mr_local++)
    for (int rma = allow_rma; rma >= 0; rma--)
      for (int n = 0; n < 2 && (n == 0 || names[n]); n++) {
        struct fi_info* list = query(names[n], rma, mr_local);
        int r;
        struct fi_info* b = list ? best_of(list, &r) : NULL;
        if (b && r < chosen_rank) {
          if (chosen) fi_freeinfo(chosen);
          chosen = fi_dupinfo(b), chosen_rank = r;
        }
        if (list) fi_freeinfo(list);
      }
  return chosen;
}

static int ofi_score(void) {
  const char* why;
  struct fi_info* info = choose_info(0, &why);
  if (!info) return 0;
  int score = prov_score(info->fabric_attr->prov_name);
  fi_freeinfo(info);
  return score;
}

static int ofi_can_reach(const moeccl_comm_t* comm, int peer) {
  (void)comm, (void)peer;
  return 1;
}

/* ---- pools and registrations --------------------------------------------- */

static moecclResult_t mr_register(ofi_state_t* s, void* buf, size_t len, struct fid_mr** mr);

static void* pool_get(ofi_state_t* s, pool_t* p, int registered) {
  if (!p->free) {
    slab_t* sl = calloc(1, sizeof(slab_t) + p->size * SLAB);
    if (!sl) return NULL;
    if (registered && (s->mr_mode & FI_MR_LOCAL) &&
        mr_register(s, sl->items, p->size * SLAB, &sl->mr) != moecclSuccess)
      return free(sl), NULL;
    sl->next = p->slabs, p->slabs = sl;
    for (int i = SLAB - 1; i >= 0; i--) {
      void** item = (void**)(sl->items + (size_t)i * p->size);
      *item = p->free, p->free = item;
    }
  }
  void** item = p->free;
  p->free = *item;
  return item;
}

static void pool_put(pool_t* p, void* item) {
  *(void**)item = p->free;
  p->free = item;
}

/* The slab holding item (its registration's descriptor for FI_MR_LOCAL). */
static void* pool_desc(const pool_t* p, const void* item) {
  for (const slab_t* sl = p->slabs; sl; sl = sl->next)
    if ((const char*)item >= sl->items && (const char*)item < sl->items + p->size * SLAB)
      return sl->mr ? fi_mr_desc(sl->mr) : NULL;
  return NULL;
}

static void pool_free(pool_t* p) {
  while (p->slabs) {
    slab_t* sl = p->slabs;
    p->slabs = sl->next;
    if (sl->mr) fi_close(&sl->mr->fid);
    free(sl);
  }
}

static moecclResult_t mr_register(ofi_state_t* s, void* buf, size_t len, struct fid_mr** mr) {
  uint64_t access = FI_SEND | FI_RECV;
  if (s->rma) access |= FI_WRITE | FI_READ | FI_REMOTE_WRITE | FI_REMOTE_READ;
  int rc = fi_mr_reg(s->domain, buf, len, access, 0, ++s->next_key, 0, mr, NULL);
  if (rc == 0 && (s->mr_mode & FI_MR_ENDPOINT)) {
    rc = fi_mr_bind(*mr, &s->ep[0]->fid, 0);
    if (rc == 0) rc = fi_mr_enable(*mr);
    if (rc != 0) fi_close(&(*mr)->fid);
  }
  if (rc != 0)
    return moeccl_error(s->comm, moecclSystemError, "ofi: registering %zu bytes at %p failed: %s",
                        len, buf, fi_strerror(-rc));
  return moecclSuccess;
}

/* A registration covering [buf, buf+len), from the cache when one does.
 * Memory is cached only where a stale registration cannot hurt: providers
 * that pin nothing, or moecclMemAlloc regions (which never move). */
static mr_ent_t* mr_get(ofi_state_t* s, void* buf, size_t len) {
  uintptr_t a = (uintptr_t)buf;
  mr_ent_t* victim = NULL;
  for (int i = 0; i < MR_CACHE; i++) {
    mr_ent_t* e = &s->mrs[i];
    if (e->mr && e->cached && e->addr <= a && a + len <= e->addr + e->len) {
      e->refs++, e->last_use = ++s->mr_clock;
      return e;
    }
    if (!e->mr) {
      if (!victim || victim->mr) victim = e;
    } else if (e->refs == 0 && (!victim || (victim->mr && e->last_use < victim->last_use))) {
      victim = e;
    }
  }
  int heap = !victim; /* every slot in use: a registration of its own */
  if (heap && !(victim = calloc(1, sizeof(*victim)))) return NULL;
  if (victim->mr) fi_close(&victim->mr->fid), victim->mr = NULL;
  moeccl_mem_handle_t mh;
  int cached = !heap && (!s->pins || moeccl_mem_lookup(buf, len, &mh));
  if (mr_register(s, buf, len, &victim->mr) != moecclSuccess) {
    if (heap) free(victim);
    return NULL;
  }
  *victim = (mr_ent_t){a, len, victim->mr, 1, cached, heap, ++s->mr_clock};
  return victim;
}

static void mr_put(mr_ent_t* e) {
  if (!e || !e->mr || --e->refs > 0) return; /* !mr: closed by cancel_all */
  if (!e->cached) fi_close(&e->mr->fid), e->mr = NULL;
  if (e->heap) free(e);
}

/* Closes e whoever uses it (cancel_all, fini). */
static void mr_drop(mr_ent_t* e) {
  if (!e) return;
  if (e->mr) fi_close(&e->mr->fid), e->mr = NULL;
  e->refs = 0;
  if (e->heap) free(e);
}

static void* mr_desc(mr_ent_t* e) { return e ? fi_mr_desc(e->mr) : NULL; }

/* ---- failures -------------------------------------------------------------- */

static moecclResult_t fail_keep(ofi_state_t* s, moecclResult_t rc) {
  if (s->failed == moecclSuccess) s->failed = rc;
  return rc;
}

static moecclResult_t peer_error(ofi_state_t* s, int peer, const char* what, const char* why) {
  const char* host = peer >= 0 ? s->comm->peers[peer].hostname : "?";
  return fail_keep(s, moeccl_comm_peer_lost(s->comm, peer,
                                            "rank %d (%s) unreachable over ofi: %s failed: %s",
                                            peer, host, what, why));
}

/* got 0: the provider only said the message did not fit. */
static moecclResult_t truncated(ofi_state_t* s, int peer, uint64_t got, size_t posted) {
  char size[48];
  if (got) snprintf(size, sizeof(size), "%llu bytes", (unsigned long long)got);
  else snprintf(size, sizeof(size), "larger than %zu bytes", posted);
  return fail_keep(s, moeccl_comm_fail(s->comm, moecclInvalidUsage,
                                       "message from rank %d is %s but the receive posted for it "
                                       "is %zu bytes",
                                       peer, size, posted));
}

/* ---- posting ---------------------------------------------------------------- */

static struct fid_ep* ep_of(ofi_state_t* s, const ofi_xfer_t* x) { return s->ep[x->ch]; }
static fi_addr_t addr_of(ofi_state_t* s, const ofi_xfer_t* x) {
  return s->peers[x->peer].addr[x->ch];
}

static size_t chunk_len(const ofi_xfer_t* x, uint32_t idx) {
  size_t off = (size_t)idx * x->chunk;
  return x->msg_bytes - off < x->chunk ? x->msg_bytes - off : x->chunk;
}

static ssize_t issue_write(ofi_state_t* s, ofi_op_t* op) {
  ofi_xfer_t* x = op->x;
  size_t off = (size_t)op->idx * x->chunk;
  struct iovec iov = {(char*)x->req->buf + off, chunk_len(x, op->idx)};
  void* desc = mr_desc(x->mr);
  struct fi_rma_iov rma = {x->raddr + off, iov.iov_len, x->rkey};
  struct fi_msg_rma msg = {.msg_iov = &iov,
                           .desc = &desc,
                           .iov_count = 1,
                           .addr = addr_of(s, x),
                           .rma_iov = &rma,
                           .rma_iov_count = 1,
                           .context = op};
  if (x->rma == CTS_RMA_WDATA) { /* the receiver counts remote completions */
    msg.data = make_wdata(s->comm->rank, x->seq);
    return fi_writemsg(ep_of(s, x), &msg, FI_COMPLETION | FI_REMOTE_CQ_DATA);
  }
  /* FIN must not overtake the data: delivery complete means the data is
   * visible at the target when this write completes here. */
  uint64_t flags = FI_COMPLETION | (s->delivery_complete ? FI_DELIVERY_COMPLETE : 0);
  ssize_t rc = fi_writemsg(ep_of(s, x), &msg, flags);
  if (s->delivery_complete && (rc == -FI_EBADFLAGS || rc == -FI_ENOSYS || rc == -FI_EOPNOTSUPP)) {
    /* Then FIN relies on the provider's send-after-write order. */
    INFO(NET, "ofi: provider refuses FI_DELIVERY_COMPLETE writes (%s)", fi_strerror((int)-rc));
    s->delivery_complete = 0;
    rc = fi_writemsg(ep_of(s, x), &msg, FI_COMPLETION);
  }
  return rc;
}

/* Calls the libfabric function for op.  Returns 0, -FI_EAGAIN, or an error. */
static ssize_t issue(ofi_state_t* s, ofi_op_t* op) {
  ofi_xfer_t* x = op->x;
  moeccl_req_t* r = x ? x->req : NULL;
  if (x && !r) return -FI_ECANCELED;
  uint64_t seq = x ? x->seq : 0;
  int rts_data = x && s->peers[x->peer].rts_data;
  switch (op->kind) {
    case OP_EAGER_SEND:
      return fi_tsend(ep_of(s, x), r->buf, r->bytes, mr_desc(x->mr), addr_of(s, x),
                      make_tag(K_DATA, seq, 0), op);
    case OP_RTS_SEND:
      if (rts_data)
        return fi_tsenddata(ep_of(s, x), &x->rts_out, sizeof(x->rts_out), x->ctrl_desc, RTS_DATA,
                            addr_of(s, x), make_tag(K_DATA, seq, 0), op);
      return fi_tsend(ep_of(s, x), &x->rts_out, sizeof(x->rts_out), x->ctrl_desc, addr_of(s, x),
                      make_tag(K_DATA, seq, 0) | TAG_RTS, op);
    case OP_CTS_RECV:
      return fi_trecv(ep_of(s, x), &x->cts, sizeof(x->cts), x->ctrl_desc, addr_of(s, x),
                      make_tag(K_CTS, seq, 0), 0, op);
    case OP_WRITE: return issue_write(s, op);
    case OP_FIN_SEND:
      return fi_tsend(ep_of(s, x), &x->fin, sizeof(x->fin), x->ctrl_desc, addr_of(s, x),
                      make_tag(K_FIN, seq, 0), op);
    case OP_CHUNK_SEND:
      return fi_tsend(ep_of(s, x), (char*)r->buf + (size_t)op->idx * x->chunk,
                      chunk_len(x, op->idx), mr_desc(x->mr), addr_of(s, x),
                      make_tag(K_CHUNK, seq, op->idx), op);
    case OP_MSG_RECV:
      return fi_trecv(ep_of(s, x), r->buf, r->bytes, mr_desc(x->mr), addr_of(s, x),
                      make_tag(K_DATA, seq, 0), rts_data ? 0 : TAG_RTS, op);
    case OP_CTS_SEND:
      return fi_tsend(ep_of(s, x), &x->cts, sizeof(x->cts), x->ctrl_desc, addr_of(s, x),
                      make_tag(K_CTS, seq, 0), op);
    case OP_FIN_RECV:
      return fi_trecv(ep_of(s, x), &x->fin, sizeof(x->fin), x->ctrl_desc, addr_of(s, x),
                      make_tag(K_FIN, seq, 0), 0, op);
    case OP_CHUNK_RECV:
      return fi_trecv(ep_of(s, x), (char*)r->buf + (size_t)op->idx * x->chunk,
                      chunk_len(x, op->idx), mr_desc(x->mr), addr_of(s, x),
                      make_tag(K_CHUNK, seq, op->idx), 0, op);
    case OP_ABORT_RECV:
      return fi_trecv(s->ep[0], &s->ctl.abort_in, sizeof(s->ctl.abort_in),
                      s->ctl_mr ? fi_mr_desc(s->ctl_mr) : NULL, FI_ADDR_UNSPEC,
                      make_tag(K_ABORT, 0, 0), 0, op);
    case OP_ABORT_SEND:
      return fi_tsend(s->ep[0], &s->ctl.abort_out, sizeof(s->ctl.abort_out),
                      s->ctl_mr ? fi_mr_desc(s->ctl_mr) : NULL, s->peers[op->peer].addr[0],
                      make_tag(K_ABORT, 0, 0), op);
    case OP_HELLO_SEND:
      return fi_tsend(s->ep[0], &s->ctl.hello_out, sizeof(s->ctl.hello_out),
                      s->ctl_mr ? fi_mr_desc(s->ctl_mr) : NULL, s->peers[op->peer].addr[0],
                      make_tag(K_HELLO, 0, 0), op);
    case OP_HELLO_RECV:
      return fi_trecv(s->ep[0], &s->ctl.hello_in, sizeof(s->ctl.hello_in),
                      s->ctl_mr ? fi_mr_desc(s->ctl_mr) : NULL, s->peers[op->peer].addr[0],
                      make_tag(K_HELLO, 0, 0), 0, op);
    case OP_RTS_RECV:
      return fi_trecv(ep_of(s, x), &x->rts_in, sizeof(x->rts_in), x->ctrl_desc, addr_of(s, x),
                      make_tag(K_DATA, seq, 0), rts_data ? 0 : TAG_RTS, op);
  }
  return -FI_EINVAL;
}

/* Worth posting again later: a full queue, or (tcp;ofi_rxm) a connect that
 * collided with the peer's own connection to us, which rxm then adopts. */
static int transient(ssize_t rc) { return rc == -FI_EAGAIN || rc == -FI_EADDRNOTAVAIL; }

static void backlog_push(ofi_state_t* s, ofi_op_t* op) {
  op->next = NULL;
  if (s->backlog_tail) s->backlog_tail->next = op;
  else s->backlog = op;
  s->backlog_tail = op;
}

/* Posts an operation of x (or of the state, x NULL); a full provider queue
 * (-FI_EAGAIN) parks it in the backlog that progress() retries. */
static moecclResult_t submit(ofi_state_t* s, int kind, ofi_xfer_t* x, uint32_t idx, int peer) {
  ofi_op_t* op = pool_get(s, &s->ops, 0);
  if (!op) return moeccl_error(s->comm, moecclSystemError, "ofi: out of memory for operations");
  *op = (ofi_op_t){.kind = kind, .x = x, .idx = idx, .peer = x ? x->peer : peer};
  if (x) x->ops_out++;
  ssize_t rc = issue(s, op);
  if (transient(rc)) return backlog_push(s, op), moecclSuccess;
  if (rc == 0) return moecclSuccess;
  if (x) x->ops_out--;
  int to = op->peer;
  op->x = NULL;
  pool_put(&s->ops, op);
  return peer_error(s, to, op_names[kind], fi_strerror((int)-rc));
}

static moecclResult_t retry_backlog(ofi_state_t* s, int* progressed) {
  while (s->backlog) {
    ofi_op_t* op = s->backlog;
    ssize_t rc = issue(s, op);
    if (transient(rc)) return moecclSuccess;
    s->backlog = op->next;
    if (!s->backlog) s->backlog_tail = NULL;
    *progressed = 1;
    if (rc == 0) continue;
    if (op->x) op->x->ops_out--;
    int peer = op->peer, kind = op->kind;
    op->x = NULL;
    pool_put(&s->ops, op);
    if (rc == -FI_ECANCELED) continue;
    return peer_error(s, peer, op_names[kind], fi_strerror((int)-rc));
  }
  return moecclSuccess;
}

/* ---- requests ----------------------------------------------------------------- */

static void xfer_maybe_free(ofi_state_t* s, ofi_xfer_t* x) {
  if (x->req || x->ops_out > 0) return;
  mr_put(x->mr);
  x->mr = NULL;
  pool_put(&s->xfers, x);
}

/* Takes x off its peer's write-data list, where it is. */
static void wd_unlink(ofi_state_t* s, ofi_xfer_t* x) {
  for (ofi_xfer_t** p = &s->peers[x->peer].wd_head; *p; p = &(*p)->next_wd)
    if (*p == x) {
      *p = x->next_wd;
      x->next_wd = NULL;
      return;
    }
}

static void complete(ofi_state_t* s, ofi_xfer_t* x) {
  moeccl_req_t* r = x->req;
  if (x->rma == CTS_RMA_WDATA && r->type == MOECCL_REQ_RECV) wd_unlink(s, x);
  x->req = NULL;
  s->peers[x->peer].pending--;
  r->done = 1;
  xfer_maybe_free(s, x);
}

static uint32_t count_chunks(size_t bytes, size_t chunk) {
  return (uint32_t)((bytes + chunk - 1) / chunk);
}

/* Whether the receiver asks for a message of this size in tagged pieces
 * although RMA works (tagged_min; the pair shares the provider). */
static int goes_tagged(const ofi_state_t* s, size_t bytes) {
  return s->tagged_min && bytes >= s->tagged_min;
}

/* Receiver: registers the receive buffer and puts its address and key in
 * the CTS. */
static moecclResult_t cts_rma_target(ofi_state_t* s, ofi_xfer_t* x) {
  moeccl_req_t* r = x->req;
  if (!x->mr) x->mr = mr_get(s, r->buf, r->bytes);
  if (!x->mr) return moeccl_error(s->comm, moecclSystemError, "ofi: registration failed");
  x->cts.key = fi_mr_key(x->mr->mr);
  x->cts.addr = (s->mr_mode & FI_MR_VIRT_ADDR) ? (uint64_t)(uintptr_t)r->buf
                                               : (uint64_t)((uintptr_t)r->buf - x->mr->addr);
  return moecclSuccess;
}

/* Receiver: x waits for write data, listed under its peer before the CTS
 * leaves (no write can come first). */
static void wd_list(ofi_state_t* s, ofi_xfer_t* x) {
  ofi_peer_t* pe = &s->peers[x->peer];
  x->cts.rma = x->rma = CTS_RMA_WDATA;
  x->completed = 0;
  x->next_wd = pe->wd_head;
  pe->wd_head = x;
}

/* Receiver: the size and pieces a rendezvous header announces. */
static void take_header(ofi_xfer_t* x, const rts_t* h) {
  x->msg_bytes = h->bytes, x->chunk = h->chunk ? h->chunk : 1;
  x->nchunks = count_chunks(x->msg_bytes, x->chunk);
}

/* Receiver: the CTS for a receive whose size is known goes at once (see
 * early CTS above); the header comes into x->rts_in. */
static moecclResult_t post_early(ofi_state_t* s, ofi_xfer_t* x) {
  x->cts = (cts_t){.status = CTS_OK, .posted = x->req->bytes};
  MOECCL_CHECK(cts_rma_target(s, x));
  wd_list(s, x);
  x->nchunks = UINT32_MAX; /* until the header tells; writes are counted meanwhile */
  MOECCL_CHECK(submit(s, OP_RTS_RECV, x, 0, -1));
  return submit(s, OP_CTS_SEND, x, 0, -1);
}

static moecclResult_t ofi_post(void* state, moeccl_req_t* r) {
  ofi_state_t* s = state;
  if (s->failed != moecclSuccess) return s->failed;
  ofi_peer_t* p = &s->peers[r->peer];
  if (!p->nch) return moecclInternalError;
  ofi_xfer_t* x = pool_get(s, &s->xfers, 1);
  if (!x) return moeccl_error(s->comm, moecclSystemError, "ofi: out of memory for requests");
  int send = r->type == MOECCL_REQ_SEND;
  *x = (ofi_xfer_t){.req = r, .peer = r->peer, .seq = send ? p->send_seq++ : p->recv_seq++};
  x->ch = (int)(x->seq % (uint64_t)p->nch);
  x->ctrl_desc = pool_desc(&s->xfers, x);
  r->aux = (uint64_t)(uintptr_t)x;
  r->progress = 0;
  p->pending++;
  if (s->mr_mode & FI_MR_LOCAL) {
    x->mr = mr_get(s, r->buf, r->bytes);
    if (!x->mr)
      return moeccl_error(s->comm, moecclSystemError, "ofi: no registration for %zu bytes",
                          r->bytes);
  }
  if (!send) {
    if (r->exact && r->bytes > p->eager && p->wdata && !goes_tagged(s, r->bytes))
      return post_early(s, x);
    return submit(s, OP_MSG_RECV, x, 0, -1);
  }
  if (r->bytes <= p->eager) return submit(s, OP_EAGER_SEND, x, 0, -1);
  x->msg_bytes = r->bytes;
  x->chunk = s->chunk;
  if (x->msg_bytes / x->chunk >= MAX_CHUNKS) x->chunk = x->msg_bytes / (MAX_CHUNKS - 1) + 1;
  x->nchunks = count_chunks(x->msg_bytes, x->chunk);
  x->rts_out = (rts_t){x->msg_bytes, x->chunk};
  MOECCL_CHECK(submit(s, OP_CTS_RECV, x, 0, -1));
  return submit(s, OP_RTS_SEND, x, 0, -1);
}

/* Keeps up to WINDOW chunk operations of x in flight. */
static moecclResult_t pump(ofi_state_t* s, ofi_xfer_t* x, int kind) {
  while (x->posted < x->nchunks && x->posted - x->completed < WINDOW)
    MOECCL_CHECK(submit(s, kind, x, x->posted++, -1));
  return moecclSuccess;
}

/* Sender: the receiver answered the rendezvous header. */
static moecclResult_t on_cts(ofi_state_t* s, ofi_xfer_t* x) {
  /* (an early CTS comes before the receiver saw the size: checked here) */
  if (x->cts.status == CTS_TRUNC || x->msg_bytes > x->cts.posted)
    return fail_keep(s, moeccl_comm_fail(s->comm, moecclInvalidUsage,
                                         "message to rank %d is %zu bytes but the receive posted "
                                         "for it is %llu bytes",
                                         x->peer, x->msg_bytes, (unsigned long long)x->cts.posted));
  if (x->cts.rma > CTS_RMA_WDATA) return peer_error(s, x->peer, "CTS receive", "malformed CTS");
  x->rma = (int)x->cts.rma;
  if (x->rma == CTS_TAGGED) return pump(s, x, OP_CHUNK_SEND);
  x->raddr = x->cts.addr, x->rkey = x->cts.key;
  if (!x->mr && (s->mr_mode & FI_MR_LOCAL)) x->mr = mr_get(s, x->req->buf, x->msg_bytes);
  return pump(s, x, OP_WRITE);
}

/* Receiver: a rendezvous header arrived in the receive buffer. */
static moecclResult_t on_rts(ofi_state_t* s, ofi_xfer_t* x, size_t got) {
  moeccl_req_t* r = x->req;
  rts_t h = {0, 0};
  if (got != sizeof(h)) return peer_error(s, x->peer, "receive", "malformed rendezvous header");
  memcpy(&h, r->buf, sizeof(h));
  take_header(x, &h);
  x->cts = (cts_t){.status = CTS_OK, .posted = r->bytes};
  if (h.bytes > r->bytes) {
    x->cts.status = CTS_TRUNC; /* lets the sender fail too instead of waiting */
    submit(s, OP_CTS_SEND, x, 0, -1);
    return truncated(s, x->peer, h.bytes, r->bytes);
  }
  ofi_peer_t* pe = &s->peers[x->peer];
  if (pe->rma && !goes_tagged(s, h.bytes)) {
    MOECCL_CHECK(cts_rma_target(s, x));
    if (pe->wdata) {
      wd_list(s, x);
    } else {
      x->cts.rma = CTS_RMA_FIN;
      MOECCL_CHECK(submit(s, OP_FIN_RECV, x, 0, -1));
    }
  } else {
    MOECCL_CHECK(pump(s, x, OP_CHUNK_RECV));
  }
  return submit(s, OP_CTS_SEND, x, 0, -1);
}

static int is_rts(const ofi_state_t* s, int peer, uint64_t flags, uint64_t data, uint64_t tag);

/* Receiver, early CTS: the rendezvous header (or, where the ranks disagree
 * on the call, a small message) arrived in x->rts_in. */
static moecclResult_t on_early_header(ofi_state_t* s, ofi_xfer_t* x, uint64_t flags,
                                      uint64_t data, uint64_t tag, size_t got) {
  moeccl_req_t* r = x->req;
  if (!is_rts(s, x->peer, flags, data, tag))
    return fail_keep(s, moeccl_comm_fail(s->comm, moecclInvalidUsage,
                                         "rank %d sent a message of %zu bytes where this rank's "
                                         "call receives %zu bytes from it (the ranks disagree on "
                                         "the call)",
                                         x->peer, got, r->bytes));
  rts_t h = x->rts_in;
  if (got != sizeof(h)) return peer_error(s, x->peer, "receive", "malformed rendezvous header");
  if (h.bytes > r->bytes) return truncated(s, x->peer, h.bytes, r->bytes);
  take_header(x, &h);
  if (x->completed < x->nchunks) return moecclSuccess;
  r->bytes = x->msg_bytes;
  complete(s, x);
  return moecclSuccess;
}

static moecclResult_t on_abort_notice(ofi_state_t* s) {
  abort_msg_t m = s->ctl.abort_in;
  int n = s->comm->nranks;
  MOECCL_CHECK(submit(s, OP_ABORT_RECV, NULL, 0, -1));
  if (m.culprit < 0 || m.culprit >= n) m.culprit = m.from;
  return fail_keep(s, moeccl_comm_peer_lost(s->comm, m.culprit,
                                            "rank %d died; communicator aborted (told by rank %d)",
                                            m.culprit, m.from));
}

/* A chunk operation finished: start the next, or finish the message. */
static moecclResult_t on_chunk(ofi_state_t* s, ofi_xfer_t* x, int kind) {
  x->completed++;
  if (x->completed < x->nchunks) return pump(s, x, kind);
  if (kind == OP_WRITE && x->rma != CTS_RMA_WDATA) return submit(s, OP_FIN_SEND, x, 0, -1);
  if (kind == OP_CHUNK_RECV) x->req->bytes = x->msg_bytes;
  complete(s, x);
  return moecclSuccess;
}

/* Receiver: a write carrying remote CQ data landed (data: make_wdata). */
static moecclResult_t on_wdata(ofi_state_t* s, uint64_t data) {
  uint64_t r = (data >> 32) & 0x7fffffffULL;
  uint32_t seq = (uint32_t)data;
  if (!(data & WDATA_MARK) || r >= (uint64_t)s->comm->nranks)
    return peer_error(s, -1, "an RMA write", "malformed remote completion data");
  ofi_xfer_t* x = s->peers[r].wd_head;
  while (x && (uint32_t)x->seq != seq) x = x->next_wd;
  if (!x) { /* its receive was cancelled (abort): nothing waits */
    INFO(NET, "ofi: write data for a message no receive waits for (rank %d, sequence %u)", (int)r,
         seq);
    return moecclSuccess;
  }
  if (++x->completed < x->nchunks) return moecclSuccess;
  x->req->bytes = x->msg_bytes;
  complete(s, x);
  return moecclSuccess;
}

/* A completion that is a peer's write with remote CQ data, not an
 * operation of ours: told by its flags, since providers fill op_context
 * differently (NULL, or 0x1 from libfabric 1.17's shm). */
static int is_remote_write(uint64_t flags) {
  return (flags & FI_REMOTE_WRITE) && (flags & FI_REMOTE_CQ_DATA);
}

/* Whether a data receive's completion is a rendezvous header. */
static int is_rts(const ofi_state_t* s, int peer, uint64_t flags, uint64_t data, uint64_t tag) {
  if (s->peers[peer].rts_data) return (flags & FI_REMOTE_CQ_DATA) && data == RTS_DATA;
  return (tag & TAG_RTS) != 0;
}

/* A successful completion of op. */
static moecclResult_t on_done(ofi_state_t* s, ofi_op_t* op, const struct fi_cq_tagged_entry* e) {
  ofi_xfer_t* x = op->x;
  if (op->kind == OP_ABORT_RECV) return on_abort_notice(s);
  if (op->kind == OP_ABORT_SEND) return s->aborts_out--, moecclSuccess;
  if (op->kind == OP_HELLO_SEND || op->kind == OP_HELLO_RECV) return s->hellos_out--, moecclSuccess;
  if (!x->req) return moecclSuccess; /* cancelled meanwhile */
  switch (op->kind) {
    case OP_EAGER_SEND:
    case OP_FIN_SEND: complete(s, x); return moecclSuccess;
    case OP_CTS_RECV: return on_cts(s, x);
    case OP_WRITE:
    case OP_CHUNK_SEND:
    case OP_CHUNK_RECV: return on_chunk(s, x, op->kind);
    case OP_MSG_RECV:
      if (is_rts(s, x->peer, e->flags, e->data, e->tag)) return on_rts(s, x, e->len);
      x->req->bytes = e->len;
      complete(s, x);
      return moecclSuccess;
    case OP_FIN_RECV:
      x->req->bytes = x->msg_bytes;
      complete(s, x);
      return moecclSuccess;
    case OP_RTS_RECV: return on_early_header(s, x, e->flags, e->data, e->tag, e->len);
    default: return moecclSuccess; /* RTS and CTS sends: nothing waits on them */
  }
}

static void op_release(ofi_state_t* s, ofi_op_t* op) {
  ofi_xfer_t* x = op->x;
  op->x = NULL; /* cancel_all scans the slabs: a free op names no request */
  pool_put(&s->ops, op);
  if (x) x->ops_out--, xfer_maybe_free(s, x);
}

/* An error completion: truncation, cancellation, or a lost peer. */
static moecclResult_t on_error(ofi_state_t* s) {
  struct fi_cq_err_entry err;
  memset(&err, 0, sizeof(err));
  ssize_t n = fi_cq_readerr(s->cq, &err, 0);
  if (n == -FI_EAGAIN) return moecclSuccess;
  if (n < 0) return peer_error(s, -1, "reading the completion queue", fi_strerror((int)-n));
  ofi_op_t* op = err.op_context;
  if (!op || (err.flags & FI_REMOTE_WRITE))
    return peer_error(s, -1, err.flags & FI_REMOTE_WRITE ? "a peer's RMA write" : "an operation",
                      fi_strerror(err.err));
  int kind = op->kind, peer = op->peer;
  ofi_xfer_t* x = op->x;
  size_t posted = x && x->req ? x->req->bytes : 0;
  int live = !x || x->req;
  if (kind == OP_ABORT_SEND) s->aborts_out--;
  if (kind == OP_HELLO_SEND || kind == OP_HELLO_RECV) s->hellos_out--;
  op_release(s, op);
  if (err.err == FI_ECANCELED || !live) return moecclSuccess;
  if (err.err == FI_ETRUNC && kind == OP_RTS_RECV)
    return fail_keep(s, moeccl_comm_fail(s->comm, moecclInvalidUsage,
                                         "rank %d sent a message the size of neither the receive "
                                         "(%zu bytes) nor a rendezvous header (the ranks disagree "
                                         "on the call)",
                                         peer, posted));
  if (err.err == FI_ETRUNC && kind == OP_MSG_RECV) {
    if (is_rts(s, peer, err.flags, err.data,
               err.tag)) { /* even the header did not fit: tell the waiting sender */
      x->cts = (cts_t){.status = CTS_TRUNC, .posted = posted};
      submit(s, OP_CTS_SEND, x, 0, -1);
    }
    return truncated(s, peer, 0, posted);
  }
  char text[256];
  snprintf(text, sizeof(text), "%s", fi_strerror(err.err));
  if (err.prov_errno)
    snprintf(text + strlen(text), sizeof(text) - strlen(text), " (%s)",
             fi_cq_strerror(s->cq, err.prov_errno, err.err_data, NULL, 0));
  if (kind == OP_ABORT_SEND) return moecclSuccess; /* best effort */
  return peer_error(s, peer, op_names[kind], text);
}

static moecclResult_t poll_cq(ofi_state_t* s, int* progressed) {
  struct fi_cq_tagged_entry e[CQ_BATCH];
  for (int handled = 0; handled < CQ_PASS_MAX;) {
    ssize_t n = fi_cq_read(s->cq, e, CQ_BATCH);
    if (n == -FI_EAGAIN) return moecclSuccess;
    if (n == -FI_EAVAIL) {
      *progressed = 1;
      MOECCL_CHECK(on_error(s));
      continue;
    }
    if (n < 0) return peer_error(s, -1, "reading the completion queue", fi_strerror((int)-n));
    *progressed = 1;
    for (ssize_t i = 0; i < n; i++) {
      if (is_remote_write(e[i].flags)) {
        MOECCL_CHECK(on_wdata(s, e[i].data));
        continue;
      }
      ofi_op_t* op = e[i].op_context;
      moecclResult_t rc = on_done(s, op, &e[i]);
      op_release(s, op);
      if (rc != moecclSuccess) return rc;
    }
    handled += (int)n;
  }
  return moecclSuccess;
}

static moecclResult_t ofi_progress(void* state, int* progressed) {
  ofi_state_t* s = state;
  if (s->failed != moecclSuccess) return s->failed;
  MOECCL_CHECK(poll_cq(s, progressed));
  return retry_backlog(s, progressed);
}

/* ---- waiting and liveness ------------------------------------------------------ */

static void ofi_arm(void* state) { (void)state; /* fi_trywait in wait() does the check */ }

static void ofi_wait(void* state, int64_t timeout_us) {
  ofi_state_t* s = state;
  if (s->wait_fd < 0 || s->backlog) {
    usleep((useconds_t)(timeout_us < 100 ? timeout_us : 100));
    return;
  }
  struct fid* fids[1] = {&s->cq->fid};
  if (fi_trywait(s->fabric, fids, 1) != FI_SUCCESS) return; /* completions are ready */
  struct pollfd pfd = {s->wait_fd, POLLIN, 0};
  poll(&pfd, 1, (int)((timeout_us + 999) / 1000));
}

/* The provider reports lost connections through completions; peers on this
 * host are also checked in /proc (cheap).  Silent remote peers are the
 * executor's MOECCL_TIMEOUT to catch. */
static moecclResult_t ofi_check_peers(void* state) {
  ofi_state_t* s = state;
  if (s->failed != moecclSuccess) return s->failed;
  moeccl_comm_t* c = s->comm;
  for (int p = 0; p < c->nranks; p++) {
    const moeccl_peer_info_t* pi = &c->peers[p];
    if (!s->peers[p].pending || pi->host_hash != c->peers[c->rank].host_hash) continue;
    if (!moeccl_process_alive(pi->pid, pi->pid_start))
      return fail_keep(s, moeccl_comm_peer_lost(c, p, "rank %d (pid %d on %s) died", p,
                                                (int)pi->pid, pi->hostname));
  }
  return moecclSuccess;
}

/* Sends the notice to every reachable peer but the culprit, then spends at
 * most ABORT_FLUSH_S driving the provider so the notices leave (a manual-
 * progress provider sends nothing unless polled). */
static void ofi_notify_abort(void* state, int culprit) {
  ofi_state_t* s = state;
  moeccl_comm_t* c = s->comm;
  s->ctl.abort_out = (abort_msg_t){culprit, c->rank};
  for (int p = 0; p < c->nranks; p++) {
    if (p == culprit || !s->peers[p].nch) continue;
    ofi_op_t* op = pool_get(s, &s->ops, 0);
    if (!op) return;
    *op = (ofi_op_t){.kind = OP_ABORT_SEND, .peer = p};
    ssize_t rc = issue(s, op);
    if (rc == 0) s->aborts_out++;
    else pool_put(&s->ops, op);
  }
  double end = moeccl_now() + ABORT_FLUSH_S;
  while (s->aborts_out > 0 && moeccl_now() < end) {
    struct fi_cq_tagged_entry e[CQ_BATCH];
    ssize_t n = fi_cq_read(s->cq, e, CQ_BATCH);
    for (ssize_t i = 0; i < n; i++) {
      if (is_remote_write(e[i].flags)) continue; /* the receives are being abandoned */
      ofi_op_t* op = e[i].op_context;
      if (op->kind == OP_ABORT_SEND) s->aborts_out--;
      op_release(s, op);
    }
    if (n == -FI_EAVAIL) on_error(s);
  }
}

/* Cancels what the provider holds for requests and forgets them; the
 * registrations of their buffers are closed so no late RMA write lands. */
static void ofi_cancel_all(void* state) {
  ofi_state_t* s = state;
  for (slab_t* sl = s->ops.slabs; sl; sl = sl->next)
    for (int i = 0; i < SLAB; i++) {
      ofi_op_t* op = (ofi_op_t*)(sl->items + (size_t)i * s->ops.size);
      if (op->x && op->x->req) fi_cancel(&s->ep[op->x->ch]->fid, op);
    }
  for (slab_t* sl = s->xfers.slabs; sl; sl = sl->next)
    for (int i = 0; i < SLAB; i++) {
      ofi_xfer_t* x = (ofi_xfer_t*)(sl->items + (size_t)i * s->xfers.size);
      if (!x->req) continue;
      x->req = NULL;
      mr_drop(x->mr);
      x->mr = NULL;
    }
  for (int p = 0; p < s->comm->nranks; p++) s->peers[p].pending = 0, s->peers[p].wd_head = NULL;
}

/* ---- setup ------------------------------------------------------------------------- */

/* What each rank publishes: its provider and its endpoints' names. */
typedef struct {
  int32_t ok, nch, rma, rts_data, wdata;
  uint64_t eager;
  char prov[32];
  uint32_t namelen[MAX_CH];
  char names[MAX_CH][NAME_MAX_BYTES];
} ofi_card_t;

static void ofi_fini(void* state) {
  ofi_state_t* s = state;
  if (!s) return;
  for (int c = 0; c < MAX_CH; c++)
    if (s->ep[c]) fi_close(&s->ep[c]->fid);
  for (int i = 0; i < MR_CACHE; i++)
    if (s->mrs[i].mr) fi_close(&s->mrs[i].mr->fid);
  if (s->ctl_mr) fi_close(&s->ctl_mr->fid);
  for (slab_t* sl = s->xfers.slabs; sl; sl = sl->next) /* registrations outside the cache */
    for (int i = 0; i < SLAB; i++) {
      ofi_xfer_t* x = (ofi_xfer_t*)(sl->items + (size_t)i * s->xfers.size);
      if (x->mr && x->mr->heap) mr_drop(x->mr), x->mr = NULL;
    }
  pool_free(&s->xfers);
  pool_free(&s->ops);
  if (s->av) fi_close(&s->av->fid);
  if (s->cq) fi_close(&s->cq->fid);
  if (s->domain) fi_close(&s->domain->fid);
  if (s->fabric) fi_close(&s->fabric->fid);
  if (s->info) fi_freeinfo(s->info);
  free(s->peers);
  free(s);
}

static moecclResult_t open_cq(ofi_state_t* s) {
  struct fi_cq_attr attr = {.format = FI_CQ_FORMAT_TAGGED, .wait_obj = FI_WAIT_FD, .size = 0};
  s->wait_fd = -1;
  if (fi_cq_open(s->domain, &attr, &s->cq, NULL) == 0) {
    if (fi_control(&s->cq->fid, FI_GETWAIT, &s->wait_fd) != 0) s->wait_fd = -1;
    return moecclSuccess;
  }
  attr.wait_obj = FI_WAIT_NONE;
  int rc = fi_cq_open(s->domain, &attr, &s->cq, NULL);
  return rc == 0 ? moecclSuccess : moecclSystemError;
}

static moecclResult_t open_ep(ofi_state_t* s, int c, ofi_card_t* card) {
  int rc = fi_endpoint(s->domain, s->info, &s->ep[c], NULL);
  if (rc == 0) rc = fi_ep_bind(s->ep[c], &s->av->fid, 0);
  if (rc == 0) rc = fi_ep_bind(s->ep[c], &s->cq->fid, FI_TRANSMIT | FI_RECV);
  if (rc == 0) rc = fi_enable(s->ep[c]);
  size_t len = NAME_MAX_BYTES;
  if (rc == 0) rc = fi_getname(&s->ep[c]->fid, card->names[c], &len);
  card->namelen[c] = (uint32_t)len;
  if (rc != 0) WARN(NET, "ofi: endpoint %d: %s", c, fi_strerror(-rc));
  return rc == 0 ? moecclSuccess : moecclSystemError;
}

/* Opens fabric, domain, CQ, AV and the channels' endpoints. */
static moecclResult_t open_local(ofi_state_t* s, ofi_card_t* card) {
  struct fi_info* i = s->info;
  struct fi_av_attr av_attr = {.type = FI_AV_TABLE};
  if (fi_fabric(i->fabric_attr, &s->fabric, NULL) || fi_domain(s->fabric, i, &s->domain, NULL) ||
      open_cq(s) != moecclSuccess || fi_av_open(s->domain, &av_attr, &s->av, NULL))
    return moecclSystemError;
  for (int c = 0; c < s->nch; c++) MOECCL_CHECK(open_ep(s, c, card));
  if (s->mr_mode & FI_MR_LOCAL) MOECCL_CHECK(mr_register(s, &s->ctl, sizeof(s->ctl), &s->ctl_mr));
  return moecclSuccess;
}

/* Local settings from the parameters and the chosen provider's limits. */
static void configure(ofi_state_t* s) {
  struct fi_info* i = s->info;
  s->mr_mode = i->domain_attr->mr_mode;
  s->rma = (i->caps & FI_RMA) && !s->rma_disabled && !(s->mr_mode & FI_MR_RAW);
  s->max_msg = i->ep_attr->max_msg_size ? i->ep_attr->max_msg_size : (size_t)1 << 30;
  s->eager = moeccl_param_size("MOECCL_NET_EAGER_SIZE");
  if (s->eager < sizeof(rts_t)) s->eager = sizeof(rts_t);
  if (s->eager > s->max_msg) s->eager = s->max_msg;
  s->chunk = moeccl_param_size("MOECCL_NET_CHUNK_SIZE");
  if (s->chunk < 4096) s->chunk = 4096;
  if (s->chunk > s->max_msg) s->chunk = s->max_msg;
  int64_t nch = moeccl_param_int("MOECCL_NET_NCHANNELS");
  s->nch = nch < 1 ? 1 : nch > MAX_CH ? MAX_CH : (int)nch;
  if (s->mr_mode & FI_MR_ENDPOINT) s->nch = 1; /* a registration binds to one endpoint */
  /* Providers that register without pinning cannot hold a stale mapping. */
  const char* p = i->fabric_attr->prov_name;
  s->pins = !(strstr(p, "tcp") || strstr(p, "sockets") || strstr(p, "shm") || strstr(p, "udp") ||
              strstr(p, "net"));
  s->delivery_complete = 1;
  s->rts_data = i->domain_attr->cq_data_size > 0;
  /* Over tcp;ofi_rxm a large tagged message goes by rxm's own rendezvous,
   * the receiver reading from the sender, which beat writes from 1 MiB
   * (2 ranks, a2a_perf -M, per rank: 2 MiB 382-422 us against 474-505; 4
   * MiB 707-734 against 922-1036; 8 MiB 1,717-1,757 against 1,920-2,200)
   * but not below (512 KiB: 82-116 us against 68-98).  Not over the
   * native TCP provider ("net", or "tcp" alone from libfabric 1.18), whose
   * tagged messages have no such rendezvous. */
  s->tagged_min = strstr(p, "tcp") && strstr(p, "ofi_rxm") ? TCP_TAGGED_MIN : 0;
  s->wdata = s->rma && i->domain_attr->cq_data_size >= sizeof(uint64_t) &&
             !moeccl_param_bool("MOECCL_OFI_WRITEDATA_DISABLE");
}

static moecclResult_t connect_peers(ofi_state_t* s, const uint8_t* use, const ofi_card_t* cards,
                                    const ofi_card_t* mine) {
  moeccl_comm_t* c = s->comm;
  for (int p = 0; p < c->nranks; p++) {
    if (!use[p]) continue;
    const ofi_card_t* o = &cards[p];
    if (!o->ok)
      return moeccl_error(c, moecclSystemError, "ofi: rank %d (%s) could not start libfabric", p,
                          c->peers[p].hostname);
    if (strcmp(o->prov, mine->prov) != 0)
      return moeccl_error(c, moecclSystemError,
                          "ofi: rank %d (%s) uses provider %s, this rank uses %s", p,
                          c->peers[p].hostname, o->prov, mine->prov);
    ofi_peer_t* pe = &s->peers[p];
    pe->nch = o->nch < s->nch ? o->nch : s->nch;
    pe->rma = o->rma && s->rma;
    pe->rts_data = o->rts_data && s->rts_data;
    pe->wdata = pe->rma && o->wdata && s->wdata;
    pe->eager = o->eager < s->eager ? (size_t)o->eager : s->eager;
    for (int ch = 0; ch < pe->nch; ch++)
      if (fi_av_insert(s->av, o->names[ch], 1, &pe->addr[ch], 0, NULL) != 1)
        return moeccl_error(c, moecclSystemError, "ofi: cannot insert rank %d's address (%s)", p,
                            c->peers[p].hostname);
  }
  return moecclSuccess;
}

/* Connects every pair before any data flows: the lower rank sends a hello,
 * the higher one waits for it.  tcp;ofi_rxm connects lazily and mishandles
 * two ranks connecting to each other at once (connect() fails with
 * EADDRNOTAVAIL, and messages were seen lost); one connector per pair avoids
 * that.  Both ranks of a pair see each other's card ok, so neither waits on
 * a rank that gave up. */
static moecclResult_t wire_up(ofi_state_t* s, const uint8_t* use) {
  moeccl_comm_t* c = s->comm;
  for (int p = 0; p < c->nranks; p++)
    if (use[p]) {
      MOECCL_CHECK(submit(s, p > c->rank ? OP_HELLO_SEND : OP_HELLO_RECV, NULL, 0, p));
      s->hellos_out++;
    }
  double deadline = moeccl_now() + c->timeout;
  while (s->hellos_out > 0) {
    int moved = 0;
    MOECCL_CHECK(ofi_progress(s, &moved));
    if (moved) continue;
    if (moeccl_now() > deadline)
      return moeccl_error(c, moecclTimeout, "ofi: connecting to the other ranks timed out");
    ofi_wait(s, 1000);
  }
  return moecclSuccess;
}

static moecclResult_t start_local(moeccl_comm_t* comm, ofi_state_t* s, ofi_card_t* card) {
  const char* why;
  s->info = choose_info(!s->rma_disabled, &why);
  if (!s->info) {
    WARN(NET,
         "ofi: no libfabric provider offers reliable tagged messaging (MOECCL_OFI_PROVIDER=%s)",
         moeccl_param_str("MOECCL_OFI_PROVIDER"));
    return moecclSystemError;
  }
  configure(s);
  s->peers = calloc((size_t)comm->nranks, sizeof(*s->peers));
  if (!s->peers) return moecclSystemError;
  s->xfers.size = sizeof(ofi_xfer_t);
  s->ops.size = sizeof(ofi_op_t);
  MOECCL_CHECK(open_local(s, card));
  card->nch = s->nch;
  card->rma = s->rma;
  card->rts_data = s->rts_data;
  card->wdata = s->wdata;
  card->eager = s->eager;
  snprintf(card->prov, sizeof(card->prov), "%s", s->info->fabric_attr->prov_name);
  INFO(NET,
       "rank %d: ofi provider %s (fabric %s, domain %s), chosen by %s; %s; %d channel(s), "
       "eager %zu, chunk %zu, wait %s",
       comm->rank, card->prov, s->info->fabric_attr->name, s->info->domain_attr->name, why,
       s->rma && s->wdata ? "large messages by RMA write with remote CQ data"
       : s->rma           ? "large messages by RMA write, then FIN"
       : s->rma_disabled  ? "RMA disabled (MOECCL_OFI_RMA_DISABLE): large messages in tagged chunks"
                          : "no FI_RMA: large messages in tagged chunks",
       s->nch, s->eager, s->chunk, s->wait_fd >= 0 ? "fd" : "sleep");
  return moecclSuccess;
}

/* Allgathers one flag; *all_ok when every rank's is set. */
static moecclResult_t agree_all(moeccl_comm_t* comm, int mine, int* all_ok) {
  int32_t* v = calloc((size_t)comm->nranks, sizeof(*v));
  if (!v) return moecclSystemError;
  v[comm->rank] = mine;
  moecclResult_t rc = moeccl_bootstrap_allgather(comm->boot, v, sizeof(*v));
  *all_ok = rc == moecclSuccess;
  for (int r = 0; r < comm->nranks && *all_ok; r++) *all_ok = v[r] != 0;
  free(v);
  return rc;
}

static moecclResult_t ofi_init(moeccl_comm_t* comm, const uint8_t* use, int needed, void** state) {
  *state = NULL;
  if (!needed) return moecclSuccess;
  /* Without memory for the exchange this rank cannot take part: the others'
   * allgather then fails on their deadline. */
  ofi_card_t* cards = calloc((size_t)comm->nranks, sizeof(*cards));
  if (!cards) return moecclSystemError;
  ofi_state_t* s = calloc(1, sizeof(*s));
  moecclResult_t rc = s ? moecclSuccess : moecclSystemError;
  if (rc == moecclSuccess) {
    s->comm = comm;
    s->wait_fd = -1;
    s->rma_disabled = moeccl_param_bool("MOECCL_OFI_RMA_DISABLE");
    rc = start_local(comm, s, &cards[comm->rank]);
    cards[comm->rank].ok = rc == moecclSuccess;
  }
  /* Every rank takes part in the exchange, failed or not (ok = 0 marks it). */
  moecclResult_t brc = moeccl_bootstrap_allgather(comm->boot, cards, sizeof(*cards));
  if (rc == moecclSuccess) rc = brc;
  for (int p = 0; p < comm->nranks && rc == moecclSuccess; p++)
    if (!cards[p].ok) /* every rank sees this: all give up alike */
      rc = moeccl_error(comm, moecclSystemError, "ofi: rank %d (%s) could not start libfabric", p,
                        comm->peers[p].hostname);
  if (rc == moecclSuccess) rc = connect_peers(s, use, cards, &cards[comm->rank]);
  /* A second exchange, after every rank filled its AV: a message from a
   * rank not yet in the receiver's AV would never match a directed receive.
   * It also lets every rank see whether all could insert their peers. */
  if (brc == moecclSuccess) {
    int all_ok = 0;
    moecclResult_t arc = agree_all(comm, rc == moecclSuccess, &all_ok);
    if (rc == moecclSuccess && (arc != moecclSuccess || !all_ok))
      rc = arc != moecclSuccess ? arc : moecclSystemError;
  }
  if (rc == moecclSuccess) rc = wire_up(s, use);
  if (rc == moecclSuccess) rc = submit(s, OP_ABORT_RECV, NULL, 0, -1);
  free(cards);
  if (rc != moecclSuccess) {
    ofi_fini(s);
    return rc;
  }
  *state = s;
  return moecclSuccess;
}

/* Reached through the proxy moeccl_ofi_ops of libmoeccl (ofi_load.c), which
 * holds the name and link costs and checks that caps and mem_types match. */
const moeccl_transport_ops_t moeccl_net_module_ops = {
    .name = "ofi",
    .caps = MOECCL_TRANSPORT_CAP_NETWORK,
    .mem_types = MOECCL_MEM_TYPE_HOST,
    .score = ofi_score,
    .can_reach = ofi_can_reach,
    .init = ofi_init,
    .post = ofi_post,
    .progress = ofi_progress,
    .arm = ofi_arm,
    .wait = ofi_wait,
    .check_peers = ofi_check_peers,
    .notify_abort = ofi_notify_abort,
    .cancel_all = ofi_cancel_all,
    .fini = ofi_fini,
};
