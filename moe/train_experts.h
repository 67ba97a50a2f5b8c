/* The forward and backward of this rank's experts of layer l over a
 * chunk's rows (moe/experts.c's calls, per slot with a placement), for
 * train_layer.c. */
#ifndef MOE_TRAIN_EXPERTS_H_
#define MOE_TRAIN_EXPERTS_H_

#include "backend.h"
#include "model.h"
#include "train_layer.h"

/* The forward: y_rows from x_rows (a, b, h kept). */
void experts_fwd(const moe_backend_ops_t* be, const moe_config_t* c, const dist_t* ds, int l,
                 const moe_layer_params_t* wl, dchunk_t* ch);
/* The input half of their backward: dx_rows from dy (da, db kept). */
void experts_bwd_in(const moe_backend_ops_t* be, const moe_config_t* c, const dist_t* ds, int l,
                    const moe_layer_params_t* wl, const dchunk_t* ch, const float* dy, float* dx,
                    float* da, float* db, float* dh);
/* The weight half: adds dW1, dW3, dW2 of the local experts into gl. */
void experts_bwd_w(const moe_backend_ops_t* be, const moe_config_t* c, const dist_t* ds, int l,
                   const dchunk_t* ch, const float* dy, const float* da, const float* db,
                   moe_layer_params_t* gl);

#endif
