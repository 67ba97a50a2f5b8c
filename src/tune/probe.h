/*
 * Cost probes: what the tuner's copy and device costs are on this machine,
 * measured at communicator creation (moeccl_tuner_init) unless a tune or
 * topology file gives them or MOECCL_TUNE_PROBE turns them off.
 *
 * Host copies: every rank of a machine copies in the same window of the
 * machine's clock (CLOCK_MONOTONIC, shared by the processes of one
 * kernel), so the probe sees the cores and the memory bandwidth shared as
 * the calls will share them.  A rank's bytes and the part of the window it
 * was there for are gathered; a machine's rate is its bytes over its
 * ranks' time, at most the window times its cores (the rate of one rank
 * that has a core: the tuner's machine floor shares the cores), and the
 * communicator takes its slowest machine's.
 *
 * Device: with a device backend (CUDA, or the emulation) that reaches a
 * peer (the tuner asks only such ranks: their context exists), each process
 * measures once per device a copy's latency (queued small copies), a
 * kernel launch's (queued empty launches of the library's row kernel) and
 * HBM (device-to-device copies large enough to hide the latency); the
 * communicator takes each machine's median and the slowest machine's.
 * The peer link is not measured (that needs the peers' mappings; a2a_dev_perf
 * --costs measures it) and keeps its default or the file's.
 *
 * Every rank computes the agreed values from the same gathered table, so
 * every rank prices alike.
 */
#ifndef MOECCL_TUNE_PROBE_H_
#define MOECCL_TUNE_PROBE_H_

#include <stdint.h>

#include "comm/comm.h"

/* What one rank measured; gathered from every rank (zeros: nothing). */
typedef struct {
  double host_bytes;    /* bytes copied inside the window */
  double host_ready_s;  /* seconds of the window this rank was there for */
  double dev_hbm_GBps;  /* device memory read + write */
  double dev_copy_us;   /* per queued copy */
  double dev_launch_us; /* per queued kernel launch; 0: no kernels */
  double host_late;     /* 1: came after the machine's window, copied in one of its own */
} moeccl_probe_t;

/* The window's length and the wait before it (see moeccl_probe_host). */
#define MOECCL_PROBE_WINDOW_NS 1000000LL

/* The machine's clock in nanoseconds (CLOCK_MONOTONIC). */
int64_t moeccl_probe_clock_ns(void);
/* When the window of this rank's machine starts: after the latest of the
 * machine's ranks' entered_ns (each rank's clock as it entered the
 * exchange that precedes the probe), with a margin for that exchange to
 * finish everywhere (longer where the machine has more ranks than cores:
 * each hop of the exchange may wait for a core).  Every rank of the
 * machine gets the same. */
int64_t moeccl_probe_host_start(const moeccl_comm_t* comm, const int64_t* entered_ns);
/* Faults the host probe's buffer in (once per process), before the
 * exchange that precedes the window, so that the window is all copying. */
void moeccl_probe_host_prepare(void);
/* Copies from start_ns to start_ns + MOECCL_PROBE_WINDOW_NS (sleeping
 * until then) and fills out's host fields.  A start far ahead (a clock
 * that is not shared) or a window already over (a busy machine) starts
 * now.  No memory, or another thread of the process probing: zeros. */
void moeccl_probe_host(int64_t start_ns, moeccl_probe_t* out);
/* The device costs of this process's current device (measured once per
 * device, then the same), into out's dev fields; zeros where no device
 * backend sees a device or a measurement failed.  Returns 1 when measured. */
int moeccl_probe_device(moeccl_probe_t* out);

/* The agreed costs from every rank's all[nranks] (the same on every rank):
 * *copy_GBps the host copy rate (0: none measured), dev the device costs
 * (each 0: none measured). */
typedef struct {
  double hbm_GBps, copy_us, launch_us;
} moeccl_probe_dev_t;
moecclResult_t moeccl_probe_agree(const moeccl_comm_t* comm, const moeccl_probe_t* all,
                                  double* copy_GBps, moeccl_probe_dev_t* dev);

#endif
