/* The tuner: the topology of a communicator and the algorithm of each call. */
#ifndef MOECCL_TUNER_H_
#define MOECCL_TUNER_H_

#include "algos/algos.h"
#include "algos/coll_algos.h"
#include "algos/moe_algos.h"
#include "comm/comm.h"

/* Builds comm->topo (MOECCL_TOPO_FILE, else the ranks' nodes, groups and
 * rails), sets link costs from the transports in use unless a file gave
 * them, checks that every rank holds the same topology, and writes
 * MOECCL_TOPO_DUMP_FILE on rank 0.  Collective; after transports_init. */
moecclResult_t moeccl_tuner_init(moeccl_comm_t* comm);
void moeccl_tuner_fini(moeccl_comm_t* comm);

/* The choices the environment forces, -1 where the tuner decides:
 * MOECCL_ALGO (a row of moeccl_a2a_algos[]), MOECCL_<COLL>_ALGO (a row of
 * moeccl_coll_algos[], by moeccl_coll_kind_t) and MOECCL_MOE_ALGO (0 flat,
 * 1 hier).  Part of the tuner's state; every rank must force alike. */
typedef struct {
  int algo;
  int coll[MOECCL_COLL_NKINDS];
  int moe;
} moeccl_forced_t;
/* Reads them from the environment (forced.c); rank 0 warns of bad names. */
void moeccl_forced_read(const moeccl_comm_t* comm, moeccl_forced_t* f);
/* comm's forced choices (none forced before moeccl_tuner_init). */
const moeccl_forced_t* moeccl_tuner_forced(const moeccl_comm_t* comm);

/* When some machine holds more ranks than cores, every price is floored at
 * each machine's summed CPU time over its cores: machine_of[r] is rank
 * r's machine, cores[m] machine m's cores.  Returns the number of
 * machines and points at the tuner's arrays (valid while comm lives), or
 * returns 0 and writes nothing when no machine is oversubscribed. */
int moeccl_tuner_machines(const moeccl_comm_t* comm, const int** machine_of, const int** cores);

/* The algorithm for the call: MOECCL_ALGO, else the candidate whose schedule
 * the cost model prices cheapest.  Every rank picks the same one: uniform
 * calls are priced on the same sample of ranks everywhere, and v-calls at the
 * block size MOECCL_TUNE_V_BYTES, since no rank knows the others' counts.
 * device: the call's buffers are device memory, priced with the topology's
 * device costs (moeccl_topo_device_view) and cached apart; every rank must
 * pass the same (plan.c: 1 when either buffer is device memory).
 * NULL when a candidate could not be priced (out of memory). */
const moeccl_a2a_algo_t* moeccl_tuner_pick(moeccl_comm_t* c, const moeccl_a2a_desc_t* desc,
                                           int device);
/* The chunk count of the last moeccl_tuner_pick (desc->chunks for the
 * pipelined algorithms): MOECCL_A2A_CHUNKS where set, else the one priced
 * cheapest for that call (0: the generator's default). */
int moeccl_tuner_a2a_chunks(const moeccl_comm_t* comm);

/* The algorithm (a row of moeccl_coll_algos[]) for a collective other than
 * all-to-all: MOECCL_<COLL>_ALGO, else the candidate whose schedule prices
 * cheapest among those implementing desc->kind and applying to it (every
 * rank knows the whole call, so all pick alike).  Cached per call shape
 * and memory kind (device as for moeccl_tuner_pick).
 * -1 when a candidate could not be priced (out of memory). */
int moeccl_tuner_pick_coll(moeccl_comm_t* comm, const moeccl_coll_desc_t* desc, int device);

/* The topology a call is priced on: comm->topo, or with device its device
 * view (NULL before moeccl_tuner_init). */
const struct moeccl_topo* moeccl_tuner_topo(const moeccl_comm_t* comm, int device);

/* The MoE path of a call with rows of row_bytes on layout l: 1 for the
 * hierarchical one (only when l->hier_ok), 0 for the flat one:
 * MOECCL_MOE_ALGO, else the cheaper of the two as the topology's link and
 * copy costs price l->cost (the same on every rank), stage by stage
 * (moeccl_pricing_moe_pick, pricing.h).  *chunks gets the hierarchical
 * path's chunks (MOECCL_MOE_CHUNKS, else the cheapest of 1, 2, 4, 8, 16:
 * in 1 chunk the stages add up, in C they overlap, the slowest per chunk
 * plus the fill and drain); us[] the predictions: flat, hier in one
 * chunk, hier in *chunks (us[1], us[2] < 0 when hier does not apply). */
int moeccl_tuner_pick_moe(moeccl_comm_t* comm, const moeccl_moe_layout_t* l, size_t row_bytes,
                          double us[3], int* chunks);

#endif
