/* AllReduce, ReduceScatter, AllGather, Broadcast, Reduce, Gather, Scatter
 * and the PreMulSum ops: argument checks, then one call for enqueue.c to
 * run or capture.  Nothing is sent before every check passed, so bad input
 * leaves the communicator usable. */
#include "exec/enqueue.h"
#include "comm/span.h"

#include <stdlib.h>
#include <string.h>

/* What one call looks like before it is checked. */
typedef struct {
  const char* fn;
  moeccl_coll_kind_t kind;
  const void* sendbuf;
  void* recvbuf;
  size_t count;
  moecclDataType_t type;
  moecclRedOp_t op;
  int root;
  moecclStream_t stream;
} coll_args_t;

static int is_floating(moecclDataType_t t) {
  return t == moecclFloat16 || t == moecclFloat32 || t == moecclFloat64 || t == moecclBfloat16 ||
         t == moecclFloat8e4m3 || t == moecclFloat8e5m2;
}

static int is_rooted(moeccl_coll_kind_t k) {
  return k == MOECCL_COLL_BROADCAST || k == MOECCL_COLL_REDUCE || k == MOECCL_COLL_GATHER ||
         k == MOECCL_COLL_SCATTER;
}

static int reduces(moeccl_coll_kind_t k) {
  return k == MOECCL_COLL_ALLREDUCE || k == MOECCL_COLL_REDUCE_SCATTER || k == MOECCL_COLL_REDUCE;
}

/* The PreMulSum op behind value op, or NULL. */
static moeccl_redop_t* user_op(moeccl_comm_t* c, moecclRedOp_t op) {
  long i = (long)op - moecclNumOps;
  if (i < 0 || i >= c->nredops || !c->redops[i].in_use) return NULL;
  return &c->redops[i];
}

/* Sets up the call's reduction for op (checked): kernels, the
 * pre-multiplier of PreMulSum and floating Avg, integer Avg's divisor. */
static moecclResult_t setup_red(moeccl_comm_t* c, const coll_args_t* a, moeccl_call_t* call) {
  moeccl_red_op_t kop = a->op < moecclAvg ? (moeccl_red_op_t)a->op : MOECCL_RED_SUM;
  if (moeccl_red_init(&call->red, a->type, kop) != moecclSuccess)
    return moeccl_error(c, moecclInvalidArgument, "%s: op %d is not supported on datatype %d",
                        a->fn, (int)a->op, (int)a->type);
  if (a->op == moecclAvg) {
    if (is_floating(a->type)) moeccl_red_set_premul_inverse(&call->red, c->nranks);
    else call->red.postdiv = c->nranks > 1 ? c->nranks : 0;
  } else if (a->op >= moecclNumOps) {
    const moeccl_redop_t* u = user_op(c, a->op);
    if (u->residence == moecclScalarHostImmediate) moeccl_red_set_premul(&call->red, u->scalar);
    else call->scalar_ptr = u->ptr; /* read when planned */
  }
  return moecclSuccess;
}

static moecclResult_t check_op(moeccl_comm_t* c, const coll_args_t* a) {
  if ((int)a->op >= 0 && a->op < moecclNumOps) return moecclSuccess;
  const moeccl_redop_t* u = (int)a->op < 0 ? NULL : user_op(c, a->op);
  if (!u)
    return moeccl_error(c, moecclInvalidArgument,
                        "%s: op %d is not a reduction operation (neither builtin nor a live "
                        "PreMulSum op of this communicator)",
                        a->fn, (int)a->op);
  if (u->type != a->type)
    return moeccl_error(c, moecclInvalidArgument,
                        "%s: op %d was created for datatype %d, the call uses datatype %d", a->fn,
                        (int)a->op, (int)u->type, (int)a->type);
  return moecclSuccess;
}

/* Elements of the send and receive buffers this rank uses (0: not used). */
static void extents(const moeccl_comm_t* c, const coll_args_t* a, size_t* send, size_t* recv) {
  size_t n = (size_t)c->nranks, cnt = a->count;
  int root = c->rank == a->root;
  switch (a->kind) {
  case MOECCL_COLL_ALLREDUCE: *send = cnt, *recv = cnt; break;
  case MOECCL_COLL_REDUCE_SCATTER: *send = cnt * n, *recv = cnt; break;
  case MOECCL_COLL_ALLGATHER: *send = cnt, *recv = cnt * n; break;
  case MOECCL_COLL_BROADCAST: *send = root ? cnt : 0, *recv = cnt; break;
  case MOECCL_COLL_REDUCE: *send = cnt, *recv = root ? cnt : 0; break;
  case MOECCL_COLL_GATHER: *send = cnt, *recv = root ? cnt * n : 0; break;
  default: *send = root ? cnt * n : 0, *recv = cnt; break; /* scatter */
  }
}

/* Whether the buffers alias as NCCL's in-place form of the collective. */
static int in_place(const moeccl_comm_t* c, const coll_args_t* a, size_t size) {
  const char *s = a->sendbuf, *r = a->recvbuf;
  size_t blk = a->count * size;
  int root = c->rank == a->root;
  switch (a->kind) {
  case MOECCL_COLL_ALLREDUCE: return s == r;
  case MOECCL_COLL_REDUCE_SCATTER: return r == s + (size_t)c->rank * blk;
  case MOECCL_COLL_ALLGATHER: return s == r + (size_t)c->rank * blk;
  case MOECCL_COLL_BROADCAST:
  case MOECCL_COLL_REDUCE: return root && s == r;
  case MOECCL_COLL_GATHER: return root && s == r + (size_t)a->root * blk;
  default: return root && r == s + (size_t)a->root * blk; /* scatter */
  }
}

/* elems elements from buf fit in a buffer the caller can have given (span.h). */
static moecclResult_t check_span(moeccl_comm_t* c, const coll_args_t* a, const void* buf,
                                 const char* name, size_t elems, size_t size) {
  moeccl_span_t why = moeccl_span_check(buf, elems * size, NULL);
  if (why == MOECCL_SPAN_OK) return moecclSuccess;
  return moeccl_error(c, moecclInvalidArgument,
                      "%s on rank %d: count %zu makes %s %p span %zu elements of %zu bytes, "
                      "which would %s",
                      a->fn, c->rank, a->count, name, buf, elems, size, moeccl_span_text(why));
}

static moecclResult_t check_buffers(moeccl_comm_t* c, const coll_args_t* a, size_t size,
                                    int* inplace) {
  size_t send, recv;
  extents(c, a, &send, &recv);
  if (send && !a->sendbuf)
    return moeccl_error(c, moecclInvalidArgument, "%s: sendbuff is NULL with count %zu", a->fn,
                        a->count);
  if (recv && !a->recvbuf)
    return moeccl_error(c, moecclInvalidArgument, "%s: recvbuff is NULL with count %zu", a->fn,
                        a->count);
  MOECCL_CHECK(check_span(c, a, a->sendbuf, "sendbuff", send, size));
  MOECCL_CHECK(check_span(c, a, a->recvbuf, "recvbuff", recv, size));
  *inplace = send && recv && in_place(c, a, size);
  uintptr_t s = (uintptr_t)a->sendbuf, r = (uintptr_t)a->recvbuf;
  if (!*inplace && send && recv && s < r + recv * size && r < s + send * size)
    return moeccl_error(c, moecclInvalidArgument,
                        "%s: sendbuff and recvbuff overlap but not in %s's in-place form", a->fn,
                        a->fn);
  return moecclSuccess;
}

static moecclResult_t check_args(moeccl_comm_t* c, const coll_args_t* a, int* inplace) {
  MOECCL_CHECK(moeccl_comm_check(c, "comm"));
  size_t size = moeccl_type_size(a->type);
  if (size == 0)
    return moeccl_error(c, moecclInvalidArgument, "%s: datatype %d is invalid", a->fn,
                        (int)a->type);
  if (reduces(a->kind)) MOECCL_CHECK(check_op(c, a));
  if (is_rooted(a->kind) && (a->root < 0 || a->root >= c->nranks))
    return moeccl_error(c, moecclInvalidArgument, "%s: root %d out of range [0,%d)", a->fn,
                        a->root, c->nranks);
  if (a->count > SIZE_MAX / size / (size_t)c->nranks)
    return moeccl_error(c, moecclInvalidArgument,
                        "%s: count %zu times %d ranks times datatype size overflows", a->fn,
                        a->count, c->nranks);
  MOECCL_CHECK(check_buffers(c, a, size, inplace));
  return moeccl_stream_check(c, a->stream);
}

static moecclResult_t coll_issue(moeccl_comm_t* c, const coll_args_t* a) {
  int inplace = 0;
  MOECCL_CHECK(check_args(c, a, &inplace));
  if (a->count == 0) return moecclSuccess; /* every rank has count 0: nothing moves */
  moeccl_call_t call = {.kind = MOECCL_CALL_COLL, .sendbuf = a->sendbuf, .recvbuf = a->recvbuf};
  call.coll = (moeccl_coll_desc_t){.kind = a->kind,
                                   .rank = c->rank,
                                   .nranks = c->nranks,
                                   .root = is_rooted(a->kind) ? a->root : 0,
                                   .count = a->count,
                                   .elem_size = moeccl_type_size(a->type),
                                   .reduce = reduces(a->kind),
                                   .in_place = inplace};
  if (call.coll.reduce) MOECCL_CHECK(setup_red(c, a, &call));
  return moeccl_call_issue(c, &call, a->stream);
}

MOECCL_EXPORT moecclResult_t moecclAllReduce(const void* sendbuff, void* recvbuff, size_t count,
                                             moecclDataType_t datatype, moecclRedOp_t op,
                                             moecclComm_t comm, moecclStream_t stream) {
  coll_args_t a = {"moecclAllReduce", MOECCL_COLL_ALLREDUCE, sendbuff, recvbuff, count,
                   datatype, op, 0, stream};
  return coll_issue(comm, &a);
}

MOECCL_EXPORT moecclResult_t moecclReduceScatter(const void* sendbuff, void* recvbuff,
                                                 size_t recvcount, moecclDataType_t datatype,
                                                 moecclRedOp_t op, moecclComm_t comm,
                                                 moecclStream_t stream) {
  coll_args_t a = {"moecclReduceScatter", MOECCL_COLL_REDUCE_SCATTER, sendbuff, recvbuff,
                   recvcount, datatype, op, 0, stream};
  return coll_issue(comm, &a);
}

MOECCL_EXPORT moecclResult_t moecclAllGather(const void* sendbuff, void* recvbuff,
                                             size_t sendcount, moecclDataType_t datatype,
                                             moecclComm_t comm, moecclStream_t stream) {
  coll_args_t a = {"moecclAllGather", MOECCL_COLL_ALLGATHER, sendbuff, recvbuff, sendcount,
                   datatype, moecclSum, 0, stream};
  return coll_issue(comm, &a);
}

MOECCL_EXPORT moecclResult_t moecclBroadcast(const void* sendbuff, void* recvbuff, size_t count,
                                             moecclDataType_t datatype, int root,
                                             moecclComm_t comm, moecclStream_t stream) {
  coll_args_t a = {"moecclBroadcast", MOECCL_COLL_BROADCAST, sendbuff, recvbuff, count,
                   datatype, moecclSum, root, stream};
  return coll_issue(comm, &a);
}

MOECCL_EXPORT moecclResult_t moecclBcast(void* buff, size_t count, moecclDataType_t datatype,
                                         int root, moecclComm_t comm, moecclStream_t stream) {
  coll_args_t a = {"moecclBcast", MOECCL_COLL_BROADCAST, buff, buff, count,
                   datatype, moecclSum, root, stream};
  return coll_issue(comm, &a);
}

MOECCL_EXPORT moecclResult_t moecclReduce(const void* sendbuff, void* recvbuff, size_t count,
                                          moecclDataType_t datatype, moecclRedOp_t op, int root,
                                          moecclComm_t comm, moecclStream_t stream) {
  coll_args_t a = {"moecclReduce", MOECCL_COLL_REDUCE, sendbuff, recvbuff, count,
                   datatype, op, root, stream};
  return coll_issue(comm, &a);
}

MOECCL_EXPORT moecclResult_t moecclGather(const void* sendbuff, void* recvbuff, size_t count,
                                          moecclDataType_t datatype, int root, moecclComm_t comm,
                                          moecclStream_t stream) {
  coll_args_t a = {"moecclGather", MOECCL_COLL_GATHER, sendbuff, recvbuff, count,
                   datatype, moecclSum, root, stream};
  return coll_issue(comm, &a);
}

MOECCL_EXPORT moecclResult_t moecclScatter(const void* sendbuff, void* recvbuff, size_t count,
                                           moecclDataType_t datatype, int root, moecclComm_t comm,
                                           moecclStream_t stream) {
  coll_args_t a = {"moecclScatter", MOECCL_COLL_SCATTER, sendbuff, recvbuff, count,
                   datatype, moecclSum, root, stream};
  return coll_issue(comm, &a);
}

/* ---- PreMulSum ops -------------------------------------------------------- */

static int free_slot(moeccl_comm_t* c) {
  for (int i = 0; i < c->nredops; i++)
    if (!c->redops[i].in_use) return i;
  moeccl_redop_t* p = realloc(c->redops, sizeof(*p) * (size_t)(c->nredops + 1));
  if (!p) return -1;
  c->redops = p;
  return c->nredops++;
}

MOECCL_EXPORT moecclResult_t moecclRedOpCreatePreMulSum(moecclRedOp_t* op, void* scalar,
                                                        moecclDataType_t datatype,
                                                        moecclScalarResidence_t residence,
                                                        moecclComm_t comm) {
  const char* fn = "moecclRedOpCreatePreMulSum";
  MOECCL_CHECK(moeccl_comm_check(comm, "comm"));
  if (!op) return moeccl_error(comm, moecclInvalidArgument, "%s: op is NULL", fn);
  if (!scalar) return moeccl_error(comm, moecclInvalidArgument, "%s: scalar is NULL", fn);
  size_t size = moeccl_type_size(datatype);
  if (size == 0)
    return moeccl_error(comm, moecclInvalidArgument, "%s: datatype %d is invalid", fn,
                        (int)datatype);
  if (residence != moecclScalarDevice && residence != moecclScalarHostImmediate)
    return moeccl_error(comm, moecclInvalidArgument, "%s: residence %d is invalid", fn,
                        (int)residence);
  int i = free_slot(comm);
  if (i < 0) return moeccl_error(comm, moecclSystemError, "%s: out of memory", fn);
  moeccl_redop_t* u = &comm->redops[i];
  *u = (moeccl_redop_t){.in_use = 1, .type = datatype, .residence = residence, .ptr = scalar};
  if (residence == moecclScalarHostImmediate) memcpy(u->scalar, scalar, size);
  *op = (moecclRedOp_t)(moecclNumOps + i);
  return moecclSuccess;
}

MOECCL_EXPORT moecclResult_t moecclRedOpDestroy(moecclRedOp_t op, moecclComm_t comm) {
  MOECCL_CHECK(moeccl_comm_check(comm, "comm"));
  if ((int)op >= 0 && op < moecclNumOps)
    return moeccl_error(comm, moecclInvalidArgument,
                        "moecclRedOpDestroy: op %d is a builtin operation", (int)op);
  moeccl_redop_t* u = (int)op < 0 ? NULL : user_op(comm, op);
  if (!u)
    return moeccl_error(comm, moecclInvalidArgument,
                        "moecclRedOpDestroy: op %d is not a live PreMulSum op of this "
                        "communicator",
                        (int)op);
  u->in_use = 0;
  return moecclSuccess;
}
