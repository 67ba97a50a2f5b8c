/*
 * Host streams: an in-order queue of captured operations served by one
 * library thread, so host-memory operations can overlap the caller's compute
 * (the MoE layer overlaps expert compute with dispatch and combine).
 */
#include "exec/stream.h"

#include "device/device.h"

#include <stdlib.h>

typedef struct moeccl_stream_work {
  moeccl_task_list_t list;
  void (*done)(void* arg, moecclResult_t rc); /* after the list ran (device streams) */
  void* done_arg;
  struct moeccl_stream_work* next;
} work_t;

typedef struct host_stream {
  pthread_t thread;
  pthread_mutex_t lock;
  pthread_cond_t cond;
  work_t *head, *tail;
  int busy, stop;
  moecclResult_t error; /* first error since the last synchronize */
  struct host_stream* next_live;
} host_stream_t;

static pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER;
static host_stream_t* live_streams;

int moeccl_host_stream_valid(moecclStream_t stream) {
  pthread_mutex_lock(&registry_lock);
  host_stream_t* s = live_streams;
  while (s && (void*)s != stream) s = s->next_live;
  pthread_mutex_unlock(&registry_lock);
  return s != NULL;
}

const moeccl_stream_ops_t* moeccl_stream_kind(moecclStream_t stream) {
  if (!stream) return NULL;
  if (moeccl_host_stream_valid(stream)) return &moeccl_host_stream_ops;
  const moeccl_device_ops_t* d = moeccl_device();
  return d && d->stream_valid(stream) ? &moeccl_device_stream_ops : NULL;
}

moecclResult_t moeccl_stream_check(moeccl_comm_t* comm, moecclStream_t stream) {
  if (!stream || moeccl_stream_kind(stream)) return moecclSuccess;
  return moeccl_error(comm, moecclInvalidArgument,
                      "stream %p is not NULL nor a live moeccl host stream (and this process has "
                      "no device backend, so it cannot be a device stream)",
                      stream);
}

static void* stream_main(void* arg) {
  host_stream_t* s = arg;
  pthread_mutex_lock(&s->lock);
  for (;;) {
    while (!s->head && !s->stop) pthread_cond_wait(&s->cond, &s->lock);
    if (!s->head) break;
    work_t* w = s->head;
    s->head = w->next;
    if (!s->head) s->tail = NULL;
    s->busy = 1;
    pthread_mutex_unlock(&s->lock);
    moecclResult_t rc = moeccl_tasks_run(&w->list);
    if (w->done) w->done(w->done_arg, rc);
    free(w);
    pthread_mutex_lock(&s->lock);
    if (rc != moecclSuccess && s->error == moecclSuccess) s->error = rc;
    s->busy = 0;
    pthread_cond_broadcast(&s->cond);
  }
  pthread_mutex_unlock(&s->lock);
  return NULL;
}

moeccl_stream_work_t* moeccl_stream_work_new(moeccl_task_list_t* list,
                                             void (*done)(void*, moecclResult_t), void* arg) {
  work_t* w = malloc(sizeof(*w));
  if (!w) {
    moeccl_tasks_abandon(list);
    moeccl_error(NULL, moecclSystemError, "out of memory");
    return NULL;
  }
  w->list = *list;
  w->done = done, w->done_arg = arg;
  w->next = NULL;
  list->head = list->tail = NULL;
  return w;
}

void* moeccl_stream_work_arg(const moeccl_stream_work_t* w) { return w->done_arg; }

void moeccl_host_stream_push(moecclStream_t stream, moeccl_stream_work_t* w) {
  host_stream_t* s = stream;
  pthread_mutex_lock(&s->lock);
  if (s->tail) s->tail->next = w;
  else s->head = w;
  s->tail = w;
  pthread_cond_broadcast(&s->cond);
  pthread_mutex_unlock(&s->lock);
}

static moecclResult_t host_stream_enqueue(moecclStream_t stream, moeccl_task_list_t* list) {
  moeccl_stream_work_t* w = moeccl_stream_work_new(list, NULL, NULL);
  if (!w) return moecclSystemError;
  moeccl_host_stream_push(stream, w);
  return moecclSuccess;
}

MOECCL_EXPORT moecclResult_t moecclHostStreamCreate(moecclStream_t* stream) {
  if (!stream)
    return moeccl_error(NULL, moecclInvalidArgument, "moecclHostStreamCreate: stream is NULL");
  host_stream_t* s = calloc(1, sizeof(*s));
  if (!s) return moeccl_error(NULL, moecclSystemError, "out of memory");
  pthread_mutex_init(&s->lock, NULL);
  pthread_cond_init(&s->cond, NULL);
  if (pthread_create(&s->thread, NULL, stream_main, s) != 0) {
    free(s);
    return moeccl_error(NULL, moecclSystemError, "moecclHostStreamCreate: cannot start a thread");
  }
  pthread_mutex_lock(&registry_lock);
  s->next_live = live_streams;
  live_streams = s;
  pthread_mutex_unlock(&registry_lock);
  *stream = s;
  return moecclSuccess;
}

static moecclResult_t check_stream(moecclStream_t stream, const char* fn) {
  if (!moeccl_host_stream_valid(stream))
    return moeccl_error(NULL, moecclInvalidArgument, "%s: stream %p is not a live host stream", fn,
                        stream);
  return moecclSuccess;
}

static moecclResult_t host_stream_synchronize(moecclStream_t stream) {
  host_stream_t* s = stream;
  pthread_mutex_lock(&s->lock);
  while (s->head || s->busy) pthread_cond_wait(&s->cond, &s->lock);
  moecclResult_t rc = s->error;
  s->error = moecclSuccess;
  pthread_mutex_unlock(&s->lock);
  return rc;
}

static moecclResult_t host_stream_query(moecclStream_t stream) {
  host_stream_t* s = stream;
  pthread_mutex_lock(&s->lock);
  moecclResult_t rc = s->error != moecclSuccess ? s->error
                      : (s->head || s->busy)    ? moecclInProgress
                                                : moecclSuccess;
  pthread_mutex_unlock(&s->lock);
  return rc;
}

const moeccl_stream_ops_t moeccl_host_stream_ops = {
    .name = "host",
    .enqueue = host_stream_enqueue,
    .query = host_stream_query,
    .synchronize = host_stream_synchronize,
};

MOECCL_EXPORT moecclResult_t moecclHostStreamSynchronize(moecclStream_t stream) {
  MOECCL_CHECK(check_stream(stream, "moecclHostStreamSynchronize"));
  return moeccl_host_stream_ops.synchronize(stream);
}

MOECCL_EXPORT moecclResult_t moecclHostStreamQuery(moecclStream_t stream) {
  MOECCL_CHECK(check_stream(stream, "moecclHostStreamQuery"));
  return moeccl_host_stream_ops.query(stream);
}

MOECCL_EXPORT moecclResult_t moecclHostStreamDestroy(moecclStream_t stream) {
  MOECCL_CHECK(check_stream(stream, "moecclHostStreamDestroy"));
  moecclResult_t rc = host_stream_synchronize(stream);
  host_stream_t* s = stream;
  pthread_mutex_lock(&registry_lock);
  host_stream_t** p = &live_streams;
  while (*p && *p != s) p = &(*p)->next_live;
  if (*p) *p = s->next_live;
  pthread_mutex_unlock(&registry_lock);
  pthread_mutex_lock(&s->lock);
  s->stop = 1;
  pthread_cond_broadcast(&s->cond);
  pthread_mutex_unlock(&s->lock);
  pthread_join(s->thread, NULL);
  pthread_mutex_destroy(&s->lock);
  pthread_cond_destroy(&s->cond);
  free(s);
  return rc;
}
