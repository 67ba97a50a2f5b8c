/*
 * moecclMemAlloc: host memory backed by a memfd, so that local peers can map
 * it.  Every allocation is recorded so moecclMemFree can check its argument
 * and the shared-memory transport can recognise such buffers.
 * moecclMemAllocDevice: exportable device memory from the device backend
 * (CUDA VMM, or the emulation's), which local peers import; moecclMemFree
 * tells the two apart by asking the backend about the pointer.
 */
#include "comm/comm.h"

#include "device/device.h"
#include "comm/span.h"
#include "transport/transport.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

typedef struct mem_region {
  void* base;
  size_t size;
  int fd;
  uint64_t id; /* unique in this process: a peer's mapping cache key */
  struct mem_region* next;
} mem_region_t;

static pthread_mutex_t regions_lock = PTHREAD_MUTEX_INITIALIZER;
static mem_region_t* regions;
static uint64_t next_region_id = 1;

int moeccl_mem_lookup(const void* ptr, size_t bytes, moeccl_mem_handle_t* out) {
  uintptr_t p = (uintptr_t)ptr;
  int found = 0;
  /* No region at all (a program that never calls moecclMemAlloc): no lock.
   * The shm transport asks for every small send where single copies of
   * mapped memory are on.  Writers store the head atomically. */
  if (!__atomic_load_n(&regions, __ATOMIC_ACQUIRE)) return 0;
  pthread_mutex_lock(&regions_lock);
  for (mem_region_t* r = regions; r && !found; r = r->next) {
    uintptr_t b = (uintptr_t)r->base;
    if (p < b || p - b > r->size || bytes > r->size - (p - b)) continue;
    *out = (moeccl_mem_handle_t){.id = r->id, .fd = r->fd, .offset = p - b, .size = r->size};
    found = 1;
  }
  pthread_mutex_unlock(&regions_lock);
  return found;
}

int moeccl_mem_extent(const void* ptr, void** base, size_t* size) {
  uintptr_t p = (uintptr_t)ptr;
  int found = 0;
  if (!__atomic_load_n(&regions, __ATOMIC_ACQUIRE)) return 0;
  pthread_mutex_lock(&regions_lock);
  for (mem_region_t* r = regions; r && !found; r = r->next)
    if (p >= (uintptr_t)r->base && p - (uintptr_t)r->base < r->size)
      *base = r->base, *size = r->size, found = 1;
  pthread_mutex_unlock(&regions_lock);
  return found;
}

MOECCL_EXPORT moecclResult_t moecclMemAlloc(void** ptr, size_t size) {
  if (!ptr) return moeccl_error(NULL, moecclInvalidArgument, "moecclMemAlloc: ptr is NULL");
  if (size == 0) return moeccl_error(NULL, moecclInvalidArgument, "moecclMemAlloc: size is 0");
  size_t page = (size_t)sysconf(_SC_PAGESIZE);
  if (size > SIZE_MAX - page)
    return moeccl_error(NULL, moecclInvalidArgument, "moecclMemAlloc: size %zu too large", size);
  size_t mapped = (size + page - 1) / page * page;
  mem_region_t* r = calloc(1, sizeof(*r));
  if (!r) return moeccl_error(NULL, moecclSystemError, "moecclMemAlloc: out of memory");
  r->fd = memfd_create("moeccl-mem", MFD_CLOEXEC);
  if (r->fd < 0 || ftruncate(r->fd, (off_t)mapped) != 0) goto fail;
  r->base = mmap(NULL, mapped, PROT_READ | PROT_WRITE, MAP_SHARED, r->fd, 0);
  if (r->base == MAP_FAILED) goto fail;
  r->size = mapped;
  pthread_mutex_lock(&regions_lock);
  r->id = next_region_id++;
  r->next = regions;
  __atomic_store_n(&regions, r, __ATOMIC_RELEASE);
  pthread_mutex_unlock(&regions_lock);
  *ptr = r->base;
  return moecclSuccess;
fail:
  if (r->fd >= 0) close(r->fd);
  free(r);
  return moeccl_error(NULL, moecclSystemError,
                      "moecclMemAlloc: cannot allocate %zu bytes of shareable memory", size);
}

MOECCL_EXPORT moecclResult_t moecclMemAllocDevice(void** ptr, size_t size, int device) {
  if (!ptr) return moeccl_error(NULL, moecclInvalidArgument, "moecclMemAllocDevice: ptr is NULL");
  if (size == 0)
    return moeccl_error(NULL, moecclInvalidArgument, "moecclMemAllocDevice: size is 0");
  const moeccl_device_ops_t* d = moeccl_device();
  if (!d)
    return moeccl_error(NULL, moecclInvalidUsage,
                        "moecclMemAllocDevice: no device backend in this process (MOECCL_DEVICE; "
                        "no CUDA driver or device found)");
  if (device < 0) device = d->current(); /* as ncclMemAlloc: the current device */
  if (device >= d->count())
    return moeccl_error(NULL, moecclInvalidArgument,
                        "moecclMemAllocDevice: device %d out of range [0,%d)", device, d->count());
  moecclResult_t rc = d->alloc(ptr, size, device);
  if (rc != moecclSuccess)
    return moeccl_error(NULL, rc, "moecclMemAllocDevice: %zu bytes on device %d failed (%s)",
                        size, device, moecclGetErrorString(rc));
  return moecclSuccess;
}

MOECCL_EXPORT moecclResult_t moecclMemFree(void* ptr) {
  if (!ptr) return moecclSuccess; /* like free(NULL) */
  const moeccl_device_ops_t* d = moeccl_device();
  int device;
  if (d && d->pointer(ptr, &device)) {
    /* As cudaFree: after the device's queued work, which may still read or
     * write it (a call on any stream returns once queued). */
    moecclResult_t rc = d->sync_all();
    if (rc != moecclSuccess)
      return moeccl_error(NULL, rc, "moecclMemFree: the device's queued work failed (%s)",
                          moecclGetErrorString(rc));
    void* base;
    size_t bytes;
    uint64_t id;
    int found = d->range(ptr, &base, &bytes, &id) == moecclSuccess && base == ptr;
    rc = d->free(ptr);
    moeccl_span_forget(); /* a span checked against it may no longer fit */
    if (rc == moecclSuccess && found) moeccl_ipc_forget(id); /* the peers may unmap it */
    if (rc == moecclInvalidArgument)
      return moeccl_error(NULL, rc,
                          "moecclMemFree: device pointer %p was not returned by "
                          "moecclMemAllocDevice",
                          ptr);
    if (rc != moecclSuccess)
      return moeccl_error(NULL, rc, "moecclMemFree: freeing device memory %p failed (%s)", ptr,
                          moecclGetErrorString(rc));
    return moecclSuccess;
  }
  pthread_mutex_lock(&regions_lock);
  mem_region_t** p = &regions;
  while (*p && (*p)->base != ptr) p = &(*p)->next;
  mem_region_t* r = *p;
  if (r) __atomic_store_n(p, r->next, __ATOMIC_RELEASE);
  pthread_mutex_unlock(&regions_lock);
  if (!r)
    return moeccl_error(NULL, moecclInvalidArgument,
                        "moecclMemFree: ptr %p was not returned by moecclMemAlloc", ptr);
  munmap(r->base, r->size);
  moeccl_span_forget();
  close(r->fd);
  free(r);
  return moecclSuccess;
}
