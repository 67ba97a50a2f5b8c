/*
 * test_nccl_shim.c - the NCCL drop-in (shim/libnccl.so.2) through NCCL's
 * names only, on host memory: the version (22809, and MOECCL_NCCL_VERSION
 * overriding it), configurations read by size and magic (a short one is
 * accepted, a bad magic refused), two forked ranks, each joining inside a
 * group with a configuration (as nccl-tests does), running AllReduce,
 * AlltoAll, Broadcast and a Send/Recv pair in a group with ncclMemAlloc
 * buffers allocated inside the group, error codes and texts for what the
 * drop-in does not do (the device API, windows, ncclCommInitAll).  Every
 * rank has a deadline (alarm).
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "nccl_abi.h"
#include "unit_check.h"

ncclResult_t ncclGetVersion(int*);
ncclResult_t ncclGetUniqueId(ncclUniqueId*);
ncclResult_t ncclCommInitRank(ncclComm_t*, int, ncclUniqueId, int);
ncclResult_t ncclCommInitRankConfig(ncclComm_t*, int, ncclUniqueId, int, ncclConfig_t*);
ncclResult_t ncclCommDestroy(ncclComm_t);
ncclResult_t ncclCommCount(ncclComm_t, int*);
ncclResult_t ncclCommUserRank(ncclComm_t, int*);
ncclResult_t ncclAllReduce(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t,
                           void*);
ncclResult_t ncclAlltoAll(const void*, void*, size_t, ncclDataType_t, ncclComm_t, void*);
ncclResult_t ncclBroadcast(const void*, void*, size_t, ncclDataType_t, int, ncclComm_t, void*);
ncclResult_t ncclSend(const void*, size_t, ncclDataType_t, int, ncclComm_t, void*);
ncclResult_t ncclRecv(void*, size_t, ncclDataType_t, int, ncclComm_t, void*);
ncclResult_t ncclGroupStart(void);
ncclResult_t ncclGroupEnd(void);
ncclResult_t ncclMemAlloc(void**, size_t);
ncclResult_t ncclMemFree(void*);
const char* ncclGetLastError(ncclComm_t);
ncclResult_t ncclDevCommCreate(ncclComm_t, const void*, void*);
ncclResult_t ncclCommWindowRegister(ncclComm_t, void*, size_t, ncclWindow_t*, int);
ncclResult_t ncclCommInitAll(ncclComm_t*, int, const int*);
ncclResult_t ncclCommRegister(ncclComm_t, void*, size_t, void**);
ncclResult_t ncclCommDeregister(ncclComm_t, void*);
const char* ncclGetLastError(ncclComm_t);
const char* ncclGetErrorString(ncclResult_t);
ncclResult_t pncclAllReduce(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t,
                            void*);

#define OK(call) CHECK((call) == 0, "%s failed", #call)

static void single_process(void) {
  int v = 0;
  OK(ncclGetVersion(&v));
  CHECK(v == 22809, "ncclGetVersion says %d", v);
  setenv("MOECCL_NCCL_VERSION", "22703", 1);
  OK(ncclGetVersion(&v));
  CHECK(v == 22703, "MOECCL_NCCL_VERSION=22703 gave %d", v);
  setenv("MOECCL_NCCL_VERSION", "2.27", 1);
  OK(ncclGetVersion(&v));
  CHECK(v == 22809, "a bad MOECCL_NCCL_VERSION gave %d", v);
  unsetenv("MOECCL_NCCL_VERSION");
  CHECK(sizeof(ncclUniqueId) == 128, "ncclUniqueId is %zu bytes", sizeof(ncclUniqueId));
  CHECK(strlen(ncclGetErrorString((ncclResult_t)5)) > 0, "no error string");

  ncclUniqueId id;
  ncclComm_t comm;
  OK(ncclGetUniqueId(&id));
  ncclConfig_t bad = MOECCL_CONFIG_INITIALIZER;
  bad.magic = 0x1234;
  CHECK(ncclCommInitRankConfig(&comm, 1, id, 0, &bad) == 4, "a bad config magic was accepted");
  CHECK(strstr(ncclGetLastError(NULL), "NCCL_CONFIG_INITIALIZER") != NULL, "text: %s",
        ncclGetLastError(NULL));
  ncclConfig_t old = MOECCL_CONFIG_INITIALIZER; /* an older, shorter ncclConfig_t */
  old.size = offsetof(ncclConfig_t, collnetEnable);
  old.blocking = 1;
  OK(ncclCommInitRankConfig(&comm, 1, id, 0, &old));
  int n = 0, r = -1;
  OK(ncclCommCount(comm, &n));
  OK(ncclCommUserRank(comm, &r));
  CHECK(n == 1 && r == 0, "count %d rank %d", n, r);
  float a[3] = {1, 2, 3}, b[3] = {0};
  OK(pncclAllReduce(a, b, 3, (ncclDataType_t)7, (ncclRedOp_t)0, comm, NULL));
  CHECK(b[2] == 3.0f, "pncclAllReduce on 1 rank: %g", (double)b[2]);
  void* h = NULL;
  OK(ncclCommRegister(comm, a, sizeof(a), &h));
  OK(ncclCommDeregister(comm, h));
  CHECK(ncclDevCommCreate(comm, NULL, NULL) == 5, "ncclDevCommCreate did not say invalid usage");
  CHECK(strstr(ncclGetLastError(comm), "device API") != NULL, "text: %s", ncclGetLastError(comm));
  ncclWindow_t w;
  CHECK(ncclCommWindowRegister(comm, a, sizeof(a), &w, 0) == 5, "windows accepted");
  ncclComm_t all[2];
  int devs[2] = {0, 1};
  CHECK(ncclCommInitAll(all, 2, devs) == 5, "ncclCommInitAll accepted");
  /* a later failure of moeccl's own is the text ncclGetLastError gives */
  CHECK(ncclAllReduce(a, b, 3, (ncclDataType_t)99, (ncclRedOp_t)0, comm, NULL) == 4,
        "a bad datatype was accepted");
  CHECK(strstr(ncclGetLastError(comm), "drop-in") == NULL, "a stale refusal hides the error: %s",
        ncclGetLastError(comm));
  OK(ncclCommDestroy(comm));
}

static int rank_body(int rank, ncclUniqueId id) {
  alarm(60);
  ncclComm_t comm;
  /* as nccl-tests does: the configured init inside a group */
  ncclConfig_t config = MOECCL_CONFIG_INITIALIZER;
  OK(ncclGroupStart());
  OK(ncclCommInitRankConfig(&comm, 2, id, rank, &config));
  OK(ncclGroupEnd());
  const size_t n = 100000;
  float *s = NULL, *d = NULL;
  OK(ncclGroupStart()); /* ncclMemAlloc inside a group, as nccl-tests does */
  OK(ncclMemAlloc((void**)&s, 2 * n * sizeof(float)));
  OK(ncclMemAlloc((void**)&d, 2 * n * sizeof(float)));
  OK(ncclGroupEnd());
  if (!s || !d) return 1;
  for (size_t i = 0; i < 2 * n; i++) s[i] = (float)(rank + 1) * (float)(i % 97);
  OK(ncclAllReduce(s, d, 2 * n, (ncclDataType_t)7, (ncclRedOp_t)0, comm, NULL));
  for (size_t i = 0; i < 2 * n; i++)
    if (d[i] != 3.0f * (float)(i % 97)) {
      CHECK(0, "rank %d: AllReduce element %zu is %g", rank, i, (double)d[i]);
      break;
    }
  OK(ncclAlltoAll(s, d, n, (ncclDataType_t)7, comm, NULL));
  for (size_t p = 0; p < 2; p++) /* block p came from rank p's block `rank` */
    CHECK(d[p * n + 5] == (float)(p + 1) * (float)((rank * n + 5) % 97),
          "rank %d: AlltoAll block %zu is wrong", rank, p);
  /* Issue 25, item 1: counts that reach past the ncclMemAlloc buffers, or
   * into memory nothing mapped, are refused; the communicator goes on. */
  size_t far = (size_t)1 << 38; /* in place, so no overlap of two buffers is the reason */
  CHECK(ncclAlltoAll(d, d, n + 4096, (ncclDataType_t)7, comm, NULL) == moecclInvalidArgument &&
            strstr(ncclGetLastError(comm), "allocation"),
        "rank %d: AlltoAll past the ncclMemAlloc buffer: %s", rank, ncclGetLastError(comm));
  CHECK(ncclAllReduce(d, d, 2 * n + 4096, (ncclDataType_t)7, (ncclRedOp_t)0, comm, NULL) ==
                moecclInvalidArgument &&
            strstr(ncclGetLastError(comm), "allocation"),
        "rank %d: AllReduce past the ncclMemAlloc buffer: %s", rank, ncclGetLastError(comm));
  float* heap = malloc(64);
  CHECK(heap &&
            ncclAlltoAll(heap, heap, far, (ncclDataType_t)7, comm, NULL) == moecclInvalidArgument &&
            strstr(ncclGetLastError(comm), "not mapped"),
        "rank %d: AlltoAll of 2^38 floats from a malloc buffer: %s", rank, ncclGetLastError(comm));
  free(heap);
  OK(ncclBroadcast(s, d, n, (ncclDataType_t)7, 1, comm, NULL));
  CHECK(d[10] == 2.0f * 10.0f, "rank %d: Broadcast from rank 1 gave %g", rank, (double)d[10]);
  OK(ncclGroupStart());
  OK(ncclSend(s, n, (ncclDataType_t)7, 1 - rank, comm, NULL));
  OK(ncclRecv(d, n, (ncclDataType_t)7, 1 - rank, comm, NULL));
  OK(ncclGroupEnd());
  CHECK(d[96] == (float)(2 - rank) * 96.0f, "rank %d: Recv gave %g", rank, (double)d[96]);
  OK(ncclMemFree(s));
  OK(ncclMemFree(d));
  OK(ncclCommDestroy(comm));
  return failures ? 1 : 0;
}

int main(void) {
  single_process();
  ncclUniqueId id;
  OK(ncclGetUniqueId(&id));
  pid_t pid = fork();
  if (pid == 0) _exit(rank_body(1, id));
  int mine = rank_body(0, id), status = 0;
  waitpid(pid, &status, 0);
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "rank 1 failed (status %d)", status);
  CHECK(mine == 0, "rank 0 failed");
  printf("test_nccl_shim: %s (%d failures)\n", failures ? "FAIL" : "PASS", failures);
  return failures ? 1 : 0;
}
