/*
 * launch.h - start the ranks of an example on this machine without MPI:
 * fork nranks processes before any moeccl call, make the unique id in the
 * parent (which serves the rendezvous) and hand it to each child down a
 * pipe, as `moe_train -n` does.  Under MPI, broadcast the id instead.
 */
#ifndef MOECCL_EXAMPLE_LAUNCH_H_
#define MOECCL_EXAMPLE_LAUNCH_H_

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <moeccl.h>

typedef int (*rank_main_t)(int rank, int nranks, moecclUniqueId id);

/* Runs rank_main in nranks forked processes; 0 when every rank returned 0. */
static int launch(int nranks, rank_main_t rank_main) {
  pid_t pids[256];
  int fds[256];
  if (nranks < 1 || nranks > 256) {
    fprintf(stderr, "launch: nranks %d is not in [1, 256]\n", nranks);
    return 2;
  }
  signal(SIGPIPE, SIG_IGN);
  for (int r = 0; r < nranks; r++) {
    int pfd[2];
    if (pipe(pfd)) return perror("pipe"), 1;
    fflush(NULL);
    pids[r] = fork();
    if (pids[r] < 0) return perror("fork"), 1;
    if (pids[r] == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL); /* the ranks die with their launcher */
      close(pfd[1]);
      moecclUniqueId id;
      if (read(pfd[0], &id, sizeof id) != (ssize_t)sizeof id) _exit(1);
      close(pfd[0]);
      exit(rank_main(r, nranks, id));
    }
    close(pfd[0]);
    fds[r] = pfd[1];
  }
  moecclUniqueId id;
  int status = 0;
  if (moecclGetUniqueId(&id) != moecclSuccess) {
    fprintf(stderr, "moecclGetUniqueId: %s\n", moecclGetLastError(NULL));
    status = 1;
  }
  for (int r = 0; r < nranks; r++) {
    if (status == 0 && write(fds[r], &id, sizeof id) != (ssize_t)sizeof id) status = 1;
    close(fds[r]);
  }
  for (int r = 0; r < nranks; r++) {
    int st;
    if (waitpid(pids[r], &st, 0) < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
      fprintf(stderr, "rank %d failed\n", r);
      status = 1;
    }
  }
  return status;
}

/* Checks a moeccl call: prints the library's reason and fails the rank. */
#define CHECK(call)                                                                       \
  do {                                                                                    \
    moecclResult_t r_ = (call);                                                           \
    if (r_ != moecclSuccess) {                                                            \
      fprintf(stderr, "%s:%d %s: %s: %s\n", __FILE__, __LINE__, #call,                    \
              moecclGetErrorString(r_), moecclGetLastError(NULL));                        \
      return 1;                                                                           \
    }                                                                                     \
  } while (0)

#endif
