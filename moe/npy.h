/* NumPy .npy files, the one kind moe/ exchanges with other tools: format
 * version 1.0, dtype '<f4' (float32, little-endian), C order.  Anything else
 * (another version, dtype or byte order, Fortran order, a short or long
 * data part) is refused with a sentence in err naming the file and why. */
#ifndef MOE_NPY_H_
#define MOE_NPY_H_

#include <stddef.h>

#define MOE_NPY_MAX_DIMS 8

typedef struct moe_npy {
  int ndim;
  size_t shape[MOE_NPY_MAX_DIMS];
  size_t count; /* product of shape (1 for ndim 0) */
  float* data;  /* malloc'ed, count floats */
} moe_npy_t;

/* Reads path into a (allocating a->data); 0, or -1 with err filled. */
int moe_npy_read(const char* path, moe_npy_t* a, char* err, size_t len);
void moe_npy_free(moe_npy_t* a);

/* Reads path into dst, which holds the shape given (ndim dims); a file of
 * another shape is refused.  0 or -1 with err filled. */
int moe_npy_load(const char* path, float* dst, int ndim, const size_t* shape, char* err,
                 size_t len);

/* Writes data (ndim dims of shape) to path as version 1.0 '<f4' C order.
 * 0 or -1 with err filled. */
int moe_npy_write(const char* path, const float* data, int ndim, const size_t* shape, char* err,
                  size_t len);

#endif
