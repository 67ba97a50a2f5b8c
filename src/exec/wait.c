/*
 * Waiting on a host schedule's transports: progress passes, the idle
 * sleep in the one transport that holds every pending request, the
 * liveness checks of the peers this rank waits on, and the diagnosis of a
 * timeout.
 */
#include <pthread.h>
#include <stdio.h>
#include <unistd.h>

#include "base/param.h"
#include "comm/bootstrap.h"
#include "exec/executor_int.h"

static const moeccl_req_t* first_pending(const moeccl_job_t* j) {
  for (int i = j->first_req; i < j->nreqs; i++)
    if (!j->comm->reqs[i].req.done) return &j->comm->reqs[i].req;
  return NULL;
}

moecclResult_t moeccl_exec_progress_all(moeccl_job_t* jobs, int njobs, int* progressed, int arm) {
  for (int k = 0; k < njobs; k++) {
    moeccl_comm_t* c = jobs[k].comm;
    for (int t = 0; t < c->ntransports; t++) {
      if (arm) c->transport_ops[t]->arm(c->transport_state[t]);
      moecclResult_t rc = c->transport_ops[t]->progress(c->transport_state[t], progressed);
      if (rc != moecclSuccess) return rc;
    }
  }
  return moecclSuccess;
}

#define PROBES_PER_CHECK 4
#define PROBE_WAIT_MS 10 /* a refusal comes back in microseconds; silence is no verdict */

/* Network peers this rank waits on are probed through their liveness
 * sockets (bootstrap.c): a killed process is found at once even where the
 * provider says nothing.  A few peers per check, rotating, probed at once
 * within one PROBE_WAIT_MS, bounds the cost. */
static moecclResult_t probe_network_peers(moeccl_job_t* j) {
  moeccl_comm_t* c = j->comm;
  moeccl_bootstrap_drain();
  int probes = 0, last = -1, who[PROBES_PER_CHECK];
  const moeccl_sockaddr_t* addrs[PROBES_PER_CHECK] = {0};
  for (int i = j->first_req; i < j->nreqs && probes < PROBES_PER_CHECK; i++) {
    const moeccl_req_t* r =
        &c->reqs[(j->first_req + (i - j->first_req + c->probe_cursor) % (j->nreqs - j->first_req))]
             .req;
    const moeccl_peer_info_t* pi = &c->peers[r->peer];
    if (r->done || r->peer == last ||
        !(c->transport_ops[moeccl_peer_transport(c, r->peer, r->mem)]->caps &
          MOECCL_TRANSPORT_CAP_NETWORK) ||
        pi->alive_addr.sa.sa_family == 0)
      continue;
    last = r->peer;
    who[probes] = r->peer, addrs[probes++] = &pi->alive_addr;
  }
  c->probe_cursor += PROBES_PER_CHECK;
  int states[PROBES_PER_CHECK];
  moeccl_bootstrap_probe_many(addrs, probes, PROBE_WAIT_MS, states); /* at once */
  for (int k = 0; k < probes; k++) {
    const moeccl_peer_info_t* pi = &c->peers[who[k]];
    if (states[k] == 0)
      return moeccl_comm_peer_lost(
          c, who[k], "rank %d (pid %d on %s) died (its liveness socket refuses connections)",
          who[k], (int)pi->pid, pi->hostname);
  }
  return moecclSuccess;
}

moecclResult_t moeccl_exec_check_peers(moeccl_job_t* jobs, int njobs) {
  for (int k = 0; k < njobs; k++) {
    moeccl_comm_t* c = jobs[k].comm;
    for (int t = 0; t < c->ntransports; t++)
      MOECCL_CHECK(c->transport_ops[t]->check_peers(c->transport_state[t]));
    if (c->ntransports > 1 ||
        (c->ntransports == 1 && (c->transport_ops[0]->caps & MOECCL_TRANSPORT_CAP_NETWORK)))
      MOECCL_CHECK(probe_network_peers(&jobs[k]));
  }
  return moecclSuccess;
}

/* On a timeout, the step's requests as this rank sees them (a rare stall
 * is diagnosed from every rank's line). */
static void log_requests(const moeccl_job_t* j) {
  const moeccl_comm_t* c = j->comm;
  char line[1024];
  int o = snprintf(line, sizeof(line),
                   "rank %d: timed out in step %d of %d, %d counted pending:", c->rank, j->step,
                   j->sched->nsteps, j->pending);
  for (int i = j->first_req; i < j->nreqs && o < (int)sizeof(line) - 96; i++) {
    const moeccl_xreq_t* x = &c->reqs[i];
    const moeccl_req_t* r = &x->req;
    int t = moeccl_peer_transport(c, r->peer, r->mem);
    o += snprintf(line + o, sizeof(line) - (size_t)o, " [%s %s %zu B %s %d by %s%s]",
                  r->done ? "done" : "open", r->type == MOECCL_REQ_SEND ? "send" : "recv", r->bytes,
                  r->type == MOECCL_REQ_SEND ? "to" : "from", r->peer,
                  t >= 0 ? c->transport_ops[t]->name : "?", x->rows ? ", rows" : "");
  }
  WARN(NET, "%s", line);
}

moecclResult_t moeccl_exec_timed_out(moeccl_job_t* jobs, int njobs) {
  for (int k = 0; k < njobs; k++) log_requests(&jobs[k]);
  for (int k = 0; k < njobs; k++) {
    const moeccl_req_t* r = first_pending(&jobs[k]);
    if (!r) continue;
    moeccl_comm_t* c = jobs[k].comm;
    return moeccl_comm_fail(
        c, moecclTimeout,
        "timed out after %.0f s without progress waiting to %s %zu bytes %s rank %d "
        "(MOECCL_TIMEOUT)",
        c->timeout, r->type == MOECCL_REQ_SEND ? "send" : "receive", r->bytes,
        r->type == MOECCL_REQ_SEND ? "to" : "from", r->peer);
  }
  /* Counted pending, none open: the executor's own accounting is wrong. */
  return moeccl_comm_fail(jobs[0].comm, moecclInternalError,
                          "timed out after %.0f s with requests counted pending but none open "
                          "(an executor bug; the log has the step's requests)",
                          jobs[0].comm->timeout);
}

static int spin_count;
static void read_spin_count(void) { spin_count = (int)moeccl_param_spin_count(); }

int moeccl_exec_spin_limit(const moeccl_comm_t* c) {
  /* Read once: a lookup by name costs more than a small call's whole plan. */
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  pthread_once(&once, read_spin_count);
  int spins = spin_count;
  /* More ranks than cores: a spinning rank steals the core its peer needs
   * (ranks of this machine, also those MOECCL_HOSTID puts on other nodes). */
  if (c->nmachine > c->machine_cores && spins > 1) spins = 1;
  return spins < 0 ? 0 : spins;
}

/* Sleeps in the one transport that holds all pending requests; with
 * several transports (or communicators) busy, naps briefly instead, since
 * one transport cannot wake on another's events. */
void moeccl_exec_idle_wait(moeccl_job_t* jobs, int njobs) {
  moeccl_comm_t* owner = NULL;
  int transport = -1;
  for (int k = 0; k < njobs; k++) {
    moeccl_comm_t* c = jobs[k].comm;
    for (int i = jobs[k].first_req; i < jobs[k].nreqs; i++) {
      const moeccl_req_t* r = &c->reqs[i].req;
      if (r->done) continue;
      int t = moeccl_peer_transport(c, r->peer, r->mem);
      if (owner && (owner != c || transport != t)) {
        usleep(50);
        return;
      }
      owner = c, transport = t;
    }
  }
  if (owner) owner->transport_ops[transport]->wait(owner->transport_state[transport], 20000);
}
