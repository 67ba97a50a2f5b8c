/* The experts of the MoE model (model.h): SwiGLU FFNs over expert-major
 * rows, forward and the two halves of the backward, through the backend. */
#include <stddef.h>

#include "model.h"

/* --- experts ------------------------------------------------------------------------ */

void moe_experts_forward(const moe_backend_ops_t* be, const moe_config_t* cfg, int nexp,
                         const int* counts, const float* w1, const float* w3, const float* w2,
                         const float* x_rows, float* a, float* b, float* h, float* y_rows) {
  int hd = cfg->hidden, f = cfg->ffn;
  size_t hf = (size_t)hd * f, row = 0;
  for (int e = 0; e < nexp; e++) {
    int c = counts[e];
    const float* x = x_rows + row * hd;
    float *ae = a + row * f, *be_ = b + row * f, *he = h + row * f;
    be->sgemm(0, 0, c, f, hd, 1.0f, x, hd, w1 + e * hf, f, 0.0f, ae, f);
    be->sgemm(0, 0, c, f, hd, 1.0f, x, hd, w3 + e * hf, f, 0.0f, be_, f);
    be->swiglu_forward((size_t)c * f, ae, be_, he);
    be->sgemm(0, 0, c, hd, f, 1.0f, he, f, w2 + e * hf, hd, 0.0f, y_rows + row * hd, hd);
    row += c;
  }
}

void moe_experts_backward_input(const moe_backend_ops_t* be, const moe_config_t* cfg, int nexp,
                                const int* counts, const float* w1, const float* w3,
                                const float* w2, const float* a, const float* b,
                                const float* dy_rows, float* dx_rows, float* da, float* db,
                                float* dh) {
  int hd = cfg->hidden, f = cfg->ffn;
  size_t hf = (size_t)hd * f, row = 0;
  for (int e = 0; e < nexp; e++) {
    int c = counts[e];
    const float* dy = dy_rows + row * hd;
    float* dx = dx_rows + row * hd;
    float *dae = da + row * f, *dbe = db + row * f, *dhe = dh + row * f;
    be->sgemm(0, 1, c, f, hd, 1.0f, dy, hd, w2 + e * hf, hd, 0.0f, dhe, f);
    be->swiglu_backward((size_t)c * f, a + row * f, b + row * f, dhe, dae, dbe);
    be->sgemm(0, 1, c, hd, f, 1.0f, dae, f, w1 + e * hf, f, 0.0f, dx, hd);
    be->sgemm(0, 1, c, hd, f, 1.0f, dbe, f, w3 + e * hf, f, 1.0f, dx, hd);
    row += c;
  }
}

void moe_experts_backward_weight(const moe_backend_ops_t* be, const moe_config_t* cfg, int nexp,
                                 const int* counts, const float* x_rows, const float* h,
                                 const float* dy_rows, const float* da, const float* db,
                                 float* dw1, float* dw3, float* dw2) {
  int hd = cfg->hidden, f = cfg->ffn;
  size_t hf = (size_t)hd * f, row = 0;
  for (int e = 0; e < nexp; e++) {
    int c = counts[e];
    const float *x = x_rows + row * hd, *dy = dy_rows + row * hd;
    be->sgemm(1, 0, f, hd, c, 1.0f, h + row * f, f, dy, hd, 1.0f, dw2 + e * hf, hd);
    be->sgemm(1, 0, hd, f, c, 1.0f, x, hd, da + row * f, f, 1.0f, dw1 + e * hf, f);
    be->sgemm(1, 0, hd, f, c, 1.0f, x, hd, db + row * f, f, 1.0f, dw3 + e * hf, f);
    row += c;
  }
}

void moe_experts_backward(const moe_backend_ops_t* be, const moe_config_t* cfg, int nexp,
                          const int* counts, const float* w1, const float* w3, const float* w2,
                          const float* x_rows, const float* a, const float* b, const float* h,
                          const float* dy_rows, float* dw1, float* dw3, float* dw2, float* dx_rows,
                          float* da, float* db, float* dh) {
  moe_experts_backward_input(be, cfg, nexp, counts, w1, w3, w2, a, b, dy_rows, dx_rows, da, db,
                             dh);
  moe_experts_backward_weight(be, cfg, nexp, counts, x_rows, h, dy_rows, da, db, dw1, dw3, dw2);
}
