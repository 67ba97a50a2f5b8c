/*
 * Transport selection.  Shared memory takes the peers on this rank's node
 * (unless MOECCL_SHM_DISABLE=1); one network transport takes the rest.
 * MOECCL_NET names it (ofi, ucx) or leaves the choice to the ranks' summed
 * scores (auto).  Every init is collective, and every outcome is agreed by
 * an allgather, so all ranks fall back the same way.  That choice is the
 * host-memory one; another memory kind (mem.h) goes to the same transport
 * where its ops->mem_types has the kind, else nowhere (a call with such a
 * buffer is refused before it sends anything).  Device memory also goes,
 * per peer, to a stream transport that reaches it (init_stream).  Once
 * they are started, the tuner asks here which transport carries each class
 * of link and what it reports (moeccl_transport_attr).
 */
#include "transport/transport.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "comm/bootstrap.h"
#include "device/device.h"
#include "base/param.h"

/* On equal scores the earlier one wins: ucx, whose tcp path measured about
 * twice as fast as libfabric's tcp;ofi_rxm for small messages here; a fabric
 * only libfabric drives (cxi) scores higher and wins anyway. */
static const moeccl_transport_ops_t* const net_transports[] = {
#ifdef MOECCL_TRANSPORT_UCX
    &moeccl_ucx_ops,
#endif
#ifdef MOECCL_TRANSPORT_OFI
    &moeccl_ofi_ops,
#endif
    NULL,
};
#define NNET ((int)(sizeof(net_transports) / sizeof(net_transports[0])) - 1)

/* Every rank's value of `mine`; returns the sum, or -1 if the exchange failed.
 * *all_ok is set when every rank contributed a non-zero value. */
static long agree(moeccl_comm_t* comm, int32_t mine, int* all_ok) {
  int32_t* v = calloc((size_t)comm->nranks, sizeof(*v));
  if (!v) return -1;
  v[comm->rank] = mine;
  long sum = -1;
  if (moeccl_bootstrap_allgather(comm->boot, v, sizeof(*v)) == moecclSuccess) {
    sum = 0;
    *all_ok = 1;
    for (int r = 0; r < comm->nranks; r++) sum += v[r], *all_ok &= v[r] != 0;
  }
  free(v);
  return sum;
}

/* The peer tables hold transport indices in a byte, 0xff for none. */
_Static_assert(MOECCL_MAX_TRANSPORTS < 0xff, "transport indices must fit the peer tables");

/* Adds a started transport and gives it the peers marked in use[] in
 * table (the host-memory one, or the stream one). */
static void add_transport(moeccl_comm_t* comm, const moeccl_transport_ops_t* ops, void* state,
                          const uint8_t* use, uint8_t* table) {
  int t = comm->ntransports++;
  comm->transport_ops[t] = ops;
  comm->transport_state[t] = state;
  int count = 0;
  for (int p = 0; p < comm->nranks; p++)
    if (use[p]) table[p] = (uint8_t)t, count++;
  if (ops->caps & MOECCL_TRANSPORT_CAP_STREAM)
    INFO(INIT, "rank %d: transport %s lowers device calls with %d peer(s)", comm->rank, ops->name,
         count);
  else if (count)
    INFO(INIT, "rank %d: transport %s reaches %d peer(s)", comm->rank, ops->name, count);
}

/* Runs one transport's collective init and agrees on the outcome.  Returns
 * 1 when every rank succeeded (the transport is added, with the peers in
 * use[] in table), 0 when some rank failed (all ranks free their state), -1
 * when the ranks lost each other, -2 when the communicator has
 * MOECCL_MAX_TRANSPORTS already (every rank alike: before init). */
static int try_transport(moeccl_comm_t* comm, const moeccl_transport_ops_t* ops, const uint8_t* use,
                         int needed, uint8_t* table) {
  if (comm->ntransports >= MOECCL_MAX_TRANSPORTS) return -2;
  void* state = NULL;
  moecclResult_t rc = ops->init(comm, use, needed, &state);
  int all_ok = 0;
  if (agree(comm, rc == moecclSuccess, &all_ok) < 0) {
    if (state) ops->fini(state);
    return -1;
  }
  if (!all_ok) {
    if (state) ops->fini(state);
    if (comm->rank == 0) WARN(INIT, "transport %s failed to start on some rank", ops->name);
    return 0;
  }
  if (state) add_transport(comm, ops, state, use, table);
  return 1;
}

/* try_transport's -2 as the communicator's error. */
static moecclResult_t too_many(moeccl_comm_t* comm, const moeccl_transport_ops_t* ops) {
  return moeccl_error(comm, moecclInternalError,
                      "transport %s: a communicator starts at most %d transports "
                      "(MOECCL_MAX_TRANSPORTS, comm.h)",
                      ops->name, MOECCL_MAX_TRANSPORTS);
}

/* Whether two ranks of one host exist: shared memory is needed somewhere. */
static int shm_needed(const moeccl_comm_t* comm) {
  for (int a = 0; a < comm->nranks; a++)
    for (int b = a + 1; b < comm->nranks; b++)
      if (comm->peers[a].host_hash == comm->peers[b].host_hash) return 1;
  return 0;
}

/* Whether some pair of ranks needs the network. */
static int net_needed(const moeccl_comm_t* comm, int shm_disabled) {
  for (int r = 1; r < comm->nranks; r++)
    if (shm_disabled || comm->peers[r].host_hash != comm->peers[0].host_hash) return 1;
  return 0;
}

/* The network transports to try, best first: the one MOECCL_NET names, or
 * all of them ordered by the ranks' summed scores. */
static int net_candidates(moeccl_comm_t* comm, const moeccl_transport_ops_t** out) {
  const char* want = moeccl_param_net();
  int n = 0;
  if (want && *want && strcasecmp(want, "auto") != 0) {
    for (int i = 0; i < NNET; i++)
      if (strcasecmp(want, net_transports[i]->name) == 0) out[n++] = net_transports[i];
    return n;
  }
  long score[8] = {0};
  for (int i = 0; i < NNET; i++) {
    int ok = 0;
    long sc = agree(comm, net_transports[i]->score(), &ok);
    if (sc < 0) return -1; /* the ranks lost each other */
    if (ok && sc > 0) score[n] = sc, out[n++] = net_transports[i];
  }
  for (int i = 1; i < n; i++) /* insertion sort by score, stable */
    for (int j = i; j > 0 && score[j] > score[j - 1]; j--) {
      const moeccl_transport_ops_t* t = out[j];
      long sc = score[j];
      out[j] = out[j - 1], score[j] = score[j - 1];
      out[j - 1] = t, score[j - 1] = sc;
    }
  return n;
}

/* The setup exchange failed: the bootstrap's error names the rank lost. */
static moecclResult_t lost_contact(moeccl_comm_t* comm) {
  moecclResult_t rc = moeccl_bootstrap_error(comm->boot);
  if (rc != moecclSuccess) return rc;
  return moeccl_error(comm, moecclRemoteError,
                      "transport setup: lost contact with the other ranks");
}

static moecclResult_t init_network(moeccl_comm_t* comm, uint8_t* use, int shm_disabled) {
  int n = comm->nranks, needed = net_needed(comm, shm_disabled);
  for (int p = 0; p < n; p++)
    use[p] = p != comm->rank && comm->peer_transport[MOECCL_MEM_HOST][p] == 0xff;
  const moeccl_transport_ops_t* cands[8];
  int ncands = needed ? net_candidates(comm, cands) : 0;
  if (ncands < 0) return lost_contact(comm);
  for (int i = 0; i < ncands; i++) {
    int r = try_transport(comm, cands[i], use, 1, comm->peer_transport[MOECCL_MEM_HOST]);
    if (r == -2) return too_many(comm, cands[i]);
    if (r < 0) return lost_contact(comm);
    if (r > 0) return moecclSuccess;
  }
  if (!needed) return moecclSuccess;
  const char* want = moeccl_param_net();
  int p = 0;
  while (p < n && !use[p]) p++;
  return moeccl_error(
      comm, moecclInvalidUsage,
      "no network transport reaches rank %d on host %s (MOECCL_NET=%s; this build has%s%s%s)", p,
      p < n ? comm->peers[p].hostname : "?", want ? want : "auto", NNET ? "" : " none",
#ifdef MOECCL_TRANSPORT_OFI
      " ofi",
#else
      "",
#endif
#ifdef MOECCL_TRANSPORT_UCX
      " ucx"
#else
      ""
#endif
  );
}

/* The other kinds go where the host transport of the peer also moves them
 * (none does in this build: device memory is refused there). */
static moecclResult_t kinds_init(moeccl_comm_t* comm) {
  int n = comm->nranks;
  for (int k = 0; k < MOECCL_MEM_NKINDS; k++) {
    if (k == MOECCL_MEM_HOST) continue;
    uint8_t* pt = malloc((size_t)n);
    if (!pt) return moecclSystemError;
    for (int p = 0; p < n; p++) {
      uint8_t t = comm->peer_transport[MOECCL_MEM_HOST][p];
      pt[p] = t != 0xff && (comm->transport_ops[t]->mem_types & (1u << k)) ? t : 0xff;
    }
    comm->peer_transport[k] = pt;
  }
  return moecclSuccess;
}

/* Stream transports (MOECCL_TRANSPORT_CAP_STREAM), tried in this order for
 * the (peer, device memory) pairs they reach, where every rank of the
 * communicator has a device backend (an agreed fact: their inits are
 * collective).  MOECCL_DEVICE_STREAM_DISABLE=1 leaves device memory to the
 * host transports, whose requests the host progresses. */
static const moeccl_transport_ops_t* const stream_transports[] = {&moeccl_ipc_ops, NULL};

static moecclResult_t init_stream(moeccl_comm_t* comm) {
  int n = comm->nranks, all_ok = 0;
  comm->peer_stream_transport = malloc((size_t)n);
  uint8_t* use = calloc((size_t)n, 1);
  if (!comm->peer_stream_transport || !use) return free(use), moecclSystemError;
  memset(comm->peer_stream_transport, 0xff, (size_t)n);
  if (moeccl_param_device_stream_disable() || !shm_needed(comm)) return free(use), moecclSuccess;
  if (agree(comm, moeccl_device() != NULL, &all_ok) < 0) return free(use), lost_contact(comm);
  for (int i = 0; all_ok && stream_transports[i]; i++) {
    const moeccl_transport_ops_t* ops = stream_transports[i];
    for (int p = 0; p < n; p++)
      use[p] = p != comm->rank && comm->peer_stream_transport[p] == 0xff && ops->can_reach(comm, p);
    int r = try_transport(comm, ops, use, 1, comm->peer_stream_transport);
    if (r == -2) return free(use), too_many(comm, ops);
    if (r < 0) return free(use), lost_contact(comm);
  }
  free(use);
  return moecclSuccess;
}

moecclResult_t moeccl_transports_init(moeccl_comm_t* comm) {
  int n = comm->nranks;
  comm->peer_transport[MOECCL_MEM_HOST] = malloc((size_t)n);
  uint8_t* use = calloc((size_t)n, 1);
  if (!comm->peer_transport[MOECCL_MEM_HOST] || !use) return free(use), moecclSystemError;
  memset(comm->peer_transport[MOECCL_MEM_HOST], 0xff, (size_t)n);
  int shm_disabled = moeccl_param_shm_disable();
  for (int p = 0; p < n; p++)
    use[p] = !shm_disabled && p != comm->rank && moeccl_shm_ops.can_reach(comm, p);
  moecclResult_t rc = moecclSuccess;
  int r = try_transport(comm, &moeccl_shm_ops, use, !shm_disabled && shm_needed(comm),
                        comm->peer_transport[MOECCL_MEM_HOST]);
  if (r == -2) rc = too_many(comm, &moeccl_shm_ops);
  else if (r < 0) rc = lost_contact(comm);
  else if (r == 0)
    rc = moeccl_error(comm, moecclSystemError, "shared-memory transport failed to start");
  if (rc == moecclSuccess) rc = init_network(comm, use, shm_disabled);
  for (int p = 0; p < n && rc == moecclSuccess; p++)
    if (p != comm->rank)
      INFO(INIT, "rank %d -> rank %d via %s", comm->rank, p,
           comm->transport_ops[comm->peer_transport[MOECCL_MEM_HOST][p]]->name);
  free(use);
  if (rc == moecclSuccess && kinds_init(comm) != moecclSuccess)
    rc = moeccl_error(comm, moecclSystemError, "out of memory");
  if (rc == moecclSuccess) rc = init_stream(comm);
  return rc;
}

void moeccl_transports_fini(moeccl_comm_t* comm) {
  for (int t = 0; t < comm->ntransports; t++)
    if (comm->transport_state[t]) comm->transport_ops[t]->fini(comm->transport_state[t]);
  comm->ntransports = 0;
}

void moeccl_transports_notify_abort(moeccl_comm_t* comm, int culprit) {
  for (int t = 0; t < comm->ntransports; t++)
    comm->transport_ops[t]->notify_abort(comm->transport_state[t], culprit);
}

/* The index of the started transport ops, or of the network one when ops
 * is NULL; -1 when it did not start here. */
static int started(const moeccl_comm_t* comm, const moeccl_transport_ops_t* ops) {
  for (int t = 0; t < comm->ntransports; t++) {
    const moeccl_transport_ops_t* o = comm->transport_ops[t];
    if (ops ? o == ops : (o->caps & MOECCL_TRANSPORT_CAP_NETWORK) != 0) return t;
  }
  return -1;
}

moecclResult_t moeccl_transport_attr_machine(const moeccl_comm_t* comm,
                                             moeccl_transport_attr_t* out) {
  int t = started(comm, &moeccl_shm_ops);
  return moeccl_shm_ops.query(t >= 0 ? comm->transport_state[t] : NULL, comm, out);
}

moecclResult_t moeccl_transport_attr(const moeccl_comm_t* comm, moeccl_link_class_t cls,
                                     moeccl_transport_attr_t* out) {
  memset(out, 0, sizeof(*out));
  if ((int)cls < 0 || cls >= MOECCL_LINK_NCLASSES) return moecclInvalidArgument;
  if (cls == MOECCL_LINK_SELF) return moecclSuccess;
  /* Selection's rule (moeccl_transports_init): shared memory within a node
   * unless disabled, the network transport for the rest. */
  if (cls == MOECCL_LINK_NODE && !moeccl_param_shm_disable())
    return moeccl_transport_attr_machine(comm, out);
  int t = started(comm, NULL);
  if (t < 0) return moecclSuccess;
  return comm->transport_ops[t]->query(comm->transport_state[t], comm, out);
}
