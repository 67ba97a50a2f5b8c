/* A build without nvcc: no kernels, so the CUDA backend cannot load
 * (moe_cuda_api_load says so); its host stand-in still runs. */
#include <stddef.h>

const unsigned char moe_kernels_fatbin[1] = {0};
const size_t moe_kernels_fatbin_len = 0;
