/*
 * mp_strays.c - strangers on the rendezvous port cannot stall a
 * communicator.  The root listens on a fixed local port (MOECCL_COMM_ID);
 * before the ranks join, this process opens connections to it that send
 * nothing, fewer bytes than a hello, 300 bytes of garbage, and one byte
 * every 200 ms, and keeps them open; then 3 forked ranks (MOECCL_TIMEOUT
 * 120 s) create the communicator and check an AllReduce.  The ranks must
 * finish within the run's deadline of 60 s: a root that waited on a stray
 * for the whole MOECCL_TIMEOUT would miss it (both times MP_DEADLINE_SCALE
 * times longer in slow builds).  A forged hello that has the
 * communicator's public tag (from the root's log) and claims the last
 * rank, but cannot answer the root's challenge, must be refused too (an
 * unauthenticated root would take it, and the real rank be turned away).  Run twice: the strays
 * connected before any rank, and while the root waits for the last one.
 */
#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "moeccl.h"

#define RANKS 3
static int scale = 1; /* MP_DEADLINE_SCALE: slow builds stretch both times alike */

static int port_free(void) { /* a port the kernel just had free */
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t len = sizeof(a);
  if (fd < 0 || bind(fd, (struct sockaddr*)&a, sizeof(a)) != 0 ||
      getsockname(fd, (struct sockaddr*)&a, &len) != 0)
    return -1;
  close(fd);
  return ntohs(a.sin_port);
}

static int stray(int port, const void* bytes, size_t n) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET,
                          .sin_port = htons((uint16_t)port),
                          .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  if (fd < 0 || connect(fd, (struct sockaddr*)&a, sizeof(a)) != 0) return -1;
  if (n && send(fd, bytes, n, MSG_NOSIGNAL) != (ssize_t)n) return -1;
  return fd;
}

/* The tag of the latest id, from this process's log (the root logs it). */
static unsigned long long logged_tag(void) {
  char path[128], line[512];
  snprintf(path, sizeof(path), "/tmp/mp_strays.%d.log", (int)getpid());
  FILE* f = fopen(path, "r");
  unsigned long long tag = 0;
  while (f && fgets(line, sizeof(line), f)) {
    const char* at = strstr(line, "communicator tag ");
    if (at) tag = strtoull(at + 17, NULL, 16);
  }
  if (f) fclose(f);
  return tag;
}

/* A hello as the old, unauthenticated protocol had it: magic, rank,
 * nranks, pad, tag; then zeros where the MAC and the peer info go. */
static int forged(int port, unsigned long long tag) {
  unsigned char msg[4096] = {0};
  uint32_t magic = 0x4d4f4548u, pad = 0;
  int32_t rank = RANKS - 1, nranks = RANKS;
  memcpy(msg, &magic, 4), memcpy(msg + 4, &rank, 4), memcpy(msg + 8, &nranks, 4);
  memcpy(msg + 12, &pad, 4), memcpy(msg + 16, &tag, 8);
  return stray(port, msg, sizeof(msg));
}

static volatile int trickling = 1;
static void* trickle(void* arg) {
  int fd = *(int*)arg;
  while (trickling && send(fd, "x", 1, MSG_NOSIGNAL) == 1) usleep(200000);
  return NULL;
}

static int rank_main(moecclUniqueId id, int rank) {
  moecclComm_t comm;
  if (moecclCommInitRank(&comm, RANKS, id, rank) != moecclSuccess) {
    fprintf(stderr, "rank %d: init failed: %s\n", rank, moecclGetLastError(NULL));
    return 1;
  }
  float in[64], out[64];
  for (int i = 0; i < 64; i++) in[i] = (float)(rank + i);
  moecclResult_t rc = moecclAllReduce(in, out, 64, moecclFloat32, moecclSum, comm, NULL);
  int bad = rc != moecclSuccess;
  for (int i = 0; i < 64 && !bad; i++) bad = out[i] != (float)(3 * i + 3);
  if (bad) fprintf(stderr, "rank %d: AllReduce wrong (%d)\n", rank, (int)rc);
  moecclCommDestroy(comm);
  return bad;
}

/* A rank forked before the library has threads in this process (the root
 * thread logs while it serves: a fork then could leave the child with a
 * lock held, as mp_harness.h explains) waits for the id on a pipe. */
static pid_t fork_rank(int rank, int* wfd) {
  int p[2];
  if (pipe(p) != 0) return -1;
  pid_t pid = fork();
  if (pid == 0) {
    close(p[1]);
    alarm(60 * (unsigned)scale);
    moecclUniqueId id;
    size_t got = 0;
    while (got < sizeof(id)) {
      ssize_t n = read(p[0], (char*)&id + got, sizeof(id) - got);
      if (n <= 0) _exit(2);
      got += (size_t)n;
    }
    _exit(rank_main(id, rank));
  }
  close(p[0]);
  *wfd = p[1];
  return pid;
}

static void release(int wfd, const moecclUniqueId* id) {
  if (write(wfd, id, sizeof(*id)) != (ssize_t)sizeof(*id)) perror("write id");
  close(wfd);
}

/* One round: strays opened before (early) or after the ranks start. */
static int round_with_strays(int early) {
  pid_t pids[RANKS];
  int wfds[RANKS];
  for (int r = 0; r < RANKS; r++)
    if ((pids[r] = fork_rank(r, &wfds[r])) < 0) return perror("fork"), 1;
  int port = port_free();
  if (port < 0) return perror("port"), 1;
  char v[64];
  snprintf(v, sizeof(v), "127.0.0.1:%d", port);
  setenv("MOECCL_COMM_ID", v, 1);
  snprintf(v, sizeof(v), "%d", 120 * scale);
  setenv("MOECCL_TIMEOUT", v, 1);
  moecclUniqueId id;
  if (moecclGetUniqueId(&id) != moecclSuccess) return fprintf(stderr, "no id\n"), 1;
  int fds[5] = {-1, -1, -1, -1, -1};
  unsigned long long tag = logged_tag();
  if (!tag) return fprintf(stderr, "the root logged no tag\n"), 1;
  char garbage[300];
  for (size_t i = 0; i < sizeof(garbage); i++) garbage[i] = (char)(i * 131 + 7);
  pthread_t t;
  /* early: the strays first, then every rank; else all ranks but the last
   * join (the root then waits for it), the strays connect, the last rank. */
  int first = early ? 0 : RANKS - 1;
  for (int r = 0; r < first; r++) release(wfds[r], &id);
  if (!early) usleep(100000);
  fds[0] = stray(port, NULL, 0);
  fds[1] = stray(port, "MOEH", 4);
  fds[2] = stray(port, garbage, sizeof(garbage));
  fds[3] = stray(port, "x", 1);
  fds[4] = forged(port, tag);
  for (int i = 0; i < 5; i++)
    if (fds[i] < 0) return fprintf(stderr, "stray %d did not connect\n", i), 1;
  trickling = 1;
  pthread_create(&t, NULL, trickle, &fds[3]);
  for (int r = first; r < RANKS; r++) release(wfds[r], &id);
  int failed = 0;
  for (int r = 0; r < RANKS; r++) {
    int status = 0;
    waitpid(pids[r], &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      fprintf(stderr, "rank %d failed (status %d%s)\n", r, status,
              WIFSIGNALED(status) && WTERMSIG(status) == SIGALRM ? ": stalled past 60 s" : "");
      failed = 1;
    }
  }
  trickling = 0;
  pthread_join(t, NULL);
  for (int i = 0; i < 5; i++) close(fds[i]);
  return failed;
}

static void remove_logs(void) {
  DIR* d = opendir("/tmp");
  char path[300];
  for (struct dirent* e; d && (e = readdir(d)) != NULL;)
    if (strncmp(e->d_name, "mp_strays.", 10) == 0) {
      snprintf(path, sizeof(path), "/tmp/%s", e->d_name);
      unlink(path);
    }
  if (d) closedir(d);
}

int main(void) {
  setenv("MOECCL_DEBUG", "INFO", 1);
  setenv("MOECCL_DEBUG_SUBSYS", "BOOT", 1);
  setenv("MOECCL_DEBUG_FILE", "/tmp/mp_strays.%p.log", 1);
  const char* s = getenv("MP_DEADLINE_SCALE");
  if (s && atoi(s) > 0) scale = atoi(s);
  int failed = round_with_strays(1);
  failed |= round_with_strays(0);
  remove_logs();
  printf("mp_strays: %s\n", failed ? "FAIL" : "PASS");
  return failed;
}
