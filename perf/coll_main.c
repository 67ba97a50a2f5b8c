/*
 * coll_main.c - perf_coll_main (perf_common.h): a whole nccl-tests-shaped
 * tool for one collective described by a struct perf_coll, sweeping types,
 * reduction operations, roots and sizes on the harness's parts.
 */
#include "perf_common.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
      printf("#   (the fastest rep of %s)\n", perf_roofline_kernels());
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
