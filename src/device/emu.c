/*
 * The host emulation of the device seam (device.h), for the test suite on
 * machines without a GPU: "device memory" is shared memory (a memfd per
 * allocation, so it exports as a file descriptor like a CUDA VMM
 * allocation), a "stream" is a thread running its queue in order, flags
 * are waited on with futexes (cross-process: the flags live in shared
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
#include <limits.h>
#include <stdio.h>
#include <linux/futex.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "device/device.h"
#include "param.h"

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
  if (moeccl_param_bool("MOECCL_DEVICE_EMU_LEGACY")) return moecclInvalidArgument;
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

/* ---- streams ------------------------------------------------------------ */

typedef enum { EMU_COPY, EMU_WAIT, EMU_WRITE, EMU_FN } emu_kind_t;

typedef struct emu_op {
  emu_kind_t kind;
  void* dst;
  const void* src;
  size_t bytes;
  volatile uint64_t* addr;
  uint64_t value;
  void (*fn)(void*);
  void* arg;
  struct emu_op* next;
} emu_op_t;

typedef struct emu_stream {
  pthread_t thread;
  pthread_mutex_t lock;
  pthread_cond_t cond; /* work queued, or the queue drained */
  emu_op_t *head, *tail;
  int busy, stop;
  moecclResult_t err;
  unsigned seed;
  struct emu_stream* next_live;
} emu_stream_t;

/* The live streams, so that a pointer that is none (a freed one, a host
 * stream) is refused rather than used. */
static pthread_mutex_t live_lock = PTHREAD_MUTEX_INITIALIZER;
static emu_stream_t* live;

static int emu_stream_valid(const void* stream) {
  pthread_mutex_lock(&live_lock);
  const emu_stream_t* s = live;
  while (s && (const void*)s != stream) s = s->next_live;
  pthread_mutex_unlock(&live_lock);
  return s != NULL;
}

static long futex(volatile void* addr, int op, uint32_t val, const struct timespec* ts) {
  return syscall(SYS_futex, addr, op, val, ts, NULL, 0);
}

/* The low 32 bits of a 64-bit flag, which its futex waits on. */
static volatile uint32_t* low_word(volatile uint64_t* addr) {
  return (volatile uint32_t*)addr + (__BYTE_ORDER__ == __ORDER_BIG_ENDIAN__);
}

static void emu_delay(emu_stream_t* s) {
  long max = moeccl_param_int("MOECCL_DEVICE_EMU_DELAY_US");
  if (max > 0) usleep((useconds_t)(rand_r(&s->seed) % (unsigned)(max + 1)));
}

/* The stream waits, without spinning, until *addr >= value (or the stream
 * is destroyed: then its error is set). */
static void emu_wait(emu_stream_t* s, volatile uint64_t* addr, uint64_t value) {
  const struct timespec tick = {0, 10 * 1000 * 1000}; /* bounds a missed cross-process wake */
  for (;;) {
    uint64_t v = __atomic_load_n(addr, __ATOMIC_ACQUIRE);
    if (v >= value) return;
    if (__atomic_load_n(&s->stop, __ATOMIC_ACQUIRE)) {
      s->err = moecclInvalidUsage; /* destroyed while waiting on a flag never written */
      return;
    }
    futex(low_word(addr), FUTEX_WAIT, (uint32_t)v, &tick);
  }
}

static void run_op(emu_stream_t* s, emu_op_t* op) {
  emu_delay(s);
  switch (op->kind) {
    case EMU_COPY: memmove(op->dst, op->src, op->bytes); break;
    case EMU_WAIT: emu_wait(s, op->addr, op->value); break;
    case EMU_WRITE:
      __atomic_store_n(op->addr, op->value, __ATOMIC_RELEASE);
      futex(low_word(op->addr), FUTEX_WAKE, INT_MAX, NULL);
      break;
    case EMU_FN: op->fn(op->arg); break;
  }
}

static void* stream_main(void* arg) {
  emu_stream_t* s = arg;
  pthread_mutex_lock(&s->lock);
  for (;;) {
    while (!s->head && !s->stop) pthread_cond_wait(&s->cond, &s->lock);
    if (!s->head) break; /* stopped and drained */
    emu_op_t* op = s->head;
    s->head = op->next;
    if (!s->head) s->tail = NULL;
    s->busy = 1;
    pthread_mutex_unlock(&s->lock);
    if (s->err == moecclSuccess) run_op(s, op); /* after an error the rest is dropped */
    free(op);
    pthread_mutex_lock(&s->lock);
    s->busy = 0;
    pthread_cond_broadcast(&s->cond);
  }
  pthread_mutex_unlock(&s->lock);
  return NULL;
}

static moecclResult_t emu_stream_create(void** stream) {
  emu_stream_t* s = calloc(1, sizeof(*s));
  if (!s) return moecclSystemError;
  pthread_mutex_init(&s->lock, NULL);
  pthread_cond_init(&s->cond, NULL);
  s->seed = (unsigned)(uintptr_t)s ^ (unsigned)getpid();
  if (pthread_create(&s->thread, NULL, stream_main, s) != 0) {
    pthread_mutex_destroy(&s->lock), pthread_cond_destroy(&s->cond), free(s);
    return moecclSystemError;
  }
  pthread_mutex_lock(&live_lock);
  s->next_live = live, live = s;
  pthread_mutex_unlock(&live_lock);
  *stream = s;
  return moecclSuccess;
}

/* Runs what is queued, as cuStreamDestroy lets it; a wait whose flag is
 * never written gives up. */
static moecclResult_t emu_stream_destroy(void* stream) {
  emu_stream_t* s = stream;
  pthread_mutex_lock(&live_lock);
  emu_stream_t** p = &live;
  while (*p && *p != s) p = &(*p)->next_live;
  if (*p) *p = s->next_live;
  pthread_mutex_unlock(&live_lock);
  pthread_mutex_lock(&s->lock);
  __atomic_store_n(&s->stop, 1, __ATOMIC_RELEASE);
  pthread_cond_broadcast(&s->cond);
  pthread_mutex_unlock(&s->lock);
  pthread_join(s->thread, NULL);
  pthread_mutex_destroy(&s->lock);
  pthread_cond_destroy(&s->cond);
  free(s);
  return moecclSuccess;
}

static moecclResult_t enqueue(void* stream, emu_op_t o) {
  emu_stream_t* s = stream;
  emu_op_t* op = malloc(sizeof(*op));
  if (!op) return moecclSystemError;
  *op = o;
  op->next = NULL;
  pthread_mutex_lock(&s->lock);
  if (s->tail) s->tail->next = op;
  else s->head = op;
  s->tail = op;
  pthread_cond_broadcast(&s->cond);
  pthread_mutex_unlock(&s->lock);
  return moecclSuccess;
}

/* Device addresses become shadow ones when queued: the memory must stay
 * allocated until the operation ran, as on a GPU. */
static moecclResult_t emu_copy_async(void* dst, const void* src, size_t bytes, void* stream) {
  return enqueue(stream, (emu_op_t){
                             .kind = EMU_COPY, .dst = shadow_of(dst), .src = shadow_of(src), .bytes = bytes});
}

static moecclResult_t emu_wait_value(void* stream, volatile uint64_t* addr, uint64_t value) {
  return enqueue(stream, (emu_op_t){.kind = EMU_WAIT, .addr = shadow_of((void*)addr), .value = value});
}

static moecclResult_t emu_write_value(void* stream, volatile uint64_t* addr, uint64_t value) {
  return enqueue(stream, (emu_op_t){.kind = EMU_WRITE, .addr = shadow_of((void*)addr), .value = value});
}

static moecclResult_t emu_host_flags(void** ptr, size_t bytes) {
  void* p = calloc(1, bytes);
  if (!p) return moecclSystemError;
  *ptr = p;
  return moecclSuccess;
}

static void emu_host_write(volatile uint64_t* addr, uint64_t value) {
  __atomic_store_n(addr, value, __ATOMIC_RELEASE);
  futex(low_word(addr), FUTEX_WAKE, INT_MAX, NULL);
}

static moecclResult_t emu_host_fn(void* stream, void (*fn)(void*), void* arg) {
  return enqueue(stream, (emu_op_t){.kind = EMU_FN, .fn = fn, .arg = arg});
}

static moecclResult_t emu_query(void* stream) {
  emu_stream_t* s = stream;
  if (!s) return moecclSuccess; /* no default stream here */
  pthread_mutex_lock(&s->lock);
  moecclResult_t r = s->head || s->busy ? moecclInProgress : s->err;
  pthread_mutex_unlock(&s->lock);
  return r;
}

static moecclResult_t emu_synchronize(void* stream) {
  emu_stream_t* s = stream;
  if (!s) return moecclSuccess; /* no default stream here */
  pthread_mutex_lock(&s->lock);
  while (s->head || s->busy) pthread_cond_wait(&s->cond, &s->lock);
  moecclResult_t r = s->err;
  pthread_mutex_unlock(&s->lock);
  return r;
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
    .stream_valid = emu_stream_valid,
    .stream_destroy = emu_stream_destroy,
    .copy_async = emu_copy_async,
    .wait_value = emu_wait_value,
    .write_value = emu_write_value,
    .host_fn = emu_host_fn,
    .host_flags = emu_host_flags,
    .host_write = emu_host_write,
    .query = emu_query,
    .synchronize = emu_synchronize,
};
