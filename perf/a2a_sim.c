/*
 * a2a_sim - the all-to-all algorithms on a modelled cluster, without processes.
 *
 * For every size and algorithm it runs the library's own schedule generator
 * (src/algos) for a sample of ranks, prices each schedule with the tuner's
 * cost model (src/tune/cost_model.h) on a modelled topology, and prints the
 * slowest rank's prediction in the columns of nccl-tests' alltoall_perf.
 * Nothing is sent: one algorithm at one size on a 16,384-rank cluster is
 * priced in under a second on one core (times the ranks that share a NIC).
 *
 * Uniform calls on regular topologies give every rank a schedule of the same
 * shape, so a sample spread over nodes, local indices and groups (plus ranks
 * 0 and n-1) stands for all of them; --all-ranks prices every rank.  Uneven
 * splits (--dist) price the heaviest senders and receivers too.  See
 * man/a2a_sim.1 for the options and docs/SIMULATOR.md for what the
 * predictions can be held against.  This file drives; a2a_sim_int.h names the
 * other parts (options, the modelled cluster, the uneven splits).
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "a2a_sim_int.h"
#include "algos/pipeline.h"

/* ---- small helpers ------------------------------------------------------ */

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ---- algorithms and sampled ranks --------------------------------------- */

static int pick_algos(struct sim_run* r) {
  const char* list = r->o->algos;
  if (strcmp(list, "all") == 0) {
    for (int i = 0; i < MOECCL_A2A_NALGOS; i++)
      if (moeccl_a2a_algos[i].name && moeccl_a2a_algos[i].schedule)
        r->algos[r->nalgos++] = &moeccl_a2a_algos[i];
    return 0;
  }
  char buf[256];
  snprintf(buf, sizeof buf, "%s", list);
  for (char *save = NULL, *name = strtok_r(buf, ",", &save); name;
       name = strtok_r(NULL, ",", &save)) {
    const moeccl_a2a_algo_t* a = moeccl_a2a_algo_by_name(name);
    if (!a || !a->schedule) {
      fprintf(stderr, "a2a_sim: unknown algorithm '%s'\n", name);
      return -1;
    }
    if (r->nalgos < MOECCL_A2A_NALGOS) r->algos[r->nalgos++] = a;
  }
  return r->nalgos ? 0 : -1;
}

/* Ranks 0 and n-1, then count ranks on nodes spread evenly over the cluster
 * (so over its groups), each at another local index; or every rank. */
static void pick_sample(struct sim_run* r, unsigned char* seen) {
  const moeccl_topo_t* t = &r->topo;
  if (r->o->all_ranks) {
    for (int i = 0; i < t->nranks; i++)
      r->nsample = moeccl_pricing_sample_add(i, t->nranks, seen, r->sample, r->nsample);
    return;
  }
  r->nsample = moeccl_pricing_sample_spread(t, r->o->sample, seen, r->sample, r->nsample);
}

/* Adds the 8 heaviest senders and the 8 heaviest receivers to the sample:
 * with uneven splits the slowest rank is usually one of them. */
static void sample_heavy(struct sim_run* r, unsigned char* seen) {
  r->nsample = moeccl_pricing_sample_heavy(r->split.counts, r->split.n, 8, seen, r->sample,
                                           r->nsample);
}

/* ---- pricing ------------------------------------------------------------ */

static struct row* new_row(struct sim_run* r) {
  if (r->nrows == r->rows_cap) {
    r->rows_cap = r->rows_cap ? 2 * r->rows_cap : 64;
    r->rows = realloc(r->rows, r->rows_cap * sizeof *r->rows);
    if (!r->rows) {
      fprintf(stderr, "a2a_sim: out of memory\n");
      exit(1);
    }
  }
  struct row* row = &r->rows[r->nrows++];
  memset(row, 0, sizeof *row);
  return row;
}

/* Plans rank's schedule of a into r->sched (counted when it is the one
 * priced, not a NIC-mate's); 0 or -1. */
static int plan_rank(struct sim_run* r, const moeccl_a2a_algo_t* a, moeccl_a2a_desc_t* d, int rank,
                     int priced) {
  d->rank = rank;
  if (d->send_counts) sim_split_desc(&r->split, rank, d);
  moeccl_sched_reset(&r->sched);
  moecclResult_t rc = a->schedule(d, &r->sched);
  if (rc != moecclSuccess) {
    fprintf(stderr, "a2a_sim: %s failed to plan rank %d: %s\n", a->name, rank,
            moecclGetErrorString(rc));
    return -1;
  }
  if (priced) r->schedules++, r->ops += r->sched.nops;
  return 0;
}

/* One algorithm's schedules for moeccl_model_nic_load. */
struct nic_plan {
  struct sim_run* r;
  const moeccl_a2a_algo_t* a;
  moeccl_a2a_desc_t* d;
};

static moecclResult_t nic_plan(void* ctx, int rank, int priced) {
  struct nic_plan* n = ctx;
  return plan_rank(n->r, n->a, n->d, rank, priced) ? moecclInternalError : moecclSuccess;
}

/* Plans and prices one rank with the load of the ranks on its NIC (the
 * cost model's moeccl_model_price_nic: their schedules are planned too);
 * returns its predicted time, or -1. */
static double price_rank(struct sim_run* r, const moeccl_a2a_algo_t* a, moeccl_a2a_desc_t* d,
                         int rank, moeccl_cost_t* cost) {
  struct nic_plan plan = {r, a, d};
  if (moeccl_model_nic_load(&r->nic, &r->topo, rank, &r->sched, nic_plan, &plan) != moecclSuccess)
    return -1.0;
  return moeccl_model_price_nic(&r->topo, &r->sched, rank, &r->nic, cost);
}

static size_t rank_send_bytes(const moeccl_a2a_desc_t* d) {
  if (!d->send_counts) return d->block_bytes * (size_t)d->nranks;
  size_t sum = 0;
  for (int p = 0; p < d->nranks; p++) sum += d->send_counts[p];
  return sum;
}

/* One row: the slowest sampled rank of algorithm a at this size, in
 * `chunks` chunks where a is pipelined. */
static int price_chunks(struct sim_run* r, const moeccl_a2a_algo_t* a, size_t peer_bytes,
                        int chunks) {
  moeccl_a2a_desc_t d = {.nranks = r->topo.nranks,
                         .block_bytes = peer_bytes,
                         .elem_size = 1,
                         .window = r->o->window,
                         .chunks = chunks,
                         .topo = &r->topo};
  struct row* row = new_row(r);
  row->chunks = moeccl_a2a_pipelined(a->id) ? moeccl_pipeline_chunks(&d) : 0;
  row->peer_bytes = peer_bytes;
  row->algo = a->name;
  row->cost.total_us = -1.0;
  if (r->o->dist.kind != PERF_DIST_UNIFORM) d.send_counts = r->split.counts; /* marks a v-call */
  for (int i = 0; i < r->nsample; i++) {
    moeccl_cost_t cost;
    double us = price_rank(r, a, &d, r->sample[i], &cost);
    if (us < 0.0) return -1;
    if (us > row->cost.total_us) {
      row->cost = cost;
      row->rank = r->sample[i];
      row->size = rank_send_bytes(&d);
      row->runs_direct = a->applies && !a->applies(&d);
    }
  }
  return 0;
}

/* The row of a at this size; a pipelined algorithm without --chunks keeps
 * the cheapest of 2, 4, 8 and 16 chunks (the tuner's candidates: more must
 * win by 2%). */
static int price_algo(struct sim_run* r, const moeccl_a2a_algo_t* a, size_t peer_bytes) {
  if (!moeccl_a2a_pipelined(a->id) || r->o->chunks)
    return price_chunks(r, a, peer_bytes, r->o->chunks);
  static const int candidates[] = {2, 4, 8, 16};
  struct row best = {0};
  for (size_t i = 0; i < sizeof(candidates) / sizeof(candidates[0]); i++) {
    if (price_chunks(r, a, peer_bytes, candidates[i])) return -1;
    struct row* row = &r->rows[--r->nrows];
    if (i == 0 || row->cost.total_us < best.cost.total_us * 0.98) best = *row;
  }
  *new_row(r) = best;
  return 0;
}

static void mark_best(struct row* rows, size_t n) {
  size_t best = 0;
  for (size_t i = 1; i < n; i++)
    if (rows[i].cost.total_us < rows[best].cost.total_us) best = i;
  if (n) rows[best].best = 1;
}

/* ---- output ------------------------------------------------------------- */

static double algbw(size_t bytes, double us) { return us > 0.0 ? (double)bytes / us / 1e3 : 0.0; }

static void print_links(const moeccl_topo_t* t) {
  static const char* names[MOECCL_LINK_NCLASSES] = {"self", "node", "group", "global"};
  for (int c = MOECCL_LINK_NODE; c < MOECCL_LINK_NCLASSES; c++)
    printf("# link %-6s latency_us=%g overhead_us=%g bw_GBps=%g rndv_bytes=%g\n", names[c],
           t->link[c].latency_us, t->link[c].overhead_us, t->link[c].bw_GBps,
           t->link[c].rndv_bytes);
  printf("# copy        overhead_us=%g bw_GBps=%g\n", t->copy_overhead_us, t->copy_GBps);
}

/* --device: where the node link and copy costs above come from. */
static void print_device(const moeccl_topo_t* t) {
  const moeccl_topo_device_t* d = &t->dev;
  printf("# device buffers (%s): hbm_GBps=%g link_GBps=%g copy_us=%g launch_us=%g\n",
         d->given ? "costs from the file" : "H200-class defaults, not measured", d->hbm_GBps,
         d->link_GBps, d->copy_us, d->launch_us);
}

static void print_header(const struct sim_run* r) {
  const moeccl_topo_t* t = &r->topo;
  const struct opts* o = r->o;
  printf("# a2a_sim: predicted all-to-all times from the cost model (no processes run)\n");
  char per_node[32] = "irregular";
  if (t->ranks_per_node > 0) snprintf(per_node, sizeof per_node, "%d", t->ranks_per_node);
  printf("# cluster %s: %d ranks = %d nodes x %s, %d group%s of %d nodes, %d rails\n", t->source,
         t->nranks, t->nnodes, per_node, t->ngroups, t->ngroups == 1 ? "" : "s",
         t->nodes_per_group ? t->nodes_per_group : t->nnodes, t->nrails);
  const char* what = o->topo_file ? NULL : sim_preset_what(o->preset);
  if (what) printf("#   the preset: %s\n", what);
  print_links(t);
  if (o->device) print_device(t);
  printf("# dist %s  direct window %d  sizes %s bytes %zu..%zu x%zu  priced ranks %d%s\n",
         o->dist_name, o->window, o->per_rank ? "per rank" : "per peer", o->minbytes, o->maxbytes,
         o->step, r->nsample,
         o->all_ranks                        ? " (all)"
         : o->dist.kind != PERF_DIST_UNIFORM ? " + the 8 heaviest senders and receivers"
                                             : "");
  printf("# time: the slowest priced rank; size: bytes that rank sends; algbw = size / time;\n"
         "# busbw = algbw * (n-1)/n; msgs: messages it sends per link class; * best of the size\n");
  printf("#\n#%11s %13s %-15s %11s %8s %8s %6s %6s %6s %7s %7s %10s %10s %10s %7s\n", "peer",
         "size", "algo", "time", "algbw", "busbw", "steps", "node", "group", "global", "copies",
         "cpu", "link", "latency", "rank");
  printf("#%11s %13s %-15s %11s %8s %8s %6s %6s %6s %7s %7s %10s %10s %10s %7s\n", "(B)", "(B)", "",
         "(us)", "(GB/s)", "(GB/s)", "", "msgs", "msgs", "msgs", "", "(us)", "(us)", "(us)", "");
}

static void row_algo_name(const struct row* row, char* buf, size_t len) {
  char chunks[16] = "";
  if (row->chunks && !row->runs_direct) snprintf(chunks, sizeof chunks, "/%d", row->chunks);
  snprintf(buf, len, "%s%s%s%s", row->algo, chunks, row->runs_direct ? "(direct)" : "",
           row->best ? "*" : "");
}

static void print_row(const struct row* row, int n) {
  char name[48];
  const moeccl_cost_t* c = &row->cost;
  double bw = algbw(row->size, c->total_us);
  row_algo_name(row, name, sizeof name);
  printf(" %11zu %13zu %-15s %11.2f %8.2f %8.2f %6d %6d %6d %7d %7d %10.2f %10.2f %10.2f %7d\n",
         row->peer_bytes, row->size, name, c->total_us, bw, bw * (n - 1) / n, c->nsteps,
         c->msgs[MOECCL_LINK_NODE], c->msgs[MOECCL_LINK_GROUP], c->msgs[MOECCL_LINK_GLOBAL],
         c->msgs[MOECCL_LINK_SELF], c->cpu_us, c->link_us, c->latency_us, row->rank);
}

static const struct row* find_row(const struct sim_run* r, size_t first, size_t end, const char* algo) {
  for (size_t i = first; i < end; i++)
    if (strcmp(r->rows[i].algo, algo) == 0) return &r->rows[i];
  return NULL;
}

/* The best algorithm per size, and its speedup over direct when both ran. */
static void print_best(const struct sim_run* r) {
  printf("#\n# best algorithm per size (speedup over direct)\n");
  for (size_t first = 0; first < r->nrows; first += (size_t)r->nalgos) {
    size_t end = first + (size_t)r->nalgos;
    const struct row* best = NULL;
    for (size_t i = first; i < end; i++)
      if (r->rows[i].best) best = &r->rows[i];
    const struct row* direct = find_row(r, first, end, "direct");
    printf("#  peer %10zu B  %-10s %11.2f us", best->peer_bytes, best->algo, best->cost.total_us);
    if (direct && best->cost.total_us > 0.0)
      printf("  %6.2fx", direct->cost.total_us / best->cost.total_us);
    printf("\n");
  }
}

static void json_row(FILE* f, const struct sim_run* r, const struct row* row) {
  const moeccl_cost_t* c = &row->cost;
  int n = r->topo.nranks;
  double bw = algbw(row->size, c->total_us);
  fprintf(f, "  {\"peer_bytes\": %zu, \"size\": %zu, \"algo\": \"%s\", \"runs\": \"%s\", ",
          row->peer_bytes, row->size, row->algo, row->runs_direct ? "direct" : row->algo);
  fprintf(f, "\"dist\": \"%s\", \"nranks\": %d, \"time_us\": %.6g, \"algbw\": %.6g, ",
          r->o->dist_name, n, c->total_us, bw);
  fprintf(f, "\"busbw\": %.6g, \"steps\": %d, \"msgs_node\": %d, \"msgs_group\": %d, ",
          bw * (n - 1) / n, c->nsteps, c->msgs[MOECCL_LINK_NODE], c->msgs[MOECCL_LINK_GROUP]);
  fprintf(f, "\"msgs_global\": %d, \"copies\": %d, \"bytes_node\": %.0f, ",
          c->msgs[MOECCL_LINK_GLOBAL], c->msgs[MOECCL_LINK_SELF], c->bytes[MOECCL_LINK_NODE]);
  fprintf(f, "\"bytes_group\": %.0f, \"bytes_global\": %.0f, \"bytes_copied\": %.0f, ",
          c->bytes[MOECCL_LINK_GROUP], c->bytes[MOECCL_LINK_GLOBAL], c->bytes[MOECCL_LINK_SELF]);
  fprintf(f, "\"cpu_us\": %.6g, \"link_us\": %.6g, \"latency_us\": %.6g, ", c->cpu_us, c->link_us,
          c->latency_us);
  fprintf(f, "\"rank\": %d, \"chunks\": %d, \"best\": %s}", row->rank, row->chunks,
          row->best ? "true" : "false");
}

static void write_json(const struct sim_run* r, FILE* f) {
  fprintf(f, "[\n");
  for (size_t i = 0; i < r->nrows; i++) {
    json_row(f, r, &r->rows[i]);
    fprintf(f, "%s\n", i + 1 < r->nrows ? "," : "");
  }
  fprintf(f, "]\n");
}

static int save_json(const struct sim_run* r) {
  if (!r->o->json) return 0;
  int to_stdout = strcmp(r->o->json, "-") == 0;
  FILE* f = to_stdout ? stdout : fopen(r->o->json, "w");
  if (!f) {
    fprintf(stderr, "a2a_sim: cannot write %s: %s\n", r->o->json, strerror(errno));
    return -1;
  }
  write_json(r, f);
  return to_stdout ? 0 : fclose(f);
}

/* ---- main --------------------------------------------------------------- */

/* Per-peer bytes of a row: the size itself, or a per-rank size cut n ways. */
static size_t peer_bytes_of(const struct opts* o, size_t size, int n) {
  if (!o->per_rank) return size;
  size_t b = size / (size_t)n;
  return b ? b : 1;
}

static int run_size(struct sim_run* r, size_t size, unsigned char* seen) {
  int n = r->topo.nranks;
  size_t peer = peer_bytes_of(r->o, size, n);
  if (r->o->dist.kind != PERF_DIST_UNIFORM) {
    sim_split_fill(r->o, &r->split, peer * (size_t)n);
    if (!r->o->all_ranks) sample_heavy(r, seen);
  }
  size_t first = r->nrows;
  for (int i = 0; i < r->nalgos; i++)
    if (price_algo(r, r->algos[i], peer)) return -1;
  mark_best(&r->rows[first], r->nrows - first);
  for (size_t i = first; i < r->nrows; i++) print_row(&r->rows[i], n);
  fflush(stdout);
  return 0;
}

static int setup(struct sim_run* r, unsigned char** seen) {
  const struct opts* o = r->o;
  if (sim_build_topo(o, &r->topo) || pick_algos(r)) return -1;
  int n = r->topo.nranks;
  if (o->dist.kind != PERF_DIST_UNIFORM) {
    if (n > DIST_MAX_RANKS) {
      fprintf(stderr, "a2a_sim: --dist %s keeps n x n counts: at most %d ranks, not %d\n",
              o->dist_name, DIST_MAX_RANKS, n);
      return -1;
    }
    sim_split_alloc(&r->split, n);
  }
  *seen = sim_xcalloc((size_t)n, 1);
  r->sample = sim_xcalloc((size_t)n, sizeof *r->sample);
  pick_sample(r, *seen);
  return 0;
}

static void run_free(struct sim_run* r, unsigned char* seen) {
  moeccl_sched_free(&r->sched);
  moeccl_model_nic_free(&r->nic);
  moeccl_topo_free(&r->topo);
  sim_split_free(&r->split);
  free(r->sample);
  free(r->rows);
  free(seen);
}

/* Every size, then the summary; returns 0, or 1 when planning or the JSON
 * file failed. */
static int run_all(struct sim_run* r, unsigned char* seen) {
  const struct opts* o = r->o;
  double t0 = now_s();
  for (size_t size = o->minbytes; size <= o->maxbytes; size *= o->step) {
    if (run_size(r, size, seen)) return 1;
    if (o->step < 2 || size > SIZE_MAX / o->step) break;
  }
  double elapsed = now_s() - t0;
  print_best(r);
  printf("# planned and priced %lld schedules (%lld ops) in %.2f s\n", r->schedules, r->ops,
         elapsed);
  return save_json(r) ? 1 : 0;
}

int main(int argc, char** argv) {
  struct opts o;
  int rc = sim_parse_opts(argc, argv, &o);
  if (rc) return rc == 1 ? 0 : 2;
  struct sim_run r;
  memset(&r, 0, sizeof r);
  r.o = &o;
  unsigned char* seen = NULL;
  if (setup(&r, &seen)) {
    rc = 2;
  } else {
    print_header(&r);
    rc = run_all(&r, seen);
  }
  run_free(&r, seen);
  return rc;
}
