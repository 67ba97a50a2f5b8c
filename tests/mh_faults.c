/*
 * mh_faults.c - a host dies or drops off the network in the middle of an
 * alltoall loop (tests/mh_harness.h: network namespaces as hosts, 2 ranks
 * per host), for MOECCL_NET=ofi (MOECCL_OFI_PROVIDER=tcp) and MOECCL_NET=ucx
 * (UCX_TLS=tcp), with MOECCL_TIMEOUT=10.
 *
 *   kill    once every rank reported (through the harness's pipe) that it
 *           finished 3 iterations, the parent SIGKILLs all ranks of one
 *           host: host 1 of 3, and host 0 (rank 0's) of 2;
 *   cut     the same moment, the parent sets the bridge side of host 2's
 *           veth down (3 hosts): every rank stays alive, on both sides.
 *   clean   after each run: no process in the namespaces or left as a
 *           child, no /dev/shm/moeccl-* segment of these hosts; at the end
 *           the namespaces, veths and bridge must be gone.
 *
 * Every surviving rank must get moecclRemoteError or moecclTimeout within
 * MOECCL_TIMEOUT + 10 s of the fault, with a moecclGetLastError text naming
 * a rank on the other side ("rank N": a killed rank; for a cut, a rank of
 * the cut host, or for the cut host's own ranks a rank of another host);
 * then, after the survivors met out of band, moecclCommAbort must succeed
 * and the rank exit 0.  The killed ranks must die by SIGKILL.  The run's
 * deadline turns a hang into a failure.  MH_FAULT_NAMES=any relaxes the
 * naming: every text names some rank and at least one survivor's names a
 * culprit (a rank that times out waiting on a live peer which is itself
 * stuck behind the fault names that peer, unless the culprit's name reached
 * it first through the transports' abort notification).  Cuts are judged
 * that way by default (MH_FAULT_NAMES=strict judges them like kills).
 *
 * A variant whose transport is not in this build skips.  MH_SAME_HOSTID=1
 * (shared memory only) runs the kill cases and skips the cut, which shared
 * memory does not see.  MP_SUBTESTS=kill,cut chooses the parts.
 */
#include <stdlib.h>

#include "mh_harness.h"

#define TIMEOUT_S 10
#define MARGIN_S 10
#define REPORT_AFTER 3
#define MAX_ITERS 1000000
#define C_SURVIVORS 0
#define C_FAULT_MS 1 /* 1 + the time of the fault in ms since the run started; 0 before */
#define C_NAMED 2    /* survivors whose text named a culprit */

typedef enum { FAULT_KILL, FAULT_CUT } fault_mode;

typedef struct {
  fault_mode mode;
  int victim;     /* host */
  int survivors;  /* ranks expected to see the error */
  int faulted;    /* parent: the fault happened */
  int link_down;  /* parent: the victim's link is down */
} fault_ctx;

/* Whether text names a rank on the other side of the fault. */
static int names_culprit(const fault_ctx* c, int rank, int n, const char* text) {
  int mine_cut = mh_rank_host(rank) == c->victim;
  for (int r = 0; r < n; r++) {
    int on_victim = mh_rank_host(r) == c->victim;
    int culprit = c->mode == FAULT_KILL ? on_victim : (mine_cut ? !on_victim : on_victim);
    if (culprit && mh_names_rank(text, r)) return 1;
  }
  return 0;
}

static int survivor(moecclComm_t comm, int rank, int n, const fault_ctx* c, moecclResult_t res, int it) {
  double t_err = mh_time_ms();
  char text[1024]; /* the library's text lives until the next call */
  snprintf(text, sizeof(text), "%s", mp_last_error_text(comm));
  int fault_ms = mh_shared_get(C_FAULT_MS);
  double after_s = fault_ms > 0 ? (t_err - (fault_ms - 1)) / 1000.0 : -1;
  printf("rank %d (host %d): iteration %d got %d (%s) %.1f s after the fault: \"%s\"\n", rank, mh_rank_host(rank), it,
         (int)res, moecclGetErrorString(res), after_s, text);
  fflush(stdout);
  int named = names_culprit(c, rank, n, text);
  if (named) mh_shared_add(C_NAMED, 1);
  mh_shared_add(C_SURVIVORS, 1);
  int met = mh_shared_wait(C_SURVIVORS, c->survivors, 60);
  moecclResult_t ab = moecclCommAbort(comm);
  mp_comm_released = 1;

  MP_CHECK(fault_ms > 0, "iteration %d failed before the fault: %d (%s): %s", it, (int)res, moecclGetErrorString(res),
           text);
  MP_CHECK(res == moecclRemoteError || res == moecclTimeout,
           "iteration %d: expected moecclRemoteError or moecclTimeout, got %d (%s): %s", it, (int)res,
           moecclGetErrorString(res), text);
  /* MH_FAULT_NAMES=any: a survivor stuck behind a live but stuck peer may
   * name that peer, as long as some survivor names a culprit. */
  /* A cut link gives no definite culprit: a silent peer cannot be told from
   * a peer stuck behind it, so cuts are judged this way unless
   * MH_FAULT_NAMES=strict (known gap: see the issue notes). */
  const char* names_env = getenv("MH_FAULT_NAMES");
  int relaxed = names_env ? !strcmp(names_env, "any") : c->mode == FAULT_CUT;
  if (relaxed) {
    MP_CHECK(strstr(text, "rank "), "moecclGetLastError names no rank: \"%s\"", text);
    MP_CHECK(met != 0 || mh_shared_get(C_NAMED) > 0, "no survivor's moecclGetLastError names a rank %s",
             c->mode == FAULT_KILL ? "of the killed host" : "across the cut");
  } else {
    MP_CHECK(named, "moecclGetLastError names no rank %s: \"%s\" (MH_FAULT_NAMES=any accepts this)",
             c->mode == FAULT_KILL ? "of the killed host" : "across the cut", text);
  }
  double limit = (TIMEOUT_S + MARGIN_S) * (getenv("MP_DEADLINE_SCALE") ? atof(getenv("MP_DEADLINE_SCALE")) : 1.0);
  MP_CHECK(after_s <= limit, "the error came %.1f s after the fault, more than MOECCL_TIMEOUT %d s + %d s", after_s,
           TIMEOUT_S, MARGIN_S);
  MP_CHECK(met == 0, "the other survivors did not report an error within 60 s (%d of %d did)",
           mh_shared_get(C_SURVIVORS), c->survivors);
  MP_CHECK(ab == moecclSuccess, "moecclCommAbort returned %d (%s)", (int)ab, moecclGetErrorString(ab));
  return 0;
}

static int body(moecclComm_t comm, int rank, int n, void* arg) {
  const fault_ctx* c = arg;
  size_t count = (256u << 10) / (4 * (size_t)n); /* 256 KiB per rank */
  size_t bytes = count * 4 * (size_t)n;
  unsigned char* s = mp_xmalloc(bytes);
  unsigned char* r = mp_xmalloc(bytes);
  for (int it = 0; it < MAX_ITERS; it++) {
    uint64_t seed = mp_mix64((uint64_t)it * 131 + 9);
    for (int p = 0; p < n; p++) mp_fill(s + (size_t)p * count * 4, 4, count, seed, rank, p, 0);
    moecclResult_t res = moecclAlltoAll(s, r, count, moecclInt32, comm, NULL);
    if (res != moecclSuccess) {
      int rc = survivor(comm, rank, n, c, res, it);
      free(s);
      free(r);
      return rc;
    }
    for (int p = 0; p < n; p++) /* a call that succeeds is right, fault or not */
      MP_CHECK_BLOCK("alltoall", r + (size_t)p * count * 4, 4, count, seed, p, rank, 0);
    mh_report(it + 1);
  }
  MP_CHECK(0, "no error after %d iterations", MAX_ITERS);
  return 1;
}

static void poll_fault(mh_job* job, void* arg) {
  fault_ctx* c = arg;
  if (c->faulted) return;
  for (int r = 0; r < job->nranks; r++)
    if (job->progress[r] < REPORT_AFTER) return;
  mh_shared_set(C_FAULT_MS, (int)mh_time_ms() + 1);
  if (c->mode == FAULT_KILL) {
    printf("parent: every rank finished %d iterations; SIGKILL to the ranks of host %d\n", REPORT_AFTER, c->victim);
    mh_kill_host(job, c->victim);
  } else {
    printf("parent: every rank finished %d iterations; link %s (host %d) down\n", REPORT_AFTER, mh_veth_name(c->victim),
           c->victim);
    if (mh_link_set(c->victim, 0) == 0) c->link_down = 1;
  }
  fflush(stdout);
  c->faulted = 1;
}

static int run_fault(const char* variant, fault_mode mode, int nhosts, int victim) {
  fault_ctx c = {mode, victim, 0, 0, 0};
  int rph = 2;
  const char* s = getenv("MH_RANKS_PER_HOST");
  if (s && atoi(s) > 0) rph = atoi(s);
  c.survivors = mode == FAULT_KILL ? (nhosts - 1) * rph : nhosts * rph;
  char label[64];
  snprintf(label, sizeof(label), "%s %s host %d", variant, mode == FAULT_KILL ? "kill" : "cut", victim);
  mh_opts o = {0};
  o.nhosts = nhosts;
  o.ranks_per_host = rph;
  o.deadline_s = 120;
  o.label = label;
  o.parent_poll = poll_fault;
  o.parent_poll_arg = &c;
  int r = mh_run(&o, body, &c);
  if (c.link_down && mh_link_set(victim, 1) != 0) r = MP_EXIT_FAIL;
  if (r != MP_EXIT_SKIP && !c.faulted) {
    printf("FAIL %s: the fault never happened (the ranks did not report %d iterations)\n", label, REPORT_AFTER);
    r = MP_EXIT_FAIL;
  }
  if (mh_check_clean(label) != 0) r = MP_EXIT_FAIL;
  return r;
}

int main(int argc, char** argv) {
  (void)argc, (void)argv;
  int rc = mh_setup(3, 900);
  if (rc != MP_EXIT_PASS) return rc;
  char t[16];
  snprintf(t, sizeof(t), "%d", TIMEOUT_S);
  setenv("MOECCL_TIMEOUT", t, 1);
  const char* keep = getenv("MH_KEEP_GOING");
  int keep_going = keep && *keep && strcmp(keep, "0") != 0;
  const char* variants[] = {"ofi", "ucx"};
  int overall = MP_EXIT_SKIP;
  for (int v = 0; v < 2 && (overall != MP_EXIT_FAIL || keep_going); v++) {
    if (!mh_want_variant(variants[v])) continue;
    mh_variant_env(variants[v]);
    printf("variant %s (MOECCL_NET=%s%s, MOECCL_TIMEOUT=%d)%s:\n", variants[v], variants[v],
           v == 0 ? " MOECCL_OFI_PROVIDER=tcp" : " UCX_TLS=tcp", TIMEOUT_S,
           mh_same_hostid() ? " [MH_SAME_HOSTID=1: shared memory only]" : "");
    fflush(stdout);
    int vres = MP_EXIT_SKIP;
    struct {
      const char* part;
      fault_mode mode;
      int nhosts, victim;
    } cases[] = {{"kill", FAULT_KILL, 3, 1}, {"kill", FAULT_KILL, 2, 0}, {"cut", FAULT_CUT, 3, 2}};
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
      if (!mp_want(cases[i].part)) continue;
      if (cases[i].mode == FAULT_CUT && mh_same_hostid()) {
        printf("SKIP %s cut: with MH_SAME_HOSTID=1 no rank uses the network\n", variants[v]);
        continue;
      }
      int r = run_fault(variants[v], cases[i].mode, cases[i].nhosts, cases[i].victim);
      vres = mp_fold(vres, r);
      if (r == MP_EXIT_SKIP) {
        printf("SKIP variant %s: MOECCL_NET=%s is not in this build (the rest of the variant is skipped)\n",
               variants[v], variants[v]);
        break;
      }
      if (r == MP_EXIT_FAIL && !keep_going) break;
    }
    overall = mp_fold(overall, vres);
  }
  int clean = mh_teardown();
  if (clean != MP_EXIT_PASS) overall = MP_EXIT_FAIL;
  printf("%s mh_faults\n", overall == MP_EXIT_PASS ? "PASS" : overall == MP_EXIT_SKIP ? "SKIP" : "FAIL");
  return overall;
}
