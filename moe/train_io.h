/* moe_train's files: the weights and the batch of --load, the first step's
 * output, loss and gradients of --dump (.npy, full shapes). */
#ifndef MOE_TRAIN_IO_H_
#define MOE_TRAIN_IO_H_

#include "model.h"
#include "train_options.h"

/* wg{l}.npy w1_{l}.npy w3_{l}.npy w2_{l}.npy of every layer into p, x.npy
 * and target.npy ([N][H]) into x and target; 0, or -1 with a message. */
int load_all(const train_options_t* o, moe_params_t* p, float* x, float* target);
/* out.npy, grad_x.npy, grad_{wg,w1_,w3_,w2_}{l}.npy and loss.txt (%.9g) in
 * --dump's folder (made when missing); 0, or -1 with a message (every file
 * is still tried). */
int dump_all(const train_options_t* o, const moe_params_t* g, const float* out,
             const float* grad_x, const moe_loss_t* loss);

#endif
