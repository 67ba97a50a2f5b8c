/*
 * libnccl.so.2 on moeccl: NCCL 2.28's API and ABI, every call forwarded to
 * libmoeccl's public API (the enum values and the configuration layout are
 * the same, nccl_abi.h).  A separate library, installed apart
 * ($libdir/moeccl/), so that only a process that asks for it through its
 * library path gets it, never one that loads the real NCCL.
 *
 * What moeccl does not do -- the device API (ncclDevCommCreate and the
 * requirements it takes), symmetric windows, shrinking and revoking
 * communicators, several ids per communicator, ncclCommInitAll's one
 * process driving several GPUs -- returns ncclInvalidUsage with the reason
 * logged (once per function, on stderr, "NCCL shim WARN ...") and kept for
 * ncclGetLastError.  Registration (ncclCommRegister) is accepted and
 * ignored: moeccl needs none.  moecclTimeout, which NCCL lacks, comes back
 * as ncclSystemError.
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nccl_abi.h"

#define NCCL_API __attribute__((visibility("default")))
/* The profiling names (pncclX) NCCL exports beside every ncclX. */
#define PROFILING_ALIAS(name) extern __typeof__(name) p##name __attribute__((alias(#name))) NCCL_API

static __thread char shim_error[256];

/* A forwarded call's result; when it failed, moeccl's text is the newest
 * error (ncclGetLastError), not an earlier refusal of the drop-in's. */
static ncclResult_t res(moecclResult_t r) {
  if (r != moecclSuccess) shim_error[0] = '\0';
  return r == moecclTimeout ? (ncclResult_t)moecclSystemError : (ncclResult_t)r;
}

/* Logs (once per function) and keeps the reason of an ncclInvalidUsage
 * for what moeccl does not implement. */
static ncclResult_t unsupported(const char* fn, const char* why, int* logged) {
  snprintf(shim_error, sizeof(shim_error), "%s: %s (moeccl's NCCL drop-in)", fn, why);
  if (!__atomic_exchange_n(logged, 1, __ATOMIC_RELAXED))
    fprintf(stderr, "NCCL shim WARN %s\n", shim_error);
  return (ncclResult_t)moecclInvalidUsage;
}
#define UNSUPPORTED(why)                                                                           \
  do {                                                                                             \
    static int logged_;                                                                            \
    return unsupported(__func__, why, &logged_);                                                   \
  } while (0)

/* The caller's configuration, read by its size, magic and version: a
 * shorter (older) struct leaves the later fields at their defaults. */
static ncclResult_t read_config(const ncclConfig_t* in, moecclConfig_t* out, const char* fn) {
  moecclConfig_t def = MOECCL_CONFIG_INITIALIZER;
  *out = def;
  if (!in) return (ncclResult_t)moecclSuccess;
  if (in->magic != NCCL_ABI_CONFIG_MAGIC || in->size < offsetof(moecclConfig_t, blocking) ||
      in->size > (1u << 16)) {
    snprintf(shim_error, sizeof(shim_error),
             "%s: the ncclConfig_t is not initialised with NCCL_CONFIG_INITIALIZER (size %zu, "
             "magic 0x%x)",
             fn, in->size, in->magic);
    return (ncclResult_t)moecclInvalidArgument;
  }
  size_t n = in->size < sizeof(*out) ? in->size : sizeof(*out);
  memcpy(out, in, n);
  out->size = sizeof(*out), out->magic = def.magic, out->version = def.version;
  return (ncclResult_t)moecclSuccess;
}

/* ---- version, errors ------------------------------------------------------ */

/* MOECCL_NCCL_VERSION: the version code to report instead of 22809 (a
 * decimal NCCL_VERSION_CODE such as 22703); anything else is ignored with
 * a warning. */
NCCL_API ncclResult_t ncclGetVersion(int* version) {
  if (!version) return (ncclResult_t)moecclInvalidArgument;
  int v = NCCL_ABI_VERSION_CODE;
  const char* s = getenv("MOECCL_NCCL_VERSION");
  if (s && *s) {
    char* end;
    long x = strtol(s, &end, 10);
    if (*end == '\0' && x >= 1000 && x <= 999999) v = (int)x;
    else {
      static int warned;
      if (!__atomic_exchange_n(&warned, 1, __ATOMIC_RELAXED))
        fprintf(stderr, "NCCL shim WARN ignoring MOECCL_NCCL_VERSION=%s: not a version code\n", s);
    }
  }
  *version = v;
  return (ncclResult_t)moecclSuccess;
}
PROFILING_ALIAS(ncclGetVersion);

NCCL_API const char* ncclGetErrorString(ncclResult_t result) {
  return moecclGetErrorString((moecclResult_t)result);
}
PROFILING_ALIAS(ncclGetErrorString);

NCCL_API const char* ncclGetLastError(ncclComm_t comm) {
  if (shim_error[0]) return shim_error;
  return moecclGetLastError(comm);
}
PROFILING_ALIAS(ncclGetLastError);

NCCL_API void ncclResetDebugInit(void) {} /* moeccl reads its log settings once */
PROFILING_ALIAS(ncclResetDebugInit);

/* ---- memory --------------------------------------------------------------- */

/* Device memory on the current device, as NCCL's; host memory the node's
 * ranks share where the process has no device backend (moeccl's host
 * path).  ncclMemFree frees either. */
NCCL_API ncclResult_t ncclMemAlloc(void** ptr, size_t size) {
  moecclResult_t rc = moecclMemAllocDevice(ptr, size, -1);
  if (rc == moecclInvalidUsage) rc = moecclMemAlloc(ptr, size); /* no device backend */
  return res(rc);
}
PROFILING_ALIAS(ncclMemAlloc);

NCCL_API ncclResult_t ncclMemFree(void* ptr) { return res(moecclMemFree(ptr)); }
PROFILING_ALIAS(ncclMemFree);

/* ---- communicators ---------------------------------------------------------- */

NCCL_API ncclResult_t ncclGetUniqueId(ncclUniqueId* id) { return res(moecclGetUniqueId(id)); }
PROFILING_ALIAS(ncclGetUniqueId);

NCCL_API ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId id,
                                             int rank, ncclConfig_t* config) {
  moecclConfig_t c;
  ncclResult_t r = read_config(config, &c, __func__);
  if (r != (ncclResult_t)moecclSuccess) return r;
  shim_error[0] = '\0';
  return res(moecclCommInitRankConfig(comm, nranks, id, rank, &c));
}
PROFILING_ALIAS(ncclCommInitRankConfig);

NCCL_API ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank) {
  shim_error[0] = '\0';
  return res(moecclCommInitRank(comm, nranks, id, rank));
}
PROFILING_ALIAS(ncclCommInitRank);

NCCL_API ncclResult_t ncclCommInitAll(ncclComm_t* comms, int ndev, const int* devlist) {
  (void)comms, (void)ndev, (void)devlist;
  UNSUPPORTED("one process driving several devices; run one rank per process");
}
PROFILING_ALIAS(ncclCommInitAll);

NCCL_API ncclResult_t ncclCommInitRankScalable(ncclComm_t* comm, int nranks, int rank, int nId,
                                               ncclUniqueId* ids, ncclConfig_t* config) {
  if (nId == 1 && ids) return ncclCommInitRankConfig(comm, nranks, ids[0], rank, config);
  UNSUPPORTED("more than one unique id per communicator");
}
PROFILING_ALIAS(ncclCommInitRankScalable);

NCCL_API ncclResult_t ncclCommFinalize(ncclComm_t comm) {
  /* moeccl's calls on a NULL stream complete before they return, and
   * moecclCommDestroy waits for host streams: nothing is left to flush. */
  int n;
  return res(moecclCommCount(comm, &n));
}
PROFILING_ALIAS(ncclCommFinalize);

NCCL_API ncclResult_t ncclCommDestroy(ncclComm_t comm) { return res(moecclCommDestroy(comm)); }
PROFILING_ALIAS(ncclCommDestroy);

NCCL_API ncclResult_t ncclCommAbort(ncclComm_t comm) { return res(moecclCommAbort(comm)); }
PROFILING_ALIAS(ncclCommAbort);

NCCL_API ncclResult_t ncclCommRevoke(ncclComm_t comm, int flags) {
  (void)comm, (void)flags;
  UNSUPPORTED("revoking a communicator (use ncclCommAbort)");
}
PROFILING_ALIAS(ncclCommRevoke);

NCCL_API ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t* newcomm,
                                    ncclConfig_t* config) {
  moecclConfig_t c;
  ncclResult_t r = read_config(config, &c, __func__);
  if (r != (ncclResult_t)moecclSuccess) return r;
  return res(moecclCommSplit(comm, color, key, newcomm, &c));
}
PROFILING_ALIAS(ncclCommSplit);

NCCL_API ncclResult_t ncclCommShrink(ncclComm_t comm, int* exclude, int nexclude,
                                     ncclComm_t* newcomm, ncclConfig_t* config, int flags) {
  (void)comm, (void)exclude, (void)nexclude, (void)newcomm, (void)config, (void)flags;
  UNSUPPORTED("shrinking a communicator (ncclCommSplit with MOECCL_SPLIT_NOCOLOR does it)");
}
PROFILING_ALIAS(ncclCommShrink);

NCCL_API ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* err) {
  moecclResult_t e = moecclSuccess;
  moecclResult_t r = moecclCommGetAsyncError(comm, &e);
  if (r == moecclSuccess && err) *err = res(e);
  return res(r);
}
PROFILING_ALIAS(ncclCommGetAsyncError);

NCCL_API ncclResult_t ncclCommCount(const ncclComm_t comm, int* count) {
  return res(moecclCommCount(comm, count));
}
PROFILING_ALIAS(ncclCommCount);

NCCL_API ncclResult_t ncclCommUserRank(const ncclComm_t comm, int* rank) {
  return res(moecclCommUserRank(comm, rank));
}
PROFILING_ALIAS(ncclCommUserRank);

NCCL_API ncclResult_t ncclCommCuDevice(const ncclComm_t comm, int* device) {
  (void)comm, (void)device;
  UNSUPPORTED("moeccl communicators are not bound to a device (host memory for now)");
}
PROFILING_ALIAS(ncclCommCuDevice);

NCCL_API ncclResult_t ncclCommRegister(const ncclComm_t comm, void* buff, size_t size,
                                       void** handle) {
  (void)buff, (void)size;
  int n;
  moecclResult_t r = moecclCommCount(comm, &n);
  if (r == moecclSuccess && handle) *handle = buff; /* nothing to register */
  return res(r);
}
PROFILING_ALIAS(ncclCommRegister);

NCCL_API ncclResult_t ncclCommDeregister(const ncclComm_t comm, void* handle) {
  (void)handle;
  int n;
  return res(moecclCommCount(comm, &n));
}
PROFILING_ALIAS(ncclCommDeregister);

NCCL_API ncclResult_t ncclCommWindowRegister(ncclComm_t comm, void* buff, size_t size,
                                             ncclWindow_t* win, int flags) {
  (void)comm, (void)buff, (void)size, (void)win, (void)flags;
  UNSUPPORTED("symmetric memory windows (the device API)");
}
PROFILING_ALIAS(ncclCommWindowRegister);

NCCL_API ncclResult_t ncclCommWindowDeregister(ncclComm_t comm, ncclWindow_t win) {
  (void)comm, (void)win;
  UNSUPPORTED("symmetric memory windows (the device API)");
}
PROFILING_ALIAS(ncclCommWindowDeregister);

/* ---- reduction operators ------------------------------------------------------ */

NCCL_API ncclResult_t ncclRedOpCreatePreMulSum(ncclRedOp_t* op, void* scalar, ncclDataType_t type,
                                               ncclScalarResidence_t residence, ncclComm_t comm) {
  return res(moecclRedOpCreatePreMulSum(op, scalar, type, residence, comm));
}
PROFILING_ALIAS(ncclRedOpCreatePreMulSum);

NCCL_API ncclResult_t ncclRedOpDestroy(ncclRedOp_t op, ncclComm_t comm) {
  return res(moecclRedOpDestroy(op, comm));
}
PROFILING_ALIAS(ncclRedOpDestroy);

/* ---- collectives and point-to-point ------------------------------------------- */

NCCL_API ncclResult_t ncclReduce(const void* sendbuff, void* recvbuff, size_t count,
                                 ncclDataType_t type, ncclRedOp_t op, int root, ncclComm_t comm,
                                 void* stream) {
  return res(moecclReduce(sendbuff, recvbuff, count, type, op, root, comm, stream));
}
PROFILING_ALIAS(ncclReduce);

NCCL_API ncclResult_t ncclBcast(void* buff, size_t count, ncclDataType_t type, int root,
                                ncclComm_t comm, void* stream) {
  return res(moecclBcast(buff, count, type, root, comm, stream));
}
PROFILING_ALIAS(ncclBcast);

NCCL_API ncclResult_t ncclBroadcast(const void* sendbuff, void* recvbuff, size_t count,
                                    ncclDataType_t type, int root, ncclComm_t comm, void* stream) {
  return res(moecclBroadcast(sendbuff, recvbuff, count, type, root, comm, stream));
}
PROFILING_ALIAS(ncclBroadcast);

NCCL_API ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count,
                                    ncclDataType_t type, ncclRedOp_t op, ncclComm_t comm,
                                    void* stream) {
  return res(moecclAllReduce(sendbuff, recvbuff, count, type, op, comm, stream));
}
PROFILING_ALIAS(ncclAllReduce);

NCCL_API ncclResult_t ncclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                                        ncclDataType_t type, ncclRedOp_t op, ncclComm_t comm,
                                        void* stream) {
  return res(moecclReduceScatter(sendbuff, recvbuff, recvcount, type, op, comm, stream));
}
PROFILING_ALIAS(ncclReduceScatter);

NCCL_API ncclResult_t ncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount,
                                    ncclDataType_t type, ncclComm_t comm, void* stream) {
  return res(moecclAllGather(sendbuff, recvbuff, sendcount, type, comm, stream));
}
PROFILING_ALIAS(ncclAllGather);

NCCL_API ncclResult_t ncclAlltoAll(const void* sendbuff, void* recvbuff, size_t count,
                                   ncclDataType_t type, ncclComm_t comm, void* stream) {
  return res(moecclAlltoAll(sendbuff, recvbuff, count, type, comm, stream));
}
PROFILING_ALIAS(ncclAlltoAll);

NCCL_API ncclResult_t ncclGather(const void* sendbuff, void* recvbuff, size_t count,
                                 ncclDataType_t type, int root, ncclComm_t comm, void* stream) {
  return res(moecclGather(sendbuff, recvbuff, count, type, root, comm, stream));
}
PROFILING_ALIAS(ncclGather);

NCCL_API ncclResult_t ncclScatter(const void* sendbuff, void* recvbuff, size_t count,
                                  ncclDataType_t type, int root, ncclComm_t comm, void* stream) {
  return res(moecclScatter(sendbuff, recvbuff, count, type, root, comm, stream));
}
PROFILING_ALIAS(ncclScatter);

NCCL_API ncclResult_t ncclSend(const void* sendbuff, size_t count, ncclDataType_t type, int peer,
                               ncclComm_t comm, void* stream) {
  return res(moecclSend(sendbuff, count, type, peer, comm, stream));
}
PROFILING_ALIAS(ncclSend);

NCCL_API ncclResult_t ncclRecv(void* recvbuff, size_t count, ncclDataType_t type, int peer,
                               ncclComm_t comm, void* stream) {
  return res(moecclRecv(recvbuff, count, type, peer, comm, stream));
}
PROFILING_ALIAS(ncclRecv);

NCCL_API ncclResult_t ncclGroupStart(void) { return res(moecclGroupStart()); }
PROFILING_ALIAS(ncclGroupStart);

NCCL_API ncclResult_t ncclGroupEnd(void) { return res(moecclGroupEnd()); }
PROFILING_ALIAS(ncclGroupEnd);

NCCL_API ncclResult_t ncclGroupSimulateEnd(ncclSimInfo_t* info) {
  (void)info;
  UNSUPPORTED("simulating a group (a2a_sim prices schedules offline)");
}
PROFILING_ALIAS(ncclGroupSimulateEnd);

/* ---- the device API's host side: not implemented -------------------------------- */

NCCL_API ncclResult_t ncclDevCommCreate(ncclComm_t comm, const void* reqs, void* out) {
  (void)comm, (void)reqs, (void)out;
  UNSUPPORTED("the device API (device-side communication in user kernels)");
}

NCCL_API ncclResult_t ncclDevCommDestroy(ncclComm_t comm, const void* devcomm) {
  (void)comm, (void)devcomm;
  UNSUPPORTED("the device API (device-side communication in user kernels)");
}

NCCL_API ncclResult_t ncclLsaBarrierCreateRequirement(ncclTeam_t team, int n, void* handle,
                                                      void* req) {
  (void)team, (void)n, (void)handle, (void)req;
  UNSUPPORTED("the device API (barriers in user kernels)");
}

NCCL_API ncclResult_t ncclGinBarrierCreateRequirement(ncclComm_t comm, ncclTeam_t team, int n,
                                                      void* handle, void* req) {
  (void)comm, (void)team, (void)n, (void)handle, (void)req;
  UNSUPPORTED("the device API (barriers in user kernels)");
}

NCCL_API ncclResult_t ncclLLA2ACreateRequirement(int blocks, int slots, void* handle, void* req) {
  (void)blocks, (void)slots, (void)handle, (void)req;
  UNSUPPORTED("the device API (all-to-all in user kernels)");
}

NCCL_API int ncclLLA2ACalcSlots(int maxElts, int maxEltSize) {
  (void)maxElts, (void)maxEltSize;
  return 0; /* no slots: the device API is not implemented */
}

/* Teams: the world team is the communicator; the node (LSA) and rail
 * teams belong to the device API and come back empty. */
NCCL_API ncclTeam_t ncclTeamWorld(ncclComm_t comm) {
  ncclTeam_t t = {0, -1, 0};
  int n, r;
  if (moecclCommCount(comm, &n) == moecclSuccess && moecclCommUserRank(comm, &r) == moecclSuccess)
    t = (ncclTeam_t){n, r, 1};
  return t;
}

NCCL_API ncclTeam_t ncclTeamLsa(ncclComm_t comm) {
  (void)comm;
  return (ncclTeam_t){0, -1, 0};
}

NCCL_API ncclTeam_t ncclTeamRail(ncclComm_t comm) {
  (void)comm;
  return (ncclTeam_t){0, -1, 0};
}

NCCL_API int ncclTeamRankToWorld(ncclComm_t comm, ncclTeam_t team, int rank) {
  (void)comm;
  return team.stride > 0 && rank >= 0 && rank < team.nRanks ? rank * team.stride : -1;
}

NCCL_API int ncclTeamRankToLsa(ncclComm_t comm, ncclTeam_t team, int rank) {
  (void)comm, (void)team, (void)rank;
  return -1;
}
