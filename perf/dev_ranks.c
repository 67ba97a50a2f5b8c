/*
 * dev_ranks.c - the forked ranks and the NCCL loader of the device perf
 * tools (dev_ranks.h).
 */
#define _GNU_SOURCE
#include "dev_ranks.h"

#include <dlfcn.h>
#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

int dev_me, dev_nranks;
static dev_ranks_head_t* head;
static const char* tool = "";

double dev_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return x < y ? -1 : x > y;
}

double dev_median(double* v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

void dev_die(const char* fmt, ...) {
  char text[512];
  int k = snprintf(text, sizeof text, "%s: rank %d: ", tool, dev_me);
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(text + k, sizeof text - (size_t)k - 1, fmt, ap);
  va_end(ap);
  fprintf(stderr, "%s\n", text); /* one write: the ranks' lines do not interleave */
  if (head) atomic_store(&head->failed, 1);
  _exit(1);
}

void dev_barrier(void) {
  unsigned gen = atomic_load(&head->generation);
  if (atomic_fetch_add(&head->arrived, 1) == (unsigned)dev_nranks - 1) {
    atomic_store(&head->arrived, 0);
    atomic_fetch_add(&head->generation, 1);
    return;
  }
  double deadline = dev_now() + DEV_BARRIER_TIMEOUT_S;
  for (unsigned spins = 0; atomic_load(&head->generation) == gen; spins++) {
    if (atomic_load(&head->failed)) _exit(1);
    if (spins > 1000) {
      sched_yield();
      if ((spins & 1023) == 0 && dev_now() > deadline)
        dev_die("a barrier waited %.0f s for the other ranks", DEV_BARRIER_TIMEOUT_S);
    }
  }
}

const moecclUniqueId* dev_ranks_id(void) {
  while (atomic_load(&head->id_ready) == 0) { /* the launcher serves moeccl's rendezvous */
    if (atomic_load(&head->failed)) _exit(1);
    usleep(1000);
  }
  if (atomic_load(&head->id_ready) < 0) _exit(1);
  return &head->moeccl_id;
}

/* Waits for the started ranks; see dev_ranks_run. */
static int wait_ranks(pid_t* pids, int started, int status, int soft) {
  for (int left = started; left > 0;) {
    int st;
    pid_t pid = wait(&st);
    if (pid < 0) {
      if (errno == EINTR) continue;
      break;
    }
    for (int r = 0; r < started; r++) {
      if (pids[r] != pid) continue;
      pids[r] = 0, left--;
      int rrc = WIFEXITED(st) ? WEXITSTATUS(st) : 1;
      if (!WIFEXITED(st)) fprintf(stderr, "%s: rank %d ended by signal %d\n", tool, r, WTERMSIG(st));
      if (rrc && (!status || (soft && status == soft))) status = rrc;
      if (rrc && rrc != soft) { /* the others would wait for it */
        atomic_store(&head->failed, 1);
        for (int q = 0; q < started; q++)
          if (pids[q] > 0) kill(pids[q], SIGTERM);
      }
    }
  }
  return status;
}

int dev_ranks_run(const char* name, int nranks, size_t bytes, void** shared,
                  int (*rank_main)(void*), void* arg, int soft) {
  tool = name, dev_nranks = nranks;
  if (bytes < sizeof *head) bytes = sizeof *head;
  void* map = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (map == MAP_FAILED) {
    fprintf(stderr, "%s: mmap of %zu bytes: %s\n", tool, bytes, strerror(errno));
    return 1;
  }
  memset(map, 0, bytes);
  head = map, *shared = map;
  pid_t pids[DEV_RANKS_MAX], launcher = getpid();
  int started = 0, status = 0;
  for (int r = 0; r < nranks && r < DEV_RANKS_MAX; r++) {
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) {
      fprintf(stderr, "%s: fork: %s\n", tool, strerror(errno));
      status = 1;
      break;
    }
    if (pid == 0) { /* before any device call: CUDA does not survive a fork */
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != launcher) _exit(1);
      dev_me = r;
      int rc = rank_main(arg);
      fflush(stdout);
      _exit(rc);
    }
    pids[started++] = pid;
  }
  if (status == 0) {
    moecclResult_t res = moecclGetUniqueId(&head->moeccl_id);
    if (res != moecclSuccess) {
      fprintf(stderr, "%s: moecclGetUniqueId: %s: %s\n", tool, moecclGetErrorString(res),
              moecclGetLastError(NULL));
      status = 1;
    }
  }
  atomic_store(&head->id_ready, status ? -1 : 1);
  if (status) atomic_store(&head->failed, 1);
  return wait_ranks(pids, started, status, soft);
}

#define NCCL_SYM(field, name)                                                                      \
  do {                                                                                             \
    *(void**)&n->field = dlsym(n->lib, name);                                                      \
    if (!n->field) return snprintf(why, whylen, "%s has no %s", path, name), -1;                   \
  } while (0)

int dev_nccl_load(dev_nccl_t* n, const char* path, int min_version, char* why, size_t whylen) {
  memset(n, 0, sizeof *n);
  n->lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!n->lib && strcmp(path, DEV_NCCL_DEFAULT_LIB) == 0) /* then the loader's path */
    n->lib = dlopen(path = "libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
  if (!n->lib) return snprintf(why, whylen, "dlopen %s: %s", path, dlerror()), -1;
  n->path = path;
  /* moeccl's drop-in (libnccl.so.2 too) links libmoeccl: not the baseline */
  if (dlsym(n->lib, "moecclCommInitRank"))
    return snprintf(why, whylen, "%s is moeccl's NCCL drop-in, not NCCL (--nccl-lib)", path), -1;
  NCCL_SYM(get_version, "ncclGetVersion");
  NCCL_SYM(get_unique_id, "ncclGetUniqueId");
  NCCL_SYM(init_rank, "ncclCommInitRank");
  NCCL_SYM(destroy, "ncclCommDestroy");
  NCCL_SYM(alltoall, "ncclAlltoAll");
  NCCL_SYM(send, "ncclSend");
  NCCL_SYM(recv, "ncclRecv");
  NCCL_SYM(group_start, "ncclGroupStart");
  NCCL_SYM(group_end, "ncclGroupEnd");
  NCCL_SYM(error_string, "ncclGetErrorString");
  *(void**)&n->last_error = dlsym(n->lib, "ncclGetLastError");
  if (n->get_version(&n->version) != 0) n->version = 0;
  if (n->version < min_version)
    return snprintf(why, whylen,
                    "%s is NCCL %d, older than %d.%d (which runs several ranks on one GPU)", path,
                    n->version, min_version / 10000, min_version / 100 % 100),
           -1;
  return 0;
}
