/*
 * The registry of moecclMemAlloc regions: host memory backed by a memfd, so
 * a local peer can map it (through /proc/<pid>/fd/<fd>) and copy from it
 * without a system call.  api/memalloc.c makes and frees the regions and
 * records them here; the transports (lookup) and the span checks (extent)
 * only ask.
 */
#ifndef MOECCL_MEMREG_H_
#define MOECCL_MEMREG_H_

#include <stddef.h>
#include <stdint.h>

/* Where a buffer lies, for a local peer to map it. */
typedef struct {
  uint64_t id;     /* region id, unique within the owning process */
  int fd;          /* memfd in the owning process */
  uint64_t offset; /* of the buffer within the region */
  uint64_t size;   /* of the region */
} moeccl_mem_handle_t;

/* 1 and *out filled when [ptr, ptr+bytes) lies in one moecclMemAlloc region. */
int moeccl_mem_lookup(const void* ptr, size_t bytes, moeccl_mem_handle_t* out);
/* 1 with the base and size of the moecclMemAlloc region ptr lies in. */
int moeccl_mem_extent(const void* ptr, void** base, size_t* size);

/* Records the region [base, base+size) mapped from fd, with a new id;
 * 0, or -1 when out of memory (nothing recorded). */
int moeccl_mem_register(void* base, size_t size, int fd);
/* Takes out the region that starts at base: 1 with its size and fd (the
 * caller unmaps and closes), 0 when no region starts there. */
int moeccl_mem_unregister(void* base, size_t* size, int* fd);

#endif
