/* The count-row exchange a v-call of an algorithm with a meta scope runs
 * before it is planned (algos.h): one generator, used by the collective
 * layer to run it and by the tuner to price it. */
#include "algos.h"
#include "topo/topo.h"

int moeccl_meta_members(const moeccl_topo_t* t, int rank, moeccl_meta_scope_t scope, int* index) {
  int n = t->nranks, members = 0, mine = t->rank_node[rank];
  for (int r = 0; r < n; r++) {
    if (scope == MOECCL_META_ALL) {
      index[r] = (r - rank + n) % n;
      continue;
    }
    int node = t->rank_node[r];
    int in = scope == MOECCL_META_NODE ? node == mine : t->node_group[node] == t->node_group[mine];
    index[r] = in ? members++ : -1;
  }
  return scope == MOECCL_META_ALL ? n : members;
}

moecclResult_t moeccl_meta_schedule(const moeccl_topo_t* t, int rank, moeccl_meta_scope_t scope,
                                    const int* index, uint32_t buf, moeccl_sched_t* s) {
  int n = t->nranks;
  uint64_t row = 2 * (uint64_t)n * sizeof(size_t);
  moecclResult_t rc = moecclSuccess;
  if (scope == MOECCL_META_ALL) { /* Bruck's allgather over the rotation */
    for (int k = 1; k < n && rc == moecclSuccess; k *= 2) {
      uint64_t bytes = (uint64_t)(k < n - k ? k : n - k) * row;
      rc = moeccl_sched_add(s, MOECCL_OP_SEND, (rank - k + n) % n, buf, 0, 0, 0, bytes);
      if (rc == moecclSuccess)
        rc = moeccl_sched_add(s, MOECCL_OP_RECV, (rank + k) % n, 0, 0, buf, (uint64_t)k * row,
                              bytes);
      if (rc == moecclSuccess) rc = moeccl_sched_end_step(s);
    }
    return rc;
  }
  uint64_t mine = (uint64_t)index[rank] * row;
  for (int r = 0; r < n && rc == moecclSuccess; r++) {
    if (index[r] < 0 || r == rank) continue;
    rc = moeccl_sched_add(s, MOECCL_OP_SEND, r, buf, mine, 0, 0, row);
    if (rc == moecclSuccess)
      rc = moeccl_sched_add(s, MOECCL_OP_RECV, r, 0, 0, buf, (uint64_t)index[r] * row, row);
  }
  return rc == moecclSuccess ? moeccl_sched_end_step(s) : rc;
}

/* This depends only on the algorithm, n and the agreed topology, so every
 * rank decides alike (16 n^2 bytes held for META_ALL; the last round sends
 * half of them). */
int moeccl_a2a_needs_meta(const moeccl_a2a_algo_t* algo, const moeccl_a2a_desc_t* d) {
  if (!d->send_counts || algo->meta == MOECCL_META_NONE) return 0;
  if (algo->meta == MOECCL_META_ALL && d->nranks > MOECCL_META_ALL_MAX_RANKS) return 0;
  return !algo->applies || algo->applies(d);
}
