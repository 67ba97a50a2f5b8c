/*
 * a2a_sim - the all-to-all algorithms on a modelled cluster, without processes.
 *
 * For every size and algorithm it runs the library's own schedule generator
 * (src/algos) for a sample of ranks, prices each schedule with the tuner's
 * cost model (src/tune/model.h) on a modelled topology, and prints the
 * slowest rank's prediction in the columns of nccl-tests' alltoall_perf.
 * Nothing is sent: every algorithm on a 16,384-rank cluster is priced in
 * under a second on one core.
 *
 * Uniform calls on regular topologies give every rank a schedule of the same
 * shape, so a sample spread over nodes, local indices and groups (plus ranks
 * 0 and n-1) stands for all of them; --all-ranks prices every rank.  Uneven
 * splits (--dist) price the heaviest senders and receivers too.  See
 * man/a2a_sim.1 for the options and docs/SIMULATOR.md for what the
 * predictions can be held against.
 */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "algos/algos.h"
#include "perf_parse.h"
#include "topo/topo.h"
#include "tune/model.h"

#define DEFAULT_SAMPLE 16
#define DIST_MAX_RANKS 4096  /* uneven splits keep the n x n matrix of counts */
#define MOE_TOKENS 256       /* tokens routed per source rank (--dist moe) */
#define MOE_POPULARITY_S 1.2 /* zipf exponent of expert popularity, as a2a_perf */
#define MOE_MAX_REDRAWS 32
#define DEFAULT_SEED 0x6d6f6563636cULL

enum dist_kind { DIST_UNIFORM, DIST_ZIPF, DIST_MOE };

struct opts {
  const char* preset;
  int nodes, ppn, group, rails, ranks; /* < 0 (ranks: 0): from the preset */
  int preset_given;
  const char* topo_file;  /* --topo: shape and costs from a file */
  const char* costs_file; /* --costs: link and copy lines over them */
  size_t minbytes, maxbytes, step;
  int per_rank; /* -b/-e are bytes per rank, as a2a_perf, not per peer */
  const char* algos;
  int window;
  int all_ranks, sample;
  enum dist_kind dist;
  double zipf_s;
  int moe_e, moe_k;
  char dist_name[48];
  uint64_t seed;
  const char* json;
  char* overrides[16]; /* --link / --copy values, applied in order */
  int noverrides;
};

/* A preset is a cluster shape and its link costs; docs/SIMULATOR.md and
 * a2a_sim(1) give the reasoning behind each number. */
struct preset {
  const char* name;
  const char* what;
  int nodes, ppn, group, rails;
  moeccl_link_t link[MOECCL_LINK_NCLASSES];
  double copy_overhead_us, copy_GBps;
};

static const struct preset presets[] = {
    {.name = "fattree",
     .what = "rail-optimised non-blocking fat tree, 8 GPUs per node on NVLink/NVSwitch, one "
             "400 Gb/s NIC per GPU",
     .nodes = 64,
     .ppn = 8,
     .group = 0,
     .rails = 8,
     .link = {[MOECCL_LINK_NODE] = {2.0, 0.2, 360.0},
              [MOECCL_LINK_GROUP] = {4.0, 0.5, 50.0},
              [MOECCL_LINK_GLOBAL] = {4.0, 0.5, 50.0}},
     .copy_overhead_us = 0.05,
     .copy_GBps = 1000.0},
    {.name = "dragonfly",
     .what = "dragonfly, 4 GPUs per node, one 200 Gb/s NIC per GPU, groups of 32 nodes, global "
             "links tapered to half the injection bandwidth",
     .nodes = 1024,
     .ppn = 4,
     .group = 32,
     .rails = 4,
     .link = {[MOECCL_LINK_NODE] = {2.0, 0.2, 200.0},
              [MOECCL_LINK_GROUP] = {3.0, 0.5, 25.0},
              [MOECCL_LINK_GLOBAL] = {5.0, 0.5, 12.5}},
     .copy_overhead_us = 0.05,
     .copy_GBps = 1000.0},
};

/* Byte counts of an uneven call: counts[src * n + dst], fixed for one size. */
struct split {
  int n;
  size_t* counts;
  size_t *send_displs, *recv_counts, *recv_displs; /* one rank's, rebuilt per priced rank */
};

/* The result of one size and one algorithm: the slowest priced rank. */
struct row {
  size_t peer_bytes, size; /* size: bytes the slowest rank sends (a2a_perf's size) */
  const char* algo;
  int runs_direct; /* the algorithm does not apply to this topology: direct ran */
  int rank;        /* the slowest rank */
  moeccl_cost_t cost;
  int best;
};

struct run {
  const struct opts* o;
  moeccl_topo_t topo;
  const moeccl_a2a_algo_t* algos[MOECCL_A2A_NALGOS];
  int nalgos;
  int* sample; /* ranks priced */
  int nsample;
  struct split split;
  moeccl_sched_t sched; /* reused: planning must not allocate per call */
  long long schedules, ops;
  struct row* rows;
  size_t nrows, rows_cap;
};

/* ---- small helpers ------------------------------------------------------ */

static void* xcalloc(size_t n, size_t size) {
  void* p = calloc(n ? n : 1, size ? size : 1);
  if (!p) {
    fprintf(stderr, "a2a_sim: out of memory\n");
    exit(1);
  }
  return p;
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static uint64_t mix64(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

static uint64_t rng_next(uint64_t* s) {
  *s += 0x9e3779b97f4a7c15ULL;
  return mix64(*s);
}

static double rng_unit(uint64_t* s) { return (double)(rng_next(s) >> 11) * 0x1.0p-53; }

static void shuffle(int* p, int n, uint64_t seed) {
  uint64_t s = seed;
  for (int i = 0; i < n; i++) p[i] = i;
  for (int i = n - 1; i > 0; i--) {
    int j = (int)(rng_next(&s) % (uint64_t)(i + 1));
    int t = p[i];
    p[i] = p[j];
    p[j] = t;
  }
}

/* ---- options ------------------------------------------------------------ */

static void usage(const char* prog) {
  printf("usage: %s [options]\n"
         "  cluster:\n"
         "      --preset NAME        fattree (64 nodes x 8) or dragonfly (4 per node, 32 nodes\n"
         "                           per group, 4,096 ranks); default fattree\n"
         "      --nodes N            nodes (overrides the preset)\n"
         "      --ppn L              ranks (GPUs) per node\n"
         "      --group G            nodes per group (0: one group)\n"
         "      --rails K            NICs per node\n"
         "      --ranks R            nodes = R / ppn\n"
         "      --topo FILE          shape and costs from a topology file (MOECCL_TOPO_FILE; at\n"
         "                           most 2^20 ranks, docs/TOPOLOGY.md)\n"
         "      --costs FILE         link and copy lines over the costs (MOECCL_TUNE_FILE)\n"
         "      --link CLASS:K=V,..  CLASS node|group|global; K latency_us|overhead_us|bw_GBps|\n"
         "                           rndv_bytes\n"
         "      --copy K=V,..        K overhead_us|bw_GBps: local copies\n"
         "  sizes:\n"
         "  -b, --minbytes SIZE      smallest size, bytes per peer (K/M/G; default 8)\n"
         "  -e, --maxbytes SIZE      largest size (default 1M)\n"
         "  -f, --stepfactor N       multiply the size by N each row (default 4)\n"
         "      --per-rank           -b/-e are bytes each rank sends in all, as in a2a_perf\n"
         "  algorithms and pricing:\n"
         "  -a, --algo LIST|all      comma-separated algorithms (default all)\n"
         "      --window W           direct: peers per step, as MOECCL_A2A_WINDOW (default 64;\n"
         "                           0: all peers in one step)\n"
         "      --dist D             uniform | zipf:S | moe:E,K (uneven: up to %d ranks)\n"
         "      --seed N             seed of the uneven splits\n"
         "      --sample N           ranks spread over the cluster to price (default %d)\n"
         "      --all-ranks          price every rank\n"
         "      --json FILE          also write the rows as a JSON array (- for stdout)\n"
         "  -h, --help               this text\n",
         prog, DIST_MAX_RANKS, DEFAULT_SAMPLE);
}

static int parse_dist(const char* s, struct opts* o) {
  char* end;
  if (strcmp(s, "uniform") == 0) {
    o->dist = DIST_UNIFORM;
  } else if (strncmp(s, "zipf:", 5) == 0) {
    o->zipf_s = strtod(s + 5, &end);
    if (end == s + 5 || *end || !(o->zipf_s >= 0.0 && o->zipf_s <= 100.0)) return -1;
    o->dist = DIST_ZIPF;
  } else if (strncmp(s, "moe:", 4) == 0) {
    long e = strtol(s + 4, &end, 10), k;
    if (end == s + 4 || *end != ',') return -1;
    const char* ks = end + 1;
    k = strtol(ks, &end, 10);
    if (end == ks || *end || e < 1 || e > (1L << 20) || k < 1 || k > e || k > 64) return -1;
    o->moe_e = (int)e, o->moe_k = (int)k;
    o->dist = DIST_MOE;
  } else {
    return -1;
  }
  snprintf(o->dist_name, sizeof o->dist_name, "%s", s);
  return 0;
}

enum {
  OPT_PRESET = 256,
  OPT_NODES,
  OPT_PPN,
  OPT_GROUP,
  OPT_RAILS,
  OPT_RANKS,
  OPT_TOPO,
  OPT_COSTS,
  OPT_LINK,
  OPT_COPY,
  OPT_PER_RANK,
  OPT_WINDOW,
  OPT_DIST,
  OPT_SEED,
  OPT_SAMPLE,
  OPT_ALL_RANKS,
  OPT_JSON
};

static const struct option long_opts[] = {{"preset", required_argument, NULL, OPT_PRESET},
                                          {"nodes", required_argument, NULL, OPT_NODES},
                                          {"ppn", required_argument, NULL, OPT_PPN},
                                          {"group", required_argument, NULL, OPT_GROUP},
                                          {"rails", required_argument, NULL, OPT_RAILS},
                                          {"ranks", required_argument, NULL, OPT_RANKS},
                                          {"topo", required_argument, NULL, OPT_TOPO},
                                          {"costs", required_argument, NULL, OPT_COSTS},
                                          {"link", required_argument, NULL, OPT_LINK},
                                          {"copy", required_argument, NULL, OPT_COPY},
                                          {"minbytes", required_argument, NULL, 'b'},
                                          {"maxbytes", required_argument, NULL, 'e'},
                                          {"stepfactor", required_argument, NULL, 'f'},
                                          {"per-rank", no_argument, NULL, OPT_PER_RANK},
                                          {"algo", required_argument, NULL, 'a'},
                                          {"window", required_argument, NULL, OPT_WINDOW},
                                          {"dist", required_argument, NULL, OPT_DIST},
                                          {"seed", required_argument, NULL, OPT_SEED},
                                          {"sample", required_argument, NULL, OPT_SAMPLE},
                                          {"all-ranks", no_argument, NULL, OPT_ALL_RANKS},
                                          {"json", required_argument, NULL, OPT_JSON},
                                          {"help", no_argument, NULL, 'h'},
                                          {NULL, 0, NULL, 0}};

static const char* opt_name(int c) {
  for (const struct option* p = long_opts; p->name; p++)
    if (p->val == c) return p->name;
  return "?";
}

static int add_override(struct opts* o, char* arg) {
  if (o->noverrides == (int)(sizeof o->overrides / sizeof o->overrides[0])) return -1;
  o->overrides[o->noverrides++] = arg;
  return 0;
}

/* One option; returns 0, or -1 when its value is rejected. */
static int apply_opt(int c, char* arg, struct opts* o) {
  int v;
  switch (c) {
    case OPT_PRESET: o->preset = arg, o->preset_given = 1; return 0;
    case OPT_NODES: return perf_parse_int(arg, 1, 1 << 24, &o->nodes);
    case OPT_PPN: return perf_parse_int(arg, 1, 1 << 16, &o->ppn);
    case OPT_GROUP: return perf_parse_int(arg, 0, 1 << 24, &o->group);
    case OPT_RAILS: return perf_parse_int(arg, 0, 1 << 10, &o->rails);
    case OPT_RANKS: return perf_parse_int(arg, 1, 1 << 26, &o->ranks);
    case OPT_TOPO: o->topo_file = arg; return 0;
    case OPT_COSTS: o->costs_file = arg; return 0;
    case OPT_LINK:
    case OPT_COPY: return add_override(o, arg);
    case 'b': return perf_parse_size(arg, &o->minbytes);
    case 'e': return perf_parse_size(arg, &o->maxbytes);
    case 'f':
      if (perf_parse_int(arg, 1, 1 << 20, &v)) return -1;
      o->step = (size_t)v;
      return 0;
    case OPT_PER_RANK: o->per_rank = 1; return 0;
    case 'a': o->algos = arg; return 0;
    case OPT_WINDOW: return perf_parse_int(arg, 0, INT_MAX, &o->window);
    case OPT_DIST: return parse_dist(arg, o);
    case OPT_SEED: {
      char* end;
      errno = 0;
      o->seed = strtoull(arg, &end, 0);
      return errno || end == arg || *end ? -1 : 0;
    }
    case OPT_SAMPLE: return perf_parse_int(arg, 1, 1 << 20, &o->sample);
    case OPT_ALL_RANKS: o->all_ranks = 1; return 0;
    case OPT_JSON: o->json = arg; return 0;
    default: return -1;
  }
}

static void set_defaults(struct opts* o) {
  memset(o, 0, sizeof *o);
  o->preset = "fattree";
  o->nodes = o->ppn = o->group = o->rails = -1;
  o->minbytes = 8;
  o->maxbytes = 1u << 20;
  o->step = 4;
  o->algos = "all";
  o->window = 64;
  o->sample = DEFAULT_SAMPLE;
  o->dist = DIST_UNIFORM;
  snprintf(o->dist_name, sizeof o->dist_name, "uniform");
  o->seed = DEFAULT_SEED;
}

/* Returns 0 to run, 1 after -h, 2 on a bad command line. */
static int parse_opts(int argc, char** argv, struct opts* o) {
  int c;
  set_defaults(o);
  while ((c = getopt_long(argc, argv, "b:e:f:a:h", long_opts, NULL)) != -1) {
    if (c == 'h') {
      usage(argv[0]);
      return 1;
    }
    if (c == '?' || apply_opt(c, optarg, o)) {
      if (c != '?')
        fprintf(stderr, "a2a_sim: bad value '%s' for --%s (see -h)\n", optarg, opt_name(c));
      return 2;
    }
  }
  const char* why = NULL;
  if (optind < argc) why = "unexpected argument";
  else if (o->minbytes == 0 || o->minbytes > o->maxbytes) why = "need 0 < minbytes <= maxbytes";
  else if (o->step < 2 && o->minbytes != o->maxbytes)
    why = "stepfactor must be >= 2 unless minbytes == maxbytes";
  else if (o->topo_file && (o->nodes > 0 || o->ppn > 0 || o->group >= 0 || o->rails >= 0 ||
                            o->ranks > 0 || o->preset_given))
    why = "--topo gives the shape: no --preset, --nodes, --ppn, --group, --rails or --ranks";
  if (why) fprintf(stderr, "a2a_sim: %s (see -h)\n", why);
  return why ? 2 : 0;
}

/* ---- the modelled cluster ----------------------------------------------- */

static const struct preset* find_preset(const char* name) {
  for (size_t i = 0; i < sizeof presets / sizeof presets[0]; i++)
    if (strcmp(presets[i].name, name) == 0) return &presets[i];
  return NULL;
}

/* Applies one "KEY=V,KEY=V" list to a link (or, link NULL, to the copy costs). */
static int apply_costs(char* list, moeccl_link_t* link, moeccl_topo_t* t) {
  for (char *save = NULL, *kv = strtok_r(list, ",", &save); kv; kv = strtok_r(NULL, ",", &save)) {
    char* eq = strchr(kv, '=');
    char* end;
    if (!eq) return -1;
    *eq = '\0';
    double v = strtod(eq + 1, &end);
    if (end == eq + 1 || *end || !(v >= 0.0) || isinf(v)) return -1;
    if (strcmp(kv, "latency_us") == 0 && link) link->latency_us = v;
    else if (strcmp(kv, "overhead_us") == 0)
      *(link ? &link->overhead_us : &t->copy_overhead_us) = v;
    else if (strcmp(kv, "bw_GBps") == 0 && v > 0.0) *(link ? &link->bw_GBps : &t->copy_GBps) = v;
    else if (strcmp(kv, "rndv_bytes") == 0 && link && v >= 0.0) link->rndv_bytes = v;
    else return -1;
  }
  return 0;
}

static int apply_override(moeccl_topo_t* t, const char* arg) {
  static const char* classes[MOECCL_LINK_NCLASSES] = {NULL, "node", "group", "global"};
  char buf[256];
  snprintf(buf, sizeof buf, "%s", arg);
  char* colon = strchr(buf, ':');
  if (!colon) return apply_costs(buf, NULL, t); /* --copy */
  *colon = '\0';
  for (int c = MOECCL_LINK_NODE; c < MOECCL_LINK_NCLASSES; c++)
    if (strcmp(buf, classes[c]) == 0) return apply_costs(colon + 1, &t->link[c], t);
  return -1;
}

static int preset_topo(const struct opts* o, moeccl_topo_t* t) {
  const struct preset* p = find_preset(o->preset);
  if (!p) {
    fprintf(stderr, "a2a_sim: unknown preset '%s' (fattree, dragonfly)\n", o->preset);
    return -1;
  }
  int ppn = o->ppn > 0 ? o->ppn : p->ppn;
  int nodes = o->nodes > 0 ? o->nodes : p->nodes;
  if (o->ranks > 0) {
    if (o->ranks % ppn) {
      fprintf(stderr, "a2a_sim: --ranks %d is not a multiple of %d ranks per node\n", o->ranks,
              ppn);
      return -1;
    }
    nodes = o->ranks / ppn;
  }
  int group = o->group >= 0 ? o->group : p->group, rails = o->rails >= 0 ? o->rails : p->rails;
  if (moeccl_topo_regular_shape(t, nodes, ppn, group, rails) != moecclSuccess) {
    fprintf(stderr, "a2a_sim: cannot build %d nodes of %d ranks\n", nodes, ppn);
    return -1;
  }
  memcpy(t->link, p->link, sizeof t->link);
  t->copy_overhead_us = p->copy_overhead_us;
  t->copy_GBps = p->copy_GBps;
  snprintf(t->source, sizeof t->source, "preset %s", p->name);
  return 0;
}

/* The cluster: a preset or a file for the shape, then --costs, then the
 * --link and --copy overrides in order. */
static int build_topo(const struct opts* o, moeccl_topo_t* t) {
  char err[512] = "";
  if (o->topo_file) {
    if (moeccl_topo_load(t, o->topo_file, 0, err, sizeof err) != moecclSuccess) {
      fprintf(stderr, "a2a_sim: %s\n", err[0] ? err : o->topo_file);
      return -1;
    }
  } else if (preset_topo(o, t)) {
    return -1;
  }
  if (o->costs_file && moeccl_topo_load_costs(t, o->costs_file, err, sizeof err) != moecclSuccess) {
    fprintf(stderr, "a2a_sim: %s\n", err[0] ? err : o->costs_file);
    return -1;
  }
  for (int i = 0; i < o->noverrides; i++) {
    if (apply_override(t, o->overrides[i])) {
      fprintf(stderr, "a2a_sim: bad cost override '%s' (see -h)\n", o->overrides[i]);
      return -1;
    }
  }
  return 0;
}

/* ---- algorithms and sampled ranks --------------------------------------- */

static int pick_algos(struct run* r) {
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

static void add_sample(struct run* r, int rank, unsigned char* seen) {
  if (rank < 0 || rank >= r->topo.nranks || seen[rank]) return;
  seen[rank] = 1;
  r->sample[r->nsample++] = rank;
}

/* Ranks 0 and n-1, then count ranks on nodes spread evenly over the cluster
 * (so over its groups), each at another local index. */
static void pick_sample(struct run* r, unsigned char* seen) {
  const moeccl_topo_t* t = &r->topo;
  if (r->o->all_ranks) {
    for (int i = 0; i < t->nranks; i++) add_sample(r, i, seen);
    return;
  }
  add_sample(r, 0, seen);
  add_sample(r, t->nranks - 1, seen);
  int count = r->o->sample;
  for (int i = 0; i < count; i++) {
    int node = (int)((long long)i * t->nnodes / count);
    int size = t->node_first[node + 1] - t->node_first[node];
    add_sample(r, t->node_ranks[t->node_first[node] + i % size], seen);
  }
}

/* ---- uneven splits ------------------------------------------------------ */

/* Cuts total into n blocks proportional to w by rounding the running sum, so
 * that the blocks add up to exactly total. */
static void apportion(const double* w, int n, size_t total, size_t* out) {
  double sum = 0.0, cum = 0.0;
  size_t prev = 0;
  for (int j = 0; j < n; j++) sum += w[j];
  for (int j = 0; j < n; j++) {
    cum += w[j];
    size_t b = j == n - 1  ? total
               : sum > 0.0 ? (size_t)floor((double)total * (cum / sum))
                           : total / (size_t)n * (size_t)(j + 1);
    if (b > total) b = total;
    if (b < prev) b = prev;
    out[j] = b - prev;
    prev = b;
  }
}

/* Zipf over destinations: the k-th most popular destination of source s is
 * (perm[k] + s) mod n, so that every source has another hot destination. */
static void zipf_weights(const struct opts* o, int n, int src, const int* perm, double* w) {
  for (int k = 0; k < n; k++) w[(perm[k] + src) % n] = pow(k + 1.0, -o->zipf_s);
}

static int picked_already(const int* picked, int got, int e) {
  for (int i = 0; i < got; i++)
    if (picked[i] == e) return 1;
  return 0;
}

/* One expert by popularity, not one of the got already picked for this
 * token; after MOE_MAX_REDRAWS draws of picked ones, the most popular free
 * one (a skewed tail would otherwise take long to hit). */
static int moe_draw(const struct opts* o, const double* cdf, uint64_t* rng, const int* picked,
                    int got) {
  for (int tries = 0; tries < MOE_MAX_REDRAWS; tries++) {
    double u = rng_unit(rng) * cdf[o->moe_e - 1];
    int lo = 0, hi = o->moe_e - 1;
    while (lo < hi) { /* the first expert whose cumulative popularity exceeds u */
      int mid = (lo + hi) / 2;
      if (cdf[mid] > u) hi = mid;
      else lo = mid + 1;
    }
    if (!picked_already(picked, got, lo)) return lo;
  }
  int e = 0;
  while (picked_already(picked, got, e)) e++;
  return e;
}

/* MoE dispatch: MOE_TOKENS tokens per source, each sent to k distinct experts
 * drawn by a popularity that is the same for every source (a router has hot
 * experts), experts placed on ranks in contiguous even ranges. */
static void moe_weights(const struct opts* o, int n, int src, const double* cdf,
                        const int* expert_rank, double* w) {
  uint64_t rng = mix64(o->seed ^ (uint64_t)src * 0x9e3779b97f4a7c15ULL);
  int picked[64];
  for (int j = 0; j < n; j++) w[j] = 0.0;
  for (int tok = 0; tok < MOE_TOKENS; tok++) {
    for (int got = 0; got < o->moe_k; got++) {
      int e = moe_draw(o, cdf, &rng, picked, got);
      picked[got] = e;
      w[expert_rank[e]] += 1.0;
    }
  }
}

static void split_free(struct split* s) {
  free(s->counts);
  free(s->send_displs);
  free(s->recv_counts);
  free(s->recv_displs);
  memset(s, 0, sizeof *s);
}

/* Fills counts[src * n + dst] so that every source sends total bytes. */
static void split_fill(const struct opts* o, struct split* s, size_t total) {
  int n = s->n;
  double* w = xcalloc((size_t)n, sizeof *w);
  int* perm = xcalloc((size_t)n, sizeof *perm);
  double* cdf = NULL;
  int* expert_rank = NULL;
  if (o->dist == DIST_ZIPF) shuffle(perm, n, mix64(o->seed ^ 0x7a697066ULL));
  if (o->dist == DIST_MOE) {
    int* order = xcalloc((size_t)o->moe_e, sizeof *order);
    cdf = xcalloc((size_t)o->moe_e, sizeof *cdf);
    expert_rank = xcalloc((size_t)o->moe_e, sizeof *expert_rank);
    shuffle(order, o->moe_e, mix64(o->seed ^ 0x6d6f65ULL));
    for (int e = 0; e < o->moe_e; e++) {
      cdf[e] = (e ? cdf[e - 1] : 0.0) + pow(e + 1.0, -MOE_POPULARITY_S);
      expert_rank[e] = (int)((uint64_t)order[e] * (uint64_t)n / (uint64_t)o->moe_e);
    }
    free(order);
  }
  for (int src = 0; src < n; src++) {
    if (o->dist == DIST_ZIPF) zipf_weights(o, n, src, perm, w);
    else moe_weights(o, n, src, cdf, expert_rank, w);
    apportion(w, n, total, &s->counts[(size_t)src * (size_t)n]);
  }
  free(w);
  free(perm);
  free(cdf);
  free(expert_rank);
}

static size_t pair_bytes(const void* ctx, int src, int dst) {
  const struct split* s = ctx;
  return s->counts[(size_t)src * (size_t)s->n + (size_t)dst];
}

/* The descriptor of rank's part of an uneven call (elements are bytes). */
static void split_desc(struct split* s, int rank, moeccl_a2a_desc_t* d) {
  int n = s->n;
  const size_t* row = &s->counts[(size_t)rank * (size_t)n];
  size_t so = 0, ro = 0;
  for (int p = 0; p < n; p++) {
    s->recv_counts[p] = s->counts[(size_t)p * (size_t)n + (size_t)rank];
    s->send_displs[p] = so, so += row[p];
    s->recv_displs[p] = ro, ro += s->recv_counts[p];
  }
  d->send_counts = row;
  d->send_displs = s->send_displs;
  d->recv_counts = s->recv_counts;
  d->recv_displs = s->recv_displs;
  d->elem_size = 1;
  d->pair_bytes = pair_bytes;
  d->pair_ctx = s;
}

/* Adds the 8 heaviest senders and the 8 heaviest receivers to the sample:
 * with uneven splits the slowest rank is usually one of them. */
static void sample_heavy(struct run* r, unsigned char* seen) {
  int n = r->split.n;
  for (int dir = 0; dir < 2; dir++) {
    int top[8];
    size_t topv[8];
    int ntop = 0;
    for (int a = 0; a < n; a++) {
      size_t v = 0;
      for (int b = 0; b < n; b++)
        v += dir ? r->split.counts[(size_t)b * (size_t)n + (size_t)a]
                 : r->split.counts[(size_t)a * (size_t)n + (size_t)b];
      int i = ntop < 8 ? ntop++ : 8;
      if (i == 8 && v <= topv[7]) continue;
      if (i == 8) i = 7;
      for (; i > 0 && topv[i - 1] < v; i--) top[i] = top[i - 1], topv[i] = topv[i - 1];
      top[i] = a, topv[i] = v;
    }
    for (int i = 0; i < ntop; i++) add_sample(r, top[i], seen);
  }
}

/* ---- pricing ------------------------------------------------------------ */

static struct row* new_row(struct run* r) {
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

/* Plans and prices one rank; returns its predicted time, or -1. */
static double price_rank(struct run* r, const moeccl_a2a_algo_t* a, moeccl_a2a_desc_t* d, int rank,
                         moeccl_cost_t* cost) {
  d->rank = rank;
  if (d->send_counts) split_desc(&r->split, rank, d);
  moeccl_sched_reset(&r->sched);
  moecclResult_t rc = a->schedule(d, &r->sched);
  if (rc != moecclSuccess) {
    fprintf(stderr, "a2a_sim: %s failed to plan rank %d: %s\n", a->name, rank,
            moecclGetErrorString(rc));
    return -1.0;
  }
  r->schedules++;
  r->ops += r->sched.nops;
  return moeccl_model_price(&r->topo, &r->sched, rank, cost);
}

static size_t rank_send_bytes(const moeccl_a2a_desc_t* d) {
  if (!d->send_counts) return d->block_bytes * (size_t)d->nranks;
  size_t sum = 0;
  for (int p = 0; p < d->nranks; p++) sum += d->send_counts[p];
  return sum;
}

/* One row: the slowest sampled rank of algorithm a at this size. */
static int price_algo(struct run* r, const moeccl_a2a_algo_t* a, size_t peer_bytes) {
  moeccl_a2a_desc_t d = {.nranks = r->topo.nranks,
                         .block_bytes = peer_bytes,
                         .elem_size = 1,
                         .window = r->o->window,
                         .topo = &r->topo};
  struct row* row = new_row(r);
  row->peer_bytes = peer_bytes;
  row->algo = a->name;
  row->cost.total_us = -1.0;
  if (r->o->dist != DIST_UNIFORM) d.send_counts = r->split.counts; /* marks a v-call */
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

static void print_header(const struct run* r) {
  const moeccl_topo_t* t = &r->topo;
  const struct opts* o = r->o;
  printf("# a2a_sim: predicted all-to-all times from the cost model (no processes run)\n");
  char per_node[32] = "irregular";
  if (t->ranks_per_node > 0) snprintf(per_node, sizeof per_node, "%d", t->ranks_per_node);
  printf("# cluster %s: %d ranks = %d nodes x %s, %d group%s of %d nodes, %d rails\n", t->source,
         t->nranks, t->nnodes, per_node, t->ngroups, t->ngroups == 1 ? "" : "s",
         t->nodes_per_group ? t->nodes_per_group : t->nnodes, t->nrails);
  const struct preset* p = o->topo_file ? NULL : find_preset(o->preset);
  if (p) printf("#   the preset: %s\n", p->what);
  print_links(t);
  printf("# dist %s  direct window %d  sizes %s bytes %zu..%zu x%zu  priced ranks %d%s\n",
         o->dist_name, o->window, o->per_rank ? "per rank" : "per peer", o->minbytes, o->maxbytes,
         o->step, r->nsample,
         o->all_ranks              ? " (all)"
         : o->dist != DIST_UNIFORM ? " + the 8 heaviest senders and receivers"
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
  snprintf(buf, len, "%s%s%s", row->algo, row->runs_direct ? "(direct)" : "", row->best ? "*" : "");
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

static const struct row* find_row(const struct run* r, size_t first, size_t end, const char* algo) {
  for (size_t i = first; i < end; i++)
    if (strcmp(r->rows[i].algo, algo) == 0) return &r->rows[i];
  return NULL;
}

/* The best algorithm per size, and its speedup over direct when both ran. */
static void print_best(const struct run* r) {
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

static void json_row(FILE* f, const struct run* r, const struct row* row) {
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
  fprintf(f, "\"rank\": %d, \"best\": %s}", row->rank, row->best ? "true" : "false");
}

static void write_json(const struct run* r, FILE* f) {
  fprintf(f, "[\n");
  for (size_t i = 0; i < r->nrows; i++) {
    json_row(f, r, &r->rows[i]);
    fprintf(f, "%s\n", i + 1 < r->nrows ? "," : "");
  }
  fprintf(f, "]\n");
}

static int save_json(const struct run* r) {
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

static int run_size(struct run* r, size_t size, unsigned char* seen) {
  int n = r->topo.nranks;
  size_t peer = peer_bytes_of(r->o, size, n);
  if (r->o->dist != DIST_UNIFORM) {
    split_fill(r->o, &r->split, peer * (size_t)n);
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

static int setup(struct run* r, unsigned char** seen) {
  const struct opts* o = r->o;
  if (build_topo(o, &r->topo) || pick_algos(r)) return -1;
  int n = r->topo.nranks;
  if (o->dist != DIST_UNIFORM) {
    if (n > DIST_MAX_RANKS) {
      fprintf(stderr, "a2a_sim: --dist %s keeps n x n counts: at most %d ranks, not %d\n",
              o->dist_name, DIST_MAX_RANKS, n);
      return -1;
    }
    r->split.n = n;
    r->split.counts = xcalloc((size_t)n * (size_t)n, sizeof(size_t));
    r->split.send_displs = xcalloc((size_t)n, sizeof(size_t));
    r->split.recv_counts = xcalloc((size_t)n, sizeof(size_t));
    r->split.recv_displs = xcalloc((size_t)n, sizeof(size_t));
  }
  *seen = xcalloc((size_t)n, 1);
  r->sample = xcalloc((size_t)n, sizeof *r->sample);
  pick_sample(r, *seen);
  return 0;
}

static void run_free(struct run* r, unsigned char* seen) {
  moeccl_sched_free(&r->sched);
  moeccl_topo_free(&r->topo);
  split_free(&r->split);
  free(r->sample);
  free(r->rows);
  free(seen);
}

/* Every size, then the summary; returns 0, or 1 when planning or the JSON
 * file failed. */
static int run_all(struct run* r, unsigned char* seen) {
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
  int rc = parse_opts(argc, argv, &o);
  if (rc) return rc == 1 ? 0 : 2;
  struct run r;
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
