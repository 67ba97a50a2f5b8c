/*
 * All-to-all algorithms are schedule generators: given the call's byte counts
 * they append this rank's ops to a schedule and never touch a transport.  Each
 * is one row of moeccl_a2a_algos[]; the tuner (tuner.c) picks a row per call.
 * Generators must cost O(nranks) time and memory per call (uneven Bruck:
 * O(n log n) time, one block size per slot and round; O(n) ops and memory).
 */
#ifndef MOECCL_ALGOS_H_
#define MOECCL_ALGOS_H_

#include "sched/schedule.h"

typedef moecclResult_t (*moeccl_a2a_schedule_fn)(const moeccl_a2a_desc_t* desc,
                                                 moeccl_sched_t* out);

typedef enum {
  MOECCL_A2A_DIRECT = 0,
  MOECCL_A2A_PAIRWISE = 1,
  MOECCL_A2A_BRUCK = 2,
  MOECCL_A2A_HIER2 = 3, /* node level: gather by destination node, exchange, scatter */
  MOECCL_A2A_HIER3 = 4, /* node / group / between groups */
  MOECCL_A2A_RAIL = 5,  /* to the destination's rail on the node, then across nodes */
  MOECCL_A2A_HIER2P = 6, /* hier2 in chunks, the stages of successive chunks overlapped */
  MOECCL_A2A_RAILP = 7,  /* rail in chunks, likewise */
  MOECCL_A2A_HIER3P = 8, /* hier3 in chunks, likewise */
  MOECCL_A2A_NALGOS
} moeccl_a2a_algo_id_t;

/* What an alltoallv schedule of the algorithm needs to know beyond this
 * rank's own counts: the send and receive count rows of the ranks on this
 * rank's node, or of the ranks in its group (desc->pair_bytes answers them). */
typedef enum {
  MOECCL_META_NONE = 0,
  MOECCL_META_NODE = 1,
  MOECCL_META_GROUP = 2,
  MOECCL_META_ALL = 3 /* every rank's rows, gathered in ceil(log2 n) rounds */
} moeccl_meta_scope_t;

typedef struct {
  moeccl_a2a_algo_id_t id;
  const char* name;
  const char* description;
  moeccl_a2a_schedule_fn schedule;
  moeccl_meta_scope_t meta; /* v-calls */
  /* 1 when the algorithm runs as itself on desc's topology (NULL: always);
   * where it does not, its generator writes the direct schedule instead. */
  int (*applies)(const moeccl_a2a_desc_t* desc);
} moeccl_a2a_algo_t;

extern const moeccl_a2a_algo_t moeccl_a2a_algos[MOECCL_A2A_NALGOS];

/* Returns the algorithm called name, or NULL. */
const moeccl_a2a_algo_t* moeccl_a2a_algo_by_name(const char* name);

moecclResult_t moeccl_a2a_direct(const moeccl_a2a_desc_t* desc, moeccl_sched_t* out);
moecclResult_t moeccl_a2a_pairwise(const moeccl_a2a_desc_t* desc, moeccl_sched_t* out);
moecclResult_t moeccl_a2a_bruck(const moeccl_a2a_desc_t* desc, moeccl_sched_t* out);
moecclResult_t moeccl_a2a_hier2(const moeccl_a2a_desc_t* desc, moeccl_sched_t* out);
moecclResult_t moeccl_a2a_hier3(const moeccl_a2a_desc_t* desc, moeccl_sched_t* out);
moecclResult_t moeccl_a2a_rail(const moeccl_a2a_desc_t* desc, moeccl_sched_t* out);
moecclResult_t moeccl_a2a_hier2p(const moeccl_a2a_desc_t* desc, moeccl_sched_t* out);
moecclResult_t moeccl_a2a_railp(const moeccl_a2a_desc_t* desc, moeccl_sched_t* out);
moecclResult_t moeccl_a2a_hier3p(const moeccl_a2a_desc_t* desc, moeccl_sched_t* out);
/* 1 for the stage-pipelined algorithms (pipeline.h: desc->chunks applies). */
static inline int moeccl_a2a_pipelined(int id) {
  return id == MOECCL_A2A_HIER2P || id == MOECCL_A2A_RAILP || id == MOECCL_A2A_HIER3P;
}

/* The algorithms' applies() (the pipelined ones share theirs): hier2 and rail need the same number of ranks on
 * every node and at least two nodes; hier3 also the same number of nodes in
 * every group and at least two groups. */
int moeccl_a2a_hier2_applies(const moeccl_a2a_desc_t* desc);
int moeccl_a2a_hier3_applies(const moeccl_a2a_desc_t* desc);
int moeccl_a2a_rail_applies(const moeccl_a2a_desc_t* desc);
/* 1 when desc->topo describes desc's ranks, is regular for levels (2: nodes,
 * 3: nodes and groups) and has at least two nodes (levels 2) or two groups
 * (levels 3). */
int moeccl_a2a_topo_fits(const moeccl_a2a_desc_t* desc, int levels);

/* The count-row exchange of a v-call whose algorithm has a meta scope
 * (meta.c): every member of rank's scope gets rank's rows, 2n counts
 * (send row, then recv row).  moeccl_meta_members numbers the members in
 * index[r] (-1: outside the scope) and returns how many there are: in rank
 * order within a node or group; for every rank (META_ALL) rank + m is
 * member m.  moeccl_meta_schedule appends the exchange, member m's rows at
 * m * 2n counts in buffer buf: directly between the members of a node or
 * group, in ceil(log2 n) rounds of Bruck's allgather for every rank. */
struct moeccl_topo;
int moeccl_meta_members(const struct moeccl_topo* t, int rank, moeccl_meta_scope_t scope,
                        int* index);
moecclResult_t moeccl_meta_schedule(const struct moeccl_topo* t, int rank,
                                    moeccl_meta_scope_t scope, const int* index, uint32_t buf,
                                    moeccl_sched_t* s);

/* Whether a v-call of algo (desc->topo set) exchanges count rows first; the
 * tuner prices that exchange with it.  Every rank's rows (MOECCL_META_ALL)
 * grow as n^2: past MOECCL_META_ALL_MAX_RANKS the exchange is skipped and
 * the generator, without pair_bytes, falls back (bruck: pairwise). */
#define MOECCL_META_ALL_MAX_RANKS 1024
int moeccl_a2a_needs_meta(const moeccl_a2a_algo_t* algo, const moeccl_a2a_desc_t* desc);

/* This rank's send of its block to `to` and receive of `from`'s block. */
moecclResult_t moeccl_a2a_add_exchange(const moeccl_a2a_desc_t* desc, moeccl_sched_t* out, int to,
                                       int from);
/* The local block (rank to itself) as a copy op, shared by all generators. */
moecclResult_t moeccl_a2a_add_self_copy(const moeccl_a2a_desc_t* desc, moeccl_sched_t* out);

#endif
