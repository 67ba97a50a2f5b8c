/*
 * An in-order queue of work items served by one thread: the emulated
 * device streams (device/emu.c) and the host streams (exec/hoststream.c)
 * are each one.  Items run one at a time in the order pushed; the queue
 * counts the items pushed and run (the run count is a flag, base/futex.h,
 * that other queues' items can wait on), keeps the first error an item
 * returned, and can be queried and waited for.  A registry of live queues
 * tells a queue from any other pointer (a destroyed stream, a stream of
 * another kind).
 *
 * A queue is the first member of its owner's struct (the owner's fields
 * follow it in the same allocation, moeccl_queue_new's size), so the
 * owner's handle and the queue are the same pointer.
 */
#ifndef MOECCL_QUEUE_H_
#define MOECCL_QUEUE_H_

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "moeccl.h"

typedef struct moeccl_queue moeccl_queue_t;
typedef struct moeccl_queue_item moeccl_queue_item_t;

/* A work item: the first member of the owner's item struct, which the
 * owner allocates and run frees. */
struct moeccl_queue_item {
  /* Runs on the queue's thread, then frees the item.  error: the queue's
   * error when the item comes up (moecclSuccess when no earlier item
   * failed since the last clear), so that an owner may skip the work after
   * a failure.  What it returns, when an error, becomes the queue's if it
   * has none. */
  moecclResult_t (*run)(moeccl_queue_t* q, moeccl_queue_item_t* item, moecclResult_t error);
  moeccl_queue_item_t* next;
};

struct moeccl_queue {
  pthread_t thread;
  pthread_mutex_t lock;
  pthread_cond_t cond; /* an item pushed or done, or stop */
  moeccl_queue_item_t *head, *tail;
  int busy, stop;
  uint64_t issued;             /* items pushed (under lock) */
  volatile uint64_t completed; /* items run: a flag (base/futex.h) */
  moecclResult_t error;        /* first failure since the last clear */
  moeccl_queue_t* next_live;   /* in its registry */
};

typedef struct {
  pthread_mutex_t lock;
  moeccl_queue_t* live;
} moeccl_queue_registry_t;
#define MOECCL_QUEUE_REGISTRY_INIT {PTHREAD_MUTEX_INITIALIZER, NULL}

/* A zeroed allocation of size bytes (at least a queue) whose queue's
 * thread is started.  Returns 0, or ENOMEM, or why the thread could not
 * start (an errno value). */
int moeccl_queue_new(size_t size, moeccl_queue_t** out);
/* Adds q to reg's live queues (once the owner's fields are set: others
 * walking the registry may read them from now on). */
void moeccl_queue_register(moeccl_queue_registry_t* reg, moeccl_queue_t* q);
/* Whether p is one of reg's live queues. */
int moeccl_queue_live(moeccl_queue_registry_t* reg, const void* p);
/* Calls fn(q, arg) for each live queue of reg, holding reg's lock (fn must
 * not register or stop a queue of reg); stops at the first result other
 * than moecclSuccess and returns it. */
moecclResult_t moeccl_queue_each(moeccl_queue_registry_t* reg,
                                 moecclResult_t (*fn)(moeccl_queue_t* q, void* arg), void* arg);

/* Queues item after everything pushed before.  Never fails (no
 * allocation), so it may be called where failure could not be reported. */
void moeccl_queue_push(moeccl_queue_t* q, moeccl_queue_item_t* item);
/* How many items were pushed so far. */
uint64_t moeccl_queue_issued(moeccl_queue_t* q);
/* How many have run: a flag to wait on (moeccl_flag_sleep). */
volatile uint64_t* moeccl_queue_completed(moeccl_queue_t* q);
/* Whether moeccl_queue_stop was called: an item that waits on something
 * that may never come gives up then. */
int moeccl_queue_stopping(moeccl_queue_t* q);

/* moecclInProgress while an item is queued or running, else the queue's
 * error (moecclSuccess when none). */
moecclResult_t moeccl_queue_query(moeccl_queue_t* q);
/* The queue's error: its first failure since the last clear. */
moecclResult_t moeccl_queue_error(moeccl_queue_t* q);
/* Waits until every item pushed so far ran; returns the queue's error,
 * and clears it when clear is set. */
moecclResult_t moeccl_queue_sync(moeccl_queue_t* q, int clear);

/* Takes q out of reg (NULL: it was never registered) and stops its
 * thread once it ran what is queued.  The memory stays, and so do the
 * lock and count (an item of another queue may still wait on the count,
 * a late query finds nothing to do) until moeccl_queue_free. */
void moeccl_queue_stop(moeccl_queue_registry_t* reg, moeccl_queue_t* q);
void moeccl_queue_free(moeccl_queue_t* q);

#endif
