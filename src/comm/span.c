/* Where a buffer the caller passes can end (span.h). */
#include "comm/span.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <unistd.h>

#include "comm/comm.h"
#include "comm/memreg.h"
#include "device/device.h"

#define SPAN_CACHE 4 /* send, receive and a little more */

static _Atomic uint64_t span_gen = 1;
static __thread struct {
  uintptr_t lo, hi;
  uint64_t gen;
} span_good[SPAN_CACHE];
static __thread unsigned span_next;

/* The end of the user address space: the power of two above the stack
 * (which sits at its top: 2^47 with 4-level page tables). */
static uintptr_t user_top(void) {
  static _Atomic uintptr_t top;
  uintptr_t t = atomic_load_explicit(&top, memory_order_relaxed);
  if (t) return t;
  volatile char here = 0;
  uintptr_t a = (uintptr_t)&here;
  for (t = 1; t && t <= a;) t <<= 1;
  if (!t) t = UINTPTR_MAX;
  atomic_store_explicit(&top, t, memory_order_relaxed);
  return t;
}

/* The moecclMemAlloc or device allocation that holds ptr, if any. */
static int allocation_of(const void* ptr, uintptr_t* base, size_t* size) {
  void* b;
  if (moeccl_mem_extent(ptr, &b, size)) {
    *base = (uintptr_t)b;
    return 1;
  }
  const moeccl_device_ops_t* d = moeccl_device();
  int device;
  uint64_t id;
  if (!d || !d->pointer(ptr, &device)) return 0;
  if (d->range(ptr, &b, size, &id) != moecclSuccess) return 0;
  *base = (uintptr_t)b;
  return 1;
}

static moeccl_span_t span_slow(uintptr_t p, size_t bytes, size_t* room) {
  uintptr_t base;
  size_t size;
  if (allocation_of((const void*)p, &base, &size)) {
    size_t have = size - (size_t)(p - base);
    if (bytes <= have) return MOECCL_SPAN_OK;
    if (room) *room = have;
    return MOECCL_SPAN_PAST_ALLOC;
  }
  /* A device pointer without a known extent was answered above as none;
   * here the memory is the host's: mapped from the pointer to the end? */
  uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE), a = p & ~(page - 1);
  if (msync((void*)a, p + bytes - a, MS_ASYNC) != 0 && errno == ENOMEM) return MOECCL_SPAN_UNMAPPED;
  /* Mapped is not enough: reserved address space (PROT_NONE: guard pages,
   * a sanitizer's shadow and allocator regions) is mapped too.  The last
   * byte must be readable; a probe the kernel does not allow says nothing. */
  char probe;
  struct iovec mine = {&probe, 1}, theirs = {(void*)(p + bytes - 1), 1};
  if (process_vm_readv(getpid(), &mine, 1, &theirs, 1, 0) < 0 && errno == EFAULT)
    return MOECCL_SPAN_UNMAPPED;
  return MOECCL_SPAN_OK;
}

moeccl_span_t moeccl_span_check(const void* ptr, size_t bytes, size_t* room) {
  uintptr_t p = (uintptr_t)ptr;
  if (bytes == 0) return MOECCL_SPAN_OK;
  if (bytes > UINTPTR_MAX - p) return MOECCL_SPAN_WRAPS;
  uintptr_t end = p + bytes;
  if (end > user_top()) return MOECCL_SPAN_PAST_TOP;
  uint64_t gen = atomic_load_explicit(&span_gen, memory_order_acquire);
  for (int i = 0; i < SPAN_CACHE; i++)
    if (span_good[i].gen == gen && p >= span_good[i].lo && end <= span_good[i].hi)
      return MOECCL_SPAN_OK;
  moeccl_span_t why = span_slow(p, bytes, room);
  if (why == MOECCL_SPAN_OK) {
    unsigned i = span_next++ % SPAN_CACHE;
    span_good[i].lo = p, span_good[i].hi = end, span_good[i].gen = gen;
  }
  return why;
}

const char* moeccl_span_text(moeccl_span_t why) {
  switch (why) {
    case MOECCL_SPAN_OK: return "fit";
    case MOECCL_SPAN_WRAPS: return "wrap around the end of the address space";
    case MOECCL_SPAN_PAST_TOP: return "reach past the end of the address space";
    case MOECCL_SPAN_PAST_ALLOC:
      return "reach past the end of its allocation (moecclMemAlloc or moecclMemAllocDevice)";
    default:
      return "reach memory this process has not mapped or cannot read (no buffer can be that "
             "long)";
  }
}

void moeccl_span_forget(void) { atomic_fetch_add_explicit(&span_gen, 1, memory_order_release); }
