/* Last-error texts, the set of live communicators, failing a communicator
 * (result strings are base/result.c's). */
#include "comm/comm.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

static __thread char thread_last_error[512];

/* The live communicators: a lock-free open-addressed set of pointers, so an
 * entry point can tell a destroyed (freed) handle from a live one without
 * reading its memory.  Past LIVE_SLOTS live at once the set overflows and
 * the check falls back to the handle's magic number. */
#define LIVE_SLOTS 4096
#define TOMBSTONE ((moeccl_comm_t*)1)
static moeccl_comm_t* _Atomic live[LIVE_SLOTS];
static _Atomic int live_overflow;

static size_t slot_of(const moeccl_comm_t* c) {
  uint64_t h = (uint64_t)(uintptr_t)c * 0x9e3779b97f4a7c15ULL;
  return (size_t)(h >> 52) & (LIVE_SLOTS - 1);
}

void moeccl_comm_register(moeccl_comm_t* c) {
  for (size_t i = 0, s = slot_of(c); i < LIVE_SLOTS; i++, s = (s + 1) & (LIVE_SLOTS - 1)) {
    moeccl_comm_t* cur = atomic_load(&live[s]);
    if ((cur == NULL || cur == TOMBSTONE) && atomic_compare_exchange_strong(&live[s], &cur, c))
      return;
  }
  atomic_store(&live_overflow, 1);
}

void moeccl_comm_unregister(moeccl_comm_t* c) {
  for (size_t i = 0, s = slot_of(c); i < LIVE_SLOTS; i++, s = (s + 1) & (LIVE_SLOTS - 1)) {
    moeccl_comm_t* cur = atomic_load(&live[s]);
    if (cur == NULL) return;
    if (cur == c) {
      atomic_store(&live[s], TOMBSTONE);
      return;
    }
  }
}

int moeccl_comm_live(const moeccl_comm_t* c) {
  if (!c) return 0;
  for (size_t i = 0, s = slot_of(c); i < LIVE_SLOTS; i++, s = (s + 1) & (LIVE_SLOTS - 1)) {
    moeccl_comm_t* cur = atomic_load(&live[s]);
    if (cur == c) return c->magic == MOECCL_COMM_MAGIC;
    if (cur == NULL) break;
  }
  return atomic_load(&live_overflow) && c->magic == MOECCL_COMM_MAGIC;
}

MOECCL_EXPORT const char* moecclGetLastError(moecclComm_t comm) {
  if (moeccl_comm_live(comm)) return comm->last_error;
  return thread_last_error;
}

/* Argument errors are the caller's to report (they get the code and this
 * text); everything else is logged as a warning where it is detected. */
static void record(moeccl_comm_t* comm, moecclResult_t err, const char* fmt, va_list ap) {
  char* dst = moeccl_comm_live(comm) ? comm->last_error : thread_last_error;
  size_t len = dst == thread_last_error ? sizeof(thread_last_error) : sizeof(comm->last_error);
  vsnprintf(dst, len, fmt, ap);
  if (dst != thread_last_error) snprintf(thread_last_error, sizeof(thread_last_error), "%s", dst);
  if (err == moecclInvalidArgument) INFO(ALL, "%s", dst);
  else WARN(ALL, "%s", dst);
}

moecclResult_t moeccl_error(moeccl_comm_t* comm, moecclResult_t err, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  record(comm, err, fmt, ap);
  va_end(ap);
  return err;
}

moecclResult_t moeccl_comm_fail(moeccl_comm_t* comm, moecclResult_t err, const char* fmt, ...) {
  if (comm->async_error != moecclSuccess) return comm->async_error; /* the first cause stays */
  va_list ap;
  va_start(ap, fmt);
  record(comm, err, fmt, ap);
  va_end(ap);
  snprintf(comm->fail_text, sizeof(comm->fail_text), "%s", comm->last_error);
  __atomic_store_n(&comm->async_error, err, __ATOMIC_RELEASE);
  return err;
}

moecclResult_t moeccl_comm_vfail_peer(moeccl_comm_t* comm, int rank, const char* fmt, va_list ap) {
  if (comm->async_error != moecclSuccess) return comm->async_error;
  record(comm, moecclRemoteError, fmt, ap);
  snprintf(comm->fail_text, sizeof(comm->fail_text), "%s", comm->last_error);
  comm->failed_peer = rank;
  __atomic_store_n(&comm->async_error, moecclRemoteError, __ATOMIC_RELEASE);
  return moecclRemoteError;
}

moecclResult_t moeccl_comm_check(moeccl_comm_t* comm, const char* argname) {
  if (!comm) return moeccl_error(NULL, moecclInvalidArgument, "%s is NULL", argname);
  if (!moeccl_comm_live(comm))
    return moeccl_error(NULL, moecclInvalidArgument,
                        "%s %p is not a live communicator (destroyed, aborted, or never made)",
                        argname, (void*)comm);
  return moecclSuccess;
}
