/*
 * alltoallv_moe.c - an all-to-allv with MoE-shaped counts: each rank routes
 * T tokens of H floats to experts chosen with a skew (a few hot experts,
 * many empty blocks), sends each expert's rows to the rank holding it,
 * exchanges the counts first (an all-to-all of one count per rank), and
 * checks every row it received.
 *
 *   cc alltoallv_moe.c -o alltoallv_moe $(pkg-config --cflags --libs moeccl)
 *   ./alltoallv_moe [nranks]      (default 4; forks its ranks, no MPI)
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "launch.h"

enum { T = 512, H = 64, EXPERTS_PER_RANK = 4 };

/* The value of element i of token t of rank r: the receiver checks it. */
static float value(int r, int t, int i) { return (float)(r * 1000000 + t * 100 + i % 100); }

/* A skewed expert for token t of rank r: half the tokens go to expert 0. */
static int expert_of(int r, int t, int experts) {
  uint32_t h = (uint32_t)(r * 7919 + t) * 2654435761u;
  return (h >> 8) % 2 ? 0 : (int)((h >> 12) % (uint32_t)experts);
}

static int rank_main(int rank, int nranks, moecclUniqueId id) {
  moecclComm_t comm;
  CHECK(moecclCommInitRank(&comm, nranks, id, rank));
  int experts = nranks * EXPERTS_PER_RANK;
  size_t* sendcounts = calloc(nranks, sizeof(size_t));
  size_t* recvcounts = calloc(nranks, sizeof(size_t));
  size_t* sdispls = calloc(nranks, sizeof(size_t));
  size_t* rdispls = calloc(nranks, sizeof(size_t));
  float* send = malloc((size_t)T * H * sizeof(float));
  if (!sendcounts || !recvcounts || !sdispls || !rdispls || !send) return 1;
  for (int t = 0; t < T; t++) sendcounts[expert_of(rank, t, experts) / EXPERTS_PER_RANK] += H;
  for (int j = 1; j < nranks; j++) sdispls[j] = sdispls[j - 1] + sendcounts[j - 1];
  size_t* fill = calloc(nranks, sizeof(size_t));
  for (int t = 0; t < T; t++) {
    int dst = expert_of(rank, t, experts) / EXPERTS_PER_RANK;
    size_t at = sdispls[dst] + fill[dst];
    fill[dst] += H;
    for (int i = 0; i < H; i++) send[at + i] = value(rank, t, i);
  }
  /* The counts first: every rank learns what it will receive. */
  CHECK(moecclAlltoAll(sendcounts, recvcounts, 1, moecclUint64, comm, NULL));
  size_t total = 0;
  for (int j = 0; j < nranks; j++) rdispls[j] = total, total += recvcounts[j];
  float* recv = malloc((total ? total : 1) * sizeof(float));
  if (!recv) return 1;
  CHECK(moecclAlltoAllv(send, sendcounts, sdispls, recv, recvcounts, rdispls, moecclFloat32, comm,
                        NULL));
  /* Rows from rank j arrive in j's token order, only the tokens for us. */
  long bad = 0;
  for (int j = 0; j < nranks; j++) {
    size_t at = rdispls[j];
    for (int t = 0; t < T; t++) {
      if (expert_of(j, t, experts) / EXPERTS_PER_RANK != rank) continue;
      for (int i = 0; i < H; i++) bad += recv[at + i] != value(j, t, i);
      at += H;
    }
  }
  printf("rank %d: sent %zu rows, received %zu rows (%zu from rank 0), %ld wrong\n", rank,
         (size_t)T, total / H, recvcounts[0] / H, bad);
  CHECK(moecclCommDestroy(comm));
  free(sendcounts), free(recvcounts), free(sdispls), free(rdispls), free(send);
  free(recv), free(fill);
  return bad != 0;
}

int main(int argc, char** argv) {
  int nranks = argc > 1 ? atoi(argv[1]) : 4;
  int rc = launch(nranks, rank_main);
  printf("alltoallv_moe: %s\n", rc ? "FAILED" : "ok");
  return rc;
}
