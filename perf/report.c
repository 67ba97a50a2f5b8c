/*
 * report.c - what the MPI harness prints and writes (perf_common.h): the
 * header, the rank list, the table's rows in nccl-tests' columns, the
 * summary and --json.
 */
#include "perf_common.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define HOST_LEN 64

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
