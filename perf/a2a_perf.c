/*
 * a2a_perf - all-to-all benchmark in the style of nccl-tests' alltoall_perf.
 *
 * moeccl (every algorithm of -a) and the MPI baseline run on the same
 * processes and the same buffers in one run, interleaved rep by rep, so that
 * their ratios are taken under the same machine noise.  A single-thread memcpy of the bytes each rank
 * receives, timed in the same run, gives the copy roofline.  With
 * --net-roofline, a full mesh of plain TCP sockets between the ranks moves
 * the same blocks, also in the same run, as the network roofline.
 *
 * Launch under mpirun.  MPI is the launcher, the carrier of the unique id and
 * the baseline; the library itself never sees it.  See usage() for flags.
 */
#define _GNU_SOURCE /* sched_getaffinity, CPU_COUNT */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
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
#include <sys/socket.h>

#include <mpi.h>

#include "moeccl.h"

#define GUARD_BYTES 4096        /* sentinel area checked after the last block */
#define SENTINEL 0xA5           /* byte the receive buffer holds before a check */
#define MOE_TOKENS_MAX 4096     /* tokens routed per source rank and size */
#define MOE_POPULARITY_S 1.2    /* zipf exponent of expert popularity */
#define MOE_MAX_REDRAWS 32      /* then take the hottest expert not yet chosen */
#define DEFAULT_SEED 0x6d6f6563636cULL
#define HOST_LEN 64
#define NET_ADDR_DEFAULT "127.0.0.1"
#define NET_SETUP_MS 20000      /* net roofline: wait for a peer's connection */
#define NET_STALL_S 60          /* net roofline: no byte moved for this long */

enum dist_kind { DIST_UNIFORM, DIST_ZIPF, DIST_MOE };
enum lib { LIB_MOECCL, LIB_MPI };

struct dtype {
  const char* name;
  const char* alias;
  moecclDataType_t type;
  size_t size;
};

static const struct dtype dtypes[] = {
    {"int8", "char", moecclInt8, 1},         {"uint8", NULL, moecclUint8, 1},
    {"int32", "int", moecclInt32, 4},        {"uint32", NULL, moecclUint32, 4},
    {"int64", NULL, moecclInt64, 8},         {"uint64", NULL, moecclUint64, 8},
    {"half", "float16", moecclFloat16, 2},   {"float", "float32", moecclFloat32, 4},
    {"double", "float64", moecclFloat64, 8}, {"bfloat16", "bf16", moecclBfloat16, 2},
    {"fp8e4m3", "f8e4m3", moecclFloat8e4m3, 1}, {"fp8e5m2", "f8e5m2", moecclFloat8e5m2, 1},
};

struct opts {
  size_t minbytes, maxbytes, step;
  int iters, warmup, check, reps, memalloc, mpi_baseline;
  const struct dtype* dt;
  enum dist_kind dist;
  double zipf_s;
  int moe_e, moe_k;
  char dist_name[64];
  const char* algo; /* -a value; NULL lets the library choose */
  const char* json;
  uint64_t seed;
  int net_roof;         /* --net-roofline given */
  const char* net_addr; /* address every rank listens on */
};

/* Per-source split model, fixed for the run; only the size varies. */
struct model {
  int n;
  enum dist_kind kind;
  uint64_t seed;
  double* zipf_w;     /* zipf: weight of popularity rank r (n) */
  int* rank_perm;     /* zipf: destination of popularity rank r, before rotation (n) */
  int e, k;           /* moe: experts, experts per token */
  double* expert_cdf; /* moe: cumulative popularity by popularity rank (e) */
  int* expert_rank;   /* moe: rank holding the expert of popularity rank r (e) */
  int* picked;        /* moe scratch: popularity ranks chosen for one token (k) */
  double* w;          /* scratch: weight per destination (n) */
  size_t* row;        /* scratch: one source's counts (n) */
};

/* What one size sends and receives, in elements. */
struct layout {
  size_t bytes;      /* bytes each rank sends, whole elements */
  size_t count;      /* elements each rank sends */
  size_t per_peer;   /* uniform: the count argument of moecclAlltoAll */
  size_t recv_elems; /* elements this rank receives */
  size_t *sc, *sd, *rc, *rd;  /* counts and packed displacements */
  int *isc, *isd, *irc, *ird; /* the same as int, for MPI_Alltoallv */
  int mpi_fits;               /* on every rank all of them fit an int */
  uint64_t digest;            /* hash of the whole count matrix */
};

struct buffers {
  char *send, *recv;      /* shared by moeccl and MPI */
  char *copy_src, *copy_dst; /* roofline only */
  size_t send_cap, recv_cap; /* recv_cap includes GUARD_BYTES */
  int lib_alloc;             /* send/recv come from moecclMemAlloc */
};

/* Network roofline: one connected TCP socket per pair of ranks. */
struct netmesh {
  int on;                      /* mesh up on every rank; 0 once skipped */
  int yield;                   /* sched_yield after an idle sweep (oversubscribed) */
  int local, cpus;             /* ranks on this node, CPUs they may run on */
  int* fd;                     /* per peer; -1 for this rank and when closed */
  size_t *soff, *slen, *sdone; /* per peer: send offset, length, progress */
  size_t *roff, *rlen, *rdone; /* per peer: the same for the receive side */
};

struct bench {
  const struct opts* o;
  moecclComm_t comm;
  int me, n;
  struct layout L;
  struct buffers B;
  struct netmesh net;
  moecclResult_t err; /* first moeccl error on this rank */
};

struct row {
  size_t bytes, count, recv_max;
  char algo[48];
  double moe_us, mpi_us, roof_us; /* mpi_us < 0: not measured */
  double net_us;                  /* net roofline; < 0: not measured */
  long long moe_wrong, mpi_wrong; /* < 0: not checked */
};

struct rows {
  struct row* v;
  size_t len, cap;
};

/* ---- small helpers ------------------------------------------------------ */

static void* xcalloc(size_t n, size_t size)
{
  void* p = calloc(n ? n : 1, size ? size : 1);
  if (!p) {
    fprintf(stderr, "a2a_perf: out of memory\n");
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  return p;
}

static uint64_t mix64(uint64_t x)
{
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

static uint64_t rng_next(uint64_t* s)
{
  *s += 0x9e3779b97f4a7c15ULL;
  return mix64(*s);
}

static double rng_unit(uint64_t* s)
{
  return (double)(rng_next(s) >> 11) * 0x1.0p-53;
}

/* Seeded Fisher-Yates: every rank draws the same permutation. */
static void shuffle(int* p, int n, uint64_t seed)
{
  uint64_t s = seed;
  for (int i = 0; i < n; i++)
    p[i] = i;
  for (int i = n - 1; i > 0; i--) {
    int j = (int)(rng_next(&s) % (uint64_t)(i + 1));
    int t = p[i];
    p[i] = p[j];
    p[j] = t;
  }
}

static int cmp_double(const void* a, const void* b)
{
  double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}

static double median(const double* v, int n)
{
  double* s = xcalloc((size_t)n, sizeof *s);
  memcpy(s, v, (size_t)n * sizeof *s);
  qsort(s, (size_t)n, sizeof *s, cmp_double);
  double m = n % 2 ? s[n / 2] : 0.5 * (s[n / 2 - 1] + s[n / 2]);
  free(s);
  return m;
}

static MPI_Datatype mpi_type(moecclDataType_t t)
{
  /* MPI has no 16- or 8-bit floats; all-to-all only moves bytes, so an
   * unsigned integer of the same width is exact. */
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

/* ---- options ------------------------------------------------------------ */

static void usage(const char* prog)
{
  printf("usage: mpirun -np N %s [options]\n"
         "  -b, --minbytes SIZE      smallest size, bytes each rank sends (K/M/G; default 32M)\n"
         "  -e, --maxbytes SIZE      largest size (default 32M)\n"
         "  -f, --stepfactor N       multiply the size by N each step (default 2)\n"
         "  -n, --iters N            timed calls per rep (default 20)\n"
         "  -w, --warmup_iters N     untimed calls per series (default 5)\n"
         "  -c, --check 0|1          verify every received element (default 1)\n"
         "  -d, --datatype TYPE      int8 uint8 int32 uint32 int64 uint64 half|float16\n"
         "                           float|float32 double|float64 bfloat16 fp8e4m3 fp8e5m2\n"
         "                           (default float)\n"
         "  -a, --algo ALGO|all      set MOECCL_ALGO per series; all = $MOECCL_ALGO_LIST\n"
         "                           or every algorithm and auto (the tuner's choice);\n"
         "                           a comma list also works\n"
         "  -r, --reps N             reps per size, algorithms and MPI interleaved; the\n"
         "                           median is reported (default 5)\n"
         "  -M, --memalloc           buffers from moecclMemAlloc instead of malloc\n"
         "      --baseline mpi|none  baseline library (default mpi)\n"
         "      --dist D             uniform | zipf:S | moe:E,K (default uniform)\n"
         "      --seed N             seed of the uneven splits (default fixed)\n"
         "      --json FILE          also write every row to FILE as a JSON array\n"
         "      --net-roofline[=ADDR]\n"
         "                           time the same exchange over bare TCP sockets on\n"
         "                           ADDR (default 127.0.0.1) and show it as the roofline\n"
         "  -h, --help               this text\n",
         prog);
}

static int parse_size(const char* s, size_t* out)
{
  char* end;
  unsigned long long mul = 1;
  errno = 0;
  unsigned long long v = strtoull(s, &end, 10);
  if (errno || end == s || *s == '-')
    return -1;
  switch (*end) {
  case 'G': case 'g': mul <<= 10; /* fall through */
  case 'M': case 'm': mul <<= 10; /* fall through */
  case 'K': case 'k': mul <<= 10; end++; break;
  default: break;
  }
  if (*end == 'B' || *end == 'b')
    end++;
  if (*end || v > SIZE_MAX / mul)
    return -1;
  *out = (size_t)(v * mul);
  return 0;
}

static int parse_int(const char* s, int lo, int hi, int* out)
{
  char* end;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (errno || end == s || *end || v < lo || v > hi)
    return -1;
  *out = (int)v;
  return 0;
}

static int parse_dtype(const char* s, struct opts* o)
{
  for (size_t i = 0; i < sizeof dtypes / sizeof dtypes[0]; i++) {
    if (strcmp(s, dtypes[i].name) == 0 || (dtypes[i].alias && strcmp(s, dtypes[i].alias) == 0)) {
      o->dt = &dtypes[i];
      return 0;
    }
  }
  return -1;
}

static int parse_moe(const char* s, struct opts* o)
{
  char* end;
  long e = strtol(s, &end, 10);
  if (end == s || *end != ',')
    return -1;
  const char* ks = end + 1;
  long k = strtol(ks, &end, 10);
  if (end == ks || *end || e < 1 || e > (1L << 20) || k < 1 || k > e)
    return -1;
  o->moe_e = (int)e;
  o->moe_k = (int)k;
  snprintf(o->dist_name, sizeof o->dist_name, "moe:%d,%d", o->moe_e, o->moe_k);
  return 0;
}

static int parse_dist(const char* s, struct opts* o)
{
  char* end;
  if (strcmp(s, "uniform") == 0) {
    o->dist = DIST_UNIFORM;
    snprintf(o->dist_name, sizeof o->dist_name, "uniform");
    return 0;
  }
  if (strncmp(s, "zipf:", 5) == 0) {
    o->zipf_s = strtod(s + 5, &end);
    if (end == s + 5 || *end || !(o->zipf_s >= 0.0 && o->zipf_s <= 100.0))
      return -1;
    o->dist = DIST_ZIPF;
    snprintf(o->dist_name, sizeof o->dist_name, "zipf:%g", o->zipf_s);
    return 0;
  }
  if (strncmp(s, "moe:", 4) == 0) {
    o->dist = DIST_MOE;
    return parse_moe(s + 4, o);
  }
  return -1;
}

static void set_defaults(struct opts* o)
{
  memset(o, 0, sizeof *o);
  o->minbytes = o->maxbytes = 32u << 20;
  o->step = 2;
  o->iters = 20;
  o->warmup = 5;
  o->check = 1;
  o->reps = 5;
  o->mpi_baseline = 1;
  o->dt = &dtypes[7]; /* float */
  o->dist = DIST_UNIFORM;
  snprintf(o->dist_name, sizeof o->dist_name, "uniform");
  o->seed = DEFAULT_SEED;
}

enum { OPT_BASELINE = 256, OPT_DIST, OPT_JSON, OPT_SEED, OPT_NETROOF };

static const struct option long_opts[] = {
    {"minbytes", required_argument, NULL, 'b'},  {"maxbytes", required_argument, NULL, 'e'},
    {"stepfactor", required_argument, NULL, 'f'}, {"iters", required_argument, NULL, 'n'},
    {"warmup_iters", required_argument, NULL, 'w'}, {"check", required_argument, NULL, 'c'},
    {"datatype", required_argument, NULL, 'd'},  {"algo", required_argument, NULL, 'a'},
    {"reps", required_argument, NULL, 'r'},      {"memalloc", no_argument, NULL, 'M'},
    {"baseline", required_argument, NULL, OPT_BASELINE},
    {"dist", required_argument, NULL, OPT_DIST}, {"json", required_argument, NULL, OPT_JSON},
    {"seed", required_argument, NULL, OPT_SEED}, {"help", no_argument, NULL, 'h'},
    {"net-roofline", optional_argument, NULL, OPT_NETROOF},
    {NULL, 0, NULL, 0}};

static const char* opt_name(int c)
{
  for (const struct option* p = long_opts; p->name; p++)
    if (p->val == c)
      return p->name;
  return "?";
}

/* One option; returns 0, or -1 with the value rejected. */
static int apply_opt(int c, const char* arg, struct opts* o)
{
  int step;
  switch (c) {
  case 'b': return parse_size(arg, &o->minbytes);
  case 'e': return parse_size(arg, &o->maxbytes);
  case 'f':
    if (parse_int(arg, 1, 1 << 20, &step))
      return -1;
    o->step = (size_t)step;
    return 0;
  case 'n': return parse_int(arg, 1, INT_MAX, &o->iters);
  case 'w': return parse_int(arg, 0, INT_MAX, &o->warmup);
  case 'c': return parse_int(arg, 0, 1, &o->check);
  case 'd': return parse_dtype(arg, o);
  case 'a': o->algo = arg; return 0;
  case 'r': return parse_int(arg, 1, 10000, &o->reps);
  case 'M': o->memalloc = 1; return 0;
  case OPT_BASELINE:
    if (strcmp(arg, "mpi") && strcmp(arg, "none"))
      return -1;
    o->mpi_baseline = strcmp(arg, "mpi") == 0;
    return 0;
  case OPT_DIST: return parse_dist(arg, o);
  case OPT_JSON: o->json = arg; return 0;
  case OPT_NETROOF: {
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
  case OPT_SEED: {
    char* end;
    errno = 0;
    o->seed = strtoull(arg, &end, 0);
    return errno || end == arg || *end ? -1 : 0;
  }
  default: return -1;
  }
}

/* Every rank parses the same argv; only rank 0 talks.  Returns 0 to run,
 * 1 after -h, 2 on a bad command line. */
static int parse_opts(int argc, char** argv, int me, struct opts* o)
{
  int c;
  set_defaults(o);
  opterr = me == 0;
  while ((c = getopt_long(argc, argv, "b:e:f:n:w:c:d:a:r:Mh", long_opts, NULL)) != -1) {
    if (c == 'h') {
      if (me == 0)
        usage(argv[0]);
      return 1;
    }
    if (c == '?' || apply_opt(c, optarg, o)) {
      if (me == 0 && c != '?')
        fprintf(stderr, "a2a_perf: bad value '%s' for --%s (see -h)\n", optarg ? optarg : "",
                opt_name(c));
      return 2;
    }
  }
  const char* why = NULL;
  if (optind < argc)
    why = "unexpected argument";
  else if (o->minbytes == 0 || o->minbytes > o->maxbytes)
    why = "need 0 < minbytes <= maxbytes";
  else if (o->step < 2 && o->minbytes != o->maxbytes)
    why = "stepfactor must be >= 2 unless minbytes == maxbytes";
  if (why && me == 0)
    fprintf(stderr, "a2a_perf: %s (see -h)\n", why);
  return why ? 2 : 0;
}

/* ---- splits ------------------------------------------------------------- */

static void model_init(struct model* m, const struct opts* o, int n)
{
  memset(m, 0, sizeof *m);
  m->n = n;
  m->kind = o->dist;
  m->seed = o->seed;
  m->w = xcalloc((size_t)n, sizeof *m->w);
  m->row = xcalloc((size_t)n, sizeof *m->row);
  if (o->dist == DIST_ZIPF) {
    m->zipf_w = xcalloc((size_t)n, sizeof *m->zipf_w);
    m->rank_perm = xcalloc((size_t)n, sizeof *m->rank_perm);
    for (int r = 0; r < n; r++)
      m->zipf_w[r] = pow(r + 1.0, -o->zipf_s);
    shuffle(m->rank_perm, n, mix64(o->seed ^ 0x7a697066ULL));
  } else if (o->dist == DIST_MOE) {
    int* order = xcalloc((size_t)o->moe_e, sizeof *order);
    m->e = o->moe_e;
    m->k = o->moe_k;
    m->expert_cdf = xcalloc((size_t)m->e, sizeof *m->expert_cdf);
    m->expert_rank = xcalloc((size_t)m->e, sizeof *m->expert_rank);
    m->picked = xcalloc((size_t)m->k, sizeof *m->picked);
    /* Hot experts are the same for every source (as in a real router), and
     * a seeded shuffle decides which ranks host them.  Experts are placed in
     * contiguous, even ranges of ranks. */
    shuffle(order, m->e, mix64(o->seed ^ 0x6d6f65ULL));
    double cum = 0.0;
    for (int r = 0; r < m->e; r++) {
      cum += pow(r + 1.0, -MOE_POPULARITY_S);
      m->expert_cdf[r] = cum;
      m->expert_rank[r] = (int)((uint64_t)order[r] * (uint64_t)n / (uint64_t)m->e);
    }
    free(order);
  }
}

static void model_free(struct model* m)
{
  free(m->w);
  free(m->row);
  free(m->zipf_w);
  free(m->rank_perm);
  free(m->expert_cdf);
  free(m->expert_rank);
  free(m->picked);
}

/* Cuts total into n blocks proportional to w by rounding the running sum, so
 * the blocks add up to exactly total and equal inputs give equal cuts on
 * every rank.  Zero weights give zero blocks. */
static void apportion(const double* w, int n, size_t total, size_t* out)
{
  double sum = 0.0, cum = 0.0;
  size_t prev = 0;
  for (int j = 0; j < n; j++)
    sum += w[j];
  for (int j = 0; j < n; j++) {
    cum += w[j];
    size_t b = total;
    if (j < n - 1)
      b = sum > 0.0 ? (size_t)floor((double)total * (cum / sum)) : total * (size_t)(j + 1) / (size_t)n;
    if (b > total)
      b = total;
    if (b < prev)
      b = prev;
    out[j] = b - prev;
    prev = b;
  }
}

static int moe_pick(struct model* m, uint64_t* rng, int got)
{
  for (int tries = 0; tries < MOE_MAX_REDRAWS; tries++) {
    double u = rng_unit(rng) * m->expert_cdf[m->e - 1];
    int lo = 0, hi = m->e - 1;
    while (lo < hi) { /* first popularity rank whose cdf exceeds u */
      int mid = (lo + hi) / 2;
      if (m->expert_cdf[mid] > u)
        hi = mid;
      else
        lo = mid + 1;
    }
    int dup = 0;
    for (int i = 0; i < got; i++)
      dup |= m->picked[i] == lo;
    if (!dup)
      return lo;
  }
  /* A very skewed tail can make redraws slow; the hottest free expert is
   * the most likely outcome anyway. */
  for (int r = 0;; r++) {
    int dup = 0;
    for (int i = 0; i < got; i++)
      dup |= m->picked[i] == r;
    if (!dup)
      return r;
  }
}

/* Routes min(total, MOE_TOKENS_MAX) tokens of source src to k distinct
 * experts each and counts (token, expert) pairs per destination rank: a
 * token bound for two experts of one rank is sent twice, as a plain
 * all-to-all dispatch does. */
static void moe_weights(struct model* m, int src, size_t total, size_t bytes)
{
  uint64_t rng = mix64(m->seed ^ mix64((uint64_t)src + 1) ^ mix64(bytes ^ 0x5a5aULL));
  size_t tokens = total < MOE_TOKENS_MAX ? total : MOE_TOKENS_MAX;
  memset(m->w, 0, (size_t)m->n * sizeof *m->w);
  for (size_t t = 0; t < tokens; t++) {
    for (int got = 0; got < m->k; got++) {
      int r = moe_pick(m, &rng, got);
      m->picked[got] = r;
      m->w[m->expert_rank[r]] += 1.0;
    }
  }
}

/* Counts (elements) that source src sends to each rank for this size; the
 * same on every rank, from (seed, src, size) alone. */
static void dist_row(struct model* m, int src, size_t total, size_t bytes)
{
  int n = m->n;
  if (m->kind == DIST_ZIPF) {
    /* Rotating by src puts each source's hot destination on another rank. */
    for (int r = 0; r < n; r++)
      m->w[m->rank_perm[(r + src) % n]] = m->zipf_w[r];
  } else if (m->kind == DIST_MOE) {
    moe_weights(m, src, total, bytes);
  } else {
    for (int j = 0; j < n; j++)
      m->w[j] = 1.0;
  }
  apportion(m->w, n, total, m->row);
}

static void layout_alloc(struct layout* L, int n)
{
  memset(L, 0, sizeof *L);
  L->sc = xcalloc((size_t)n, sizeof(size_t));
  L->sd = xcalloc((size_t)n, sizeof(size_t));
  L->rc = xcalloc((size_t)n, sizeof(size_t));
  L->rd = xcalloc((size_t)n, sizeof(size_t));
  L->isc = xcalloc((size_t)n, sizeof(int));
  L->isd = xcalloc((size_t)n, sizeof(int));
  L->irc = xcalloc((size_t)n, sizeof(int));
  L->ird = xcalloc((size_t)n, sizeof(int));
}

static void layout_free(struct layout* L)
{
  free(L->sc); free(L->sd); free(L->rc); free(L->rd);
  free(L->isc); free(L->isd); free(L->irc); free(L->ird);
}

static void fill_counts(struct layout* L, struct model* m, int me, size_t ts)
{
  int n = m->n;
  if (m->kind == DIST_UNIFORM) {
    L->per_peer = L->bytes / (ts * (size_t)n);
    L->count = L->per_peer * (size_t)n;
    for (int j = 0; j < n; j++)
      L->sc[j] = L->rc[j] = L->per_peer;
    L->digest = mix64(L->per_peer);
    return;
  }
  L->count = L->bytes / ts;
  L->digest = 0;
  /* Every rank builds the whole matrix: row src gives our recvcounts[src];
   * the digest lets the ranks prove they built the same one. */
  for (int src = 0; src < n; src++) {
    dist_row(m, src, L->count, L->count * ts);
    L->rc[src] = m->row[me];
    if (src == me)
      memcpy(L->sc, m->row, (size_t)n * sizeof *L->sc);
    for (int j = 0; j < n; j++)
      L->digest = mix64(L->digest ^ (m->row[j] + 0x9e3779b97f4a7c15ULL * (uint64_t)(j + 1)));
  }
}

static int fits_int(size_t v) { return v <= (size_t)INT_MAX; }

/* Packed displacements (prefix sums) and their int copies for MPI. */
static void fill_displs(struct layout* L, int n)
{
  size_t s = 0, r = 0;
  L->mpi_fits = fits_int(L->per_peer);
  for (int j = 0; j < n; j++) {
    L->sd[j] = s;
    L->rd[j] = r;
    s += L->sc[j];
    r += L->rc[j];
    L->mpi_fits &= fits_int(L->sc[j]) && fits_int(L->rc[j]) && fits_int(L->sd[j]) && fits_int(L->rd[j]);
    L->isc[j] = (int)L->sc[j];
    L->isd[j] = (int)L->sd[j];
    L->irc[j] = (int)L->rc[j];
    L->ird[j] = (int)L->rd[j];
  }
  L->recv_elems = r;
}

static void layout_build(struct layout* L, struct model* m, int me, size_t ts, size_t req)
{
  L->bytes = req;
  fill_counts(L, m, me, ts);
  L->bytes = L->count * ts;
  fill_displs(L, m->n);
}

/* ---- buffers ------------------------------------------------------------ */

static char* buf_alloc(size_t size, int lib)
{
  void* p = NULL;
  if (lib) {
    moecclResult_t r = moecclMemAlloc(&p, size);
    if (r != moecclSuccess) {
      fprintf(stderr, "a2a_perf: moecclMemAlloc(%zu) failed: %s: %s\n", size,
              moecclGetErrorString(r), moecclGetLastError(NULL));
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
  } else {
    p = malloc(size);
    if (!p) {
      fprintf(stderr, "a2a_perf: malloc(%zu) failed\n", size);
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
    fprintf(stderr, "a2a_perf: moecclMemFree failed: %s\n", moecclGetErrorString(r));
}

static void buffers_alloc(struct buffers* B, size_t send_max, size_t recv_max, int lib)
{
  B->lib_alloc = lib;
  B->send_cap = send_max ? send_max : 1;
  B->recv_cap = recv_max + GUARD_BYTES;
  B->send = buf_alloc(B->send_cap, lib);
  B->recv = buf_alloc(B->recv_cap, lib);
  B->copy_src = buf_alloc(B->recv_cap, 0);
  B->copy_dst = buf_alloc(B->recv_cap, 0);
}

static void buffers_free(struct buffers* B)
{
  buf_release(B->send, B->lib_alloc);
  buf_release(B->recv, B->lib_alloc);
  free(B->copy_src);
  free(B->copy_dst);
}

/* ---- data check --------------------------------------------------------- */

/* Element k of the block from src to dst; depends on all three, so a block
 * from the wrong peer or at the wrong offset does not pass. */
static uint64_t block_key(int src, int dst)
{
  return mix64(DEFAULT_SEED ^ ((uint64_t)(uint32_t)src << 32 | (uint32_t)dst));
}

static uint64_t elem_value(uint64_t key, size_t k) { return mix64(key + k); }

/* Typed stores and loads keep the check independent of byte order. */
static void put_elem(char* p, size_t ts, uint64_t v)
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

static uint64_t get_elem(const char* p, size_t ts)
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

static uint64_t elem_mask(size_t ts) { return ts >= 8 ? ~0ULL : (1ULL << (8 * ts)) - 1; }

static void fill_send(struct bench* b)
{
  size_t ts = b->o->dt->size;
  for (int j = 0; j < b->n; j++) {
    uint64_t key = block_key(b->me, j);
    char* p = b->B.send + b->L.sd[j] * ts;
    for (size_t k = 0; k < b->L.sc[j]; k++)
      put_elem(p + k * ts, ts, elem_value(key, k));
  }
}

static long long verify_recv(const struct bench* b)
{
  size_t ts = b->o->dt->size;
  uint64_t mask = elem_mask(ts);
  long long wrong = 0;
  for (int i = 0; i < b->n; i++) {
    uint64_t key = block_key(i, b->me);
    const char* p = b->B.recv + b->L.rd[i] * ts;
    for (size_t k = 0; k < b->L.rc[i]; k++)
      wrong += get_elem(p + k * ts, ts) != (elem_value(key, k) & mask);
  }
  /* Bytes past the last block must not be touched: each element-sized
   * piece of the guard that lost the sentinel counts as one wrong element. */
  const unsigned char* g = (const unsigned char*)b->B.recv + b->L.recv_elems * ts;
  for (size_t off = 0; off < GUARD_BYTES; off += ts) {
    int bad = 0;
    for (size_t i = 0; i < ts; i++)
      bad |= g[off + i] != SENTINEL;
    wrong += bad;
  }
  return wrong;
}

/* ---- the calls ---------------------------------------------------------- */

static moecclResult_t moe_call(struct bench* b)
{
  const struct layout* L = &b->L;
  int uniform = b->o->dist == DIST_UNIFORM;
  moecclResult_t r;
  if (uniform)
    r = moecclAlltoAll(b->B.send, b->B.recv, L->per_peer, b->o->dt->type, b->comm, NULL);
  else
    r = moecclAlltoAllv(b->B.send, L->sc, L->sd, b->B.recv, L->rc, L->rd, b->o->dt->type,
                        b->comm, NULL);
  if (r != moecclSuccess && b->err == moecclSuccess) {
    b->err = r;
    fprintf(stderr, "# rank %d: moeccl%s (%zu bytes) failed: %s: %s\n", b->me,
            uniform ? "AlltoAll" : "AlltoAllv", L->bytes, moecclGetErrorString(r),
            moecclGetLastError(b->comm));
  }
  return r;
}

static void mpi_call(struct bench* b)
{
  const struct layout* L = &b->L;
  MPI_Datatype t = mpi_type(b->o->dt->type);
  if (b->o->dist == DIST_UNIFORM)
    MPI_Alltoall(b->B.send, (int)L->per_peer, t, b->B.recv, (int)L->per_peer, t, MPI_COMM_WORLD);
  else
    MPI_Alltoallv(b->B.send, L->isc, L->isd, t, b->B.recv, L->irc, L->ird, t, MPI_COMM_WORLD);
}

/* Runs calls back to back after a barrier and returns the slowest rank's
 * mean time per call in us.  Also tells every rank whether any moeccl call
 * failed anywhere, so all ranks leave together instead of hanging. */
static double run_series(struct bench* b, enum lib lib, int calls, int* failed)
{
  double t[2];
  MPI_Barrier(MPI_COMM_WORLD);
  double t0 = MPI_Wtime();
  for (int i = 0; i < calls; i++) {
    if (lib == LIB_MPI)
      mpi_call(b);
    else if (moe_call(b) != moecclSuccess)
      break;
  }
  t[0] = calls ? (MPI_Wtime() - t0) / calls * 1e6 : 0.0;
  t[1] = b->err != moecclSuccess;
  MPI_Allreduce(MPI_IN_PLACE, t, 2, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  *failed = t[1] > 0.0;
  return t[0];
}

/* One call from a patterned send buffer into a sentinel-filled receive
 * buffer.  Returns the wrong elements summed over ranks, or -1 when a moeccl
 * call failed on some rank. */
static long long check_once(struct bench* b, enum lib lib)
{
  long long v[2];
  fill_send(b);
  memset(b->B.recv, SENTINEL, b->L.recv_elems * b->o->dt->size + GUARD_BYTES);
  MPI_Barrier(MPI_COMM_WORLD);
  if (lib == LIB_MPI)
    mpi_call(b);
  else
    moe_call(b);
  v[0] = verify_recv(b);
  v[1] = b->err != moecclSuccess;
  MPI_Allreduce(MPI_IN_PLACE, v, 2, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
  return v[1] ? -1 : v[0];
}

/* Copy roofline: one thread copies the bytes this rank receives between two
 * buffers touched beforehand.  Ranks copy at the same time, as they do inside
 * the collective, and the slowest rank counts. */
static double roofline_us(struct bench* b, size_t bytes)
{
  const struct opts* o = b->o;
  double* t = xcalloc((size_t)o->reps, sizeof *t);
  volatile unsigned char sink = 0;
  for (int rep = 0; rep < o->reps; rep++) {
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    for (int i = 0; i < o->iters; i++) {
      memcpy(b->B.copy_dst, b->B.copy_src, bytes);
      /* Reading the copy keeps the compiler from dropping it. */
      sink ^= (unsigned char)b->B.copy_dst[bytes ? (size_t)i % bytes : 0];
    }
    t[rep] = (MPI_Wtime() - t0) / o->iters * 1e6;
  }
  (void)sink;
  double m = median(t, o->reps);
  free(t);
  MPI_Allreduce(MPI_IN_PLACE, &m, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return m;
}

/* ---- network roofline --------------------------------------------------- */

/* What bare kernel TCP does with the same blocks: every rank sends its block
 * to every peer and receives every peer's block over one connected socket
 * per pair, all peers in flight at once, and copies its own block, as the
 * all-to-all must.  One thread busy-polls non-blocking sockets with calls as
 * large as the blocks; the socket buffers keep the kernel's defaults (and
 * their autotuning). */

static void net_error(int me, const char* what, int peer, int err)
{
  char who[32] = "";
  if (peer >= 0)
    snprintf(who, sizeof who, " rank %d", peer);
  fprintf(stderr, "a2a_perf: rank %d: --net-roofline: %s%s: %s; the network roofline is skipped\n",
          me, what, who, err ? strerror(err) : "connection closed");
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
    fprintf(stderr, "a2a_perf: rank %d: --net-roofline: address %s: %s; the network roofline is "
            "skipped\n", me, addr, gai_strerror(rc));
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
static int net_accept_all(struct netmesh* M, int lfd, int me)
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

static void net_close(struct netmesh* M, int n)
{
  for (int j = 0; j < n && M->fd; j++) {
    if (M->fd[j] >= 0)
      close(M->fd[j]);
    M->fd[j] = -1;
  }
  M->on = 0;
}

/* Busy polling with more ranks than CPUs on a node spins away the time
 * slices of the ranks that have work; then an idle sweep yields the CPU, as
 * Open MPI does when oversubscribed (mpi_yield_when_idle).  The CPUs are the
 * union of the local ranks' affinity masks. */
static void net_node_cpus(struct netmesh* M)
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
static void net_open(struct netmesh* M, const char* addr, int me, int n)
{
  struct sockaddr_storage ss;
  socklen_t len = 0;
  int* ports = xcalloc((size_t)n, sizeof *ports);
  M->fd = xcalloc((size_t)n, sizeof *M->fd);
  for (int j = 0; j < n; j++)
    M->fd[j] = -1;
  M->soff = xcalloc((size_t)n, sizeof(size_t));
  M->slen = xcalloc((size_t)n, sizeof(size_t));
  M->sdone = xcalloc((size_t)n, sizeof(size_t));
  M->roff = xcalloc((size_t)n, sizeof(size_t));
  M->rlen = xcalloc((size_t)n, sizeof(size_t));
  M->rdone = xcalloc((size_t)n, sizeof(size_t));
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

static void net_free(struct netmesh* M, int n)
{
  net_close(M, n);
  free(M->fd);
  free(M->soff); free(M->slen); free(M->sdone);
  free(M->roff); free(M->rlen); free(M->rdone);
}

/* Shuts every socket, so that peers waiting on this rank fail at once. */
static int net_fail(struct bench* b, const char* what, int peer, int err)
{
  net_error(b->me, what, peer, err);
  for (int j = 0; j < b->n; j++)
    if (b->net.fd[j] >= 0)
      shutdown(b->net.fd[j], SHUT_RDWR);
  return -1;
}

static int net_again(int err) { return err == EAGAIN || err == EWOULDBLOCK || err == EINTR; }

/* One exchange of the blocks in M->soff/slen and M->roff/rlen.  Returns 0,
 * or -1 after a socket error or NET_STALL_S without progress. */
static int net_once(struct bench* b)
{
  struct netmesh* M = &b->net;
  int n = b->n, me = b->me, pending = 0, copied = 0;
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
        ssize_t w = send(fd, b->B.send + M->soff[j] + M->sdone[j], M->slen[j] - M->sdone[j],
                         MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w < 0 && !net_again(errno))
          return net_fail(b, "send to", j, errno);
        if (w > 0) {
          progress = 1;
          M->sdone[j] += (size_t)w;
          pending -= M->sdone[j] == M->slen[j];
        }
      }
      if (M->rdone[j] < M->rlen[j]) {
        ssize_t r = recv(fd, b->B.recv + M->roff[j] + M->rdone[j], M->rlen[j] - M->rdone[j],
                         MSG_DONTWAIT);
        if (r == 0 || (r < 0 && !net_again(errno)))
          return net_fail(b, "receive from", j, r == 0 ? 0 : errno);
        if (r > 0) {
          progress = 1;
          M->rdone[j] += (size_t)r;
          pending -= M->rdone[j] == M->rlen[j];
        }
      }
    }
    /* The own block, once the first sends are under way. */
    if (!copied) {
      memcpy(b->B.recv + M->roff[me], b->B.send + M->soff[me], M->slen[me]);
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
      return net_fail(b, what, -1, ETIMEDOUT);
    }
  }
}

/* Times the exchange of the current layout as the copy roofline times its
 * copy: warmup, then reps of iters exchanges after a barrier, the median of
 * the reps, the slowest rank.  With the check on, the blocks that arrived
 * are verified as a library's.  Returns us, or -1 when not measured (any
 * socket error ends the mesh for the rest of the run). */
static double net_roofline_us(struct bench* b)
{
  struct netmesh* M = &b->net;
  const struct opts* o = b->o;
  const struct layout* L = &b->L;
  size_t ts = o->dt->size;
  if (!M->on)
    return -1.0;
  for (int j = 0; j < b->n; j++) {
    M->soff[j] = L->sd[j] * ts;
    M->slen[j] = L->sc[j] * ts;
    M->roff[j] = L->rd[j] * ts;
    M->rlen[j] = L->rc[j] * ts;
  }
  if (o->check) {
    fill_send(b);
    memset(b->B.recv, SENTINEL, L->recv_elems * ts + GUARD_BYTES);
  }
  double* t = xcalloc((size_t)o->reps, sizeof *t);
  int bad = 0;
  MPI_Barrier(MPI_COMM_WORLD);
  for (int i = 0; i < o->warmup && !bad; i++)
    bad = net_once(b) != 0;
  for (int rep = 0; rep < o->reps; rep++) {
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    for (int i = 0; i < o->iters && !bad; i++)
      bad = net_once(b) != 0;
    t[rep] = (MPI_Wtime() - t0) / o->iters * 1e6;
  }
  double v[3] = {median(t, o->reps), bad, !bad && o->check ? (double)verify_recv(b) : 0.0};
  free(t);
  MPI_Allreduce(MPI_IN_PLACE, v, 2, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  MPI_Allreduce(MPI_IN_PLACE, &v[2], 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  if (v[1] > 0.0) {
    if (b->me == 0)
      printf("# net roofline: a socket failed at size %zu (see stderr); skipped from here on\n",
             L->bytes);
    net_close(M, b->n);
    return -1.0;
  }
  if (v[2] > 0.0) {
    if (b->me == 0)
      printf("# net roofline: %.0f wrong elements at size %zu; not shown\n", v[2], L->bytes);
    return -1.0;
  }
  return v[0];
}

/* ---- output ------------------------------------------------------------- */

static double algbw(size_t bytes, double us) { return us > 0.0 ? (double)bytes / (us * 1e3) : 0.0; }

static void print_rank_list(int me, int n)
{
  char host[HOST_LEN] = {0};
  char* all = me == 0 ? xcalloc((size_t)n, HOST_LEN) : NULL;
  int pid = (int)getpid();
  int* pids = me == 0 ? xcalloc((size_t)n, sizeof *pids) : NULL;
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

static void print_header(const struct opts* o, const struct netmesh* net, int me, int n,
                         char** algos, int nalgos)
{
  int ver = 0, len = 0;
  char mpiver[MPI_MAX_LIBRARY_VERSION_STRING];
  moecclGetVersion(&ver);
  MPI_Get_library_version(mpiver, &len);
  mpiver[strcspn(mpiver, "\n,")] = '\0';
  if (me == 0) {
    printf("# a2a_perf: moeccl %d.%d.%d vs %s\n", ver / 10000, ver / 100 % 100, ver % 100,
           o->mpi_baseline ? mpiver : "no baseline");
    printf("# nranks %d  minBytes %zu  maxBytes %zu  step: %zu(factor)  warmup iters: %d  "
           "iters: %d  reps: %d  validation: %d\n",
           n, o->minbytes, o->maxbytes, o->step, o->warmup, o->iters, o->reps, o->check);
    printf("# type %s  dist %s  memory %s  stream NULL  algo:", o->dt->name, o->dist_name,
           o->memalloc ? "moecclMemAlloc" : "malloc");
    for (int i = 0; i < nalgos; i++)
      printf("%s%s", i ? "," : " ", algos[i] ? algos[i] : "(library choice)");
    printf("\n");
    if (o->net_roof && net->on) {
      printf("# net roofline: bare TCP on %s, one socket per pair, TCP_NODELAY, busy polling",
             o->net_addr);
      if (net->yield)
        printf(" (yielding: %d ranks on %d CPUs)", net->local, net->cpus);
      printf(", + own block memcpy\n");
    }
    else if (o->net_roof)
      printf("# net roofline: skipped, the socket mesh on %s failed (see stderr)\n", o->net_addr);
    printf("#\n");
  }
  print_rank_list(me, n);
  if (me == 0) {
    printf("#\n#%60s%-35s%-35s%9s%s\n", "", "moeccl", "mpi", "",
           o->net_roof ? "net roofline" : "copy roofline");
    printf("#%13s %12s %8s %12s %10s %10s %7s %7s %7s %10s %7s %7s %7s %8s %10s %6s %8s\n",
           "size", "count", "type", "dist", "algo", "time", "algbw", "busbw", "#wrong", "time",
           "algbw", "busbw", "#wrong", "speedup", o->net_roof ? "netroof" : "roofline", "%roof",
           "mpi/roof");
    printf("#%13s %12s %8s %12s %10s %10s %7s %7s %7s %10s %7s %7s %7s %8s %10s %6s %8s\n", "(B)",
           "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)",
           "", "mpi/moe", "(us)", "moeccl", "");
    fflush(stdout);
  }
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
static double shown_roof(const struct row* r, const struct opts* o)
{
  return o->net_roof ? r->net_us : r->roof_us;
}

static void print_row(const struct row* r, const struct opts* o, int n)
{
  double f = (double)(n - 1) / n, roof = shown_roof(r, o);
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
  printf(" %13zu %12zu %8s %12s %10s %10.2f %7.2f %7.2f %7s %10s %7s %7s %7s %8s %10s %6s %8s\n",
         r->bytes, r->count, o->dt->name, o->dist_name, r->algo, r->moe_us,
         algbw(r->bytes, r->moe_us), algbw(r->bytes, r->moe_us) * f, mw, pt, pa, pb, pw, sp, rt,
         rp, rm);
  fflush(stdout);
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

static void json_row(FILE* f, const struct row* r, const struct opts* o, int n)
{
  double bf = (double)(n - 1) / n;
  int mpi = r->mpi_us >= 0.0, net = r->net_us >= 0.0;
  fprintf(f, "  {\"size\": %zu, \"count\": %zu, \"type\": ", r->bytes, r->count);
  json_str(f, o->dt->name);
  fprintf(f, ", \"dist\": ");
  json_str(f, o->dist_name);
  fprintf(f, ", \"algo\": ");
  json_str(f, r->algo);
  fprintf(f, ", \"nranks\": %d, \"recv_bytes_max\": %zu", n, r->recv_max);
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
  json_num(f, "netroof_us", r->net_us, net);
  json_num(f, "pct_netroof", r->moe_us > 0.0 ? r->net_us / r->moe_us * 100.0 : 0.0, net);
  json_num(f, "mpi_over_netroof", net && r->net_us > 0.0 ? r->mpi_us / r->net_us : 0.0,
           mpi && net && r->net_us > 0.0);
  fprintf(f, "}");
}

static int write_json(const char* path, const struct rows* rows, const struct opts* o, int n)
{
  FILE* f = fopen(path, "w");
  if (!f) {
    fprintf(stderr, "a2a_perf: cannot write %s: %s\n", path, strerror(errno));
    return -1;
  }
  fprintf(f, "[\n");
  for (size_t i = 0; i < rows->len; i++) {
    json_row(f, &rows->v[i], o, n);
    fprintf(f, i + 1 < rows->len ? ",\n" : "\n");
  }
  fprintf(f, "]\n");
  return fclose(f) ? -1 : 0;
}

/* Returns the total of wrong elements over all rows. */
/* With an "auto" series among forced ones: per size, the tuner's time against
 * the fastest forced algorithm's (ratio > 1: the tuner lost that much). */
static void print_tuner(const struct rows* rows)
{
  int header = 0;
  for (size_t i = 0; i < rows->len; i++) {
    const struct row* a = &rows->v[i];
    if (strcmp(a->algo, "auto") != 0)
      continue;
    const struct row* best = NULL;
    for (size_t j = 0; j < rows->len; j++) {
      const struct row* r = &rows->v[j];
      if (r->bytes == a->bytes && strcmp(r->algo, "auto") != 0 && (!best || r->moe_us < best->moe_us))
        best = r;
    }
    if (!best)
      continue;
    if (!header)
      printf("# tuner: %12s %10s %10s %-8s %6s\n", "size", "auto(us)", "best(us)", "best", "ratio");
    header = 1;
    printf("# tuner: %12zu %10.1f %10.1f %-8s %6.2f\n", a->bytes, a->moe_us, best->moe_us, best->algo,
           best->moe_us > 0 ? a->moe_us / best->moe_us : 1.0);
  }
}

static long long print_summary(const struct rows* rows, int n, int failed)
{
  double moe_bw = 0.0, mpi_bw = 0.0, logsp = 0.0, f = (double)(n - 1) / n;
  long long wrong = 0;
  int nmpi = 0, nsp = 0;
  for (size_t i = 0; i < rows->len; i++) {
    const struct row* r = &rows->v[i];
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
  print_tuner(rows);
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

/* ---- driving ------------------------------------------------------------ */

static void rows_push(struct rows* rows, const struct row* r)
{
  if (rows->len == rows->cap) {
    rows->cap = rows->cap ? rows->cap * 2 : 16;
    rows->v = realloc(rows->v, rows->cap * sizeof *rows->v);
    if (!rows->v) {
      fprintf(stderr, "a2a_perf: out of memory\n");
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
  }
  rows->v[rows->len++] = *r;
}

/* Names of the series to run: -a all expands $MOECCL_ALGO_LIST (or the
 * default list); without -a one series, NULL, keeps the library's choice. */
static int algo_list(const char* arg, char*** out)
{
  char* list;
  int n = 0;
  if (!arg) {
    *out = xcalloc(1, sizeof **out);
    return 1;
  }
  if (strcmp(arg, "all") == 0) {
    const char* env = getenv("MOECCL_ALGO_LIST");
    arg = env && *env ? env : "direct,pairwise,bruck,hier2,hier3,rail,auto";
  }
  list = strdup(arg);
  *out = xcalloc(strlen(arg) + 1, sizeof **out);
  for (char *save = NULL, *tok = strtok_r(list, ", ", &save); tok; tok = strtok_r(NULL, ", ", &save))
    (*out)[n++] = strdup(tok);
  free(list);
  return n;
}

/* MOECCL_ALGO for a series: a name forces it, "auto" leaves the choice to
 * the library's tuner, NULL keeps the environment as it is. */
static void set_algo_env(const char* name)
{
  if (name && strcmp(name, "auto") == 0)
    unsetenv("MOECCL_ALGO");
  else if (name)
    setenv("MOECCL_ALGO", name, 1);
}

static void algo_label(char* dst, size_t len, const char* name)
{
  const char* env = getenv("MOECCL_ALGO");
  snprintf(dst, len, "%s", name ? name : env && *env ? env : "auto");
}

/* Checks every algorithm's result once, warms each up, then runs the reps:
 * in every rep each algorithm's series and MPI's, the algorithms in an order
 * rotated by one each rep and MPI first or last in turn, so that the machine's
 * slow moments fall on all of them alike and their medians compare.  rows[a]
 * gets algorithm a's median and MPI's.  Returns -1 when a moeccl call
 * failed. */
static int time_all(struct bench* b, char** algos, moecclComm_t* comms, int nalgos, int mpi_on,
                    struct row* rows)
{
  const struct opts* o = b->o;
  int reps = o->reps, failed = 0, f2 = 0;
  double* tm = xcalloc((size_t)reps * (size_t)nalgos, sizeof *tm);
  double* tp = xcalloc((size_t)reps, sizeof *tp);
  for (int a = 0; a < nalgos && !failed; a++) {
    b->comm = comms[a];
    set_algo_env(algos[a]);
    algo_label(rows[a].algo, sizeof rows[a].algo, algos[a]);
    rows[a].moe_wrong = -1;
    if (o->check && (rows[a].moe_wrong = check_once(b, LIB_MOECCL)) < 0)
      failed = 1;
    if (!failed)
      run_series(b, LIB_MOECCL, o->warmup, &failed);
  }
  if (!failed && mpi_on)
    run_series(b, LIB_MPI, o->warmup, &f2);
  for (int rep = 0; rep < reps && !failed; rep++) {
    if (mpi_on && rep % 2)
      tp[rep] = run_series(b, LIB_MPI, o->iters, &f2);
    for (int k = 0; k < nalgos && !failed; k++) {
      int a = (k + rep) % nalgos;
      b->comm = comms[a];
      set_algo_env(algos[a]);
      tm[(size_t)a * (size_t)reps + (size_t)rep] = run_series(b, LIB_MOECCL, o->iters, &failed);
    }
    if (mpi_on && rep % 2 == 0)
      tp[rep] = run_series(b, LIB_MPI, o->iters, &f2);
  }
  double mpi_us = mpi_on ? median(tp, reps) : -1.0;
  for (int a = 0; a < nalgos; a++) {
    rows[a].moe_us = median(tm + (size_t)a * (size_t)reps, reps);
    rows[a].mpi_us = mpi_us;
  }
  free(tm);
  free(tp);
  return failed ? -1 : 0;
}

static void agree_on_layout(const struct layout* L)
{
  uint64_t lo = L->digest, hi = L->digest;
  MPI_Allreduce(MPI_IN_PLACE, &lo, 1, MPI_UINT64_T, MPI_MIN, MPI_COMM_WORLD);
  MPI_Allreduce(MPI_IN_PLACE, &hi, 1, MPI_UINT64_T, MPI_MAX, MPI_COMM_WORLD);
  if (lo != hi) {
    fprintf(stderr, "a2a_perf: ranks computed different splits (seed or libm differs)\n");
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
}

/* All rows of one size.  Returns -1 when a moeccl call failed. */
static int bench_size(struct bench* b, struct model* m, size_t req, char** algos,
                      moecclComm_t* comms, int nalgos, struct rows* rows)
{
  struct row r;
  size_t ts = b->o->dt->size;
  memset(&r, 0, sizeof r);
  layout_build(&b->L, m, b->me, ts, req);
  agree_on_layout(&b->L);
  int mpi_on = b->o->mpi_baseline;
  if (mpi_on)
    MPI_Allreduce(&b->L.mpi_fits, &mpi_on, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  unsigned long long recv_bytes = b->L.recv_elems * ts, recv_max = recv_bytes;
  MPI_Allreduce(MPI_IN_PLACE, &recv_max, 1, MPI_UNSIGNED_LONG_LONG, MPI_MAX, MPI_COMM_WORLD);
  r.bytes = b->L.bytes;
  r.count = b->L.count;
  r.recv_max = (size_t)recv_max;
  r.mpi_wrong = mpi_on && b->o->check ? check_once(b, LIB_MPI) : -1;
  r.roof_us = roofline_us(b, (size_t)recv_bytes);
  r.net_us = net_roofline_us(b);
  struct row* out = xcalloc((size_t)nalgos, sizeof *out);
  for (int a = 0; a < nalgos; a++)
    out[a] = r;
  int rc = time_all(b, algos, comms, nalgos, mpi_on, out);
  for (int a = 0; a < nalgos && rc == 0; a++) {
    if (b->me == 0)
      print_row(&out[a], b->o, b->n);
    rows_push(rows, &out[a]);
  }
  free(out);
  return rc;
}

/* Largest send and receive footprint over all sizes, so one pair of buffers
 * serves the whole run. */
static void footprint(const struct opts* o, struct model* m, int me, size_t* send, size_t* recv)
{
  struct layout L;
  layout_alloc(&L, m->n);
  *send = *recv = 0;
  for (size_t s = o->minbytes; s <= o->maxbytes;) {
    layout_build(&L, m, me, o->dt->size, s);
    if (L.bytes > *send)
      *send = L.bytes;
    if (L.recv_elems * o->dt->size > *recv)
      *recv = L.recv_elems * o->dt->size;
    if (o->step < 2 || s > o->maxbytes / o->step)
      break;
    s *= o->step;
  }
  layout_free(&L);
}

static int comm_init(int me, int n, moecclComm_t* comm)
{
  moecclUniqueId id;
  int bad[2] = {0, 0};
  memset(&id, 0, sizeof id);
  moecclResult_t r = me == 0 ? moecclGetUniqueId(&id) : moecclSuccess;
  if (r != moecclSuccess)
    fprintf(stderr, "a2a_perf: moecclGetUniqueId failed: %s: %s\n", moecclGetErrorString(r),
            moecclGetLastError(NULL));
  bad[0] = r != moecclSuccess;
  MPI_Bcast(bad, 1, MPI_INT, 0, MPI_COMM_WORLD);
  if (bad[0])
    return -1;
  MPI_Bcast(&id, (int)sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD);
  r = moecclCommInitRank(comm, n, id, me);
  if (r != moecclSuccess)
    fprintf(stderr, "a2a_perf: rank %d: moecclCommInitRank failed: %s: %s\n", me,
            moecclGetErrorString(r), moecclGetLastError(NULL));
  bad[1] = r != moecclSuccess;
  MPI_Allreduce(MPI_IN_PLACE, &bad[1], 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (bad[1] && r == moecclSuccess)
    moecclCommAbort(*comm);
  return bad[1] ? -1 : 0;
}

static int run(const struct opts* o, char** algos, moecclComm_t* comms, int nalgos, int me, int n)
{
  struct bench b;
  struct model m;
  struct rows rows = {NULL, 0, 0};
  size_t send_max, recv_max;
  int failed = 0;
  memset(&b, 0, sizeof b);
  b.o = o;
  b.me = me;
  b.n = n;
  model_init(&m, o, n);
  layout_alloc(&b.L, n);
  footprint(o, &m, me, &send_max, &recv_max);
  buffers_alloc(&b.B, send_max, recv_max, o->memalloc);
  if (o->net_roof)
    net_open(&b.net, o->net_addr, me, n);
  print_header(o, &b.net, me, n, algos, nalgos);
  for (size_t s = o->minbytes; s <= o->maxbytes && !failed;) {
    failed = bench_size(&b, &m, s, algos, comms, nalgos, &rows) != 0;
    if (o->step < 2 || s > o->maxbytes / o->step)
      break;
    s *= o->step;
  }
  long long wrong = 0;
  if (me == 0) {
    wrong = print_summary(&rows, n, failed);
    if (o->json && write_json(o->json, &rows, o, n))
      wrong = wrong ? wrong : 1;
  }
  MPI_Bcast(&wrong, 1, MPI_LONG_LONG, 0, MPI_COMM_WORLD);
  free(rows.v);
  if (o->net_roof)
    net_free(&b.net, n);
  buffers_free(&b.B);
  layout_free(&b.L);
  model_free(&m);
  return failed ? -1 : wrong ? 1 : 0;
}

/* One communicator per algorithm, each made with MOECCL_ALGO set to it,
 * because the library may read the variable only when a comm is made. */
static int comms_init(char** algos, int nalgos, int me, int n, moecclComm_t* comms)
{
  for (int a = 0; a < nalgos; a++) {
    set_algo_env(algos[a]);
    if (comm_init(me, n, &comms[a])) {
      for (int i = 0; i < a; i++)
        moecclCommAbort(comms[i]);
      return -1;
    }
  }
  return 0;
}

/* After a failure the peers may be gone: abort locally, never wait. */
static int comms_close(moecclComm_t* comms, int nalgos, int failed, int me)
{
  int rc = 0;
  for (int a = 0; a < nalgos; a++) {
    moecclResult_t r = failed ? moecclCommAbort(comms[a]) : moecclCommDestroy(comms[a]);
    if (r != moecclSuccess) {
      fprintf(stderr, "a2a_perf: rank %d: closing a communicator failed: %s: %s\n", me,
              moecclGetErrorString(r), moecclGetLastError(comms[a]));
      rc = 1;
    }
  }
  return rc;
}

int main(int argc, char** argv)
{
  struct opts o;
  char** algos;
  int me, n;
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &me);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  int pr = parse_opts(argc, argv, me, &o);
  if (pr) {
    MPI_Finalize();
    return pr == 1 ? 0 : 2;
  }
  int nalgos = algo_list(o.algo, &algos);
  if (nalgos == 0) {
    if (me == 0)
      fprintf(stderr, "a2a_perf: -a names no algorithm (see -h)\n");
    free(algos);
    MPI_Finalize();
    return 2;
  }
  moecclComm_t* comms = xcalloc((size_t)nalgos, sizeof *comms);
  int rc = 1;
  if (comms_init(algos, nalgos, me, n, comms) == 0) {
    rc = run(&o, algos, comms, nalgos, me, n);
    if (comms_close(comms, nalgos, rc < 0, me))
      rc = 1;
  }
  for (int i = 0; i < nalgos; i++)
    free(algos[i]);
  free(algos);
  free(comms);
  MPI_Finalize();
  return rc ? 1 : 0;
}
