/* moe_train: trains the MoE model of moe/model.h on R ranks, expert x data
 * parallel, through moeccl's dispatch and combine (include/moeccl_moe.h).
 *
 * R = P * D ranks: `moe_train -n R` forks R local ranks (no MPI), or
 * `mpirun -np R moe_train` (MPI only launches the ranks and carries the
 * unique id; built in when configure found MPI).  Ranks [d*P, (d+1)*P) form
 * EP group d, which holds every expert, E/P per rank; rank r takes rows
 * [r*N/R, (r+1)*N/R) of the global batch.  Per layer each rank routes its own
 * tokens, the router statistics are all-reduced over all ranks, dispatch and
 * combine run on the EP communicator, the experts on this rank's E/P experts'
 * rows.  After the backward, the expert gradients are all-reduced over the D
 * replicas of each expert, the router gradients over all ranks; Adam runs on
 * every rank identically.  The result does not depend on the layout beyond
 * float32 summation order.  --chunks C splits each rank's tokens into C
 * chunks with a plan each and pipelines them: chunk k's experts run while
 * chunk k+1's dispatch and chunk k-1's combine run on a host stream (and
 * the same mirrored in the backward).
 *
 * Without --load, a synthetic task: a teacher MoE of the same shape (seed
 * + 1) makes the targets of N random inputs (seed + 2; one batch reused
 * every step, or new inputs every step with --fresh) and the student (seed)
 * learns them; the baseline is the loss of x_L = x on the same batch.
 * With --load DIR, the weights and one batch come from .npy files (every
 * rank reads them all and takes its rows and experts) and every step uses
 * that batch.  --dump DIR: rank 0 writes the first step's output, loss and
 * every gradient (full shapes, gathered from the ranks), before the
 * optimizer step.
 *
 * This file launches the ranks (-n R forks them, or MPI); the rest is in
 * train_options.c (the command line), train_loop.c (a rank's run and its
 * report), train_layer.c (the distributed forward and backward),
 * train_dist.c (the communicators and the other collectives) and
 * train_io.c (--load and --dump). */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#ifdef MOE_TRAIN_MPI
#include <mpi.h>
#endif

#include "model.h"
#include "moeccl.h"
#include "train_loop.h"
#include "train_options.h"

/* A new unique id; 0, or -1 with a message. */
static int unique_id(moecclUniqueId* id) {
  moecclResult_t r = moecclGetUniqueId(id);
  if (r != moecclSuccess) {
    fprintf(stderr, "moe_train: moecclGetUniqueId: %s: %s\n", moecclGetErrorString(r),
            moecclGetLastError(NULL));
    return -1;
  }
  return 0;
}

/* -n R: forks the ranks before any library call, makes the id here (this
 * process serves the rendezvous) and sends it down a pipe to each; waits
 * for them, and stops the others as soon as one fails. */
static int run_forked(const train_options_t* o, int nranks) {
  pid_t* pids = calloc(nranks, sizeof(pid_t));
  int* fds = malloc(nranks * sizeof(int));
  if (!pids || !fds) {
    fprintf(stderr, "moe_train: out of memory\n");
    return 1;
  }
  struct sigaction ign = {.sa_handler = SIG_IGN};
  sigaction(SIGPIPE, &ign, NULL);
  int started = 0, status = 0;
  pid_t launcher = getpid();
  for (int r = 0; r < nranks; r++) {
    int pfd[2];
    if (pipe(pfd)) {
      fprintf(stderr, "moe_train: pipe: %s\n", strerror(errno));
      status = 1;
      break;
    }
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) {
      fprintf(stderr, "moe_train: fork: %s\n", strerror(errno));
      close(pfd[0]), close(pfd[1]);
      status = 1;
      break;
    }
    if (pid == 0) {
      /* A launcher killed (a test's timeout) takes its ranks with it. */
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != launcher) _exit(1);
      close(pfd[1]);
      for (int i = 0; i < r; i++) close(fds[i]);
      moecclUniqueId id;
      size_t got = 0;
      while (got < sizeof(id)) {
        ssize_t k = read(pfd[0], (char*)&id + got, sizeof(id) - got);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) _exit(1); /* the launcher gave up */
        got += (size_t)k;
      }
      close(pfd[0]);
      int rc = train_rank(o, r, nranks, id);
      free(pids), free(fds);
      free(o->layer_start); /* the child's copy of the launcher's split */
      exit(rc);
    }
    close(pfd[0]);
    fds[r] = pfd[1];
    pids[r] = pid;
    started++;
  }
  moecclUniqueId id;
  if (status == 0 && unique_id(&id)) status = 1;
  for (int r = 0; r < started; r++) {
    if (status == 0 && write(fds[r], &id, sizeof(id)) != (ssize_t)sizeof(id)) status = 1;
    close(fds[r]);
  }
  for (int left = started; left > 0;) {
    int st;
    pid_t pid = wait(&st);
    if (pid < 0) {
      if (errno == EINTR) continue;
      break;
    }
    for (int r = 0; r < started; r++)
      if (pids[r] == pid) {
        pids[r] = 0;
        left--;
        int rc = WIFEXITED(st) ? WEXITSTATUS(st) : 1;
        if (!WIFEXITED(st))
          fprintf(stderr, "moe_train: rank %d ended by signal %d\n", r, WTERMSIG(st));
        if (rc && !status) {
          status = rc;
          for (int q = 0; q < started; q++) /* the others would wait for it */
            if (pids[q] > 0) kill(pids[q], SIGTERM);
        }
      }
  }
  free(pids), free(fds);
  return status;
}

#ifdef MOE_TRAIN_MPI
/* Launched by mpirun (Open MPI, or a PMI launcher)? */
static int mpi_launched(void) {
  return getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMI_SIZE") || getenv("PMIX_RANK");
}
#endif

int main(int argc, char** argv) {
  train_options_t o;
  char err[256];
  int rc = parse_options(argc, argv, &o);
  if (rc) return rc > 0 ? 0 : 2;
  if (o.load && infer_shapes(&o)) return 1;
  if (moe_config_check(&o.cfg, err, sizeof(err))) {
    fprintf(stderr, "moe_train: %s\n", err);
    return 2;
  }
#ifdef MOE_TRAIN_MPI
  if (mpi_launched()) {
    MPI_Init(&argc, &argv);
    int me = 0, size = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (resolve_layout(&o, size)) {
      MPI_Finalize();
      return 2;
    }
    moecclUniqueId id;
    memset(&id, 0, sizeof(id));
    int bad = me == 0 && moecclGetUniqueId(&id) != moecclSuccess;
    if (bad)
      fprintf(stderr, "moe_train: moecclGetUniqueId: %s\n", moecclGetLastError(NULL));
    MPI_Bcast(&bad, 1, MPI_INT, 0, MPI_COMM_WORLD);
    if (bad) {
      MPI_Finalize();
      return 1;
    }
    MPI_Bcast(&id, (int)sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD);
    rc = train_rank(&o, me, size, id);
    free(o.layer_start);
    if (rc) MPI_Abort(MPI_COMM_WORLD, rc);
    MPI_Finalize();
    return rc;
  }
#endif
  if (resolve_layout(&o, 0)) return 2;
  if (o.ranks > 1) {
    rc = run_forked(&o, o.ranks);
    free(o.layer_start);
    return rc;
  }
  moecclUniqueId id;
  if (unique_id(&id)) {
    free(o.layer_start);
    return 1;
  }
  rc = train_rank(&o, 0, 1, id);
  free(o.layer_start);
  return rc;
}
