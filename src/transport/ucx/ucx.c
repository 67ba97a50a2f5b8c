/*
 * UCX transport: peers reached through UCP tagged messages, host memory.
 *
 * One UCP context and one worker per communicator (so communicators driven
 * by different threads share nothing).  Every SEND and RECV is one
 * ucp_tag_send_nbx / ucp_tag_recv_nbx; UCX picks eager or rendezvous per
 * size.  The tag is [kind | source rank | per-pair sequence] and receives use
 * the full mask, so messages of a pair match in posting order whatever order
 * UCX delivers them in.  UCX_* variables the user sets pass through to UCX
 * untouched; moeccl gives defaults only to unset ones (here and ucx_load.c).
 *
 * Built as the module moeccl_net_ucx.so (net_module.h), which libmoeccl
 * loads only when a communicator needs UCX (ucx_load.c): loading UCX runs
 * its library constructors, which install signal handlers.
 *
 * Failures: endpoints use peer error handling; the error callback records
 * the peer, and progress() fails the communicator once a request waits on
 * it.  An abort notice (its own tag kind, carrying the culprit's rank) tells
 * peers that wait on other ranks to stop.
 */
#include "transport/net_module.h"

#include <dirent.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <ucp/api/ucp.h>
#include <unistd.h>

/* Tag layout: 4 bits kind, 20 bits source rank, 40 bits sequence. */
#define TAG_SEQ_BITS 40
#define TAG_RANK_BITS 20
#define TAG_SEQ_MASK ((UINT64_C(1) << TAG_SEQ_BITS) - 1)
#define TAG_RANK_MASK ((UINT64_C(1) << TAG_RANK_BITS) - 1)
#define TAG_KIND_SHIFT (TAG_SEQ_BITS + TAG_RANK_BITS)
#define TAG_KIND_MASK (UINT64_C(0xf) << TAG_KIND_SHIFT)
enum { KIND_DATA = 1, KIND_ABORT = 2 };

#define ADDR_MAX 4096        /* largest worker address we exchange */
#define PROGRESS_BURST 64    /* ucp_worker_progress calls per progress() */
#define FINI_BUDGET_S 0.2    /* how long fini may progress closes and flushes */
#define NOTIFY_BUDGET_S 0.01 /* how long notify_abort progresses its sends */

typedef struct ucx_state ucx_state_t;

/* Lives in the user area of every UCP request this transport starts
 * (UCP_PARAM_FIELD_REQUEST_SIZE).  UCX may run a request's callback inside
 * the very *_nbx call that starts it, before the caller has seen the handle:
 * kind is 0 (UREQ_FRESH, set by request_init and again before every free)
 * until the caller takes the handle, and a callback that finds it still
 * fresh marks it UREQ_EARLY and leaves the free to the caller. */
enum { UREQ_FRESH = 0, UREQ_DATA = 1, UREQ_ABORT_RECV = 2, UREQ_ORPHAN = 3, UREQ_EARLY = 4 };
typedef struct {
  int kind;
  int index; /* in state->inflight */
  moeccl_req_t* req;
} ureq_t;

typedef struct {
  ucx_state_t* s;
  int rank;
  ucp_ep_h ep;
  uint64_t send_seq, recv_seq;
  int inflight;          /* requests posted to or from this peer, not done */
  ucs_status_t ep_error; /* first endpoint error, UCS_OK while healthy */
} ucx_peer_t;

struct ucx_state {
  moeccl_comm_t* comm;
  ucp_context_h ctx;
  ucp_worker_h worker;
  int efd;
  ucx_peer_t* peers; /* by comm rank */
  ureq_t** inflight; /* UCP requests this transport still owns */
  int ninflight, cap;
  int completed; /* something completed since progress() last said so */
  /* First request failure seen by a callback, reported by progress(). */
  int fail_peer;
  ucs_status_t fail_status;
  size_t trunc_bytes; /* > 0: the failure was a truncated receive of this size */
  /* Abort notices: one wildcard receive of the culprit's rank. */
  ureq_t* abort_ureq;
  int32_t abort_in, abort_out;
  int abort_from, abort_culprit; /* -1 until a notice arrived */
};

/* ---- helpers ------------------------------------------------------------ */

static uint64_t make_tag(int kind, int rank, uint64_t seq) {
  return ((uint64_t)kind << TAG_KIND_SHIFT) | (((uint64_t)rank & TAG_RANK_MASK) << TAG_SEQ_BITS) |
         (seq & TAG_SEQ_MASK);
}

/* The transports a context opened, as "tcp/eth0 posix/memory ...", taken
 * from ucp_context_print_info (the API has no structured query for them). */
static void context_resources(ucp_context_h ctx, char* out, size_t len) {
  char* text = NULL;
  size_t n = 0;
  out[0] = '\0';
  FILE* f = open_memstream(&text, &n);
  if (!f) return;
  ucp_context_print_info(ctx, f);
  fclose(f);
  size_t used = 0;
  for (char* line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
    char* tl = strstr(line, "resource") ? strstr(line, "-- ") : NULL;
    if (!tl) continue;
    int w = snprintf(out + used, len - used, "%s%s", used ? " " : "", tl + 3);
    if (w < 0 || (size_t)w >= len - used) break;
    used += (size_t)w;
  }
  free(text);
}

/* Whether the resource list names an RDMA transport (verbs-based rc, ud, dc). */
static int has_rdma(const char* resources) {
  static const char* const prefixes[] = {"rc", "ud", "dc", "ib"};
  for (const char* p = resources; *p;) {
    for (size_t i = 0; i < sizeof(prefixes) / sizeof(prefixes[0]); i++)
      if (strncmp(p, prefixes[i], 2) == 0) return 1;
    p = strchr(p, ' ');
    if (!p) break;
    p++;
  }
  return 0;
}

static void ureq_init(void* request) { memset(request, 0, sizeof(ureq_t)); }

/* Returns a request to UCX in the state request_init gave it. */
static void ureq_release(ureq_t* u) {
  memset(u, 0, sizeof(*u));
  ucp_request_free(u);
}

/* Whether this node has an RDMA device (InfiniBand, RoCE, iWARP): UCX
 * then has zero-copy rendezvous worth starting early. */
static int have_rdma_device(void) {
  DIR* d = opendir("/sys/class/infiniband");
  if (!d) return 0;
  int found = 0;
  for (struct dirent* e; !found && (e = readdir(d)) != NULL;) found = e->d_name[0] != '.';
  closedir(d);
  return found;
}

/* moeccl's defaults for UCX settings the user did not set (a UCX_* variable
 * always wins).  TCP segments: UCX's 8K default sends an all-to-all's large
 * blocks in many small writes; 64K/256K measured faster at 4-16 MiB per
 * rank over tcp here (a2a_perf, 2 ranks).  Transport-level settings do not
 * take effect through ucp_config_modify, so they go into this process's
 * environment, which ucp_config_read reads; setenv never overwrites. */
static void set_defaults_once(void) {
  setenv("UCX_TCP_TX_SEG_SIZE", "64k", 0);
  setenv("UCX_TCP_RX_SEG_SIZE", "256k", 0);
  /* Without one, messages below 512 KiB go eager: over TCP, UCX's
   * rendezvous costs more than the copy it saves there (2 ranks as 2
   * nodes, a2a_perf -M, 10 interleaved runs, ratio to MPI: 256 KiB per
   * rank 0.70-1.05x -> 1.12-1.53x, 512 KiB 0.70-0.89x -> 0.96-1.04x; 1-4
   * MiB, 4 ranks and moe_perf unchanged). */
  if (!have_rdma_device()) setenv("UCX_RNDV_THRESH", "512k", 0);
  /* UCX's posix shared memory creates a named file in /dev/shm and
   * unlinks it only after writing it whole: a rank killed meanwhile (say
   * during init) leaves it there for good, and nobody else knows its name.
   * moeccl reaches the ranks of a node through its own shm transport, so
   * UCX needs none of its own; without posix, UCX takes sysv segments,
   * removed as soon as they are attached, for ranks it still finds on one
   * machine (MOECCL_HOSTID, MOECCL_SHM_DISABLE). */
  setenv("UCX_TLS", "^posix", 0);
}

/* Once per process: setenv must not race with another thread's getenv. */
static void apply_defaults(void) {
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  pthread_once(&once, set_defaults_once);
}

static ucs_status_t open_context(ucp_context_h* ctx, uint64_t features, int nranks) {
  apply_defaults();
  ucp_config_t* config;
  ucs_status_t st = ucp_config_read(NULL, NULL, &config);
  if (st != UCS_OK) return st;
  ucp_params_t params = {
      .field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_REQUEST_SIZE |
                    UCP_PARAM_FIELD_REQUEST_INIT | UCP_PARAM_FIELD_MT_WORKERS_SHARED |
                    UCP_PARAM_FIELD_ESTIMATED_NUM_EPS,
      .features = features,
      .request_size = sizeof(ureq_t),
      .request_init = ureq_init,
      .mt_workers_shared = 0,
      .estimated_num_eps = (size_t)(nranks > 0 ? nranks : 1),
  };
  st = ucp_init(&params, config, ctx);
  ucp_config_release(config);
  return st;
}

/* ---- score and reach ---------------------------------------------------- */

static pthread_once_t score_once = PTHREAD_ONCE_INIT;
static int score_value;

static void compute_score(void) {
  ucp_context_h ctx;
  if (open_context(&ctx, UCP_FEATURE_TAG, 1) != UCS_OK) return;
  char res[1024];
  context_resources(ctx, res, sizeof(res));
  ucp_cleanup(ctx);
  score_value = has_rdma(res) ? 2 : 1;
  INFO(NET, "ucx: resources %s (score %d)", res, score_value);
}

static int ucx_score(void) {
  pthread_once(&score_once, compute_score);
  return score_value;
}

static int ucx_can_reach(const moeccl_comm_t* comm, int peer) {
  (void)comm, (void)peer;
  return 1;
}

/* ---- request bookkeeping ------------------------------------------------ */

static int track(ucx_state_t* s, ureq_t* u) {
  if (s->ninflight == s->cap) {
    int cap = s->cap ? 2 * s->cap : 64;
    ureq_t** p = realloc(s->inflight, sizeof(*p) * (size_t)cap);
    if (!p) return -1;
    s->inflight = p, s->cap = cap;
  }
  u->index = s->ninflight;
  s->inflight[s->ninflight++] = u;
  return 0;
}

static void untrack(ucx_state_t* s, ureq_t* u) {
  ureq_t* last = s->inflight[--s->ninflight];
  s->inflight[u->index] = last;
  last->index = u->index;
}

static void record_failure(ucx_state_t* s, int peer, ucs_status_t st, size_t trunc_bytes) {
  if (s->fail_peer >= 0) return; /* the first cause stays */
  s->fail_peer = peer, s->fail_status = st, s->trunc_bytes = trunc_bytes;
}

static void finish(ucx_state_t* s, moeccl_req_t* r, ucs_status_t st, size_t length) {
  s->peers[r->peer].inflight--;
  s->completed = 1;
  if (st == UCS_OK) {
    if (r->type == MOECCL_REQ_RECV) r->bytes = length; /* a shorter message completes it */
    r->done = 1;
  } else if (st != UCS_ERR_CANCELED) {
    record_failure(s, r->peer, st, st == UCS_ERR_MESSAGE_TRUNCATED ? r->bytes : 0);
  }
}

/* Completion of a data request; user_data is its moeccl request, whose aux
 * holds the state.  Runs inside ucp_worker_progress, ucp_request_cancel, or
 * the *_nbx call that started it. */
static void data_done(ureq_t* u, ucs_status_t st, const ucp_tag_recv_info_t* info,
                      moeccl_req_t* r) {
  if (u->kind == UREQ_ORPHAN) { /* cancelled after a failure: r is not ours any more */
    ureq_release(u);
    return;
  }
  ucx_state_t* s = (ucx_state_t*)(uintptr_t)r->aux;
  finish(s, r, st, info ? info->length : 0);
  if (u->kind == UREQ_FRESH) {
    u->kind = UREQ_EARLY;
    return;
  }
  untrack(s, u);
  ureq_release(u);
}

static void send_cb(void* request, ucs_status_t st, void* user_data) {
  data_done(request, st, NULL, user_data);
}

static void recv_cb(void* request, ucs_status_t st, const ucp_tag_recv_info_t* info,
                    void* user_data) {
  data_done(request, st, info, user_data);
}

/* Completion of the wildcard receive of abort notices; user_data: state. */
static void abort_cb(void* request, ucs_status_t st, const ucp_tag_recv_info_t* info,
                     void* user_data) {
  ureq_t* u = request;
  if (u->kind == UREQ_ORPHAN) {
    ureq_release(u);
    return;
  }
  ucx_state_t* s = user_data;
  if (st == UCS_OK && s->abort_culprit < 0) {
    s->abort_from = (int)((info->sender_tag >> TAG_SEQ_BITS) & TAG_RANK_MASK);
    s->abort_culprit = s->abort_in;
  }
  if (u->kind == UREQ_FRESH) {
    u->kind = UREQ_EARLY;
    return;
  }
  s->abort_ureq = NULL;
  ureq_release(u);
}

static void ep_error_cb(void* arg, ucp_ep_h ep, ucs_status_t st) {
  ucx_peer_t* p = arg;
  (void)ep;
  if (p->ep_error == UCS_OK) p->ep_error = st;
}

/* ---- setup -------------------------------------------------------------- */

static moecclResult_t open_worker(ucx_state_t* s) {
  moeccl_comm_t* comm = s->comm;
  ucs_status_t st = open_context(&s->ctx, UCP_FEATURE_TAG | UCP_FEATURE_WAKEUP, comm->nranks);
  if (st != UCS_OK) {
    s->ctx = NULL;
    return moeccl_error(comm, moecclSystemError, "ucx: ucp_init failed: %s", ucs_status_string(st));
  }
  ucp_worker_params_t wp = {.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE,
                            .thread_mode = UCS_THREAD_MODE_SINGLE};
  st = ucp_worker_create(s->ctx, &wp, &s->worker);
  if (st != UCS_OK) {
    s->worker = NULL;
    return moeccl_error(comm, moecclSystemError, "ucx: ucp_worker_create failed: %s",
                        ucs_status_string(st));
  }
  /* Without an event fd wait() naps instead of sleeping on events. */
  if (ucp_worker_get_efd(s->worker, &s->efd) != UCS_OK) s->efd = -1;
  char res[1024];
  context_resources(s->ctx, res, sizeof(res));
  INFO(NET, "rank %d: ucx worker on %s%s", comm->rank, res,
       s->efd < 0 ? " (no wakeup fd: polling)" : "");
  return moecclSuccess;
}

/* Per rank: ok flag and address length, then the addresses at a common
 * stride.  Every rank makes both calls, whatever happened locally. */
typedef struct {
  int32_t ok;
  uint32_t len;
} addr_info_t;

static moecclResult_t exchange_addresses(ucx_state_t* s, int ok, char** all, size_t* stride,
                                         addr_info_t** infos) {
  moeccl_comm_t* comm = s->comm;
  ucp_address_t* addr = NULL;
  size_t len = 0;
  if (ok && ucp_worker_get_address(s->worker, &addr, &len) != UCS_OK) ok = 0, addr = NULL;
  if (len > ADDR_MAX) ok = 0;
  *all = NULL, *stride = 0;
  addr_info_t* info = *infos = calloc((size_t)comm->nranks, sizeof(*info));
  moecclResult_t rc = moecclSystemError; /* without the table this rank cannot take part */
  if (info) {
    info[comm->rank] = (addr_info_t){ok, ok ? (uint32_t)len : 0};
    rc = moeccl_bootstrap_allgather(comm->boot, info, sizeof(*info));
  }
  size_t max = 0;
  for (int r = 0; rc == moecclSuccess && r < comm->nranks; r++)
    if (info[r].len > max) max = info[r].len;
  if (rc == moecclSuccess && max > 0) { /* every rank computed the same max */
    char* buf = *all = calloc((size_t)comm->nranks, max);
    if (!buf) rc = moecclSystemError;
    else {
      if (ok) memcpy(buf + (size_t)comm->rank * max, addr, len);
      rc = moeccl_bootstrap_allgather(comm->boot, buf, max);
      *stride = max;
    }
  }
  if (addr) ucp_worker_release_address(s->worker, addr);
  return rc;
}

static moecclResult_t connect_peers(ucx_state_t* s, const uint8_t* use, const char* addrs,
                                    size_t stride, const addr_info_t* info) {
  moeccl_comm_t* comm = s->comm;
  for (int p = 0; p < comm->nranks; p++) {
    if (!use[p]) continue;
    if (!info[p].ok)
      return moeccl_error(comm, moecclSystemError, "ucx: rank %d (%s) could not start UCX", p,
                          comm->peers[p].hostname);
    ucp_ep_params_t ep = {
        .field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                      UCP_EP_PARAM_FIELD_ERR_HANDLER,
        .address = (const ucp_address_t*)(addrs + (size_t)p * stride),
        .err_mode = UCP_ERR_HANDLING_MODE_PEER,
        .err_handler = {.cb = ep_error_cb, .arg = &s->peers[p]},
    };
    ucs_status_t st = ucp_ep_create(s->worker, &ep, &s->peers[p].ep);
    if (st != UCS_OK) {
      s->peers[p].ep = NULL;
      return moeccl_error(comm, moecclSystemError, "ucx: endpoint to rank %d (%s) failed: %s", p,
                          comm->peers[p].hostname, ucs_status_string(st));
    }
  }
  return moecclSuccess;
}

static void post_abort_recv(ucx_state_t* s) {
  ucp_request_param_t prm = {
      .op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA |
                      UCP_OP_ATTR_FIELD_MEMORY_TYPE | UCP_OP_ATTR_FLAG_NO_IMM_CMPL,
      .cb.recv = abort_cb,
      .user_data = s,
      .memory_type = UCS_MEMORY_TYPE_HOST,
  };
  void* h = ucp_tag_recv_nbx(s->worker, &s->abort_in, sizeof(s->abort_in),
                             make_tag(KIND_ABORT, 0, 0), TAG_KIND_MASK, &prm);
  if (UCS_PTR_IS_PTR(h) && ((ureq_t*)h)->kind == UREQ_EARLY) {
    ureq_release(h); /* a notice was already there: recorded, no need to listen on */
  } else if (UCS_PTR_IS_PTR(h)) {
    s->abort_ureq = h;
    s->abort_ureq->kind = UREQ_ABORT_RECV;
    s->abort_ureq->index = -1;
  } else {
    WARN(NET, "ucx: cannot receive abort notices: %s", ucs_status_string(UCS_PTR_STATUS(h)));
  }
}

static void ucx_fini(void* state);

static moecclResult_t ucx_init(moeccl_comm_t* comm, const uint8_t* use, int needed, void** state) {
  *state = NULL;
  if (!needed) return moecclSuccess;
  ucx_state_t* s = calloc(1, sizeof(*s));
  ucx_peer_t* peers = calloc((size_t)comm->nranks, sizeof(*peers));
  int ok = s && peers;
  if (ok) {
    s->comm = comm, s->peers = peers, s->efd = -1;
    s->fail_peer = s->abort_from = s->abort_culprit = -1;
    for (int p = 0; p < comm->nranks; p++) peers[p] = (ucx_peer_t){.s = s, .rank = p};
    ok = open_worker(s) == moecclSuccess;
  }
  ucx_state_t dummy = {.comm = comm}; /* takes part in the exchange when allocation failed */
  char* addrs = NULL;
  size_t stride = 0;
  addr_info_t* info = NULL;
  moecclResult_t rc = exchange_addresses(s && peers ? s : &dummy, ok, &addrs, &stride, &info);
  if (rc == moecclSuccess && !ok) rc = moecclSystemError;
  if (rc == moecclSuccess) rc = connect_peers(s, use, addrs, stride, info);
  free(addrs);
  free(info);
  if (!s || !peers) return free(s), free(peers), moecclSystemError;
  if (rc != moecclSuccess) return ucx_fini(s), rc;
  post_abort_recv(s);
  *state = s;
  return moecclSuccess;
}

/* ---- data path ---------------------------------------------------------- */

static moecclResult_t ucx_post(void* state, moeccl_req_t* r) {
  ucx_state_t* s = state;
  ucx_peer_t* p = &s->peers[r->peer];
  if (!p->ep) return moecclInternalError;
  ucp_tag_recv_info_t info = {0};
  r->aux = (uint64_t)(uintptr_t)s; /* data_done finds the state through r */
  ucp_request_param_t prm = {
      .op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA |
                      UCP_OP_ATTR_FIELD_DATATYPE | UCP_OP_ATTR_FIELD_MEMORY_TYPE,
      .user_data = r,
      .datatype = ucp_dt_make_contig(1),
      .memory_type = UCS_MEMORY_TYPE_HOST,
  };
  void* h;
  p->inflight++;
  if (r->type == MOECCL_REQ_SEND) {
    r->seq = p->send_seq++;
    prm.cb.send = send_cb;
    h = ucp_tag_send_nbx(p->ep, r->buf, r->bytes, make_tag(KIND_DATA, s->comm->rank, r->seq), &prm);
  } else {
    r->seq = p->recv_seq++;
    /* The callback reports the received length; an immediate completion
     * may leave recv_info unset (seen here: length 0), which a reducing
     * receive staged by the executor relies on. */
    prm.op_attr_mask |= UCP_OP_ATTR_FIELD_RECV_INFO | UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
    prm.cb.recv = recv_cb;
    prm.recv_info.tag_info = &info;
    h = ucp_tag_recv_nbx(s->worker, r->buf, r->bytes, make_tag(KIND_DATA, r->peer, r->seq),
                         UINT64_MAX, &prm);
  }
  if (!UCS_PTR_IS_PTR(h)) { /* completed (or failed) at once: progress() reports it */
    finish(s, r, UCS_PTR_STATUS(h), info.length);
    return moecclSuccess;
  }
  ureq_t* u = h;
  if (u->kind == UREQ_EARLY) { /* its callback already ran inside the call */
    ureq_release(u);
    return moecclSuccess;
  }
  u->kind = UREQ_DATA;
  u->req = r;
  if (track(s, u) != 0) {
    u->kind = UREQ_ORPHAN;
    p->inflight--;
    ucp_request_cancel(s->worker, u);
    return moeccl_error(s->comm, moecclSystemError, "ucx: out of memory for requests");
  }
  return moecclSuccess;
}

/* A request that failed (its callback recorded why) fails the communicator
 * at once: the request can never complete. */
static moecclResult_t report_requests(ucx_state_t* s) {
  moeccl_comm_t* c = s->comm;
  int p = s->fail_peer;
  if (p < 0) return moecclSuccess;
  if (s->trunc_bytes)
    return moeccl_comm_fail(
        c, moecclInvalidUsage,
        "message from rank %d is longer than the %zu-byte receive posted for it", p,
        s->trunc_bytes);
  return moeccl_comm_peer_lost(c, p, "rank %d (%s) unreachable over ucx: %s", p,
                               c->peers[p].hostname, ucs_status_string(s->fail_status));
}

/* Endpoint errors and abort notices are reported only once this rank is
 * idle (check_peers): data a peer sent before it died may still be arriving,
 * and an operation that can complete must not fail because another rank
 * aborted meanwhile. */
static moecclResult_t report_peers(ucx_state_t* s) {
  moeccl_comm_t* c = s->comm;
  /* An endpoint error matters only for a peer this rank waits on: one that
   * finished and exited is no failure. */
  for (int p = 0; p < c->nranks; p++)
    if (s->peers[p].ep_error != UCS_OK && s->peers[p].inflight > 0)
      return moeccl_comm_peer_lost(c, p, "rank %d (%s) unreachable over ucx: %s", p,
                                   c->peers[p].hostname, ucs_status_string(s->peers[p].ep_error));
  if (s->abort_culprit >= 0 && s->abort_culprit < c->nranks)
    return moeccl_comm_peer_lost(c, s->abort_culprit,
                                 "rank %d died; communicator aborted (told by rank %d)",
                                 s->abort_culprit, s->abort_from);
  return moecclSuccess;
}

static moecclResult_t ucx_progress(void* state, int* progressed) {
  ucx_state_t* s = state;
  /* Only completions of moeccl requests count as progress: UCX's own traffic
   * (keepalives) must not keep MOECCL_TIMEOUT from firing on a hung peer. */
  for (int i = 0; i < PROGRESS_BURST && ucp_worker_progress(s->worker); i++) {
  }
  if (s->completed) *progressed = 1, s->completed = 0;
  return report_requests(s);
}

static void ucx_arm(void* state) { (void)state; /* ucp_worker_arm in wait() does it */ }

static void ucx_wait(void* state, int64_t timeout_us) {
  ucx_state_t* s = state;
  if (s->efd < 0) {
    usleep((useconds_t)(timeout_us < 1000 ? timeout_us : 1000));
    return;
  }
  ucs_status_t st = ucp_worker_arm(s->worker);
  if (st == UCS_ERR_BUSY) return; /* events pending: progress again */
  if (st != UCS_OK) {
    usleep(100);
    return;
  }
  struct pollfd pfd = {.fd = s->efd, .events = POLLIN};
  poll(&pfd, 1, (int)((timeout_us + 999) / 1000));
}

/* Same-host peers this rank waits on are checked in /proc as well: UCX's
 * shared-memory transports may notice a dead peer only after long. */
static moecclResult_t ucx_check_peers(void* state) {
  ucx_state_t* s = state;
  moeccl_comm_t* c = s->comm;
  MOECCL_CHECK(report_requests(s));
  MOECCL_CHECK(report_peers(s));
  uint64_t host = c->peers[c->rank].host_hash;
  for (int p = 0; p < c->nranks; p++) {
    const moeccl_peer_info_t* pi = &c->peers[p];
    if (!s->peers[p].inflight || pi->host_hash != host) continue;
    if (!moeccl_process_alive(pi->pid, pi->pid_start))
      return moeccl_comm_peer_lost(c, p, "rank %d (pid %d on %s) died", p, (int)pi->pid,
                                   pi->hostname);
  }
  return moecclSuccess;
}

static void progress_for(ucx_state_t* s, double seconds) {
  double end = moeccl_now() + seconds;
  while (moeccl_now() < end)
    if (!ucp_worker_progress(s->worker)) usleep(10);
}

static void ucx_notify_abort(void* state, int culprit) {
  ucx_state_t* s = state;
  s->abort_out = culprit;
  ucp_request_param_t prm = {
      .op_attr_mask = UCP_OP_ATTR_FIELD_MEMORY_TYPE,
      .memory_type = UCS_MEMORY_TYPE_HOST,
  };
  int sent = 0;
  for (int p = 0; p < s->comm->nranks; p++) {
    ucx_peer_t* peer = &s->peers[p];
    if (!peer->ep || p == culprit || peer->ep_error != UCS_OK) continue;
    void* h = ucp_tag_send_nbx(peer->ep, &s->abort_out, sizeof(s->abort_out),
                               make_tag(KIND_ABORT, s->comm->rank, 0), &prm);
    /* Without a callback UCX frees the request itself once it completes. */
    if (UCS_PTR_IS_PTR(h)) ucp_request_free(h);
    sent++;
  }
  if (sent) progress_for(s, NOTIFY_BUDGET_S);
}

/* Cancels what can be cancelled; whatever UCX still holds becomes an orphan
 * whose completion only frees it, so the caller's requests are free. */
static void ucx_cancel_all(void* state) {
  ucx_state_t* s = state;
  for (int i = s->ninflight - 1; i >= 0; i--) {
    ureq_t* u = s->inflight[i];
    u->kind = UREQ_ORPHAN;
    u->req = NULL;
    ucp_request_cancel(s->worker, u);
  }
  s->ninflight = 0;
  for (int p = 0; p < s->comm->nranks; p++) s->peers[p].inflight = 0;
}

/* Closes every endpoint; a healthy communicator first flushes (bounded) so
 * the last protocol messages peers wait for (rendezvous acks) leave. */
static void close_endpoints(ucx_state_t* s) {
  double deadline = moeccl_now() + FINI_BUDGET_S;
  ucp_request_param_t prm = {.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS};
  if (s->comm->async_error == moecclSuccess) {
    void* f = ucp_worker_flush_nbx(s->worker, &prm);
    while (UCS_PTR_IS_PTR(f) && ucp_request_check_status(f) == UCS_INPROGRESS &&
           moeccl_now() < deadline)
      ucp_worker_progress(s->worker);
    if (UCS_PTR_IS_PTR(f)) ucp_request_free(f);
  }
  prm.flags = UCP_EP_CLOSE_FLAG_FORCE;
  int n = s->comm->nranks;
  void** closing = calloc((size_t)n, sizeof(*closing));
  for (int p = 0; p < n; p++) {
    if (!s->peers[p].ep) continue;
    void* h = ucp_ep_close_nbx(s->peers[p].ep, &prm);
    s->peers[p].ep = NULL;
    if (!UCS_PTR_IS_PTR(h)) continue;
    if (closing) closing[p] = h;
    else ucp_request_free(h);
  }
  for (int p = 0; closing && p < n; p++) {
    while (closing[p] && ucp_request_check_status(closing[p]) == UCS_INPROGRESS &&
           moeccl_now() < deadline)
      ucp_worker_progress(s->worker);
    if (closing[p]) ucp_request_free(closing[p]);
  }
  free(closing);
}

static void ucx_fini(void* state) {
  ucx_state_t* s = state;
  if (!s) return;
  if (s->worker) {
    ucx_cancel_all(s);
    if (s->abort_ureq)
      s->abort_ureq->kind = UREQ_ORPHAN, ucp_request_cancel(s->worker, s->abort_ureq);
    s->abort_ureq = NULL;
    close_endpoints(s);
    /* After a peer was lost, UCX 1.13's worker teardown can spin for ever in
     * a blocking send to a peer behind a cut link (uct_tcp_ep_destroy).
     * fini must not wait on peers: leave the worker and context to process
     * exit instead. */
    if (s->comm->async_error != moecclSuccess) {
      INFO(NET, "ucx: communicator failed; its UCX worker is left to process exit");
      s->worker = NULL, s->ctx = NULL;
    } else {
      ucp_worker_destroy(s->worker);
    }
  }
  if (s->ctx) ucp_cleanup(s->ctx);
  free(s->inflight);
  free(s->peers);
  free(s);
}

/* What the links between nodes cost (transport.h: query), fitted over
 * kernel TCP as tuner.c says.  UCX picks eager or rendezvous per message
 * itself (UCX_RNDV_THRESH: set_defaults_once): the model prices none. */
static moecclResult_t ucx_query(void* state, const moeccl_comm_t* comm,
                                moeccl_transport_attr_t* out) {
  (void)state, (void)comm;
  *out = moeccl_transport_attr_of(&moeccl_net_module_ops);
  out->latency_us = 5.0, out->overhead_us = 4.5, out->bw_GBps = 1.0;
  return moecclSuccess;
}

/* Reached through the proxy moeccl_ucx_ops of libmoeccl (ucx_load.c), which
 * checks that the name, caps and mem_types match. */
const moeccl_transport_ops_t moeccl_net_module_ops = {
    .name = "ucx",
    .caps = MOECCL_TRANSPORT_CAP_NETWORK,
    .mem_types = MOECCL_MEM_TYPE_HOST,
    .score = ucx_score,
    .can_reach = ucx_can_reach,
    .init = ucx_init,
    .query = ucx_query,
    .post = ucx_post,
    .progress = ucx_progress,
    .arm = ucx_arm,
    .wait = ucx_wait,
    .check_peers = ucx_check_peers,
    .notify_abort = ucx_notify_abort,
    .cancel_all = ucx_cancel_all,
    .fini = ucx_fini,
};
