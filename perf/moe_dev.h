/*
 * moe_dev.h - moe_perf --device cuda (perf/moe_dev.c): the MoE dispatch +
 * combine on device buffers against a device permute, NCCL's grouped
 * send/recv and a device unpermute, on forked ranks without MPI.  See
 * moe_perf(1).
 */
#ifndef MOECCL_PERF_MOE_DEV_H_
#define MOECCL_PERF_MOE_DEV_H_

/* Finds --device cuda|host (or --device=...) anywhere in argv and takes it
 * out (*argc shrinks): 1 for cuda, 0 for host or none, -1 for another
 * value (said on stderr). */
int moe_dev_select(int* argc, char** argv);
/* The device tool; its exit status (0, 1 failure, 2 bad command line, 3 a
 * wrong result). */
int moe_dev_main(int argc, char** argv);

#endif
