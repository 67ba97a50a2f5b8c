/* moecclAlltoAll and moecclAlltoAllv: argument checks, then one call for
 * enqueue.c to run or capture. */
#include "exec/enqueue.h"
#include "comm/span.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Highest byte (exclusive) a v-call touches in a buffer; sets *bad to the
 * first index whose displacement + count overflows. */
static size_t extent_bytes(const size_t* counts, const size_t* displs, int n, size_t size,
                           int* bad) {
  size_t top = 0;
  *bad = -1;
  for (int i = 0; i < n; i++) {
    if (counts[i] == 0) continue;
    if (displs[i] > SIZE_MAX - counts[i] || displs[i] + counts[i] > SIZE_MAX / size) {
      *bad = i;
      return 0;
    }
    size_t end = (displs[i] + counts[i]) * size;
    if (end > top) top = end;
  }
  return top;
}

/* In place is sendbuff == recvbuff exactly, as in NCCL (plan.c stages the
 * send extent); any other overlap of the two extents is refused. */
static moecclResult_t check_overlap(moeccl_comm_t* c, const void* s, size_t sbytes, const void* r,
                                    size_t rbytes, const char* fn) {
  uintptr_t a = (uintptr_t)s, b = (uintptr_t)r;
  if (a != b && sbytes && rbytes && a < b + rbytes && b < a + sbytes)
    return moeccl_error(c, moecclInvalidArgument,
                        "%s: sendbuff %p and recvbuff %p overlap but are not the same; in place, "
                        "only sendbuff == recvbuff is accepted",
                        fn, s, r);
  return moecclSuccess;
}

static moecclResult_t check_common(moeccl_comm_t* comm, moecclDataType_t type,
                                   moecclStream_t stream, const char* fn) {
  MOECCL_CHECK(moeccl_comm_check(comm, "comm"));
  if (moeccl_type_size(type) == 0)
    return moeccl_error(comm, moecclInvalidArgument, "%s: datatype %d is invalid", fn, (int)type);
  return moeccl_stream_check(comm, stream);
}

/* The nranks blocks of block bytes from buf (moecclAlltoAll) fit in a
 * buffer the caller can have given (span.h); else the first block that
 * does not is named. */
static moecclResult_t check_blocks(moeccl_comm_t* c, const void* buf, const char* bufname,
                                   size_t count, size_t size, const char* fn) {
  size_t n = (size_t)c->nranks, block = count * size;
  moeccl_span_t why = moeccl_span_check(buf, block * n, NULL);
  if (why == MOECCL_SPAN_OK) return moecclSuccess;
  size_t j = 0;
  while (j + 1 < n && moeccl_span_check(buf, (j + 1) * block, NULL) == MOECCL_SPAN_OK) j++;
  return moeccl_error(c, moecclInvalidArgument,
                      "%s on rank %d: count %zu of %zu-byte elements puts the block for rank "
                      "%zu at bytes [%zu, %zu) of %s %p, which would %s",
                      fn, c->rank, count, size, j, j * block, (j + 1) * block, bufname, buf,
                      moeccl_span_text(why));
}

static moecclResult_t check_alltoall(moeccl_comm_t* c, const void* sendbuff, void* recvbuff,
                                     size_t count, moecclDataType_t type, moecclStream_t stream) {
  const char* fn = "moecclAlltoAll";
  MOECCL_CHECK(check_common(c, type, stream, fn));
  size_t size = moeccl_type_size(type);
  if (count > SIZE_MAX / size / (size_t)c->nranks)
    return moeccl_error(c, moecclInvalidArgument,
                        "%s: count %zu times %d ranks times datatype size overflows", fn, count,
                        c->nranks);
  if (count && !sendbuff)
    return moeccl_error(c, moecclInvalidArgument, "%s: sendbuff is NULL with count %zu", fn, count);
  if (count && !recvbuff)
    return moeccl_error(c, moecclInvalidArgument, "%s: recvbuff is NULL with count %zu", fn, count);
  size_t bytes = count * size * (size_t)c->nranks;
  MOECCL_CHECK(check_blocks(c, sendbuff, "sendbuff", count, size, fn));
  MOECCL_CHECK(check_blocks(c, recvbuff, "recvbuff", count, size, fn));
  return check_overlap(c, sendbuff, bytes, recvbuff, bytes, fn);
}

/* The first block (in rank order) of a v-call side whose span leaves any
 * buffer the caller can have given, named with the rank it is for; only
 * after the side's whole extent failed, so O(nranks) checks on this path. */
static moecclResult_t span_culprit(moeccl_comm_t* c, const void* buf, const char* bufname,
                                   const size_t* counts, const char* cname, const size_t* displs,
                                   const char* dname, size_t size) {
  moeccl_span_t why = MOECCL_SPAN_OK;
  int i = 0;
  for (; i < c->nranks; i++) {
    if (!counts[i]) continue;
    why = moeccl_span_check(buf, (displs[i] + counts[i]) * size, NULL);
    if (why != MOECCL_SPAN_OK) break;
  }
  if (i == c->nranks) return moecclSuccess; /* unmapped meanwhile and mapped again: let it be */
  return moeccl_error(c, moecclInvalidArgument,
                      "moecclAlltoAllv on rank %d: %s[%d] = %zu + %s[%d] = %zu elements of %zu "
                      "bytes (the block for rank %d) from %s %p %s",
                      c->rank, dname, i, displs[i], cname, i, counts[i], size, i, bufname, buf,
                      moeccl_span_text(why));
}

static moecclResult_t check_side(moeccl_comm_t* c, const void* buf, const char* bufname,
                                 const size_t* counts, const char* cname, const size_t* displs,
                                 const char* dname, size_t size, size_t* extent) {
  const char* fn = "moecclAlltoAllv";
  if (!counts) return moeccl_error(c, moecclInvalidArgument, "%s: %s is NULL", fn, cname);
  if (!displs) return moeccl_error(c, moecclInvalidArgument, "%s: %s is NULL", fn, dname);
  int bad;
  *extent = extent_bytes(counts, displs, c->nranks, size, &bad);
  if (bad >= 0)
    return moeccl_error(c, moecclInvalidArgument,
                        "%s: %s[%d] + %s[%d] times datatype size overflows", fn, dname, bad, cname,
                        bad);
  if (*extent && !buf)
    return moeccl_error(c, moecclInvalidArgument, "%s: %s is NULL but %s has non-zero counts", fn,
                        bufname, cname);
  if (moeccl_span_check(buf, *extent, NULL) != MOECCL_SPAN_OK)
    return span_culprit(c, buf, bufname, counts, cname, displs, dname, size);
  return moecclSuccess;
}

static moecclResult_t check_alltoallv(moeccl_comm_t* c, const void* sendbuff, const size_t* sc,
                                      const size_t* sd, void* recvbuff, const size_t* rc,
                                      const size_t* rd, moecclDataType_t type,
                                      moecclStream_t stream) {
  MOECCL_CHECK(check_common(c, type, stream, "moecclAlltoAllv"));
  size_t size = moeccl_type_size(type), sext, rext;
  MOECCL_CHECK(check_side(c, sendbuff, "sendbuff", sc, "sendcounts", sd, "sdispls", size, &sext));
  MOECCL_CHECK(check_side(c, recvbuff, "recvbuff", rc, "recvcounts", rd, "rdispls", size, &rext));
  if (sc[c->rank] != rc[c->rank])
    return moeccl_error(
        c, moecclInvalidArgument,
        "moecclAlltoAllv: sendcounts[%d]=%zu but recvcounts[%d]=%zu for the block to self", c->rank,
        sc[c->rank], c->rank, rc[c->rank]);
  return check_overlap(c, sendbuff, sext, recvbuff, rext, "moecclAlltoAllv");
}

static moecclResult_t a2a_issue(moeccl_comm_t* c, const moeccl_a2a_desc_t* d, const void* sendbuf,
                                void* recvbuf, moecclStream_t stream) {
  moeccl_call_t call = {.kind = MOECCL_CALL_A2A, .sendbuf = sendbuf, .recvbuf = recvbuf, .a2a = *d};
  return moeccl_call_issue(c, &call, stream);
}

MOECCL_EXPORT moecclResult_t moecclAlltoAll(const void* sendbuff, void* recvbuff, size_t count,
                                            moecclDataType_t datatype, moecclComm_t comm,
                                            moecclStream_t stream) {
  MOECCL_CHECK(check_alltoall(comm, sendbuff, recvbuff, count, datatype, stream));
  moeccl_a2a_desc_t d = {.rank = comm->rank,
                         .nranks = comm->nranks,
                         .block_bytes = count * moeccl_type_size(datatype),
                         .elem_size = moeccl_type_size(datatype)};
  return a2a_issue(comm, &d, sendbuff, recvbuff, stream);
}

MOECCL_EXPORT moecclResult_t moecclAlltoAllv(const void* sendbuff, const size_t sendcounts[],
                                             const size_t sdispls[], void* recvbuff,
                                             const size_t recvcounts[], const size_t rdispls[],
                                             moecclDataType_t datatype, moecclComm_t comm,
                                             moecclStream_t stream) {
  MOECCL_CHECK(check_alltoallv(comm, sendbuff, sendcounts, sdispls, recvbuff, recvcounts, rdispls,
                               datatype, stream));
  moeccl_a2a_desc_t d = {.rank = comm->rank,
                         .nranks = comm->nranks,
                         .send_counts = sendcounts,
                         .send_displs = sdispls,
                         .recv_counts = recvcounts,
                         .recv_displs = rdispls,
                         .elem_size = moeccl_type_size(datatype)};
  return a2a_issue(comm, &d, sendbuff, recvbuff, stream);
}
