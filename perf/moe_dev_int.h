/*
 * moe_dev_int.h - what the two files of moe_perf --device share: the
 * options, a rank's state and the baseline's entry points
 * (moe_dev_base.c).  See moe_dev.c.
 */
#ifndef MOECCL_PERF_MOE_DEV_INT_H_
#define MOECCL_PERF_MOE_DEV_INT_H_

#include <stddef.h>
#include <stdint.h>

#include "dev_ranks.h"
#include "device/device.h"
#include "moeccl.h"
#include "moeccl_moe.h"

#define MAX_RANKS DEV_RANKS_MAX
#define MAX_REPS 101
#define MAX_K 64
#define MAX_LIST 16

/* The baseline's communication: NCCL's entry points (dev_ranks.h), or
 * moeccl's of the same shape (--baseline moeccl), in one table. */
typedef dev_nccl_t xport_t;

enum { BASE_NONE = 0, BASE_NCCL, BASE_MOECCL };
enum { LIB_ROOF = 0, LIB_MOECCL, LIB_BASE };

typedef struct options {
  int ranks, E, nk, nt, ndt, iters, warmup, reps, check, baseline;
  int ks[MAX_LIST];
  size_t ts[MAX_LIST], H;
  moecclDataType_t dts[2];
  double skew;
  uint64_t seed;
  const char *nccl_path, *json;
} options_t;

/* What the forked ranks share (one anonymous shared mapping). */
typedef struct shared {
  dev_ranks_head_t head; /* the barrier, the failure flag, moeccl's id (dev_ranks.h) */
  dev_nccl_id_t nccl_id;
  int ok[MAX_RANKS];
  char why[MAX_RANKS][200]; /* each rank's reason the baseline cannot run */
  double v[MAX_RANKS][4];   /* per-rank values being gathered */
} shared_t;

typedef struct bench {
  const options_t* o;
  int me, n; /* this rank, the ranks */
  const moeccl_device_ops_t* d;
  moecclComm_t comm;
  xport_t x;
  void *xcomm, *stream, *kcopy, *ksum; /* baseline comm, stream, row kernels */
  /* one configuration */
  size_t T, H, rb, TK, R, ncopy;
  int K, nlocal;
  moecclDataType_t dt;
  moecclMoePlan_t plan;
  size_t* recv_counts;
  int32_t* ids;
  float* w;
  int *owner, *ecnt, *eoff;
  size_t sdsp[MAX_RANKS], rdsp[MAX_RANKS];
  char *tok_h, *host, *pin;                            /* host; pin: pinned */
  char *tok, *perm, *rows, *out_moe, *out_base, *roof; /* device */
  char *dterms, *dcnt;
  float* wdev;
  size_t off_cterms, off_sterms, off_first, pin_bytes; /* in pin and dterms */
} bench_t;

static inline void moe_dev_check(moecclResult_t r, const char* what) {
  if (r != moecclSuccess) dev_die("%s: %s", what, moecclGetErrorString(r));
}

/* Readies this rank's baseline before any communicator: the row kernels,
 * and NCCL (rank 0 also writes *id) or moeccl's stand-in.  why is ""
 * when it can run, else the reason. */
void moe_dev_base_load(bench_t* b, dev_nccl_id_t* id, char* why, size_t len);
/* One baseline call on b's configuration, queued on b->stream (it waits
 * for the stream once, for the counts). */
void moe_dev_base_issue(bench_t* b);

#endif
