/*
 * The C twins of the device kernels (kernels.cu): the emulation runs them
 * for a launch of the kernel of the same name (device.h's image).  A twin
 * translates the launch's device addresses with map and calls, for every
 * work item in order, the function of devmath.h the CUDA kernel's threads
 * call, so the tests on the emulation run the kernels' own math.
 */
#include "kernels/devkern.h"

#include "kernels/devmath.h"

static void twin_reduce(const void* args, void* (*map)(const void*)) {
  moeccl_kred_args_t g = *(const moeccl_kred_args_t*)args;
  g.dst = map(g.dst), g.a = map(g.a), g.b = map(g.b), g.sdev = map(g.sdev);
  for (uint64_t i = 0; i < g.n; i++) dm_reduce_item(&g, i);
}

static void twin_reduce_fold(const void* args, void* (*map)(const void*)) {
  moeccl_kfold_args_t g = *(const moeccl_kfold_args_t*)args;
  g.first.dst = map(g.first.dst), g.first.a = map(g.first.a), g.first.b = map(g.first.b);
  g.first.sdev = map(g.first.sdev);
  for (int32_t k = 0; k < g.nmore; k++) g.more[k] = map(g.more[k]);
  for (uint64_t i = 0; i < g.first.n; i++) dm_fold_item(&g, i);
}

static moeccl_krows_args_t rows_mapped(const void* args, void* (*map)(const void*)) {
  moeccl_krows_args_t g = *(const moeccl_krows_args_t*)args;
  g.dst = map(g.dst), g.src = map(g.src), g.aux = map(g.aux);
  g.terms = map(g.terms), g.first = map(g.first);
  return g;
}

#define ROWS_TWIN(name, mode, item)                                                                \
  static void name(const void* args, void* (*map)(const void*)) {                                  \
    moeccl_krows_args_t g = rows_mapped(args, map);                                                \
    uint64_t n = dm_rows_items(mode, &g);                                                          \
    for (uint64_t i = 0; i < n; i++) item(&g, i);                                                  \
  }
ROWS_TWIN(twin_rows_sum, 0, dm_rows_sum_item)
ROWS_TWIN(twin_rows_dot, 1, dm_rows_dot_item)
ROWS_TWIN(twin_rows_copy, 2, dm_rows_copy_item)
ROWS_TWIN(twin_rows_add, 3, dm_rows_add_item)

const moeccl_dev_twin_t moeccl_kernel_twins[MOECCL_K_COUNT] = {
    [MOECCL_K_REDUCE] = {"moeccl_k_reduce", twin_reduce},
    [MOECCL_K_ROWS_SUM] = {"moeccl_k_rows_sum", twin_rows_sum},
    [MOECCL_K_ROWS_DOT] = {"moeccl_k_rows_dot", twin_rows_dot},
    [MOECCL_K_ROWS_COPY] = {"moeccl_k_rows_copy", twin_rows_copy},
    [MOECCL_K_ROWS_ADD] = {"moeccl_k_rows_add", twin_rows_add},
    [MOECCL_K_REDUCE_FOLD] = {"moeccl_k_reduce_fold", twin_reduce_fold},
};
