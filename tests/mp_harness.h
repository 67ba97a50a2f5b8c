/*
 * mp_harness.h - fork-based launcher and check helpers for the multi-process
 * tests (no MPI).
 *
 * mp_run() forks one child per rank, then makes a unique id in the parent
 * (which then serves the rendezvous, so the parent stays alive and loops) and
 * sends it to the children through pipes -- forking before the library has
 * threads in the parent keeps sanitizer allocators from deadlocking the
 * children.  Each child joins the communicator, runs the test body and exits
 * with its result.  The parent reaps children as soon as they exit (the
 * library detects dead peers through /proc/<pid>/stat, and a zombie would
 * still look alive) and kills every child that has not finished when the
 * deadline passes.
 *
 * Test programs exit 0 (pass), 77 (skip) or 1 (fail), as the automake test
 * harness expects.  Nothing here asserts on time: the deadline only turns a
 * hang into a failure.
 */
#ifndef MP_HARNESS_H_
#define MP_HARNESS_H_

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/types.h>

#include "moeccl.h"

#define MP_EXIT_PASS 0
#define MP_EXIT_FAIL 1
#define MP_EXIT_SKIP 77

/* A test body, run in each child after moecclCommInitRank.  Returns 0 on
 * success, MP_EXIT_SKIP to skip, anything else on failure. */
typedef int (*mp_body_fn)(moecclComm_t comm, int rank, int nranks, void* arg);

struct mp_job;
/* Called by the parent every few milliseconds while children run. */
typedef void (*mp_parent_poll_fn)(struct mp_job* job, void* arg);

typedef struct mp_opts {
  int deadline_s;           /* kill everything after this long (scaled by MP_DEADLINE_SCALE) */
  int expect_killed_rank;   /* this rank must die by a signal (-1: none; MP_ALL_RANKS: every one) */
  int expect_killed_signal; /* the signal it must die by (0: any) */
  int expect_exit_code;     /* >0: expect_killed_rank must instead exit with this code */
  int no_init;              /* children skip moecclCommInitRank; the body gets comm NULL */
  mp_parent_poll_fn parent_poll;
  void* parent_poll_arg;
} mp_opts;

#define MP_ALL_RANKS (-2)
#define MP_OPTS_DEFAULT                                                                            \
  { 120, -1, 0, 0, 0, NULL, NULL }

/* What the parent knows about the children while they run. */
typedef struct mp_job {
  int nranks;
  pid_t* pids; /* pid of each rank's child */
  int* done;   /* 1 once the child was reaped */
  int* status; /* its wait status once reaped */
} mp_job;

/* Runs body on nranks forked processes; returns MP_EXIT_PASS/FAIL/SKIP. */
int mp_run(int nranks, mp_body_fn body, void* arg, int deadline_s);
int mp_run_opts(int nranks, mp_body_fn body, void* arg, const mp_opts* opts);
/* Parent side: sends sig to rank's child if it still runs. */
void mp_kill_rank(mp_job* job, int rank, int sig);

/* ---- State visible in the children -------------------------------------- */

extern int mp_rank; /* this child's rank in the world comm; -1 in the parent */
extern int mp_nranks;
extern moecclComm_t mp_comm;        /* the world comm MP_OK reports on */
extern moecclUniqueId mp_unique_id; /* the id this run was made with */
/* A body that aborted or destroyed the world comm itself sets this, so the
 * child does not destroy it again. */
extern int mp_comm_released;

/* Out-of-band counters in memory shared by the parent and all children of
 * one mp_run (MP_SHARED_COUNTERS of them, zeroed before the fork). */
#define MP_SHARED_COUNTERS 16
int mp_shared_add(int counter, int value); /* returns the new value */
int mp_shared_get(int counter);
/* Waits until counter reaches target; 0 on success, -1 after timeout_s. */
int mp_shared_wait(int counter, int target, int timeout_s);

/* ---- Environment --------------------------------------------------------- */

/* setenv(name, value) unless name is already set (so a user can override). */
void mp_env_default(const char* name, const char* value);
/* The defaults every test gets (MOECCL_TIMEOUT=30). */
void mp_env_defaults(void);

/* ---- Rank counts from the command line ----------------------------------- */

/* Parses "prog [N ...]" (also "N,M,..."); falls back to defaults (terminated
 * by 0) or to $MP_RANKS.  Returns the number of entries written to out. */
int mp_parse_ranks(int argc, char** argv, const int* defaults, int* out, int max);
/* The suite's default list: 1,2,3,4,5,8. */
extern const int mp_default_ranks[];

/* An environment a test program also runs under, in a fresh process (the
 * library reads MOECCL_* once per process): up to MP_VARIANT_ENV
 * "NAME=value" strings and the rank counts to run (e.g. "3,4"). */
#define MP_VARIANT_ENV 6
typedef struct {
  const char* name;
  const char* env[MP_VARIANT_ENV];
  const char* ranks;
} mp_variant;

/* The usual main: runs body on each rank count (command line, $MP_RANKS or
 * defaults); then, unless rank counts were given on the command line or
 * MP_VARIANTS=0, re-executes the program once per variant (variants ends
 * with a NULL name).  Returns the program's exit code. */
int mp_main(int argc, char** argv, const int* defaults, mp_body_fn body, void* arg, int deadline_s,
            const mp_variant* variants);

/* Process resources, to find leaks: open fds, memory mappings, threads. */
typedef struct {
  int fds, maps, threads;
} mp_resources;
void mp_resources_get(mp_resources* r);
/* MP_CHECK-style: fds and threads must be back to before (or fewer, within
 * 2 s); mappings may grow by less than max_map_growth (not checked under
 * sanitizers). */
int mp_check_resources(const char* file, int line, const char* what, const mp_resources* before,
                       int max_map_growth);
#define MP_CHECK_RESOURCES(what, before, max_map_growth)                                           \
  do {                                                                                             \
    if (mp_check_resources(__FILE__, __LINE__, what, before, max_map_growth)) return 1;            \
  } while (0)

/* 1 unless $MP_SUBTESTS is set and does not list name (comma-separated):
 * runs a part of a test alone, e.g. MP_SUBTESTS=ring,nested. */
int mp_want(const char* name);

/* Only the re-executions of mp_main (for a program with its own main);
 * deadline_s is per rank count of a variant. */
int mp_run_variants(int argc, char** argv, const mp_variant* variants, int deadline_s);
/* Every algorithm (MOECCL_ALGO) on simulated nodes of 1, 2 and 4 ranks, and
 * the tuner's choice: the variants the all-to-all tests share. */
extern const mp_variant mp_topo_variants[];

/* Folds one mp_run result into an overall program result. */
int mp_fold(int overall, int result);

/* ---- Checks --------------------------------------------------------------- */

void mp_failf(const char* file, int line, const char* fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* The first failure line a rank of the job prints (mp_failf) is kept in
 * memory the ranks share: a launcher resets it before it forks the ranks,
 * and prints it as "first failure (LABEL): ..." under a failed verdict. */
int mp_first_failure_reset(void); /* -1: could not map it (then nothing is kept) */
void mp_first_failure_print(const char* label);

/* Prints "rank R: <what> (file:line)" to stderr and returns 1 from the caller. */
#define MP_CHECK(cond, ...)                                                                        \
  do {                                                                                             \
    if (!(cond)) {                                                                                 \
      mp_failf(__FILE__, __LINE__, __VA_ARGS__);                                                   \
      return 1;                                                                                    \
    }                                                                                              \
  } while (0)

/* Checks a moecclResult_t call against moecclSuccess, naming the error. */
#define MP_OK_COMM(c, call)                                                                        \
  do {                                                                                             \
    moecclResult_t mp_res_ = (call);                                                               \
    if (mp_res_ != moecclSuccess) {                                                                \
      mp_failf(__FILE__, __LINE__, "%s returned %d (%s): %s", #call, (int)mp_res_,                 \
               moecclGetErrorString(mp_res_), mp_last_error_text(c));                              \
      return 1;                                                                                    \
    }                                                                                              \
  } while (0)
#define MP_OK(call) MP_OK_COMM(mp_comm, call)

/* Checks that call returns the expected result. */
#define MP_EXPECT_RES(c, expected, call)                                                           \
  do {                                                                                             \
    moecclResult_t mp_res_ = (call);                                                               \
    if (mp_res_ != (expected)) {                                                                   \
      mp_failf(__FILE__, __LINE__, "%s returned %d (%s), expected %d (%s): %s", #call,             \
               (int)mp_res_, moecclGetErrorString(mp_res_), (int)(expected),                       \
               moecclGetErrorString(expected), mp_last_error_text(c));                             \
      return 1;                                                                                    \
    }                                                                                              \
  } while (0)

/* moecclGetLastError(c), never NULL. */
const char* mp_last_error_text(moecclComm_t c);

/* ---- Datatypes ----------------------------------------------------------- */

typedef struct {
  moecclDataType_t type;
  const char* name;
  size_t size;
} mp_dtype_info;

extern const mp_dtype_info mp_dtypes[moecclNumTypes];
size_t mp_dtype_size(moecclDataType_t type);
/* A datatype of the given element size (1, 2, 4 or 8). */
moecclDataType_t mp_dtype_of_size(size_t size);

/* ---- Deterministic data -------------------------------------------------- */

/* The value element idx of the block src sends to dst has under seed; the
 * low elsize bytes are used (little-endian), whatever the datatype. */
uint64_t mp_pattern(uint64_t seed, int src, int dst, size_t idx);
/* Writes elements [idx0, idx0+n) of that block to buf. */
void mp_fill(void* buf, size_t elsize, size_t n, uint64_t seed, int src, int dst, size_t idx0);
/* Index (relative to buf) of the first element that differs, or SIZE_MAX. */
size_t mp_verify(const void* buf, size_t elsize, size_t n, uint64_t seed, int src, int dst,
                 size_t idx0);
/* Both as MP_CHECK: prints the first bad element with expected/actual bytes. */
int mp_check_block(const char* file, int line, const char* what, const void* buf, size_t elsize,
                   size_t n, uint64_t seed, int src, int dst, size_t idx0);
#define MP_CHECK_BLOCK(what, buf, elsize, n, seed, src, dst, idx0)                                 \
  do {                                                                                             \
    if (mp_check_block(__FILE__, __LINE__, what, buf, elsize, n, seed, src, dst, idx0)) return 1;  \
  } while (0)

#define MP_SENTINEL 0xA5
void mp_fill_sentinel(void* buf, size_t bytes);
/* Offset of the first byte that is not the sentinel, or SIZE_MAX. */
size_t mp_find_not_sentinel(const void* buf, size_t bytes);
#define MP_CHECK_SENTINEL(what, buf, bytes)                                                        \
  do {                                                                                             \
    size_t mp_off_ = mp_find_not_sentinel(buf, bytes);                                             \
    MP_CHECK(mp_off_ == SIZE_MAX, "%s: byte %zu of %zu overwritten (0x%02x)", what, mp_off_,       \
             (size_t)(bytes), ((const unsigned char*)(buf))[mp_off_ == SIZE_MAX ? 0 : mp_off_]);   \
  } while (0)

/* A small deterministic generator for test parameters (splitmix64). */
uint64_t mp_mix64(uint64_t x);
typedef struct {
  uint64_t state;
} mp_rng;
void mp_rng_seed(mp_rng* rng, uint64_t seed);
uint64_t mp_rng_next(mp_rng* rng);
/* Uniform in [0, bound). */
uint64_t mp_rng_below(mp_rng* rng, uint64_t bound);

/* malloc that reports failure through MP_CHECK-style messages; never NULL on
 * success.  mp_xmalloc aborts the child on failure. */
void* mp_xmalloc(size_t bytes);
/* Monotonic seconds; a sleep that survives signals. */
double mp_now(void);
void mp_sleep_ms(int ms);
/* Child side of the id hand-over: reads mp_unique_id from fd, closes it; 0 or -1. */
int mp_read_id(int fd);
/* Child side, after the body: destroys comm unless the body released it,
 * flushes, and exits with the harness's code for result. */
__attribute__((noreturn)) void mp_child_finish(moecclComm_t comm, int result);
/* "exited with code N" / "killed by signal N (name)" for a wait status. */
void mp_describe_status(int st, char* buf, size_t len);

#endif /* MP_HARNESS_H_ */
