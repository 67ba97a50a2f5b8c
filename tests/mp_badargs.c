/*
 * mp_badargs.c - argument checking of every entry point, on 1..8 forked
 * ranks.  Each bad call must return moecclInvalidArgument (moecclInvalidUsage
 * where NCCL returns it: a group end without a start; a config with a wrong
 * magic may give either), with a non-empty moecclGetLastError text that names
 * the argument at fault.  Nothing is sent by a rejected call, so afterwards
 * the communicator must still work: a correct alltoall, alltoallv and
 * send/receive ring pass.  Also: moecclGetErrorString of every result is
 * non-NULL and distinct; moecclGetVersion gives MOECCL_VERSION_CODE.
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "mp_harness.h"

enum accept { ARG, USAGE, ARG_OR_USAGE };

static int n_checks;

/* needles: alternatives separated by '|', matched case-insensitively. */
static int text_names(const char* text, const char* needles) {
  char buf[256];
  snprintf(buf, sizeof(buf), "%s", needles);
  char* save = NULL;
  for (char* tok = strtok_r(buf, "|", &save); tok; tok = strtok_r(NULL, "|", &save))
    if (strcasestr(text, tok)) return 1;
  return 0;
}

static int expect_bad(const char* file, int line, moecclComm_t c, moecclResult_t res,
                      enum accept accept, const char* needles, const char* call) {
  n_checks++;
  int ok = (accept == ARG && res == moecclInvalidArgument) ||
           (accept == USAGE && res == moecclInvalidUsage) ||
           (accept == ARG_OR_USAGE && (res == moecclInvalidArgument || res == moecclInvalidUsage));
  const char* text = moecclGetLastError(c);
  if (!ok) {
    mp_failf(file, line, "%s returned %d (%s), expected %s; last error: \"%s\"", call, (int)res,
             moecclGetErrorString(res),
             accept == ARG     ? "moecclInvalidArgument"
             : accept == USAGE ? "moecclInvalidUsage"
                               : "moecclInvalidArgument or moecclInvalidUsage",
             text ? text : "(NULL)");
    return 1;
  }
  if (!text || !text[0]) {
    mp_failf(file, line, "%s: moecclGetLastError(%s) is %s", call, c ? "comm" : "NULL",
             text ? "empty" : "NULL");
    return 1;
  }
  if (!text_names(text, needles)) {
    mp_failf(file, line, "%s: moecclGetLastError(%s) = \"%s\" does not name %s", call,
             c ? "comm" : "NULL", text, needles);
    return 1;
  }
  return 0;
}

/* A failed check is counted, not fatal, so one run reports every gap. */
static int n_failed;
#define BAD_AS(c, accept, needles, call)                                                           \
  do {                                                                                             \
    if (expect_bad(__FILE__, __LINE__, c, (call), accept, needles, #call)) n_failed++;             \
  } while (0)
#define BAD(c, needles, call) BAD_AS(c, ARG, needles, call)

static const moecclDataType_t bad_types[] = {(moecclDataType_t)99, (moecclDataType_t)-1,
                                             (moecclDataType_t)moecclNumTypes};

static int bad_alltoall(moecclComm_t comm, int n, void* s, void* r, moecclStream_t bogus) {
  BAD(NULL, "comm", moecclAlltoAll(s, r, 1, moecclInt32, NULL, NULL));
  BAD(comm, "sendbuff", moecclAlltoAll(NULL, r, 1, moecclInt32, comm, NULL));
  BAD(comm, "recvbuff", moecclAlltoAll(s, NULL, 1, moecclInt32, comm, NULL));
  for (int i = 0; i < 3; i++) {
    BAD(comm, "datatype", moecclAlltoAll(s, r, 1, bad_types[i], comm, NULL));
    BAD(comm, "count", moecclAlltoAll(s, r, SIZE_MAX, moecclInt32, comm, NULL));
  }
  BAD(comm, "datatype", moecclAlltoAll(s, r, 0, (moecclDataType_t)99, comm, NULL));
  BAD(comm, "count", moecclAlltoAll(s, r, SIZE_MAX / 8 + 1, moecclFloat64, comm, NULL));
  /* count*size fits, count*size*nranks does not (count*size itself for n=1). */
  BAD(comm, "count", moecclAlltoAll(s, r, SIZE_MAX / (4 * (size_t)n) + 1, moecclInt32, comm, NULL));
  BAD(comm, "stream", moecclAlltoAll(s, r, 1, moecclInt32, comm, bogus));
  /* In place is sendbuff == recvbuff exactly; a buffer one byte off overlaps. */
  char* sb = s;
  BAD(comm, "only sendbuff == recvbuff", moecclAlltoAll(sb, sb + 1, 1, moecclInt32, comm, NULL));
  BAD(comm, "only sendbuff == recvbuff", moecclAlltoAll(sb + 3, sb, 1, moecclInt32, comm, NULL));
  return 0;
}

static int bad_alltoallv(moecclComm_t comm, int n, void* s, void* r, moecclStream_t bogus) {
  size_t* ones = mp_xmalloc(sizeof(size_t) * (size_t)n);
  size_t* displs = mp_xmalloc(sizeof(size_t) * (size_t)n);
  size_t* huge = mp_xmalloc(sizeof(size_t) * (size_t)n);
  for (int p = 0; p < n; p++) ones[p] = 1, displs[p] = (size_t)p, huge[p] = 1;
  moecclDataType_t f = moecclFloat32;
  BAD(NULL, "comm", moecclAlltoAllv(s, ones, displs, r, ones, displs, f, NULL, NULL));
  BAD(comm, "sendcounts", moecclAlltoAllv(s, NULL, displs, r, ones, displs, f, comm, NULL));
  BAD(comm, "sdispls", moecclAlltoAllv(s, ones, NULL, r, ones, displs, f, comm, NULL));
  BAD(comm, "recvcounts", moecclAlltoAllv(s, ones, displs, r, NULL, displs, f, comm, NULL));
  BAD(comm, "rdispls", moecclAlltoAllv(s, ones, displs, r, ones, NULL, f, comm, NULL));
  BAD(comm, "sendbuff", moecclAlltoAllv(NULL, ones, displs, r, ones, displs, f, comm, NULL));
  BAD(comm, "recvbuff", moecclAlltoAllv(s, ones, displs, NULL, ones, displs, f, comm, NULL));
  for (int i = 0; i < 3; i++)
    BAD(comm, "datatype",
        moecclAlltoAllv(s, ones, displs, r, ones, displs, bad_types[i], comm, NULL));
  huge[n - 1] = SIZE_MAX;
  BAD(comm, "sendcounts", moecclAlltoAllv(s, huge, displs, r, ones, displs, f, comm, NULL));
  BAD(comm, "recvcounts", moecclAlltoAllv(s, ones, displs, r, huge, displs, f, comm, NULL));
  huge[n - 1] = SIZE_MAX / 2; /* count*size overflows */
  BAD(comm, "sendcounts", moecclAlltoAllv(s, huge, displs, r, ones, displs, f, comm, NULL));
  BAD(comm, "recvcounts", moecclAlltoAllv(s, ones, displs, r, huge, displs, f, comm, NULL));
  /* no overflow in elements or bytes, but past the end of the address
   * space: named as such, not as an overlap of the two buffers */
  huge[n - 1] = SIZE_MAX / 4 / 2;
  BAD(comm, "address space", moecclAlltoAllv(s, ones, huge, r, ones, displs, f, comm, NULL));
  BAD(comm, "address space", moecclAlltoAllv(s, ones, displs, r, ones, huge, f, comm, NULL));
  huge[n - 1] = SIZE_MAX - 1; /* displacement + count overflows */
  BAD(comm, "sdispls|sendcounts", moecclAlltoAllv(s, ones, huge, r, ones, displs, f, comm, NULL));
  BAD(comm, "rdispls|recvcounts", moecclAlltoAllv(s, ones, displs, r, ones, huge, f, comm, NULL));
  BAD(comm, "stream", moecclAlltoAllv(s, ones, displs, r, ones, displs, f, comm, bogus));
  char* sb = s; /* extents that overlap, buffers that differ by 2 bytes */
  BAD(comm, "only sendbuff == recvbuff",
      moecclAlltoAllv(sb, ones, displs, sb + 2, ones, displs, f, comm, NULL));
  free(ones);
  free(displs);
  free(huge);
  return 0;
}

/* The last error also names rank r (the peer whose block is at fault). */
static void names_rank(moecclComm_t comm, const char* what, int r) {
  char needle[32];
  snprintf(needle, sizeof(needle), "rank %d", r);
  const char* text = moecclGetLastError(comm);
  if (!text || !strstr(text, needle)) {
    mp_failf(__FILE__, __LINE__, "%s: \"%s\" does not name %s", what, text ? text : "(NULL)",
             needle);
    n_failed++;
  }
}

/* One v-call whose only block is the one for rank `to`: count 4 at
 * displacement disp on the side `bad` (0 send, 1 receive), 0 elsewhere. */
static moecclResult_t one_block(moecclComm_t comm, int n, int rank, int to, int bad, size_t disp,
                                const void* s, void* r, moecclStream_t st) {
  size_t sc[8] = {0}, sd[8] = {0}, rc[8] = {0}, rd[8] = {0};
  (void)n;
  if (bad == 0) sc[to] = 4, sd[to] = disp;
  else rc[to] = 4, rd[to] = disp;
  if (to == rank) sc[to] = rc[to] = 4; /* the block to self: both sides */
  return moecclAlltoAllv(s, sc, sd, r, rc, rd, moecclFloat32, comm, st);
}

/* Issue 25, item 1: a displacement or count whose span leaves any buffer the
 * caller can have given (2^40 floats past a small heap buffer, one page into
 * an unmapped hole, past a moecclMemAlloc allocation) is refused naming the
 * argument and the rank, whichever buffer lies above, for the block to self
 * and to a peer, direct, in a group and on a host stream; it crashed in
 * host_copy (SIGSEGV) or was called an overlap. */
static int bad_spans(moecclComm_t comm, int rank, int n) {
  char* heap = mp_xmalloc(8192);
  char *lo = heap, *hi = heap + 4096;
  size_t far = (size_t)1 << 40;
  int peer = (rank + 1) % n;
  char needle[32];
  for (int to = rank;; to = peer) {
    snprintf(needle, sizeof(needle), "sdispls[%d]", to);
    BAD(comm, needle, one_block(comm, n, rank, to, 0, far, hi, lo, NULL)); /* recv below */
    names_rank(comm, "sdispls 2^40, recvbuff below", to);
    BAD(comm, needle, one_block(comm, n, rank, to, 0, far, lo, hi, NULL)); /* recv above */
    names_rank(comm, "sdispls 2^40, recvbuff above", to);
    snprintf(needle, sizeof(needle), "rdispls[%d]", to);
    BAD(comm, needle, one_block(comm, n, rank, to, 1, far, hi, lo, NULL));
    names_rank(comm, "rdispls 2^40, recvbuff below", to);
    BAD(comm, needle, one_block(comm, n, rank, to, 1, far, lo, hi, NULL));
    names_rank(comm, "rdispls 2^40, recvbuff above", to);
    if (to == peer) break;
  }
  /* Captured calls are checked at issue too. */
  moecclStream_t st = NULL;
  MP_OK(moecclHostStreamCreate(&st));
  snprintf(needle, sizeof(needle), "sdispls[%d]", rank);
  BAD(comm, needle, one_block(comm, n, rank, rank, 0, far, hi, lo, st));
  MP_OK(moecclHostStreamSynchronize(st));
  MP_OK(moecclHostStreamDestroy(st));
  MP_OK(moecclGroupStart());
  BAD(comm, needle, one_block(comm, n, rank, rank, 0, far, hi, lo, NULL));
  MP_OK(moecclGroupEnd());
  /* One page into a hole of the address space. */
  long page = sysconf(_SC_PAGESIZE);
  char* map =
      mmap(NULL, 2 * (size_t)page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  MP_CHECK(map != MAP_FAILED, "mmap");
  munmap(map + page, (size_t)page);
  BAD(comm, needle, one_block(comm, n, rank, rank, 0, (size_t)page / 4, map, lo, NULL));
  names_rank(comm, "one page into a hole", rank);
  munmap(map, (size_t)page);
  /* Past a moecclMemAlloc allocation (its size is known). */
  void* m = NULL;
  MP_OK(moecclMemAlloc(&m, 4096));
  BAD(comm, needle, one_block(comm, n, rank, rank, 0, 1024, m, lo, NULL));
  names_rank(comm, "past a moecclMemAlloc allocation", rank);
  MP_OK(moecclMemFree(m));
  /* The uniform forms: a count 2^38 floats per rank from a small buffer. */
  size_t count = (size_t)1 << 38;
  BAD(comm, "count", moecclAlltoAll(hi, lo, count, moecclFloat32, comm, NULL));
  BAD(comm, "count", moecclAlltoAll(lo, hi, count, moecclFloat32, comm, NULL));
  BAD(comm, "count", moecclAllGather(lo, hi, count, moecclFloat32, comm, NULL));
  BAD(comm, "count", moecclAllReduce(hi, lo, count, moecclFloat32, moecclSum, comm, NULL));
  free(heap);
  return 0;
}

static int bad_p2p(moecclComm_t comm, int n, void* s, void* r, moecclStream_t bogus) {
  int peers[] = {-1, n, n + 100, INT_MIN};
  for (int i = 0; i < 4; i++) {
    BAD(comm, "peer", moecclSend(s, 1, moecclInt8, peers[i], comm, NULL));
    BAD(comm, "sendbuff", moecclSend(NULL, 5, moecclInt8, 0, comm, NULL));
    BAD(comm, "peer", moecclRecv(r, 1, moecclInt8, peers[i], comm, NULL));
    BAD(comm, "recvbuff", moecclRecv(NULL, 5, moecclInt8, 0, comm, NULL));
  }
  for (int i = 0; i < 3; i++) {
    BAD(comm, "datatype", moecclSend(s, 1, bad_types[i], 0, comm, NULL));
    BAD(comm, "count", moecclSend(s, SIZE_MAX, moecclInt32, 0, comm, NULL));
    BAD(comm, "datatype", moecclRecv(r, 1, bad_types[i], 0, comm, NULL));
    BAD(comm, "count", moecclRecv(r, SIZE_MAX / 2, moecclInt64, 0, comm, NULL));
  }
  BAD(NULL, "comm", moecclSend(s, 1, moecclInt8, 0, NULL, NULL));
  BAD(comm, "stream", moecclSend(s, 1, moecclInt8, 0, comm, bogus));
  BAD(NULL, "comm", moecclRecv(r, 1, moecclInt8, 0, NULL, NULL));
  BAD(comm, "stream", moecclRecv(r, 1, moecclInt8, 0, comm, bogus));
  /* A send to oneself outside a group could never complete. */
  BAD_AS(comm, USAGE, "peer|self|group", moecclSend(s, 1, moecclInt8, mp_rank, comm, NULL));
  BAD_AS(comm, USAGE, "peer|self|group", moecclRecv(r, 1, moecclInt8, mp_rank, comm, NULL));
  /* A group end with no group open. */
  BAD_AS(NULL, USAGE, "group", moecclGroupEnd());
  return 0;
}

static int bad_comm_calls(moecclComm_t comm, int rank, int n) {
  int v = 0;
  moecclComm_t c = NULL;
  BAD(NULL, "comm", moecclCommCount(NULL, &v));
  BAD(comm, "count", moecclCommCount(comm, NULL));
  BAD(NULL, "comm", moecclCommUserRank(NULL, &v));
  BAD(comm, "rank", moecclCommUserRank(comm, NULL));
  BAD(comm, "async", moecclCommGetAsyncError(comm, NULL));
  BAD(NULL, "comm", moecclCommGetAsyncError(NULL, (moecclResult_t*)&v));
  /* Split is collective, but every rank makes the same bad call. */
  BAD(comm, "newcomm", moecclCommSplit(comm, 0, 0, NULL, NULL));
  BAD(comm, "color", moecclCommSplit(comm, -5, 0, &c, NULL));
  BAD(NULL, "comm", moecclCommSplit(NULL, 0, 0, &c, NULL));
  moecclConfig_t config = MOECCL_CONFIG_INITIALIZER;
  config.magic = 0x12345678;
  BAD_AS(comm, ARG_OR_USAGE, "config|magic", moecclCommSplit(comm, 0, 0, &c, &config));
  /* Init with a live id but bad arguments: rejected before joining. */
  moecclUniqueId id = mp_unique_id;
  BAD(NULL, "comm", moecclCommInitRank(NULL, n, id, rank));
  BAD(NULL, "nranks", moecclCommInitRank(&c, 0, id, 0));
  BAD(NULL, "rank", moecclCommInitRank(&c, n, id, n));
  BAD(NULL, "nranks", moecclCommInitRank(&c, -1, id, 0));
  BAD(NULL, "rank", moecclCommInitRank(&c, n, id, -1));
  BAD_AS(NULL, ARG_OR_USAGE, "config|magic", moecclCommInitRankConfig(&c, n, id, rank, &config));
  return 0;
}

static int bad_misc(void) {
  int x = 0;
  BAD(NULL, "version", moecclGetVersion(NULL));
  BAD(NULL, "id", moecclGetUniqueId(NULL));
  BAD(NULL, "ptr", moecclMemAlloc(NULL, 64));
  void* p0 = NULL;
  BAD(NULL, "size", moecclMemAlloc(&p0, 0));
  MP_CHECK(p0 == NULL, "moecclMemAlloc(size 0) failed but wrote *ptr");
  void* m = malloc(64);
  BAD(NULL, "ptr|moecclMemAlloc", moecclMemFree(m)); /* not from moecclMemAlloc */
  free(m);
  BAD(NULL, "ptr|moecclMemAlloc", moecclMemFree(&x));
  BAD(NULL, "stream", moecclHostStreamCreate(NULL));
  BAD(NULL, "stream", moecclHostStreamSynchronize((moecclStream_t)&x));
  BAD(NULL, "stream", moecclHostStreamQuery((moecclStream_t)&x));
  BAD(NULL, "stream", moecclHostStreamDestroy((moecclStream_t)&x));
  BAD(NULL, "stream", moecclHostStreamSynchronize(NULL));
  BAD(NULL, "stream", moecclHostStreamQuery(NULL));
  BAD(NULL, "stream", moecclHostStreamDestroy(NULL));
  return 0;
}

/* Bad arguments on a host stream are reported at issue, and queue nothing. */
static int bad_on_host_stream(moecclComm_t comm, void* s, void* r) {
  moecclStream_t st = NULL;
  MP_OK(moecclHostStreamCreate(&st));
  BAD(comm, "sendbuff", moecclAlltoAll(NULL, r, 1, moecclInt32, comm, st));
  BAD(comm, "datatype", moecclAlltoAll(s, r, 1, (moecclDataType_t)99, comm, st));
  BAD(comm, "peer", moecclSend(s, 1, moecclInt32, -1, comm, st));
  MP_OK(moecclHostStreamSynchronize(st));
  MP_OK(moecclHostStreamDestroy(st));
  return 0;
}

static int error_strings_and_version(void) {
  const char* seen[moecclNumResults];
  for (int i = 0; i < moecclNumResults; i++) {
    seen[i] = moecclGetErrorString((moecclResult_t)i);
    MP_CHECK(seen[i] != NULL && seen[i][0], "moecclGetErrorString(%d) is NULL or empty", i);
    for (int j = 0; j < i; j++)
      MP_CHECK(strcmp(seen[i], seen[j]) != 0,
               "moecclGetErrorString(%d) == moecclGetErrorString(%d) = \"%s\"", i, j, seen[i]);
  }
  MP_CHECK(moecclGetErrorString(moecclNumResults) != NULL,
           "moecclGetErrorString(moecclNumResults) is NULL");
  MP_CHECK(moecclGetErrorString((moecclResult_t)99) != NULL, "moecclGetErrorString(99) is NULL");
  MP_CHECK(moecclGetErrorString((moecclResult_t)-1) != NULL, "moecclGetErrorString(-1) is NULL");
  int version = -1;
  MP_OK_COMM(NULL, moecclGetVersion(&version));
  MP_CHECK(version == MOECCL_VERSION_CODE, "moecclGetVersion gave %d, header says %d", version,
           MOECCL_VERSION_CODE);
  return 0;
}

/* The communicator still works after all the rejected calls. */
static int still_works(moecclComm_t comm, int rank, int n) {
  size_t count = 2048;
  unsigned char* s = mp_xmalloc(count * 4 * (size_t)n);
  unsigned char* r = mp_xmalloc(count * 4 * (size_t)n);
  uint64_t seed = mp_mix64(0xBAD0 + (uint64_t)n);
  for (int p = 0; p < n; p++) mp_fill(s + p * count * 4, 4, count, seed, rank, p, 0);
  MP_OK(moecclAlltoAll(s, r, count, moecclInt32, comm, NULL));
  for (int p = 0; p < n; p++)
    MP_CHECK_BLOCK("alltoall after bad calls", r + p * count * 4, 4, count, seed, p, rank, 0);
  /* alltoallv: block for p at p*count, rank i sends 3+i+p elements to p. */
  size_t* v = mp_xmalloc(sizeof(size_t) * 3 * (size_t)n);
  size_t *sc = v, *rc = v + n, *displs = v + 2 * n;
  for (int p = 0; p < n; p++)
    sc[p] = 3 + (size_t)(rank + p), rc[p] = 3 + (size_t)(p + rank), displs[p] = (size_t)p * count;
  memset(r, 0, count * 4 * (size_t)n);
  MP_OK(moecclAlltoAllv(s, sc, displs, r, rc, displs, moecclInt32, comm, NULL));
  for (int p = 0; p < n; p++)
    MP_CHECK_BLOCK("alltoallv after bad calls", r + displs[p] * 4, 4, rc[p], seed, p, rank, 0);
  free(v);
  /* A group with rejected calls in it: they are left out, the rest issues. */
  int next = (rank + 1) % n, prev = (rank + n - 1) % n;
  memset(r, 0, count * 4);
  MP_OK(moecclGroupStart());
  BAD(comm, "peer", moecclSend(s, count, moecclInt32, n, comm, NULL));
  MP_OK(moecclSend(s, count, moecclInt32, next, comm, NULL));
  BAD(comm, "recvbuff", moecclRecv(NULL, count, moecclInt32, prev, comm, NULL));
  BAD(comm, "datatype", moecclAlltoAll(s, r, 1, (moecclDataType_t)42, comm, NULL));
  MP_OK(moecclRecv(r, count, moecclInt32, prev, comm, NULL));
  MP_OK(moecclGroupEnd());
  MP_CHECK_BLOCK("send/recv after bad calls", r, 4, count, seed, prev, 0, 0);
  moecclResult_t async = moecclInternalError;
  MP_OK(moecclCommGetAsyncError(comm, &async));
  MP_CHECK(async == moecclSuccess, "async error %d after bad calls", (int)async);
  free(s);
  free(r);
  return 0;
}

/* A destroyed communicator's handle (freed memory) is refused without
 * being read (ASan would see a read of freed memory), as is one after
 * moecclCommAbort and a pointer that never was one. */
static int stale_handles(moecclComm_t comm, int rank, void* s, void* r) {
  moecclComm_t c = NULL, d = NULL;
  MP_OK(moecclCommSplit(comm, 0, rank, &c, NULL));
  MP_OK(moecclCommSplit(comm, 0, rank, &d, NULL));
  MP_OK_COMM(NULL, moecclCommDestroy(c));
  MP_OK_COMM(NULL, moecclCommAbort(d));
  int never = 0;
  moecclComm_t stale[] = {c, d, (moecclComm_t)&never};
  for (int i = 0; i < 3; i++) {
    BAD(NULL, "live communicator",
        moecclAllReduce(s, r, 4, moecclFloat32, moecclSum, stale[i], NULL));
    BAD(NULL, "live communicator", moecclAlltoAll(s, r, 1, moecclInt8, stale[i], NULL));
    int count = -1;
    BAD(NULL, "live communicator", moecclCommCount(stale[i], &count));
    MP_CHECK(moecclGetLastError(stale[i]) != NULL, "no text for a stale handle");
  }
  return 0;
}

static int body(moecclComm_t comm, int rank, int n, void* arg) {
  (void)arg;
  size_t bytes = 64 * (size_t)n + 64;
  void* s = mp_xmalloc(bytes);
  void* r = mp_xmalloc(bytes);
  memset(s, 0, bytes);
  int bogus_stream_storage[16] = {0};
  moecclStream_t bogus = (moecclStream_t)bogus_stream_storage;
  if (error_strings_and_version()) return 1;
  if (bad_alltoall(comm, n, s, r, bogus)) return 1;
  if (bad_alltoallv(comm, n, s, r, bogus)) return 1;
  if (n <= 8 && bad_spans(comm, rank, n)) return 1;
  if (bad_p2p(comm, n, s, r, bogus)) return 1;
  if (bad_comm_calls(comm, rank, n)) return 1;
  if (bad_misc()) return 1;
  if (bad_on_host_stream(comm, s, r)) return 1;
  if (stale_handles(comm, rank, s, r)) return 1;
  free(s);
  free(r);
  if (still_works(comm, rank, n)) return 1;
  if (rank == 0)
    printf("rank 0: %d of %d bad calls rejected as expected\n", n_checks - n_failed, n_checks);
  return n_failed ? 1 : 0;
}

int main(int argc, char** argv) {
  return mp_main(argc, argv, mp_default_ranks, body, NULL, 120, NULL);
}
