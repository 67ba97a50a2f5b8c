/*
 * perf_common.c - the harness shared by the moeccl benchmarks; see
 * perf_common.h.
 */
#define _GNU_SOURCE /* sched_getaffinity, CPU_COUNT */
#include "perf_common.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sched.h>
#include <stdatomic.h>
#include <sys/socket.h>

#define HOST_LEN 64
#define NET_ADDR_DEFAULT "127.0.0.1"
#define NET_SETUP_MS 20000 /* net roofline: wait for a peer's connection */
#define NET_STALL_S 60     /* net roofline: no byte moved for this long */

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

uint64_t perf_mix64(uint64_t x)
{
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
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

/* ---- options ------------------------------------------------------------ */

static void usage(const char* prog, const struct perf_tool* t)
{
  printf("usage: mpirun -np N %s [options]\n"
         "  -b, --minbytes SIZE      smallest size, %s (K/M/G; default 32M)\n"
         "  -e, --maxbytes SIZE      largest size (default 32M)\n"
         "  -f, --stepfactor N       multiply the size by N each step (default 2)\n"
         "%s"
         "  -n, --iters N            timed calls per rep (default 20)\n"
         "  -w, --warmup_iters N     untimed calls per series (default 5)\n"
         "  -c, --check 0|1          verify every received element (default 1)\n"
         "  -d, --datatype TYPE      int8 uint8 int32 uint32 int64 uint64 half|float16\n"
         "                           float|float32 double|float64 bfloat16 fp8e4m3 fp8e5m2\n"
         "                           %s\n"
         "%s"
         "  -M, --memalloc           buffers from moecclMemAlloc instead of malloc\n"
         "      --baseline mpi|none  baseline library (default mpi)\n"
         "%s"
         "      --json FILE          also write every row to FILE as a JSON array\n"
         "%s"
         "  -h, --help               this text\n"
         "%s",
         prog, t->size_what, t->help_step ? t->help_step : "",
         t->help_dtype ? t->help_dtype : "(default float)", t->help_mid ? t->help_mid : "",
         t->help_late ? t->help_late : "", t->help_end ? t->help_end : "",
         t->help_notes ? t->help_notes : "");
}

static int parse_dtype(const char* s, struct perf_opts* o, int all_ok)
{
  if (all_ok && strcmp(s, "all") == 0) {
    o->dt = NULL;
    return 0;
  }
  for (int i = 0; i < perf_ndtypes; i++) {
    if (strcmp(s, perf_dtypes[i].name) == 0 ||
        (perf_dtypes[i].alias && strcmp(s, perf_dtypes[i].alias) == 0)) {
      o->dt = &perf_dtypes[i];
      return 0;
    }
  }
  return -1;
}

int perf_parse_net(const char* arg, struct perf_opts* o)
{
  /* A numeric address only: every rank binds it, so a name that resolves
   * differently from rank to rank cannot creep in. */
  struct addrinfo hints, *ai = NULL;
  memset(&hints, 0, sizeof hints);
  hints.ai_flags = AI_NUMERICHOST;
  hints.ai_socktype = SOCK_STREAM;
  o->net_roof = 1;
  o->net_addr = arg ? arg : NET_ADDR_DEFAULT;
  if (getaddrinfo(o->net_addr, NULL, &hints, &ai) != 0)
    return -1;
  freeaddrinfo(ai);
  return 0;
}

static void set_defaults(struct perf_opts* o)
{
  memset(o, 0, sizeof *o);
  o->minbytes = o->maxbytes = 32u << 20;
  o->step = 2;
  o->iters = 20;
  o->warmup = 5;
  o->check = 1;
  o->reps = 5;
  o->mpi_baseline = 1;
  o->dt = &perf_dtypes[7]; /* float */
  o->op = moecclSum;
  o->root = 0;
}

enum { OPT_BASELINE = 200, OPT_JSON };

static const struct option common_opts[] = {
    {"minbytes", required_argument, NULL, 'b'},  {"maxbytes", required_argument, NULL, 'e'},
    {"stepfactor", required_argument, NULL, 'f'}, {"iters", required_argument, NULL, 'n'},
    {"warmup_iters", required_argument, NULL, 'w'}, {"check", required_argument, NULL, 'c'},
    {"datatype", required_argument, NULL, 'd'},  {"memalloc", no_argument, NULL, 'M'},
    {"baseline", required_argument, NULL, OPT_BASELINE},
    {"json", required_argument, NULL, OPT_JSON}, {"help", no_argument, NULL, 'h'},
    {NULL, 0, NULL, 0}};

static const char* opt_name(const struct option* all, int c)
{
  for (const struct option* p = all; p->name; p++)
    if (p->val == c)
      return p->name;
  return "?";
}

/* One common option; 0, -1 with the value rejected, or 1 when not common. */
static int apply_common(int c, const char* arg, struct perf_opts* o, const struct perf_tool* t)
{
  int step;
  switch (c) {
  case 'b': return perf_parse_size(arg, &o->minbytes);
  case 'e': return perf_parse_size(arg, &o->maxbytes);
  case 'f':
    if (perf_parse_int(arg, 1, 1 << 20, &step))
      return -1;
    o->step = (size_t)step;
    o->stepbytes = 0;
    return 0;
  case 'n': return perf_parse_int(arg, 1, INT_MAX, &o->iters);
  case 'w': return perf_parse_int(arg, 0, INT_MAX, &o->warmup);
  case 'c': return perf_parse_int(arg, 0, 1, &o->check);
  case 'd': return parse_dtype(arg, o, t->types_all);
  case 'M': o->memalloc = 1; return 0;
  case OPT_BASELINE:
    if (strcmp(arg, "mpi") && strcmp(arg, "none"))
      return -1;
    o->mpi_baseline = strcmp(arg, "mpi") == 0;
    return 0;
  case OPT_JSON: o->json = arg; return 0;
  default: return 1;
  }
}

int perf_parse_opts(int argc, char** argv, int me, const struct perf_tool* t, struct perf_opts* o)
{
  size_t nc = sizeof common_opts / sizeof common_opts[0] - 1, ne = 0;
  while (t->longopts && t->longopts[ne].name)
    ne++;
  struct option* all = perf_xcalloc(nc + ne + 1, sizeof *all);
  memcpy(all, common_opts, nc * sizeof *all);
  if (ne)
    memcpy(all + nc, t->longopts, ne * sizeof *all);
  char shortopts[64];
  snprintf(shortopts, sizeof shortopts, "b:e:f:n:w:c:d:Mh%s", t->shortopts ? t->shortopts : "");
  int c, rc = 0;
  set_defaults(o);
  opterr = me == 0;
  while (rc == 0 && (c = getopt_long(argc, argv, shortopts, all, NULL)) != -1) {
    if (c == 'h') {
      if (me == 0)
        usage(argv[0], t);
      rc = 1;
      break;
    }
    int r = c == '?' ? -1 : apply_common(c, optarg, o, t);
    if (r == 1)
      r = t->apply ? t->apply(c, optarg, o, t->state) : -1;
    if (r) {
      if (me == 0 && c != '?')
        fprintf(stderr, "%s: bad value '%s' for --%s (see -h)\n", perf_prog, optarg ? optarg : "",
                opt_name(all, c));
      rc = 2;
    }
  }
  free(all);
  if (rc)
    return rc;
  const char* why = NULL;
  if (optind < argc)
    why = "unexpected argument";
  else if (o->minbytes == 0 || o->minbytes > o->maxbytes)
    why = "need 0 < minbytes <= maxbytes";
  else if (o->stepbytes == 0 && o->step < 2 && o->minbytes != o->maxbytes)
    why = "stepfactor must be >= 2 unless minbytes == maxbytes";
  if (why && me == 0)
    fprintf(stderr, "%s: %s (see -h)\n", perf_prog, why);
  return why ? 2 : 0;
}

size_t perf_next_size(const struct perf_opts* o, size_t s)
{
  if (o->stepbytes)
    return s > o->maxbytes - o->stepbytes || s + o->stepbytes > o->maxbytes ? 0 : s + o->stepbytes;
  if (o->step < 2 || s > o->maxbytes / o->step)
    return 0;
  return s * o->step;
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

static char* buf_alloc(size_t size, int lib)
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

static void buf_release(char* p, int lib)
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
  B->send = buf_alloc(B->send_cap, lib);
  B->recv = buf_alloc(B->recv_cap, lib);
  B->copy_src = buf_alloc(B->copy_cap, 0);
  B->copy_dst = buf_alloc(B->copy_cap, 0);
}

void perf_bufs_free(struct perf_bufs* B)
{
  buf_release(B->send, B->lib_alloc);
  buf_release(B->recv, B->lib_alloc);
  free(B->copy_src);
  free(B->copy_dst);
}

/* ---- timing and checking ------------------------------------------------ */

moecclResult_t perf_moe_result(struct perf_ctx* c, moecclResult_t r, const char* call,
                               size_t bytes)
{
  if (r != moecclSuccess && c->err == moecclSuccess) {
    c->err = r;
    fprintf(stderr, "# rank %d: moeccl%s (%zu bytes) failed: %s: %s\n", c->me, call, bytes,
            moecclGetErrorString(r), moecclGetLastError(c->comm));
  }
  return r;
}

/* Runs calls back to back after a barrier and returns the slowest rank's
 * mean time per call in us.  Also tells every rank whether any moeccl call
 * failed anywhere, so all ranks leave together instead of hanging. */
static double run_series(struct perf_ctx* c, const struct perf_ops* ops, enum perf_lib lib,
                         int calls, int* failed)
{
  double t[2];
  MPI_Barrier(MPI_COMM_WORLD);
  double t0 = MPI_Wtime();
  for (int i = 0; i < calls; i++) {
    if (lib == PERF_MPI)
      ops->mpi(c);
    else if (ops->moe(c) != moecclSuccess)
      break;
  }
  t[0] = calls ? (MPI_Wtime() - t0) / calls * 1e6 : 0.0;
  t[1] = c->err != moecclSuccess;
  MPI_Allreduce(MPI_IN_PLACE, t, 2, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  *failed = t[1] > 0.0;
  return t[0];
}

static void clear_recv(struct perf_ctx* c, const struct perf_ops* ops)
{
  if (ops->clear)
    ops->clear(c);
  else
    memset(c->B.recv, PERF_SENTINEL, c->recv_bytes + PERF_GUARD_BYTES);
}

long long perf_check_once(struct perf_ctx* c, const struct perf_ops* ops, enum perf_lib lib)
{
  long long v[2];
  ops->fill(c);
  clear_recv(c, ops);
  MPI_Barrier(MPI_COMM_WORLD);
  if (lib == PERF_MPI)
    ops->mpi(c);
  else
    ops->moe(c);
  c->lib = lib;
  v[0] = ops->verify(c);
  v[1] = c->err != moecclSuccess;
  MPI_Allreduce(MPI_IN_PLACE, v, 2, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
  return v[1] ? -1 : v[0];
}

int perf_time(struct perf_ctx* c, const struct perf_ops* ops, int nseries, int mpi_on,
              double* moe_us, double* mpi_us, long long* wrong)
{
  const struct perf_opts* o = c->o;
  int reps = o->reps, failed = 0, f2 = 0;
  double* tm = perf_xcalloc((size_t)reps * (size_t)nseries, sizeof *tm);
  double* tp = perf_xcalloc((size_t)reps, sizeof *tp);
  for (int a = 0; a < nseries && !failed; a++) {
    if (ops->select)
      ops->select(c, a);
    wrong[a] = -1;
    if (o->check && (wrong[a] = perf_check_once(c, ops, PERF_MOECCL)) < 0)
      failed = 1;
    if (!failed)
      run_series(c, ops, PERF_MOECCL, o->warmup, &failed);
  }
  if (!failed && mpi_on)
    run_series(c, ops, PERF_MPI, o->warmup, &f2);
  for (int rep = 0; rep < reps && !failed; rep++) {
    if (mpi_on && rep % 2)
      tp[rep] = run_series(c, ops, PERF_MPI, o->iters, &f2);
    for (int k = 0; k < nseries && !failed; k++) {
      int a = (k + rep) % nseries;
      if (ops->select)
        ops->select(c, a);
      tm[(size_t)a * (size_t)reps + (size_t)rep] = run_series(c, ops, PERF_MOECCL, o->iters, &failed);
    }
    if (mpi_on && rep % 2 == 0)
      tp[rep] = run_series(c, ops, PERF_MPI, o->iters, &f2);
  }
  *mpi_us = mpi_on ? perf_median(tp, reps) : -1.0;
  for (int a = 0; a < nseries; a++)
    moe_us[a] = perf_median(tm + (size_t)a * (size_t)reps, reps);
  free(tm);
  free(tp);
  return failed ? -1 : 0;
}

double perf_roofline_us(struct perf_ctx* c, size_t bytes)
{
  const struct perf_opts* o = c->o;
  double* t = perf_xcalloc((size_t)o->reps, sizeof *t);
  volatile unsigned char sink = 0;
  if (bytes > c->B.copy_cap)
    bytes = c->B.copy_cap;
  for (int rep = 0; rep < o->reps; rep++) {
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    for (int i = 0; i < o->iters; i++) {
      memcpy(c->B.copy_dst, c->B.copy_src, bytes);
      /* Reading the copy keeps the compiler from dropping it. */
      sink ^= (unsigned char)c->B.copy_dst[bytes ? (size_t)i % bytes : 0];
    }
    t[rep] = (MPI_Wtime() - t0) / o->iters * 1e6;
  }
  (void)sink;
  double m = perf_median(t, o->reps);
  free(t);
  MPI_Allreduce(MPI_IN_PLACE, &m, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return m;
}

/* ---- network roofline --------------------------------------------------- */

/* What bare kernel TCP does with the same blocks: every rank sends its block
 * to every peer and receives every peer's block over one connected socket
 * per pair, all peers in flight at once, and copies its own block.  One
 * thread busy-polls non-blocking sockets with calls as large as the blocks;
 * the socket buffers keep the kernel's defaults (and their autotuning). */

static void net_error(int me, const char* what, int peer, int err)
{
  char who[32] = "";
  if (peer >= 0)
    snprintf(who, sizeof who, " rank %d", peer);
  fprintf(stderr, "%s: rank %d: --net-roofline: %s%s: %s; the network roofline is skipped\n",
          perf_prog, me, what, who, err ? strerror(err) : "connection closed");
}

static int net_port(const struct sockaddr_storage* ss)
{
  if (ss->ss_family == AF_INET6)
    return ntohs(((const struct sockaddr_in6*)ss)->sin6_port);
  return ntohs(((const struct sockaddr_in*)ss)->sin_port);
}

static void net_set_port(struct sockaddr_storage* ss, int port)
{
  if (ss->ss_family == AF_INET6)
    ((struct sockaddr_in6*)ss)->sin6_port = htons((uint16_t)port);
  else
    ((struct sockaddr_in*)ss)->sin_port = htons((uint16_t)port);
}

/* A listening socket on addr, any free port; its address goes to *ss. */
static int net_listen(const char* addr, int n, int me, struct sockaddr_storage* ss, socklen_t* len)
{
  struct addrinfo hints, *ai = NULL;
  memset(&hints, 0, sizeof hints);
  hints.ai_flags = AI_NUMERICHOST | AI_NUMERICSERV;
  hints.ai_socktype = SOCK_STREAM;
  int rc = getaddrinfo(addr, "0", &hints, &ai);
  if (rc != 0) {
    fprintf(stderr, "%s: rank %d: --net-roofline: address %s: %s; the network roofline is "
            "skipped\n", perf_prog, me, addr, gai_strerror(rc));
    return -1;
  }
  int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  *len = sizeof *ss;
  if (fd < 0 || bind(fd, ai->ai_addr, ai->ai_addrlen) || listen(fd, n) ||
      getsockname(fd, (struct sockaddr*)ss, len)) {
    net_error(me, fd < 0 ? "socket" : "bind/listen on the address", -1, errno);
    if (fd >= 0)
      close(fd);
    fd = -1;
  }
  freeaddrinfo(ai);
  return fd;
}

/* Waits for ev on fd, at most NET_SETUP_MS; 0 when ready, else an errno. */
static int net_wait(int fd, short ev)
{
  struct pollfd p = {fd, ev, 0};
  int r;
  do
    r = poll(&p, 1, NET_SETUP_MS);
  while (r < 0 && errno == EINTR);
  return r > 0 ? 0 : r == 0 ? ETIMEDOUT : errno;
}

static int net_nodelay_nonblock(int fd)
{
  int one = 1, fl = fcntl(fd, F_GETFL);
  if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one) || fl < 0 ||
      fcntl(fd, F_SETFL, fl | O_NONBLOCK))
    return errno;
  return 0;
}

/* The lower rank connects and says who it is; returns the socket or -1. */
static int net_connect(const struct sockaddr_storage* ss, socklen_t len, int me, int peer)
{
  int fd = socket(ss->ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0), err = 0, soerr = 0;
  socklen_t sl = sizeof soerr;
  int32_t hello = me;
  if (fd < 0) {
    net_error(me, "socket for", peer, errno);
    return -1;
  }
  if ((err = net_nodelay_nonblock(fd)) == 0 && connect(fd, (const struct sockaddr*)ss, len) &&
      errno != EINPROGRESS)
    err = errno;
  if (!err && !(err = net_wait(fd, POLLOUT)) && getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl))
    err = errno;
  if (!err)
    err = soerr;
  /* Four bytes into the empty buffer of a new connection. */
  errno = 0;
  if (!err && send(fd, &hello, sizeof hello, MSG_NOSIGNAL) != (ssize_t)sizeof hello)
    err = errno ? errno : EIO;
  if (err) {
    net_error(me, "connect to", peer, err);
    close(fd);
    return -1;
  }
  return fd;
}

/* The higher rank accepts me connections and learns from each who it is. */
static int net_accept_all(struct perf_net* M, int lfd, int me)
{
  for (int k = 0; k < me; k++) {
    int32_t hello = -1;
    int err = net_wait(lfd, POLLIN), fd = -1;
    if (!err && (fd = accept(lfd, NULL, NULL)) < 0)
      err = errno;
    if (!err && fcntl(fd, F_SETFD, FD_CLOEXEC))
      err = errno;
    if (!err)
      err = net_wait(fd, POLLIN);
    errno = 0;
    if (!err && recv(fd, &hello, sizeof hello, MSG_WAITALL) != (ssize_t)sizeof hello)
      err = errno ? errno : EPROTO; /* 0: closed before saying who it is */
    if (!err && (hello < 0 || hello >= me || M->fd[hello] >= 0))
      err = EPROTO;
    if (!err)
      err = net_nodelay_nonblock(fd);
    if (err) {
      net_error(me, "accept", -1, err);
      if (fd >= 0)
        close(fd);
      return -1;
    }
    M->fd[hello] = fd;
  }
  return 0;
}

static int net_agree(int ok)
{
  MPI_Allreduce(MPI_IN_PLACE, &ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  return ok;
}

static void net_close(struct perf_net* M, int n)
{
  for (int j = 0; j < n && M->fd; j++) {
    if (M->fd[j] >= 0)
      close(M->fd[j]);
    M->fd[j] = -1;
  }
  M->on = 0;
}

/* The per-peer block tables both bare exchanges (sockets, shared memory)
 * work from. */
static void blocks_alloc(struct perf_net* M, int n)
{
  M->soff = perf_xcalloc((size_t)n, sizeof(size_t));
  M->slen = perf_xcalloc((size_t)n, sizeof(size_t));
  M->sdone = perf_xcalloc((size_t)n, sizeof(size_t));
  M->roff = perf_xcalloc((size_t)n, sizeof(size_t));
  M->rlen = perf_xcalloc((size_t)n, sizeof(size_t));
  M->rdone = perf_xcalloc((size_t)n, sizeof(size_t));
}

static void blocks_free(struct perf_net* M)
{
  free(M->soff); free(M->slen); free(M->sdone);
  free(M->roff); free(M->rlen); free(M->rdone);
}

/* Busy polling with more ranks than CPUs on a node spins away the time
 * slices of the ranks that have work; then an idle sweep yields the CPU, as
 * Open MPI does when oversubscribed (mpi_yield_when_idle).  The CPUs are the
 * union of the local ranks' affinity masks. */
static void net_node_cpus(struct perf_net* M)
{
  MPI_Comm node;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set)) {
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    CPU_ZERO(&set);
    for (long c = 0; c < online && c < CPU_SETSIZE; c++)
      CPU_SET((int)c, &set);
  }
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
  MPI_Comm_size(node, &M->local);
  MPI_Allreduce(MPI_IN_PLACE, &set, (int)sizeof set, MPI_BYTE, MPI_BOR, node);
  MPI_Comm_free(&node);
  M->cpus = CPU_COUNT(&set);
  M->yield = M->local > M->cpus;
}

/* Builds the full mesh at startup: every rank listens, the ports travel by
 * MPI_Allgather, the lower rank of each pair connects, the higher accepts.
 * Collective; on any failure every rank ends with no mesh (M->on == 0). */
void perf_net_open(struct perf_ctx* c)
{
  struct perf_net* M = &c->net;
  const char* addr = c->o->net_addr;
  int me = c->me, n = c->n;
  struct sockaddr_storage ss;
  socklen_t len = 0;
  int* ports = perf_xcalloc((size_t)n, sizeof *ports);
  M->fd = perf_xcalloc((size_t)n, sizeof *M->fd);
  for (int j = 0; j < n; j++)
    M->fd[j] = -1;
  blocks_alloc(M, n);
  memset(&ss, 0, sizeof ss);
  net_node_cpus(M);
  int lfd = net_listen(addr, n, me, &ss, &len);
  int port = lfd >= 0 ? net_port(&ss) : -1, ok = lfd >= 0;
  MPI_Allgather(&port, 1, MPI_INT, ports, 1, MPI_INT, MPI_COMM_WORLD);
  for (int j = 0; j < n; j++)
    ok &= ports[j] >= 0;
  /* Connecting needs no accept (the backlog holds n), so all connects come
   * first, and no rank waits in accept for a peer that gave up. */
  for (int j = me + 1; j < n && ok; j++) {
    struct sockaddr_storage peer = ss;
    net_set_port(&peer, ports[j]);
    ok = (M->fd[j] = net_connect(&peer, len, me, j)) >= 0;
  }
  if (net_agree(ok))
    ok = net_agree(net_accept_all(M, lfd, me) == 0);
  else
    ok = 0;
  if (lfd >= 0)
    close(lfd);
  free(ports);
  M->on = ok;
  if (!ok)
    net_close(M, n);
}

void perf_net_free(struct perf_ctx* c)
{
  struct perf_net* M = &c->net;
  net_close(M, c->n);
  free(M->fd);
  blocks_free(M);
}

/* Shuts every socket, so that peers waiting on this rank fail at once. */
static int net_fail(struct perf_ctx* c, const char* what, int peer, int err)
{
  net_error(c->me, what, peer, err);
  for (int j = 0; j < c->n; j++)
    if (c->net.fd[j] >= 0)
      shutdown(c->net.fd[j], SHUT_RDWR);
  return -1;
}

static int net_again(int err) { return err == EAGAIN || err == EWOULDBLOCK || err == EINTR; }

/* One exchange of the blocks in M->soff/slen and M->roff/rlen.  Returns 0,
 * or -1 after a socket error or NET_STALL_S without progress. */
static int net_once(struct perf_ctx* c)
{
  struct perf_net* M = &c->net;
  int n = c->n, me = c->me, pending = 0, copied = 0;
  unsigned idle = 0;
  double idle_t0 = 0.0;
  for (int j = 0; j < n; j++) {
    M->sdone[j] = M->rdone[j] = 0;
    pending += j != me && M->slen[j] > 0;
    pending += j != me && M->rlen[j] > 0;
  }
  for (;;) {
    int progress = 0;
    /* Starting at the next rank spreads the first sends over the peers. */
    for (int k = 1; k < n; k++) {
      int j = (me + k) % n, fd = M->fd[j];
      if (M->sdone[j] < M->slen[j]) {
        ssize_t w = send(fd, c->B.send + M->soff[j] + M->sdone[j], M->slen[j] - M->sdone[j],
                         MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w < 0 && !net_again(errno))
          return net_fail(c, "send to", j, errno);
        if (w > 0) {
          progress = 1;
          M->sdone[j] += (size_t)w;
          pending -= M->sdone[j] == M->slen[j];
        }
      }
      if (M->rdone[j] < M->rlen[j]) {
        ssize_t r = recv(fd, c->B.recv + M->roff[j] + M->rdone[j], M->rlen[j] - M->rdone[j],
                         MSG_DONTWAIT);
        if (r == 0 || (r < 0 && !net_again(errno)))
          return net_fail(c, "receive from", j, r == 0 ? 0 : errno);
        if (r > 0) {
          progress = 1;
          M->rdone[j] += (size_t)r;
          pending -= M->rdone[j] == M->rlen[j];
        }
      }
    }
    /* The own block, once the first sends are under way. */
    if (!copied) {
      memcpy(c->B.recv + M->roff[me], c->B.send + M->soff[me], M->slen[me]);
      copied = 1;
    }
    if (!pending)
      return 0;
    if (progress) {
      idle = 0;
      continue;
    }
    if (M->yield)
      sched_yield();
    if (idle++ == 0) {
      idle_t0 = MPI_Wtime();
    } else if (idle % 4096 == 0 && MPI_Wtime() - idle_t0 > NET_STALL_S) {
      char what[48];
      snprintf(what, sizeof what, "no byte moved for %d s", NET_STALL_S);
      return net_fail(c, what, -1, ETIMEDOUT);
    }
  }
}

/* ---- shared-memory roofline --------------------------------------------- */

/* What a bare shared-memory exchange does with the same blocks: a rank
 * copies its block for each peer into that peer's inbox slot of this
 * exchange's parity and raises its sequence word there, copies its own
 * block, then waits for each peer's word and copies that block out.  One
 * copy in, one copy out and one signal line per pair and exchange: the
 * eager protocol of Open MPI's shared-memory fast boxes and of moeccl's
 * slots, without their matching, queues, tickets or flow control.  Two
 * slots per pair are enough: a sender at exchange k has seen the
 * receiver's word of k-1, which the receiver raised after reading all of
 * k-2.  Waiting polls; ranks that outnumber the CPUs yield after an idle
 * sweep, as moeccl and Open MPI do there. */
#define SHM_PART_MAX ((size_t)64 << 20) /* one rank's part of the segment, at most */
#define SHM_LINE 64

void perf_shm_open(struct perf_ctx* c, size_t max_block)
{
  struct perf_net* M = &c->net;
  int n = c->n;
  M->shm = 1;
  blocks_alloc(M, n);
  net_node_cpus(M);
  if (M->local != n)
    return; /* the header says why */
  size_t words = (size_t)n * SHM_LINE, slot = (max_block + SHM_LINE - 1) / SHM_LINE * SHM_LINE;
  if (slot == 0)
    slot = SHM_LINE;
  if (words + 2 * (size_t)n * slot > SHM_PART_MAX)
    slot = (SHM_PART_MAX - words) / (2 * (size_t)n) / SHM_LINE * SHM_LINE;
  M->slot = slot;
  M->part = words + 2 * (size_t)n * slot;
  MPI_Comm node;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
  char* mine = NULL;
  MPI_Aint size;
  int unit;
  /* Contiguous by default: rank r's part starts r parts after rank 0's. */
  MPI_Win_allocate_shared((MPI_Aint)M->part, 1, MPI_INFO_NULL, node, &mine, &M->win);
  MPI_Win_shared_query(M->win, 0, &size, &unit, &M->seg);
  MPI_Comm_free(&node);
  memset(mine, 0, words);
  MPI_Barrier(MPI_COMM_WORLD);
  M->on = 1;
}

void perf_shm_free(struct perf_ctx* c)
{
  struct perf_net* M = &c->net;
  if (M->seg)
    MPI_Win_free(&M->win);
  M->seg = NULL;
  M->on = 0;
  blocks_free(M);
}

static _Atomic uint64_t* shm_word(const struct perf_net* M, int to, int from)
{
  return (_Atomic uint64_t*)(M->seg + (size_t)to * M->part + (size_t)from * SHM_LINE);
}

static char* shm_slot(const struct perf_net* M, int n, int to, int from, uint64_t k)
{
  return M->seg + (size_t)to * M->part + (size_t)n * SHM_LINE +
         ((size_t)from * 2 + (size_t)(k & 1)) * M->slot;
}

/* One exchange; -1 after NET_STALL_S without a peer's word. */
static int shm_once(struct perf_ctx* c)
{
  struct perf_net* M = &c->net;
  int n = c->n, me = c->me, left = n - 1;
  uint64_t k = ++M->seq;
  for (int d = 1; d < n; d++) {
    int j = (me + d) % n;
    memcpy(shm_slot(M, n, j, me, k), c->B.send + M->soff[j], M->slen[j]);
    atomic_store_explicit(shm_word(M, j, me), k, memory_order_release);
    M->rdone[j] = 0;
  }
  memcpy(c->B.recv + M->roff[me], c->B.send + M->soff[me], M->slen[me]);
  unsigned idle = 0;
  double idle_t0 = 0.0;
  while (left > 0) {
    int progress = 0;
    for (int d = 1; d < n; d++) {
      int j = (me - d + n) % n;
      if (M->rdone[j] || atomic_load_explicit(shm_word(M, me, j), memory_order_acquire) < k)
        continue;
      memcpy(c->B.recv + M->roff[j], shm_slot(M, n, me, j, k), M->rlen[j]);
      M->rdone[j] = 1;
      left--;
      progress = 1;
    }
    if (progress || left == 0)
      continue;
    if (M->yield)
      sched_yield();
    if (idle++ == 0) {
      idle_t0 = MPI_Wtime();
    } else if (idle % 4096 == 0 && MPI_Wtime() - idle_t0 > NET_STALL_S) {
      fprintf(stderr, "%s: rank %d: --shm-roofline: no peer's block for %d s\n", perf_prog, me,
              NET_STALL_S);
      return -1;
    }
  }
  return 0;
}

/* Whether every block of this exchange fits a slot, on every rank. */
static int shm_fits(struct perf_ctx* c)
{
  int fits = 1;
  for (int j = 0; j < c->n; j++)
    fits &= c->net.slen[j] <= c->net.slot;
  MPI_Allreduce(MPI_IN_PLACE, &fits, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  return fits;
}

double perf_net_roofline_us(struct perf_ctx* c, const struct perf_ops* ops, size_t bytes)
{
  struct perf_net* M = &c->net;
  const struct perf_opts* o = c->o;
  if (!M->on || (M->shm && !shm_fits(c)))
    return -1.0;
  if (o->check) {
    ops->fill(c);
    clear_recv(c, ops);
  }
  double* t = perf_xcalloc((size_t)o->reps, sizeof *t);
  int bad = 0;
  MPI_Barrier(MPI_COMM_WORLD);
  int (*once)(struct perf_ctx*) = M->shm ? shm_once : net_once;
  for (int i = 0; i < o->warmup && !bad; i++)
    bad = once(c) != 0;
  for (int rep = 0; rep < o->reps; rep++) {
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    for (int i = 0; i < o->iters && !bad; i++)
      bad = once(c) != 0;
    t[rep] = (MPI_Wtime() - t0) / o->iters * 1e6;
  }
  c->lib = PERF_MOECCL;
  double v[3] = {perf_median(t, o->reps), bad, !bad && o->check ? (double)ops->verify(c) : 0.0};
  free(t);
  MPI_Allreduce(MPI_IN_PLACE, v, 2, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  MPI_Allreduce(MPI_IN_PLACE, &v[2], 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  const char* kind = M->shm ? "shm" : "net";
  if (v[1] > 0.0) {
    if (c->me == 0)
      printf("# %s roofline: %s at size %zu (see stderr); skipped from here on\n", kind,
             M->shm ? "a rank stalled" : "a socket failed", bytes);
    if (M->shm) /* a rank gave up mid-exchange: the words are out of step */
      M->on = 0;
    else
      net_close(M, c->n);
    return -1.0;
  }
  if (v[2] > 0.0) {
    if (c->me == 0)
      printf("# %s roofline: %.0f wrong elements at size %zu; not shown\n", kind, v[2], bytes);
    return -1.0;
  }
  return v[0];
}

/* ---- checking helpers --------------------------------------------------- */

/* Typed stores and loads keep the check independent of byte order. */
void perf_put_bits(char* p, size_t ts, uint64_t v)
{
  uint8_t b = (uint8_t)v;
  uint16_t h = (uint16_t)v;
  uint32_t w = (uint32_t)v;
  switch (ts) {
  case 1: memcpy(p, &b, 1); break;
  case 2: memcpy(p, &h, 2); break;
  case 4: memcpy(p, &w, 4); break;
  default: memcpy(p, &v, 8); break;
  }
}

uint64_t perf_get_bits(const char* p, size_t ts)
{
  uint8_t b;
  uint16_t h;
  uint32_t w;
  uint64_t v;
  switch (ts) {
  case 1: memcpy(&b, p, 1); return b;
  case 2: memcpy(&h, p, 2); return h;
  case 4: memcpy(&w, p, 4); return w;
  default: memcpy(&v, p, 8); return v;
  }
}

uint64_t perf_bits_mask(size_t ts) { return ts >= 8 ? ~0ULL : (1ULL << (8 * ts)) - 1; }

uint64_t perf_pattern(int rank, size_t k)
{
  return perf_mix64(perf_mix64(PERF_SEED ^ (uint64_t)(uint32_t)rank) + k);
}

/* The small floats: exponent and mantissa bits, bias; ieee: the top
 * exponent is infinity/NaN (else only all ones is NaN, as in fp8e4m3). */
struct minifloat {
  int ebits, mbits, bias, ieee;
};

static const struct minifloat* minifloat_of(moecclDataType_t t)
{
  static const struct minifloat half = {5, 10, 15, 1}, bf16 = {8, 7, 127, 1},
                                e4m3 = {4, 3, 7, 0}, e5m2 = {5, 2, 15, 1};
  switch (t) {
  case moecclFloat16: return &half;
  case moecclBfloat16: return &bf16;
  case moecclFloat8e4m3: return &e4m3;
  case moecclFloat8e5m2: return &e5m2;
  default: return NULL;
  }
}

/* v >= 0 and representable (the inputs are small integers). */
static uint64_t minifloat_encode(const struct minifloat* f, double v)
{
  if (!(v > 0.0))
    return 0;
  int e;
  double m = frexp(v, &e); /* v = m * 2^e, 0.5 <= m < 1 */
  int ex = e - 1 + f->bias;
  if (ex <= 0) /* subnormal */
    return (uint64_t)llround(ldexp(v, f->mbits - 1 + f->bias));
  return (uint64_t)ex << f->mbits | ((uint64_t)llround(ldexp(m * 2.0 - 1.0, f->mbits)) &
                                     ((1ULL << f->mbits) - 1));
}

static double minifloat_decode(const struct minifloat* f, uint64_t bits)
{
  uint64_t mmask = (1ULL << f->mbits) - 1, emax = (1ULL << f->ebits) - 1;
  uint64_t m = bits & mmask, e = bits >> f->mbits & emax;
  int neg = (int)(bits >> (f->mbits + f->ebits) & 1);
  double v;
  if ((f->ieee && e == emax) || (!f->ieee && e == emax && m == mmask))
    v = m || !f->ieee ? NAN : INFINITY;
  else if (e == 0)
    v = ldexp((double)m, 1 - f->bias - f->mbits);
  else
    v = ldexp(1.0 + ldexp((double)m, -f->mbits), (int)e - f->bias);
  return neg ? -v : v;
}

void perf_put_value(char* p, const struct perf_dtype* dt, double v)
{
  const struct minifloat* mf = minifloat_of(dt->type);
  if (mf) {
    perf_put_bits(p, dt->size, minifloat_encode(mf, v));
  } else if (dt->type == moecclFloat32) {
    float f = (float)v;
    memcpy(p, &f, 4);
  } else if (dt->type == moecclFloat64) {
    memcpy(p, &v, 8);
  } else {
    perf_put_bits(p, dt->size, (uint64_t)(int64_t)v);
  }
}

double perf_get_value(const char* p, const struct perf_dtype* dt)
{
  const struct minifloat* mf = minifloat_of(dt->type);
  uint64_t b = perf_get_bits(p, dt->size);
  float f;
  double d;
  if (mf)
    return minifloat_decode(mf, b);
  switch (dt->type) {
  case moecclFloat32: memcpy(&f, p, 4); return f;
  case moecclFloat64: memcpy(&d, p, 8); return d;
  case moecclInt8: return (int8_t)b;
  case moecclInt32: return (int32_t)b;
  case moecclInt64: return (double)(int64_t)b;
  default: return (double)b;
  }
}

/* The largest L such that every integer 0..L is exact in the type. */
static double exact_limit(moecclDataType_t t)
{
  switch (t) {
  case moecclInt8: return 127;
  case moecclUint8: return 255;
  case moecclFloat16: return 2048;
  case moecclBfloat16: return 256;
  case moecclFloat8e4m3: return 16;
  case moecclFloat8e5m2: return 8;
  default: return 1 << 20; /* wide enough for any rank count that runs */
  }
}

static int mantissa_bits(moecclDataType_t t)
{
  const struct minifloat* mf = minifloat_of(t);
  return mf ? mf->mbits : t == moecclFloat32 ? 23 : 52;
}

static int is_float(moecclDataType_t t)
{
  return minifloat_of(t) || t == moecclFloat32 || t == moecclFloat64;
}

/* Sums (and avg): ranks below nz hold (k + 3*rank) mod K, the others 0,
 * with nz * (K - 1) <= L so that every partial sum is exact.  Prod: element
 * k has k mod min(n,4) ranks holding 2 (the others 1), so the product is
 * 2^(k mod 4) at most 8.  Max, min: (5k + 3*rank) mod K with K - 1 <= L. */
double perf_red_input(const struct perf_ctx* c, int rank, size_t k)
{
  double L = exact_limit(c->dt->type);
  int n = c->n;
  if (c->op == moecclProd) {
    int m = n < 4 ? n : 4, twos = (int)(k % (size_t)m);
    int d = (int)(((size_t)rank + (size_t)n - k % (size_t)n) % (size_t)n); /* (rank - k) mod n */
    return d < twos ? 2.0 : 1.0;
  }
  if (c->op == moecclMax || c->op == moecclMin) {
    size_t K = L >= 15 ? 16 : (size_t)L + 1;
    return (double)((5 * k + 3 * (size_t)rank) % K);
  }
  int nz = n < L ? n : (int)L;
  size_t K = (size_t)(L / nz) + 1;
  if (K > 16)
    K = 16;
  if (rank >= nz)
    return 0.0;
  return (double)((k + 3 * (size_t)rank) % K);
}

double perf_red_expect(const struct perf_ctx* c, size_t k)
{
  double acc = perf_red_input(c, 0, k);
  for (int r = 1; r < c->n; r++) {
    double v = perf_red_input(c, r, k);
    switch (c->op) {
    case moecclProd: acc *= v; break;
    case moecclMax: acc = v > acc ? v : acc; break;
    case moecclMin: acc = v < acc ? v : acc; break;
    default: acc += v; break;
    }
  }
  if (c->op == moecclAvg)
    acc = is_float(c->dt->type) ? acc / c->n : floor(acc / c->n);
  return acc;
}

int perf_red_ok(const struct perf_ctx* c, double got, double want)
{
  if (got == want)
    return 1;
  if (c->op != moecclAvg || !is_float(c->dt->type) || !(want > 0.0) || isnan(got))
    return 0;
  int e;
  frexp(want, &e); /* 2^(e-1) <= want < 2^e */
  /* n rounded products x * fl(1/n) summed with n - 1 roundings: at most
   * about n+1 units in the last place of the non-negative result. */
  return fabs(got - want) <= (c->n + 1) * ldexp(1.0, e - 1 - mantissa_bits(c->dt->type));
}

long long perf_untouched_wrong(const struct perf_ctx* c, const char* p, size_t len)
{
  size_t ts = c->dt->size;
  const unsigned char* g = (const unsigned char*)p;
  long long wrong = 0;
  for (size_t off = 0; off + ts <= len; off += ts) {
    int bad = 0;
    for (size_t i = 0; i < ts; i++)
      bad |= g[off + i] != PERF_SENTINEL;
    wrong += bad;
  }
  return wrong;
}

long long perf_guard_wrong(const struct perf_ctx* c)
{
  return perf_untouched_wrong(c, c->B.recv + c->recv_bytes, PERF_GUARD_BYTES);
}

void perf_pattern_fill(const struct perf_ctx* c, char* p, int rank, size_t k0, size_t count)
{
  size_t ts = c->dt->size;
  for (size_t k = 0; k < count; k++)
    perf_put_bits(p + k * ts, ts, perf_pattern(rank, k0 + k));
}

long long perf_pattern_wrong(const struct perf_ctx* c, const char* p, int rank, size_t k0,
                             size_t count)
{
  size_t ts = c->dt->size;
  uint64_t mask = perf_bits_mask(ts);
  long long wrong = 0;
  for (size_t k = 0; k < count; k++)
    wrong += perf_get_bits(p + k * ts, ts) != (perf_pattern(rank, k0 + k) & mask);
  return wrong;
}

void perf_red_fill(const struct perf_ctx* c, char* p, size_t k0, size_t count)
{
  size_t ts = c->dt->size;
  for (size_t k = 0; k < count; k++)
    perf_put_value(p + k * ts, c->dt, perf_red_input(c, c->me, k0 + k));
}

long long perf_red_wrong(const struct perf_ctx* c, const char* p, size_t k0, size_t count)
{
  size_t ts = c->dt->size;
  long long wrong = 0;
  for (size_t k = 0; k < count; k++)
    wrong += !perf_red_ok(c, perf_get_value(p + k * ts, c->dt), perf_red_expect(c, k0 + k));
  return wrong;
}

/* ---- output ------------------------------------------------------------- */

static double algbw(size_t bytes, double us) { return us > 0.0 ? (double)bytes / (us * 1e3) : 0.0; }

void perf_rows_push(struct perf_rows* rows, const struct perf_row* r)
{
  if (rows->len == rows->cap) {
    rows->cap = rows->cap ? rows->cap * 2 : 16;
    rows->v = realloc(rows->v, rows->cap * sizeof *rows->v);
    if (!rows->v) {
      fprintf(stderr, "%s: out of memory\n", perf_prog);
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
  }
  rows->v[rows->len++] = *r;
}

static void print_rank_list(int me, int n)
{
  char host[HOST_LEN] = {0};
  char* all = me == 0 ? perf_xcalloc((size_t)n, HOST_LEN) : NULL;
  int pid = (int)getpid();
  int* pids = me == 0 ? perf_xcalloc((size_t)n, sizeof *pids) : NULL;
  gethostname(host, sizeof host - 1);
  MPI_Gather(host, HOST_LEN, MPI_CHAR, all, HOST_LEN, MPI_CHAR, 0, MPI_COMM_WORLD);
  MPI_Gather(&pid, 1, MPI_INT, pids, 1, MPI_INT, 0, MPI_COMM_WORLD);
  if (me == 0) {
    int nodes = 0;
    for (int i = 0; i < n; i++) {
      int seen = 0;
      for (int j = 0; j < i && !seen; j++)
        seen = strcmp(all + (size_t)i * HOST_LEN, all + (size_t)j * HOST_LEN) == 0;
      nodes += !seen;
    }
    printf("# Using %d ranks on %d node%s:\n", n, nodes, nodes == 1 ? "" : "s");
    for (int i = 0; i < n; i++)
      printf("#  Rank %3d Pid %7d on %s\n", i, pids[i], all + (size_t)i * HOST_LEN);
  }
  free(all);
  free(pids);
}

void perf_header_top(const struct perf_ctx* c)
{
  const struct perf_opts* o = c->o;
  int ver = 0, len = 0;
  char mpiver[MPI_MAX_LIBRARY_VERSION_STRING];
  moecclGetVersion(&ver);
  MPI_Get_library_version(mpiver, &len);
  mpiver[strcspn(mpiver, "\n,")] = '\0';
  if (c->me != 0)
    return;
  printf("# %s: moeccl %d.%d.%d vs %s\n", perf_prog, ver / 10000, ver / 100 % 100, ver % 100,
         o->mpi_baseline ? mpiver : "no baseline");
  printf("# nranks %d  minBytes %zu  maxBytes %zu  step: %zu(%s)  warmup iters: %d  "
         "iters: %d  reps: %d  validation: %d\n",
         c->n, o->minbytes, o->maxbytes, o->stepbytes ? o->stepbytes : o->step,
         o->stepbytes ? "bytes" : "factor", o->warmup, o->iters, o->reps, o->check);
}

/* The text columns of a header line or row: " %*s" each. */
static void print_labels(const struct perf_table* t, const char* const* v)
{
  for (int i = 0; i < t->nlabels; i++)
    printf(" %*s", t->width[i], v[i]);
}

/* "roofline", or "netroof" / "shmroof" for a bare exchange. */
static const char* roof_column(const struct perf_table* t)
{
  if (!t->bare)
    return "roofline";
  return strcmp(t->bare, "shm") == 0 ? "shmroof" : "netroof";
}

void perf_header_columns(const struct perf_ctx* c, const struct perf_table* t)
{
  static const char* const blank[3] = {"", "", ""};
  if (c->me == 0)
    printf("#\n");
  print_rank_list(c->me, c->n);
  if (c->me != 0)
    return;
  int pad = 1 + 13 + 13 + 9;
  for (int i = 0; i < t->nlabels; i++)
    pad += 1 + t->width[i];
  printf("#\n#%*s%-35s%-35s%9s%s roofline\n", pad, "", "moeccl", "mpi", "",
         t->bare ? t->bare : "copy");
  printf("#%13s %12s %8s", "size", "count", "type");
  print_labels(t, t->label);
  printf(" %10s %7s %7s %7s %10s %7s %7s %7s %8s %10s %6s %8s\n", "time", "algbw", "busbw",
         "#wrong", "time", "algbw", "busbw", "#wrong", "speedup",
         roof_column(t), "%roof", "mpi/roof");
  printf("#%13s %12s %8s", "(B)", "(elements)", "");
  print_labels(t, blank);
  printf(" %10s %7s %7s %7s %10s %7s %7s %7s %8s %10s %6s %8s\n", "(us)", "(GB/s)", "(GB/s)", "",
         "(us)", "(GB/s)", "(GB/s)", "", "mpi/moe", "(us)", "moeccl", "");
  fflush(stdout);
}

static void fmt_wrong(char* s, size_t len, long long w)
{
  if (w < 0)
    snprintf(s, len, "N/A");
  else
    snprintf(s, len, "%lld", w);
}

/* The roofline the table shows: the net one with --net-roofline (< 0 when
 * it could not be measured), else the copy one. */
static double shown_roof(const struct perf_row* r, const struct perf_table* t)
{
  return t->bare ? r->net_us : r->roof_us;
}

void perf_print_row(const struct perf_row* r, const struct perf_table* t)
{
  double f = t->factor, roof = shown_roof(r, t);
  char mw[24], pw[24], pt[24], pa[24], pb[24], sp[24], rt[24], rp[24], rm[24];
  fmt_wrong(mw, sizeof mw, r->moe_wrong);
  fmt_wrong(pw, sizeof pw, r->mpi_wrong);
  if (r->mpi_us >= 0.0) {
    snprintf(pt, sizeof pt, "%.2f", r->mpi_us);
    snprintf(pa, sizeof pa, "%.2f", algbw(r->bytes, r->mpi_us));
    snprintf(pb, sizeof pb, "%.2f", algbw(r->bytes, r->mpi_us) * f);
    snprintf(sp, sizeof sp, "%.2f", r->moe_us > 0.0 ? r->mpi_us / r->moe_us : 0.0);
  } else {
    snprintf(pt, sizeof pt, "n/a");
    snprintf(pa, sizeof pa, "n/a");
    snprintf(pb, sizeof pb, "n/a");
    snprintf(sp, sizeof sp, "n/a");
    snprintf(pw, sizeof pw, "n/a");
  }
  snprintf(rt, sizeof rt, roof >= 0.0 ? "%.2f" : "n/a", roof);
  snprintf(rp, sizeof rp, roof >= 0.0 ? "%.1f" : "n/a",
           r->moe_us > 0.0 ? roof / r->moe_us * 100.0 : 0.0);
  snprintf(rm, sizeof rm, roof > 0.0 && r->mpi_us >= 0.0 ? "%.2f" : "n/a",
           roof > 0.0 ? r->mpi_us / roof : 0.0);
  const char* labels[3] = {r->label[0], r->label[1], r->label[2]};
  printf(" %13zu %12zu %8s", r->bytes, r->count, r->type);
  print_labels(t, labels);
  printf(" %10.2f %7.2f %7.2f %7s %10s %7s %7s %7s %8s %10s %6s %8s\n", r->moe_us,
         algbw(r->bytes, r->moe_us), algbw(r->bytes, r->moe_us) * f, mw, pt, pa, pb, pw, sp, rt, rp,
         rm);
  fflush(stdout);
}

long long perf_print_summary(const struct perf_rows* rows, const struct perf_table* t, int failed)
{
  double moe_bw = 0.0, mpi_bw = 0.0, logsp = 0.0, f = t->factor;
  long long wrong = 0;
  int nmpi = 0, nsp = 0;
  for (size_t i = 0; i < rows->len; i++) {
    const struct perf_row* r = &rows->v[i];
    moe_bw += algbw(r->bytes, r->moe_us) * f;
    wrong += (r->moe_wrong > 0 ? r->moe_wrong : 0) + (r->mpi_wrong > 0 ? r->mpi_wrong : 0);
    if (r->mpi_us >= 0.0)
      mpi_bw += algbw(r->bytes, r->mpi_us) * f;
    /* Empty calls time only overheads; they say nothing about a ratio. */
    if (r->mpi_us > 0.0 && r->moe_us > 0.0 && r->bytes > 0) {
      logsp += log(r->mpi_us / r->moe_us);
      nsp++;
    }
    nmpi += r->mpi_us >= 0.0;
  }
  size_t len = rows->len ? rows->len : 1;
  printf("# Avg bus bandwidth    : %g\n", moe_bw / (double)len);
  if (nmpi)
    printf("# Avg bus bandwidth mpi: %g\n", mpi_bw / nmpi);
  if (nsp)
    printf("# Geomean speedup (mpi/moeccl): %.3f over %d rows\n", exp(logsp / nsp), nsp);
  if (failed)
    printf("# moeccl call FAILED; the run stopped early (see stderr)\n");
  printf("# Out of bounds values : %lld %s\n", wrong, wrong ? "FAILED" : "OK");
  printf("#\n");
  fflush(stdout);
  return wrong;
}

static void json_str(FILE* f, const char* s)
{
  fputc('"', f);
  for (; *s; s++) {
    if (*s == '"' || *s == '\\')
      fprintf(f, "\\%c", *s);
    else if ((unsigned char)*s < 0x20)
      fprintf(f, "\\u%04x", (unsigned char)*s);
    else
      fputc(*s, f);
  }
  fputc('"', f);
}

static void json_num(FILE* f, const char* key, double v, int valid)
{
  fprintf(f, ", \"%s\": ", key);
  if (valid)
    fprintf(f, "%.6g", v);
  else
    fprintf(f, "null");
}

static void json_row(FILE* f, const struct perf_row* r, const struct perf_table* t, int n)
{
  double bf = t->factor;
  int mpi = r->mpi_us >= 0.0, net = r->net_us >= 0.0;
  fprintf(f, "  {");
  if (t->coll) {
    fprintf(f, "\"collective\": ");
    json_str(f, t->coll);
    fprintf(f, ", ");
  }
  fprintf(f, "\"size\": %zu, \"count\": %zu, \"type\": ", r->bytes, r->count);
  json_str(f, r->type);
  for (int i = 0; i < t->nlabels; i++) {
    fprintf(f, ", \"%s\": ", t->key[i]);
    json_str(f, r->label[i]);
  }
  fprintf(f, ", \"nranks\": %d", n);
  if (t->extra_key)
    fprintf(f, ", \"%s\": %zu", t->extra_key, r->extra);
  if (t->json_factor)
    json_num(f, "busbw_factor", bf, 1);
  json_num(f, "moeccl_time_us", r->moe_us, 1);
  json_num(f, "moeccl_algbw", algbw(r->bytes, r->moe_us), 1);
  json_num(f, "moeccl_busbw", algbw(r->bytes, r->moe_us) * bf, 1);
  json_num(f, "moeccl_wrong", (double)r->moe_wrong, r->moe_wrong >= 0);
  json_num(f, "mpi_time_us", r->mpi_us, mpi);
  json_num(f, "mpi_algbw", algbw(r->bytes, r->mpi_us), mpi);
  json_num(f, "mpi_busbw", algbw(r->bytes, r->mpi_us) * bf, mpi);
  json_num(f, "mpi_wrong", (double)r->mpi_wrong, mpi && r->mpi_wrong >= 0);
  json_num(f, "speedup", r->moe_us > 0.0 ? r->mpi_us / r->moe_us : 0.0, mpi && r->moe_us > 0.0);
  json_num(f, "roofline_us", r->roof_us, 1);
  json_num(f, "pct_roof", r->moe_us > 0.0 ? r->roof_us / r->moe_us * 100.0 : 0.0, 1);
  json_num(f, "mpi_over_roof", r->roof_us > 0.0 ? r->mpi_us / r->roof_us : 0.0,
           mpi && r->roof_us > 0.0);
  const char* bare = t->bare ? t->bare : t->json_net ? "net" : NULL;
  if (bare) {
    char key[32];
    net &= t->bare != NULL;
    snprintf(key, sizeof key, "%sroof_us", bare);
    json_num(f, key, r->net_us, net);
    snprintf(key, sizeof key, "pct_%sroof", bare);
    json_num(f, key, r->moe_us > 0.0 ? r->net_us / r->moe_us * 100.0 : 0.0, net);
    snprintf(key, sizeof key, "mpi_over_%sroof", bare);
    json_num(f, key, net && r->net_us > 0.0 ? r->mpi_us / r->net_us : 0.0,
             mpi && net && r->net_us > 0.0);
  }
  fprintf(f, "}");
}

int perf_write_json(const char* path, const struct perf_rows* rows, const struct perf_table* t,
                    int n)
{
  FILE* f = fopen(path, "w");
  if (!f) {
    fprintf(stderr, "%s: cannot write %s: %s\n", perf_prog, path, strerror(errno));
    return -1;
  }
  fprintf(f, "[\n");
  for (size_t i = 0; i < rows->len; i++) {
    json_row(f, &rows->v[i], t, n);
    fprintf(f, i + 1 < rows->len ? ",\n" : "\n");
  }
  fprintf(f, "]\n");
  return fclose(f) ? -1 : 0;
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

/* ---- a whole tool for one collective ------------------------------------ */

enum { OPT_REPS = 300, OPT_STEPBYTES };

struct coll_run {
  const struct perf_coll* coll;
  const char* algo; /* -a */
  char** algos;
  moecclComm_t* comms;
  int nalgos;
};

/* -o and -r are accepted by every tool, as in nccl-tests, and ignored where
 * the collective has no reduction or no root. */
static int coll_apply(int c, const char* arg, struct perf_opts* o, void* state)
{
  struct coll_run* run = state;
  switch (c) {
  case 'i':
    if (perf_parse_size(arg, &o->stepbytes) || o->stepbytes == 0)
      return -1;
    return 0;
  case 'o':
    if (strcmp(arg, "all") == 0) {
      o->op = -1;
      return 0;
    }
    for (int i = 0; i < moecclNumOps; i++)
      if (strcmp(arg, perf_op_names[i]) == 0) {
        o->op = i;
        return 0;
      }
    return -1;
  case 'r':
    if (strcmp(arg, "all") == 0) {
      o->root = -1;
      return 0;
    }
    return perf_parse_int(arg, 0, INT_MAX, &o->root);
  case 'a': run->algo = arg; return 0;
  case OPT_REPS: return perf_parse_int(arg, 1, 10000, &o->reps);
  default: return -1;
  }
}

static void coll_select(struct perf_ctx* c, int a)
{
  struct coll_run* run = c->tool;
  c->comm = run->comms[a];
  perf_algo_env(run->coll->algo_env, run->algos[a]);
}

static moecclResult_t coll_moe(struct perf_ctx* c)
{
  struct coll_run* run = c->tool;
  return perf_moe_result(c, run->coll->ops.moe(c), run->coll->call, c->bytes);
}

/* The list a sweep dimension runs over: one value, or all with -1. */
static int coll_dim(int v, int all, int* out)
{
  if (v >= 0) {
    out[0] = v;
    return 1;
  }
  for (int i = 0; i < all; i++)
    out[i] = i;
  return all;
}

/* Every size of one (type, op, root); rows appended.  -1 when a moeccl call
 * failed. */
static int coll_sweep(struct perf_ctx* c, const struct perf_table* t, struct perf_rows* rows)
{
  struct coll_run* run = c->tool;
  const struct perf_coll* coll = run->coll;
  const struct perf_opts* o = c->o;
  struct perf_ops ops = coll->ops;
  double* moe_us = perf_xcalloc((size_t)run->nalgos, sizeof *moe_us);
  long long* wrong = perf_xcalloc((size_t)run->nalgos, sizeof *wrong);
  int failed = 0;
  ops.moe = coll_moe;
  ops.select = coll_select;
  for (size_t s = o->minbytes; s && !failed; s = perf_next_size(o, s)) {
    struct perf_row r;
    memset(&r, 0, sizeof r);
    coll->shape(c, s);
    c->mpi_type = coll->reduces ? perf_mpi_reduce_type(c->dt->type)
                                : perf_mpi_move_type(c->dt->type);
    c->mpi_op = coll->reduces ? perf_mpi_op(c->op) : MPI_OP_NULL;
    int mpi_on = o->mpi_baseline && c->mpi_type != MPI_DATATYPE_NULL &&
                 (!coll->reduces || c->mpi_op != MPI_OP_NULL) && c->count <= (size_t)INT_MAX;
    r.bytes = c->bytes;
    r.count = c->count;
    r.extra = c->roof_bytes;
    r.type = c->dt->name;
    snprintf(r.label[0], sizeof r.label[0], "%s", coll->reduces ? perf_op_names[c->op] : "none");
    snprintf(r.label[1], sizeof r.label[1], "%d", coll->rooted ? c->root : -1);
    r.mpi_wrong = mpi_on && o->check ? perf_check_once(c, &ops, PERF_MPI) : -1;
    r.roof_us = perf_roofline_us(c, c->roof_bytes);
    r.net_us = -1.0;
    failed = perf_time(c, &ops, run->nalgos, mpi_on, moe_us, &r.mpi_us, wrong) != 0;
    for (int a = 0; a < run->nalgos && !failed; a++) {
      perf_algo_label(coll->algo_env, r.label[2], sizeof r.label[2], run->algos[a]);
      r.moe_us = moe_us[a];
      r.moe_wrong = wrong[a];
      if (c->me == 0)
        perf_print_row(&r, t);
      perf_rows_push(rows, &r);
    }
  }
  free(moe_us);
  free(wrong);
  return failed ? -1 : 0;
}

static void coll_help(const struct perf_coll* coll, struct perf_tool* t, char* mid, size_t midlen,
                      char* notes, size_t noteslen)
{
  snprintf(mid, midlen,
           "%s%s"
           "  -a, --algo ALGO|all      set %s per series, one\n"
           "                           communicator each; all = %s;\n"
           "                           a comma list also works\n"
           "      --reps N             reps per size, moeccl and MPI interleaved; the median\n"
           "                           is reported (default 5)\n",
           coll->reduces ? "  -o, --op OP|all          sum prod max min avg (default sum; all: each)\n"
                         : "",
           coll->rooted ? "  -r, --root N|all         root rank (default 0; all: each rank)\n" : "",
           coll->algo_env, coll->algos);
  snprintf(notes, noteslen,
           "sizes: %s\n"
           "busbw = algbw * %s (nccl-tests' PERFORMANCE.md)\n"
           "roofline: %s\n"
           "baseline: %s\n"
           "check: %s\n",
           coll->size_help, coll->factor_help, coll->roof_help, coll->mpi_help,
           coll->reduces ? "small integers whose reductions are exact in every type (avg on "
                           "floats,\n  whose 1/n pre-multiplier rounds: within n+1 units in "
                           "the last place);\n  bytes past the output untouched"
                         : "a pattern per (rank, element), compared bit for bit; bytes past "
                           "the output\n  untouched");
  t->size_what = "see sizes below";
  t->help_step = "  -i, --stepbytes SIZE     add SIZE each step instead (the last of -f, -i wins)\n";
  t->help_dtype = "(default float; all: each type in turn)";
  t->help_mid = mid;
  t->help_notes = notes;
}

/* "# key: text", every line of text behind a "#". */
static void print_commented(const char* key, const char* text)
{
  printf("# %s: ", key);
  for (; *text; text++)
    fputs(*text == '\n' ? "\n#" : (char[2]){*text, 0}, stdout);
  printf("\n");
}

int perf_coll_main(int argc, char** argv, const struct perf_coll* coll)
{
  static const struct option extra[] = {
      {"stepbytes", required_argument, NULL, 'i'}, {"op", required_argument, NULL, 'o'},
      {"root", required_argument, NULL, 'r'},      {"algo", required_argument, NULL, 'a'},
      {"reps", required_argument, NULL, OPT_REPS}, {NULL, 0, NULL, 0}};
  struct coll_run run;
  struct perf_tool tool;
  struct perf_opts o;
  struct perf_ctx c;
  char mid[1024], notes[2048];
  memset(&run, 0, sizeof run);
  memset(&tool, 0, sizeof tool);
  run.coll = coll;
  coll_help(coll, &tool, mid, sizeof mid, notes, sizeof notes);
  tool.shortopts = "i:o:r:a:";
  tool.longopts = extra;
  tool.types_all = 1;
  tool.apply = coll_apply;
  tool.state = &run;
  MPI_Init(&argc, &argv);
  perf_init(&c, coll->prog, &o);
  c.tool = &run;
  int pr = perf_parse_opts(argc, argv, c.me, &tool, &o);
  if (pr == 0 && coll->rooted && o.root >= c.n) {
    if (c.me == 0)
      fprintf(stderr, "%s: root %d is not a rank of %d (see -h)\n", perf_prog, o.root, c.n);
    pr = 2;
  }
  if (pr == 0 && (run.nalgos = perf_algo_list(run.algo, coll->algos, &run.algos)) == 0) {
    if (c.me == 0)
      fprintf(stderr, "%s: -a names no algorithm (see -h)\n", perf_prog);
    free(run.algos);
    pr = 2;
  }
  if (pr) {
    MPI_Finalize();
    return pr == 1 ? 0 : 2;
  }
  int types[16], ops[moecclNumOps], roots_n = coll->rooted ? (o.root < 0 ? c.n : 1) : 1;
  int ntypes = coll_dim(o.dt ? (int)(o.dt - perf_dtypes) : -1, perf_ndtypes, types);
  int nops = coll->reduces ? coll_dim(o.op, moecclNumOps, ops) : coll_dim(0, 1, ops);
  /* One pair of buffers for the whole run: the largest footprint. */
  size_t send_max = 0, recv_max = 0, roof_max = 0;
  for (int ti = 0; ti < ntypes; ti++) {
    c.dt = &perf_dtypes[types[ti]];
    for (size_t s = o.minbytes; s; s = perf_next_size(&o, s)) {
      coll->shape(&c, s);
      send_max = c.send_bytes > send_max ? c.send_bytes : send_max;
      recv_max = c.recv_bytes > recv_max ? c.recv_bytes : recv_max;
      roof_max = c.roof_bytes > roof_max ? c.roof_bytes : roof_max;
    }
  }
  run.comms = perf_xcalloc((size_t)run.nalgos, sizeof *run.comms);
  int rc = 1, failed = 0;
  if (perf_comms_init(coll->algo_env, run.algos, run.nalgos, c.me, c.n, run.comms) == 0) {
    struct perf_table t = {3, {"redop", "root", "algo"}, {6, 6, 10}, {"redop", "root", "algo"},
                           coll->factor(c.n), coll->call, "roof_bytes", 1, 0, NULL};
    struct perf_rows rows = {NULL, 0, 0};
    perf_bufs_alloc(&c.B, send_max, recv_max, roof_max, o.memalloc);
    perf_header_top(&c);
    if (c.me == 0) {
      char root[16];
      if (coll->rooted && o.root < 0)
        snprintf(root, sizeof root, "all");
      else
        snprintf(root, sizeof root, "%d", coll->rooted ? o.root : -1);
      printf("# type %s  redop %s  root %s  memory %s  stream NULL  algo:", o.dt ? o.dt->name : "all",
             coll->reduces ? (o.op < 0 ? "all" : perf_op_names[o.op]) : "none", root,
             o.memalloc ? "moecclMemAlloc" : "malloc");
      for (int a = 0; a < run.nalgos; a++)
        printf("%s%s", a ? "," : " ", run.algos[a] ? run.algos[a] : "(library choice)");
      printf("\n");
      printf("# size: %s\n# busbw = algbw * %s\n", coll->size_help, coll->factor_help);
      print_commented("roofline", coll->roof_help);
      print_commented("baseline", coll->mpi_help);
    }
    perf_header_columns(&c, &t);
    for (int ti = 0; ti < ntypes && !failed; ti++)
      for (int oi = 0; oi < nops && !failed; oi++)
        for (int ri = 0; ri < roots_n && !failed; ri++) {
          c.dt = &perf_dtypes[types[ti]];
          c.op = (moecclRedOp_t)ops[oi];
          c.root = coll->rooted ? (o.root < 0 ? ri : o.root) : 0;
          failed = coll_sweep(&c, &t, &rows) != 0;
        }
    long long wrong = 0;
    if (c.me == 0) {
      wrong = perf_print_summary(&rows, &t, failed);
      if (o.json && perf_write_json(o.json, &rows, &t, c.n))
        wrong = wrong ? wrong : 1;
    }
    MPI_Bcast(&wrong, 1, MPI_LONG_LONG, 0, MPI_COMM_WORLD);
    free(rows.v);
    perf_bufs_free(&c.B);
    rc = failed ? -1 : wrong ? 1 : 0;
    if (perf_comms_close(run.comms, run.nalgos, failed, c.me))
      rc = 1;
  }
  for (int a = 0; a < run.nalgos; a++)
    free(run.algos[a]);
  free(run.algos);
  free(run.comms);
  MPI_Finalize();
  return rc ? 1 : 0;
}
