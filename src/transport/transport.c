/* Transport selection: per peer, the first transport of the priority list
 * that can reach it.  Every transport's init is collective, so every rank
 * calls them all, in the same order, even those it ends up not using. */
#include "transport/transport.h"

#include <stdlib.h>

static const moeccl_transport_ops_t* const transports[] = {
    &moeccl_shm_ops,
};
#define NTRANSPORTS ((int)(sizeof(transports) / sizeof(transports[0])))

moecclResult_t moeccl_transports_init(moeccl_comm_t* comm) {
  int n = comm->nranks;
  comm->peer_transport = malloc((size_t)n);
  uint8_t* use = calloc((size_t)n, 1);
  if (!comm->peer_transport || !use) return free(use), moecclSystemError;
  for (int p = 0; p < n; p++) comm->peer_transport[p] = 0xff;
  moecclResult_t rc = moecclSuccess;
  for (int t = 0; t < NTRANSPORTS && rc == moecclSuccess; t++) {
    int any = 0;
    for (int p = 0; p < n; p++) {
      use[p] =
          p != comm->rank && comm->peer_transport[p] == 0xff && transports[t]->can_reach(comm, p);
      any += use[p];
    }
    comm->transport_ops[t] = transports[t];
    rc = transports[t]->init(comm, use, &comm->transport_state[t]);
    comm->ntransports = t + 1;
    for (int p = 0; p < n; p++)
      if (use[p]) comm->peer_transport[p] = (uint8_t)t;
    if (any)
      INFO(INIT, "rank %d: transport %s reaches %d peer(s)", comm->rank, transports[t]->name, any);
  }
  for (int p = 0; p < n && rc == moecclSuccess; p++) {
    if (p == comm->rank || comm->peer_transport[p] != 0xff) continue;
    rc = moeccl_error(comm, moecclInvalidUsage,
                      "no transport reaches rank %d on host %s (this build has only shared memory)",
                      p, comm->peers[p].hostname);
  }
  for (int p = 0; p < n && rc == moecclSuccess; p++)
    if (p != comm->rank)
      INFO(INIT, "rank %d -> rank %d via %s", comm->rank, p,
           transports[comm->peer_transport[p]]->name);
  free(use);
  return rc;
}

void moeccl_transports_fini(moeccl_comm_t* comm) {
  for (int t = 0; t < comm->ntransports; t++)
    if (comm->transport_state[t]) comm->transport_ops[t]->fini(comm->transport_state[t]);
  comm->ntransports = 0;
}
