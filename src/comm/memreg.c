/* The registry of moecclMemAlloc regions (memreg.h): a list under one lock,
 * whose head is also read without it so that a process that never calls
 * moecclMemAlloc pays nothing per lookup. */
#include "comm/memreg.h"

#include <pthread.h>
#include <stdlib.h>

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

int moeccl_mem_register(void* base, size_t size, int fd) {
  mem_region_t* r = calloc(1, sizeof(*r));
  if (!r) return -1;
  r->base = base;
  r->size = size;
  r->fd = fd;
  pthread_mutex_lock(&regions_lock);
  r->id = next_region_id++;
  r->next = regions;
  __atomic_store_n(&regions, r, __ATOMIC_RELEASE);
  pthread_mutex_unlock(&regions_lock);
  return 0;
}

int moeccl_mem_unregister(void* base, size_t* size, int* fd) {
  pthread_mutex_lock(&regions_lock);
  mem_region_t** p = &regions;
  while (*p && (*p)->base != base) p = &(*p)->next;
  mem_region_t* r = *p;
  if (r) __atomic_store_n(p, r->next, __ATOMIC_RELEASE);
  pthread_mutex_unlock(&regions_lock);
  if (!r) return 0;
  *size = r->size;
  *fd = r->fd;
  free(r);
  return 1;
}
