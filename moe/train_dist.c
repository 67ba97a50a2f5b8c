/* moe_train's ranks: the layout of a rank (its EP group and index, experts
 * and rows), the world, EP and DP communicators, and the collectives outside
 * the layer: the failure flag, the gradients' sums over the replicas, the
 * gathers of --dump. */
#define _GNU_SOURCE
#include "train_dist.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int row_start(int r, int nranks, int tokens) {
  return (int)((long long)r * tokens / nranks);
}

int ccl_fail(const dist_t* ds, moecclComm_t comm, const char* what, moecclResult_t r) {
  fprintf(stderr, "moe_train: rank %d: %s: %s: %s\n", ds->rank, what, moecclGetErrorString(r),
          moecclGetLastError(comm));
  return -1;
}

int dist_init(dist_t* ds, const train_options_t* o, int rank, int nranks, moecclUniqueId id) {
  memset(ds, 0, sizeof(*ds));
  ds->rank = rank;
  ds->nranks = nranks;
  ds->P = o->ep;
  ds->D = o->dp;
  ds->d = rank / ds->P;
  ds->p = rank % ds->P;
  ds->nexp = o->cfg.experts / ds->P;
  ds->e0 = ds->p * ds->nexp;
  ds->n0 = row_start(rank, nranks, o->tokens);
  ds->n = row_start(rank + 1, nranks, o->tokens) - ds->n0;
  ds->maxn = (o->tokens + nranks - 1) / nranks;
  CK(ds, NULL, moecclCommInitRank(&ds->world, nranks, id, rank));
  CK(ds, ds->world, moecclCommSplit(ds->world, ds->d, ds->p, &ds->ep, NULL));
  CK(ds, ds->world, moecclCommSplit(ds->world, ds->p, ds->d, &ds->dp, NULL));
  if (o->chunks > 1) CK(ds, ds->ep, moecclHostStreamCreate(&ds->stream));
  return 0;
}

void dist_fini(dist_t* ds, int failed) {
  if (ds->stream && !failed) moecclHostStreamDestroy(ds->stream);
  moecclComm_t comms[3] = {ds->dp, ds->ep, ds->world};
  for (int i = 0; i < 3; i++)
    if (comms[i]) failed ? moecclCommAbort(comms[i]) : moecclCommDestroy(comms[i]);
  if (ds->stream && failed) moecclHostStreamDestroy(ds->stream);
}

int dist_any(const dist_t* ds, int flag) {
  moecclResult_t r = moecclAllReduce(&flag, &flag, 1, moecclInt32, moecclMax, ds->world, NULL);
  if (r != moecclSuccess) return ccl_fail(ds, ds->world, "moecclAllReduce", r);
  return flag ? -1 : 0;
}

int grad_allreduce(const moe_config_t* c, const dist_t* ds, moe_params_t* g) {
  size_t HF = (size_t)c->hidden * c->ffn, HE = (size_t)c->hidden * c->experts;
  size_t cnt = (size_t)ds->nexp * HF;
  for (int l = 0; l < c->layers; l++) {
    moe_layer_params_t* gl = &g->layer[l];
    if (ds->nranks > 1)
      CK(ds, ds->world,
         moecclAllReduce(gl->wg, gl->wg, HE, moecclFloat32, moecclSum, ds->world, NULL));
    if (ds->D > 1) {
      float* part[3] = {gl->w1 + ds->e0 * HF, gl->w3 + ds->e0 * HF, gl->w2 + ds->e0 * HF};
      for (int i = 0; i < 3; i++)
        CK(ds, ds->dp, moecclAllReduce(part[i], part[i], cnt, moecclFloat32, moecclSum, ds->dp,
                                       NULL));
    }
  }
  return 0;
}

int gather_for_dump(const moe_config_t* c, const dist_t* ds, int tokens, moe_params_t* g,
                    const float* out, const float* grad_x, float* full_out, float* full_gx) {
  size_t HF = (size_t)c->hidden * c->ffn, H = c->hidden, cnt = (size_t)ds->nexp * HF;
  if (ds->P > 1)
    for (int l = 0; l < c->layers; l++) {
      float* full[3] = {g->layer[l].w1, g->layer[l].w3, g->layer[l].w2};
      for (int i = 0; i < 3; i++)
        CK(ds, ds->ep,
           moecclAllGather(full[i] + ds->e0 * HF, full[i], cnt, moecclFloat32, ds->ep, NULL));
    }
  size_t blk = (size_t)ds->maxn * H;
  float* send = calloc(blk ? blk : 1, sizeof(float));
  float* recv = ds->rank == 0 ? calloc(blk * ds->nranks + 1, sizeof(float)) : NULL;
  if (!send || (ds->rank == 0 && !recv)) {
    fprintf(stderr, "moe_train: rank %d: out of memory\n", ds->rank);
    free(send), free(recv);
    return -1;
  }
  const float* src[2] = {out, grad_x};
  float* dst[2] = {full_out, full_gx};
  for (int i = 0; i < 2; i++) {
    memcpy(send, src[i], (size_t)ds->n * H * sizeof(float));
    moecclResult_t r = moecclGather(send, recv, blk, moecclFloat32, 0, ds->world, NULL);
    if (r != moecclSuccess) {
      free(send), free(recv);
      return ccl_fail(ds, ds->world, "moecclGather", r);
    }
    if (ds->rank == 0)
      for (int q = 0; q < ds->nranks; q++) {
        int r0 = row_start(q, ds->nranks, tokens), r1 = row_start(q + 1, ds->nranks, tokens);
        memcpy(dst[i] + (size_t)r0 * H, recv + blk * q, (size_t)(r1 - r0) * H * sizeof(float));
      }
  }
  free(send), free(recv);
  return 0;
}
