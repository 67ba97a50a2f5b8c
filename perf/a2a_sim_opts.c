/*
 * a2a_sim_opts.c - a2a_sim's command line (a2a_sim_int.h): -h's text, the
 * options and their defaults, and the checks across them.
 */
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "a2a_sim_int.h"
#include "perf_parse.h"

#define DEFAULT_SAMPLE 16
#define DEFAULT_SEED 0x6d6f6563636cULL

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
         "      --costs FILE         link, copy and device lines over the costs (MOECCL_TUNE_FILE)\n"
         "      --device             price device buffers: the node link and copies take the\n"
         "                           device costs (a 'device' line; else H200-class defaults)\n"
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
         "      --chunks C           hier2p: chunks, as MOECCL_A2A_CHUNKS (default 0: the\n"
         "                           cheapest of 2, 4, 8, 16, as the tuner picks)\n"
         "      --dist D             uniform | zipf:S | moe:E,K (uneven: up to %d ranks)\n"
         "      --seed N             seed of the uneven splits\n"
         "      --sample N           ranks spread over the cluster to price (default %d)\n"
         "      --all-ranks          price every rank\n"
         "      --json FILE          also write the rows as a JSON array (- for stdout)\n"
         "  -h, --help               this text\n",
         prog, DIST_MAX_RANKS, DEFAULT_SAMPLE);
}

/* --dist; the header and --json show it as given. */
static int parse_dist(const char* s, struct opts* o) {
  if (perf_parse_dist(s, MOE_K_MAX, &o->dist)) return -1;
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
  OPT_CHUNKS,
  OPT_DIST,
  OPT_SEED,
  OPT_SAMPLE,
  OPT_ALL_RANKS,
  OPT_JSON,
  OPT_DEVICE
};

static const struct option long_opts[] = {{"preset", required_argument, NULL, OPT_PRESET},
                                          {"nodes", required_argument, NULL, OPT_NODES},
                                          {"ppn", required_argument, NULL, OPT_PPN},
                                          {"group", required_argument, NULL, OPT_GROUP},
                                          {"rails", required_argument, NULL, OPT_RAILS},
                                          {"ranks", required_argument, NULL, OPT_RANKS},
                                          {"topo", required_argument, NULL, OPT_TOPO},
                                          {"costs", required_argument, NULL, OPT_COSTS},
                                          {"device", no_argument, NULL, OPT_DEVICE},
                                          {"link", required_argument, NULL, OPT_LINK},
                                          {"copy", required_argument, NULL, OPT_COPY},
                                          {"minbytes", required_argument, NULL, 'b'},
                                          {"maxbytes", required_argument, NULL, 'e'},
                                          {"stepfactor", required_argument, NULL, 'f'},
                                          {"per-rank", no_argument, NULL, OPT_PER_RANK},
                                          {"algo", required_argument, NULL, 'a'},
                                          {"window", required_argument, NULL, OPT_WINDOW},
                                          {"chunks", required_argument, NULL, OPT_CHUNKS},
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
    case OPT_DEVICE: o->device = 1; return 0;
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
    case OPT_CHUNKS: return perf_parse_int(arg, 0, 64, &o->chunks);
    case OPT_DIST: return parse_dist(arg, o);
    case OPT_SEED: return perf_parse_u64(arg, &o->seed);
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
  o->dist.kind = PERF_DIST_UNIFORM;
  snprintf(o->dist_name, sizeof o->dist_name, "uniform");
  o->seed = DEFAULT_SEED;
}

int sim_parse_opts(int argc, char** argv, struct opts* o) {
  int c;
  set_defaults(o);
  while ((c = getopt_long(argc, argv, "b:e:f:a:h", long_opts, NULL)) != -1) {
    if (c == 'h') {
      usage(perf_tool_name(argv[0]));
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
