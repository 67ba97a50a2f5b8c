/*
 * mh_harness.h - multi-host tests on one machine: Linux network namespaces
 * act as hosts, joined by veth pairs to a bridge in the root namespace.
 *
 *   root ns:  bridge mhbr<pid>, 10.213.0.1/24 (the parent's rendezvous root)
 *   host k:   namespace mh<pid>-h<k>, eth0 = 10.213.0.(10+k)/24, lo up;
 *             the bridge side of its veth pair is mhv<pid>h<k>
 *
 * Every rank is a forked child that, before moecclCommInitRank, enters its
 * host's network namespace (setns), gets a UTS namespace of its own with
 * host name mh-h<k>, and sets MOECCL_HOSTID=mh-h<k> and
 * MOECCL_SOCKET_IFNAME=eth0.  Ranks of one host then use shared memory
 * between themselves (/dev/shm and CMA do not depend on the network
 * namespace) and the network transport (MOECCL_NET) across hosts.
 *
 * The launcher follows tests/mp_harness.c: the children are forked first,
 * then the parent makes the unique id -- with MOECCL_SOCKET_IFNAME naming the
 * bridge, so that the root listens on 10.213.0.1, reachable from every
 * namespace -- and sends it through pipes.  The children are the ranks; the
 * mp_harness.h globals (mp_rank, mp_comm, ...) and check macros (MP_CHECK,
 * MP_OK, MP_CHECK_BLOCK, ...) work in them as in the mp_* tests.
 *
 * Safety: one multi-host test runs at a time (flock on /run/moeccl-mh.lock;
 * only 10.213.0.0/24 is used).  Every run has a deadline, after which all
 * its ranks are SIGKILLed and the run fails; the whole program has a
 * deadline too (SIGALRM).  Namespaces, veths and the bridge are deleted at
 * exit, on SIGINT/SIGTERM/SIGHUP and at the deadline, and stale ones left by
 * a killed test are deleted at the next start.  mh_teardown() checks that
 * nothing is left: namespaces, links, /dev/shm/moeccl-* segments of these
 * hosts, processes.
 *
 * Not root, or no `ip netns`: the program skips (exit 77).  MH_REQUIRE=1
 * turns that skip into a failure (for CI machines that must run it).
 *
 * Knobs (all optional):
 *   MH_SAME_HOSTID=1      validation mode: every rank gets the same
 *                         MOECCL_HOSTID, so shared memory carries everything
 *                         (the namespaces still differ); the network
 *                         transport is then not exercised.
 *   MH_HOSTS=2,3          host counts to run (default per test)
 *   MH_RANKS_PER_HOST=2   ranks per host (default 2)
 *   MH_VARIANTS=ofi,ucx   network transports to run (default both)
 *   MH_KEEP_GOING=1       run every case even after a failure
 *   MP_DEADLINE_SCALE=3   stretch every deadline (as for the mp_* tests)
 */
#ifndef MH_HARNESS_H_
#define MH_HARNESS_H_

#include "mp_harness.h"

#define MH_MAX_HOSTS 4
#define MH_MAX_RANKS_PER_HOST 8
#define MH_MAX_RANKS (MH_MAX_HOSTS * MH_MAX_RANKS_PER_HOST)

/* ---- Network set-up (parent) ---------------------------------------------- */

/* Takes the lock, deletes stale namespaces and links of earlier runs, makes
 * the bridge and max_hosts namespaces and checks that every namespace reaches
 * the bridge and host 0.  Call it first in main, before any moeccl call (it
 * forks and switches namespaces while the process has one thread).  Installs
 * the exit and signal clean-up and a whole-program deadline of total_deadline_s
 * (scaled by MP_DEADLINE_SCALE).  Returns MP_EXIT_PASS, MP_EXIT_SKIP (not
 * root, no `ip netns`) or MP_EXIT_FAIL. */
int mh_setup(int max_hosts, int total_deadline_s);
/* Kills what still runs, deletes the namespaces, veths and the bridge, then
 * checks that none of them, no /dev/shm/moeccl-* segment of these hosts and
 * no child process is left.  Prints what it checked.  MP_EXIT_PASS or
 * MP_EXIT_FAIL; later calls (and the exit handler) do nothing. */
int mh_teardown(void);

/* Between runs: no process left in the namespaces or as a child, no new
 * /dev/shm/moeccl-* segment of these hosts.  Prints a line; 0 when clean,
 * else the number of problems (which it also removes). */
int mh_check_clean(const char* what);

const char* mh_bridge_name(void);
const char* mh_netns_name(int host);
/* The bridge side of host's veth pair (in the root namespace). */
const char* mh_veth_name(int host);
/* ip link set <veth of host> up|down: cuts the host off the network. */
int mh_link_set(int host, int up);
/* 1 in validation mode (MH_SAME_HOSTID=1). */
int mh_same_hostid(void);

/* ---- Runs ----------------------------------------------------------------- */

typedef enum { MH_LAYOUT_BLOCK, MH_LAYOUT_CYCLIC } mh_layout;

typedef struct mh_job {
  int nhosts, ranks_per_host, nranks;
  mh_layout layout;
  pid_t* pids;
  int* done;            /* 1 once reaped */
  int* status;          /* wait status once reaped */
  int* expect_killed;   /* set by mh_kill_host: the rank must die by SIGKILL */
  int* progress;        /* the last value the rank sent with mh_report, -1 before */
  double* progress_ms;  /* when it arrived (mh_time_ms) */
} mh_job;

typedef void (*mh_poll_fn)(mh_job* job, void* arg);

typedef struct mh_opts {
  int nhosts;           /* 1 .. the max_hosts of mh_setup */
  int ranks_per_host;   /* 0: MH_RANKS_PER_HOST or 2 */
  mh_layout layout;     /* BLOCK: rank r on host r / ranks_per_host; CYCLIC: r % nhosts */
  int deadline_s;       /* 0: 120; scaled by MP_DEADLINE_SCALE */
  const char* label;    /* printed on the result line */
  mh_poll_fn parent_poll; /* called every few ms while the ranks run */
  void* parent_poll_arg;
} mh_opts;

/* Runs body on every rank (mp_body_fn: 0 pass, MP_EXIT_SKIP, else fail).
 * The child's moecclCommInitRank failing with moecclInvalidUsage because
 * the build has no such network transport makes the rank skip.  Returns
 * MP_EXIT_PASS, MP_EXIT_FAIL or MP_EXIT_SKIP (every rank skipped). */
int mh_run(const mh_opts* opts, mp_body_fn body, void* arg);

/* Host of a rank in the current run (parent and children). */
int mh_host_of(const mh_job* job, int rank);
/* Parent: SIGKILLs every rank of host (marks them expected to die). */
void mh_kill_host(mh_job* job, int host);

/* ---- In the children ------------------------------------------------------ */

extern int mh_host;        /* this rank's host; -1 in the parent */
extern int mh_nhosts;
extern int mh_ranks_per_host;
extern mh_layout mh_cur_layout;
/* Host of rank r of the world communicator of this run. */
int mh_rank_host(int r);
/* Sends value to the parent (job->progress[rank]); never blocks for long. */
void mh_report(int value);

/* Milliseconds since the run started (same clock in parent and children). */
double mh_time_ms(void);

/* Counters in memory shared by the parent and the ranks of one run, zeroed
 * before the fork. */
#define MH_SHARED_COUNTERS 16
int mh_shared_add(int counter, int value);
int mh_shared_get(int counter);
void mh_shared_set(int counter, int value);
/* 0 once counter >= target, -1 after timeout_s (scaled). */
int mh_shared_wait(int counter, int target, int timeout_s);

/* 1 when text contains "rank N" (N not followed by another digit). */
int mh_names_rank(const char* text, int rank);

/* ---- Program helpers ------------------------------------------------------ */

/* Parses a comma list of integers from env name (or the fallback). */
int mh_parse_ints(const char* env_name, const char* fallback, int* out, int max);
/* 1 when $MH_VARIANTS is unset or lists name. */
int mh_want_variant(const char* name);
/* Sets the network-transport environment of a variant (before mh_run):
 * MOECCL_NET=name, plus MOECCL_OFI_PROVIDER=tcp for ofi and UCX_TLS=tcp for
 * ucx unless the user set them. */
void mh_variant_env(const char* name);
/* Prints the line and returns exit code: "SKIP" messages go to stdout. */
int mh_skip(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

#endif /* MH_HARNESS_H_ */
