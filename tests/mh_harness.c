/*
 * mh_harness.c - network namespaces as hosts for the multi-host tests.  See
 * mh_harness.h.
 */
#define _GNU_SOURCE
#include "mh_harness.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <strings.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MH_LOCK_FILE "/run/moeccl-mh.lock"
#define MH_NETNS_DIR "/var/run/netns"
#define MH_SUBNET "10.213.0"
#define MH_ROOT_ADDR MH_SUBNET ".1"
#define MH_CMD_TIMEOUT_S 30

int mh_host = -1;
int mh_nhosts = 0;
int mh_ranks_per_host = 0;
mh_layout mh_cur_layout = MH_LAYOUT_BLOCK;

/* ---- State of the parent --------------------------------------------------- */

static pid_t mh_owner; /* the process that made the network */
static int mh_is_child;
static int mh_max_hosts;
static int mh_net_made; /* something may exist that must be deleted */
static int mh_torn_down;
static int mh_teardown_result = MP_EXIT_PASS;
static int mh_lock_fd = -1;
static char mh_ip_path[64];
static char mh_br[16];
static char mh_ns[MH_MAX_HOSTS][32];
static char mh_veth[MH_MAX_HOSTS][16];
static char mh_ns_path[MH_MAX_HOSTS][64];

/* Argument vectors made at set-up, so that a signal handler can delete
 * everything with fork/execv/waitpid only. */
static char* mh_del_ns_argv[MH_MAX_HOSTS][5];
static char* mh_del_veth_argv[MH_MAX_HOSTS][5];
static char* mh_del_br_argv[5];

/* The processes a signal handler must kill: the ranks of the run in progress. */
static volatile pid_t mh_live[MH_MAX_RANKS + 4];
static volatile int mh_nlive;

/* /dev/shm/moeccl-* names of these hosts that existed before set-up. */
#define MH_MAX_OLD_SEGS 64
static char mh_old_segs[MH_MAX_OLD_SEGS][96];
static int mh_nold_segs;

/* Per run. */
static double mh_run_base;    /* CLOCK_MONOTONIC seconds at the start of the run */
static int mh_report_fd = -1; /* children: write end of the report pipe */
typedef struct {
  int counters[MH_SHARED_COUNTERS];
} mh_shared_page;
static mh_shared_page* mh_shared;

/* ---- Small utilities ------------------------------------------------------ */

static double mh_scale(void) {
  const char* s = getenv("MP_DEADLINE_SCALE");
  double v = s ? atof(s) : 1.0;
  return v > 0 ? v : 1.0;
}

/* One write() per line, as mp_harness does. */
static void mh_msg(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
static void mh_msg(const char* fmt, ...) {
  char buf[2048];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(buf, sizeof(buf) - 1, fmt, ap);
  va_end(ap);
  if (n < 0) n = 0;
  if (n > (int)sizeof(buf) - 2) n = (int)sizeof(buf) - 2;
  buf[n++] = '\n';
  ssize_t w = write(STDERR_FILENO, buf, (size_t)n);
  (void)w;
}

static void mh_safe_write(const char* s) {
  ssize_t w = write(STDERR_FILENO, s, strlen(s));
  (void)w;
}

double mh_time_ms(void) { return (mp_now() - mh_run_base) * 1000.0; }

int mh_skip(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  printf("SKIP: ");
  vprintf(fmt, ap);
  printf("\n");
  va_end(ap);
  fflush(stdout);
  return MP_EXIT_SKIP;
}

int mh_same_hostid(void) {
  const char* s = getenv("MH_SAME_HOSTID");
  return s && *s && strcmp(s, "0") != 0;
}

static int mh_require(void) {
  const char* s = getenv("MH_REQUIRE");
  return s && *s && strcmp(s, "0") != 0;
}

const char* mh_bridge_name(void) { return mh_br; }
const char* mh_netns_name(int host) { return host >= 0 && host < mh_max_hosts ? mh_ns[host] : "?"; }
const char* mh_veth_name(int host) {
  return host >= 0 && host < mh_max_hosts ? mh_veth[host] : "?";
}

/* ---- Running ip ----------------------------------------------------------- */

/* Async-signal-safe: runs ip with argv, output to /dev/null; exit code or -1. */
static int mh_run_argv_quiet(char* const argv[]) {
  pid_t pid = fork();
  if (pid < 0) return -1;
  if (pid == 0) {
    int fd = open("/dev/null", O_WRONLY);
    if (fd >= 0) dup2(fd, 1), dup2(fd, 2);
    execv(mh_ip_path, argv);
    _exit(127);
  }
  int st;
  while (waitpid(pid, &st, 0) < 0)
    if (errno != EINTR) return -1;
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* Runs "ip <args>" (args split at spaces) with a deadline.  Quiet: its output
 * goes to /dev/null; else to stderr.  Returns its exit code, -1 on failure. */
static int mh_ip(int quiet, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
static int mh_ip(int quiet, const char* fmt, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof(buf), fmt, ap);
  va_end(ap);
  char* argv[40];
  int argc = 0;
  argv[argc++] = (char*)"ip";
  char* save = NULL;
  for (char* tok = strtok_r(buf, " ", &save); tok && argc < 39; tok = strtok_r(NULL, " ", &save))
    argv[argc++] = tok;
  argv[argc] = NULL;
  fflush(stdout);
  fflush(stderr);
  pid_t pid = fork();
  if (pid < 0) return -1;
  if (pid == 0) {
    int fd = open("/dev/null", O_WRONLY);
    if (fd >= 0) {
      if (quiet) dup2(fd, 2);
      dup2(quiet ? fd : 2, 1);
    }
    execv(mh_ip_path, argv);
    _exit(127);
  }
  double end = mp_now() + MH_CMD_TIMEOUT_S;
  for (;;) {
    int st;
    pid_t w = waitpid(pid, &st, WNOHANG);
    if (w == pid) return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    if (w < 0 && errno != EINTR) return -1;
    if (mp_now() > end) {
      kill(pid, SIGKILL);
      waitpid(pid, &st, 0);
      mh_msg("parent: ip %s: no answer in %d s (killed)", fmt, MH_CMD_TIMEOUT_S);
      return -1;
    }
    mp_sleep_ms(2);
  }
}

static int mh_find_ip(void) {
  const char* cands[] = {"/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip", "/bin/ip"};
  for (size_t i = 0; i < sizeof(cands) / sizeof(cands[0]); i++)
    if (access(cands[i], X_OK) == 0) {
      snprintf(mh_ip_path, sizeof(mh_ip_path), "%s", cands[i]);
      return 0;
    }
  return -1;
}

static int mh_exists(const char* path) {
  struct stat st;
  return stat(path, &st) == 0;
}

static int mh_link_exists(const char* name) {
  char path[128];
  snprintf(path, sizeof(path), "/sys/class/net/%.100s", name);
  return mh_exists(path);
}

/* ---- Clean-up ------------------------------------------------------------- */

/* Async-signal-safe part: kill the ranks, delete namespaces, veths, bridge. */
static void mh_emergency_cleanup(void) {
  int n = mh_nlive;
  for (int i = 0; i < n; i++)
    if (mh_live[i] > 0) kill(mh_live[i], SIGKILL);
  for (int i = 0; i < n; i++)
    if (mh_live[i] > 0) {
      while (waitpid(mh_live[i], NULL, 0) < 0 && errno == EINTR) {
      }
      mh_live[i] = 0;
    }
  mh_nlive = 0;
  if (!mh_net_made) return;
  for (int k = 0; k < mh_max_hosts; k++) mh_run_argv_quiet(mh_del_ns_argv[k]);
  for (int k = 0; k < mh_max_hosts; k++) mh_run_argv_quiet(mh_del_veth_argv[k]);
  mh_run_argv_quiet(mh_del_br_argv);
  mh_net_made = 0;
}

static void mh_on_signal(int sig) {
  if (mh_is_child || getpid() != mh_owner) {
    signal(sig, SIG_DFL);
    raise(sig);
    return;
  }
  mh_safe_write(
      "parent: signal received: killing the ranks, deleting the namespaces and the bridge\n");
  mh_emergency_cleanup();
  signal(sig, SIG_DFL);
  raise(sig);
}

static void mh_on_alarm(int sig) {
  (void)sig;
  if (mh_is_child || getpid() != mh_owner) _exit(MP_EXIT_FAIL);
  mh_safe_write(
      "FAIL: the whole-program deadline passed: killing the ranks, deleting the namespaces\n");
  mh_emergency_cleanup();
  _exit(MP_EXIT_FAIL);
}

static void mh_atexit(void) {
  if (mh_is_child || getpid() != mh_owner) return;
  if (!mh_torn_down) mh_teardown();
}

static void mh_install_handlers(void) {
  struct sigaction sa;
  memset(&sa, 0, sizeof(sa));
  sa.sa_handler = mh_on_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);
  sigaction(SIGHUP, &sa, NULL);
  sigaction(SIGQUIT, &sa, NULL);
  sa.sa_handler = mh_on_alarm;
  sigaction(SIGALRM, &sa, NULL);
  atexit(mh_atexit);
}

static void mh_reset_handlers(void) {
  signal(SIGINT, SIG_DFL);
  signal(SIGTERM, SIG_DFL);
  signal(SIGHUP, SIG_DFL);
  signal(SIGQUIT, SIG_DFL);
  signal(SIGALRM, SIG_DFL);
  signal(SIGPIPE, SIG_DFL);
}

/* "mh<pid>-h<k>" -> pid, else -1. */
static long mh_owner_of_ns(const char* name) {
  int pid = -1, k = -1, end = 0;
  if (sscanf(name, "mh%d-h%d%n", &pid, &k, &end) == 2 && name[end] == '\0' && pid > 0) return pid;
  return -1;
}

/* "mhbr<pid>" or "mhv<pid>h<k>" -> pid, else -1. */
static long mh_owner_of_link(const char* name) {
  int pid = -1, k = -1, end = 0;
  if (sscanf(name, "mhbr%d%n", &pid, &end) == 1 && name[end] == '\0' && pid > 0) return pid;
  end = 0;
  if (sscanf(name, "mhv%dh%d%n", &pid, &k, &end) == 2 && name[end] == '\0' && pid > 0) return pid;
  return -1;
}

/* An object of owner is stale when owner is dead or is another program now
 * (a reused pid).  A live multi-host test holds the lock, which we hold. */
static int mh_owner_gone(long owner) {
  if (owner == (long)getpid()) return 0;
  if (kill((pid_t)owner, 0) != 0 && errno == ESRCH) return 1;
  char path[64], comm[64] = "";
  snprintf(path, sizeof(path), "/proc/%ld/comm", owner);
  FILE* f = fopen(path, "r");
  if (f) {
    if (!fgets(comm, sizeof(comm), f)) comm[0] = '\0';
    fclose(f);
  }
  if (strncmp(comm, "mh_", 3) != 0 && strncmp(comm, "lt-mh_", 6) != 0) return 1;
  mh_msg("parent: warning: process %ld (%s) owns multi-host namespaces but does not hold %s; "
         "leaving them",
         owner, comm, MH_LOCK_FILE);
  return 0;
}

static void mh_remove_stale(void) {
  DIR* d = opendir(MH_NETNS_DIR);
  if (d) {
    for (struct dirent* e; (e = readdir(d)) != NULL;) {
      long owner = mh_owner_of_ns(e->d_name);
      if (owner > 0 && mh_owner_gone(owner)) {
        mh_msg("parent: deleting stale namespace %s (pid %ld is gone)", e->d_name, owner);
        mh_ip(1, "netns del %s", e->d_name);
      }
    }
    closedir(d);
  }
  d = opendir("/sys/class/net");
  if (d) {
    char names[64][32];
    int n = 0;
    for (struct dirent* e; (e = readdir(d)) != NULL && n < 64;) {
      long owner = mh_owner_of_link(e->d_name);
      if (owner > 0 && mh_owner_gone(owner))
        snprintf(names[n++], sizeof(names[0]), "%.31s", e->d_name);
    }
    closedir(d);
    for (int i = 0; i < n; i++) {
      if (!mh_link_exists(names[i])) continue; /* went with its peer */
      mh_msg("parent: deleting stale link %s", names[i]);
      mh_ip(1, "link del %s", names[i]);
    }
  }
}

/* ---- /dev/shm segments of these hosts ------------------------------------- */

/* The library names a node's segment /moeccl-<nonce>-<host hash>, the host
 * hash being FNV-1a of "hostid:" + MOECCL_HOSTID (src/base/host.c). */
static uint64_t mh_fnv1a(uint64_t h, const char* s) {
  for (; *s; s++) h = (h ^ (unsigned char)*s) * 0x100000001b3ULL;
  return h;
}

static void mh_hostid_of(int host, char* buf, size_t len) {
  if (host < 0) snprintf(buf, len, "mh-all");
  else snprintf(buf, len, "mh-h%d", host);
}

static int mh_is_our_segment(const char* name) {
  if (strncmp(name, "moeccl-", 7) != 0) return 0;
  const char* dash = strrchr(name, '-');
  if (!dash || strlen(dash + 1) != 16) return 0;
  for (int host = -1; host < MH_MAX_HOSTS; host++) {
    char id[32], hex[17];
    mh_hostid_of(host, id, sizeof(id));
    uint64_t h = mh_fnv1a(mh_fnv1a(0xcbf29ce484222325ULL, "hostid:"), id);
    snprintf(hex, sizeof(hex), "%016llx", (unsigned long long)h);
    if (strcmp(dash + 1, hex) == 0) return 1;
  }
  return 0;
}

static int mh_was_old_segment(const char* name) {
  for (int i = 0; i < mh_nold_segs; i++)
    if (strcmp(mh_old_segs[i], name) == 0) return 1;
  return 0;
}

/* Counts (and with collect, remembers) our segments in /dev/shm; with
 * report, names and removes the new ones.  Returns how many new ones. */
static int mh_scan_segments(int collect, int report, int* others) {
  DIR* d = opendir("/dev/shm");
  int n = 0;
  if (others) *others = 0;
  if (!d) return 0;
  for (struct dirent* e; (e = readdir(d)) != NULL;) {
    if (strncmp(e->d_name, "moeccl-", 7) != 0) continue;
    if (!mh_is_our_segment(e->d_name)) {
      if (others) (*others)++;
      continue;
    }
    if (collect) {
      if (mh_nold_segs < MH_MAX_OLD_SEGS)
        snprintf(mh_old_segs[mh_nold_segs++], sizeof(mh_old_segs[0]), "%.95s", e->d_name);
      continue;
    }
    if (mh_was_old_segment(e->d_name)) continue;
    n++;
    if (report) {
      char path[128];
      snprintf(path, sizeof(path), "/dev/shm/%.100s", e->d_name);
      mh_msg("FAIL cleanup: shared-memory segment %s is left (removed now)", path);
      unlink(path);
    }
  }
  closedir(d);
  return n;
}

/* ---- Processes ------------------------------------------------------------ */

/* Processes whose network namespace is ns_path's, or (ns_path NULL) whose
 * parent is this process; SIGKILLs them with kill_them.  Returns how many. */
static int mh_scan_procs(const char* ns_path, int kill_them, const char* what) {
  struct stat ns_st;
  if (ns_path && stat(ns_path, &ns_st) != 0) return 0;
  DIR* d = opendir("/proc");
  if (!d) return 0;
  int n = 0;
  pid_t self = getpid();
  for (struct dirent* e; (e = readdir(d)) != NULL;) {
    char* end;
    long pid = strtol(e->d_name, &end, 10);
    if (*end || pid <= 0 || pid == self) continue;
    char path[64];
    int match = 0;
    if (ns_path) {
      struct stat st;
      snprintf(path, sizeof(path), "/proc/%ld/ns/net", pid);
      match = stat(path, &st) == 0 && st.st_ino == ns_st.st_ino && st.st_dev == ns_st.st_dev;
    } else {
      snprintf(path, sizeof(path), "/proc/%ld/stat", pid);
      FILE* f = fopen(path, "r");
      char buf[512];
      if (f) {
        size_t len = fread(buf, 1, sizeof(buf) - 1, f);
        fclose(f);
        buf[len] = '\0';
        char* p = strrchr(buf, ')');
        int ppid = 0;
        char state;
        if (p && sscanf(p + 2, "%c %d", &state, &ppid) == 2) match = ppid == self;
      }
    }
    if (!match) continue;
    n++;
    mh_msg("FAIL cleanup: process %ld is still alive (%s)%s", pid, what,
           kill_them ? "; killed" : "");
    if (kill_them) kill((pid_t)pid, SIGKILL);
  }
  closedir(d);
  return n;
}

/* ---- Set-up --------------------------------------------------------------- */

static int mh_take_lock(void) {
  mh_lock_fd = open(MH_LOCK_FILE, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (mh_lock_fd < 0) {
    mh_msg("parent: cannot open %s: %s", MH_LOCK_FILE, strerror(errno));
    return -1;
  }
  const char* w = getenv("MH_LOCK_WAIT");
  double wait_s = (w ? atof(w) : 900.0);
  double end = mp_now() + wait_s;
  int told = 0;
  while (flock(mh_lock_fd, LOCK_EX | LOCK_NB) != 0) {
    if (errno != EWOULDBLOCK && errno != EINTR) {
      mh_msg("parent: flock %s: %s", MH_LOCK_FILE, strerror(errno));
      return -1;
    }
    if (!told) {
      printf("waiting for %s (another multi-host test runs)\n", MH_LOCK_FILE);
      fflush(stdout);
      told = 1;
    }
    if (mp_now() > end) {
      mh_msg("FAIL: %s still held after %.0f s", MH_LOCK_FILE, wait_s);
      return -1;
    }
    mp_sleep_ms(100);
  }
  return 0;
}

/* Connects to ip:port within timeout_s, retrying refused or unreachable. */
static int mh_try_connect(const char* ip, int port, double timeout_s, char* err, size_t errlen) {
  double end = mp_now() + timeout_s;
  int last = 0;
  while (mp_now() < end) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) return -1;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    inet_pton(AF_INET, ip, &a.sin_addr);
    int rc = connect(fd, (struct sockaddr*)&a, sizeof(a));
    if (rc != 0 && errno == EINPROGRESS) {
      struct pollfd p = {fd, POLLOUT, 0};
      int ms = (int)((end - mp_now()) * 1000);
      if (ms < 1) ms = 1;
      if (poll(&p, 1, ms) == 1) {
        int soerr = 0;
        socklen_t sl = sizeof(soerr);
        getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl);
        rc = soerr ? -1 : 0;
        errno = soerr ? soerr : ETIMEDOUT;
      } else {
        rc = -1;
        errno = ETIMEDOUT;
      }
    }
    last = errno;
    close(fd);
    if (rc == 0) return 0;
    mp_sleep_ms(50);
  }
  snprintf(err, errlen, "%s", strerror(last ? last : ETIMEDOUT));
  return -1;
}

/* A listening socket on ip:0 in the current network namespace; its port in *port. */
static int mh_listen(const char* ip, int* port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = 0};
  inet_pton(AF_INET, ip, &a.sin_addr);
  socklen_t len = sizeof(a);
  if (bind(fd, (struct sockaddr*)&a, sizeof(a)) != 0 || listen(fd, 64) != 0 ||
      getsockname(fd, (struct sockaddr*)&a, &len) != 0) {
    close(fd);
    return -1;
  }
  *port = ntohs(a.sin_port);
  return fd;
}

static int mh_enter_netns(int host) {
  int fd = open(mh_ns_path[host], O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  int rc = setns(fd, CLONE_NEWNET);
  close(fd);
  return rc;
}

/* Every namespace reaches the bridge address and host 0's address over TCP.
 * The process is single-threaded here, so it can step into host 0's
 * namespace to open a listener there. */
static int mh_check_reach(int nhosts) {
  int root_port = 0, h0_port = 0;
  int root_fd = mh_listen(MH_ROOT_ADDR, &root_port);
  int self_ns = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
  int h0_fd = -1;
  if (self_ns >= 0 && mh_enter_netns(0) == 0) {
    h0_fd = mh_listen(MH_SUBNET ".10", &h0_port);
    if (setns(self_ns, CLONE_NEWNET) != 0) {
      mh_msg("FAIL: cannot return to the root network namespace: %s", strerror(errno));
      return -1;
    }
  }
  if (self_ns >= 0) close(self_ns);
  if (root_fd < 0 || h0_fd < 0) {
    mh_msg("FAIL: cannot listen on %s / %s.10 for the connectivity check: %s", MH_ROOT_ADDR,
           MH_SUBNET, strerror(errno));
    if (root_fd >= 0) close(root_fd);
    if (h0_fd >= 0) close(h0_fd);
    return -1;
  }
  pid_t pids[MH_MAX_HOSTS];
  for (int k = 0; k < nhosts; k++) {
    fflush(stdout);
    fflush(stderr);
    pids[k] = fork();
    if (pids[k] == 0) {
      mh_is_child = 1;
      mh_reset_handlers();
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (mh_enter_netns(k) != 0) {
        mh_msg("FAIL: setns into %s: %s", mh_ns[k], strerror(errno));
        _exit(1);
      }
      char err[128];
      if (mh_try_connect(MH_ROOT_ADDR, root_port, 10, err, sizeof(err)) != 0) {
        mh_msg("FAIL: host %d (%s) cannot reach the bridge %s:%d: %s", k, mh_ns[k], MH_ROOT_ADDR,
               root_port, err);
        _exit(1);
      }
      if (k > 0 && mh_try_connect(MH_SUBNET ".10", h0_port, 10, err, sizeof(err)) != 0) {
        mh_msg("FAIL: host %d (%s) cannot reach host 0 at %s.10:%d: %s", k, mh_ns[k], MH_SUBNET,
               h0_port, err);
        _exit(1);
      }
      _exit(0);
    }
    if (pids[k] > 0) mh_live[mh_nlive++] = pids[k];
  }
  int bad = 0;
  for (int k = 0; k < nhosts; k++) {
    int st = 0;
    if (pids[k] < 0) {
      bad++;
      continue;
    }
    while (waitpid(pids[k], &st, 0) < 0 && errno == EINTR) {
    }
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) bad++;
  }
  mh_nlive = 0;
  close(root_fd);
  close(h0_fd);
  return bad ? -1 : 0;
}

static int mh_setup_fail(const char* what) {
  if (mh_require()) {
    mh_msg("FAIL: %s (MH_REQUIRE is set)", what);
    return MP_EXIT_FAIL;
  }
  return mh_skip(
      "%s: the multi-host tests need root and `ip netns` (MH_REQUIRE=1 makes this a failure)",
      what);
}

#define MH_IP_OR_FAIL(...)                                                                         \
  do {                                                                                             \
    if (mh_ip(0, __VA_ARGS__) != 0) {                                                              \
      mh_msg("FAIL: network set-up: ip " __VA_ARGS__);                                             \
      return MP_EXIT_FAIL;                                                                         \
    }                                                                                              \
  } while (0)

int mh_setup(int max_hosts, int total_deadline_s) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  if (max_hosts < 1 || max_hosts > MH_MAX_HOSTS) {
    mh_msg("FAIL: mh_setup: %d hosts (1 to %d)", max_hosts, MH_MAX_HOSTS);
    return MP_EXIT_FAIL;
  }
  if (geteuid() != 0) return mh_setup_fail("not root");
  if (mh_find_ip() != 0) return mh_setup_fail("no ip command (iproute2)");
  if (mh_ip(1, "netns list") != 0) return mh_setup_fail("`ip netns list` failed");
  if (mh_take_lock() != 0) return MP_EXIT_FAIL;

  mh_owner = getpid();
  mh_max_hosts = max_hosts;
  mh_remove_stale();
  snprintf(mh_br, sizeof(mh_br), "mhbr%d", (int)mh_owner);
  static char s_ip[] = "ip", s_netns[] = "netns", s_del[] = "del", s_link[] = "link";
  for (int k = 0; k < max_hosts; k++) {
    snprintf(mh_ns[k], sizeof(mh_ns[k]), "mh%d-h%d", (int)mh_owner, k);
    snprintf(mh_veth[k], sizeof(mh_veth[k]), "mhv%dh%d", (int)mh_owner, k);
    snprintf(mh_ns_path[k], sizeof(mh_ns_path[k]), "%s/%s", MH_NETNS_DIR, mh_ns[k]);
    char** a = mh_del_ns_argv[k];
    a[0] = s_ip, a[1] = s_netns, a[2] = s_del, a[3] = mh_ns[k], a[4] = NULL;
    a = mh_del_veth_argv[k];
    a[0] = s_ip, a[1] = s_link, a[2] = s_del, a[3] = mh_veth[k], a[4] = NULL;
  }
  mh_del_br_argv[0] = s_ip, mh_del_br_argv[1] = s_link, mh_del_br_argv[2] = s_del;
  mh_del_br_argv[3] = mh_br, mh_del_br_argv[4] = NULL;
  mh_install_handlers();
  mh_scan_segments(1, 0, NULL);

  /* From here on the exit and signal handlers delete what exists. */
  mh_net_made = 1;
  double t0 = mp_now();
  /* nf_call_iptables 0: br_netfilter must not run the host's firewall on
   * the bridged traffic between namespaces. */
  if (mh_ip(1, "link add %s type bridge nf_call_iptables 0", mh_br) != 0 &&
      mh_ip(0, "link add %s type bridge", mh_br) != 0) {
    mh_net_made = 0;
    return mh_setup_fail("cannot create a bridge");
  }
  MH_IP_OR_FAIL("addr add %s/24 dev %s", MH_ROOT_ADDR, mh_br);
  MH_IP_OR_FAIL("link set %s up", mh_br);
  for (int k = 0; k < max_hosts; k++) {
    if (mh_ip(0, "netns add %s", mh_ns[k]) != 0) {
      if (k == 0) {
        mh_teardown();
        return mh_setup_fail("cannot create a network namespace");
      }
      mh_msg("FAIL: network set-up: ip netns add %s", mh_ns[k]);
      return MP_EXIT_FAIL;
    }
    MH_IP_OR_FAIL("link add %s type veth peer name eth0 netns %s", mh_veth[k], mh_ns[k]);
    MH_IP_OR_FAIL("link set %s master %s", mh_veth[k], mh_br);
    MH_IP_OR_FAIL("link set %s up", mh_veth[k]);
    MH_IP_OR_FAIL("-n %s addr add %s.%d/24 dev eth0", mh_ns[k], MH_SUBNET, 10 + k);
    MH_IP_OR_FAIL("-n %s link set eth0 up", mh_ns[k]);
    MH_IP_OR_FAIL("-n %s link set lo up", mh_ns[k]);
  }
  if (mh_check_reach(max_hosts) != 0) {
    mh_msg("FAIL: the namespaces cannot reach each other over %s", mh_br);
    return MP_EXIT_FAIL;
  }
  printf("network: bridge %s %s/24, %d hosts mh%d-h0..h%d at %s.10..%d (%.1f s)%s\n", mh_br,
         MH_ROOT_ADDR, max_hosts, (int)mh_owner, max_hosts - 1, MH_SUBNET, 9 + max_hosts,
         mp_now() - t0,
         mh_same_hostid()
             ? "; MH_SAME_HOSTID=1: every rank on one MOECCL_HOSTID (shared memory only)"
             : "");
  fflush(stdout);
  if (total_deadline_s > 0) alarm((unsigned)(total_deadline_s * mh_scale()));
  return MP_EXIT_PASS;
}

int mh_check_clean(const char* what) {
  int procs = 0;
  for (int k = 0; k < mh_max_hosts; k++) {
    char w[64];
    snprintf(w, sizeof(w), "in namespace %s", mh_ns[k]);
    procs += mh_scan_procs(mh_ns_path[k], 1, w);
  }
  procs += mh_scan_procs(NULL, 1, "a child of the test");
  while (waitpid(-1, NULL, WNOHANG) > 0) {
  }
  int segs = mh_scan_segments(0, 1, NULL);
  printf("%s %s: %d process(es) left in the namespaces or as children, %d /dev/shm/moeccl-* "
         "segment(s) of these "
         "hosts left\n",
         procs + segs ? "FAIL cleanup after" : "clean after", what, procs, segs);
  fflush(stdout);
  return procs + segs;
}

int mh_link_set(int host, int up) {
  if (host < 0 || host >= mh_max_hosts) return -1;
  return mh_ip(0, "link set %s %s", mh_veth[host], up ? "up" : "down");
}

int mh_teardown(void) {
  if (mh_torn_down || mh_is_child || (mh_owner && getpid() != mh_owner)) return mh_teardown_result;
  mh_torn_down = 1;
  if (!mh_owner) return mh_teardown_result; /* set-up never ran */
  alarm(0);
  int bad = 0;
  /* Ranks of an interrupted run (normally none). */
  int n = mh_nlive;
  for (int i = 0; i < n; i++)
    if (mh_live[i] > 0) {
      mh_msg("FAIL cleanup: rank process %d still running (killed)", (int)mh_live[i]);
      kill(mh_live[i], SIGKILL);
      waitpid(mh_live[i], NULL, 0);
      bad++;
    }
  mh_nlive = 0;
  int procs = 0;
  for (int k = 0; k < mh_max_hosts; k++) {
    char what[64];
    snprintf(what, sizeof(what), "in namespace %s", mh_ns[k]);
    procs += mh_scan_procs(mh_ns_path[k], 1, what);
  }
  procs += mh_scan_procs(NULL, 1, "a child of the test");
  while (waitpid(-1, NULL, WNOHANG) > 0) {
  }
  bad += procs;

  if (mh_net_made) {
    for (int k = 0; k < mh_max_hosts; k++) mh_ip(1, "netns del %s", mh_ns[k]);
    for (int k = 0; k < mh_max_hosts; k++)
      if (mh_link_exists(mh_veth[k])) mh_ip(1, "link del %s", mh_veth[k]);
    if (mh_link_exists(mh_br)) mh_ip(1, "link del %s", mh_br);
    mh_net_made = 0;
  }
  /* Interfaces of a deleted namespace go away asynchronously. */
  int left_ns = 0, left_links = 0;
  double end = mp_now() + 10;
  for (;;) {
    left_ns = left_links = 0;
    for (int k = 0; k < mh_max_hosts; k++) {
      left_ns += mh_exists(mh_ns_path[k]);
      left_links += mh_link_exists(mh_veth[k]);
    }
    left_links += mh_link_exists(mh_br);
    if ((left_ns == 0 && left_links == 0) || mp_now() > end) break;
    mp_sleep_ms(20);
  }
  if (left_ns || left_links) {
    mh_msg("FAIL cleanup: %d namespace(s) and %d link(s) of %s still exist", left_ns, left_links,
           mh_br);
    bad++;
  }
  int others = 0;
  int segs = mh_scan_segments(0, 1, &others);
  bad += segs;
  printf("cleanup: %d namespaces mh%s-h*, their veths and bridge %s %s; %d /dev/shm/moeccl-* "
         "segment(s) of "
         "these hosts left%s; %d stray process(es)",
         mh_max_hosts, mh_br + 4, mh_br, left_ns || left_links ? "NOT all deleted" : "deleted",
         segs, mh_nold_segs ? " (older ones ignored)" : "", procs);
  if (others) printf(" (%d other moeccl segment(s) in /dev/shm, not of this test)", others);
  printf("\n");
  fflush(stdout);
  if (mh_lock_fd >= 0) close(mh_lock_fd), mh_lock_fd = -1;
  mh_teardown_result = bad ? MP_EXIT_FAIL : MP_EXIT_PASS;
  return mh_teardown_result;
}

/* ---- Shared counters, reports --------------------------------------------- */

int mh_shared_add(int counter, int value) {
  if (!mh_shared || counter < 0 || counter >= MH_SHARED_COUNTERS) return -1;
  return __atomic_add_fetch(&mh_shared->counters[counter], value, __ATOMIC_SEQ_CST);
}

int mh_shared_get(int counter) {
  if (!mh_shared || counter < 0 || counter >= MH_SHARED_COUNTERS) return -1;
  return __atomic_load_n(&mh_shared->counters[counter], __ATOMIC_SEQ_CST);
}

void mh_shared_set(int counter, int value) {
  if (!mh_shared || counter < 0 || counter >= MH_SHARED_COUNTERS) return;
  __atomic_store_n(&mh_shared->counters[counter], value, __ATOMIC_SEQ_CST);
}

int mh_shared_wait(int counter, int target, int timeout_s) {
  double end = mp_now() + timeout_s * mh_scale();
  while (mh_shared_get(counter) < target) {
    if (mp_now() > end) return -1;
    mp_sleep_ms(1);
  }
  return 0;
}

typedef struct {
  int rank, value;
} mh_report_msg;

void mh_report(int value) {
  if (mh_report_fd < 0) return;
  mh_report_msg m = {mp_rank, value};
  ssize_t w = write(mh_report_fd, &m, sizeof(m)); /* atomic (< PIPE_BUF); non-blocking */
  (void)w;
}

int mh_names_rank(const char* text, int rank) {
  char pat[32];
  int len = snprintf(pat, sizeof(pat), "rank %d", rank);
  for (const char* p = text; (p = strstr(p, pat)) != NULL; p++)
    if (p[len] < '0' || p[len] > '9') return 1;
  return 0;
}

/* ---- Launcher ------------------------------------------------------------- */

static int mh_host_of_layout(int rank, int nhosts, int rph, mh_layout layout) {
  return layout == MH_LAYOUT_CYCLIC ? rank % nhosts : rank / rph;
}

int mh_host_of(const mh_job* job, int rank) {
  return mh_host_of_layout(rank, job->nhosts, job->ranks_per_host, job->layout);
}

int mh_rank_host(int r) {
  return mh_host_of_layout(r, mh_nhosts, mh_ranks_per_host, mh_cur_layout);
}

void mh_kill_host(mh_job* job, int host) {
  for (int r = 0; r < job->nranks; r++)
    if (mh_host_of(job, r) == host && !job->done[r]) {
      job->expect_killed[r] = 1;
      kill(job->pids[r], SIGKILL);
    }
}

/* Whether an init failure means "this build has no such network transport". */
static int mh_missing_transport(moecclResult_t r, const char* text) {
  if (r != moecclInvalidUsage || !strstr(text, "transport")) return 0;
  const char* want = getenv("MOECCL_NET");
  const char* has = strstr(text, "this build has");
  if (has && want && *want && strcasecmp(want, "auto") != 0 && strstr(has, want)) return 0;
  return 1;
}

static __attribute__((noreturn)) void mh_child(const mh_opts* o, int rank, int nranks, int host,
                                               mp_body_fn body, void* arg, pid_t parent,
                                               int id_fd) {
  mh_is_child = 1;
  mh_reset_handlers();
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != parent) _exit(MP_EXIT_FAIL);
  if (mh_lock_fd >= 0) close(mh_lock_fd), mh_lock_fd = -1;
  mp_rank = rank;
  mp_nranks = nranks;
  mh_host = host;
  if (mh_enter_netns(host) != 0) {
    mp_failf(__FILE__, __LINE__, "setns into %s: %s", mh_ns[host], strerror(errno));
    _exit(MP_EXIT_FAIL);
  }
  char name[32];
  snprintf(name, sizeof(name), "mh-h%d", host);
  if (unshare(CLONE_NEWUTS) != 0 || sethostname(name, strlen(name)) != 0) {
    mp_failf(__FILE__, __LINE__, "unshare(CLONE_NEWUTS)/sethostname(%s): %s", name,
             strerror(errno));
    _exit(MP_EXIT_FAIL);
  }
  char id[32];
  mh_hostid_of(mh_same_hostid() ? -1 : host, id, sizeof(id));
  setenv("MOECCL_HOSTID", id, 1);
  const char* ifn = getenv("MH_CHILD_IFNAME");
  setenv("MOECCL_SOCKET_IFNAME", ifn && *ifn ? ifn : "eth0", 1);
  if (mp_read_id(id_fd) != 0) _exit(MP_EXIT_FAIL); /* the parent could not make an id */
  mp_comm = NULL;
  mp_comm_released = 0;
  moecclComm_t comm = NULL;
  moecclResult_t r = moecclCommInitRank(&comm, nranks, mp_unique_id, rank);
  if (r != moecclSuccess) {
    char text[1024];
    snprintf(text, sizeof(text), "%s", mp_last_error_text(NULL));
    if (mh_missing_transport(r, text)) {
      if (rank == 0) printf("rank 0: no such network transport in this build: %s\n", text);
      fflush(stdout);
      _exit(MP_EXIT_SKIP);
    }
    mp_failf(__FILE__, __LINE__,
             "moecclCommInitRank(nranks=%d, rank=%d) on host %d returned %d (%s): %s", nranks, rank,
             host, (int)r, moecclGetErrorString(r), text);
    _exit(MP_EXIT_FAIL);
  }
  mp_comm = comm;
  (void)o;
  mp_child_finish(comm, body(comm, rank, nranks, arg));
}

static int mh_reap(mh_job* job) {
  int reaped = 0;
  for (int r = 0; r < job->nranks; r++) {
    if (job->done[r]) continue;
    int st;
    pid_t w = waitpid(job->pids[r], &st, WNOHANG);
    if (w == job->pids[r]) {
      job->done[r] = 1;
      job->status[r] = st;
      reaped++;
    }
  }
  return reaped;
}

static void mh_drain_reports(mh_job* job, int fd) {
  mh_report_msg m[64];
  for (;;) {
    ssize_t n = read(fd, m, sizeof(m));
    if (n <= 0) return;
    for (ssize_t i = 0; i < n / (ssize_t)sizeof(m[0]); i++)
      if (m[i].rank >= 0 && m[i].rank < job->nranks) {
        job->progress[m[i].rank] = m[i].value;
        job->progress_ms[m[i].rank] = mh_time_ms();
      }
  }
}

static int mh_judge(const mh_job* job, const char* label) {
  int failed = 0, passed = 0, skipped = 0;
  for (int r = 0; r < job->nranks; r++) {
    int st = job->status[r];
    char what[128];
    mp_describe_status(st, what, sizeof(what));
    if (job->expect_killed[r]) {
      if (!(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL)) {
        mh_msg("FAIL %s: rank %d (host %d) was SIGKILLed but %s", label, r, mh_host_of(job, r),
               what);
        failed++;
      }
      continue;
    }
    if (WIFEXITED(st) && WEXITSTATUS(st) == MP_EXIT_PASS) passed++;
    else if (WIFEXITED(st) && WEXITSTATUS(st) == MP_EXIT_SKIP) skipped++;
    else {
      mh_msg("FAIL %s: rank %d (host %d) %s", label, r, mh_host_of(job, r), what);
      failed++;
    }
  }
  if (skipped && passed) {
    mh_msg("FAIL %s: %d rank(s) skipped while %d passed", label, skipped, passed);
    failed++;
  }
  if (failed) return MP_EXIT_FAIL;
  if (skipped) return MP_EXIT_SKIP;
  return MP_EXIT_PASS;
}

static void mh_kill_all(mh_job* job, const char* why, const char* label) {
  char list[512];
  int n = 0;
  list[0] = '\0';
  for (int r = 0; r < job->nranks; r++) {
    if (job->done[r]) continue;
    kill(job->pids[r], SIGKILL);
    if (n < (int)sizeof(list) - 8)
      n += snprintf(list + n, sizeof(list) - (size_t)n, "%s%d", n ? "," : "", r);
  }
  for (int r = 0; r < job->nranks; r++) {
    if (job->done[r]) continue;
    int st;
    while (waitpid(job->pids[r], &st, 0) < 0 && errno == EINTR) {
    }
    job->done[r] = 1;
    job->status[r] = st;
  }
  if (n) mh_msg("FAIL %s: %s; ranks not finished: %s (killed)", label, why, list);
}

int mh_run(const mh_opts* opts, mp_body_fn body, void* arg) {
  mh_opts o = *opts;
  if (o.ranks_per_host <= 0) {
    const char* s = getenv("MH_RANKS_PER_HOST");
    o.ranks_per_host = s && atoi(s) > 0 ? atoi(s) : 2;
  }
  if (o.deadline_s <= 0) o.deadline_s = 120;
  if (!o.label) o.label = "run";
  char label[160];
  snprintf(label, sizeof(label), "%s hosts=%dx%d%s", o.label, o.nhosts, o.ranks_per_host,
           o.layout == MH_LAYOUT_CYCLIC ? " cyclic" : "");
  if (!mh_owner || mh_torn_down || o.nhosts < 1 || o.nhosts > mh_max_hosts ||
      o.ranks_per_host > MH_MAX_RANKS_PER_HOST) {
    mh_msg("FAIL %s: bad hosts/ranks, or mh_setup did not run", label);
    return MP_EXIT_FAIL;
  }
  mp_env_defaults();
  int nranks = o.nhosts * o.ranks_per_host;
  double deadline_s = o.deadline_s * mh_scale();
  mh_nhosts = o.nhosts;
  mh_ranks_per_host = o.ranks_per_host;
  mh_cur_layout = o.layout;

  mh_job job;
  memset(&job, 0, sizeof(job));
  job.nhosts = o.nhosts, job.ranks_per_host = o.ranks_per_host, job.nranks = nranks,
  job.layout = o.layout;
  pid_t pids[MH_MAX_RANKS];
  int done[MH_MAX_RANKS] = {0}, status[MH_MAX_RANKS] = {0}, killed[MH_MAX_RANKS] = {0},
      progress[MH_MAX_RANKS];
  double progress_ms[MH_MAX_RANKS] = {0};
  int id_fds[MH_MAX_RANKS];
  for (int r = 0; r < nranks; r++) progress[r] = -1, id_fds[r] = -1, pids[r] = -1;
  job.pids = pids, job.done = done, job.status = status, job.expect_killed = killed;
  job.progress = progress, job.progress_ms = progress_ms;

  mh_shared =
      mmap(NULL, sizeof(mh_shared_page), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  int rep[2];
  if (mh_shared == MAP_FAILED || pipe2(rep, O_CLOEXEC) != 0) {
    mh_msg("FAIL %s: harness resources: %s", label, strerror(errno));
    if (mh_shared != MAP_FAILED) munmap(mh_shared, sizeof(mh_shared_page));
    mh_shared = NULL;
    return MP_EXIT_FAIL;
  }
  memset(mh_shared, 0, sizeof(*mh_shared));
  mp_first_failure_reset();
  fcntl(rep[0], F_SETFL, O_NONBLOCK);
  fcntl(rep[1], F_SETFL, O_NONBLOCK);
  struct sigaction ign = {.sa_handler = SIG_IGN}, oldpipe;
  sigemptyset(&ign.sa_mask);
  sigaction(SIGPIPE, &ign, &oldpipe);

  mh_run_base = mp_now();
  pid_t parent = getpid();
  int result = MP_EXIT_PASS;
  int forked_all = 1;
  for (int r = 0; r < nranks; r++) {
    int fds[2];
    if (pipe(fds) != 0) {
      mh_msg("FAIL %s: pipe: %s", label, strerror(errno));
      forked_all = 0;
      break;
    }
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) {
      mh_msg("FAIL %s: fork: %s", label, strerror(errno));
      close(fds[0]), close(fds[1]);
      forked_all = 0;
      break;
    }
    if (pid == 0) {
      close(fds[1]);
      for (int i = 0; i < r; i++) close(id_fds[i]);
      close(rep[0]);
      mh_report_fd = rep[1];
      mh_child(&o, r, nranks, mh_host_of(&job, r), body, arg, parent, fds[0]);
    }
    close(fds[0]);
    id_fds[r] = fds[1];
    pids[r] = pid;
    mh_live[mh_nlive++] = pid;
  }
  close(rep[1]);
  moecclResult_t idr = moecclSuccess;
  if (!forked_all) {
    for (int r = 0; r < nranks; r++)
      if (pids[r] <= 0) done[r] = 1, status[r] = MP_EXIT_FAIL << 8;
    result = MP_EXIT_FAIL;
  } else {
    /* The root must listen on the bridge: MOECCL_SOCKET_IFNAME is read in
     * moecclGetUniqueId.  The children were forked before this. */
    char* old = getenv("MOECCL_SOCKET_IFNAME") ? strdup(getenv("MOECCL_SOCKET_IFNAME")) : NULL;
    char spec[32];
    snprintf(spec, sizeof(spec), "=%s", mh_br);
    setenv("MOECCL_SOCKET_IFNAME", spec, 1);
    idr = moecclGetUniqueId(&mp_unique_id);
    if (old) setenv("MOECCL_SOCKET_IFNAME", old, 1), free(old);
    else unsetenv("MOECCL_SOCKET_IFNAME");
    if (idr != moecclSuccess) {
      mh_msg("FAIL %s: moecclGetUniqueId returned %d (%s): %s", label, (int)idr,
             moecclGetErrorString(idr), mp_last_error_text(NULL));
      result = MP_EXIT_FAIL;
    } else {
      for (int r = 0; r < nranks; r++) {
        ssize_t n;
        do n = write(id_fds[r], &mp_unique_id, sizeof(mp_unique_id));
        while (n < 0 && errno == EINTR);
        if (n != (ssize_t)sizeof(mp_unique_id))
          mh_msg("FAIL %s: could not send the id to rank %d", label, r);
      }
    }
  }
  for (int r = 0; r < nranks; r++)
    if (id_fds[r] >= 0) close(id_fds[r]); /* EOF: a child without an id exits */

  double end = mp_now() + deadline_s;
  int timed_out = 0;
  for (;;) {
    mh_reap(&job);
    mh_drain_reports(&job, rep[0]);
    int remaining = 0;
    for (int r = 0; r < nranks; r++) remaining += !done[r];
    if (!remaining) break;
    if (o.parent_poll) o.parent_poll(&job, o.parent_poll_arg);
    if (mp_now() > end) {
      timed_out = 1;
      break;
    }
    struct pollfd p = {rep[0], POLLIN, 0};
    poll(&p, 1, 5);
  }
  if (timed_out) {
    char why[64];
    snprintf(why, sizeof(why), "deadline of %.0f s passed", deadline_s);
    mh_kill_all(&job, why, label);
    mh_judge(&job, label);
    result = MP_EXIT_FAIL;
  } else {
    int j = mh_judge(&job, label);
    if (result == MP_EXIT_PASS) result = j;
  }
  if (result == MP_EXIT_FAIL) mp_first_failure_print(label);
  mh_nlive = 0;
  close(rep[0]);
  sigaction(SIGPIPE, &oldpipe, NULL);
  munmap(mh_shared, sizeof(mh_shared_page));
  mh_shared = NULL;
  printf("%s %s (%.1f s)\n",
         result == MP_EXIT_PASS   ? "PASS"
         : result == MP_EXIT_SKIP ? "SKIP"
                                  : "FAIL",
         label, mp_now() - mh_run_base);
  fflush(stdout);
  return result;
}

/* ---- Program helpers ------------------------------------------------------ */

int mh_parse_ints(const char* env_name, const char* fallback, int* out, int max) {
  const char* s = env_name ? getenv(env_name) : NULL;
  if (!s || !*s) s = fallback;
  int n = 0;
  while (s && *s && n < max) {
    char* e;
    long v = strtol(s, &e, 10);
    if (e == s) {
      s++;
      continue;
    }
    out[n++] = (int)v;
    s = e;
  }
  return n;
}

int mh_want_variant(const char* name) {
  const char* list = getenv("MH_VARIANTS");
  if (!list || !*list) return 1;
  size_t len = strlen(name);
  for (const char* p = list; (p = strstr(p, name)) != NULL; p += len)
    if ((p == list || p[-1] == ',') && (p[len] == '\0' || p[len] == ',')) return 1;
  return 0;
}

void mh_variant_env(const char* name) {
  setenv("MOECCL_NET", name, 1);
  if (!strcmp(name, "ofi")) setenv("MOECCL_OFI_PROVIDER", "tcp", 0);
  if (!strcmp(name, "ucx")) setenv("UCX_TLS", "tcp", 0);
}
