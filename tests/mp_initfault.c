/*
 * mp_initfault.c - a rank dies while the communicator forms: every other
 * rank must fail with an error that names the dead rank, long before
 * MOECCL_TIMEOUT (set to 600 s here, so only a prompt failure ends a round
 * within the harness's deadline).
 *
 * Each round the victim (rotating over the ranks) starts a thread that
 * sends it SIGKILL after a delay, then calls moecclCommInitRank; the
 * delays sweep from before it joins the rendezvous through the ring and the
 * transports' setup to after init (then the first collective must fail).
 * The delays pick the phase only roughly, so every round checks the same
 * thing: a survivor's init (or, if init completed everywhere before the
 * death, its first collective that involves the victim) fails with
 * moecclRemoteError or moecclTimeout and a text that names the victim.
 * A victim killed before its hello reached the rendezvous is the exception:
 * nobody can tell it from a slow rank, so the survivors wait for
 * MOECCL_TIMEOUT; so the delay counts from the victim's own log line saying
 * it joined (MOECCL_DEBUG=INFO, MOECCL_DEBUG_SUBSYS=BOOT into a pipe).
 *
 * The culprit must be the first rank a survivor's text names: a survivor
 * that only names another survivor (one that gave up first and closed its
 * connections) has the cause wrong.
 *
 * Segment rounds kill the victim instead the moment it holds a node
 * segment: moeccl's (a memfd local rank 0 creates and passes to the others;
 * nameless, so it cannot outlive them, which tests/mp_shmleak checks at
 * more points) or UCX's posix segments (named files not yet unlinked): a
 * failed init must leave nothing in /dev/shm.  After every round no moeccl-* or
 * ucx_shm_posix_* file may be left there that was not there before.
 *
 * Late-root rounds: the victim dies before its hello (before it calls
 * moecclCommInitRank), the ranks run with MOECCL_TIMEOUT=3 while the
 * rendezvous root (made by the launcher, as an id made by another process
 * with another MOECCL_TIMEOUT, or earlier than the ranks' clocks say)
 * would wait 600 s, and rank 0 starts 1.5 s after the others.  The root
 * must give its verdict before the first joined rank's own deadline (each
 * hello says how long its rank still waits), so that every survivor names
 * the victim instead of saying it could not join within 3 s.
 *
 * Variants: simulated nodes (the network transport's setup: ucx, where the
 * build has it, and ofi), shared memory only.
 */
#include "config.h"

#include <dirent.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "mp_harness.h"

#define COUNTER_SURVIVORS 0
#define MAX_ITERS 1000000

typedef struct {
  int victim;
  long delay_us;
  int at_segment; /* kill when it holds a named segment, not after delay_us */
  int late_root;  /* the victim dies before its hello; rank 0 starts late (above) */
} round_t;

/* The files the library or UCX names in /dev/shm. */
static int ours(const char* name) {
  return strncmp(name, "moeccl-", 7) == 0 || strncmp(name, "ucx_shm_posix_", 14) == 0;
}

/* Whether this process holds (open or mapped) one of those files while it
 * still has its name, that is, before it is unlinked, or moeccl's segment
 * memfd. */
static int holds_named_segment(void) {
  char path[300], target[512];
  DIR* d = opendir("/proc/self/fd");
  int found = 0;
  for (struct dirent* e; d && !found && (e = readdir(d)) != NULL;) {
    snprintf(path, sizeof(path), "/proc/self/fd/%s", e->d_name);
    ssize_t n = readlink(path, target, sizeof(target) - 1);
    if (n <= 9) continue;
    target[n] = 0;
    found =
        (strncmp(target, "/dev/shm/", 9) == 0 && ours(target + 9) && !strstr(target, "(deleted)")) ||
        strncmp(target, "/memfd:moeccl-", 14) == 0;
  }
  if (d) closedir(d);
  FILE* f = found ? NULL : fopen("/proc/self/maps", "r");
  char line[1024];
  while (f && !found && fgets(line, sizeof(line), f)) {
    char* at = strstr(line, "/dev/shm/");
    found = (at && ours(at + 9) && !strstr(at, "(deleted)")) || strstr(line, "/memfd:moeccl-");
  }
  if (f) fclose(f);
  return found;
}

/* The victim's killer thread: waits for the library's log line saying the
 * victim joined the rendezvous (its hello reached the root), then for the
 * round's delay (or, in a segment round, until the process holds a node
 * segment, for at most 3 s), then kills the process. */
static long kill_delay_us;
static int kill_at_segment;
static int log_fd = -1;
static void* killer(void* arg) {
  (void)arg;
  char buf[4096];
  size_t got = 0;
  for (;;) {
    ssize_t r = read(log_fd, buf + got, sizeof(buf) - 1 - got);
    if (r <= 0) break; /* the library closed its log: init is over */
    got += (size_t)r;
    buf[got] = 0;
    if (strstr(buf, "joined the rendezvous")) break;
    char* nl = strrchr(buf, '\n'); /* keep only the unfinished line */
    if (nl) {
      size_t keep = got - (size_t)(nl + 1 - buf);
      memmove(buf, nl + 1, keep);
      got = keep;
    }
    if (got == sizeof(buf) - 1) got = 0;
  }
  if (kill_at_segment) {
    double until = mp_now() + 3.0;
    while (!holds_named_segment() && mp_now() < until) {
    }
    printf("rank %d: killed %s\n", mp_rank,
           mp_now() < until ? "holding a node segment" : "after 3 s without a node segment");
  } else {
    struct timespec ts = {kill_delay_us / 1000000, (kill_delay_us % 1000000) * 1000};
    while (nanosleep(&ts, &ts) != 0) {
    }
  }
  fflush(stdout);
  raise(SIGKILL);
  return NULL;
}

/* The survivor's check of a failed call.  Survivors wait for each other
 * (out of band) before they exit: one that left early would be a dead rank
 * to the others. */
static int check_failure(const char* what, moecclResult_t res, const char* text, int victim,
                         int n) {
  char name[32];
  snprintf(name, sizeof(name), "rank %d", victim);
  printf("rank %d: %s got %d (%s): \"%s\"\n", mp_rank, what, (int)res, moecclGetErrorString(res),
         text);
  fflush(stdout);
  mp_shared_add(COUNTER_SURVIVORS, 1);
  MP_CHECK(mp_shared_wait(COUNTER_SURVIVORS, n - 1, 60) == 0,
           "the other survivors did not fail within 60 s");
  MP_CHECK(res == moecclRemoteError || res == moecclTimeout,
           "%s: expected moecclRemoteError or moecclTimeout, got %d (%s): %s", what, (int)res,
           moecclGetErrorString(res), text);
  MP_CHECK(strstr(text, name) != NULL, "%s: the error does not name the dead %s: \"%s\"", what,
           name, text);
  const char* first = strstr(text, "rank ");
  MP_CHECK(first && atoi(first + 5) == victim,
           "%s: the error names rank %d before the dead %s: \"%s\"", what,
           first ? atoi(first + 5) : -1, name, text);
  return 0;
}

static int body(moecclComm_t unused, int rank, int n, void* arg) {
  (void)unused;
  const round_t* r = arg;
  if (r->late_root) {
    setenv("MOECCL_TIMEOUT", "3", 1);      /* the launcher's root keeps its 600 s */
    if (rank == r->victim) raise(SIGKILL); /* before its hello */
    if (rank == 0) mp_sleep_ms(1500);
  } else if (rank == r->victim) {
    int fds[2];
    MP_CHECK(pipe(fds) == 0, "pipe failed");
    char path[64];
    snprintf(path, sizeof(path), "/dev/fd/%d", fds[1]);
    setenv("MOECCL_DEBUG", "INFO", 1);
    setenv("MOECCL_DEBUG_SUBSYS", "BOOT", 1);
    setenv("MOECCL_DEBUG_FILE", path, 1);
    log_fd = fds[0];
    kill_delay_us = r->delay_us;
    kill_at_segment = r->at_segment;
    pthread_t t;
    MP_CHECK(pthread_create(&t, NULL, killer, NULL) == 0, "pthread_create failed");
  }
  moecclComm_t comm = NULL;
  double start = mp_now();
  moecclResult_t res = moecclCommInitRank(&comm, n, mp_unique_id, rank);
  char text[1024];
  if (res != moecclSuccess) {
    snprintf(text, sizeof(text), "%s", mp_last_error_text(NULL));
    if (r->late_root) printf("rank %d: init failed after %.2f s\n", rank, mp_now() - start);
    if (rank == r->victim) raise(SIGKILL); /* it failed before its killer came */
    return check_failure("moecclCommInitRank", res, text, r->victim, n);
  }
  mp_comm = comm;
  /* Init completed here: the victim dies during or after the others' init.
   * An AllReduce involves every rank, so it must fail. */
  int32_t v = 1, sum = 0;
  for (long it = 0; it < MAX_ITERS; it++) {
    res = moecclAllReduce(&v, &sum, 1, moecclInt32, moecclSum, comm, NULL);
    if (res != moecclSuccess) break;
  }
  MP_CHECK(rank != r->victim, "the victim outlived its killer");
  snprintf(text, sizeof(text), "%s", mp_last_error_text(comm));
  int rc = check_failure("AllReduce after init", res, text, r->victim, n);
  moecclCommAbort(comm);
  mp_comm_released = 1;
  return rc;
}

/* Delays after the victim's "joined" line: 0 us up to past a whole init on
 * a loaded 2-core machine (then the AllReduce after init is what fails). */
static const long delays_us[] = {0, 300, 1000, 3000, 8000, 20000, 50000, 150000};
#define NDELAYS (int)(sizeof(delays_us) / sizeof(delays_us[0]))

/* The moeccl-* and ucx_shm_posix_* names in /dev/shm, in names (up to
 * max); returns how many. */
#define MAX_SHM_NAMES 256
static int shm_names(char (*names)[256], int max) {
  DIR* d = opendir("/dev/shm");
  int n = 0;
  for (struct dirent* e; d && n < max && (e = readdir(d)) != NULL;)
    if (ours(e->d_name)) snprintf(names[n++], sizeof(names[0]), "%s", e->d_name);
  if (d) closedir(d);
  return n;
}

/* Fails when /dev/shm holds a moeccl or UCX file it did not hold before
 * the round (a file another job is still using goes within a second: it is
 * looked at again before it counts). */
static int check_shm_left(char (*before)[256], int nbefore) {
  static char after[MAX_SHM_NAMES][256];
  for (int tries = 0;; tries++) {
    int n = shm_names(after, MAX_SHM_NAMES), left = -1;
    for (int i = 0; i < n && left < 0; i++) {
      int old = 0;
      for (int j = 0; j < nbefore && !old; j++) old = strcmp(after[i], before[j]) == 0;
      if (!old) left = i;
    }
    if (left < 0) return MP_EXIT_PASS;
    if (tries == 10) {
      printf("FAIL: the round left /dev/shm/%s behind\n", after[left]);
      return MP_EXIT_FAIL;
    }
    mp_sleep_ms(100);
  }
}

/* One round on the first rank count given (the library's log settings are
 * read once per process: a second mp_run here would not get the victim's
 * log), the victim rotating with the round. */
static int run_round(int argc, char** argv, int d) {
  static const int defaults[] = {4, 0};
  int ranks[16];
  int nr = mp_parse_ranks(argc, argv, defaults, ranks, 16);
  int overall = MP_EXIT_SKIP;
  for (int i = 0; i < nr && i < 1; i++) {
    int n = ranks[i];
    if (n < 2) continue;
    const char* seg = getenv("MP_INITFAULT_SEGMENT");    /* the victim, in a segment round */
    const char* late = getenv("MP_INITFAULT_LATE_ROOT"); /* the victim, in a late-root round */
    round_t r = {d % n, delays_us[d], 0, 0};
    if (seg) r = (round_t){atoi(seg) % n, 0, 1, 0};
    if (late) r = (round_t){atoi(late) % n, 0, 0, 1};
    mp_opts opts = MP_OPTS_DEFAULT;
    opts.deadline_s = 30;
    opts.no_init = 1;
    opts.expect_killed_rank = r.victim;
    opts.expect_killed_signal = SIGKILL;
    if (late)
      printf("nranks %d: rank %d killed before its hello, rank 0 1.5 s late, MOECCL_TIMEOUT=3 on "
             "the ranks, 600 s at the root\n",
             n, r.victim);
    else if (seg)
      printf("nranks %d: rank %d killed when it holds a node segment\n", n, r.victim);
    else
      printf("nranks %d: rank %d killed %ld us after it joined the rendezvous\n", n, r.victim,
             r.delay_us);
    static char before[MAX_SHM_NAMES][256];
    int nbefore = shm_names(before, MAX_SHM_NAMES);
    overall = mp_fold(overall, mp_run_opts(n, body, &r, &opts));
    overall = mp_fold(overall, check_shm_left(before, nbefore));
  }
  return overall;
}

/* The library reads MOECCL_DEBUG once per process, and the victim needs its
 * log: every round runs in a freshly executed process (a variant), on
 * shared memory, on simulated nodes (ucx by default) and over ofi. */
static const char* const configs[][4] = {
    {"shm3", "MP_RANKS_PER_NODE=0", "3", ""},
    {"shm4", "MP_RANKS_PER_NODE=0", "4", ""},
    {"nodes3", "MP_RANKS_PER_NODE=1", "3", ""},
    {"nodes4", "MP_RANKS_PER_NODE=1", "4", ""},
#ifdef MOECCL_HAVE_UCX
    {"nodes-ucx", "MP_RANKS_PER_NODE=2", "4", "MOECCL_NET=ucx"},
#endif
    {"nodes-ofi", "MP_RANKS_PER_NODE=2", "4", "MOECCL_NET=ofi"},
};
#define NCONFIGS (int)(sizeof(configs) / sizeof(configs[0]))

/* Segment rounds: the victim is local rank 0 of a node of two or more
 * (the creator of the node's segment), or any rank over ucx (UCX's posix
 * segments). */
static const char* const segment_configs[][4] = {
    {"seg-shm4-rank0", "MP_RANKS_PER_NODE=0", "4", "MP_INITFAULT_SEGMENT=0"},
    {"seg-ppn2-rank2", "MP_RANKS_PER_NODE=2", "4", "MP_INITFAULT_SEGMENT=2"},
#ifdef MOECCL_HAVE_UCX
    {"seg-ucx-rank1", "MP_RANKS_PER_NODE=1", "4", "MP_INITFAULT_SEGMENT=1"},
    {"seg-ucx-rank3", "MP_RANKS_PER_NODE=1", "4", "MP_INITFAULT_SEGMENT=3"},
#endif
};
#define NSEGMENT (int)(sizeof(segment_configs) / sizeof(segment_configs[0]))

/* Late-root rounds (the victim named by MP_INITFAULT_LATE_ROOT; the
 * transport matters not, since the rendezvous fails before any starts,
 * but the probes that found this ran over ucx). */
static const char* const late_configs[][5] = {
    {"late-root-rank2", "MP_RANKS_PER_NODE=0", "4", "MP_INITFAULT_LATE_ROOT=2", NULL},
    {"late-root-rank1-nodes", "MP_RANKS_PER_NODE=1", "4", "MP_INITFAULT_LATE_ROOT=1", NULL},
#ifdef MOECCL_HAVE_UCX
    {"late-root-rank3-ucx", "MP_RANKS_PER_NODE=2", "4", "MP_INITFAULT_LATE_ROOT=3",
     "MOECCL_NET=ucx"},
#endif
};
#define NLATE (int)(sizeof(late_configs) / sizeof(late_configs[0]))

int main(int argc, char** argv) {
  setenv("MOECCL_TIMEOUT", "600", 1);
  const char* round = getenv("MP_INITFAULT_ROUND");
  if (round) return run_round(argc, argv, atoi(round) % NDELAYS);
  static mp_variant variants[NCONFIGS * NDELAYS + NSEGMENT + NLATE + 1];
  static char names[NCONFIGS * NDELAYS][48], envs[NCONFIGS * NDELAYS][40];
  int k = 0;
  for (int c = 0; c < NCONFIGS; c++)
    for (int d = 0; d < NDELAYS; d++, k++) {
      snprintf(names[k], sizeof(names[k]), "%s-%ldus", configs[c][0], delays_us[d]);
      snprintf(envs[k], sizeof(envs[k]), "MP_INITFAULT_ROUND=%d", d);
      variants[k] = (mp_variant){names[k], {configs[c][1], envs[k], NULL}, configs[c][2]};
      if (configs[c][3][0]) variants[k].env[2] = configs[c][3];
      if (!strcmp(configs[c][3], "MOECCL_NET=ofi")) variants[k].env[3] = "MOECCL_OFI_PROVIDER=tcp";
    }
  for (int c = 0; c < NSEGMENT; c++, k++)
    variants[k] =
        (mp_variant){segment_configs[c][0],
                     {segment_configs[c][1], segment_configs[c][3], "MP_INITFAULT_ROUND=0", NULL},
                     segment_configs[c][2]};
  for (int c = 0; c < NLATE; c++, k++)
    variants[k] = (mp_variant){
        late_configs[c][0],
        {late_configs[c][1], late_configs[c][3], "MP_INITFAULT_ROUND=0", late_configs[c][4], NULL},
        late_configs[c][2]};
  variants[k] = (mp_variant){NULL, {NULL}, NULL};
  return mp_run_variants(argc, argv, variants, 60);
}
