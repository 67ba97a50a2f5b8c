/* Which peer a communicator lost: when the rank a transport gave up on
 * still runs, another rank's death is the first cause, and that one is
 * named (probing /proc and the liveness sockets through the bootstrap).
 * Apart from error.c, which the bootstrap itself reports through. */
#include "comm/bootstrap.h"
#include "comm/comm.h"

#include <stdarg.h>
#include <stdio.h>

#define LOST_PROBE_MS 100  /* one budget for a batch of liveness probes */
#define LOST_SCAN_MAX 1024 /* ranks a lost peer's first cause is looked for among */

/* 1 when rank's process is known to run, 0 when known gone, -1 unknown:
 * /proc on this machine, else its liveness socket (refused: gone). */
static int peer_state(const moeccl_comm_t* comm, int rank) {
  const moeccl_peer_info_t* p = &comm->peers[rank];
  if (p->machine_hash == comm->peers[comm->rank].machine_hash && p->pid > 0)
    return moeccl_process_alive(p->pid, p->pid_start);
  if (p->alive_addr.sa.sa_family == 0) return -1;
  return moeccl_bootstrap_probe(&p->alive_addr, LOST_PROBE_MS);
}

/* A dead rank other than suspect, or -1: this machine's in /proc, the
 * others' liveness sockets probed MOECCL_PROBE_MAX at a time. */
static int find_dead(const moeccl_comm_t* comm, int suspect) {
  int n = comm->nranks, who[MOECCL_PROBE_MAX], m = 0;
  const moeccl_sockaddr_t* addrs[MOECCL_PROBE_MAX];
  int states[MOECCL_PROBE_MAX];
  uint64_t machine = comm->peers[comm->rank].machine_hash;
  for (int r = 0; r < n; r++) {
    const moeccl_peer_info_t* p = &comm->peers[r];
    if (r != comm->rank && r != suspect && p->machine_hash == machine && p->pid > 0 &&
        !moeccl_process_alive(p->pid, p->pid_start))
      return r;
  }
  for (int r = 0; r < n && r < LOST_SCAN_MAX; r++) {
    const moeccl_peer_info_t* p = &comm->peers[r];
    if (r != comm->rank && r != suspect && p->machine_hash != machine &&
        p->alive_addr.sa.sa_family != 0)
      who[m] = r, addrs[m++] = &p->alive_addr;
    if (m == MOECCL_PROBE_MAX || (m > 0 && (r == n - 1 || r == LOST_SCAN_MAX - 1))) {
      moeccl_bootstrap_probe_many(addrs, m, LOST_PROBE_MS, states);
      for (int k = 0; k < m; k++)
        if (states[k] == 0) return who[k];
      m = 0;
    }
  }
  return -1;
}

/* A rank that gave up closes its connections as a dead one does: when the
 * rank a transport lost still runs, it failed because another rank died
 * (and told whom it could), so the first cause, a dead rank, is named
 * instead.  A failure path only: it probes at most LOST_SCAN_MAX ranks. */
static int first_cause(const moeccl_comm_t* comm, int rank) {
  if (!comm->peers || rank < 0 || rank >= comm->nranks || rank == comm->rank) return -1;
  if (peer_state(comm, rank) != 1) return -1;
  return find_dead(comm, rank);
}

moecclResult_t moeccl_comm_peer_lost(moeccl_comm_t* comm, int rank, const char* fmt, ...) {
  if (comm->async_error != moecclSuccess) return comm->async_error;
  int dead = first_cause(comm, rank);
  if (dead >= 0) {
    const moeccl_peer_info_t* p = &comm->peers[dead];
    char lost[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(lost, sizeof(lost), fmt, ap);
    va_end(ap);
    return moeccl_comm_peer_lost(
        comm, dead,
        "rank %d (pid %d on %s) died; communicator aborted (rank %d, which "
        "still runs, gave up on it: %s)",
        dead, (int)p->pid, p->hostname, rank, lost);
  }
  va_list ap;
  va_start(ap, fmt);
  moecclResult_t rc = moeccl_comm_vfail_peer(comm, rank, fmt, ap);
  va_end(ap);
  return rc;
}

