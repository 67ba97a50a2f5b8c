/*
 * moe_roundtrip.c - an MoE layer's communication on the C API: each rank's
 * tokens go to the ranks holding their top-2 experts (moecclMoeDispatch),
 * each expert scales its rows by (its id + 1) in place of an FFN, and the
 * rows come back summed with the gate weights (moecclMoeCombine); every
 * token is checked against sum_j w[t][j] * (e_j + 1) * x[t].  Then the
 * backward: moecclMoeCombineBackward of a unit output gradient and
 * moecclMoeDispatchBackward of the result give each token's gradient
 * sum_j w[t][j], checked too.
 *
 *   cc moe_roundtrip.c -o moe_roundtrip $(pkg-config --cflags --libs moeccl)
 *   ./moe_roundtrip [nranks]      (default 4; forks its ranks, no MPI)
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include <moeccl_moe.h>

#include "launch.h"

enum { E = 8, K = 2, H = 32 };

static int rank_main(int rank, int nranks, moecclUniqueId id) {
  size_t T = 100 + 10 * (size_t)rank; /* ranks may hold different token counts */
  moecclComm_t comm;
  moecclMoePlan_t plan;
  CHECK(moecclCommInitRank(&comm, nranks, id, rank));
  CHECK(moecclMoePlanCreate(&plan, E, NULL, comm)); /* experts in contiguous blocks */
  int nlocal, local[E];
  CHECK(moecclMoeLocalExperts(plan, &nlocal, local));

  int32_t* ids = malloc(T * K * sizeof(int32_t));
  float* w = malloc(T * K * sizeof(float));
  float *x = malloc(T * H * sizeof(float)), *y = malloc(T * H * sizeof(float));
  float* gw = malloc(T * K * sizeof(float));
  float* gx = malloc(T * H * sizeof(float));
  float* ones = malloc(T * H * sizeof(float));
  for (size_t t = 0; t < T; t++) {
    int e0 = (int)((t * 7 + (size_t)rank) % E), e1 = (e0 + 1 + (int)(t % (E - 1))) % E;
    ids[t * K] = e0, ids[t * K + 1] = e1;
    w[t * K] = 0.75f, w[t * K + 1] = 0.25f;
    for (int i = 0; i < H; i++) x[t * H + i] = (float)rank + 0.01f * (float)(t % 50) + 0.001f * i;
    for (int i = 0; i < H; i++) ones[t * H + i] = 1.0f;
  }
  size_t counts[E], rows = 0;
  CHECK(moecclMoeLayout(plan, ids, T, K, 0, counts, NULL));
  for (int i = 0; i < nlocal; i++) rows += counts[i];
  size_t cap = rows ? rows : 1;
  float* er = malloc(cap * H * sizeof(float));
  float* ger = malloc(cap * H * sizeof(float));
  CHECK(moecclMoeDispatch(plan, x, er, cap, H, moecclFloat32, NULL));
  /* the "experts": rows arrive expert-major, local experts ascending */
  for (int i = 0, r = 0; i < nlocal; i++)
    for (size_t n = 0; n < counts[i]; n++, r++)
      for (int j = 0; j < H; j++) er[(size_t)r * H + j] *= (float)(local[i] + 1);
  CHECK(moecclMoeCombine(plan, er, cap, w, y, H, moecclFloat32, NULL));
  CHECK(moecclMoeCombineBackward(plan, ones, w, er, ger, cap, gw, H, moecclFloat32, NULL));
  CHECK(moecclMoeDispatchBackward(plan, ger, cap, gx, H, moecclFloat32, NULL));

  long bad = 0;
  for (size_t t = 0; t < T; t++)
    for (int i = 0; i < H; i++) {
      float s = (float)(w[t * K] * (ids[t * K] + 1) + w[t * K + 1] * (ids[t * K + 1] + 1));
      bad += fabsf(y[t * H + i] - s * x[t * H + i]) > 1e-4f * (1 + fabsf(s * x[t * H + i]));
      bad += fabsf(gx[t * H + i] - 1.0f) > 1e-6f; /* w[t][0] + w[t][1] = 1 */
    }
  printf("rank %d: %zu tokens out, %zu expert rows in (experts %d..%d), %ld wrong\n", rank, T,
         rows, nlocal ? local[0] : -1, nlocal ? local[nlocal - 1] : -1, bad);
  CHECK(moecclMoePlanDestroy(plan));
  CHECK(moecclCommDestroy(comm));
  free(ids), free(w), free(x), free(y), free(gw), free(gx), free(ones), free(er), free(ger);
  return bad != 0;
}

int main(int argc, char** argv) {
  int nranks = argc > 1 ? atoi(argv[1]) : 4;
  int rc = launch(nranks, rank_main);
  printf("moe_roundtrip: %s\n", rc ? "FAILED" : "ok");
  return rc;
}
