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
 * Variants: simulated nodes (the network transport's setup), shared memory
 * only.
 */
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
} round_t;

/* The victim's killer thread: waits for the library's log line saying the
 * victim joined the rendezvous (its hello reached the root), then for the
 * round's delay, then kills the process. */
static long kill_delay_us;
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
  struct timespec ts = {kill_delay_us / 1000000, (kill_delay_us % 1000000) * 1000};
  while (nanosleep(&ts, &ts) != 0) {
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
  return 0;
}

static int body(moecclComm_t unused, int rank, int n, void* arg) {
  (void)unused;
  const round_t* r = arg;
  if (rank == r->victim) {
    int fds[2];
    MP_CHECK(pipe(fds) == 0, "pipe failed");
    char path[64];
    snprintf(path, sizeof(path), "/dev/fd/%d", fds[1]);
    setenv("MOECCL_DEBUG", "INFO", 1);
    setenv("MOECCL_DEBUG_SUBSYS", "BOOT", 1);
    setenv("MOECCL_DEBUG_FILE", path, 1);
    log_fd = fds[0];
    kill_delay_us = r->delay_us;
    pthread_t t;
    MP_CHECK(pthread_create(&t, NULL, killer, NULL) == 0, "pthread_create failed");
  }
  moecclComm_t comm = NULL;
  moecclResult_t res = moecclCommInitRank(&comm, n, mp_unique_id, rank);
  char text[1024];
  if (res != moecclSuccess) {
    snprintf(text, sizeof(text), "%s", mp_last_error_text(NULL));
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
    round_t r = {1 + d % (n - 1), delays_us[d]};
    mp_opts opts = MP_OPTS_DEFAULT;
    opts.deadline_s = 30;
    opts.no_init = 1;
    opts.expect_killed_rank = r.victim;
    opts.expect_killed_signal = SIGKILL;
    printf("nranks %d: rank %d killed %ld us after it joined the rendezvous\n", n, r.victim,
           r.delay_us);
    overall = mp_fold(overall, mp_run_opts(n, body, &r, &opts));
  }
  return overall;
}

/* The library reads MOECCL_DEBUG once per process, and the victim needs its
 * log: every round runs in a freshly executed process (a variant), on
 * shared memory, on simulated nodes (ucx by default) and over ofi. */
static const char* const configs[][3] = {
    {"shm3", "MP_RANKS_PER_NODE=0", "3"},      {"shm4", "MP_RANKS_PER_NODE=0", "4"},
    {"nodes3", "MP_RANKS_PER_NODE=1", "3"},    {"nodes4", "MP_RANKS_PER_NODE=1", "4"},
    {"nodes-ofi", "MP_RANKS_PER_NODE=2", "4"},
};
#define NCONFIGS (int)(sizeof(configs) / sizeof(configs[0]))

int main(int argc, char** argv) {
  setenv("MOECCL_TIMEOUT", "600", 1);
  const char* round = getenv("MP_INITFAULT_ROUND");
  if (round) return run_round(argc, argv, atoi(round) % NDELAYS);
  static mp_variant variants[NCONFIGS * NDELAYS + 1];
  static char names[NCONFIGS * NDELAYS][48], envs[NCONFIGS * NDELAYS][40];
  int k = 0;
  for (int c = 0; c < NCONFIGS; c++)
    for (int d = 0; d < NDELAYS; d++, k++) {
      snprintf(names[k], sizeof(names[k]), "%s-%ldus", configs[c][0], delays_us[d]);
      snprintf(envs[k], sizeof(envs[k]), "MP_INITFAULT_ROUND=%d", d);
      variants[k] = (mp_variant){names[k], {configs[c][1], envs[k], NULL}, configs[c][2]};
      if (c == NCONFIGS - 1) {
        variants[k].env[2] = "MOECCL_NET=ofi";
        variants[k].env[3] = "MOECCL_OFI_PROVIDER=tcp";
      }
    }
  variants[k] = (mp_variant){NULL, {NULL}, NULL};
  return mp_run_variants(argc, argv, variants, 60);
}
