/*
 * moecclMemAlloc: host memory backed by a memfd, so that local peers can map
 * it.  Every allocation is recorded in the registry (comm/memreg.h) so
 * moecclMemFree can check its argument and the shared-memory transport can
 * recognise such buffers.
 * moecclMemAllocDevice: exportable device memory from the device backend
 * (CUDA VMM, or the emulation's), which local peers import; moecclMemFree
 * tells the two apart by asking the backend about the pointer.
 */
#include "comm/comm.h"

#include "comm/memreg.h"
#include "comm/span.h"
#include "device/device.h"
#include "transport/transport.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

MOECCL_EXPORT moecclResult_t moecclMemAlloc(void** ptr, size_t size) {
  if (!ptr) return moeccl_error(NULL, moecclInvalidArgument, "moecclMemAlloc: ptr is NULL");
  if (size == 0) return moeccl_error(NULL, moecclInvalidArgument, "moecclMemAlloc: size is 0");
  size_t page = (size_t)sysconf(_SC_PAGESIZE);
  if (size > SIZE_MAX - page)
    return moeccl_error(NULL, moecclInvalidArgument, "moecclMemAlloc: size %zu too large", size);
  size_t mapped = (size + page - 1) / page * page;
  int fd = memfd_create("moeccl-mem", MFD_CLOEXEC);
  void* base = MAP_FAILED;
  if (fd >= 0 && ftruncate(fd, (off_t)mapped) == 0)
    base = mmap(NULL, mapped, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (base != MAP_FAILED && moeccl_mem_register(base, mapped, fd) == 0) {
    *ptr = base;
    return moecclSuccess;
  }
  if (base != MAP_FAILED) munmap(base, mapped);
  if (fd >= 0) close(fd);
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
  size_t size;
  int fd;
  if (!moeccl_mem_unregister(ptr, &size, &fd))
    return moeccl_error(NULL, moecclInvalidArgument,
                        "moecclMemFree: ptr %p was not returned by moecclMemAlloc", ptr);
  munmap(ptr, size);
  moeccl_span_forget();
  close(fd);
  return moecclSuccess;
}
