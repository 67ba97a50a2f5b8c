/*
 * The host emulation of the device seam (device.h), for the test suite on
 * machines without a GPU: "device memory" is shared memory (a memfd per
 * allocation, so it exports as a file descriptor like a CUDA VMM
 * allocation), a "stream" is a queue served by a thread (base/queue.h),
 * flags are waited on with futexes (cross-process: the flags live in shared
 * mappings), and MOECCL_DEVICE_EMU_DELAY_US adds a random delay before
 * every queued operation so that tests see other interleavings.
 *
 * As on a GPU, the host cannot touch device memory: the address an
 * allocation or import hands out is mapped PROT_NONE, so host code that
 * reads or writes it faults (the tests find it); the streams work on a
 * second, shadow mapping of the same memory, to which they translate
 * device addresses.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "base/check.h"
#include "base/futex.h"
#include "base/param.h"
#include "base/queue.h"
#include "device/device.h"

#define EMU_MAX_REGIONS 1024
#define EMU_DEVICES 8

typedef struct {
  char* base;   /* the device address (PROT_NONE) */
  char* shadow; /* the same memory, for the streams */
  size_t bytes;
  int device, fd; /* fd: ours (alloc) or -1 (imported) */
  uint64_t id;    /* allocations: a number never reused; imported: 0 */
} region_t;

static pthread_mutex_t regions_lock = PTHREAD_MUTEX_INITIALIZER;
static region_t regions[EMU_MAX_REGIONS];
static int nregions;
static uint64_t next_id;

static int add_region(char* base, char* shadow, size_t bytes, int device, int fd) {
  pthread_mutex_lock(&regions_lock);
  int ok = nregions < EMU_MAX_REGIONS;
  if (ok)
    regions[nregions++] = (region_t){base, shadow, bytes, device, fd, fd >= 0 ? ++next_id : 0};
  pthread_mutex_unlock(&regions_lock);
  return ok;
}

/* Removes the region starting at base, allocated here (own) or imported,
 * of bytes (0: any size); returns it in *out. */
static int take_region(const void* base, int own, size_t bytes, region_t* out) {
  pthread_mutex_lock(&regions_lock);
  int found = 0;
  for (int i = 0; i < nregions && !found; i++)
    if (regions[i].base == base && (regions[i].fd >= 0) == own &&
        (bytes == 0 || regions[i].bytes == bytes))
      *out = regions[i], regions[i] = regions[--nregions], found = 1;
  pthread_mutex_unlock(&regions_lock);
  return found;
}

static int emu_count(void) { return EMU_DEVICES; }

static int emu_pointer(const void* ptr, int* device) {
  const char* p = ptr;
  int hit = 0;
  pthread_mutex_lock(&regions_lock);
  for (int i = 0; i < nregions && !hit; i++)
    if (p >= regions[i].base && p < regions[i].base + regions[i].bytes)
      hit = 1, *device = regions[i].device;
  pthread_mutex_unlock(&regions_lock);
  return hit;
}

static moecclResult_t emu_range(const void* ptr, void** base, size_t* bytes, uint64_t* id) {
  const char* p = ptr;
  int hit = 0;
  pthread_mutex_lock(&regions_lock);
  for (int i = 0; i < nregions && !hit; i++)
    if (p >= regions[i].base && p < regions[i].base + regions[i].bytes)
      hit = 1, *base = regions[i].base, *bytes = regions[i].bytes, *id = regions[i].id;
  pthread_mutex_unlock(&regions_lock);
  return hit ? moecclSuccess : moecclInvalidArgument;
}

/* The shadow address of p when it is device memory, else p (host). */
static void* shadow_of(const void* p) {
  const char* c = p;
  void* out = (void*)(uintptr_t)p;
  pthread_mutex_lock(&regions_lock);
  for (int i = 0; i < nregions; i++)
    if (c >= regions[i].base && c < regions[i].base + regions[i].bytes) {
      out = regions[i].shadow + (c - regions[i].base);
      break;
    }
  pthread_mutex_unlock(&regions_lock);
  return out;
}

/* Maps fd twice: the device view (no access, *ptr) and the streams' shadow. */
static moecclResult_t map_views(int fd, size_t bytes, int device, int own, void** ptr) {
  void* base = mmap(NULL, bytes, PROT_NONE, MAP_SHARED, fd, 0);
  if (base == MAP_FAILED) return moecclSystemError;
  void* shadow = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (shadow == MAP_FAILED) return munmap(base, bytes), moecclSystemError;
  if (!add_region(base, shadow, bytes, device, own ? fd : -1))
    return munmap(base, bytes), munmap(shadow, bytes), moecclSystemError;
  *ptr = base;
  return moecclSuccess;
}

static void unmap_views(const region_t* r) {
  munmap(r->base, r->bytes);
  munmap(r->shadow, r->bytes);
}

static moecclResult_t emu_alloc(void** ptr, size_t bytes, int device) {
  if (device < 0 || device >= EMU_DEVICES || bytes == 0) return moecclInvalidArgument;
  int fd = memfd_create("moeccl-emu-device", MFD_CLOEXEC);
  if (fd < 0) return moecclSystemError;
  if (ftruncate(fd, (off_t)bytes) != 0) return close(fd), moecclSystemError;
  moecclResult_t rc = map_views(fd, bytes, device, 1, ptr);
  if (rc != moecclSuccess) close(fd);
  return rc;
}

static moecclResult_t emu_free(void* ptr) {
  region_t r;
  if (!take_region(ptr, 1, 0, &r)) return moecclInvalidArgument;
  unmap_views(&r);
  close(r.fd);
  return moecclSuccess;
}

static moecclResult_t emu_export_fd(void* ptr, int* fd, size_t* bytes) {
  if (moeccl_param_device_emu_legacy()) return moecclInvalidArgument;
  int got = -1;
  pthread_mutex_lock(&regions_lock);
  for (int i = 0; i < nregions && got < 0; i++)
    if (regions[i].base == ptr && regions[i].fd >= 0)
      got = fcntl(regions[i].fd, F_DUPFD_CLOEXEC, 0), *bytes = regions[i].bytes;
  pthread_mutex_unlock(&regions_lock);
  if (got < 0) return moecclInvalidArgument;
  *fd = got;
  return moecclSuccess;
}

static moecclResult_t emu_import_fd(int fd, size_t bytes, int device, void** ptr) {
  return map_views(fd, bytes, device, 0, ptr);
}

static moecclResult_t emu_unimport(void* ptr, size_t bytes) {
  region_t r;
  if (!take_region(ptr, 0, bytes, &r)) return moecclInvalidArgument;
  unmap_views(&r);
  return moecclSuccess;
}

/* Legacy IPC, emulated: the handle names the allocation's memfd in the
 * exporting process, which the importer opens through /proc. */
typedef struct {
  uint64_t magic;
  int32_t pid, fd;
  uint64_t bytes;
  int32_t device;
} emu_ipc_t;
#define EMU_IPC_MAGIC 0x656d752d69706321ULL
_Static_assert(sizeof(emu_ipc_t) <= MOECCL_IPC_HANDLE_BYTES, "emu IPC handle size");

static moecclResult_t emu_ipc_export(void* base, void* handle) {
  emu_ipc_t h = {EMU_IPC_MAGIC, (int32_t)getpid(), -1, 0, 0};
  pthread_mutex_lock(&regions_lock);
  for (int i = 0; i < nregions && h.fd < 0; i++)
    if (regions[i].base == base && regions[i].fd >= 0)
      h.fd = regions[i].fd, h.bytes = regions[i].bytes, h.device = regions[i].device;
  pthread_mutex_unlock(&regions_lock);
  if (h.fd < 0) return moecclInvalidArgument;
  memset(handle, 0, MOECCL_IPC_HANDLE_BYTES);
  memcpy(handle, &h, sizeof(h));
  return moecclSuccess;
}

static moecclResult_t emu_ipc_import(const void* handle, void** ptr) {
  emu_ipc_t h;
  memcpy(&h, handle, sizeof(h));
  if (h.magic != EMU_IPC_MAGIC) return moecclInvalidArgument;
  char path[64];
  snprintf(path, sizeof(path), "/proc/%d/fd/%d", (int)h.pid, (int)h.fd);
  int fd = open(path, O_RDWR | O_CLOEXEC);
  if (fd < 0) return moecclSystemError;
  moecclResult_t rc = emu_import_fd(fd, h.bytes, h.device, ptr);
  close(fd);
  return rc;
}

static moecclResult_t emu_ipc_close(void* ptr) {
  region_t r;
  if (!take_region(ptr, 0, 0, &r)) return moecclInvalidArgument;
  unmap_views(&r);
  return moecclSuccess;
}

static int emu_current(void) { return 0; }

/* ---- what CUDA does that a plain host program would not ------------------ */

static moeccl_device_emu_counts_t counts;

void moeccl_device_emu_counts(moeccl_device_emu_counts_t* out) {
  out->copies = __atomic_load_n(&counts.copies, __ATOMIC_RELAXED);
  out->memops = __atomic_load_n(&counts.memops, __ATOMIC_RELAXED);
  out->host_fns = __atomic_load_n(&counts.host_fns, __ATOMIC_RELAXED);
  out->syncs = __atomic_load_n(&counts.syncs, __ATOMIC_RELAXED);
  out->launches = __atomic_load_n(&counts.launches, __ATOMIC_RELAXED);
}
#define COUNT(what, n) __atomic_fetch_add(&counts.what, (n), __ATOMIC_RELAXED)

/* Set by moeccl_device_emu_teardown: the "driver" is gone. */
static volatile int torn_down;

void moeccl_device_emu_teardown(void) { torn_down = 1; }

/* Every stream call starts here: after the teardown it crashes the way a
 * call into an unloaded driver may, loudly. */
static void alive(const char* call) {
  if (!torn_down) return;
  fprintf(stderr, "moeccl emu: %s called after the device driver was torn down (exit)\n", call);
  abort();
}

/* Pinned host memory (host_alloc, host_register): copies to and from it
 * are asynchronous; other host memory is pageable (see emu_copy_async). */
#define EMU_MAX_PINNED 256
static struct {
  char* base;
  size_t bytes;
  int own; /* host_alloc's */
} pinned[EMU_MAX_PINNED];
static int npinned;

static int is_pinned(const void* p) {
  const char* c = p;
  int hit = 0;
  pthread_mutex_lock(&regions_lock);
  for (int i = 0; i < npinned && !hit; i++)
    hit = c >= pinned[i].base && c < pinned[i].base + pinned[i].bytes;
  pthread_mutex_unlock(&regions_lock);
  return hit;
}

static moecclResult_t add_pinned(void* p, size_t bytes, int own) {
  pthread_mutex_lock(&regions_lock);
  int ok = npinned < EMU_MAX_PINNED;
  if (ok) pinned[npinned].base = p, pinned[npinned].bytes = bytes, pinned[npinned++].own = own;
  pthread_mutex_unlock(&regions_lock);
  return ok ? moecclSuccess : moecclSystemError;
}

static int drop_pinned(void* p, int own) {
  pthread_mutex_lock(&regions_lock);
  int found = 0;
  for (int i = 0; i < npinned && !found; i++)
    if (pinned[i].base == p && pinned[i].own == own) pinned[i] = pinned[--npinned], found = 1;
  pthread_mutex_unlock(&regions_lock);
  return found;
}

static moecclResult_t emu_host_alloc(void** ptr, size_t bytes) {
  alive("host_alloc");
  void* p = calloc(1, bytes ? bytes : 1);
  if (!p) return moecclSystemError;
  if (add_pinned(p, bytes, 1) != moecclSuccess) return free(p), moecclSystemError;
  *ptr = p;
  return moecclSuccess;
}

static void emu_host_free(void* ptr) {
  alive("host_free");
  if (ptr && drop_pinned(ptr, 1)) free(ptr);
}

static moecclResult_t emu_host_register(void* ptr, size_t bytes, void** dev) {
  alive("host_register");
  *dev = ptr;
  return add_pinned(ptr, bytes, 0);
}

static void emu_host_unregister(void* ptr) {
  alive("host_unregister");
  drop_pinned(ptr, 0);
}

/* ---- streams ------------------------------------------------------------ */

/* A stream is a queue (base/queue.h) of these operations. */
typedef enum { EMU_COPY, EMU_WAIT, EMU_WRITE, EMU_FN, EMU_FREE, EMU_KERNEL } emu_kind_t;

typedef struct {
  moeccl_queue_item_t item; /* first: the queue's view of it */
  emu_kind_t kind;
  void* dst;
  const void* src;
  size_t bytes;
  volatile uint64_t* addr;
  uint64_t value;
  void (*fn)(void*);
  void* arg; /* EMU_KERNEL: its copy of the launch's argument, freed after */
  moeccl_dev_twin_fn_t twin;
} emu_op_t;

typedef struct emu_stream {
  moeccl_queue_t queue; /* first: the handle is the queue */
  int blocking;         /* ordered with the legacy default stream (CUDA's default flags) */
  unsigned seed;        /* the random delays' (the stream's thread only) */
  struct emu_stream* next_dead;
} emu_stream_t;

/* The live streams, so that a pointer that is none (a freed one, a host
 * stream) is refused rather than used.  A destroyed stream's memory is
 * kept on the dead list, since another stream may still wait on its
 * count; streams_lock guards that list and the legacy stream's making. */
static moeccl_queue_registry_t live = MOECCL_QUEUE_REGISTRY_INIT;
static pthread_mutex_t streams_lock = PTHREAD_MUTEX_INITIALIZER;
static emu_stream_t* dead;
/* The legacy default stream (NULL), made on first use and never in the
 * registry.  As on CUDA, its work starts after the earlier work of every
 * blocking stream, and a blocking stream's work after the earlier work of
 * the legacy stream.  Read without the lock (legacy_stream), once made. */
static emu_stream_t* legacy;

static emu_stream_t* legacy_stream(void) { return __atomic_load_n(&legacy, __ATOMIC_ACQUIRE); }

static int emu_stream_valid(const void* stream) { return moeccl_queue_live(&live, stream); }

static void emu_delay(emu_stream_t* s) {
  long max = moeccl_param_device_emu_delay_us();
  if (max > 0) usleep((useconds_t)(rand_r(&s->seed) % (unsigned)(max + 1)));
}

/* The stream waits, without spinning, until *addr >= value; when the
 * stream is destroyed meanwhile it gives up, and fails the stream. */
static moecclResult_t emu_wait(emu_stream_t* s, volatile uint64_t* addr, uint64_t value) {
  const struct timespec tick = {0, 10 * 1000 * 1000}; /* bounds a missed cross-process wake */
  for (;;) {
    uint64_t v = __atomic_load_n(addr, __ATOMIC_ACQUIRE);
    if (v >= value) return moecclSuccess;
    if (moeccl_queue_stopping(&s->queue))
      return moecclInvalidUsage; /* destroyed while waiting on a flag never written */
    moeccl_flag_sleep(addr, v, &tick);
  }
}

static moecclResult_t run_op(emu_stream_t* s, emu_op_t* op) {
  if (op->kind != EMU_FREE) emu_delay(s);
  switch (op->kind) {
    case EMU_COPY:
      if (op->bytes == 8 && !((uintptr_t)op->dst & 7) && !((uintptr_t)op->src & 7))
        /* a flag written by a copy (a gate a test opens): whole, and its
         * waiters woken, as a GPU's copy engine writes a word another
         * stream polls */
        moeccl_flag_store(op->dst, __atomic_load_n((const uint64_t*)op->src, __ATOMIC_ACQUIRE));
      else memmove(op->dst, op->src, op->bytes);
      break;
    case EMU_WAIT: return emu_wait(s, op->addr, op->value);
    case EMU_WRITE: moeccl_flag_store(op->addr, op->value); break;
    case EMU_FN: op->fn(op->arg); break;
    case EMU_FREE: free(op->arg); break; /* a pageable copy's staging */
    case EMU_KERNEL: op->twin(op->arg, shadow_of); break;
  }
  return moecclSuccess;
}

/* The queue's run of an operation: after an error the rest is dropped, as
 * on a GPU, but for what only frees memory. */
static moecclResult_t run_item(moeccl_queue_t* q, moeccl_queue_item_t* item, moecclResult_t error) {
  emu_op_t* op = (emu_op_t*)item;
  moecclResult_t rc = moecclSuccess;
  if (error == moecclSuccess || op->kind == EMU_FREE) rc = run_op((emu_stream_t*)q, op);
  if (op->kind == EMU_KERNEL) free(op->arg);
  free(op);
  return rc;
}

static moecclResult_t stream_new(emu_stream_t** out, int blocking) {
  moeccl_queue_t* q;
  if (moeccl_queue_new(sizeof(emu_stream_t), &q) != 0) return moecclSystemError;
  emu_stream_t* s = (emu_stream_t*)q;
  s->blocking = blocking;
  s->seed = (unsigned)(uintptr_t)s ^ (unsigned)getpid();
  *out = s;
  return moecclSuccess;
}

static moecclResult_t stream_create_kind(void** stream, int blocking) {
  alive("stream_create");
  emu_stream_t* s;
  MOECCL_CHECK(stream_new(&s, blocking));
  moeccl_queue_register(&live, &s->queue);
  *stream = s;
  return moecclSuccess;
}

static moecclResult_t emu_stream_create(void** stream) { return stream_create_kind(stream, 0); }
static moecclResult_t emu_stream_create_blocking(void** stream) {
  return stream_create_kind(stream, 1);
}

/* The stream a handle names: NULL is the legacy default stream. */
static emu_stream_t* stream_of(void* stream) {
  if (stream) return stream;
  pthread_mutex_lock(&streams_lock);
  emu_stream_t* s = legacy;
  if (!s && stream_new(&s, 1) == moecclSuccess) __atomic_store_n(&legacy, s, __ATOMIC_RELEASE);
  pthread_mutex_unlock(&streams_lock);
  return s;
}

/* Runs what is queued, as cuStreamDestroy lets it; a wait whose flag is
 * never written gives up. */
static moecclResult_t emu_stream_destroy(void* stream) {
  alive("stream_destroy");
  emu_stream_t* s = stream;
  if (!s) return moecclInvalidArgument;
  pthread_mutex_lock(&streams_lock);
  s->next_dead = dead, dead = s;
  pthread_mutex_unlock(&streams_lock);
  moeccl_queue_stop(&live, &s->queue);
  return moecclSuccess;
}

static moecclResult_t push(emu_stream_t* s, emu_op_t o) {
  emu_op_t* op = malloc(sizeof(*op));
  if (!op) return moecclSystemError;
  *op = o;
  op->item.run = run_item;
  moeccl_queue_push(&s->queue, &op->item);
  return moecclSuccess;
}

/* Queues on s a wait for b's operations queued so far, unless they ran. */
static moecclResult_t wait_for(emu_stream_t* s, emu_stream_t* b) {
  uint64_t n = moeccl_queue_issued(&b->queue);
  volatile uint64_t* done = moeccl_queue_completed(&b->queue);
  if (n <= __atomic_load_n(done, __ATOMIC_ACQUIRE)) return moecclSuccess;
  return push(s, (emu_op_t){.kind = EMU_WAIT, .addr = done, .value = n});
}

static moecclResult_t legacy_waits_for(moeccl_queue_t* q, void* legacy_stream) {
  emu_stream_t* b = (emu_stream_t*)q;
  return b->blocking ? wait_for(legacy_stream, b) : moecclSuccess;
}

/* The legacy stream's implicit order (caller holds nothing): work queued
 * on it waits for the earlier work of every blocking stream; work queued
 * on a blocking stream waits for the legacy stream's earlier work. */
static moecclResult_t implicit_order(emu_stream_t* s) {
  emu_stream_t* l = legacy_stream();
  if (s == l) return moeccl_queue_each(&live, legacy_waits_for, s);
  if (!s->blocking || !l) return moecclSuccess;
  return wait_for(s, l);
}

static moecclResult_t enqueue(void* stream, emu_op_t o) {
  emu_stream_t* s = stream_of(stream);
  if (!s) return moecclSystemError;
  MOECCL_CHECK(implicit_order(s));
  return push(s, o);
}

static moecclResult_t emu_synchronize(void* stream);

/* Device addresses become shadow ones when queued: the memory must stay
 * allocated until the operation ran, as on a GPU.  Pageable host memory
 * behaves as CUDA documents it: a copy from it waits for the stream's
 * earlier work, then takes the bytes (a staging copy) before returning; a
 * copy into it returns once done; host to host is synchronous. */
static moecclResult_t emu_copy_async(void* dst, const void* src, size_t bytes, void* stream) {
  alive("copy_async");
  COUNT(copies, 1);
  int dev_dst = 0, dev_src = 0, d;
  dev_dst = emu_pointer(dst, &d), dev_src = emu_pointer(src, &d);
  int pageable_src = !dev_src && !is_pinned(src), pageable_dst = !dev_dst && !is_pinned(dst);
  emu_op_t op = {.kind = EMU_COPY, .dst = shadow_of(dst), .src = shadow_of(src), .bytes = bytes};
  if (pageable_src && bytes) {
    MOECCL_CHECK(emu_synchronize(stream));
    void* stage = malloc(bytes);
    if (!stage) return moecclSystemError;
    memcpy(stage, src, bytes);
    op.src = stage;
    MOECCL_CHECK(enqueue(stream, op));
    return enqueue(stream, (emu_op_t){.kind = EMU_FREE, .arg = stage});
  }
  MOECCL_CHECK(enqueue(stream, op));
  return pageable_dst ? emu_synchronize(stream) : moecclSuccess;
}

static moecclResult_t emu_copy_batch(void* const* dst, const void* const* src, const size_t* bytes,
                                     int n, void* stream) {
  for (int i = 0; i < n; i++) MOECCL_CHECK(emu_copy_async(dst[i], src[i], bytes[i], stream));
  return moecclSuccess;
}

static moecclResult_t emu_wait_value(void* stream, volatile uint64_t* addr, uint64_t value) {
  alive("wait_value");
  return enqueue(stream, (emu_op_t){.kind = EMU_WAIT, .addr = shadow_of((void*)addr), .value = value});
}

static moecclResult_t emu_write_value(void* stream, volatile uint64_t* addr, uint64_t value) {
  alive("write_value");
  return enqueue(stream, (emu_op_t){.kind = EMU_WRITE, .addr = shadow_of((void*)addr), .value = value});
}

static moecclResult_t emu_mem_ops(void* stream, const moeccl_dev_memop_t* ops, int n) {
  alive("mem_ops");
  if (n < 0 || n > MOECCL_DEV_MEMOPS_MAX) return moecclInvalidArgument;
  COUNT(memops, (uint64_t)n);
  for (int i = 0; i < n; i++)
    MOECCL_CHECK(enqueue(stream, (emu_op_t){.kind = ops[i].wait ? EMU_WAIT : EMU_WRITE,
                                            .addr = shadow_of((void*)ops[i].addr),
                                            .value = ops[i].value}));
  return moecclSuccess;
}

static moecclResult_t emu_host_flags(void** ptr, size_t bytes) {
  return emu_host_alloc(ptr, bytes);
}

static void emu_host_write(volatile uint64_t* addr, uint64_t value) {
  moeccl_flag_store(addr, value);
}

static moecclResult_t emu_host_fn(void* stream, void (*fn)(void*), void* arg) {
  alive("host_fn");
  COUNT(host_fns, 1);
  return enqueue(stream, (emu_op_t){.kind = EMU_FN, .fn = fn, .arg = arg});
}

static moecclResult_t emu_query(void* stream) {
  alive("query");
  emu_stream_t* s = stream ? stream : legacy_stream();
  if (!s) return moecclSuccess; /* the legacy stream was never used */
  return moeccl_queue_query(&s->queue);
}

/* The legacy stream: everything queued before on it and (its implicit
 * order) on the blocking streams.  A stream's error stays (CUDA's sticky
 * errors). */
static moecclResult_t emu_synchronize(void* stream) {
  alive("synchronize");
  COUNT(syncs, 1);
  emu_stream_t* s = stream;
  if (!s) {
    s = stream_of(NULL);
    if (!s) return moecclSystemError;
    MOECCL_CHECK(implicit_order(s));
  }
  return moeccl_queue_sync(&s->queue, 0);
}

/* Stops the walk at a stream with work (*arg): moecclInProgress. */
static moecclResult_t find_busy(moeccl_queue_t* q, void* arg) {
  if (emu_query(q) != moecclInProgress) return moecclSuccess;
  *(moeccl_queue_t**)arg = q;
  return moecclInProgress;
}

static moecclResult_t emu_sync_all(void) {
  alive("sync_all");
  MOECCL_CHECK(emu_synchronize(NULL));
  for (;;) { /* a stream with work, then again from the start: the list may change */
    moeccl_queue_t* busy = NULL;
    if (moeccl_queue_each(&live, find_busy, &busy) == moecclSuccess) return moecclSuccess;
    MOECCL_CHECK(emu_synchronize(busy));
  }
}

/* Kernels: the module is the image (its twins), a function the twin; a
 * launch is one stream operation, so it runs after what was queued before
 * it and before what is queued after.  The twin runs every work item of
 * the launch (grid and block only size a GPU's launch). */
static moecclResult_t emu_module_load(const moeccl_dev_image_t* image, void** module) {
  alive("module_load");
  if (!image || !image->twins || image->ntwins <= 0) return moecclInvalidUsage;
  if (moeccl_param_device_emu_no_kernels()) return moecclInvalidUsage; /* as CUDA, no fatbin */
  *module = (void*)(uintptr_t)image;
  return moecclSuccess;
}

static moecclResult_t emu_function(void* module, const char* name, void** fn) {
  alive("function");
  const moeccl_dev_image_t* image = module;
  for (int i = 0; image && i < image->ntwins; i++)
    if (strcmp(image->twins[i].name, name) == 0) {
      *fn = (void*)&image->twins[i];
      return moecclSuccess;
    }
  return moecclInvalidArgument;
}

static moecclResult_t emu_launch(void* fn, unsigned grid, unsigned block, const void* args,
                                 size_t args_bytes, void* stream) {
  alive("launch");
  const moeccl_dev_twin_t* twin = fn;
  if (!twin || !grid || !block || !args || !args_bytes) return moecclInvalidArgument;
  void* copy = malloc(args_bytes);
  if (!copy) return moecclSystemError;
  memcpy(copy, args, args_bytes);
  COUNT(launches, 1);
  moecclResult_t rc = enqueue(stream, (emu_op_t){.kind = EMU_KERNEL, .arg = copy, .twin = twin->fn});
  if (rc != moecclSuccess) free(copy);
  return rc;
}

const moeccl_device_ops_t moeccl_device_emu_ops = {
    .name = "emu",
    .count = emu_count,
    .pointer = emu_pointer,
    .range = emu_range,
    .alloc = emu_alloc,
    .free = emu_free,
    .export_fd = emu_export_fd,
    .import_fd = emu_import_fd,
    .unimport = emu_unimport,
    .ipc_export = emu_ipc_export,
    .ipc_import = emu_ipc_import,
    .ipc_close = emu_ipc_close,
    .current = emu_current,
    .stream_create = emu_stream_create,
    .stream_create_blocking = emu_stream_create_blocking,
    .stream_valid = emu_stream_valid,
    .stream_destroy = emu_stream_destroy,
    .copy_async = emu_copy_async,
    .copy_batch = emu_copy_batch,
    .wait_value = emu_wait_value,
    .write_value = emu_write_value,
    .mem_ops = emu_mem_ops,
    .host_alloc = emu_host_alloc,
    .host_free = emu_host_free,
    .host_register = emu_host_register,
    .host_unregister = emu_host_unregister,
    .host_fn = emu_host_fn,
    .host_flags = emu_host_flags,
    .host_write = emu_host_write,
    .query = emu_query,
    .synchronize = emu_synchronize,
    .sync_all = emu_sync_all,
    .module_load = emu_module_load,
    .function = emu_function,
    .launch = emu_launch,
};
