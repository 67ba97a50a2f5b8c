/*
 * moeccl_sim.h - predicted times of moeccl's own schedules, without
 * running them.  See moecclSim(3).
 *
 * A simulator holds a cluster: where its ranks sit (nodes, groups of
 * nodes, rails) and what its links cost (latency, per-message overhead,
 * bandwidth per rank under load, per class: within a node, between nodes
 * of a group, between groups; and local copies).  It comes from a preset
 * or a topology file (a2a_sim(1)'s clusters), or from a live communicator
 * (the topology and costs its tuner prices with, copied).  Each call
 * builds the schedules the library would run for one operation among
 * some of the cluster's ranks, with the library's own algorithm
 * generators, and prices them with the tuner's cost model
 * (moeccl-tuning(7)); nothing is sent.
 *
 * Every function is local and returns moecclSuccess or an error with a
 * text for moecclGetLastError(NULL); output arguments are set only on
 * success.  Calls that only read a simulator (all but SetCosts and
 * Destroy) may run at once from several threads.
 */
#ifndef MOECCL_SIM_H_
#define MOECCL_SIM_H_

#include <stddef.h>

#include "moeccl.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Opaque simulator handle. */
typedef struct moecclSim* moecclSim_t;

/* The collectives moecclSimCollective prices. */
typedef enum {
  moecclSimAllReduce = 0,
  moecclSimAllGather = 1,
  moecclSimReduceScatter = 2,
  moecclSimBroadcast = 3,
  moecclSimNumColls = 4
} moecclSimColl_t;

/* A modelled cluster.  cluster: a preset name ("fattree": 64 nodes x 8
 * ranks, one group; "dragonfly": 1,024 nodes x 4 ranks, groups of 32
 * nodes), nranks 0 for its own size, else a multiple of its ranks per
 * node (more or fewer nodes); or the path of a topology file
 * (MOECCL_TOPO_FILE's format, docs/TOPOLOGY.md), nranks 0 or the number of
 * ranks it describes. */
moecclResult_t moecclSimCreate(moecclSim_t* sim, const char* cluster, int nranks);
/* The topology and link costs comm's tuner prices with (its ranks are the
 * simulator's), its direct window and, where a machine holds more ranks
 * than cores, its floor on every price; copied: the simulator outlives
 * comm. */
moecclResult_t moecclSimCreateFromComm(moecclSim_t* sim, moecclComm_t comm);
/* Changes costs: spec is one or more statements "CLASS:KEY=VALUE,...",
 * separated by spaces or ';'; CLASS node, group, global (KEY latency_us,
 * overhead_us, bw_GBps, rndv_bytes) or copy (KEY overhead_us, bw_GBps).
 * Values are finite numbers >= 0, bandwidths > 0.  All or nothing. */
moecclResult_t moecclSimSetCosts(moecclSim_t sim, const char* spec);
/* The cluster in words, lines of "KEY=VALUE" statements as a2a_sim prints
 * them; truncated to len - 1 characters (1,024 always suffice). */
moecclResult_t moecclSimDescribe(moecclSim_t sim, char* buf, size_t len);
/* The cluster's number of ranks. */
moecclResult_t moecclSimRanks(moecclSim_t sim, int* nranks);

/* The predicted time of one operation among n members: ranks[i] is the
 * cluster rank of member i (distinct ranks, in communicator order); the
 * members keep their nodes and the cluster's costs, and their groups
 * where those still form equal runs of consecutive nodes (else one
 * group), as a communicator split from the cluster's would see them.  *seconds gets
 * the slowest member's time; *algoUsed (if not NULL) the name of the
 * algorithm whose schedule was priced (a static string).  Members priced:
 * all of them up to 64, else ranks 0 and n-1, 16 spread over the nodes
 * and, for an alltoallv, the 8 heaviest senders and receivers (as
 * a2a_sim). */

/* moecclAlltoAll with bytesPerPeer bytes from every member to every
 * member.  algo NULL: the cheapest of the algorithms that apply (as the
 * tuner picks); else a name MOECCL_ALGO takes (direct, pairwise, bruck,
 * hier2, hier3, rail, hier2p, railp, hier3p), priced as that setting would
 * run it (the pipelined ones in 2 chunks, their default). */
moecclResult_t moecclSimAlltoAll(moecclSim_t sim, const int* ranks, int n, size_t bytesPerPeer,
                                 const char* algo, double* seconds, const char** algoUsed);
/* moecclAlltoAllv: bytes[i * n + j] is what member i sends member j.  The
 * count exchange an algorithm runs first (hier2, hier3, rail, bruck) is
 * included.  algo NULL: the cheapest for these counts. */
moecclResult_t moecclSimAlltoAllv(moecclSim_t sim, const int* ranks, int n, const size_t* bytes,
                                  const char* algo, double* seconds, const char** algoUsed);
/* A collective of bytes per member as NCCL counts them: AllReduce and
 * Broadcast the whole buffer, AllGather the part each member sends,
 * ReduceScatter the part each receives; Broadcast's root is member 0.
 * The algorithm is the cheapest of those the tuner picks among. */
moecclResult_t moecclSimCollective(moecclSim_t sim, moecclSimColl_t coll, const int* ranks, int n,
                                   size_t bytes, double* seconds, const char** algoUsed);
/* moecclSend of bytes from cluster rank src matched by moecclRecv on dst:
 * the slower side's time. */
moecclResult_t moecclSimSendRecv(moecclSim_t sim, int src, int dst, size_t bytes, double* seconds);

/* Frees the simulator. */
moecclResult_t moecclSimDestroy(moecclSim_t sim);

#ifdef __cplusplus
}
#endif

#endif
