/*
 * The ipc transport (ipc_int.h): what happens to peers' allocations mapped
 * here -- moecclMemFree's log of freed allocations (announced to the peers
 * through the freed ring), the legacy IPC handles this process opened
 * (shared by its communicators, counted), and unmapping imports.
 */
#include "transport/ipc/ipc_int.h"

/* moecclMemFree's log of freed device allocations, for every communicator
 * of the process.  Lossy past FREED_LOG: a missed id only stays mapped in
 * the peers until the communicator goes. */
static pthread_mutex_t freed_lock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t freed_log[FREED_LOG];
static uint64_t freed_count;

void moeccl_ipc_forget(uint64_t id) {
  pthread_mutex_lock(&freed_lock);
  freed_log[freed_count++ % FREED_LOG] = id;
  pthread_mutex_unlock(&freed_lock);
}

/* A new state starts past every free so far: frees before it named nothing
 * it handed over. */
void moeccl_ipc_freed_start(ipc_state_t* s) {
  pthread_mutex_lock(&freed_lock);
  s->freed_seen = freed_count;
  pthread_mutex_unlock(&freed_lock);
}

/* The ids freed since the last look that this rank had handed over go into
 * its segment's freed ring (and out of its lists). */
void moeccl_ipc_announce_freed(ipc_state_t* s) {
  pthread_mutex_lock(&freed_lock);
  if (freed_count - s->freed_seen > FREED_LOG) s->freed_seen = freed_count - FREED_LOG;
  freed_ring_t* ring = freed_of(s->peers[s->me].seg, s->nlocal);
  for (; s->freed_seen < freed_count; s->freed_seen++) {
    uint64_t id = freed_log[s->freed_seen % FREED_LOG];
    int handed = 0;
    for (int l = 0; l < s->nlocal; l++) {
      ipeer_t* p = &s->peers[l];
      for (int i = 0; i < p->nexported; i++)
        if (p->exported[i] == id) p->exported[i--] = p->exported[--p->nexported], handed = 1;
    }
    if (!handed) continue;
    uint64_t head = atomic_load_explicit(&ring->head, memory_order_relaxed);
    ring->id[head % FREED_RING] = id;
    atomic_store_explicit(&ring->head, head + 1, memory_order_release);
  }
  pthread_mutex_unlock(&freed_lock);
}

/* Legacy IPC handles opened by this process, shared by its communicators:
 * CUDA maps a handle once per process (and refuses to open it again), so
 * two communicators with the same peer share the mapping, counted.  Keyed
 * by the owner and its allocation id (a handle's bytes may come back for a
 * later allocation once one is freed). */
typedef struct {
  pid_t pid;
  uint64_t id;
  void* base;
  int refs;
} ipc_open_t;
static pthread_mutex_t opens_lock = PTHREAD_MUTEX_INITIALIZER;
static ipc_open_t* opens;
static int nopens, opens_cap;

moecclResult_t moeccl_ipc_open(const moeccl_device_ops_t* d, pid_t pid, uint64_t id,
                               const unsigned char* handle, void** base) {
  pthread_mutex_lock(&opens_lock);
  moecclResult_t rc = moecclSuccess;
  int i = 0;
  while (i < nopens && !(opens[i].pid == pid && opens[i].id == id)) i++;
  if (i < nopens) {
    opens[i].refs++, *base = opens[i].base;
  } else {
    if (nopens == opens_cap) {
      int cap = opens_cap ? 2 * opens_cap : 16;
      ipc_open_t* a = realloc(opens, sizeof(*a) * (size_t)cap);
      if (a) opens = a, opens_cap = cap;
      else rc = moecclSystemError;
    }
    if (rc == moecclSuccess && (rc = d->ipc_import(handle, base)) == moecclSuccess) {
      opens[nopens++] = (ipc_open_t){pid, id, *base, 1};
    }
  }
  pthread_mutex_unlock(&opens_lock);
  return rc;
}

void moeccl_ipc_unref(const moeccl_device_ops_t* d, void* base) {
  pthread_mutex_lock(&opens_lock);
  for (int i = 0; i < nopens; i++)
    if (opens[i].base == base) {
      if (--opens[i].refs == 0) {
        d->ipc_close(base);
        opens[i] = opens[--nopens];
      }
      break;
    }
  pthread_mutex_unlock(&opens_lock);
}

void moeccl_ipc_unmap_import(ipc_state_t* s, const import_t* im) {
  if (im->ipc) moeccl_ipc_unref(s->d, im->base);
  else s->d->unimport(im->base, im->bytes);
}

/* Unmaps what the peers freed.  Safe at once: the owner freed after its
 * streams were done (moecclMemFree waits for the device), and each of its
 * sends waited for this rank's stream to have copied the message. */
void moeccl_ipc_drop_freed(ipc_state_t* s) {
  for (int l = 0; l < s->nlocal; l++) {
    ipeer_t* p = &s->peers[l];
    if (l == s->me || !p->seg || !p->nimports) continue;
    freed_ring_t* ring = freed_of(p->seg, s->nlocal);
    uint64_t head = atomic_load_explicit(&ring->head, memory_order_acquire);
    if (head - p->freed_tail > FREED_RING) p->freed_tail = head - FREED_RING; /* missed some */
    for (; p->freed_tail < head; p->freed_tail++) {
      uint64_t id = ring->id[p->freed_tail % FREED_RING];
      if (atomic_load_explicit(&ring->head, memory_order_acquire) - p->freed_tail > FREED_RING)
        continue; /* overwritten while read */
      for (int i = 0; i < p->nimports; i++)
        if (p->imports[i].id == id) {
          moeccl_ipc_unmap_import(s, &p->imports[i]);
          p->imports[i] = p->imports[--p->nimports];
          s->stats.unmaps++;
          break;
        }
    }
  }
}
