/*
 * api_nompi.c - the API in one process, no fork: moecclGetUniqueId then
 * moecclCommInitRank(nranks=1) in the same process, alltoall / alltoallv /
 * self send-receive / host stream / split on one rank, count and rank,
 * async error, destroy; moecclMemAlloc/Free round trips, and moecclMemFree of
 * NULL or of memory it did not allocate reports an error instead of crashing.
 * alarm() is the deadline.
 */
#include <stdlib.h>
#include <unistd.h>

#include "mp_harness.h"

static int one_rank_alltoall(moecclComm_t comm) {
  for (int t = 0; t < moecclNumTypes; t++) {
    size_t es = mp_dtypes[t].size, counts[] = {0, 1, 1000, 70000};
    for (int c = 0; c < 4; c++) {
      unsigned char* s = mp_xmalloc(counts[c] * es);
      unsigned char* r = mp_xmalloc(counts[c] * es + 64);
      uint64_t seed = mp_mix64((uint64_t)(t * 10 + c));
      mp_fill(s, es, counts[c], seed, 0, 0, 0);
      mp_fill_sentinel(r, counts[c] * es + 64);
      MP_OK(moecclAlltoAll(s, r, counts[c], mp_dtypes[t].type, comm, NULL));
      MP_CHECK_BLOCK("1-rank alltoall", r, es, counts[c], seed, 0, 0, 0);
      MP_CHECK_SENTINEL("1-rank alltoall guard", r + counts[c] * es, 64);
      free(s);
      free(r);
    }
  }
  return 0;
}

static int one_rank_alltoallv(moecclComm_t comm) {
  size_t count = 5000, sc = count, sd = 7, rc = count, rd = 11;
  unsigned char* s = mp_xmalloc((sd + count) * 2);
  unsigned char* r = mp_xmalloc((rd + count) * 2 + 64);
  uint64_t seed = 4242;
  mp_fill_sentinel(s, (sd + count) * 2);
  mp_fill(s + sd * 2, 2, count, seed, 0, 0, 0);
  mp_fill_sentinel(r, (rd + count) * 2 + 64);
  MP_OK(moecclAlltoAllv(s, &sc, &sd, r, &rc, &rd, moecclFloat16, comm, NULL));
  MP_CHECK_SENTINEL("1-rank alltoallv gap before block", r, rd * 2);
  MP_CHECK_BLOCK("1-rank alltoallv", r + rd * 2, 2, count, seed, 0, 0, 0);
  MP_CHECK_SENTINEL("1-rank alltoallv guard", r + (rd + count) * 2, 64);
  free(s);
  free(r);
  return 0;
}

static int one_rank_sendrecv_and_stream(moecclComm_t comm) {
  size_t count = 12345;
  unsigned char* s = mp_xmalloc(count * 8);
  unsigned char* r = mp_xmalloc(count * 8);
  mp_fill(s, 8, count, 99, 0, 0, 0);
  MP_OK(moecclGroupStart());
  MP_OK(moecclSend(s, count, moecclInt64, 0, comm, NULL));
  MP_OK(moecclRecv(r, count, moecclInt64, 0, comm, NULL));
  MP_OK(moecclGroupEnd());
  MP_CHECK_BLOCK("1-rank self send/recv", r, 8, count, 99, 0, 0, 0);

  moecclStream_t st = NULL;
  MP_OK(moecclHostStreamCreate(&st));
  memset(r, 0, count * 8);
  MP_OK(moecclAlltoAll(s, r, count, moecclUint64, comm, st));
  moecclResult_t q = moecclHostStreamQuery(st);
  MP_CHECK(q == moecclSuccess || q == moecclInProgress, "moecclHostStreamQuery returned %d",
           (int)q);
  MP_OK(moecclHostStreamSynchronize(st));
  MP_CHECK_BLOCK("1-rank host-stream alltoall", r, 8, count, 99, 0, 0, 0);
  MP_OK(moecclHostStreamDestroy(st));
  free(s);
  free(r);
  return 0;
}

static int one_rank_split(moecclComm_t comm) {
  moecclComm_t child = NULL, none = (moecclComm_t)&none;
  MP_OK(moecclCommSplit(comm, 3, 0, &child, NULL));
  MP_CHECK(child != NULL, "split on 1 rank gave NULL");
  int v = -1;
  MP_OK_COMM(child, moecclCommCount(child, &v));
  MP_CHECK(v == 1, "child count %d", v);
  MP_OK(moecclCommSplit(comm, MOECCL_SPLIT_NOCOLOR, 0, &none, NULL));
  MP_CHECK(none == NULL, "MOECCL_SPLIT_NOCOLOR gave a communicator");
  MP_OK_COMM(NULL, moecclCommDestroy(child));
  return 0;
}

static int single_rank_comm(void) {
  moecclUniqueId id;
  MP_OK_COMM(NULL, moecclGetUniqueId(&id));
  moecclComm_t comm = NULL;
  MP_OK_COMM(NULL, moecclCommInitRank(&comm, 1, id, 0));
  MP_CHECK(comm != NULL, "moecclCommInitRank gave NULL");
  mp_comm = comm;
  int count = -1, rank = -1;
  MP_OK(moecclCommCount(comm, &count));
  MP_OK(moecclCommUserRank(comm, &rank));
  MP_CHECK(count == 1 && rank == 0, "count %d rank %d, expected 1 and 0", count, rank);
  moecclResult_t async = moecclInternalError;
  MP_OK(moecclCommGetAsyncError(comm, &async));
  MP_CHECK(async == moecclSuccess, "async error %d (%s)", (int)async, moecclGetErrorString(async));
  if (one_rank_alltoall(comm) || one_rank_alltoallv(comm) || one_rank_sendrecv_and_stream(comm) ||
      one_rank_split(comm))
    return 1;

  /* A second single-rank communicator alive next to the first. */
  moecclUniqueId id2;
  moecclComm_t comm2 = NULL;
  MP_OK_COMM(NULL, moecclGetUniqueId(&id2));
  MP_CHECK(memcmp(&id, &id2, sizeof(id)) != 0, "two moecclGetUniqueId calls gave the same id");
  MP_OK_COMM(NULL, moecclCommInitRank(&comm2, 1, id2, 0));
  if (one_rank_alltoallv(comm2)) return 1;
  MP_OK_COMM(NULL, moecclCommDestroy(comm2));
  MP_OK(moecclCommGetAsyncError(comm, &async));
  MP_OK_COMM(NULL, moecclCommDestroy(comm));
  mp_comm = NULL;
  /* An id whose magic is right but whose version is not this library's
   * (bytes 4-7 of the layout) is refused by name, and one without the magic
   * as no id at all; *comm is not touched. */
  moecclUniqueId other = id2;
  uint32_t v = MOECCL_VERSION_CODE + 1;
  memcpy(other.internal + 4, &v, sizeof(v));
  moecclComm_t untouched = (moecclComm_t)&other;
  moecclResult_t res = moecclCommInitRank(&untouched, 1, other, 0);
  MP_CHECK(res == moecclInvalidUsage && strstr(moecclGetLastError(NULL), "another version"),
           "an id of another version gave %d: %s", (int)res, moecclGetLastError(NULL));
  memset(other.internal, 0, 4);
  res = moecclCommInitRank(&untouched, 1, other, 0);
  MP_CHECK(res == moecclInvalidArgument && strstr(moecclGetLastError(NULL), "not an id"),
           "an id without the magic gave %d: %s", (int)res, moecclGetLastError(NULL));
  MP_CHECK(untouched == (moecclComm_t)&other, "a refused init changed *comm");
  /* NULL is allowed and does nothing (a NOCOLOR split result). */
  MP_OK_COMM(NULL, moecclCommDestroy(NULL));
  MP_OK_COMM(NULL, moecclCommAbort(NULL));
  return 0;
}

static int memalloc_round_trips(void) {
  size_t sizes[] = {1, 100, 4096, 65537, 3u << 20};
  void* ptrs[5];
  for (int i = 0; i < 5; i++) {
    ptrs[i] = NULL;
    MP_OK_COMM(NULL, moecclMemAlloc(&ptrs[i], sizes[i]));
    MP_CHECK(ptrs[i] != NULL, "moecclMemAlloc(%zu) gave NULL", sizes[i]);
    mp_fill(ptrs[i], 1, sizes[i], 5, i, 0, 0);
  }
  for (int i = 0; i < 5; i++)
    MP_CHECK_BLOCK("moecclMemAlloc memory", ptrs[i], 1, sizes[i], 5, i, 0, 0);
  for (int i = 0; i < 5; i++) MP_OK_COMM(NULL, moecclMemFree(ptrs[i]));

  moecclResult_t r = moecclMemFree(NULL); /* like free(NULL): does nothing */
  MP_CHECK(r == moecclSuccess, "moecclMemFree(NULL) returned %d (%s)", (int)r,
           moecclGetErrorString(r));
  void* m = malloc(128);
  r = moecclMemFree(m);
  MP_CHECK(r == moecclInvalidArgument, "moecclMemFree(malloc'd pointer) returned %d (%s)", (int)r,
           moecclGetErrorString(r));
  free(m);
  int local;
  r = moecclMemFree(&local);
  MP_CHECK(r == moecclInvalidArgument, "moecclMemFree(stack pointer) returned %d (%s)", (int)r,
           moecclGetErrorString(r));
  void* p = NULL;
  MP_OK_COMM(NULL, moecclMemAlloc(&p, 4096));
  MP_OK_COMM(NULL, moecclMemFree(p));
  r = moecclMemFree(p);
  MP_CHECK(r == moecclInvalidArgument, "moecclMemFree twice returned %d (%s)", (int)r,
           moecclGetErrorString(r));
  r = moecclMemFree((char*)ptrs[4] + 8); /* inside a freed block */
  MP_CHECK(r == moecclInvalidArgument, "moecclMemFree(interior pointer) returned %d (%s)", (int)r,
           moecclGetErrorString(r));
  return 0;
}

/* Communicators made and destroyed many times in one process leak nothing. */
static int init_destroy_leaks(void) {
  mp_resources before;
  for (int it = 0; it < 21; it++) {
    if (it == 1) mp_resources_get(&before);
    moecclUniqueId id;
    moecclComm_t c = NULL;
    MP_OK_COMM(NULL, moecclGetUniqueId(&id));
    MP_OK_COMM(NULL, moecclCommInitRank(&c, 1, id, 0));
    if (one_rank_alltoallv(c)) return 1;
    MP_OK_COMM(NULL, it % 2 ? moecclCommDestroy(c) : moecclCommAbort(c));
  }
  MP_CHECK_RESOURCES("20 communicators made and freed", &before, 10);
  return 0;
}

int main(void) {
  mp_env_defaults();
  mp_rank = 0;
  alarm(120); /* the deadline: a hang becomes a failure (SIGALRM) */
  int version = 0;
  if (moecclGetVersion(&version) != moecclSuccess || version != MOECCL_VERSION_CODE) {
    fprintf(stderr, "moecclGetVersion gave %d, expected %d\n", version, MOECCL_VERSION_CODE);
    return MP_EXIT_FAIL;
  }
  int rc = single_rank_comm();
  if (!rc) rc = memalloc_round_trips();
  if (!rc) rc = init_destroy_leaks();
  printf("%s api_nompi\n", rc ? "FAIL" : "PASS");
  return rc ? MP_EXIT_FAIL : MP_EXIT_PASS;
}
