/* moe_train's files: --load reads a layer's four weight tensors and the
 * batch, --dump writes the same tensors' gradients (named "grad_" and the
 * weight's file), the output, dL/dx and the loss.  All .npy, full shapes. */
#define _GNU_SOURCE
#include "train_io.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "npy.h"

/* One of a layer's weight tensors: its file name, data and shape. */
typedef struct layer_file {
  char name[32];
  float* data;
  int nd;
  size_t shape[3];
} layer_file_t;

/* Layer l's wg{l}.npy [H,E], w1_{l}.npy and w3_{l}.npy [E,H,F], w2_{l}.npy
 * [E,F,H] on p's tensors, their names after prefix. */
static void layer_files(const moe_config_t* c, const moe_params_t* p, int l, const char* prefix,
                        layer_file_t f[4]) {
  size_t H = c->hidden, E = c->experts, F = c->ffn;
  const moe_layer_params_t* w = &p->layer[l];
  const char* fmt[4] = {"%swg%d.npy", "%sw1_%d.npy", "%sw3_%d.npy", "%sw2_%d.npy"};
  const layer_file_t spec[4] = {{"", w->wg, 2, {H, E}},
                                {"", w->w1, 3, {E, H, F}},
                                {"", w->w3, 3, {E, H, F}},
                                {"", w->w2, 3, {E, F, H}}};
  for (int i = 0; i < 4; i++) {
    f[i] = spec[i];
    snprintf(f[i].name, sizeof(f[i].name), fmt[i], prefix, l);
  }
}

int load_all(const train_options_t* o, moe_params_t* p, float* x, float* target) {
  const moe_config_t* c = &o->cfg;
  size_t s_x[2] = {(size_t)o->tokens, (size_t)c->hidden};
  char path[4096], err[4200];
  for (int l = 0; l < c->layers; l++) {
    layer_file_t f[4];
    layer_files(c, p, l, "", f);
    for (int i = 0; i < 4; i++) {
      snprintf(path, sizeof(path), "%s/%s", o->load, f[i].name);
      if (moe_npy_load(path, f[i].data, f[i].nd, f[i].shape, err, sizeof(err))) {
        fprintf(stderr, "moe_train: --load: %s\n", err);
        return -1;
      }
    }
  }
  const char* names[2] = {"x", "target"};
  float* dst[2] = {x, target};
  for (int i = 0; i < 2; i++) {
    snprintf(path, sizeof(path), "%s/%s.npy", o->load, names[i]);
    if (moe_npy_load(path, dst[i], 2, s_x, err, sizeof(err))) {
      fprintf(stderr, "moe_train: --load: %s\n", err);
      return -1;
    }
  }
  return 0;
}

static int dump_one(const char* dir, const char* name, const float* data, int nd,
                    const size_t* shape) {
  char path[4096], err[4200];
  snprintf(path, sizeof(path), "%s/%s", dir, name);
  if (moe_npy_write(path, data, nd, shape, err, sizeof(err))) {
    fprintf(stderr, "moe_train: --dump: %s\n", err);
    return -1;
  }
  return 0;
}

int dump_all(const train_options_t* o, const moe_params_t* g, const float* out,
             const float* grad_x, const moe_loss_t* loss) {
  const moe_config_t* c = &o->cfg;
  size_t s_x[2] = {(size_t)o->tokens, (size_t)c->hidden};
  char path[4096];
  if (mkdir(o->dump, 0777) && errno != EEXIST) {
    fprintf(stderr, "moe_train: --dump %s: %s\n", o->dump, strerror(errno));
    return -1;
  }
  int rc =
      dump_one(o->dump, "out.npy", out, 2, s_x) | dump_one(o->dump, "grad_x.npy", grad_x, 2, s_x);
  for (int l = 0; l < c->layers; l++) {
    layer_file_t f[4];
    layer_files(c, g, l, "grad_", f);
    for (int i = 0; i < 4; i++) rc |= dump_one(o->dump, f[i].name, f[i].data, f[i].nd, f[i].shape);
  }
  snprintf(path, sizeof(path), "%s/loss.txt", o->dump);
  FILE* f = fopen(path, "w");
  if (!f || fprintf(f, "%.9g\n", loss->total) < 0 || fclose(f)) {
    fprintf(stderr, "moe_train: --dump: %s: %s\n", path, strerror(errno));
    return -1;
  }
  return rc ? -1 : 0;
}
