/* moe_train's ranks: the layout of a rank (its EP group and index, experts
 * and rows), the world, EP and DP communicators, and the collectives outside
 * the layer: the failure flag, the gradients' sums over the replicas, the
 * gathers of --dump. */
#define _GNU_SOURCE
#include "train_dist.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "adam.h"
#include "train_place.h"

int row_start(int r, int nranks, int tokens) {
  return (int)((long long)r * tokens / nranks);
}

int ccl_fail(const dist_t* ds, moecclComm_t comm, const char* what, moecclResult_t r) {
  fprintf(stderr, "moe_train: rank %d: %s: %s: %s\n", ds->rank, what, moecclGetErrorString(r),
          moecclGetLastError(comm));
  return -1;
}

int dist_init(dist_t* ds, const train_options_t* o, int rank, int nranks, moecclComm_t world) {
  memset(ds, 0, sizeof(*ds));
  ds->world = world;
  ds->rank = rank;
  ds->nranks = nranks;
  ds->S = o->pp;
  ds->Q = nranks / ds->S;
  ds->s = rank / ds->Q;
  ds->q = rank % ds->Q;
  ds->V = o->vstages;
  ds->layers = o->cfg.layers;
  ds->layer_start = o->layer_start;
  ds->P = o->ep;
  ds->D = o->dp;
  ds->d = ds->q / ds->P;
  ds->p = ds->q % ds->P;
  ds->nexp = o->cfg.experts / ds->P;
  ds->e0 = ds->p * ds->nexp;
  ds->nlocal = ds->nexp;
  if (o->rebalance_every || o->replicas) {
    char err[256];
    ds->place = calloc(o->cfg.layers, sizeof(placement_t));
    ds->place_ver = calloc(o->cfg.layers, sizeof(int));
    ds->load = calloc((size_t)o->cfg.layers * o->cfg.experts, sizeof(float));
    if (!ds->place || !ds->place_ver || !ds->load) {
      fprintf(stderr, "moe_train: rank %d: out of memory\n", rank);
      return -1;
    }
    for (int l = 0; l < o->cfg.layers; l++)
      if (placement_default(&ds->place[l], o->cfg.experts, ds->P, o->replicas, err,
                            sizeof(err))) {
        fprintf(stderr, "moe_train: rank %d: %s\n", rank, err);
        return -1;
      }
    ds->nlocal = ds->place[0].spr;
  }
  ds->M = o->microbatches;
  ds->mb_n = calloc(ds->M, sizeof(int));
  ds->mb_off = calloc(ds->M, sizeof(int));
  ds->mb_g0 = calloc(ds->M, sizeof(int));
  if (!ds->mb_n || !ds->mb_off || !ds->mb_g0) {
    fprintf(stderr, "moe_train: rank %d: out of memory\n", rank);
    return -1;
  }
  for (int m = 0; m < ds->M; m++) {
    int g0 = row_start(m, ds->M, o->tokens), nm = row_start(m + 1, ds->M, o->tokens) - g0;
    ds->mb_g0[m] = g0 + row_start(ds->q, ds->Q, nm);
    ds->mb_n[m] = row_start(ds->q + 1, ds->Q, nm) - row_start(ds->q, ds->Q, nm);
    ds->mb_off[m] = ds->n;
    ds->n += ds->mb_n[m];
    int most = (nm + ds->Q - 1) / ds->Q;
    if (most > ds->maxn) ds->maxn = most;
  }
  CK(ds, ds->world, moecclCommSplit(ds->world, ds->s, ds->q, &ds->stage, NULL));
  CK(ds, ds->world, moecclCommSplit(ds->world, ds->s * ds->D + ds->d, ds->p, &ds->ep, NULL));
  CK(ds, ds->world, moecclCommSplit(ds->world, ds->s * ds->P + ds->p, ds->d, &ds->dp, NULL));
  CK(ds, ds->world, moecclCommSplit(ds->world, ds->q, ds->s, &ds->pp, NULL));
  if (o->chunks > 1 || o->overlap) CK(ds, ds->ep, moecclHostStreamCreate(&ds->stream));
  return 0;
}

void dist_fini(dist_t* ds, int failed) {
  if (ds->stream && !failed) moecclHostStreamDestroy(ds->stream);
  moecclComm_t comms[5] = {ds->pp, ds->dp, ds->ep, ds->stage, ds->world};
  for (int i = 0; i < 5; i++)
    if (comms[i]) failed ? moecclCommAbort(comms[i]) : moecclCommDestroy(comms[i]);
  if (ds->stream && failed) moecclHostStreamDestroy(ds->stream);
  free(ds->mb_n), free(ds->mb_off), free(ds->mb_g0);
  ds->mb_n = ds->mb_off = ds->mb_g0 = NULL;
  if (ds->place)
    for (int l = 0; l < ds->layers; l++) placement_free(&ds->place[l]);
  free(ds->place), free(ds->place_ver), free(ds->load);
  ds->place = NULL, ds->place_ver = NULL, ds->load = NULL;
}

int dist_any(const dist_t* ds, int flag) {
  moecclResult_t r = moecclAllReduce(&flag, &flag, 1, moecclInt32, moecclMax, ds->world, NULL);
  if (r != moecclSuccess) return ccl_fail(ds, ds->world, "moecclAllReduce", r);
  return flag ? -1 : 0;
}

int dist_has_layer(const dist_t* ds, int l) {
  for (int j = ds->s; j < ds->S * ds->V; j += ds->S)
    if (l >= ds->layer_start[j] && l < ds->layer_start[j + 1]) return 1;
  return 0;
}

void rows_take(const dist_t* ds, size_t H, const float* full, float* local) {
  for (int m = 0; m < ds->M; m++)
    memcpy(local + (size_t)ds->mb_off[m] * H, full + (size_t)ds->mb_g0[m] * H,
           (size_t)ds->mb_n[m] * H * sizeof(float));
}

void rows_put(const dist_t* ds, size_t H, const float* local, float* full) {
  for (int m = 0; m < ds->M; m++)
    memcpy(full + (size_t)ds->mb_g0[m] * H, local + (size_t)ds->mb_off[m] * H,
           (size_t)ds->mb_n[m] * H * sizeof(float));
}

int grad_allreduce(const moe_config_t* c, const dist_t* ds, moe_params_t* g) {
  size_t HF = (size_t)c->hidden * c->ffn, HE = (size_t)c->hidden * c->experts;
  size_t cnt = (size_t)ds->nexp * HF;
  for (int l = 0; l < c->layers; l++) {
    if (!dist_has_layer(ds, l)) continue;
    moe_layer_params_t* gl = &g->layer[l];
    if (ds->Q > 1)
      CK(ds, ds->stage,
         moecclAllReduce(cptr(ds, gl->wg), cptr(ds, gl->wg), HE, moecclFloat32, moecclSum,
                         ds->stage, NULL));
    if (ds->place) {
      if (place_sync_grads(c, ds, l, &ds->place[l], g)) return -1;
    } else if (ds->D > 1) {
      float* part[3] = {gl->w1 + ds->e0 * HF, gl->w3 + ds->e0 * HF, gl->w2 + ds->e0 * HF};
      for (int i = 0; i < 3; i++)
        CK(ds, ds->dp, moecclAllReduce(cptr(ds, part[i]), cptr(ds, part[i]), cnt, moecclFloat32,
                                       moecclSum, ds->dp, NULL));
    }
  }
  return 0;
}

void adam_held(const moe_backend_ops_t* be, const moe_config_t* c, const dist_t* ds,
               moe_adam_t* adam, moe_params_t* p, const moe_params_t* g) {
  size_t HF = (size_t)c->hidden * c->ffn, HE = (size_t)c->hidden * c->experts;
  size_t cnt = (size_t)ds->nexp * HF;
  moe_adam_begin(adam);
  for (int l = 0; l < c->layers; l++) {
    if (!dist_has_layer(ds, l)) continue;
    const moe_layer_params_t* pl = &p->layer[l];
    moe_adam_range(adam, be, p->data, g->data, (size_t)(pl->wg - p->data), HE);
    const float* w[3] = {pl->w1, pl->w3, pl->w2};
    if (!ds->place)
      for (int i = 0; i < 3; i++)
        moe_adam_range(adam, be, p->data, g->data, (size_t)(w[i] - p->data) + ds->e0 * HF, cnt);
    else
      for (int k = 0; k < ds->nlocal; k++)
        for (int i = 0; i < 3; i++)
          moe_adam_range(adam, be, p->data, g->data,
                         (size_t)(w[i] - p->data) + (size_t)local_expert(ds, l, k) * HF, HF);
  }
}

int gather_for_dump(const moe_config_t* c, const dist_t* ds, int tokens, const moe_params_t* g,
                    const float* out, const float* grad_x, moe_params_t* full_g, float* full_out,
                    float* full_gx) {
  size_t HF = (size_t)c->hidden * c->ffn, H = c->hidden, HE = (size_t)c->hidden * c->experts;
  size_t cnt = (size_t)ds->nexp * HF, NH = (size_t)tokens * H;
  /* Every value is taken from exactly one rank and the others add zeros, so
   * the sum on rank 0 is that value, bit for bit. */
  moe_params_t mine = {0};
  float* rows = calloc(2 * NH + 1, sizeof(float));
  if (!rows || moe_params_alloc(&mine, c)) {
    fprintf(stderr, "moe_train: rank %d: out of memory\n", ds->rank);
    free(rows);
    moe_params_free(&mine);
    return -1;
  }
  for (int l = 0; l < c->layers; l++) {
    if (!dist_has_layer(ds, l)) continue;
    const moe_layer_params_t* gl = &g->layer[l];
    moe_layer_params_t* ml = &mine.layer[l];
    if (ds->q == 0) memcpy(ml->wg, gl->wg, HE * sizeof(float));
    if (ds->d == 0 && !ds->place) {
      memcpy(ml->w1 + ds->e0 * HF, gl->w1 + ds->e0 * HF, cnt * sizeof(float));
      memcpy(ml->w3 + ds->e0 * HF, gl->w3 + ds->e0 * HF, cnt * sizeof(float));
      memcpy(ml->w2 + ds->e0 * HF, gl->w2 + ds->e0 * HF, cnt * sizeof(float));
    } else if (ds->d == 0) { /* each expert from the holder of its first copy */
      const placement_t* pl = &ds->place[l];
      for (int e = 0; e < c->experts; e++) {
        if (pl->slot_rank[pl->expert_slots[pl->first[e]]] != ds->p) continue;
        memcpy(ml->w1 + e * HF, gl->w1 + e * HF, HF * sizeof(float));
        memcpy(ml->w3 + e * HF, gl->w3 + e * HF, HF * sizeof(float));
        memcpy(ml->w2 + e * HF, gl->w2 + e * HF, HF * sizeof(float));
      }
    }
  }
  if (ds->s == ds->S - 1) rows_put(ds, H, out, rows);
  if (ds->s == 0) rows_put(ds, H, grad_x, rows + NH);
  moecclResult_t r = moecclReduce(mine.data, ds->rank == 0 ? full_g->data : NULL, mine.count,
                                  moecclFloat32, moecclSum, 0, ds->world, NULL);
  if (r == moecclSuccess)
    r = moecclReduce(rows, ds->rank == 0 ? rows : NULL, 2 * NH, moecclFloat32, moecclSum, 0,
                     ds->world, NULL);
  if (r == moecclSuccess && ds->rank == 0) {
    memcpy(full_out, rows, NH * sizeof(float));
    memcpy(full_gx, rows + NH, NH * sizeof(float));
  }
  free(rows);
  moe_params_free(&mine);
  if (r != moecclSuccess) return ccl_fail(ds, ds->world, "moecclReduce", r);
  return 0;
}
