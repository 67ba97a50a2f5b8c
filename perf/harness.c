/*
 * harness.c - the MPI harness's launch (perf_common.h): the element types,
 * small helpers, the MPI types a baseline moves and reduces with, the
 * communicators (one per series of -a) and the buffers moeccl and MPI share.
 */
#include "perf_common.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const struct perf_dtype perf_dtypes[] = {
    {"int8", "char", moecclInt8, 1},         {"uint8", NULL, moecclUint8, 1},
    {"int32", "int", moecclInt32, 4},        {"uint32", NULL, moecclUint32, 4},
    {"int64", NULL, moecclInt64, 8},         {"uint64", NULL, moecclUint64, 8},
    {"half", "float16", moecclFloat16, 2},   {"float", "float32", moecclFloat32, 4},
    {"double", "float64", moecclFloat64, 8}, {"bfloat16", "bf16", moecclBfloat16, 2},
    {"fp8e4m3", "f8e4m3", moecclFloat8e4m3, 1}, {"fp8e5m2", "f8e5m2", moecclFloat8e5m2, 1},
};
const int perf_ndtypes = (int)(sizeof perf_dtypes / sizeof perf_dtypes[0]);

const char* const perf_op_names[moecclNumOps] = {"sum", "prod", "max", "min", "avg"};

const char* perf_prog = "perf";

/* ---- small helpers ------------------------------------------------------ */

void* perf_xcalloc(size_t n, size_t size)
{
  void* p = calloc(n ? n : 1, size ? size : 1);
  if (!p) {
    fprintf(stderr, "%s: out of memory\n", perf_prog);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  return p;
}

static int cmp_double(const void* a, const void* b)
{
  double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}

double perf_median(const double* v, int n)
{
  double* s = perf_xcalloc((size_t)n, sizeof *s);
  memcpy(s, v, (size_t)n * sizeof *s);
  qsort(s, (size_t)n, sizeof *s, cmp_double);
  double m = n % 2 ? s[n / 2] : 0.5 * (s[n / 2 - 1] + s[n / 2]);
  free(s);
  return m;
}

MPI_Datatype perf_mpi_move_type(moecclDataType_t t)
{
  switch (t) {
  case moecclInt8: return MPI_INT8_T;
  case moecclUint8: return MPI_UINT8_T;
  case moecclInt32: return MPI_INT32_T;
  case moecclUint32: return MPI_UINT32_T;
  case moecclInt64: return MPI_INT64_T;
  case moecclUint64: return MPI_UINT64_T;
  case moecclFloat16: return MPI_UINT16_T;
  case moecclFloat32: return MPI_FLOAT;
  case moecclFloat64: return MPI_DOUBLE;
  case moecclBfloat16: return MPI_UINT16_T;
  case moecclFloat8e4m3: return MPI_UINT8_T;
  case moecclFloat8e5m2: return MPI_UINT8_T;
  default: return MPI_DATATYPE_NULL;
  }
}

MPI_Datatype perf_mpi_reduce_type(moecclDataType_t t)
{
  switch (t) {
  case moecclFloat16: case moecclBfloat16: case moecclFloat8e4m3: case moecclFloat8e5m2:
    return MPI_DATATYPE_NULL;
  default: return perf_mpi_move_type(t);
  }
}

MPI_Op perf_mpi_op(moecclRedOp_t op)
{
  switch (op) {
  case moecclSum: return MPI_SUM;
  case moecclProd: return MPI_PROD;
  case moecclMax: return MPI_MAX;
  case moecclMin: return MPI_MIN;
  default: return MPI_OP_NULL;
  }
}

/* ---- communicator and buffers ------------------------------------------- */

void perf_init(struct perf_ctx* c, const char* prog, const struct perf_opts* o)
{
  memset(c, 0, sizeof *c);
  perf_prog = prog;
  c->o = o;
  MPI_Comm_rank(MPI_COMM_WORLD, &c->me);
  MPI_Comm_size(MPI_COMM_WORLD, &c->n);
}

int perf_comm_init(int me, int n, moecclComm_t* comm)
{
  moecclUniqueId id;
  int bad[2] = {0, 0};
  memset(&id, 0, sizeof id);
  moecclResult_t r = me == 0 ? moecclGetUniqueId(&id) : moecclSuccess;
  if (r != moecclSuccess)
    fprintf(stderr, "%s: moecclGetUniqueId failed: %s: %s\n", perf_prog, moecclGetErrorString(r),
            moecclGetLastError(NULL));
  bad[0] = r != moecclSuccess;
  MPI_Bcast(bad, 1, MPI_INT, 0, MPI_COMM_WORLD);
  if (bad[0])
    return -1;
  MPI_Bcast(&id, (int)sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD);
  r = moecclCommInitRank(comm, n, id, me);
  if (r != moecclSuccess)
    fprintf(stderr, "%s: rank %d: moecclCommInitRank failed: %s: %s\n", perf_prog, me,
            moecclGetErrorString(r), moecclGetLastError(NULL));
  bad[1] = r != moecclSuccess;
  MPI_Allreduce(MPI_IN_PLACE, &bad[1], 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (bad[1] && r == moecclSuccess)
    moecclCommAbort(*comm);
  return bad[1] ? -1 : 0;
}

char* perf_buf_alloc(size_t size, int lib)
{
  void* p = NULL;
  if (lib) {
    moecclResult_t r = moecclMemAlloc(&p, size);
    if (r != moecclSuccess) {
      fprintf(stderr, "%s: moecclMemAlloc(%zu) failed: %s: %s\n", perf_prog, size,
              moecclGetErrorString(r), moecclGetLastError(NULL));
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
  } else {
    p = malloc(size);
    if (!p) {
      fprintf(stderr, "%s: malloc(%zu) failed\n", perf_prog, size);
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
  }
  /* Touch every page now so first-touch faults never land in a timing. */
  memset(p, 0, size);
  return p;
}

void perf_buf_free(char* p, int lib)
{
  if (!lib) {
    free(p);
    return;
  }
  moecclResult_t r = moecclMemFree(p);
  if (r != moecclSuccess)
    fprintf(stderr, "%s: moecclMemFree failed: %s\n", perf_prog, moecclGetErrorString(r));
}

void perf_bufs_alloc(struct perf_bufs* B, size_t send_max, size_t recv_max, size_t copy_max,
                     int lib)
{
  B->lib_alloc = lib;
  B->send_cap = send_max ? send_max : 1;
  B->recv_cap = recv_max + PERF_GUARD_BYTES;
  B->copy_cap = copy_max ? copy_max : 1;
  B->send = perf_buf_alloc(B->send_cap, lib);
  B->recv = perf_buf_alloc(B->recv_cap, lib);
  B->copy_src = perf_buf_alloc(B->copy_cap, 0);
  B->copy_dst = perf_buf_alloc(B->copy_cap, 0);
}

void perf_bufs_free(struct perf_bufs* B)
{
  perf_buf_free(B->send, B->lib_alloc);
  perf_buf_free(B->recv, B->lib_alloc);
  free(B->copy_src);
  free(B->copy_dst);
}

/* ---- series of -a ------------------------------------------------------- */

int perf_algo_list(const char* arg, const char* all_list, char*** out)
{
  char* list;
  int n = 0;
  if (!arg) {
    *out = perf_xcalloc(1, sizeof **out);
    return 1;
  }
  if (strcmp(arg, "all") == 0)
    arg = all_list;
  list = strdup(arg);
  *out = perf_xcalloc(strlen(arg) + 1, sizeof **out);
  for (char *save = NULL, *tok = strtok_r(list, ", ", &save); tok; tok = strtok_r(NULL, ", ", &save))
    (*out)[n++] = strdup(tok);
  free(list);
  return n;
}

void perf_algo_env(const char* env, const char* name)
{
  if (name && strcmp(name, "auto") == 0)
    unsetenv(env);
  else if (name)
    setenv(env, name, 1);
}

void perf_algo_label(const char* env, char* dst, size_t len, const char* name)
{
  const char* v = getenv(env);
  snprintf(dst, len, "%s", name ? name : v && *v ? v : "auto");
}

/* One communicator per algorithm, each made with env set to it, because
 * the library may read the variable only when a comm is made. */
int perf_comms_init(const char* env, char** algos, int nalgos, int me, int n, moecclComm_t* comms)
{
  for (int a = 0; a < nalgos; a++) {
    perf_algo_env(env, algos[a]);
    if (perf_comm_init(me, n, &comms[a])) {
      for (int i = 0; i < a; i++)
        moecclCommAbort(comms[i]);
      return -1;
    }
  }
  return 0;
}

int perf_comms_close(moecclComm_t* comms, int nalgos, int failed, int me)
{
  int rc = 0;
  for (int a = 0; a < nalgos; a++) {
    moecclResult_t r = failed ? moecclCommAbort(comms[a]) : moecclCommDestroy(comms[a]);
    if (r != moecclSuccess) {
      fprintf(stderr, "%s: rank %d: closing a communicator failed: %s: %s\n", perf_prog, me,
              moecclGetErrorString(r), moecclGetLastError(comms[a]));
      rc = 1;
    }
  }
  return rc;
}
