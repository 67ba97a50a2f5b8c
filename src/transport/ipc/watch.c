/*
 * The ipc transport (ipc_int.h): how far the streams got -- releasing this
 * rank's waits on an abort, draining its queued work before teardown, and
 * the watchdog thread that releases the waits of a communicator whose
 * peer died with work queued.
 */
#include "transport/ipc/ipc_int.h"

/* A lost peer never writes its counters again: this rank's stream is let
 * go past every wait (its results are then undefined, as with NCCL after
 * an abort). */
void moeccl_ipc_release_waits(ipc_state_t* s) {
  char* mine = s->peers[s->me].seg;
  for (int l = 0; l < s->nlocal; l++) {
    flag_set(ready_of(mine, l), UINT64_MAX);
    flag_set(done_of(mine, s->nlocal, l), UINT64_MAX);
  }
  atomic_thread_fence(memory_order_seq_cst);
}

/* Whether this rank's queued work with peer l has passed (visible in the
 * segments: its sends read, its receives marked read). */
static int passed_with(ipc_state_t* s, int l) {
  ipeer_t* p = &s->peers[l];
  /* the watchdog asks too: the counts are read and written atomically */
  return flag_get(done_of(s->peers[s->me].seg, s->nlocal, l)) >=
             __atomic_load_n(&p->sent, __ATOMIC_RELAXED) &&
         flag_get(done_of(p->seg, s->nlocal, s->me)) >=
             __atomic_load_n(&p->recvd, __ATOMIC_RELAXED);
}

/* Waits up to the communicator's timeout for this rank's streams to have
 * passed everything they were given (all visible in the segments), so that
 * nothing queued still uses what is unmapped here.  A peer that died never
 * writes its counters: this rank's waits on it are released instead. */
void moeccl_ipc_drain(ipc_state_t* s) {
  double deadline = moeccl_now() + s->comm->timeout, check = 0;
  char* own = s->peers[s->me].seg;
  for (;;) {
    int left = 0;
    for (int k = 0; k < s->nstreams; k++)
      left |= flag_get(passed_of(own, s->nlocal, k)) < s->streams[k].lowered;
    for (int l = 0; l < s->nlocal; l++)
      if (l != s->me && s->peers[l].seg && !passed_with(s, l)) {
        left = 1;
        if (moeccl_now() > check && !moeccl_process_alive(s->peers[l].pid, s->peers[l].pid_start)) {
          WARN(SHM, "ipc: rank %d: rank %d died with work queued: its waits are released",
               s->comm->rank, s->peers[l].comm_rank);
          moeccl_ipc_release_waits(s);
        }
      }
    if (!left || s->comm->aborting) return;
    if (moeccl_now() > deadline) break;
    if (moeccl_now() > check) check = moeccl_now() + 0.1;
    usleep(100);
  }
  WARN(SHM,
       "ipc: rank %d: work queued on its streams had not passed when the communicator was "
       "destroyed (%.0f s)",
       s->comm->rank, s->comm->timeout);
}

/* A stream waits for flags its peers' streams write: if a peer dies with
 * work queued, nothing the host does would ever end that wait (a user's
 * synchronize would hang).  One thread per process looks, every 100 ms, at
 * the communicators whose queued work has not passed, and releases the
 * waits of one whose peer died; the next call fails naming it.  It makes
 * no driver call and is on no call's path. */
static pthread_mutex_t watch_lock = PTHREAD_MUTEX_INITIALIZER;
static ipc_state_t* watched;
static int watch_started;

static void watch_one(ipc_state_t* s) {
  if (atomic_load(&s->lost)) return;
  for (int l = 0; l < s->nlocal; l++) {
    ipeer_t* p = &s->peers[l];
    if (l == s->me || !p->seg || passed_with(s, l) || moeccl_process_alive(p->pid, p->pid_start))
      continue;
    WARN(SHM,
         "ipc: rank %d: rank %d (pid %d) died with work queued on this rank's streams: "
         "their waits on it are released",
         s->comm->rank, p->comm_rank, (int)p->pid);
    moeccl_ipc_release_waits(s);
    atomic_store(&s->lost, 1 + p->comm_rank);
    return;
  }
}

static void* watchdog(void* arg) {
  (void)arg;
  for (;;) {
    usleep(100 * 1000);
    pthread_mutex_lock(&watch_lock);
    for (ipc_state_t* s = watched; s; s = s->next_watched) watch_one(s);
    pthread_mutex_unlock(&watch_lock);
  }
  return NULL;
}

void moeccl_ipc_watch(ipc_state_t* s) {
  pthread_mutex_lock(&watch_lock);
  s->next_watched = watched, watched = s;
  if (!watch_started) {
    pthread_t t;
    pthread_attr_t a;
    pthread_attr_init(&a);
    pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
    watch_started = pthread_create(&t, &a, watchdog, NULL) == 0;
    pthread_attr_destroy(&a);
  }
  pthread_mutex_unlock(&watch_lock);
}

void moeccl_ipc_unwatch(ipc_state_t* s) {
  pthread_mutex_lock(&watch_lock);
  ipc_state_t** p = &watched;
  while (*p && *p != s) p = &(*p)->next_watched;
  if (*p) *p = s->next_watched;
  pthread_mutex_unlock(&watch_lock);
}
