/* What the peer table tells about this communicator's nodes and machines:
 * which ranks share this node (local_ranks) and the CPUs the ranks of a
 * machine may use together.  The table itself is exchanged at creation. */
#include "comm/comm.h"

#include <stdlib.h>

int moeccl_machine_cores(const moeccl_comm_t* c, int rank) {
  uint64_t all[16] = {0};
  for (int r = 0; r < c->nranks; r++)
    if (c->peers[r].machine_hash == c->peers[rank].machine_hash)
      for (int w = 0; w < 16; w++) all[w] |= c->peers[r].cpu_mask[w];
  int cores = 0;
  for (int w = 0; w < 16; w++) cores += __builtin_popcountll(all[w]);
  return cores > 0 ? cores : 1;
}

moecclResult_t moeccl_comm_setup_node(moeccl_comm_t* c) {
  c->local_ranks = malloc(sizeof(int) * (size_t)c->nranks);
  c->peer_local_index = malloc(sizeof(int) * (size_t)c->nranks);
  if (!c->local_ranks || !c->peer_local_index) return moecclSystemError;
  uint64_t me = c->peers[c->rank].host_hash;
  c->nlocal = 0;
  c->nmachine = 0;
  c->machine_cores = moeccl_machine_cores(c, c->rank);
  for (int r = 0; r < c->nranks; r++) {
    c->nmachine += c->peers[r].machine_hash == c->peers[c->rank].machine_hash;
    c->peer_local_index[r] = -1;
    if (c->peers[r].host_hash != me) continue;
    if (r == c->rank) c->local_rank = c->nlocal;
    c->peer_local_index[r] = c->nlocal;
    c->local_ranks[c->nlocal++] = r;
  }
  return moecclSuccess;
}
