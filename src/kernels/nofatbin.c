/* A build without nvcc: no fatbin, so the CUDA backend has no kernels and
 * the device memory kind stages reductions and row programs through host
 * memory (mem.c); the emulation runs the C twins all the same. */
#include "kernels/devkern.h"

const unsigned char moeccl_kernels_fatbin[1] = {0};
const size_t moeccl_kernels_fatbin_bytes = 0;
