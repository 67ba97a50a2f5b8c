/* Communicators: init from a unique id, split, destroy, abort, queries. */
#include "comm/bootstrap.h"
#include "comm/comm.h"
#include "device/device.h"
#include "exec/enqueue.h"
#include "exec/executor.h"
#include "plan/plan.h"
#include "base/param.h"
#include "transport/transport.h"
#include "tune/tuner.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

/* CMA probe target: peers read this word from our address space at init. */
static const uint64_t cma_probe_word = 0x6d6f6563636c2121ULL;
const uint64_t* moeccl_cma_probe_word(void) { return &cma_probe_word; }

MOECCL_EXPORT moecclResult_t moecclGetVersion(int* version) {
  if (!version)
    return moeccl_error(NULL, moecclInvalidArgument, "moecclGetVersion: version is NULL");
  *version = MOECCL_VERSION_CODE;
  return moecclSuccess;
}

/* The environment checked against the table (param.c): a bad value of a
 * variable that fails creation stops it here, naming the variable. */
/* The environment's values, and a device backend asked for by name that
 * cannot run here: an error naming why, as configure's --with-X. */
static moecclResult_t check_env(const char* fn) {
  char why[320];
  if (moeccl_param_validate(why, sizeof(why)) != 0)
    return moeccl_error(NULL, moecclInvalidArgument, "%s: %s", fn, why);
  const char* dev = moeccl_param_device();
  const char* refused = dev && strcasecmp(dev, "cuda") == 0 ? moeccl_device_refusal() : NULL;
  if (refused)
    return moeccl_error(NULL, moecclSystemError, "%s: MOECCL_DEVICE=%s, but %s", fn, dev, refused);
  return moecclSuccess;
}

MOECCL_EXPORT moecclResult_t moecclGetUniqueId(moecclUniqueId* uniqueId) {
  moeccl_param_init();
  MOECCL_CHECK(check_env("moecclGetUniqueId"));
  if (!uniqueId)
    return moeccl_error(NULL, moecclInvalidArgument, "moecclGetUniqueId: uniqueId is NULL");
  return moeccl_bootstrap_unique_id(uniqueId);
}

static void comm_free(moeccl_comm_t* comm) {
  if (!comm) return;
  moeccl_comm_unregister(comm);
  moeccl_transports_fini(comm);
  moeccl_bootstrap_close(comm->boot);
  moeccl_plan_cache_free(comm);
  moeccl_tuner_fini(comm);
  free(comm->reqs);
  free(comm->scratch);
  if (comm->dev_scratch) moeccl_device()->free(comm->dev_scratch);
  for (int i = 0; i < comm->ndev_scratch_old; i++) moeccl_device()->free(comm->dev_scratch_old[i]);
  free(comm->dev_scratch_old);
  free(comm->staging);
  if (comm->dev_staging) moeccl_device()->free(comm->dev_staging);
  moeccl_exec_terms_free(comm);
  free(comm->redops);
  free(comm->peers);
  free(comm->local_ranks);
  free(comm->peer_local_index);
  for (int k = 0; k < MOECCL_MEM_NKINDS; k++) free(comm->peer_transport[k]);
  free(comm->peer_stream_transport);
  pthread_mutex_destroy(&comm->lock);
  pthread_mutex_destroy(&comm->order_lock);
  pthread_cond_destroy(&comm->order_cond);
  comm->magic = 0;
  free(comm);
}

static void fill_self_info(moeccl_peer_info_t* self, int rank) {
  memset(self, 0, sizeof(*self));
  self->rank = rank;
  self->pid = (int32_t)getpid();
  self->pid_start = moeccl_pid_start_time(getpid());
  self->host_hash = moeccl_host_hash(self->hostname, sizeof(self->hostname));
  self->machine_hash = moeccl_machine_hash();
  self->cma_probe_addr = (uint64_t)(uintptr_t)moeccl_cma_probe_word();
  moeccl_cpu_mask(self->cpu_mask);
}

static moecclResult_t comm_alloc(int rank, int nranks, const uint8_t secret[MOECCL_SECRET_BYTES],
                                 moeccl_comm_t** out) {
  moeccl_comm_t* c = calloc(1, sizeof(*c));
  if (!c) return moecclSystemError;
  c->magic = MOECCL_COMM_MAGIC;
  c->rank = rank;
  c->nranks = nranks;
  memcpy(c->secret, secret, MOECCL_SECRET_BYTES);
  c->nonce = moeccl_secret_tag(secret);
  c->timeout = moeccl_param_timeout();
  c->failed_peer = -1;
  pthread_mutex_init(&c->lock, NULL);
  pthread_mutex_init(&c->order_lock, NULL);
  pthread_cond_init(&c->order_cond, NULL);
  c->peers = calloc((size_t)nranks, sizeof(*c->peers));
  if (!c->peers || moeccl_plan_cache_create(c) != moecclSuccess)
    return comm_free(c), moecclSystemError;
  moeccl_comm_register(c);
  *out = c;
  return moecclSuccess;
}

static void apply_config(moeccl_comm_t* c, const moecclConfig_t* config) {
  /* The forced algorithms (MOECCL_ALGO and the like) are the tuner's:
   * moeccl_tuner_init reads them (tune/forced.c). */
  if (config && config->commName) snprintf(c->name, sizeof(c->name), "%s", config->commName);
}

/* Everything after the peer table is known: node layout and transports. */
static moecclResult_t comm_finish_init(moeccl_comm_t* c, const moecclConfig_t* config) {
  apply_config(c, config);
  moecclResult_t rc = moeccl_comm_setup_node(c);
  if (rc == moecclSuccess) rc = moeccl_transports_init(c);
  if (rc == moecclSuccess) rc = moeccl_tuner_init(c);
  if (rc != moecclSuccess) {
    /* A rank lost during setup: the bootstrap's text names it; a layer's
     * own wrapping ("transport failed to start") would hide it. */
    moecclResult_t brc = moeccl_bootstrap_error(c->boot);
    return brc != moecclSuccess ? brc : rc;
  }
  INFO(INIT, "comm %p %s rank %d nranks %d nonce %016llx local rank %d of %d - init done", (void*)c,
       c->name, c->rank, c->nranks, (unsigned long long)c->nonce, c->local_rank, c->nlocal);
  return moecclSuccess;
}

static moecclResult_t check_config(moeccl_comm_t* comm, const moecclConfig_t* config) {
  if (!config) return moecclSuccess;
  if (config->magic != MOECCL_CONFIG_MAGIC ||
      config->size < offsetof(moecclConfig_t, cgaClusterSize))
    return moeccl_error(
        comm, moecclInvalidArgument,
        "config: not initialised with MOECCL_CONFIG_INITIALIZER (bad magic or size)");
  return moecclSuccess;
}

MOECCL_EXPORT moecclResult_t moecclCommInitRankConfig(moecclComm_t* comm, int nranks,
                                                      moecclUniqueId commId, int rank,
                                                      moecclConfig_t* config) {
  moeccl_param_init();
  MOECCL_CHECK(check_env("moecclCommInitRank"));
  if (!comm) return moeccl_error(NULL, moecclInvalidArgument, "moecclCommInitRank: comm is NULL");
  if (nranks <= 0)
    return moeccl_error(NULL, moecclInvalidArgument, "moecclCommInitRank: nranks %d must be > 0",
                        nranks);
  if (rank < 0 || rank >= nranks)
    return moeccl_error(NULL, moecclInvalidArgument,
                        "moecclCommInitRank: rank %d out of range [0,%d)", rank, nranks);
  MOECCL_CHECK(check_config(NULL, config));
  uint8_t secret[MOECCL_SECRET_BYTES];
  moecclResult_t idrc = moeccl_bootstrap_id_secret(&commId, secret);
  if (idrc == moecclInvalidUsage)
    return moeccl_error(NULL, moecclInvalidUsage,
                        "moecclCommInitRank: commId was made by another version of moeccl than "
                        "this one (%d.%d.%d); every rank must run the same version",
                        MOECCL_MAJOR, MOECCL_MINOR, MOECCL_PATCH);
  if (idrc != moecclSuccess)
    return moeccl_error(NULL, moecclInvalidArgument,
                        "moecclCommInitRank: commId is not an id from moecclGetUniqueId");
  moeccl_comm_t* c;
  MOECCL_CHECK(comm_alloc(rank, nranks, secret, &c));
  memset(secret, 0, sizeof(secret));
  moeccl_peer_info_t self;
  fill_self_info(&self, rank);
  moecclResult_t rc =
      moeccl_bootstrap_init(&commId, rank, nranks, c->timeout, &self, c->peers, &c->boot);
  if (rc == moecclSuccess) rc = comm_finish_init(c, config);
  if (rc != moecclSuccess) {
    /* A rank died while this one set up: peers that finished setting up
     * before it did may already wait in a call on this rank; the
     * transports' abort tells them at once, naming the dead rank. */
    int dead = moeccl_bootstrap_dead(c->boot);
    if (dead >= 0) moeccl_transports_notify_abort(c, dead);
    comm_free(c);
    return rc;
  }
  *comm = c;
  return moecclSuccess;
}

MOECCL_EXPORT moecclResult_t moecclCommInitRank(moecclComm_t* comm, int nranks,
                                                moecclUniqueId commId, int rank) {
  return moecclCommInitRankConfig(comm, nranks, commId, rank, NULL);
}

typedef struct {
  int32_t color, key, old_rank, pad;
  moeccl_sockaddr_t listen_addr;
} split_entry_t;

static int split_cmp(const void* a, const void* b) {
  const split_entry_t *x = a, *y = b;
  if (x->key != y->key) return x->key < y->key ? -1 : 1;
  return x->old_rank - y->old_rank;
}

/* Members of color in new-rank order; returns their count. */
static int split_members(const split_entry_t* all, int n, int color, split_entry_t* out) {
  int m = 0;
  for (int i = 0; i < n; i++)
    if (all[i].color == color) out[m++] = all[i];
  qsort(out, (size_t)m, sizeof(*out), split_cmp);
  return m;
}

static moecclResult_t split_build(moeccl_comm_t* parent, const split_entry_t* members, int m,
                                  int listen_fd, const moecclConfig_t* config,
                                  moeccl_comm_t** out) {
  int me = 0;
  while (members[me].old_rank != parent->rank) me++;
  uint8_t secret[MOECCL_SECRET_BYTES];
  moeccl_secret_split(parent->secret, (uint64_t)parent->split_count, members[0].color, secret);
  moeccl_comm_t* c;
  MOECCL_CHECK(comm_alloc(me, m, secret, &c));
  memset(secret, 0, sizeof(secret));
  for (int i = 0; i < m; i++) {
    c->peers[i] = parent->peers[members[i].old_rank];
    c->peers[i].rank = i;
    c->peers[i].listen_addr = members[i].listen_addr;
  }
  int* old_ranks = malloc(sizeof(int) * (size_t)m);
  if (!old_ranks) return close(listen_fd), comm_free(c), moecclSystemError;
  for (int i = 0; i < m; i++) old_ranks[i] = members[i].old_rank;
  c->parent_topo = parent->topo, c->parent_ranks = old_ranks;
  moecclResult_t rc =
      moeccl_bootstrap_ring(c->secret, me, m, c->timeout, listen_fd, c->peers, &c->boot);
  if (rc == moecclSuccess) rc = comm_finish_init(c, config);
  c->parent_topo = NULL, c->parent_ranks = NULL;
  free(old_ranks);
  if (rc != moecclSuccess) return comm_free(c), rc;
  *out = c;
  return moecclSuccess;
}

MOECCL_EXPORT moecclResult_t moecclCommSplit(moecclComm_t comm, int color, int key,
                                             moecclComm_t* newcomm, moecclConfig_t* config) {
  MOECCL_CHECK(moeccl_comm_check(comm, "comm"));
  if (!newcomm)
    return moeccl_error(comm, moecclInvalidArgument, "moecclCommSplit: newcomm is NULL");
  if (color < 0 && color != MOECCL_SPLIT_NOCOLOR)
    return moeccl_error(comm, moecclInvalidArgument,
                        "moecclCommSplit: color %d must be >= 0 or MOECCL_SPLIT_NOCOLOR", color);
  MOECCL_CHECK(check_config(comm, config));
  int n = comm->nranks;
  split_entry_t* all = calloc((size_t)n, sizeof(*all));
  split_entry_t* members = calloc((size_t)n, sizeof(*members));
  int listen_fd = -1;
  moecclResult_t rc = all && members ? moecclSuccess : moecclSystemError;
  moeccl_sockaddr_t addr = comm->peers[comm->rank].listen_addr;
  addr.sin.sin_port = 0; /* same family field position for v4 and v6 */
  if (rc == moecclSuccess && color != MOECCL_SPLIT_NOCOLOR)
    rc = moeccl_bootstrap_listen(&addr, &listen_fd);
  if (rc == moecclSuccess) {
    all[comm->rank] = (split_entry_t){color, key, comm->rank, 0, addr};
    moeccl_comm_wait_turn(comm, moeccl_comm_issue(comm, 1)); /* after operations issued before it */
    pthread_mutex_lock(&comm->lock);
    rc = moeccl_bootstrap_allgather(comm->boot, all, sizeof(*all));
    comm->split_count++;
    pthread_mutex_unlock(&comm->lock);
    moeccl_comm_retire(comm, 1);
  }
  *newcomm = NULL;
  if (rc == moecclSuccess && color != MOECCL_SPLIT_NOCOLOR) {
    int m = split_members(all, n, color, members);
    rc = split_build(comm, members, m, listen_fd, config, newcomm);
    listen_fd = -1; /* owned by the new bootstrap now */
  }
  if (listen_fd >= 0) close(listen_fd);
  free(all);
  free(members);
  if (rc != moecclSuccess)
    return moeccl_error(comm, rc, "moecclCommSplit failed: %s", moecclGetErrorString(rc));
  return moecclSuccess;
}

/* A message a network transport reported sent may still sit in its
 * provider's queue or socket when the endpoint closes, and be lost there
 * (ofi's tcp provider: the receiver then waits for ever; seen once in
 * about 16 runs of mh_correctness's NOCOLOR split, a 44-byte message).  So
 * destroying a healthy communicator that has a network transport waits
 * until every rank has reached destroy, that is, has completed all its
 * calls and so received everything sent to it.  As NCCL's, destroy is then
 * a collective: every rank must call it, in the same order as its other
 * communicators'.  A broken or aborted communicator skips the wait. */
static void flush_network(moeccl_comm_t* comm) {
  int network = 0;
  for (int t = 0; t < comm->ntransports; t++)
    network |= (comm->transport_ops[t]->caps & MOECCL_TRANSPORT_CAP_NETWORK) != 0;
  if (!network || comm->aborting || comm->async_error != moecclSuccess) return;
  moecclResult_t rc = moeccl_bootstrap_barrier(comm->boot);
  if (rc != moecclSuccess)
    WARN(INIT,
         "rank %d: moecclCommDestroy: not every rank reached destroy (%s); messages to them "
         "still in flight may be lost",
         comm->rank, moecclGetErrorString(rc));
}

MOECCL_EXPORT moecclResult_t moecclCommDestroy(moecclComm_t comm) {
  if (!comm) return moecclSuccess; /* as NCCL: destroying NULL is a no-op */
  MOECCL_CHECK(moeccl_comm_check(comm, "comm"));
  moeccl_comm_drain(comm); /* operations queued on host streams finish first */
  flush_network(comm);
  comm_free(comm);
  return moecclSuccess;
}

MOECCL_EXPORT moecclResult_t moecclCommAbort(moecclComm_t comm) {
  if (!comm) return moecclSuccess;
  MOECCL_CHECK(moeccl_comm_check(comm, "comm"));
  comm->aborting = 1; /* queued work fails at once, running work stops waiting */
  moeccl_comm_drain(comm);
  comm_free(comm);
  return moecclSuccess;
}

MOECCL_EXPORT moecclResult_t moecclCommCount(const moecclComm_t comm, int* count) {
  MOECCL_CHECK(moeccl_comm_check(comm, "comm"));
  if (!count) return moeccl_error(comm, moecclInvalidArgument, "moecclCommCount: count is NULL");
  *count = comm->nranks;
  return moecclSuccess;
}

MOECCL_EXPORT moecclResult_t moecclCommUserRank(const moecclComm_t comm, int* rank) {
  MOECCL_CHECK(moeccl_comm_check(comm, "comm"));
  if (!rank) return moeccl_error(comm, moecclInvalidArgument, "moecclCommUserRank: rank is NULL");
  *rank = comm->rank;
  return moecclSuccess;
}

MOECCL_EXPORT moecclResult_t moecclCommGetAsyncError(moecclComm_t comm,
                                                     moecclResult_t* asyncError) {
  MOECCL_CHECK(moeccl_comm_check(comm, "comm"));
  if (!asyncError)
    return moeccl_error(comm, moecclInvalidArgument, "moecclCommGetAsyncError: asyncError is NULL");
  *asyncError = comm->async_error;
  return moecclSuccess;
}
