/* moe_train's placement on the wire (train_place.h): the migration of
 * experts between placements and the gradient sums over copies and
 * replicas.  The choice of placement is placement.c's; here only the
 * messages. */
#include "train_place.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The placement must be of this model's experts on this EP group. */
static int shape_ok(const moe_config_t* c, const dist_t* ds, const placement_t* pl,
                    const char* what) {
  if (pl->E == c->experts && pl->P == ds->P) return 0;
  fprintf(stderr, "moe_train: rank %d: %s: a placement of %d experts on %d ranks, not %d on %d\n",
          ds->rank, what, pl->E, pl->P, c->experts, ds->P);
  return -1;
}

static int out_of_memory(const dist_t* ds, const char* what) {
  fprintf(stderr, "moe_train: rank %d: %s: out of memory\n", ds->rank, what);
  return -1;
}

/* The flat offsets of layer l's w1, w3 and w2 (also those of Adam's m and
 * v, which follow the parameters' layout). */
static void expert_offsets(const moe_params_t* p, int l, size_t off[3]) {
  off[0] = (size_t)(p->layer[l].w1 - p->data);
  off[1] = (size_t)(p->layer[l].w3 - p->data);
  off[2] = (size_t)(p->layer[l].w2 - p->data);
}

/* Between the gradients (ds->be's memory) and the host's packed copies:
 * up = 0 to the host, 1 back. */
static void held_copy(const dist_t* ds, void* dst, const void* src, size_t bytes, int up) {
  if (!ds->be) memcpy(dst, src, bytes);
  else if (up) ds->be->to_device(dst, src, bytes);
  else ds->be->to_host(dst, src, bytes);
}

/* Ends a group opened by the caller whatever happened inside it, so that a
 * failure leaves no group open; reports the first error. */
static int group_end(const dist_t* ds, moecclResult_t inside, const char* what) {
  moecclResult_t end = moecclGroupEnd();
  if (inside != moecclSuccess) return ccl_fail(ds, ds->ep, what, inside);
  if (end != moecclSuccess) return ccl_fail(ds, ds->ep, "moecclGroupEnd", end);
  return 0;
}

int place_migrate(const moe_config_t* c, const dist_t* ds, int layer, const placement_t* old,
                  const placement_t* nw, moe_params_t* p, moe_adam_t* adam) {
  if (shape_ok(c, ds, old, "place_migrate") || shape_ok(c, ds, nw, "place_migrate")) return -1;
  if (adam && adam->count != p->count) {
    fprintf(stderr, "moe_train: rank %d: place_migrate: Adam has %zu moments, %zu parameters\n",
            ds->rank, adam->count, p->count);
    return -1;
  }
  placement_move_t* mv = malloc((size_t)nw->slots * sizeof(*mv));
  if (!mv) return out_of_memory(ds, "place_migrate");
  char err[200];
  int n = placement_moves(old, nw, mv, err, sizeof(err));
  if (n < 0) {
    fprintf(stderr, "moe_train: rank %d: %s\n", ds->rank, err);
    free(mv);
    return -1;
  }
  /* Receiving straight into the arrays is safe: a rank receives only
   * experts it did not hold, and sends only experts it held. */
  size_t HF = (size_t)c->hidden * c->ffn, off[3];
  expert_offsets(p, layer, off);
  float* base[3] = {p->data, adam ? adam->m : NULL, adam ? adam->v : NULL};
  moecclResult_t r = moecclGroupStart();
  if (r != moecclSuccess) {
    free(mv);
    return ccl_fail(ds, ds->ep, "moecclGroupStart", r);
  }
  /* Every rank walks the same list in the same order, so the messages of
   * each (sender, receiver) pair match in issue order. */
  for (int i = 0; i < n && r == moecclSuccess; i++) {
    if (mv[i].rank != ds->p && mv[i].from != ds->p) continue;
    for (int a = 0; a < 3 && r == moecclSuccess; a++)
      for (int t = 0; base[a] && t < 3 && r == moecclSuccess; t++) {
        float* at = base[a] + off[t] + (size_t)mv[i].expert * HF;
        r = mv[i].rank == ds->p
                ? moecclRecv(cptr(ds, at), HF, moecclFloat32, mv[i].from, ds->ep, NULL)
                : moecclSend(cptr(ds, at), HF, moecclFloat32, mv[i].rank, ds->ep, NULL);
      }
  }
  free(mv);
  return group_end(ds, r, "place_migrate: moecclSend/moecclRecv");
}

/* The gradient sums' buffers: the held experts' gradients packed by tensor
 * ([3][held][H*F]) and the other holders' sums of the replicated ones. */
typedef struct grad_pack {
  const int* held; /* this rank's experts, ascending (its slots) */
  int nheld;
  size_t HF;
  float* buf;  /* [3][nheld][HF] */
  float* peer; /* [nrecv][3][HF], in the order the exchange receives them */
  float* acc;  /* [HF] */
  size_t nrecv;
} grad_pack_t;

static float* packed(const grad_pack_t* gp, int t, int i) {
  return gp->buf + ((size_t)t * gp->nheld + i) * gp->HF;
}

/* Sends this rank's sum of each replicated held expert to its other
 * holders and receives theirs; every rank walks its held experts
 * ascending and their holders ascending, so each pair's messages match. */
static int exchange_copies(const dist_t* ds, const placement_t* pl, grad_pack_t* gp) {
  moecclResult_t r = moecclGroupStart();
  if (r != moecclSuccess) return ccl_fail(ds, ds->ep, "moecclGroupStart", r);
  size_t k = 0;
  for (int i = 0; i < gp->nheld && r == moecclSuccess; i++) {
    int e = gp->held[i];
    for (int m = pl->first[e]; m < pl->first[e + 1] && r == moecclSuccess; m++) {
      int h = pl->slot_rank[pl->expert_slots[m]];
      if (h == ds->p) continue;
      for (int t = 0; t < 3 && r == moecclSuccess; t++) {
        r = moecclSend(packed(gp, t, i), gp->HF, moecclFloat32, h, ds->ep, NULL);
        if (r == moecclSuccess)
          r = moecclRecv(gp->peer + (k * 3 + t) * gp->HF, gp->HF, moecclFloat32, h, ds->ep, NULL);
      }
      k++;
    }
  }
  return group_end(ds, r, "place_sync_grads: moecclSend/moecclRecv");
}

/* Each replicated expert's total: its holders' sums added in rank order,
 * the same additions on every holder, so all copies get the same bits. */
static void add_copies(const dist_t* ds, const placement_t* pl, grad_pack_t* gp) {
  size_t k = 0, HF = gp->HF;
  for (int i = 0; i < gp->nheld; i++) {
    int e = gp->held[i];
    if (pl->copies[e] < 2) continue;
    size_t k0 = k;
    for (int t = 0; t < 3; t++) {
      k = k0;
      int started = 0;
      for (int m = pl->first[e]; m < pl->first[e + 1]; m++) {
        int h = pl->slot_rank[pl->expert_slots[m]];
        const float* part = h == ds->p ? packed(gp, t, i) : gp->peer + (k++ * 3 + t) * HF;
        if (!started) memcpy(gp->acc, part, HF * sizeof(float)), started = 1;
        else
          for (size_t x = 0; x < HF; x++) gp->acc[x] += part[x];
      }
      memcpy(packed(gp, t, i), gp->acc, HF * sizeof(float));
    }
  }
}

int place_sync_grads(const moe_config_t* c, const dist_t* ds, int layer, const placement_t* pl,
                     moe_params_t* g) {
  if (shape_ok(c, ds, pl, "place_sync_grads")) return -1;
  grad_pack_t gp = {pl->slot_expert + (size_t)ds->p * pl->spr,
                    pl->spr,
                    (size_t)c->hidden * c->ffn,
                    NULL,
                    NULL,
                    NULL,
                    0};
  for (int i = 0; i < gp.nheld; i++) gp.nrecv += (size_t)pl->copies[gp.held[i]] - 1;
  if (ds->D == 1 && gp.nrecv == 0) return 0;
  size_t off[3];
  expert_offsets(g, layer, off);
  gp.buf = malloc(3 * gp.nheld * gp.HF * sizeof(float));
  gp.peer = malloc((gp.nrecv ? gp.nrecv : 1) * 3 * gp.HF * sizeof(float));
  gp.acc = malloc(gp.HF * sizeof(float));
  int rc = -1;
  if (!gp.buf || !gp.peer || !gp.acc) {
    out_of_memory(ds, "place_sync_grads");
    goto out;
  }
  for (int t = 0; t < 3; t++)
    for (int i = 0; i < gp.nheld; i++)
      held_copy(ds, packed(&gp, t, i), g->data + off[t] + (size_t)gp.held[i] * gp.HF,
                gp.HF * sizeof(float), 0);
  /* One all-reduce per tensor: the counts grad_allreduce uses, hence its
   * algorithm and its bits when the held experts are today's block. */
  if (ds->D > 1)
    for (int t = 0; t < 3; t++) {
      float* part = packed(&gp, t, 0);
      moecclResult_t r =
          moecclAllReduce(part, part, gp.nheld * gp.HF, moecclFloat32, moecclSum, ds->dp, NULL);
      if (r != moecclSuccess) {
        ccl_fail(ds, ds->dp, "place_sync_grads: moecclAllReduce", r);
        goto out;
      }
    }
  if (gp.nrecv) {
    if (exchange_copies(ds, pl, &gp) != 0) goto out;
    add_copies(ds, pl, &gp);
  }
  for (int t = 0; t < 3; t++)
    for (int i = 0; i < gp.nheld; i++)
      held_copy(ds, g->data + off[t] + (size_t)gp.held[i] * gp.HF, packed(&gp, t, i),
                gp.HF * sizeof(float), 1);
  rc = 0;
out:
  free(gp.buf), free(gp.peer), free(gp.acc);
  return rc;
}
