/*
 * a2a_sim_int.h - what the parts of a2a_sim share: its options, the uneven
 * split of one size, the priced rows and the run.  The parts:
 *   a2a_sim.c          the driver: sampled ranks, pricing, output, main
 *   a2a_sim_opts.c     the command line
 *   a2a_sim_cluster.c  the modelled cluster: presets (src/topo/topo_presets.c),
 *                      topology files, costs
 *   a2a_sim_split.c    the uneven splits (--dist)
 */
#ifndef MOECCL_PERF_A2A_SIM_H_
#define MOECCL_PERF_A2A_SIM_H_

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "algos/algos.h"
#include "perf_split.h"
#include "topo/topo.h"
#include "tune/cost_model.h"
#include "tune/pricing.h"

#define DIST_MAX_RANKS 4096 /* uneven splits keep the n x n matrix of counts */
#define MOE_K_MAX 64        /* --dist moe:E,K: experts per token, at most */

struct opts {
  const char* preset;
  int nodes, ppn, group, rails, ranks; /* < 0 (ranks: 0): from the preset */
  int preset_given;
  const char* topo_file;  /* --topo: shape and costs from a file */
  const char* costs_file; /* --costs: link and copy lines over them */
  int device;             /* --device: price device buffers (the device view) */
  size_t minbytes, maxbytes, step;
  int per_rank; /* -b/-e are bytes per rank, as a2a_perf, not per peer */
  const char* algos;
  int window;
  int chunks; /* pipelined algorithms: chunks (0: the cheapest of 2, 4, 8, 16) */
  int all_ranks, sample;
  struct perf_dist dist;
  char dist_name[48];
  uint64_t seed;
  const char* json;
  char* overrides[16]; /* --link / --copy values, applied in order */
  int noverrides;
};

/* Byte counts of an uneven call: counts[src * n + dst], fixed for one size. */
struct split {
  int n;
  size_t* counts;
  size_t *send_displs, *recv_counts, *recv_displs; /* one rank's, rebuilt per priced rank */
};

/* The result of one size and one algorithm: the slowest priced rank. */
struct row {
  size_t peer_bytes, size; /* size: bytes the slowest rank sends (a2a_perf's size) */
  const char* algo;
  int runs_direct; /* the algorithm does not apply to this topology: direct ran */
  int chunks;      /* a pipelined algorithm's chunks priced (0: not pipelined) */
  int rank;        /* the slowest rank */
  moeccl_cost_t cost;
  int best;
};

struct sim_run {
  const struct opts* o;
  moeccl_topo_t topo;
  const moeccl_a2a_algo_t* algos[MOECCL_A2A_NALGOS];
  int nalgos;
  int* sample; /* ranks priced */
  int nsample;
  struct split split;
  moeccl_sched_t sched;  /* reused: planning must not allocate per call */
  moeccl_nic_load_t nic; /* the priced rank's NIC-mates' load, reused */
  long long schedules, ops;
  struct row* rows;
  size_t nrows, rows_cap;
};

/* a2a_sim.c */
static inline void* sim_xcalloc(size_t n, size_t size) {
  void* p = calloc(n ? n : 1, size ? size : 1);
  if (!p) {
    fprintf(stderr, "a2a_sim: out of memory\n");
    exit(1);
  }
  return p;
}

/* a2a_sim_opts.c: 0 to run, 1 after -h, 2 on a bad command line. */
int sim_parse_opts(int argc, char** argv, struct opts* o);

/* a2a_sim_cluster.c: the cluster: a preset or a file for the shape, then
 * --costs, then the --link and --copy overrides in order; 0, or -1 said on
 * stderr.  sim_preset_what: a preset's description, NULL for an unknown name. */
int sim_build_topo(const struct opts* o, moeccl_topo_t* t);
const char* sim_preset_what(const char* name);

/* a2a_sim_split.c: the count matrix of n ranks, and the descriptor of one
 * rank's part (rebuilt per priced rank, so it needs the split to live). */
void sim_split_alloc(struct split* s, int n);
void sim_split_free(struct split* s);
void sim_split_fill(const struct opts* o, struct split* s, size_t total);
void sim_split_desc(struct split* s, int rank, moeccl_a2a_desc_t* d);

#endif
