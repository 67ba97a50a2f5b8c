/*
 * moeccl.h - public API of libmoeccl, the MoE all-to-all communication library.
 *
 * The API mirrors NCCL 2.28 (moeccl* for nccl*): same result and datatype
 * values, same call shapes.  It adds what NCCL lacks: moecclAlltoAllv, host
 * memory as a first-class buffer type, and library-owned host streams for
 * asynchronous host operations.  See moeccl(3).
 */
#ifndef MOECCL_H_
#define MOECCL_H_

#include <limits.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#define MOECCL_MAJOR 0
#define MOECCL_MINOR 1
#define MOECCL_PATCH 0
#define MOECCL_SUFFIX ""
#define MOECCL_VERSION(X, Y, Z) ((X)*10000 + (Y)*100 + (Z))
#define MOECCL_VERSION_CODE MOECCL_VERSION(MOECCL_MAJOR, MOECCL_MINOR, MOECCL_PATCH)

/* Opaque communicator handle. */
typedef struct moecclComm* moecclComm_t;

/* A stream: NULL (synchronous on host memory), a host stream made by
 * moecclHostStreamCreate, or (CUDA builds) a cudaStream_t. */
typedef void* moecclStream_t;

#define MOECCL_COMM_NULL NULL
#define MOECCL_UNIQUE_ID_BYTES 128
typedef struct {
  char internal[MOECCL_UNIQUE_ID_BYTES];
} moecclUniqueId;

/* Result codes: same values as NCCL's ncclResult_t, plus moecclTimeout. */
typedef enum {
  moecclSuccess = 0,
  moecclUnhandledCudaError = 1,
  moecclSystemError = 2,
  moecclInternalError = 3,
  moecclInvalidArgument = 4,
  moecclInvalidUsage = 5,
  moecclRemoteError = 6,
  moecclInProgress = 7,
  moecclTimeout = 8,
  moecclNumResults = 9
} moecclResult_t;

/* Datatypes: same values as NCCL's ncclDataType_t. */
typedef enum {
  moecclInt8 = 0,
  moecclChar = 0,
  moecclUint8 = 1,
  moecclInt32 = 2,
  moecclInt = 2,
  moecclUint32 = 3,
  moecclInt64 = 4,
  moecclUint64 = 5,
  moecclFloat16 = 6,
  moecclHalf = 6,
  moecclFloat32 = 7,
  moecclFloat = 7,
  moecclFloat64 = 8,
  moecclDouble = 8,
  moecclBfloat16 = 9,
  moecclFloat8e4m3 = 10,
  moecclFloat8e5m2 = 11,
  moecclNumTypes = 12
} moecclDataType_t;

/* Reduction operations: same values as NCCL's ncclRedOp_t.  Ops made by
 * moecclRedOpCreatePreMulSum take values from moecclNumOps up. */
typedef enum {
  moecclSum = 0,
  moecclProd = 1,
  moecclMax = 2,
  moecclMin = 3,
  moecclAvg = 4,
  moecclNumOps = 5,
  moecclMaxRedOp = 0x7fffffff
} moecclRedOp_t;

/* Where a PreMulSum scalar lives: moecclScalarHostImmediate, read at
 * creation; moecclScalarDevice, a pointer read when each operation runs
 * (on host memory builds, any memory the process can read). */
typedef enum { moecclScalarDevice = 0, moecclScalarHostImmediate = 1 } moecclScalarResidence_t;

/* Color for moecclCommSplit: the calling rank joins no new communicator. */
#define MOECCL_SPLIT_NOCOLOR -1

#define MOECCL_CONFIG_UNDEF_INT INT_MIN
#define MOECCL_CONFIG_UNDEF_PTR NULL

/* Communicator configuration; initialise with MOECCL_CONFIG_INITIALIZER.
 * Same fields as NCCL 2.28's ncclConfig_t; moeccl reads blocking, commName,
 * netName and splitShare and accepts (ignores) the GPU-kernel fields. */
typedef struct moecclConfig_v1 {
  size_t size;
  unsigned int magic;
  unsigned int version;
  int blocking;
  int cgaClusterSize;
  int minCTAs;
  int maxCTAs;
  const char* netName;
  int splitShare;
  int trafficClass;
  const char* commName;
  int collnetEnable;
  int CTAPolicy;
  int shrinkShare;
  int nvlsCTAs;
  int nChannelsPerNetPeer;
  int nvlinkCentricSched;
} moecclConfig_t;

#define MOECCL_CONFIG_MAGIC 0xcafebeef
#define MOECCL_CONFIG_INITIALIZER                                                                  \
  {                                                                                                \
    sizeof(moecclConfig_t), MOECCL_CONFIG_MAGIC, MOECCL_VERSION_CODE, MOECCL_CONFIG_UNDEF_INT,     \
        MOECCL_CONFIG_UNDEF_INT, MOECCL_CONFIG_UNDEF_INT, MOECCL_CONFIG_UNDEF_INT,                 \
        MOECCL_CONFIG_UNDEF_PTR, MOECCL_CONFIG_UNDEF_INT, MOECCL_CONFIG_UNDEF_INT,                 \
        MOECCL_CONFIG_UNDEF_PTR, MOECCL_CONFIG_UNDEF_INT, MOECCL_CONFIG_UNDEF_INT,                 \
        MOECCL_CONFIG_UNDEF_INT, MOECCL_CONFIG_UNDEF_INT, MOECCL_CONFIG_UNDEF_INT,                 \
        MOECCL_CONFIG_UNDEF_INT                                                                    \
  }

/* ---- Version, errors ---------------------------------------------------- */

/* Writes MOECCL_VERSION_CODE of the library (not of the header) to *version. */
moecclResult_t moecclGetVersion(int* version);
/* Static text for a result code; never NULL. */
const char* moecclGetErrorString(moecclResult_t result);
/* Text of the last error seen on comm (or by this thread when comm is NULL):
 * names the argument or the peer at fault.  "" when there was none. */
const char* moecclGetLastError(moecclComm_t comm);

/* ---- Communicators ------------------------------------------------------ */

/* Makes a fresh id on the root rank; broadcast it to every rank out of band.
 * The calling process serves the rendezvous until all ranks have joined. */
moecclResult_t moecclGetUniqueId(moecclUniqueId* uniqueId);
/* Collective over nranks processes: joins the communicator commId as rank. */
moecclResult_t moecclCommInitRank(moecclComm_t* comm, int nranks, moecclUniqueId commId, int rank);
moecclResult_t moecclCommInitRankConfig(moecclComm_t* comm, int nranks, moecclUniqueId commId,
                                        int rank, moecclConfig_t* config);
/* Collective over comm: ranks with the same color form a new communicator,
 * ordered by key (ties by old rank).  MOECCL_SPLIT_NOCOLOR gives *newcomm NULL. */
moecclResult_t moecclCommSplit(moecclComm_t comm, int color, int key, moecclComm_t* newcomm,
                               moecclConfig_t* config);
/* Collective: waits for this rank's outstanding operations, frees resources. */
moecclResult_t moecclCommDestroy(moecclComm_t comm);
/* Local: abandons outstanding operations and frees resources without waiting
 * for peers (use after an error such as a dead peer). */
moecclResult_t moecclCommAbort(moecclComm_t comm);
moecclResult_t moecclCommCount(const moecclComm_t comm, int* count);
moecclResult_t moecclCommUserRank(const moecclComm_t comm, int* rank);
/* moecclSuccess, or the error that broke the communicator asynchronously
 * (a dead peer, a failed host-stream operation), or moecclInProgress. */
moecclResult_t moecclCommGetAsyncError(moecclComm_t comm, moecclResult_t* asyncError);

/* ---- Memory ------------------------------------------------------------- */

/* Host memory that every rank of the node can map: transfers from and to it
 * skip the system call of the single-copy path.  Any memory works with moeccl;
 * this memory is only faster.  Free with moecclMemFree. */
moecclResult_t moecclMemAlloc(void** ptr, size_t size);
/* Device memory on device (an ordinal of the device backend: CUDA, or the
 * host emulation with MOECCL_DEVICE=emu; -1: the calling thread's current
 * device, as ncclMemAlloc) that local peers can import: the shared-memory
 * transport copies device buffers from it once, with the copy engine
 * (moecclMemAllocDevice(3)).  moecclInvalidUsage when the process has no
 * device backend.  Free with moecclMemFree, which frees either kind.
 * Device buffers work in every call between ranks of one node; a call's
 * stream may then be a device stream (cudaStream_t), on which it is queued. */
moecclResult_t moecclMemAllocDevice(void** ptr, size_t size, int device);
moecclResult_t moecclMemFree(void* ptr);

/* ---- Collectives and point-to-point ------------------------------------- */

/* Each rank sends count elements to every rank: block j of sendbuff (at
 * j*count elements) goes to rank j, block i of rank j's recvbuff comes from i. */
moecclResult_t moecclAlltoAll(const void* sendbuff, void* recvbuff, size_t count,
                              moecclDataType_t datatype, moecclComm_t comm, moecclStream_t stream);
/* Uneven all-to-all: sendcounts[j] elements at sdispls[j] go to rank j, which
 * receives them at its rdispls[i] (recvcounts[i] elements).  Counts and
 * displacements are in elements; bytes outside the blocks are not touched. */
moecclResult_t moecclAlltoAllv(const void* sendbuff, const size_t sendcounts[],
                               const size_t sdispls[], void* recvbuff, const size_t recvcounts[],
                               const size_t rdispls[], moecclDataType_t datatype, moecclComm_t comm,
                               moecclStream_t stream);
/* Reductions and gathers, NCCL's semantics: in place when sendbuff ==
 * recvbuff (AllReduce, Broadcast, Reduce), sendbuff == recvbuff +
 * rank*sendcount (AllGather), recvbuff == sendbuff + rank*recvcount
 * (ReduceScatter).  Root-only buffers: Broadcast and Scatter read sendbuff on
 * the root only; Reduce and Gather write recvbuff on the root only.  Avg on
 * integer types is the wrapped sum divided by nranks (C division). */
moecclResult_t moecclAllReduce(const void* sendbuff, void* recvbuff, size_t count,
                               moecclDataType_t datatype, moecclRedOp_t op, moecclComm_t comm,
                               moecclStream_t stream);
/* recvcount elements per rank: rank i gets block i of the reduced sendbuff
 * (nranks * recvcount elements). */
moecclResult_t moecclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                                   moecclDataType_t datatype, moecclRedOp_t op, moecclComm_t comm,
                                   moecclStream_t stream);
/* recvbuff (nranks * sendcount elements) holds every rank's sendbuff in rank order. */
moecclResult_t moecclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount,
                               moecclDataType_t datatype, moecclComm_t comm, moecclStream_t stream);
moecclResult_t moecclBroadcast(const void* sendbuff, void* recvbuff, size_t count,
                               moecclDataType_t datatype, int root, moecclComm_t comm,
                               moecclStream_t stream);
/* In-place Broadcast (sendbuff == recvbuff == buff). */
moecclResult_t moecclBcast(void* buff, size_t count, moecclDataType_t datatype, int root,
                           moecclComm_t comm, moecclStream_t stream);
moecclResult_t moecclReduce(const void* sendbuff, void* recvbuff, size_t count,
                            moecclDataType_t datatype, moecclRedOp_t op, int root,
                            moecclComm_t comm, moecclStream_t stream);
/* count elements from every rank into the root's recvbuff, in rank order. */
moecclResult_t moecclGather(const void* sendbuff, void* recvbuff, size_t count,
                            moecclDataType_t datatype, int root, moecclComm_t comm,
                            moecclStream_t stream);
/* Block i (count elements) of the root's sendbuff to rank i's recvbuff. */
moecclResult_t moecclScatter(const void* sendbuff, void* recvbuff, size_t count,
                             moecclDataType_t datatype, int root, moecclComm_t comm,
                             moecclStream_t stream);
/* A sum whose every input is multiplied by *scalar (one element of datatype)
 * first; usable on comm with collectives of that datatype until destroyed. */
moecclResult_t moecclRedOpCreatePreMulSum(moecclRedOp_t* op, void* scalar,
                                          moecclDataType_t datatype,
                                          moecclScalarResidence_t residence, moecclComm_t comm);
moecclResult_t moecclRedOpDestroy(moecclRedOp_t op, moecclComm_t comm);

/* Point-to-point, matched in issue order per (sender, receiver) pair.  Put
 * sends and receives that depend on each other inside one group. */
moecclResult_t moecclSend(const void* sendbuff, size_t count, moecclDataType_t datatype, int peer,
                          moecclComm_t comm, moecclStream_t stream);
moecclResult_t moecclRecv(void* recvbuff, size_t count, moecclDataType_t datatype, int peer,
                          moecclComm_t comm, moecclStream_t stream);
/* Groups: calls between moecclGroupStart and moecclGroupEnd are issued
 * together at moecclGroupEnd.  Groups nest; the outermost end issues. */
moecclResult_t moecclGroupStart(void);
moecclResult_t moecclGroupEnd(void);

/* ---- Host streams (moeccl extension) ------------------------------------ */

/* A host stream is an in-order queue served by a library thread.  An
 * operation issued on it returns at once after its arguments are checked;
 * the caller must keep the buffers alive and unchanged until the stream is
 * synchronized.  Count and displacement arrays are copied at issue time. */
moecclResult_t moecclHostStreamCreate(moecclStream_t* stream);
/* Waits until every operation issued on the stream so far has finished;
 * returns the first error any of them met (and clears it). */
moecclResult_t moecclHostStreamSynchronize(moecclStream_t stream);
/* moecclSuccess when the stream is idle, moecclInProgress while work is
 * queued or running, or the first error met. */
moecclResult_t moecclHostStreamQuery(moecclStream_t stream);
/* Synchronizes, then frees the stream. */
moecclResult_t moecclHostStreamDestroy(moecclStream_t stream);

#ifdef __cplusplus
}
#endif

#endif /* MOECCL_H_ */
