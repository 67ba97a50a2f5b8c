/*
 * mp_harness.c - fork-based launcher and check helpers for the multi-process
 * tests.  See mp_harness.h.
 */
#define _GNU_SOURCE
#include "mp_harness.h"

#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

int mp_rank = -1;
int mp_nranks = 0;
moecclComm_t mp_comm = NULL;
moecclUniqueId mp_unique_id;
int mp_comm_released = 0;

const int mp_default_ranks[] = {1, 2, 3, 4, 5, 8, 0};

typedef struct {
  int counters[MP_SHARED_COUNTERS];
} mp_shared_page;
static mp_shared_page* mp_shared;

/* ---- Small utilities ------------------------------------------------------ */

double mp_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void mp_sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

/* The job's first failure: the first rank to fail copies its line here, and
 * the parent repeats it under its verdict, so that a log cut to its tail (as
 * CI shows one) still says what went wrong first rather than only how the
 * other ranks saw that rank go. */
typedef struct {
  int claimed;
  char text[1024];
} mp_first_failure_t;
static mp_first_failure_t* mp_first_failure;

int mp_first_failure_reset(void) {
  if (!mp_first_failure) {
    void* p = mmap(NULL, sizeof(*mp_first_failure), PROT_READ | PROT_WRITE,
                   MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return -1;
    mp_first_failure = p; /* kept for the process's life: one page */
  }
  memset(mp_first_failure, 0, sizeof(*mp_first_failure));
  return 0;
}

void mp_first_failure_print(const char* label) {
  if (!mp_first_failure || !__atomic_load_n(&mp_first_failure->claimed, __ATOMIC_ACQUIRE)) return;
  printf("first failure (%s): %s\n", label, mp_first_failure->text);
  fflush(stdout);
}

static void mp_first_failure_record(const char* line, int n) {
  if (!mp_first_failure || __atomic_exchange_n(&mp_first_failure->claimed, 1, __ATOMIC_ACQ_REL))
    return;
  if (n > (int)sizeof(mp_first_failure->text) - 1) n = (int)sizeof(mp_first_failure->text) - 1;
  memcpy(mp_first_failure->text, line, (size_t)n);
  mp_first_failure->text[n] = '\0';
}

/* One write() per message, so lines from many ranks do not interleave; a
 * rank's failure (record) also becomes the job's first failure if none is. */
static void mp_vprint_line(const char* prefix, const char* file, int line, int record,
                           const char* fmt, va_list ap) {
  char buf[2048];
  int n = snprintf(buf, sizeof(buf), "%s", prefix);
  if (n < 0) n = 0;
  int m = vsnprintf(buf + n, sizeof(buf) - (size_t)n, fmt, ap);
  if (m > 0) n += m;
  if (n > (int)sizeof(buf) - 64) n = (int)sizeof(buf) - 64;
  if (file) n += snprintf(buf + n, sizeof(buf) - (size_t)n, " (%s:%d)", file, line);
  if (record) mp_first_failure_record(buf, n);
  buf[n++] = '\n';
  ssize_t w = write(STDERR_FILENO, buf, (size_t)n);
  (void)w;
}

void mp_failf(const char* file, int line, const char* fmt, ...) {
  char prefix[64];
  if (mp_rank >= 0) snprintf(prefix, sizeof(prefix), "rank %d: ", mp_rank);
  else snprintf(prefix, sizeof(prefix), "parent: ");
  va_list ap;
  va_start(ap, fmt);
  mp_vprint_line(prefix, file, line, mp_rank >= 0, fmt, ap);
  va_end(ap);
}

static void mp_parent_msg(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
static void mp_parent_msg(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  mp_vprint_line("", NULL, 0, 0, fmt, ap);
  va_end(ap);
}

const char* mp_last_error_text(moecclComm_t c) {
  const char* s = moecclGetLastError(c);
  return s ? s : "(moecclGetLastError returned NULL)";
}

void* mp_xmalloc(size_t bytes) {
  void* p = malloc(bytes ? bytes : 1);
  if (!p) {
    mp_failf(__FILE__, __LINE__, "out of memory allocating %zu bytes", bytes);
    _exit(MP_EXIT_FAIL);
  }
  return p;
}

/* ---- Environment ---------------------------------------------------------- */

void mp_env_default(const char* name, const char* value) {
  if (!getenv(name)) setenv(name, value, 0);
}

static double mp_deadline_scale(void) {
  const char* s = getenv("MP_DEADLINE_SCALE");
  double v = s ? atof(s) : 1.0;
  return v > 0 ? v : 1.0;
}

/* MOECCL_TIMEOUT: 30 s, stretched like the deadlines (a sanitizer build or
 * an overloaded machine starves ranks for long; the timeout is "without
 * progress", so a peer that gets no core for 30 s looks hung). */
void mp_env_defaults(void) {
  char t[32];
  snprintf(t, sizeof(t), "%d", (int)(30 * mp_deadline_scale() + 0.5));
  mp_env_default("MOECCL_TIMEOUT", t);
}

/* ---- Rank counts ---------------------------------------------------------- */

static int mp_parse_list(const char* s, int* out, int n, int max) {
  while (*s && n < max) {
    char* end;
    long v = strtol(s, &end, 10);
    if (end == s) {
      s++;
      continue;
    }
    if (v >= 1 && v <= 256) out[n++] = (int)v;
    else fprintf(stderr, "ignoring rank count %ld\n", v);
    s = end;
  }
  return n;
}

int mp_parse_ranks(int argc, char** argv, const int* defaults, int* out, int max) {
  int n = 0;
  for (int i = 1; i < argc; i++) n = mp_parse_list(argv[i], out, n, max);
  if (n == 0 && getenv("MP_RANKS")) n = mp_parse_list(getenv("MP_RANKS"), out, 0, max);
  if (n == 0)
    for (int i = 0; defaults[i] > 0 && n < max; i++) out[n++] = defaults[i];
  return n;
}

static int mp_count_dir(const char* path) {
  DIR* d = opendir(path);
  if (!d) return -1;
  int n = 0;
  for (struct dirent* e; (e = readdir(d)) != NULL;)
    if (e->d_name[0] != '.') n++;
  closedir(d);
  return n;
}

static void mp_resources_sample(mp_resources* r) {
  r->fds = mp_count_dir("/proc/self/fd") - 1; /* the directory stream's own fd */
  r->threads = mp_count_dir("/proc/self/task");
  r->maps = 0;
  FILE* f = fopen("/proc/self/maps", "r");
  if (f) {
    for (int c; (c = fgetc(f)) != EOF;) r->maps += c == '\n';
    fclose(f);
  }
}

/* The smallest counts over 50 ms, so a thread of the library that is just
 * winding down (a finished rendezvous) does not inflate them. */
void mp_resources_get(mp_resources* r) {
  mp_resources_sample(r);
  for (int i = 0; i < 10; i++) {
    mp_sleep_ms(5);
    mp_resources now;
    mp_resources_sample(&now);
    if (now.fds < r->fds) r->fds = now.fds;
    if (now.threads < r->threads) r->threads = now.threads;
    if (now.maps < r->maps) r->maps = now.maps;
  }
}

/* Sanitizer runtimes map memory of their own for every thread and
 * allocation; the mapping count means nothing there. */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define MP_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) ||                         \
    __has_feature(memory_sanitizer)
#define MP_SANITIZED 1
#endif
#endif
#ifndef MP_SANITIZED
#define MP_SANITIZED 0
#endif

int mp_check_resources(const char* file, int line, const char* what, const mp_resources* before,
                       int max_map_growth) {
  mp_resources now;
  /* Threads the library ends (a finished rendezvous, a destroyed stream) and
   * their sockets may take a moment to be gone: wait up to 2 s.  Fewer than
   * before is fine (one was still winding down when we counted). */
  for (int i = 0; i < 400; i++) {
    mp_resources_sample(&now);
    if (now.threads <= before->threads && now.fds <= before->fds) break;
    mp_sleep_ms(5);
  }
  int maps_grew = !MP_SANITIZED && now.maps - before->maps >= max_map_growth;
  if (now.fds > before->fds || now.threads > before->threads || maps_grew) {
    mp_failf(file, line, "%s: resources leak: fds %d -> %d, threads %d -> %d, mappings %d -> %d",
             what, before->fds, now.fds, before->threads, now.threads, before->maps, now.maps);
    return 1;
  }
  return 0;
}

int mp_want(const char* name) {
  const char* list = getenv("MP_SUBTESTS");
  if (!list || !*list) return 1;
  size_t len = strlen(name);
  for (const char* p = list; (p = strstr(p, name)) != NULL; p += len)
    if ((p == list || p[-1] == ',') && (p[len] == '\0' || p[len] == ',')) return 1;
  return 0;
}

int mp_fold(int overall, int result) {
  if (overall == MP_EXIT_FAIL || result == MP_EXIT_FAIL) return MP_EXIT_FAIL;
  if (result == MP_EXIT_PASS) return MP_EXIT_PASS;
  return overall; /* a skip keeps what we had (initialise overall to SKIP) */
}

/* ---- Shared counters ------------------------------------------------------ */

int mp_shared_add(int counter, int value) {
  if (!mp_shared || counter < 0 || counter >= MP_SHARED_COUNTERS) return -1;
  return __atomic_add_fetch(&mp_shared->counters[counter], value, __ATOMIC_SEQ_CST);
}

int mp_shared_get(int counter) {
  if (!mp_shared || counter < 0 || counter >= MP_SHARED_COUNTERS) return -1;
  return __atomic_load_n(&mp_shared->counters[counter], __ATOMIC_SEQ_CST);
}

int mp_shared_wait(int counter, int target, int timeout_s) {
  double end = mp_now() + timeout_s * mp_deadline_scale();
  while (mp_shared_get(counter) < target) {
    if (mp_now() > end) return -1;
    mp_sleep_ms(1);
  }
  return 0;
}

/* ---- Launcher ------------------------------------------------------------- */

void mp_kill_rank(mp_job* job, int rank, int sig) {
  if (rank < 0 || rank >= job->nranks || job->done[rank] || job->pids[rank] <= 0) return;
  kill(job->pids[rank], sig);
}

/* Reads the unique id the parent sends once it has made it. */
int mp_read_id(int fd) {
  size_t got = 0;
  while (got < sizeof(mp_unique_id)) {
    ssize_t n = read(fd, (char*)&mp_unique_id + got, sizeof(mp_unique_id) - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return -1;
    got += (size_t)n;
  }
  close(fd);
  return 0;
}

static __attribute__((noreturn)) void mp_child(int rank, int nranks, mp_body_fn body, void* arg,
                                               const mp_opts* opts, const sigset_t* oldmask,
                                               pid_t parent, int id_fd) {
  sigprocmask(SIG_SETMASK, oldmask, NULL);
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != parent) _exit(MP_EXIT_FAIL);
  mp_rank = rank;
  /* Simulated nodes: MP_RANKS_PER_NODE=k puts ranks r and r' on one node
   * when r / k == r' / k (through MOECCL_HOSTID, as separate hosts would). */
  const char* ppn = getenv("MP_RANKS_PER_NODE");
  if (ppn && atoi(ppn) > 0) {
    char host[32];
    snprintf(host, sizeof(host), "mp-node-%d", rank / atoi(ppn));
    setenv("MOECCL_HOSTID", host, 1);
  }
  if (mp_read_id(id_fd) != 0) _exit(MP_EXIT_FAIL); /* the parent failed to make an id */
  mp_nranks = nranks;
  mp_comm = NULL;
  mp_comm_released = 0;
  moecclComm_t comm = NULL;
  if (!opts->no_init) {
    moecclResult_t r = moecclCommInitRank(&comm, nranks, mp_unique_id, rank);
    if (r != moecclSuccess) {
      mp_failf(__FILE__, __LINE__, "moecclCommInitRank(nranks=%d, rank=%d) returned %d (%s): %s",
               nranks, rank, (int)r, moecclGetErrorString(r), mp_last_error_text(NULL));
      _exit(MP_EXIT_FAIL);
    }
    mp_comm = comm;
  }
  mp_child_finish(comm, body(comm, rank, nranks, arg));
}

void mp_child_finish(moecclComm_t comm, int result) {
  if (comm && !mp_comm_released) {
    moecclResult_t r = moecclCommDestroy(comm);
    if (r != moecclSuccess) {
      mp_failf(__FILE__, __LINE__, "moecclCommDestroy returned %d (%s): %s", (int)r,
               moecclGetErrorString(r), mp_last_error_text(NULL));
      if (result == 0) result = MP_EXIT_FAIL;
    }
  }
  fflush(stdout);
  fflush(stderr);
  _exit(result == 0 ? MP_EXIT_PASS : result == MP_EXIT_SKIP ? MP_EXIT_SKIP : MP_EXIT_FAIL);
}

/* Reaps every child that has exited; returns how many. */
static int mp_reap(mp_job* job) {
  int reaped = 0;
  for (;;) {
    int st;
    pid_t pid = waitpid(-1, &st, WNOHANG);
    if (pid <= 0) break;
    for (int r = 0; r < job->nranks; r++) {
      if (job->pids[r] == pid && !job->done[r]) {
        job->done[r] = 1;
        job->status[r] = st;
        reaped++;
      }
    }
  }
  return reaped;
}

void mp_describe_status(int st, char* buf, size_t len) {
  if (WIFEXITED(st)) snprintf(buf, len, "exited with code %d", WEXITSTATUS(st));
  else if (WIFSIGNALED(st))
    snprintf(buf, len, "killed by signal %d (%s)", WTERMSIG(st), strsignal(WTERMSIG(st)));
  else snprintf(buf, len, "wait status 0x%x", st);
}

/* Judges each rank's wait status; returns PASS, FAIL or SKIP. */
static int mp_judge(const mp_job* job, const mp_opts* opts) {
  int failed = 0, passed = 0, skipped = 0;
  for (int r = 0; r < job->nranks; r++) {
    int st = job->status[r];
    char what[128];
    mp_describe_status(st, what, sizeof(what));
    if (r == opts->expect_killed_rank || opts->expect_killed_rank == MP_ALL_RANKS) {
      int ok = opts->expect_exit_code > 0
                   ? WIFEXITED(st) && WEXITSTATUS(st) == opts->expect_exit_code
                   : WIFSIGNALED(st) && (opts->expect_killed_signal == 0 ||
                                         WTERMSIG(st) == opts->expect_killed_signal);
      if (!ok) {
        mp_parent_msg("FAIL nranks=%d: rank %d was expected to %s but %s", job->nranks, r,
                      opts->expect_exit_code > 0 ? "exit early" : "be killed by a signal", what);
        failed++;
      }
      continue;
    }
    if (WIFEXITED(st) && WEXITSTATUS(st) == MP_EXIT_PASS) {
      passed++;
    } else if (WIFEXITED(st) && WEXITSTATUS(st) == MP_EXIT_SKIP) {
      skipped++;
    } else {
      mp_parent_msg("FAIL nranks=%d: rank %d %s", job->nranks, r, what);
      failed++;
    }
  }
  if (failed) return MP_EXIT_FAIL;
  if (skipped && !passed) return MP_EXIT_SKIP;
  return MP_EXIT_PASS;
}

/* Kills every child that is still running, reaps it, and names the ranks. */
static void mp_kill_stragglers(mp_job* job, const char* why) {
  char list[1024];
  int n = 0;
  list[0] = '\0';
  for (int r = 0; r < job->nranks; r++) {
    if (job->done[r]) continue;
    kill(job->pids[r], SIGKILL);
    n += snprintf(list + n, sizeof(list) - (size_t)n, "%s%d", n ? "," : "", r);
    if (n >= (int)sizeof(list)) n = (int)sizeof(list) - 1;
  }
  for (int r = 0; r < job->nranks; r++) {
    if (job->done[r]) continue;
    int st;
    while (waitpid(job->pids[r], &st, 0) < 0 && errno == EINTR) {
    }
    job->done[r] = 1;
    job->status[r] = st;
  }
  if (n)
    mp_parent_msg("FAIL nranks=%d: %s; ranks not finished: %s (killed)", job->nranks, why, list);
}

/* Forks the children before the parent makes the id (and so before the
 * library starts its rendezvous thread): a fork while another thread holds
 * an allocator lock can leave the child deadlocked, which happens with some
 * sanitizer allocators.  Each child waits on its pipe for the id. */
static int mp_fork_all(mp_job* job, mp_body_fn body, void* arg, const mp_opts* opts,
                       const sigset_t* oldmask, int* id_fds) {
  pid_t parent = getpid();
  for (int r = 0; r < job->nranks; r++) {
    int fds[2];
    if (pipe(fds) != 0) {
      mp_parent_msg("FAIL nranks=%d: pipe for rank %d: %s", job->nranks, r, strerror(errno));
      return -1;
    }
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) {
      mp_parent_msg("FAIL nranks=%d: fork for rank %d: %s", job->nranks, r, strerror(errno));
      close(fds[0]);
      close(fds[1]);
      return -1;
    }
    if (pid == 0) {
      close(fds[1]);
      for (int i = 0; i < r; i++) close(id_fds[i]); /* earlier ranks' write ends */
      mp_child(r, job->nranks, body, arg, opts, oldmask, parent, fds[0]);
    }
    close(fds[0]);
    id_fds[r] = fds[1];
    job->pids[r] = pid;
  }
  return 0;
}

/* Sends the id to every child and closes the pipes; -1 if one write failed. */
static int mp_send_id(mp_job* job, int* id_fds) {
  int rc = 0;
  for (int r = 0; r < job->nranks; r++) {
    if (id_fds[r] < 0) continue;
    ssize_t n;
    do n = write(id_fds[r], &mp_unique_id, sizeof(mp_unique_id));
    while (n < 0 && errno == EINTR);
    if (n != (ssize_t)sizeof(mp_unique_id)) rc = -1;
    close(id_fds[r]);
    id_fds[r] = -1;
  }
  return rc;
}

static void mp_close_ids(mp_job* job, int* id_fds) {
  for (int r = 0; r < job->nranks; r++)
    if (id_fds[r] >= 0) close(id_fds[r]), id_fds[r] = -1;
}

/* Waits for all children, reaping promptly; returns 0, or -1 after the deadline. */
static int mp_wait_all(mp_job* job, const mp_opts* opts, double deadline_s) {
  sigset_t chld;
  sigemptyset(&chld);
  sigaddset(&chld, SIGCHLD);
  double end = mp_now() + deadline_s;
  int remaining = job->nranks;
  for (int r = 0; r < job->nranks; r++)
    if (job->done[r]) remaining--;
  while (remaining > 0) {
    remaining -= mp_reap(job);
    if (remaining == 0) break;
    if (opts->parent_poll) opts->parent_poll(job, opts->parent_poll_arg);
    if (mp_now() > end) return -1;
    struct timespec ts = {0, 10 * 1000000L};
    sigtimedwait(&chld, NULL, &ts);
  }
  return 0;
}

int mp_run_opts(int nranks, mp_body_fn body, void* arg, const mp_opts* opts) {
  mp_env_defaults();
  double deadline_s = (opts->deadline_s > 0 ? opts->deadline_s : 120) * mp_deadline_scale();
  double start = mp_now();

  mp_job job = {nranks, NULL, NULL, NULL};
  job.pids = calloc((size_t)nranks, sizeof(pid_t));
  job.done = calloc((size_t)nranks, sizeof(int));
  job.status = calloc((size_t)nranks, sizeof(int));
  mp_shared =
      mmap(NULL, sizeof(mp_shared_page), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (!job.pids || !job.done || !job.status || mp_shared == MAP_FAILED) {
    mp_parent_msg("FAIL nranks=%d: out of memory in the harness", nranks);
    return MP_EXIT_FAIL;
  }
  memset(mp_shared, 0, sizeof(*mp_shared));
  mp_first_failure_reset();

  /* Block SIGCHLD so that sigtimedwait below sees every one (the library's
   * threads, started after this, inherit the mask). */
  sigset_t chld, oldmask;
  sigemptyset(&chld);
  sigaddset(&chld, SIGCHLD);
  sigprocmask(SIG_BLOCK, &chld, &oldmask);

  /* A child that died before reading its id must not kill the parent. */
  struct sigaction ign = {.sa_handler = SIG_IGN}, oldpipe;
  sigaction(SIGPIPE, &ign, &oldpipe);

  int result;
  int* id_fds = malloc(sizeof(int) * (size_t)nranks);
  for (int i = 0; i < nranks; i++) id_fds[i] = -1;
  if (mp_fork_all(&job, body, arg, opts, &oldmask, id_fds) != 0) {
    mp_close_ids(&job, id_fds);
    for (int i = 0; i < nranks; i++)
      if (job.pids[i] <= 0) job.done[i] = 1, job.status[i] = MP_EXIT_FAIL << 8;
    mp_kill_stragglers(&job, "could not start every rank");
    result = MP_EXIT_FAIL;
  } else {
    moecclResult_t r = moecclGetUniqueId(&mp_unique_id);
    if (r != moecclSuccess) {
      mp_parent_msg("FAIL nranks=%d: moecclGetUniqueId returned %d (%s): %s", nranks, (int)r,
                    moecclGetErrorString(r), mp_last_error_text(NULL));
      mp_close_ids(&job, id_fds);               /* the children see EOF and exit */
    } else if (mp_send_id(&job, id_fds) != 0) { /* a child died early; judged below */
      mp_parent_msg("FAIL nranks=%d: could not send the id to every child", nranks);
    }
    if (mp_wait_all(&job, opts, deadline_s) != 0) {
      char why[64];
      snprintf(why, sizeof(why), "deadline of %.0f s passed", deadline_s);
      mp_kill_stragglers(&job, why);
      mp_judge(&job, opts);
      result = MP_EXIT_FAIL;
    } else {
      result = mp_judge(&job, opts);
    }
    if (r != moecclSuccess) result = MP_EXIT_FAIL;
  }
  if (result == MP_EXIT_FAIL) {
    char label[32];
    snprintf(label, sizeof(label), "nranks=%d", nranks);
    mp_first_failure_print(label);
  }
  free(id_fds);
  sigaction(SIGPIPE, &oldpipe, NULL);
  sigprocmask(SIG_SETMASK, &oldmask, NULL);
  munmap(mp_shared, sizeof(mp_shared_page));
  mp_shared = NULL;
  free(job.pids);
  free(job.done);
  free(job.status);
  printf("%s nranks=%d (%.1f s)\n",
         result == MP_EXIT_PASS   ? "PASS"
         : result == MP_EXIT_SKIP ? "SKIP"
                                  : "FAIL",
         nranks, mp_now() - start);
  fflush(stdout);
  return result;
}

int mp_run(int nranks, mp_body_fn body, void* arg, int deadline_s) {
  mp_opts opts = MP_OPTS_DEFAULT;
  opts.deadline_s = deadline_s;
  return mp_run_opts(nranks, body, arg, &opts);
}

/* ---- Variants: the program again, in a fresh process with more env ------- */

static int mp_run_variant(char** argv, const mp_variant* v, int deadline_s) {
  printf("variant %s (", v->name);
  for (int i = 0; i < MP_VARIANT_ENV && v->env[i]; i++) printf("%s%s", i ? " " : "", v->env[i]);
  printf("), ranks %s:\n", v->ranks);
  fflush(stdout);
  fflush(stderr);
  double end = mp_now() + deadline_s * mp_deadline_scale();
  pid_t pid = fork();
  if (pid < 0) {
    mp_parent_msg("FAIL variant %s: fork: %s", v->name, strerror(errno));
    return MP_EXIT_FAIL;
  }
  if (pid == 0) {
    for (int i = 0; i < MP_VARIANT_ENV && v->env[i]; i++) putenv((char*)v->env[i]);
    setenv("MP_VARIANT", v->name, 1);
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    char* args[] = {argv[0], (char*)v->ranks, NULL};
    execv("/proc/self/exe", args);
    mp_failf(__FILE__, __LINE__, "execv /proc/self/exe: %s", strerror(errno));
    _exit(MP_EXIT_FAIL);
  }
  int st = 0;
  for (;;) {
    pid_t w = waitpid(pid, &st, WNOHANG);
    if (w == pid) break;
    if (mp_now() > end) {
      kill(pid, SIGKILL); /* its children die with it (PR_SET_PDEATHSIG) */
      waitpid(pid, &st, 0);
      mp_parent_msg("FAIL variant %s: deadline of %d s passed (killed)", v->name, deadline_s);
      return MP_EXIT_FAIL;
    }
    mp_sleep_ms(10);
  }
  if (WIFEXITED(st) && (WEXITSTATUS(st) == MP_EXIT_PASS || WEXITSTATUS(st) == MP_EXIT_SKIP))
    return WEXITSTATUS(st);
  char what[128];
  mp_describe_status(st, what, sizeof(what));
  mp_parent_msg("FAIL variant %s: %s", v->name, what);
  return MP_EXIT_FAIL;
}

int mp_main(int argc, char** argv, const int* defaults, mp_body_fn body, void* arg, int deadline_s,
            const mp_variant* variants) {
  int ranks[64];
  int n = mp_parse_ranks(argc, argv, defaults, ranks, 64);
  int overall = MP_EXIT_SKIP;
  for (int i = 0; i < n; i++) overall = mp_fold(overall, mp_run(ranks[i], body, arg, deadline_s));
  return mp_fold(overall, mp_run_variants(argc, argv, variants, deadline_s));
}

int mp_run_variants(int argc, char** argv, const mp_variant* variants, int deadline_s) {
  const char* want = getenv("MP_VARIANTS");
  int overall = MP_EXIT_SKIP;
  if (argc > 1 || getenv("MP_VARIANT") || (want && !strcmp(want, "0")) || !variants) return overall;
  for (const mp_variant* v = variants; v->name; v++) {
    int nr = 1;
    for (const char* c = v->ranks; *c; c++) nr += *c == ',';
    overall = mp_fold(overall, mp_run_variant(argv, v, deadline_s * nr));
  }
  return overall;
}

/* Every algorithm on simulated nodes of 1, 2 and 4 ranks (MOECCL_HOSTID):
 * shared memory within a node, the network transport between nodes. */
const mp_variant mp_topo_variants[] = {
    {"direct-ppn1", {"MOECCL_ALGO=direct", "MP_RANKS_PER_NODE=1"}, "2,5"},
    {"direct-ppn2", {"MOECCL_ALGO=direct", "MP_RANKS_PER_NODE=2"}, "4,6"},
    {"direct-ppn4", {"MOECCL_ALGO=direct", "MP_RANKS_PER_NODE=4"}, "8"},
    {"pairwise-ppn1", {"MOECCL_ALGO=pairwise", "MP_RANKS_PER_NODE=1"}, "2,5"},
    {"pairwise-ppn2", {"MOECCL_ALGO=pairwise", "MP_RANKS_PER_NODE=2"}, "4,6"},
    {"pairwise-ppn4", {"MOECCL_ALGO=pairwise", "MP_RANKS_PER_NODE=4"}, "8"},
    {"bruck-ppn1", {"MOECCL_ALGO=bruck", "MP_RANKS_PER_NODE=1"}, "2,5"},
    {"bruck-ppn2", {"MOECCL_ALGO=bruck", "MP_RANKS_PER_NODE=2"}, "4,6"},
    {"bruck-ppn4", {"MOECCL_ALGO=bruck", "MP_RANKS_PER_NODE=4"}, "8"},
    {"hier2-ppn1", {"MOECCL_ALGO=hier2", "MP_RANKS_PER_NODE=1"}, "2,5"},
    {"hier2-ppn2", {"MOECCL_ALGO=hier2", "MP_RANKS_PER_NODE=2"}, "4,6"},
    {"hier2-ppn4", {"MOECCL_ALGO=hier2", "MP_RANKS_PER_NODE=4"}, "8"},
    {"hier2p-ppn1", {"MOECCL_ALGO=hier2p", "MP_RANKS_PER_NODE=1", "MOECCL_A2A_CHUNKS=3"}, "2,5"},
    {"hier2p-ppn2", {"MOECCL_ALGO=hier2p", "MP_RANKS_PER_NODE=2"}, "4,6"},
    {"hier2p-ppn4", {"MOECCL_ALGO=hier2p", "MP_RANKS_PER_NODE=4", "MOECCL_A2A_CHUNKS=2"}, "8"},
    {"railp-ppn2", {"MOECCL_ALGO=railp", "MP_RANKS_PER_NODE=2", "MOECCL_A2A_CHUNKS=3"}, "4,6"},
    {"hier3p-ppn1-g2",
     {"MOECCL_ALGO=hier3p", "MP_RANKS_PER_NODE=1", "MOECCL_TOPO_GROUP_SIZE=2"},
     "4,6"},
    {"rail-ppn1", {"MOECCL_ALGO=rail", "MP_RANKS_PER_NODE=1"}, "2,5"},
    {"rail-ppn2", {"MOECCL_ALGO=rail", "MP_RANKS_PER_NODE=2"}, "4,6"},
    {"rail-ppn4", {"MOECCL_ALGO=rail", "MP_RANKS_PER_NODE=4"}, "8"},
    {"hier3-ppn1-g2",
     {"MOECCL_ALGO=hier3", "MP_RANKS_PER_NODE=1", "MOECCL_TOPO_GROUP_SIZE=2"},
     "4,6"},
    {"hier3-ppn2-g2",
     {"MOECCL_ALGO=hier3", "MP_RANKS_PER_NODE=2", "MOECCL_TOPO_GROUP_SIZE=2"},
     "8"},
    {"hier3-ppn4-g1",
     {"MOECCL_ALGO=hier3", "MP_RANKS_PER_NODE=4", "MOECCL_TOPO_GROUP_SIZE=1"},
     "8"},
    {"auto-ppn2", {"MP_RANKS_PER_NODE=2"}, "4,8"},
    {"auto-ppn2-window", {"MP_RANKS_PER_NODE=2", "MOECCL_A2A_WINDOW=2"}, "5"},
    {NULL, {NULL}, NULL},
};

/* ---- Datatypes ------------------------------------------------------------ */

const mp_dtype_info mp_dtypes[moecclNumTypes] = {
    {moecclInt8, "int8", 1},          {moecclUint8, "uint8", 1},
    {moecclInt32, "int32", 4},        {moecclUint32, "uint32", 4},
    {moecclInt64, "int64", 8},        {moecclUint64, "uint64", 8},
    {moecclFloat16, "float16", 2},    {moecclFloat32, "float32", 4},
    {moecclFloat64, "float64", 8},    {moecclBfloat16, "bfloat16", 2},
    {moecclFloat8e4m3, "fp8e4m3", 1}, {moecclFloat8e5m2, "fp8e5m2", 1},
};

size_t mp_dtype_size(moecclDataType_t type) {
  if ((int)type < 0 || (int)type >= moecclNumTypes) return 0;
  return mp_dtypes[type].size;
}

moecclDataType_t mp_dtype_of_size(size_t size) {
  switch (size) {
    case 1: return moecclUint8;
    case 2: return moecclFloat16;
    case 4: return moecclInt32;
    default: return moecclFloat64;
  }
}

/* ---- Deterministic data --------------------------------------------------- */

uint64_t mp_mix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

static uint64_t mp_block_base(uint64_t seed, int src, int dst) {
  uint64_t x = mp_mix64(seed);
  x = mp_mix64(x ^ (uint64_t)(uint32_t)(src + 1));
  return mp_mix64(x ^ ((uint64_t)(uint32_t)(dst + 1) << 32));
}

static inline uint64_t mp_element(uint64_t base, size_t idx) {
  return mp_mix64(base + (uint64_t)idx * 0xD1B54A32D192ED03ull);
}

uint64_t mp_pattern(uint64_t seed, int src, int dst, size_t idx) {
  return mp_element(mp_block_base(seed, src, dst), idx);
}

void mp_fill(void* buf, size_t elsize, size_t n, uint64_t seed, int src, int dst, size_t idx0) {
  uint64_t base = mp_block_base(seed, src, dst);
  unsigned char* p = buf;
  for (size_t i = 0; i < n; i++) {
    uint64_t v = mp_element(base, idx0 + i);
    switch (elsize) {
      case 1: p[i] = (unsigned char)v; break;
      case 2: ((uint16_t*)p)[i] = (uint16_t)v; break;
      case 4: ((uint32_t*)p)[i] = (uint32_t)v; break;
      default: ((uint64_t*)p)[i] = v; break;
    }
  }
}

size_t mp_verify(const void* buf, size_t elsize, size_t n, uint64_t seed, int src, int dst,
                 size_t idx0) {
  uint64_t base = mp_block_base(seed, src, dst);
  const unsigned char* p = buf;
  for (size_t i = 0; i < n; i++) {
    uint64_t v = mp_element(base, idx0 + i);
    int ok;
    switch (elsize) {
      case 1: ok = p[i] == (unsigned char)v; break;
      case 2: ok = ((const uint16_t*)p)[i] == (uint16_t)v; break;
      case 4: ok = ((const uint32_t*)p)[i] == (uint32_t)v; break;
      default: ok = ((const uint64_t*)p)[i] == v; break;
    }
    if (!ok) return i;
  }
  return SIZE_MAX;
}

int mp_check_block(const char* file, int line, const char* what, const void* buf, size_t elsize,
                   size_t n, uint64_t seed, int src, int dst, size_t idx0) {
  size_t bad = mp_verify(buf, elsize, n, seed, src, dst, idx0);
  if (bad == SIZE_MAX) return 0;
  uint64_t expect = mp_pattern(seed, src, dst, idx0 + bad), got = 0;
  memcpy(&got, (const unsigned char*)buf + bad * elsize, elsize);
  uint64_t mask = elsize >= 8 ? ~0ull : ((1ull << (8 * elsize)) - 1);
  size_t nbad = 0;
  for (size_t i = bad; i < n; i++)
    if (mp_verify((const unsigned char*)buf + i * elsize, elsize, 1, seed, src, dst, idx0 + i) !=
        SIZE_MAX)
      nbad++;
  mp_failf(file, line,
           "%s: block %d->%d element %zu of %zu wrong: expected 0x%llx, got 0x%llx "
           "(%zu of %zu elements wrong, elsize %zu)",
           what, src, dst, bad, n, (unsigned long long)(expect & mask), (unsigned long long)got,
           nbad, n, elsize);
  return 1;
}

void mp_fill_sentinel(void* buf, size_t bytes) { memset(buf, MP_SENTINEL, bytes); }

size_t mp_find_not_sentinel(const void* buf, size_t bytes) {
  const unsigned char* p = buf;
  for (size_t i = 0; i < bytes; i++)
    if (p[i] != MP_SENTINEL) return i;
  return SIZE_MAX;
}

void mp_rng_seed(mp_rng* rng, uint64_t seed) { rng->state = mp_mix64(seed ^ 0x5DEECE66Dull); }

uint64_t mp_rng_next(mp_rng* rng) {
  rng->state += 0x9E3779B97F4A7C15ull;
  return mp_mix64(rng->state);
}

uint64_t mp_rng_below(mp_rng* rng, uint64_t bound) { return bound ? mp_rng_next(rng) % bound : 0; }
