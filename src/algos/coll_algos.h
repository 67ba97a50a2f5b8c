/*
 * Generators of the collectives beyond all-to-all (AllReduce, ReduceScatter,
 * AllGather, Broadcast, Reduce, Gather, Scatter).  Like the all-to-all ones
 * (algos.h) they are pure: given the call's shape they append this rank's
 * ops to a schedule and never touch a transport or memory.  Each algorithm
 * is a row of moeccl_coll_algos[] with one generator per collective it
 * implements; the tuner prices the rows that implement a call's collective
 * and apply to its communicator.
 *
 * Buffers of the schedule (schedule.h): MOECCL_BUF_SEND (sendbuff),
 * MOECCL_BUF_RECV (recvbuff), MOECCL_BUF_SCRATCH (sched->scratch_bytes,
 * provided by the executor).  Offsets are bytes; reduction ops cover whole
 * elements.  A rank's SEND buffer is never written.  Root-only buffers:
 * Broadcast's SEND and Scatter's SEND exist on the root only, Reduce's and
 * Gather's RECV on the root only; a generator never names them elsewhere.
 *
 * In place (desc->in_place): SEND and RECV are one memory, laid out as NCCL
 * defines: AllReduce, Broadcast, Reduce: sendbuff == recvbuff; AllGather:
 * sendbuff == recvbuff + rank * count; ReduceScatter: recvbuff == sendbuff +
 * rank * count; Gather (root): sendbuff == recvbuff + root * count; Scatter
 * (root): recvbuff == sendbuff + root * count.  The planner names both
 * buffers with those pointers, so a generator stays correct in place by
 * never reading a SEND range after writing the RECV bytes aliasing it, and
 * by dropping a copy of a range onto itself.  tests/test_coll_sched checks
 * every generator with and without the aliasing.
 *
 * Reductions: every REDUCE / RECV_REDUCE / COPY op that reads some rank's
 * raw input (its SEND data, not a partial result) marks that operand with
 * MOECCL_OPF_PRE_A / PRE_B (schedule.h), so that pre-multiplied sums scale
 * each contribution exactly once; results are the same for every rank and
 * every run (the order of a reduction depends on the algorithm and nranks
 * only).  Integer Avg's division happens after the schedule (the planner),
 * on every rank's own result.
 */
#ifndef MOECCL_COLL_ALGOS_H_
#define MOECCL_COLL_ALGOS_H_

#include "sched/schedule.h"

typedef enum {
  MOECCL_COLL_ALLREDUCE = 0,
  MOECCL_COLL_REDUCE_SCATTER = 1,
  MOECCL_COLL_ALLGATHER = 2,
  MOECCL_COLL_BROADCAST = 3,
  MOECCL_COLL_REDUCE = 4,
  MOECCL_COLL_GATHER = 5,
  MOECCL_COLL_SCATTER = 6,
  MOECCL_COLL_NKINDS
} moeccl_coll_kind_t;

struct moeccl_topo;

/* One call of a collective as its generators see it. */
typedef struct {
  moeccl_coll_kind_t kind;
  int rank, nranks;
  int root; /* Broadcast, Reduce, Gather, Scatter; 0 elsewhere */
  /* Elements: AllReduce, Broadcast, Reduce: of the whole vector;
   * ReduceScatter: recvcount (per rank); AllGather: sendcount (per rank);
   * Gather, Scatter: per rank. */
  size_t count;
  size_t elem_size;
  int reduce;   /* the collective reduces (AllReduce, ReduceScatter, Reduce) */
  int in_place; /* SEND and RECV alias as described above */
  /* Where the ranks sit (node, group); NULL: one flat set of ranks. */
  const struct moeccl_topo* topo;
} moeccl_coll_desc_t;

typedef moecclResult_t (*moeccl_coll_schedule_fn)(const moeccl_coll_desc_t* desc,
                                                  moeccl_sched_t* out);

typedef enum {
  MOECCL_COLL_RING = 0,   /* ring: n-1 steps each way, one neighbour each (bandwidth) */
  MOECCL_COLL_RHD = 1,    /* recursive halving / doubling (Rabenseifner), log2 n steps */
  MOECCL_COLL_RD = 2,     /* recursive doubling of the whole vector (latency) */
  MOECCL_COLL_TREE = 3,   /* binomial tree */
  MOECCL_COLL_DIRECT = 4, /* every peer at once: single copy over shared memory */
  MOECCL_COLL_HIER = 5,   /* within the node, between nodes, within the node */
  MOECCL_COLL_NALGOS
} moeccl_coll_algo_id_t;

typedef struct {
  moeccl_coll_algo_id_t id;
  const char* name;
  const char* description;
  /* Generator per collective kind; NULL where the algorithm does not
   * implement that collective. */
  moeccl_coll_schedule_fn schedule[MOECCL_COLL_NKINDS];
  /* 1 when the algorithm runs as itself for desc (NULL: always).  Where it
   * does not (a power of two it needs, a regular multi-node topology), its
   * generator writes a fallback schedule instead (named in its file), so a
   * forced algorithm always works; the tuner does not price it then. */
  int (*applies)(const moeccl_coll_desc_t* desc);
} moeccl_coll_algo_t;

extern const moeccl_coll_algo_t moeccl_coll_algos[MOECCL_COLL_NALGOS];

/* The algorithm called name, or NULL. */
const moeccl_coll_algo_t* moeccl_coll_algo_by_name(const char* name);
/* "AllReduce", "ReduceScatter", ... */
const char* moeccl_coll_kind_name(moeccl_coll_kind_t kind);

/* Generators, one file per algorithm (src/algos/coll_<name>.c). */
moecclResult_t moeccl_allreduce_ring(const moeccl_coll_desc_t* d, moeccl_sched_t* s);
moecclResult_t moeccl_reduce_scatter_ring(const moeccl_coll_desc_t* d, moeccl_sched_t* s);
moecclResult_t moeccl_allgather_ring(const moeccl_coll_desc_t* d, moeccl_sched_t* s);

moecclResult_t moeccl_allreduce_rhd(const moeccl_coll_desc_t* d, moeccl_sched_t* s);
moecclResult_t moeccl_reduce_scatter_rhd(const moeccl_coll_desc_t* d, moeccl_sched_t* s);
moecclResult_t moeccl_allgather_rhd(const moeccl_coll_desc_t* d, moeccl_sched_t* s);

moecclResult_t moeccl_allreduce_rd(const moeccl_coll_desc_t* d, moeccl_sched_t* s);

moecclResult_t moeccl_allreduce_tree(const moeccl_coll_desc_t* d, moeccl_sched_t* s);
moecclResult_t moeccl_broadcast_tree(const moeccl_coll_desc_t* d, moeccl_sched_t* s);
moecclResult_t moeccl_reduce_tree(const moeccl_coll_desc_t* d, moeccl_sched_t* s);

moecclResult_t moeccl_allreduce_direct(const moeccl_coll_desc_t* d, moeccl_sched_t* s);
moecclResult_t moeccl_reduce_scatter_direct(const moeccl_coll_desc_t* d, moeccl_sched_t* s);
moecclResult_t moeccl_allgather_direct(const moeccl_coll_desc_t* d, moeccl_sched_t* s);
moecclResult_t moeccl_broadcast_direct(const moeccl_coll_desc_t* d, moeccl_sched_t* s);
moecclResult_t moeccl_reduce_direct(const moeccl_coll_desc_t* d, moeccl_sched_t* s);
moecclResult_t moeccl_gather_direct(const moeccl_coll_desc_t* d, moeccl_sched_t* s);
moecclResult_t moeccl_scatter_direct(const moeccl_coll_desc_t* d, moeccl_sched_t* s);

moecclResult_t moeccl_allreduce_hier(const moeccl_coll_desc_t* d, moeccl_sched_t* s);

int moeccl_coll_rhd_applies(const moeccl_coll_desc_t* d);
int moeccl_coll_hier_applies(const moeccl_coll_desc_t* d);

#endif
