/*
 * moe_dev_int.h - what the two files of moe_perf --device share: the
 * options, a rank's state and the baseline's entry points
 * (moe_dev_base.c).  See moe_dev.c.
 */
#ifndef MOECCL_PERF_MOE_DEV_INT_H_
#define MOECCL_PERF_MOE_DEV_INT_H_

#include <stddef.h>
#include <stdint.h>

#include "device/device.h"
#include "moeccl.h"
#include "moeccl_moe.h"

#define MAX_RANKS 64
#define MAX_REPS 101
#define MAX_K 64
#define MAX_LIST 16
#define NCCL_DEFAULT_LIB "/usr/local/cuda/lib64/libnccl.so.2"

typedef struct {
  char internal[128];
} nccl_id_t;

/* The baseline's communication: NCCL's entry points, or moeccl's of the
 * same shape (--baseline moeccl), behind one table. */
typedef struct xport {
  void* lib;
  const char* path;
  int version;
  int (*get_version)(int*);
  int (*get_unique_id)(nccl_id_t*);
  int (*init_rank)(void**, int, nccl_id_t, int);
  int (*destroy)(void*);
  int (*alltoall)(const void*, void*, size_t, int, void*, void*);
  int (*send)(const void*, size_t, int, int, void*, void*);
  int (*recv)(void*, size_t, int, int, void*, void*);
  int (*group_start)(void);
  int (*group_end)(void);
  const char* (*error_string)(int);
  const char* (*last_error)(void*);
} xport_t;

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
  _Atomic unsigned arrived, generation;
  _Atomic int failed, id_ready; /* id_ready 1: moeccl_id valid, -1: no id */
  moecclUniqueId moeccl_id;
  nccl_id_t nccl_id;
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

/* Says what failed (rank, text) and ends this rank; the others stop at
 * their next barrier. */
void moe_dev_die(const char* fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

static inline void moe_dev_check(moecclResult_t r, const char* what) {
  if (r != moecclSuccess) moe_dev_die("%s: %s", what, moecclGetErrorString(r));
}

/* Readies this rank's baseline before any communicator: the row kernels,
 * and NCCL (rank 0 also writes *id) or moeccl's stand-in.  why is ""
 * when it can run, else the reason. */
void moe_dev_base_load(bench_t* b, nccl_id_t* id, char* why, size_t len);
/* One baseline call on b's configuration, queued on b->stream (it waits
 * for the stream once, for the counts). */
void moe_dev_base_issue(bench_t* b);

#endif
