/* The in-order queue served by one thread (queue.h). */
#include "base/queue.h"

#include <errno.h>
#include <stdlib.h>

#include "base/futex.h"

/* The queue's thread: runs the items in order until stopped and drained. */
static void* serve(void* arg) {
  moeccl_queue_t* q = arg;
  pthread_mutex_lock(&q->lock);
  for (;;) {
    while (!q->head && !q->stop) pthread_cond_wait(&q->cond, &q->lock);
    if (!q->head) break; /* stopped and drained */
    moeccl_queue_item_t* item = q->head;
    q->head = item->next;
    if (!q->head) q->tail = NULL;
    q->busy = 1;
    moecclResult_t error = q->error;
    pthread_mutex_unlock(&q->lock);
    moecclResult_t rc = item->run(q, item, error);
    pthread_mutex_lock(&q->lock);
    if (rc != moecclSuccess && q->error == moecclSuccess) q->error = rc;
    q->busy = 0;
    moeccl_flag_store(&q->completed, q->completed + 1);
    pthread_cond_broadcast(&q->cond);
  }
  pthread_mutex_unlock(&q->lock);
  return NULL;
}

int moeccl_queue_new(size_t size, moeccl_queue_t** out) {
  moeccl_queue_t* q = calloc(1, size < sizeof(*q) ? sizeof(*q) : size);
  if (!q) return ENOMEM;
  pthread_mutex_init(&q->lock, NULL);
  pthread_cond_init(&q->cond, NULL);
  int rc = pthread_create(&q->thread, NULL, serve, q);
  if (rc != 0) {
    pthread_mutex_destroy(&q->lock), pthread_cond_destroy(&q->cond), free(q);
    return rc;
  }
  *out = q;
  return 0;
}

void moeccl_queue_register(moeccl_queue_registry_t* reg, moeccl_queue_t* q) {
  pthread_mutex_lock(&reg->lock);
  q->next_live = reg->live, reg->live = q;
  pthread_mutex_unlock(&reg->lock);
}

int moeccl_queue_live(moeccl_queue_registry_t* reg, const void* p) {
  pthread_mutex_lock(&reg->lock);
  const moeccl_queue_t* q = reg->live;
  while (q && (const void*)q != p) q = q->next_live;
  pthread_mutex_unlock(&reg->lock);
  return q != NULL;
}

moecclResult_t moeccl_queue_each(moeccl_queue_registry_t* reg,
                                 moecclResult_t (*fn)(moeccl_queue_t* q, void* arg), void* arg) {
  moecclResult_t rc = moecclSuccess;
  pthread_mutex_lock(&reg->lock);
  for (moeccl_queue_t* q = reg->live; q && rc == moecclSuccess; q = q->next_live) rc = fn(q, arg);
  pthread_mutex_unlock(&reg->lock);
  return rc;
}

void moeccl_queue_push(moeccl_queue_t* q, moeccl_queue_item_t* item) {
  item->next = NULL;
  pthread_mutex_lock(&q->lock);
  if (q->tail) q->tail->next = item;
  else q->head = item;
  q->tail = item;
  q->issued++;
  pthread_cond_broadcast(&q->cond);
  pthread_mutex_unlock(&q->lock);
}

uint64_t moeccl_queue_issued(moeccl_queue_t* q) {
  pthread_mutex_lock(&q->lock);
  uint64_t n = q->issued;
  pthread_mutex_unlock(&q->lock);
  return n;
}

volatile uint64_t* moeccl_queue_completed(moeccl_queue_t* q) { return &q->completed; }

int moeccl_queue_stopping(moeccl_queue_t* q) { return __atomic_load_n(&q->stop, __ATOMIC_ACQUIRE); }

moecclResult_t moeccl_queue_query(moeccl_queue_t* q) {
  pthread_mutex_lock(&q->lock);
  moecclResult_t rc = q->head || q->busy ? moecclInProgress : q->error;
  pthread_mutex_unlock(&q->lock);
  return rc;
}

moecclResult_t moeccl_queue_error(moeccl_queue_t* q) {
  pthread_mutex_lock(&q->lock);
  moecclResult_t rc = q->error;
  pthread_mutex_unlock(&q->lock);
  return rc;
}

moecclResult_t moeccl_queue_sync(moeccl_queue_t* q, int clear) {
  pthread_mutex_lock(&q->lock);
  while (q->head || q->busy) pthread_cond_wait(&q->cond, &q->lock);
  moecclResult_t rc = q->error;
  if (clear) q->error = moecclSuccess;
  pthread_mutex_unlock(&q->lock);
  return rc;
}

void moeccl_queue_stop(moeccl_queue_registry_t* reg, moeccl_queue_t* q) {
  if (reg) {
    pthread_mutex_lock(&reg->lock);
    moeccl_queue_t** p = &reg->live;
    while (*p && *p != q) p = &(*p)->next_live;
    if (*p) *p = q->next_live;
    pthread_mutex_unlock(&reg->lock);
  }
  pthread_mutex_lock(&q->lock);
  __atomic_store_n(&q->stop, 1, __ATOMIC_RELEASE);
  pthread_cond_broadcast(&q->cond);
  pthread_mutex_unlock(&q->lock);
  pthread_join(q->thread, NULL);
}

void moeccl_queue_free(moeccl_queue_t* q) {
  pthread_mutex_destroy(&q->lock);
  pthread_cond_destroy(&q->cond);
  free(q);
}
