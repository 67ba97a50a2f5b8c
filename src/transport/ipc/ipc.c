/*
 * The ipc transport (ipc_int.h): its ops table, the host-side entries a stream
 * transport has (no requests: everything is lowered), and its statistics.
 */
#include "transport/ipc/ipc_int.h"

static moecclResult_t ipc_post(void* state, moeccl_req_t* req) {
  ipc_state_t* s = state;
  (void)req;
  return moeccl_error(s->comm, moecclInternalError,
                      "ipc: a request was posted to a stream transport");
}

static moecclResult_t ipc_progress(void* state, int* progressed) {
  (void)state, (void)progressed;
  return moecclSuccess;
}

static void ipc_arm(void* state) { (void)state; }

static void ipc_wait(void* state, int64_t timeout_us) {
  (void)state;
  usleep((useconds_t)(timeout_us > 1000 ? 1000 : timeout_us));
}

static moecclResult_t ipc_check_peers(void* state) {
  (void)state;
  return moecclSuccess;
}

static void ipc_notify_abort(void* state, int culprit) {
  (void)culprit;
  moeccl_ipc_release_waits(state);
}

/* This rank failed part way through queueing a call (its peers may have
 * queued theirs): its own waits and its peers' waits on it are released,
 * so no stream waits for a flag that will never be written; the
 * communicator is broken and the results undefined. */
static void ipc_cancel_all(void* state) {
  ipc_state_t* s = state;
  moeccl_ipc_release_waits(s);
  for (int l = 0; l < s->nlocal; l++) {
    if (l == s->me || !s->peers[l].seg) continue;
    flag_set(ready_of(s->peers[l].seg, s->me), UINT64_MAX);
    flag_set(done_of(s->peers[l].seg, s->nlocal, s->me), UINT64_MAX);
  }
  atomic_thread_fence(memory_order_seq_cst);
}

void moeccl_ipc_stats(const moeccl_comm_t* comm, moeccl_ipc_stats_t* out) {
  memset(out, 0, sizeof(*out));
  for (int t = 0; t < comm->ntransports; t++)
    if (comm->transport_ops[t] == &moeccl_ipc_ops && comm->transport_state[t])
      *out = ((const ipc_state_t*)comm->transport_state[t])->stats;
}

/* What device memory between the ranks of a node costs (transport.h:
 * query; the tuner does not price device calls yet).  Every message is
 * pulled by its receiver once both streams reached the step, whatever its
 * size: no eager path, and the wait is in the latency. */
static moecclResult_t ipc_query(void* state, const moeccl_comm_t* comm,
                                moeccl_transport_attr_t* out) {
  (void)state, (void)comm;
  *out = moeccl_transport_attr_of(&moeccl_ipc_ops);
  out->latency_us = 5.0, out->overhead_us = 1.0, out->bw_GBps = 500.0;
  return moecclSuccess;
}

const moeccl_transport_ops_t moeccl_ipc_ops = {
    .name = "ipc",
    .caps = MOECCL_TRANSPORT_CAP_STREAM,
    .mem_types = MOECCL_MEM_TYPE_DEVICE,
    .can_reach = moeccl_ipc_can_reach,
    .init = moeccl_ipc_init,
    .query = ipc_query,
    .post = ipc_post,
    .progress = ipc_progress,
    .arm = ipc_arm,
    .wait = ipc_wait,
    .check_peers = ipc_check_peers,
    .notify_abort = ipc_notify_abort,
    .cancel_all = ipc_cancel_all,
    .fini = moeccl_ipc_fini,
    .lower_begin = moeccl_ipc_lower_begin,
    .lower_step = moeccl_ipc_lower_step,
};
