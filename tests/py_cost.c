/*
 * py_cost.c - the C side of tests/test_py_cost.py: a loop of
 * moecclAlltoAll on a communicator and buffers the Python side made, so
 * that the binding's cost is measured against C in one run, on the same
 * processes, communicator and buffers.  Loaded with ctypes (a libtool
 * module, never installed).
 */
#include <time.h>

#include "moeccl.h"

/* Seconds per call of iters all-to-alls of count elements of datatype, or
 * -1 if one failed. */
double py_cost_alltoall(const void* send, void* recv, size_t count, int datatype,
                        moecclComm_t comm, int iters) {
  struct timespec a, b;
  clock_gettime(CLOCK_MONOTONIC, &a);
  for (int i = 0; i < iters; i++)
    if (moecclAlltoAll(send, recv, count, (moecclDataType_t)datatype, comm, NULL) !=
        moecclSuccess)
      return -1;
  clock_gettime(CLOCK_MONOTONIC, &b);
  return ((double)(b.tv_sec - a.tv_sec) + 1e-9 * (double)(b.tv_nsec - a.tv_nsec)) / iters;
}
