/*
 * Cost probes (probe.h): the host copy rate measured by every rank of a
 * machine at once, the device's copy, launch and HBM costs, and the one
 * value of each that every rank derives from the gathered table.
 */
#include "tune/probe.h"
#include "base/check.h"
#include "base/debug.h"
#include "device/device.h"
#include "kernels/devkern.h"
#include "kernels/devmath.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* Source and destination of the host probe, each.  The calls' packing
 * copies move MiBs, from memory rather than cache; a probe within the
 * caches measured 5-13 GB/s per core on the development machine (8 MiB of
 * L3) with 8 ranks on its 2 cores, 4 MiB each 1.5-2.2 GB/s, as 8 MiB
 * blocks copied during a run there did (2.3 GB/s in all).  Kept for the
 * process's life (8 MiB), faulted in once. */
#define HOST_BYTES (4u << 20)
#define HOST_PIECE (32u << 10)  /* a piece per clock reading: ~3 us at 12 GB/s */
#define MAX_AHEAD_NS 50000000LL /* a start further ahead: the clock is not shared */

int64_t moeccl_probe_clock_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

int64_t moeccl_probe_host_start(const moeccl_comm_t* c, const int64_t* entered_ns) {
  uint64_t me = c->peers[c->rank].machine_hash;
  int64_t last = entered_ns[c->rank];
  for (int r = 0; r < c->nranks; r++)
    if (c->peers[r].machine_hash == me && entered_ns[r] > last) last = entered_ns[r];
  /* The ring allgather ends on every rank within about a hop per rank
   * after the last one entered; on a machine with more ranks than cores
   * a hop may wait for a core. */
  int hops = c->nranks - 1 < 63 ? c->nranks - 1 : 63;
  int64_t margin = 200000LL + 25000LL * hops;
  int cores = c->machine_cores > 0 ? c->machine_cores : 1;
  if (c->nmachine > cores)
    margin = margin * (c->nmachine < 4 * cores ? c->nmachine : 4 * cores) / cores;
  return last + margin;
}

/* The probe's buffer, once per process (kept: reused by every creation),
 * written over once more in a child forked after it was made, so that
 * no copy-on-write fault falls in the window. */
static char* host_buf;
static pid_t host_pid;
static pthread_mutex_t buf_lock = PTHREAD_MUTEX_INITIALIZER;

void moeccl_probe_host_prepare(void) {
  pthread_mutex_lock(&buf_lock);
  if (!host_buf) host_buf = malloc(2 * (size_t)HOST_BYTES);
  if (host_buf && host_pid != getpid()) {
    memset(host_buf, 1, 2 * (size_t)HOST_BYTES); /* faulted in outside the window */
    host_pid = getpid();
  }
  pthread_mutex_unlock(&buf_lock);
}

static void host_copy(int64_t start, moeccl_probe_t* out) {
  int64_t now = moeccl_probe_clock_ns();
  /* A start far ahead (a clock that is not shared), or a window that
   * ended before this rank came (a busy machine: the exchange before it
   * took longer than the margin): a window of its own, from now. */
  if (now - start >= MOECCL_PROBE_WINDOW_NS) out->host_late = 1.0;
  if (start - now > MAX_AHEAD_NS || out->host_late > 0) start = now;
  const int64_t end = start + MOECCL_PROBE_WINDOW_NS;
  int64_t ready = now > start ? now : start;
  struct timespec ts = {(time_t)(start / 1000000000LL), (long)(start % 1000000000LL)};
  while (now < start && clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR) {
  }
  char *src = host_buf, *dst = host_buf + HOST_BYTES;
  double bytes = 0.0;
  /* A piece counts when it ended inside the window: one a rank was
   * descheduled in and finished after it does not. */
  for (size_t off = 0;; off = (off + HOST_PIECE) % HOST_BYTES) {
    memcpy(dst + off, src + off, HOST_PIECE);
    __asm__ __volatile__("" ::"r"(dst) : "memory"); /* the copy is not dead */
    if (moeccl_probe_clock_ns() > end) break;
    bytes += HOST_PIECE;
  }
  out->host_bytes = bytes;
  out->host_ready_s = (double)(end - ready) * 1e-9;
}

/* One probe at a time in a process (communicators created by several
 * threads at once): the others measure nothing, rather than copy into the
 * same bytes. */
static pthread_mutex_t host_lock = PTHREAD_MUTEX_INITIALIZER;

void moeccl_probe_host(int64_t start, moeccl_probe_t* out) {
  out->host_bytes = out->host_ready_s = out->host_late = 0.0;
  moeccl_probe_host_prepare();
  if (!host_buf || pthread_mutex_trylock(&host_lock) != 0) return;
  host_copy(start, out);
  pthread_mutex_unlock(&host_lock);
}

/* ---- device ------------------------------------------------------------ */

#define DEV_SMALL 256 /* bytes of a latency copy */
#define DEV_N 50      /* queued copies or launches per latency */
#define DEV_MIN_BYTES (1u << 20)
#define DEV_MAX_BYTES (256u << 20)
#define DEV_LONG_US 50.0 /* an HBM copy this long hides the latency */
#define DEV_MAX_CACHED 16

typedef struct {
  int n;
  size_t bytes;
  void *dst, *src, *fn;
  const moeccl_krows_args_t* args;
} dev_job_t;

static moecclResult_t queue_copies(void* stream, void* arg) {
  const dev_job_t* j = arg;
  const moeccl_device_ops_t* d = moeccl_device();
  for (int i = 0; i < j->n; i++) MOECCL_CHECK(d->copy_async(j->dst, j->src, j->bytes, stream));
  return moecclSuccess;
}

static moecclResult_t queue_launches(void* stream, void* arg) {
  const dev_job_t* j = arg;
  const moeccl_device_ops_t* d = moeccl_device();
  for (int i = 0; i < j->n; i++)
    MOECCL_CHECK(d->launch(j->fn, 1, 32, j->args, sizeof(*j->args), stream));
  return moecclSuccess;
}

/* Microseconds per queued item of the job (its second run: the first
 * warms up), -1 on failure. */
static double per_item_us(moecclResult_t (*queue)(void*, void*), dev_job_t* j) {
  if (moeccl_device_run(queue, j) != moecclSuccess) return -1.0;
  int64_t t0 = moeccl_probe_clock_ns();
  if (moeccl_device_run(queue, j) != moecclSuccess) return -1.0;
  return (double)(moeccl_probe_clock_ns() - t0) * 1e-3 / j->n;
}

/* The library's row kernel with no rows: the smallest launch there is. */
static double launch_us(void* dst, const void* src) {
  const moeccl_device_ops_t* d = moeccl_device();
  const moeccl_dev_image_t image = {moeccl_kernels_fatbin, moeccl_kernels_fatbin_bytes,
                                    moeccl_kernel_twins, MOECCL_K_COUNT};
  void *module = NULL, *fn = NULL;
  if (!d->module_load || d->module_load(&image, &module) != moecclSuccess ||
      d->function(module, moeccl_kernel_twins[MOECCL_K_ROWS_COPY].name, &fn) != moecclSuccess)
    return 0.0;
  moeccl_krows_args_t g = {.dst = dst, .src = src, .nterms = 0, .unit = 4};
  dev_job_t j = {.n = DEV_N, .fn = fn, .args = &g};
  double us = per_item_us(queue_launches, &j);
  return us > 0 ? us : 0.0;
}

/* HBM from copies of growing size until one takes DEV_LONG_US, less the
 * latency of a copy; 0 on failure. */
static double hbm_GBps(double copy_us) {
  const moeccl_device_ops_t* d = moeccl_device();
  int dev = d->current();
  for (size_t bytes = DEV_MIN_BYTES;;
       bytes = bytes * 8 < DEV_MAX_BYTES ? bytes * 8 : DEV_MAX_BYTES) {
    void *a = NULL, *b = NULL;
    if (d->alloc(&a, bytes, dev) != moecclSuccess) return 0.0;
    if (d->alloc(&b, bytes, dev) != moecclSuccess) return d->free(a), 0.0;
    dev_job_t j = {.n = 4, .bytes = bytes, .dst = b, .src = a};
    double us = per_item_us(queue_copies, &j);
    d->free(a), d->free(b);
    if (us <= 0) return 0.0;
    if (us >= DEV_LONG_US || bytes >= DEV_MAX_BYTES) {
      double t = us > 2.0 * copy_us ? us - copy_us : us;
      return 2.0 * (double)bytes / (t * 1e-6) / 1e9;
    }
  }
}

static double dev_latency_costs(double* launch) {
  const moeccl_device_ops_t* d = moeccl_device();
  void *a = NULL, *b = NULL;
  if (d->alloc(&a, DEV_SMALL, d->current()) != moecclSuccess) return -1.0;
  if (d->alloc(&b, DEV_SMALL, d->current()) != moecclSuccess) return d->free(a), -1.0;
  dev_job_t j = {.n = DEV_N, .bytes = DEV_SMALL, .dst = b, .src = a};
  double copy = per_item_us(queue_copies, &j);
  *launch = copy > 0 ? launch_us(b, a) : 0.0;
  d->free(a), d->free(b);
  return copy;
}

static struct {
  int dev; /* -1: not measured */
  moeccl_probe_dev_t v;
} dev_cache[DEV_MAX_CACHED];
static int dev_cached;
static pthread_mutex_t dev_lock = PTHREAD_MUTEX_INITIALIZER;

int moeccl_probe_device(moeccl_probe_t* out) {
  out->dev_hbm_GBps = out->dev_copy_us = out->dev_launch_us = 0.0;
  const moeccl_device_ops_t* d = moeccl_device();
  if (!d || d->count() <= 0) return 0;
  int dev = d->current();
  pthread_mutex_lock(&dev_lock);
  moeccl_probe_dev_t v = {0};
  int hit = 0;
  for (int i = 0; i < dev_cached && !hit; i++)
    if (dev_cache[i].dev == dev) v = dev_cache[i].v, hit = 1;
  if (!hit) {
    double launch = 0.0, copy = dev_latency_costs(&launch);
    double hbm = copy > 0 ? hbm_GBps(copy) : 0.0;
    if (copy > 0 && hbm > 0) v = (moeccl_probe_dev_t){hbm, copy, launch};
    else WARN(INIT, "device: the cost probe failed on device %d; the device costs stay", dev);
    if (dev_cached < DEV_MAX_CACHED) dev_cache[dev_cached].dev = dev, dev_cache[dev_cached++].v = v;
  }
  pthread_mutex_unlock(&dev_lock);
  out->dev_hbm_GBps = v.hbm_GBps, out->dev_copy_us = v.copy_us, out->dev_launch_us = v.launch_us;
  return v.hbm_GBps > 0;
}

/* ---- agreement --------------------------------------------------------- */

typedef struct {
  uint64_t machine;
  int rank;
} member_t;

static int member_cmp(const void* a, const void* b) {
  const member_t *x = a, *y = b;
  if (x->machine != y->machine) return x->machine < y->machine ? -1 : 1;
  return x->rank - y->rank;
}

static int double_cmp(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return x < y ? -1 : x > y;
}

/* Median of the n > 0 positive values of field at all[m[i].rank], 0 if none. */
static double median(const moeccl_probe_t* all, const member_t* m, int n, size_t field,
                     double* scratch) {
  int k = 0;
  for (int i = 0; i < n; i++) {
    double v = *(const double*)((const char*)&all[m[i].rank] + field);
    if (v > 0) scratch[k++] = v;
  }
  if (k == 0) return 0.0;
  qsort(scratch, (size_t)k, sizeof(double), double_cmp);
  return k % 2 ? scratch[k / 2] : 0.5 * (scratch[k / 2 - 1] + scratch[k / 2]);
}

/* Median rate (GB/s) of the ranks that came late, each in a window of
 * its own: what one rank gets, with whatever else ran then; 0 if none. */
static double late_copy(const moeccl_probe_t* all, const member_t* m, int n, double* scratch) {
  int k = 0;
  for (int i = 0; i < n; i++) {
    const moeccl_probe_t* p = &all[m[i].rank];
    if (p->host_late > 0 && p->host_ready_s > 0 && p->host_bytes > 0)
      scratch[k++] = p->host_bytes / p->host_ready_s / 1e9;
  }
  if (k == 0) return 0.0;
  qsort(scratch, (size_t)k, sizeof(double), double_cmp);
  return k % 2 ? scratch[k / 2] : 0.5 * (scratch[k / 2 - 1] + scratch[k / 2]);
}

/* A machine's copy rate per rank that has a core (GB/s), 0 if none
 * measured: from the ranks that copied in the common window, else from
 * the late ones. */
static double machine_copy(const moeccl_comm_t* c, const moeccl_probe_t* all, const member_t* m,
                           int n, double* scratch) {
  double bytes = 0.0, ready = 0.0;
  uint64_t mask[16] = {0};
  for (int i = 0; i < n; i++) {
    for (int w = 0; w < 16; w++) mask[w] |= c->peers[m[i].rank].cpu_mask[w];
    if (all[m[i].rank].host_late > 0) continue;
    bytes += all[m[i].rank].host_bytes, ready += all[m[i].rank].host_ready_s;
  }
  int cores = 0;
  for (int w = 0; w < 16; w++) cores += __builtin_popcountll(mask[w]);
  double most = (double)(cores > 0 ? cores : 1) * (double)MOECCL_PROBE_WINDOW_NS * 1e-9;
  if (ready <= 0 || bytes <= 0) return late_copy(all, m, n, scratch);
  return bytes / (ready < most ? ready : most) / 1e9;
}

/* x to 3 significant digits, so that logs and dumps read plainly. */
static double round3(double x) {
  if (!(x > 0)) return 0.0;
  double scale = pow(10.0, 2.0 - floor(log10(x)));
  return round(x * scale) / scale;
}

/* worst = the lower (higher) of the positive worst and v. */
static void keep_worst(double* worst, double v, int higher) {
  if (v > 0 && (*worst <= 0 || (higher ? v > *worst : v < *worst))) *worst = v;
}

moecclResult_t moeccl_probe_agree(const moeccl_comm_t* c, const moeccl_probe_t* all,
                                  double* copy_GBps, moeccl_probe_dev_t* dev) {
  int n = c->nranks;
  member_t* m = malloc(sizeof(*m) * (size_t)n);
  double* scratch = malloc(sizeof(double) * (size_t)n);
  if (!m || !scratch) return free(m), free(scratch), moecclSystemError;
  for (int r = 0; r < n; r++) m[r] = (member_t){c->peers[r].machine_hash, r};
  qsort(m, (size_t)n, sizeof(*m), member_cmp);
  double copy = 0.0;
  moeccl_probe_dev_t d = {0};
  for (int first = 0, last; first < n; first = last) {
    for (last = first + 1; last < n && m[last].machine == m[first].machine; last++) {
    }
    const member_t* g = m + first;
    int k = last - first;
    keep_worst(&copy, machine_copy(c, all, g, k, scratch), 0);
    keep_worst(&d.hbm_GBps, median(all, g, k, offsetof(moeccl_probe_t, dev_hbm_GBps), scratch), 0);
    keep_worst(&d.copy_us, median(all, g, k, offsetof(moeccl_probe_t, dev_copy_us), scratch), 1);
    keep_worst(&d.launch_us, median(all, g, k, offsetof(moeccl_probe_t, dev_launch_us), scratch),
               1);
  }
  free(m), free(scratch);
  *copy_GBps = round3(copy);
  *dev = (moeccl_probe_dev_t){round3(d.hbm_GBps), round3(d.copy_us), round3(d.launch_us)};
  return moecclSuccess;
}
