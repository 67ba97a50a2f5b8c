/*
 * mp_shmleak: every rank of a communicator is killed (SIGKILL, no chance
 * to clean up) at a chosen point, and afterwards nothing of that
 * communicator is left in /dev/shm.  The node's shared-memory segment must
 * go with the last of its ranks, whenever they die.
 *
 * The points, on 2 and 3 ranks of one node:
 *   at-create  the moment local rank 0 holds the segment (before any other
 *              rank has it);
 *   at-map     the moment the last rank holds it (the others have it too,
 *              init is not over);
 *   delay-D    D us after every rank started (before, during or after
 *              init's mapping, as the machine's speed has it);
 *   after-init once every rank finished init;
 *   mid-call   in the middle of all-to-alls, after every rank ran some.
 *
 * Each rank watches its own descriptors and mappings for the segment
 * (moeccl-<32 hex>, as a /dev/shm file or a memfd) and records its name;
 * after the round no /dev/shm/<that name> may exist.  A round that kills
 * at the segment fails if no rank saw one (the point was never reached).
 */
#include "config.h"

#include <ctype.h>
#include <dirent.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "mp_harness.h"

#define MAX_RANKS 8
#define COUNTER_STARTED MAX_RANKS /* counters 0..MAX_RANKS-1: the ranks' pids */
#define COUNTER_INITED (MAX_RANKS + 1)
#define COUNTER_CALLS (MAX_RANKS + 2)

enum { AT_CREATE, AT_MAP, DELAY, AFTER_INIT, MID_CALL };

typedef struct {
  const char* name;
  int mode;
  long delay_us;
} round_t;

static const round_t rounds[] = {
    {"at-create", AT_CREATE, 0},   {"at-map", AT_MAP, 0},           {"delay-0", DELAY, 0},
    {"delay-2000", DELAY, 2000},   {"delay-10000", DELAY, 10000},   {"delay-40000", DELAY, 40000},
    {"after-init", AFTER_INIT, 0}, {"mid-call", MID_CALL, 0},
};
#define NROUNDS (int)(sizeof(rounds) / sizeof(rounds[0]))

/* Shared by the parent and every rank (mapped before the fork). */
typedef struct {
  char seen[MAX_RANKS][64]; /* the segment each rank saw, "moeccl-<hex>" */
} shared_t;
static shared_t* shared;
static const round_t* round_now;
static int n_now;

/* "moeccl-" and 32 hex digits at s: the node segment's name (not the
 * memfds of moecclMemAlloc, the ipc transport or the device emulation). */
static int segment_name_at(const char* s, char* out, size_t len) {
  const char* p = strstr(s, "moeccl-");
  if (!p) return 0;
  for (int i = 0; i < 32; i++)
    if (!isxdigit((unsigned char)p[7 + i])) return 0;
  snprintf(out, len, "%.39s", p);
  return 1;
}

/* Whether this process holds the segment (a descriptor or a mapping); its
 * name in out. */
static int holds_segment(char* out, size_t len) {
  char path[300], target[512];
  int found = 0;
  DIR* d = opendir("/proc/self/fd");
  for (struct dirent* e; d && !found && (e = readdir(d)) != NULL;) {
    snprintf(path, sizeof(path), "/proc/self/fd/%s", e->d_name);
    ssize_t n = readlink(path, target, sizeof(target) - 1);
    if (n <= 0) continue;
    target[n] = 0;
    found = segment_name_at(target, out, len);
  }
  if (d) closedir(d);
  FILE* f = found ? NULL : fopen("/proc/self/maps", "r");
  char line[1024];
  while (f && !found && fgets(line, sizeof(line), f)) found = segment_name_at(line, out, len);
  if (f) fclose(f);
  return found;
}

/* Kills every rank of the round, this one last. */
static void kill_all(void) {
  for (int r = 0; r < n_now; r++) {
    pid_t pid = (pid_t)mp_shared_get(r);
    if (pid > 0 && pid != getpid()) kill(pid, SIGKILL);
  }
  raise(SIGKILL);
}

/* Every rank: records the segment once it holds it; kills all at the
 * round's point when that point is "holds the segment". */
static void* watcher(void* arg) {
  (void)arg;
  int killer = (round_now->mode == AT_CREATE && mp_rank == 0) ||
               (round_now->mode == AT_MAP && mp_rank == n_now - 1);
  char name[64];
  double until = mp_now() + 20;
  while (mp_now() < until) {
    if (holds_segment(name, sizeof(name))) {
      snprintf(shared->seen[mp_rank], sizeof(shared->seen[0]), "%s", name);
      if (killer) kill_all();
      return NULL;
    }
    struct timespec ts = {0, 20000};
    nanosleep(&ts, NULL);
  }
  return NULL;
}

static void* delayed_killer(void* arg) {
  (void)arg;
  struct timespec ts = {round_now->delay_us / 1000000, (round_now->delay_us % 1000000) * 1000};
  while (nanosleep(&ts, &ts) != 0) {
  }
  kill_all();
  return NULL;
}

static int body(moecclComm_t unused, int rank, int n, void* arg) {
  (void)unused, (void)arg;
  mp_shared_add(rank, (int)getpid());
  mp_shared_add(COUNTER_STARTED, 1);
  MP_CHECK(mp_shared_wait(COUNTER_STARTED, n, 20) == 0, "the other ranks did not start");
  pthread_t t;
  MP_CHECK(pthread_create(&t, NULL, watcher, NULL) == 0, "pthread_create failed");
  if (round_now->mode == DELAY && rank == 0)
    MP_CHECK(pthread_create(&t, NULL, delayed_killer, NULL) == 0, "pthread_create failed");
  moecclComm_t comm = NULL;
  moecclResult_t res = moecclCommInitRank(&comm, n, mp_unique_id, rank);
  MP_CHECK(res == moecclSuccess, "init returned %d: %s", (int)res, mp_last_error_text(NULL));
  mp_comm = comm;
  mp_shared_add(COUNTER_INITED, 1);
  if (round_now->mode == AFTER_INIT) {
    MP_CHECK(mp_shared_wait(COUNTER_INITED, n, 20) == 0, "the other ranks did not finish init");
    if (rank == n - 1) kill_all();
  }
  size_t count = 64 * 1024; /* 256 KiB blocks: past the slots, copied once */
  int32_t* send = calloc(count * (size_t)n, sizeof(int32_t));
  int32_t* recv = calloc(count * (size_t)n, sizeof(int32_t));
  MP_CHECK(send && recv, "out of memory");
  for (int it = 0;; it++) {
    res = moecclAlltoAll(send, recv, count, moecclInt32, comm, NULL);
    if (res != moecclSuccess) break; /* a peer was killed first */
    if (it == 4) mp_shared_add(COUNTER_CALLS, 1);
    if (rank == n - 1 && mp_shared_get(COUNTER_CALLS) == n) kill_all();
  }
  mp_sleep_ms(20000); /* the killer comes; outliving it is a failure */
  MP_CHECK(0, "rank %d was not killed", rank);
  return 1;
}

/* The /dev/shm entry of a name a rank saw, if any is left. */
static int check_round(const round_t* r, int n) {
  int seen = 0, rc = MP_EXIT_PASS;
  for (int i = 0; i < n; i++) {
    if (!shared->seen[i][0]) continue;
    seen++;
    char path[128];
    snprintf(path, sizeof(path), "/dev/shm/%s", shared->seen[i]);
    struct stat st;
    if (stat(path, &st) == 0) {
      printf("FAIL %s, %d ranks: %s (%lld bytes) outlived every rank (removed now)\n", r->name, n,
             path, (long long)st.st_size);
      unlink(path);
      rc = MP_EXIT_FAIL;
    }
  }
  if ((r->mode == AT_CREATE || r->mode == AT_MAP) && !seen) {
    printf("FAIL %s, %d ranks: no rank saw its segment; the point was not reached\n", r->name, n);
    rc = MP_EXIT_FAIL;
  }
  printf("%s %s, %d ranks: %d rank(s) saw the segment%s\n", rc == MP_EXIT_PASS ? "ok" : "FAIL",
         r->name, n, seen, seen && rc == MP_EXIT_PASS ? "; nothing of it is left in /dev/shm" : "");
  return rc;
}

int main(int argc, char** argv) {
  static const int defaults[] = {2, 3, 0};
  int ranks[MAX_RANKS];
  int nr = mp_parse_ranks(argc, argv, defaults, ranks, MAX_RANKS);
  shared = mmap(NULL, sizeof(*shared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (shared == MAP_FAILED) return MP_EXIT_FAIL;
  setenv("MOECCL_TIMEOUT", "30", 0);
  unsetenv("MP_RANKS_PER_NODE"); /* every rank on one node: one segment */
  int overall = MP_EXIT_PASS;
  for (int i = 0; i < nr; i++) {
    if (ranks[i] < 2 || ranks[i] > MAX_RANKS) continue;
    for (int k = 0; k < NROUNDS; k++) {
      if (!mp_want(rounds[k].name)) continue;
      memset(shared, 0, sizeof(*shared));
      round_now = &rounds[k];
      n_now = ranks[i];
      mp_opts opts = MP_OPTS_DEFAULT;
      opts.deadline_s = 60;
      opts.no_init = 1;
      opts.expect_killed_rank = MP_ALL_RANKS;
      opts.expect_killed_signal = SIGKILL;
      overall = mp_fold(overall, mp_run_opts(n_now, body, NULL, &opts));
      overall = mp_fold(overall, check_round(round_now, n_now));
      fflush(stdout);
    }
  }
  munmap(shared, sizeof(*shared));
  return overall;
}
