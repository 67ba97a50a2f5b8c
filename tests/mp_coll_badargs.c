/*
 * mp_coll_badargs.c - argument checking of the collectives and of the
 * PreMulSum op calls, on 1..8 forked ranks.  Each bad call must return
 * moecclInvalidArgument with a moecclGetLastError text that names the
 * argument at fault: unknown ops ((moecclRedOp_t)99, moecclNumOps before any
 * PreMulSum op exists, -1, moecclMaxRedOp), unknown datatypes, root -1,
 * nranks and INT_MIN, NULL buffers with a non-zero count (each buffer that is
 * required on the calling rank; a rank that is its own root for the
 * root-only ones), count x size overflows, a bogus stream, a destroyed
 * PreMulSum op, a PreMulSum op of another datatype, moecclRedOpDestroy of
 * builtin and unknown ops, NULL comm, bad moecclRedOpCreatePreMulSum
 * arguments, buffers that overlap other than in the in-place forms, an op
 * made on the parent used on a split communicator (moecclAllReduce(3),
 * moecclRedOpCreatePreMulSum(3)).  Every rank makes the same bad calls (or, for root-only
 * buffers, calls that are bad on every rank), so a rank that wrongly sent
 * something would leave the others out of step: afterwards a correct
 * AllReduce (and Broadcast, ReduceScatter) on all ranks must still give the
 * right result.  Rejected calls inside a group are left out, the rest of
 * the group issues (as tests/mp_badargs.c expects of the other calls); on a
 * host stream they are reported at issue and queue nothing.
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "mp_harness.h"

static int n_checks, n_failed;

/* needles: alternatives separated by '|', matched case-insensitively. */
static int text_names(const char* text, const char* needles) {
  char buf[256];
  snprintf(buf, sizeof(buf), "%s", needles);
  char* save = NULL;
  for (char* tok = strtok_r(buf, "|", &save); tok; tok = strtok_r(NULL, "|", &save))
    if (strcasestr(text, tok)) return 1;
  return 0;
}

static int expect_bad(const char* file, int line, moecclComm_t c, moecclResult_t res, const char* needles,
                      const char* call) {
  n_checks++;
  const char* text = moecclGetLastError(c);
  if (res != moecclInvalidArgument) {
    mp_failf(file, line, "%s returned %d (%s), expected moecclInvalidArgument; last error: \"%s\"", call, (int)res,
             moecclGetErrorString(res), text ? text : "(NULL)");
    return 1;
  }
  if (!text || !text[0]) {
    mp_failf(file, line, "%s: moecclGetLastError(%s) is %s", call, c ? "comm" : "NULL", text ? "empty" : "NULL");
    return 1;
  }
  if (!text_names(text, needles)) {
    mp_failf(file, line, "%s: moecclGetLastError(%s) = \"%s\" does not name %s", call, c ? "comm" : "NULL", text,
             needles);
    return 1;
  }
  return 0;
}

/* A failed check is counted, not fatal, so one run reports every gap. */
#define BAD(c, needles, call) \
  do { if (expect_bad(__FILE__, __LINE__, c, (call), needles, #call)) n_failed++; } while (0)

static const moecclDataType_t bad_types[] = {(moecclDataType_t)99, (moecclDataType_t)-1,
                                             (moecclDataType_t)moecclNumTypes};
#define NBADTYPES 3
/* moecclNumOps is unknown while no PreMulSum op exists (checked first). */
static const moecclRedOp_t bad_ops[] = {(moecclRedOp_t)99, moecclNumOps, (moecclRedOp_t)-1, moecclMaxRedOp};
#define NBADOPS 4

static int bad_reductions(moecclComm_t comm, int rank, int n, void* s, void* r, moecclStream_t bogus) {
  const moecclDataType_t f = moecclFloat32;
  int roots[] = {-1, n, INT_MIN};
  for (int i = 0; i < NBADOPS; i++) {
    BAD(comm, "op", moecclAllReduce(s, r, 4, f, bad_ops[i], comm, NULL));
    BAD(comm, "op", moecclReduceScatter(s, r, 1, f, bad_ops[i], comm, NULL));
    BAD(comm, "op", moecclReduce(s, r, 4, f, bad_ops[i], 0, comm, NULL));
  }
  for (int i = 0; i < NBADTYPES; i++) {
    BAD(comm, "datatype", moecclAllReduce(s, r, 4, bad_types[i], moecclSum, comm, NULL));
    BAD(comm, "datatype", moecclReduceScatter(s, r, 1, bad_types[i], moecclSum, comm, NULL));
    BAD(comm, "datatype", moecclReduce(s, r, 4, bad_types[i], moecclSum, 0, comm, NULL));
  }
  for (int i = 0; i < 3; i++) BAD(comm, "root", moecclReduce(s, r, 4, f, moecclSum, roots[i], comm, NULL));
  /* required buffers */
  BAD(comm, "sendbuff", moecclAllReduce(NULL, r, 4, f, moecclSum, comm, NULL));
  BAD(comm, "recvbuff", moecclAllReduce(s, NULL, 4, f, moecclSum, comm, NULL));
  BAD(comm, "sendbuff", moecclReduceScatter(NULL, r, 1, f, moecclMax, comm, NULL));
  BAD(comm, "recvbuff", moecclReduceScatter(s, NULL, 1, f, moecclMax, comm, NULL));
  BAD(comm, "sendbuff", moecclReduce(NULL, r, 4, f, moecclSum, 0, comm, NULL));
  /* recvbuff is required on the root: every rank is its own root here */
  BAD(comm, "recvbuff", moecclReduce(s, NULL, 4, f, moecclSum, rank, comm, NULL));
  /* count x size (x nranks) overflows */
  BAD(comm, "count", moecclAllReduce(s, r, SIZE_MAX / 2, moecclInt32, moecclSum, comm, NULL));
  BAD(comm, "count", moecclAllReduce(s, r, SIZE_MAX / 8 + 1, moecclFloat64, moecclSum, comm, NULL));
  BAD(comm, "count", moecclReduceScatter(s, r, SIZE_MAX / 2, moecclInt32, moecclSum, comm, NULL));
  BAD(comm, "count", moecclReduceScatter(s, r, SIZE_MAX / (4 * (size_t)n) + 1, moecclInt32, moecclSum, comm, NULL));
  BAD(comm, "count", moecclReduce(s, r, SIZE_MAX / 2, moecclInt64, moecclSum, 0, comm, NULL));
  /* NULL comm, bogus stream */
  BAD(NULL, "comm", moecclAllReduce(s, r, 4, f, moecclSum, NULL, NULL));
  BAD(NULL, "comm", moecclReduceScatter(s, r, 1, f, moecclSum, NULL, NULL));
  BAD(NULL, "comm", moecclReduce(s, r, 4, f, moecclSum, 0, NULL, NULL));
  BAD(comm, "stream", moecclAllReduce(s, r, 4, f, moecclSum, comm, bogus));
  BAD(comm, "stream", moecclReduceScatter(s, r, 1, f, moecclSum, comm, bogus));
  BAD(comm, "stream", moecclReduce(s, r, 4, f, moecclSum, 0, comm, bogus));
  return 0;
}

static int bad_gathers(moecclComm_t comm, int rank, int n, void* s, void* r, moecclStream_t bogus) {
  const moecclDataType_t f = moecclFloat32;
  int roots[] = {-1, n, INT_MIN};
  for (int i = 0; i < NBADTYPES; i++) {
    BAD(comm, "datatype", moecclAllGather(s, r, 1, bad_types[i], comm, NULL));
    BAD(comm, "datatype", moecclBroadcast(s, r, 4, bad_types[i], 0, comm, NULL));
    BAD(comm, "datatype", moecclBcast(r, 4, bad_types[i], 0, comm, NULL));
    BAD(comm, "datatype", moecclGather(s, r, 1, bad_types[i], 0, comm, NULL));
    BAD(comm, "datatype", moecclScatter(s, r, 1, bad_types[i], 0, comm, NULL));
  }
  for (int i = 0; i < 3; i++) {
    BAD(comm, "root", moecclBroadcast(s, r, 4, f, roots[i], comm, NULL));
    BAD(comm, "root", moecclBcast(r, 4, f, roots[i], comm, NULL));
    BAD(comm, "root", moecclGather(s, r, 1, f, roots[i], comm, NULL));
    BAD(comm, "root", moecclScatter(s, r, 1, f, roots[i], comm, NULL));
  }
  BAD(comm, "sendbuff", moecclAllGather(NULL, r, 1, f, comm, NULL));
  BAD(comm, "recvbuff", moecclAllGather(s, NULL, 1, f, comm, NULL));
  BAD(comm, "recvbuff", moecclBroadcast(s, NULL, 4, f, 0, comm, NULL));
  BAD(comm, "buff", moecclBcast(NULL, 4, f, 0, comm, NULL));
  BAD(comm, "sendbuff", moecclGather(NULL, r, 1, f, 0, comm, NULL));
  BAD(comm, "recvbuff", moecclScatter(s, NULL, 1, f, 0, comm, NULL));
  /* root-only buffers, NULL where this rank is the root */
  BAD(comm, "sendbuff", moecclBroadcast(NULL, r, 4, f, rank, comm, NULL));
  BAD(comm, "recvbuff", moecclGather(s, NULL, 1, f, rank, comm, NULL));
  BAD(comm, "sendbuff", moecclScatter(NULL, r, 1, f, rank, comm, NULL));
  /* overflows: count x size, and count x size x nranks for the gathered side */
  BAD(comm, "count", moecclAllGather(s, r, SIZE_MAX / 2, moecclInt32, comm, NULL));
  BAD(comm, "count", moecclAllGather(s, r, SIZE_MAX / (4 * (size_t)n) + 1, moecclInt32, comm, NULL));
  BAD(comm, "count", moecclBroadcast(s, r, SIZE_MAX / 2, moecclInt32, 0, comm, NULL));
  BAD(comm, "count", moecclBcast(r, SIZE_MAX / 2, moecclFloat64, 0, comm, NULL));
  BAD(comm, "count", moecclGather(s, r, SIZE_MAX / 2, moecclInt32, 0, comm, NULL));
  BAD(comm, "count", moecclScatter(s, r, SIZE_MAX / 2, moecclInt32, 0, comm, NULL));
  /* NULL comm, bogus stream */
  BAD(NULL, "comm", moecclAllGather(s, r, 1, f, NULL, NULL));
  BAD(NULL, "comm", moecclBroadcast(s, r, 4, f, 0, NULL, NULL));
  BAD(NULL, "comm", moecclBcast(r, 4, f, 0, NULL, NULL));
  BAD(NULL, "comm", moecclGather(s, r, 1, f, 0, NULL, NULL));
  BAD(NULL, "comm", moecclScatter(s, r, 1, f, 0, NULL, NULL));
  BAD(comm, "stream", moecclAllGather(s, r, 1, f, comm, bogus));
  BAD(comm, "stream", moecclBroadcast(s, r, 4, f, 0, comm, bogus));
  BAD(comm, "stream", moecclBcast(r, 4, f, 0, comm, bogus));
  BAD(comm, "stream", moecclGather(s, r, 1, f, 0, comm, bogus));
  BAD(comm, "stream", moecclScatter(s, r, 1, f, 0, comm, bogus));
  return 0;
}

static int bad_premul(moecclComm_t comm, void* s, void* r) {
  float scalar = 2.0f;
  moecclRedOp_t op = (moecclRedOp_t)-7;
  BAD(comm, "op", moecclRedOpCreatePreMulSum(NULL, &scalar, moecclFloat32, moecclScalarHostImmediate, comm));
  BAD(comm, "scalar", moecclRedOpCreatePreMulSum(&op, NULL, moecclFloat32, moecclScalarHostImmediate, comm));
  BAD(comm, "scalar", moecclRedOpCreatePreMulSum(&op, NULL, moecclFloat32, moecclScalarDevice, comm));
  for (int i = 0; i < NBADTYPES; i++)
    BAD(comm, "datatype", moecclRedOpCreatePreMulSum(&op, &scalar, bad_types[i], moecclScalarHostImmediate, comm));
  BAD(comm, "residence", moecclRedOpCreatePreMulSum(&op, &scalar, moecclFloat32, (moecclScalarResidence_t)5, comm));
  BAD(NULL, "comm", moecclRedOpCreatePreMulSum(&op, &scalar, moecclFloat32, moecclScalarHostImmediate, NULL));
  MP_CHECK(op == (moecclRedOp_t)-7, "a rejected moecclRedOpCreatePreMulSum wrote *op (%d)", (int)op);

  /* moecclRedOpDestroy of builtin and unknown ops */
  static const moecclRedOp_t builtin[] = {moecclSum, moecclProd, moecclMax, moecclMin, moecclAvg};
  for (int i = 0; i < 5; i++) BAD(comm, "op|builtin", moecclRedOpDestroy(builtin[i], comm));
  for (int i = 0; i < NBADOPS; i++) BAD(comm, "op", moecclRedOpDestroy(bad_ops[i], comm));

  /* An op of float32: not for int32 or float64; gone once destroyed. */
  MP_OK_COMM(comm, moecclRedOpCreatePreMulSum(&op, &scalar, moecclFloat32, moecclScalarHostImmediate, comm));
  MP_CHECK((int)op >= (int)moecclNumOps, "moecclRedOpCreatePreMulSum gave op %d", (int)op);
  BAD(NULL, "comm", moecclRedOpDestroy(op, NULL));
  BAD(comm, "op|datatype", moecclAllReduce(s, r, 4, moecclInt32, op, comm, NULL));
  BAD(comm, "op|datatype", moecclReduceScatter(s, r, 1, moecclFloat64, op, comm, NULL));
  BAD(comm, "op|datatype", moecclReduce(s, r, 4, moecclFloat16, op, 0, comm, NULL));
  MP_OK_COMM(comm, moecclRedOpDestroy(op, comm));
  BAD(comm, "op", moecclAllReduce(s, r, 4, moecclFloat32, op, comm, NULL));
  BAD(comm, "op", moecclReduceScatter(s, r, 1, moecclFloat32, op, comm, NULL));
  BAD(comm, "op", moecclReduce(s, r, 4, moecclFloat32, op, 0, comm, NULL));
  BAD(comm, "op", moecclRedOpDestroy(op, comm)); /* twice */

  /* A device-resident scalar of int64, destroyed, then another op made. */
  int64_t iscalar = 3;
  moecclRedOp_t op2 = moecclSum;
  MP_OK_COMM(comm, moecclRedOpCreatePreMulSum(&op2, &iscalar, moecclInt64, moecclScalarDevice, comm));
  BAD(comm, "op|datatype", moecclAllReduce(s, r, 4, moecclUint64, op2, comm, NULL));
  MP_OK_COMM(comm, moecclRedOpDestroy(op2, comm));
  BAD(comm, "op", moecclAllReduce(s, r, 4, moecclInt64, op2, comm, NULL));
  return 0;
}

/* Buffers that overlap other than in the in-place forms (every rank is
 * its own root for the rooted ones, so every rank must reject). */
static int bad_overlap(moecclComm_t comm, int rank, unsigned char* b) {
  const moecclDataType_t f = moecclFloat32;
  const char* w = "overlap|sendbuff|recvbuff";
  BAD(comm, w, moecclAllReduce(b, b + 4, 8, f, moecclSum, comm, NULL));
  BAD(comm, w, moecclAllReduce(b + 4, b, 8, f, moecclSum, comm, NULL));
  BAD(comm, w, moecclReduce(b, b + 8, 8, f, moecclSum, rank, comm, NULL));
  BAD(comm, w, moecclBroadcast(b, b + 4, 8, f, rank, comm, NULL));
  /* one element off the in-place forms (which are at rank*2 elements) */
  BAD(comm, w, moecclReduceScatter(b, b + 4, 2, f, moecclSum, comm, NULL));
  BAD(comm, w, moecclReduceScatter(b, b + (size_t)rank * 8 + 4, 2, f, moecclSum, comm, NULL));
  BAD(comm, w, moecclAllGather(b + 4, b, 2, f, comm, NULL));
  BAD(comm, w, moecclGather(b + (size_t)rank * 8 + 4, b, 2, f, rank, comm, NULL));
  BAD(comm, w, moecclScatter(b, b + 4, 2, f, rank, comm, NULL));
  return 0;
}

/* An op made on the parent is not valid on a communicator split from it. */
static int op_of_other_comm(moecclComm_t comm, int rank, float* s, float* r) {
  moecclComm_t child = NULL;
  MP_OK(moecclCommSplit(comm, 0, rank, &child, NULL));
  float scalar = 0.5f;
  moecclRedOp_t op;
  MP_OK(moecclRedOpCreatePreMulSum(&op, &scalar, moecclFloat32, moecclScalarHostImmediate, comm));
  BAD(child, "op", moecclAllReduce(s, r, 4, moecclFloat32, op, child, NULL));
  BAD(child, "op", moecclRedOpDestroy(op, child));
  MP_OK(moecclRedOpDestroy(op, comm));
  /* the child works */
  for (int i = 0; i < 4; i++) s[i] = (float)(rank + i);
  MP_OK_COMM(child, moecclAllReduce(s, r, 4, moecclFloat32, moecclMax, child, NULL));
  for (int i = 0; i < 4; i++) MP_CHECK(r[i] == (float)(mp_nranks - 1 + i), "child AllReduce element %d is %g", i, r[i]);
  MP_OK_COMM(NULL, moecclCommDestroy(child));
  return 0;
}

/* Fills s with rank*1000 + i (int32) and checks an AllReduce, a
 * ReduceScatter and a Broadcast: the communicator is still in step. */
static int still_works(moecclComm_t comm, int rank, int n, const char* when) {
  size_t count = 1000 * (size_t)n;
  int32_t* s = mp_xmalloc(count * 4);
  int32_t* r = mp_xmalloc(count * 4);
  for (size_t i = 0; i < count; i++) s[i] = rank * 1000 + (int32_t)i;
  MP_OK(moecclAllReduce(s, r, count, moecclInt32, moecclSum, comm, NULL));
  int32_t tri = (int32_t)(1000 * n * (n - 1) / 2);
  for (size_t i = 0; i < count; i++)
    MP_CHECK(r[i] == tri + n * (int32_t)i, "AllReduce %s: element %zu is %d, expected %d", when, i, r[i],
             tri + n * (int32_t)i);
  MP_OK(moecclReduceScatter(s, r, 1000, moecclInt32, moecclMax, comm, NULL));
  for (size_t i = 0; i < 1000; i++) {
    int32_t e = (n - 1) * 1000 + (int32_t)((size_t)rank * 1000 + i);
    MP_CHECK(r[i] == e, "ReduceScatter %s: element %zu is %d, expected %d", when, i, r[i], e);
  }
  int root = n - 1;
  MP_OK(moecclBroadcast(rank == root ? s : NULL, r, 777, moecclInt32, root, comm, NULL));
  for (size_t i = 0; i < 777; i++)
    MP_CHECK(r[i] == root * 1000 + (int32_t)i, "Broadcast %s: element %zu is %d", when, i, r[i]);
  moecclResult_t async = moecclInternalError;
  MP_OK(moecclCommGetAsyncError(comm, &async));
  MP_CHECK(async == moecclSuccess, "async error %d %s", (int)async, when);
  free(s);
  free(r);
  return 0;
}

/* Rejected calls in a group are left out; the valid ones issue. */
static int group_with_bad_calls(moecclComm_t comm, int rank, int n) {
  int64_t s[64], r[64], r2[64];
  for (int i = 0; i < 64; i++) s[i] = rank + i;
  memset(r, 0, sizeof(r));
  memset(r2, 0, sizeof(r2));
  MP_OK(moecclGroupStart());
  BAD(comm, "op", moecclAllReduce(s, r, 64, moecclInt64, (moecclRedOp_t)99, comm, NULL));
  MP_OK(moecclAllReduce(s, r, 64, moecclInt64, moecclSum, comm, NULL));
  BAD(comm, "root", moecclBroadcast(s, r2, 64, moecclInt64, n, comm, NULL));
  BAD(comm, "datatype", moecclAllGather(s, r2, 1, (moecclDataType_t)42, comm, NULL));
  MP_OK(moecclReduce(s, rank == 0 ? r2 : NULL, 64, moecclInt64, moecclMin, 0, comm, NULL));
  MP_OK(moecclGroupEnd());
  for (int i = 0; i < 64; i++) {
    MP_CHECK(r[i] == (int64_t)n * (n - 1) / 2 + (int64_t)n * i, "grouped AllReduce element %d is %lld", i,
             (long long)r[i]);
    if (rank == 0) MP_CHECK(r2[i] == i, "grouped Reduce element %d is %lld", i, (long long)r2[i]);
  }
  return 0;
}

/* On a host stream: rejected at issue, nothing queued. */
static int bad_on_host_stream(moecclComm_t comm, int rank, void* s, void* r) {
  moecclStream_t st = NULL;
  MP_OK(moecclHostStreamCreate(&st));
  BAD(comm, "sendbuff", moecclAllReduce(NULL, r, 4, moecclInt32, moecclSum, comm, st));
  BAD(comm, "op", moecclReduceScatter(s, r, 1, moecclInt32, (moecclRedOp_t)99, comm, st));
  BAD(comm, "root", moecclBcast(r, 4, moecclInt32, -1, comm, st));
  BAD(comm, "recvbuff", moecclGather(s, NULL, 1, moecclInt32, rank, comm, st));
  MP_OK(moecclHostStreamSynchronize(st));
  MP_OK(moecclHostStreamDestroy(st));
  return 0;
}

static int body(moecclComm_t comm, int rank, int n, void* arg) {
  (void)arg;
  size_t bytes = 64 * (size_t)n + 256;
  void* s = mp_xmalloc(bytes);
  void* r = mp_xmalloc(bytes);
  memset(s, 0, bytes);
  memset(r, 0, bytes);
  int bogus_stream_storage[16] = {0};
  moecclStream_t bogus = (moecclStream_t)bogus_stream_storage;
  if (mp_want("reductions") && bad_reductions(comm, rank, n, s, r, bogus)) return 1;
  if (mp_want("gathers") && bad_gathers(comm, rank, n, s, r, bogus)) return 1;
  if (still_works(comm, rank, n, "after the bad collective calls")) return 1;
  if (mp_want("premul") && bad_premul(comm, s, r)) return 1;
  if (still_works(comm, rank, n, "after the bad PreMulSum calls")) return 1;
  if (mp_want("overlap") && bad_overlap(comm, rank, s)) return 1;
  if (mp_want("othercomm") && op_of_other_comm(comm, rank, s, r)) return 1;
  if (still_works(comm, rank, n, "after the overlapping buffers")) return 1;
  if (mp_want("group") && group_with_bad_calls(comm, rank, n)) return 1;
  if (mp_want("stream") && bad_on_host_stream(comm, rank, s, r)) return 1;
  if (still_works(comm, rank, n, "at the end")) return 1;
  free(s);
  free(r);
  if (rank == 0) printf("rank 0: %d of %d bad calls rejected as expected\n", n_checks - n_failed, n_checks);
  return n_failed ? 1 : 0;
}

int main(int argc, char** argv) { return mp_main(argc, argv, mp_default_ranks, body, NULL, 120, NULL); }
