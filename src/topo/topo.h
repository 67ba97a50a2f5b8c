/*
 * Topology: where the ranks of a communicator sit (node, index on the node,
 * group of nodes, rail) and what the links between them cost (latency,
 * per-message overhead, bandwidth per link class).  Built at communicator
 * creation from the ranks' node identities, hwloc and MOECCL_TOPO_GROUP_SIZE,
 * or loaded from MOECCL_TOPO_FILE; written by MOECCL_TOPO_DUMP_FILE in the
 * same format.  Algorithms (src/algos), the cost model (src/tune) and the
 * simulator (perf/a2a_sim) read it; nothing here moves bytes.
 *
 * File format (text, one statement per line, '#' starts a comment):
 *   moeccl-topo 1
 *   nodes N                  number of nodes
 *   ranks_per_node L         ranks are placed by blocks: rank r on node r / L
 *   rank R node N            or explicit placement, one line per rank
 *   nodes_per_group G        0 or absent: one group
 *   rails K                  NICs per node; rail of local rank l is l % K
 *   link CLASS latency_us=A overhead_us=O bw_GBps=B [rndv_bytes=R]
 *                            CLASS: node, group or global
 *   copy overhead_us=O bw_GBps=B
 *   device [hbm_GBps=H] [link_GBps=N] [copy_us=C] [launch_us=K]
 *                            device memory's costs (moeccl_topo_device_t)
 *   hw ...                   discovered hardware (hwloc), informative only
 */
#ifndef MOECCL_TOPO_H_
#define MOECCL_TOPO_H_

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "moeccl.h"

typedef enum {
  MOECCL_LINK_SELF = 0,   /* a rank to itself: a local copy */
  MOECCL_LINK_NODE = 1,   /* ranks on one node (shared memory) */
  MOECCL_LINK_GROUP = 2,  /* ranks on different nodes of one group */
  MOECCL_LINK_GLOBAL = 3, /* ranks in different groups (dragonfly global links) */
  MOECCL_LINK_NCLASSES
} moeccl_link_class_t;

typedef struct {
  double latency_us;  /* one message's start-up latency, end to end */
  double overhead_us; /* CPU time a rank spends per message it sends or receives */
  /* Bandwidth one rank gets on this class, in GB/s (1e9 bytes/s), while every
   * rank drives its links at once: NIC sharing between the ranks of a node
   * and global-link taper are folded in here.  Between nodes the cost model
   * pools it over the ranks of a NIC (moeccl_model_price_nic). */
  double bw_GBps;
  /* Messages larger than this go by rendezvous (a request and a clear to
   * send before the data: one more round trip and control message); 0: all
   * go eager. */
  double rndv_bytes;
} moeccl_link_t;

/* What moves bytes of device memory (GPU buffers): the tuner prices calls on
 * device buffers with these instead of the host's copy and shared-memory
 * costs (moeccl_topo_device_view).  Defaults (MOECCL_DEV_DEFAULT_*) are
 * published H200-class figures, not measurements. */
typedef struct {
  double hbm_GBps;  /* device memory bandwidth, read + write (a local copy gets half) */
  double link_GBps; /* peer link (NVLink) bandwidth per GPU and direction */
  double copy_us;   /* copy-engine launch latency, per copy */
  double launch_us; /* kernel launch latency: a step's flag or reduction kernel */
  int given;        /* 1: a file set some of them (the dump writes them), 0: defaults */
} moeccl_topo_device_t;

#define MOECCL_DEV_DEFAULT_HBM_GBPS 4800.0 /* H200 HBM3e; H100 SXM: 3350 */
#define MOECCL_DEV_DEFAULT_LINK_GBPS 450.0 /* NVLink 4: 900 GB/s both directions */
#define MOECCL_DEV_DEFAULT_COPY_US 7.0     /* copy-engine launch: 5-10 us */
#define MOECCL_DEV_DEFAULT_LAUNCH_US 4.0   /* kernel launch: 3-5 us */

typedef struct moeccl_topo {
  int nranks, nnodes, ngroups;
  int nodes_per_group; /* 0: all nodes form one group */
  int ranks_per_node;  /* L when every node holds the same number of ranks, else 0 */
  int nrails;          /* NICs per node; local rank l uses rail l % nrails; 0: unknown */
  int* rank_node;      /* [nranks] node of each rank; nodes numbered by their lowest rank */
  int* rank_local;     /* [nranks] index among its node's ranks (ascending comm rank) */
  int* node_first;     /* [nnodes + 1] offsets of each node's ranks in node_ranks */
  int* node_ranks;     /* [nranks] ranks of node n: node_ranks[node_first[n] ...] ascending */
  int* node_group;     /* [nnodes] group of each node (node / nodes_per_group) */
  moeccl_link_t link[MOECCL_LINK_NCLASSES];
  double copy_overhead_us; /* per local copy op (packing) */
  double copy_GBps;        /* local copy bandwidth of one rank */
  int copy_given;          /* 1: a file's 'copy' line set them (the tuner then measures none) */
  char source[128];        /* "discovered" or "file <path>", for logs */
  char hw[512];            /* one-line summary of this node's hardware (hwloc), or "" */
  moeccl_topo_device_t dev; /* device memory's costs */
} moeccl_topo_t;

/* Link class between ranks a and b. */
static inline moeccl_link_class_t moeccl_topo_class(const moeccl_topo_t* t, int a, int b) {
  if (a == b) return MOECCL_LINK_SELF;
  int na = t->rank_node[a], nb = t->rank_node[b];
  if (na == nb) return MOECCL_LINK_NODE;
  return t->node_group[na] == t->node_group[nb] ? MOECCL_LINK_GROUP : MOECCL_LINK_GLOBAL;
}

/* Rank on node n with local index l (regular topologies), or -1. */
static inline int moeccl_topo_rank_at(const moeccl_topo_t* t, int n, int l) {
  if (n < 0 || n >= t->nnodes || l < 0 || t->node_first[n] + l >= t->node_first[n + 1]) return -1;
  return t->node_ranks[t->node_first[n] + l];
}

/* 1 when the hierarchical algorithms apply: every node holds the same number
 * of ranks and, for levels == 3, every group the same number of nodes. */
int moeccl_topo_regular(const moeccl_topo_t* t, int levels);

/* Fills t from the node of each rank (node_of[r]: any id; equal ids = one
 * node, numbered in order of first appearance), groups of nodes_per_group
 * consecutive nodes (0: one group), nrails, and the default link costs. */
moecclResult_t moeccl_topo_from_nodes(moeccl_topo_t* t, int nranks, const uint64_t* node_of,
                                      int nodes_per_group, int nrails);
/* Regular shape: nnodes nodes of ranks_per_node ranks placed by blocks. */
moecclResult_t moeccl_topo_regular_shape(moeccl_topo_t* t, int nnodes, int ranks_per_node,
                                         int nodes_per_group, int nrails);
/* Explicit placement: rank r on node rank_node[r], nodes numbered 0..nnodes-1
 * in order of their lowest rank, none empty (else moecclInvalidArgument). */
moecclResult_t moeccl_topo_from_placement(moeccl_topo_t* t, int nranks, int nnodes,
                                          const int* rank_node, int nodes_per_group, int nrails);
/* Sets t's link, copy and device costs to the built-in defaults. */
void moeccl_topo_default_costs(moeccl_topo_t* t);
/* view = t as a call on device buffers sees it: the same placement (view
 * shares t's arrays: never free it, and it lives while t does), the
 * network classes unchanged, and t->dev in place of the host's costs
 * within a node: a copy costs copy_us and bytes at hbm_GBps / 2, a
 * message on the node link (a copy engine's copy from the peer's mapped
 * buffer) copy_us, half at each end, and bytes at link_GBps, and a step
 * on it launch_us. */
void moeccl_topo_device_view(const moeccl_topo_t* t, moeccl_topo_t* view);
/* Parses the file format above; nranks > 0 requires the file to describe
 * exactly that many ranks.  On error returns moecclInvalidArgument and
 * writes "path:line: why" into err.  docs/TOPOLOGY.md has the full rules.
 * Link costs start from the defaults; t->hw takes the first hw line. A
 * read error or no memory is moecclSystemError.  On any error t is left
 * zeroed (safe to free). */
moecclResult_t moeccl_topo_load(moeccl_topo_t* t, const char* path, int nranks, char* err,
                                size_t errlen);
/* The most ranks a topology file may describe (docs/TOPOLOGY.md): far
 * above any machine the library or perf/a2a_sim plans for (a2a_sim's
 * presets reach 4,096 ranks; its larger shapes are built, not read), low
 * enough that a file costs at most some 20 MiB to load.  A file that
 * declares more is refused before anything of its size is allocated. */
#define MOECCL_TOPO_MAX_RANKS (1 << 20)
/* moeccl_topo_load for a communicator of nranks (> 0) that may be of
 * another size than the file's: a file that declares another number of
 * ranks ('nodes' x 'ranks_per_node', or its number of 'rank' lines) is
 * read but not built, *other is set to that number and t is left zeroed;
 * else *other is 0 and the result is moeccl_topo_load's (a file past
 * MOECCL_TOPO_MAX_RANKS is an error either way).  Nothing of the declared size is
 * allocated in the first case (MOECCL_TOPO_FILE on every rank). */
moecclResult_t moeccl_topo_load_for(moeccl_topo_t* t, const char* path, int nranks, int* other,
                                    char* err, size_t errlen);
/* Reads link/copy/device statements (MOECCL_TUNE_FILE) over t's link costs; the
 * header is optional and placement statements are checked but ignored, so a
 * dumped topology works as a tune file.  On error t is unchanged. */
moecclResult_t moeccl_topo_load_costs(moeccl_topo_t* t, const char* path, char* err,
                                      size_t errlen);
/* moeccl_topo_load and moeccl_topo_load_costs over the len bytes at text
 * instead of a file (the same reader; name stands for the path in err),
 * for tests/fuzz.  A stream that cannot be opened is moecclSystemError. */
moecclResult_t moeccl_topo_parse(moeccl_topo_t* t, const char* name, const char* text, size_t len,
                                 int nranks, char* err, size_t errlen);
moecclResult_t moeccl_topo_parse_costs(moeccl_topo_t* t, const char* name, const char* text,
                                       size_t len, char* err, size_t errlen);
/* Writes t in the file format (loadable by moeccl_topo_load, which rebuilds
 * an identical t), then, when t->hw is this host's summary, the details of
 * moeccl_topo_dump_hw as comments.  I/O errors: moecclSystemError. */
moecclResult_t moeccl_topo_dump(const moeccl_topo_t* t, const char* path, char* err,
                                size_t errlen);
/* This node's hardware through hwloc (packages, NUMA nodes, cores, GPUs, NICs
 * and their PCI locality) as one line into t->hw, and the number of network
 * NICs found (0 without hwloc).  When some NICs are RDMA devices (hwloc
 * OpenFabrics devices: InfiniBand, RoCE), only those count: an Ethernet port
 * next to InfiniBand NICs is not a rail.  hwloc runs once per process; later calls reuse it. */
int moeccl_topo_discover_hw(moeccl_topo_t* t);
/* Writes this host's hardware in detail (each device, its PCI address and
 * NUMA/package locality, the PCI path class of each GPU-NIC pair) as lines
 * starting "# hw ".  Writes nothing when summary is "" or not this host's
 * summary (a topology from elsewhere); NULL: always.  Returns lines written. */
int moeccl_topo_dump_hw(FILE* f, const char* summary);
/* The topology of a new communicator, without any communication: the file
 * MOECCL_TOPO_FILE when set (it must describe nranks ranks; its groups and
 * rails win over MOECCL_TOPO_GROUP_SIZE and MOECCL_TOPO_RAILS), else the
 * ranks' node ids (node_of[r]) with groups of MOECCL_TOPO_GROUP_SIZE nodes
 * and MOECCL_TOPO_RAILS rails (0: hwloc's NIC count, at least 1); then the
 * costs of MOECCL_TUNE_FILE when set, and t->hw from discover_hw.  On error
 * returns moecclInvalidArgument (or moecclSystemError), explains it in err
 * and leaves t zeroed. */
moecclResult_t moeccl_topo_configure(moeccl_topo_t* t, int nranks, const uint64_t* node_of,
                                     char* err, size_t errlen);
void moeccl_topo_free(moeccl_topo_t* t);

/* dst = a deep copy of src (dst's old contents are not freed).  No memory:
 * moecclSystemError, dst left zeroed. */
moecclResult_t moeccl_topo_copy(moeccl_topo_t* dst, const moeccl_topo_t* src);
/* The topology of n of parent's ranks, member i being parent rank
 * ranks[i] (every entry a distinct rank of parent; the caller checks):
 * the members keep their nodes (numbered in order of first appearance),
 * the rails and every cost of parent, and their groups where those still
 * form consecutive runs of equal size over the members' nodes (groups are
 * consecutive nodes); otherwise all their nodes form one group.  This is
 * what a split communicator sees (tune/tuner.c).  t->source is parent's,
 * for the caller to rename.  Errors: moecclInvalidArgument (n < 1),
 * moecclSystemError (no memory); t is left zeroed. */
moecclResult_t moeccl_topo_subset(moeccl_topo_t* t, const moeccl_topo_t* parent, const int* ranks,
                                  int n);

/* ---- modelled clusters (topo_presets.c) ------------------------------------
 * A preset is a cluster shape and its link costs by name: perf/a2a_sim's
 * --preset and moecclSimCreate (moeccl_sim.h) read the same table. */
typedef struct {
  const char* name;
  const char* what; /* one line: what it models */
  int nodes, ppn, group, rails;
  moeccl_link_t link[MOECCL_LINK_NCLASSES];
  double copy_overhead_us, copy_GBps;
} moeccl_topo_preset_t;

/* The i-th preset (0, 1, ...; NULL past the last), and the one called name
 * (NULL: none). */
const moeccl_topo_preset_t* moeccl_topo_preset_at(int i);
const moeccl_topo_preset_t* moeccl_topo_preset_find(const char* name);
/* p's shape with its costs; nodes, ppn (<= 0) and group, rails (< 0) take
 * the preset's.  t->source is "preset NAME".  Errors: moeccl_topo_regular_shape's. */
moecclResult_t moeccl_topo_preset_shape(moeccl_topo_t* t, const moeccl_topo_preset_t* p,
                                        int nodes, int ppn, int group, int rails);
/* The preset called name with nranks ranks (0: its own size; else a
 * multiple of its ranks per node, at most MOECCL_TOPO_MAX_RANKS).  Errors
 * (moecclInvalidArgument; moecclSystemError for no memory) explained in
 * err; t left zeroed. */
moecclResult_t moeccl_topo_preset(moeccl_topo_t* t, const char* name, int nranks, char* err,
                                  size_t errlen);

/* Cost overrides: the link class called name ("node", "group", "global"),
 * or -1.  moeccl_topo_apply_costs applies list, "KEY=VALUE,KEY=VALUE..."
 * (strtok'd in place), to class cls's link, or with cls -1 to the copy
 * costs: keys latency_us, overhead_us, bw_GBps, rndv_bytes for a link,
 * overhead_us and bw_GBps for copies; every value a finite number >= 0,
 * a bandwidth > 0.  Returns 0, or -1 at the first bad pair (the pairs
 * before it are applied). */
int moeccl_topo_class_by_name(const char* name);
int moeccl_topo_apply_costs(moeccl_topo_t* t, int cls, char* list);

#endif
