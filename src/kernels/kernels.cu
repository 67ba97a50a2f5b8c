/*
 * The device kernels of libmoeccl (docs/ARCHITECTURE.md, "Device
 * kernels"): one kernel per family, the datatype and the operation are
 * fields of its argument (devmath.h), so that one nvcc run stays short.
 * Each thread walks the launch's work items with a grid stride and calls
 * the same function the C twin (twins.c) calls for that item.  Built into
 * one fatbin (sm_80, sm_90, compute_90 PTX) that src/local.mk embeds in
 * libmoeccl; loaded with cuModuleLoadData through the device seam.
 */
#include "kernels/devmath.h"

#define GRID_STRIDE(total, body)                                                                   \
  for (uint64_t item = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; item < (total);            \
       item += (uint64_t)gridDim.x * blockDim.x) {                                                 \
    body;                                                                                          \
  }

extern "C" __global__ void moeccl_k_reduce(const moeccl_kred_args_t g) {
  GRID_STRIDE(g.n, dm_reduce_item(&g, item))
}

extern "C" __global__ void moeccl_k_reduce_fold(const moeccl_kfold_args_t g) {
  GRID_STRIDE(g.first.n, dm_fold_item(&g, item))
}

extern "C" __global__ void moeccl_k_rows_sum(const moeccl_krows_args_t g) {
  GRID_STRIDE(dm_rows_items(0, &g), dm_rows_sum_item(&g, item))
}

extern "C" __global__ void moeccl_k_rows_dot(const moeccl_krows_args_t g) {
  GRID_STRIDE(dm_rows_items(1, &g), dm_rows_dot_item(&g, item))
}

extern "C" __global__ void moeccl_k_rows_copy(const moeccl_krows_args_t g) {
  GRID_STRIDE(dm_rows_items(2, &g), dm_rows_copy_item(&g, item))
}

extern "C" __global__ void moeccl_k_rows_add(const moeccl_krows_args_t g) {
  GRID_STRIDE(dm_rows_items(3, &g), dm_rows_add_item(&g, item))
}
