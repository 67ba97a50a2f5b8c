/*
 * dev_ranks.h - what the device perf tools (a2a_dev_perf, moe_perf --device)
 * share: their ranks are processes of one node forked by a launcher before
 * any device call (CUDA does not survive a fork), no MPI, meeting in one
 * anonymous shared mapping that begins with a dev_ranks_head_t (a barrier
 * that gives up when a rank failed or never comes, and moeccl's unique id,
 * which the launcher makes and serves); and NCCL, the baseline, loaded
 * with dlopen and never linked.
 */
#ifndef MOECCL_PERF_DEV_RANKS_H_
#define MOECCL_PERF_DEV_RANKS_H_

#include <stddef.h>

#include "moeccl.h"

#define DEV_RANKS_MAX 64
#define DEV_BARRIER_TIMEOUT_S 300.0
#define DEV_NCCL_DEFAULT_LIB "/usr/local/cuda/lib64/libnccl.so.2"

/* The start of the ranks' shared mapping. */
typedef struct dev_ranks_head {
  _Atomic unsigned arrived, generation;
  _Atomic int failed;   /* a rank gave up: the others stop at the next barrier */
  _Atomic int id_ready; /* 1: moeccl_id is valid, -1: the launcher could not make it */
  moecclUniqueId moeccl_id;
} dev_ranks_head_t;

extern int dev_me, dev_nranks; /* this rank, the ranks */

double dev_now(void);

/* The median of v[0..n) (sorts v). */
double dev_median(double* v, int n);

/* Says what failed ("TOOL: rank R: ...", one write) and ends this rank;
 * the others stop at their next barrier. */
void dev_die(const char* fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

/* All ranks here, or this rank ends: a rank that failed, or one that never
 * comes (DEV_BARRIER_TIMEOUT_S). */
void dev_barrier(void);

/* moeccl's unique id once the launcher made it; this rank ends (exit 1)
 * when it could not, or a rank failed meanwhile. */
const moecclUniqueId* dev_ranks_id(void);

/* The launcher: maps bytes (at least a dev_ranks_head_t, zeroed) shared
 * into *shared, forks nranks ranks that run rank_main(arg) with dev_me
 * set and exit with its value, makes moeccl's unique id, and waits for
 * them.  A rank that exits non-zero makes the others stop (they would
 * wait for it, in NCCL for ever), unless its status is soft (non-zero:
 * e.g. "wrong values", after which the others still finish).  Returns the
 * first non-zero status, a soft one only when no other came; messages
 * start with tool. */
int dev_ranks_run(const char* tool, int nranks, size_t bytes, void** shared,
                  int (*rank_main)(void*), void* arg, int soft);

/* ---- NCCL by dlopen: the few entry points used, with NCCL 2.28's types ---- */

typedef struct {
  char internal[128];
} dev_nccl_id_t;

enum { DEV_NCCL_UINT8 = 1, DEV_NCCL_INT64 = 4, DEV_NCCL_FLOAT32 = 7 }; /* ncclDataType_t */

typedef struct dev_nccl {
  void* lib;
  const char* path;
  int version;
  int (*get_version)(int*);
  int (*get_unique_id)(dev_nccl_id_t*);
  int (*init_rank)(void**, int, dev_nccl_id_t, int);
  int (*destroy)(void*);
  int (*alltoall)(const void*, void*, size_t, int, void*, void*);
  int (*send)(const void*, size_t, int, int, void*, void*);
  int (*recv)(void*, size_t, int, int, void*, void*);
  int (*group_start)(void);
  int (*group_end)(void);
  const char* (*error_string)(int);
  const char* (*last_error)(void*); /* NULL where the library has none */
} dev_nccl_t;

/* Loads NCCL from path (the default path falls back to the loader's
 * libnccl.so.2), refusing moeccl's own drop-in and a version below
 * min_version (0: any); 0, or -1 with why. */
int dev_nccl_load(dev_nccl_t* n, const char* path, int min_version, char* why, size_t whylen);

#endif
