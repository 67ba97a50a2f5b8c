/*
 * nccl_port.c - an NCCL program ported to moeccl by renaming: this file
 * with moeccl -> nccl and MOECCL -> NCCL is an NCCL 2.28 program (the
 * suite checks that it compiles against NCCL's own nccl.h), and with the
 * names as they are it runs on moeccl, no other change.  What NCCL would
 * need besides: device buffers (cudaMalloc) where this file uses host
 * memory, which moeccl takes as a first-class buffer type.
 *
 * The program: the usual NCCL pattern of one process per rank, the unique
 * id made by rank 0 and carried to the others (a pipe here, MPI_Bcast in
 * most NCCL programs), then an AllReduce, a ring of Send/Recv inside a
 * group, an AlltoAll and an AllGather, each checked.
 *
 *   cc nccl_port.c -o nccl_port $(pkg-config --cflags --libs moeccl)
 *   ./nccl_port [nranks]          (default 4; forks its ranks, no MPI)
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <moeccl.h>

#define MOECCLCHECK(cmd)                                                                  \
  do {                                                                                    \
    moecclResult_t res = cmd;                                                             \
    if (res != moecclSuccess) {                                                           \
      printf("Failed, MOECCL error %s:%d '%s' (%s)\n", __FILE__, __LINE__,                \
             moecclGetErrorString(res), moecclGetLastError(NULL));                        \
      exit(EXIT_FAILURE);                                                                 \
    }                                                                                     \
  } while (0)

enum { COUNT = 1 << 16 };

static int run_rank(int rank, int nRanks, moecclUniqueId id) {
  moecclComm_t comm;
  float *sendbuff = malloc(COUNT * sizeof(float)), *recvbuff = malloc(COUNT * sizeof(float));
  float* ringbuff = malloc(COUNT * sizeof(float));
  float* gathered = malloc((size_t)nRanks * 64 * sizeof(float));
  if (!sendbuff || !recvbuff || !ringbuff || !gathered) return 1;
  for (int i = 0; i < COUNT; i++) sendbuff[i] = (float)(rank + 1);

  MOECCLCHECK(moecclCommInitRank(&comm, nRanks, id, rank));

  long errors = 0;
  MOECCLCHECK(moecclAllReduce(sendbuff, recvbuff, COUNT, moecclFloat, moecclSum, comm, NULL));
  float want = (float)nRanks * (nRanks + 1) / 2;
  for (int i = 0; i < COUNT; i++) errors += recvbuff[i] != want;

  int next = (rank + 1) % nRanks, prev = (rank + nRanks - 1) % nRanks;
  MOECCLCHECK(moecclGroupStart());
  MOECCLCHECK(moecclSend(sendbuff, COUNT, moecclFloat, next, comm, NULL));
  MOECCLCHECK(moecclRecv(ringbuff, COUNT, moecclFloat, prev, comm, NULL));
  MOECCLCHECK(moecclGroupEnd());
  for (int i = 0; i < COUNT; i++) errors += ringbuff[i] != (float)(prev + 1);

  size_t block = COUNT / nRanks;
  for (int i = 0; i < COUNT; i++) sendbuff[i] = (float)(rank * nRanks + i / block);
  MOECCLCHECK(moecclAlltoAll(sendbuff, recvbuff, block, moecclFloat, comm, NULL));
  for (int j = 0; j < nRanks; j++)
    for (size_t i = 0; i < block; i++) errors += recvbuff[j * block + i] != (float)(j * nRanks + rank);

  MOECCLCHECK(moecclAllGather(sendbuff, gathered, 64, moecclFloat, comm, NULL));
  for (int j = 0; j < nRanks; j++) errors += gathered[j * 64] != (float)(j * nRanks);

  MOECCLCHECK(moecclCommDestroy(comm));
  free(sendbuff), free(recvbuff), free(ringbuff), free(gathered);
  printf("[rank %d] AllReduce, Send/Recv ring, AlltoAll, AllGather: %ld errors\n", rank, errors);
  return errors != 0;
}

int main(int argc, char* argv[]) {
  int nRanks = argc > 1 ? atoi(argv[1]) : 4;
  if (nRanks < 1 || nRanks > 64) return printf("nranks must be in [1, 64]\n"), 2;
  pid_t pids[64];
  int fds[64];
  signal(SIGPIPE, SIG_IGN);
  for (int r = 0; r < nRanks; r++) { /* fork before any library call */
    int p[2];
    if (pipe(p)) return perror("pipe"), 1;
    fflush(NULL);
    if ((pids[r] = fork()) == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      moecclUniqueId id;
      close(p[1]);
      if (read(p[0], &id, sizeof id) != (ssize_t)sizeof id) _exit(1);
      exit(run_rank(r, nRanks, id));
    }
    close(p[0]);
    fds[r] = p[1];
  }
  moecclUniqueId id;
  MOECCLCHECK(moecclGetUniqueId(&id));
  for (int r = 0; r < nRanks; r++) {
    if (write(fds[r], &id, sizeof id) != (ssize_t)sizeof id) return 1;
    close(fds[r]);
  }
  int failed = 0;
  for (int r = 0; r < nRanks; r++) {
    int st;
    waitpid(pids[r], &st, 0);
    failed |= !WIFEXITED(st) || WEXITSTATUS(st) != 0;
  }
  printf("%s\n", failed ? "Failed" : "Success");
  return failed;
}
