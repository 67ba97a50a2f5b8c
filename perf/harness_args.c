/*
 * harness_args.c - the command line every tool of the MPI harness shares
 * (perf_common.h): -h's text, the common flags, the tool's own through
 * struct perf_tool, and the sweep of sizes they give.
 */
#include "perf_common.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <netdb.h>

#define NET_ADDR_DEFAULT "127.0.0.1"

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
        usage(perf_tool_name(argv[0]), t);
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
