/* moe_train's local experts on a chunk's rows: this rank's block of
 * experts in one call, or with a placement one call per slot with its
 * expert's weights (train_experts.h). */
#include "train_experts.h"

/* The forward of this rank's experts of layer l over a chunk's rows: one
 * call over the default block, or one per slot with its expert's weights. */
void experts_fwd(const moe_backend_ops_t* be, const moe_config_t* c, const dist_t* ds, int l,
                 const moe_layer_params_t* wl, dchunk_t* ch) {
  size_t H = c->hidden, F = c->ffn, HF = H * F, row = 0;
  if (!ds->place) {
    moe_experts_forward(be, c, ds->nexp, ch->counts, wl->w1 + ds->e0 * HF, wl->w3 + ds->e0 * HF,
                        wl->w2 + ds->e0 * HF, ch->x_rows, ch->a, ch->b, ch->h, ch->y_rows);
    return;
  }
  for (int i = 0; i < ds->nlocal; row += ch->counts[i], i++) {
    size_t e = local_expert(ds, l, i);
    moe_experts_forward(be, c, 1, &ch->counts[i], wl->w1 + e * HF, wl->w3 + e * HF, wl->w2 + e * HF,
                        ch->x_rows + row * H, ch->a + row * F, ch->b + row * F, ch->h + row * F,
                        ch->y_rows + row * H);
  }
}

/* The input half of their backward: dx_rows from dy (da, db kept). */
void experts_bwd_in(const moe_backend_ops_t* be, const moe_config_t* c, const dist_t* ds, int l,
                    const moe_layer_params_t* wl, const dchunk_t* ch, const float* dy, float* dx,
                    float* da, float* db, float* dh) {
  size_t H = c->hidden, F = c->ffn, HF = H * F, row = 0;
  if (!ds->place) {
    moe_experts_backward_input(be, c, ds->nexp, ch->counts, wl->w1 + ds->e0 * HF,
                               wl->w3 + ds->e0 * HF, wl->w2 + ds->e0 * HF, ch->a, ch->b, dy, dx, da,
                               db, dh);
    return;
  }
  for (int i = 0; i < ds->nlocal; row += ch->counts[i], i++) {
    size_t e = local_expert(ds, l, i);
    moe_experts_backward_input(be, c, 1, &ch->counts[i], wl->w1 + e * HF, wl->w3 + e * HF,
                               wl->w2 + e * HF, ch->a + row * F, ch->b + row * F, dy + row * H,
                               dx + row * H, da + row * F, db + row * F, dh + row * F);
  }
}

/* The weight half: adds dW1, dW3, dW2 of the local experts into gl. */
void experts_bwd_w(const moe_backend_ops_t* be, const moe_config_t* c, const dist_t* ds, int l,
                   const dchunk_t* ch, const float* dy, const float* da, const float* db,
                   moe_layer_params_t* gl) {
  size_t H = c->hidden, F = c->ffn, HF = H * F, row = 0;
  if (!ds->place) {
    moe_experts_backward_weight(be, c, ds->nexp, ch->counts, ch->x_rows, ch->h, dy, da, db,
                                gl->w1 + ds->e0 * HF, gl->w3 + ds->e0 * HF, gl->w2 + ds->e0 * HF);
    return;
  }
  for (int i = 0; i < ds->nlocal; row += ch->counts[i], i++) {
    size_t e = local_expert(ds, l, i);
    moe_experts_backward_weight(be, c, 1, &ch->counts[i], ch->x_rows + row * H, ch->h + row * F,
                                dy + row * H, da + row * F, db + row * F, gl->w1 + e * HF,
                                gl->w3 + e * HF, gl->w2 + e * HF);
  }
}
