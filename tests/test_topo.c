/*
 * Unit test of src/topo: tables built from node ids and placements (every
 * invariant topo.h states), link classes, dump -> load round trips of random
 * topologies, every kind of malformed topology file (error code, and the
 * line named in the message), MOECCL_TUNE_FILE costs, moeccl_topo_configure
 * under the MOECCL_TOPO_* variables, and hwloc discovery.  Files go to a
 * mkdtemp folder that is removed at the end.
 */
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "topo/topo.h"
#include "unit_check.h"

static char tmpdir[512];

static void path_of(char* buf, size_t len, const char* name) {
  snprintf(buf, len, "%s/%s", tmpdir, name);
}

static void write_file(const char* path, const char* text) {
  FILE* f = fopen(path, "w");
  if (!f) {
    perror(path);
    exit(1);
  }
  fputs(text, f);
  fclose(f);
}

/* The whole file in a malloc'd string. */
static char* read_file(const char* path) {
  FILE* f = fopen(path, "r");
  if (!f) return NULL;
  size_t cap = 4096, n = 0;
  char* buf = malloc(cap);
  size_t got;
  while (buf && (got = fread(buf + n, 1, cap - n - 1, f)) > 0) {
    n += got;
    if (cap - n - 1 == 0) buf = realloc(buf, cap *= 2);
  }
  fclose(f);
  if (buf) buf[n] = '\0';
  return buf;
}

static void remove_tmpdir(void) {
  DIR* d = opendir(tmpdir);
  if (!d) return;
  struct dirent* e;
  char path[1024];
  while ((e = readdir(d)) != NULL) {
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
    snprintf(path, sizeof(path), "%s/%s", tmpdir, e->d_name);
    unlink(path);
  }
  closedir(d);
  rmdir(tmpdir);
}

/* Every invariant topo.h promises about the derived tables. */
static void check_tables(const moeccl_topo_t* t, const char* what) {
  int n = t->nranks, nn = t->nnodes, bad = 0;
  if (n <= 0 || nn <= 0 || !t->rank_node || !t->node_first) {
    CHECK(0, "%s: empty topology", what);
    return;
  }
  bad |= t->node_first[0] != 0 || t->node_first[nn] != n;
  int size0 = t->node_first[1] - t->node_first[0], same = 1;
  for (int i = 0; i < nn; i++) {
    int size = t->node_first[i + 1] - t->node_first[i];
    bad |= size <= 0;
    same &= size == size0;
    for (int k = t->node_first[i] + 1; k < t->node_first[i + 1]; k++)
      bad |= t->node_ranks[k] <= t->node_ranks[k - 1];
    if (i > 0) bad |= t->node_ranks[t->node_first[i]] <= t->node_ranks[t->node_first[i - 1]];
  }
  CHECK(!bad, "%s: node_first/node_ranks broken", what);
  for (int r = 0; r < n && !bad; r++) {
    int node = t->rank_node[r];
    bad |= node < 0 || node >= nn;
    if (!bad) bad |= t->node_ranks[t->node_first[node] + t->rank_local[r]] != r;
    if (!bad) bad |= moeccl_topo_rank_at(t, node, t->rank_local[r]) != r;
  }
  CHECK(!bad, "%s: rank_node/rank_local disagree with node_ranks", what);
  CHECK(t->ranks_per_node == (same ? size0 : 0), "%s: ranks_per_node %d", what, t->ranks_per_node);
  int g = t->nodes_per_group ? t->nodes_per_group : nn;
  CHECK(t->ngroups == (nn + g - 1) / g, "%s: ngroups %d", what, t->ngroups);
  for (int i = 0; i < nn; i++)
    if (t->node_group[i] != i / g) {
      CHECK(0, "%s: node %d in group %d, expected %d", what, i, t->node_group[i], i / g);
      break;
    }
}

static void test_from_nodes_interleaved(void) {
  moeccl_topo_t t;
  uint64_t ids[8];
  for (int r = 0; r < 8; r++) ids[r] = r % 2 ? UINT64_MAX : 7; /* nodes alternate */
  CHECK(moeccl_topo_from_nodes(&t, 8, ids, 0, 2) == moecclSuccess, "interleaved");
  check_tables(&t, "interleaved");
  CHECK(t.nnodes == 2 && t.ranks_per_node == 4 && t.ngroups == 1 && t.nrails == 2,
        "interleaved shape %d %d %d %d", t.nnodes, t.ranks_per_node, t.ngroups, t.nrails);
  for (int r = 0; r < 8; r++) {
    CHECK(t.rank_node[r] == r % 2, "rank %d on node %d", r, t.rank_node[r]);
    CHECK(t.rank_local[r] == r / 2, "rank %d local %d", r, t.rank_local[r]);
  }
  CHECK(moeccl_topo_rank_at(&t, 0, 3) == 6 && moeccl_topo_rank_at(&t, 1, 0) == 1 &&
            moeccl_topo_rank_at(&t, 1, 3) == 7,
        "rank_at");
  CHECK(moeccl_topo_rank_at(&t, 1, 4) == -1 && moeccl_topo_rank_at(&t, 2, 0) == -1 &&
            moeccl_topo_rank_at(&t, -1, 0) == -1 && moeccl_topo_rank_at(&t, 0, -1) == -1,
        "rank_at out of range");
  CHECK(moeccl_topo_regular(&t, 2) && moeccl_topo_regular(&t, 3), "interleaved is regular");
  CHECK(moeccl_topo_class(&t, 0, 2) == MOECCL_LINK_NODE &&
            moeccl_topo_class(&t, 0, 1) == MOECCL_LINK_GROUP &&
            moeccl_topo_class(&t, 5, 5) == MOECCL_LINK_SELF,
        "interleaved classes");
  moeccl_topo_free(&t);
  CHECK(t.rank_node == NULL && t.nranks == 0, "free zeroes");
  moeccl_topo_free(&t); /* twice is harmless */
  moeccl_topo_free(NULL);
}

static void test_from_nodes_irregular(void) {
  moeccl_topo_t t;
  const uint64_t ids[6] = {5, 5, 5, 6, 1u << 31, 1u << 31};
  CHECK(moeccl_topo_from_nodes(&t, 6, ids, 0, -3) == moecclSuccess, "irregular");
  check_tables(&t, "irregular");
  CHECK(t.nnodes == 3 && t.ranks_per_node == 0 && t.nrails == 0, "irregular shape %d %d %d",
        t.nnodes, t.ranks_per_node, t.nrails);
  CHECK(!moeccl_topo_regular(&t, 2) && !moeccl_topo_regular(&t, 3), "irregular not regular");
  CHECK(moeccl_topo_rank_at(&t, 1, 0) == 3 && moeccl_topo_rank_at(&t, 1, 1) == -1 &&
            moeccl_topo_rank_at(&t, 2, 1) == 5,
        "irregular rank_at");
  moeccl_topo_free(&t);
  CHECK(moeccl_topo_from_nodes(&t, 0, ids, 0, 0) == moecclInvalidArgument, "0 ranks");
  CHECK(moeccl_topo_from_nodes(&t, 4, NULL, 0, 0) == moecclInvalidArgument, "no ids");
  moeccl_topo_free(&t);
}

static void test_groups(void) {
  moeccl_topo_t t;
  uint64_t ids[16];
  for (int r = 0; r < 16; r++) ids[r] = 1000 + (uint64_t)(r / 2) * 1000; /* 8 nodes x 2 */
  CHECK(moeccl_topo_from_nodes(&t, 16, ids, 4, 1) == moecclSuccess, "groups of 4");
  check_tables(&t, "groups of 4");
  CHECK(t.nnodes == 8 && t.ngroups == 2 && t.nodes_per_group == 4, "groups shape");
  CHECK(moeccl_topo_class(&t, 0, 0) == MOECCL_LINK_SELF, "self");
  CHECK(moeccl_topo_class(&t, 0, 1) == MOECCL_LINK_NODE, "node");
  CHECK(moeccl_topo_class(&t, 0, 2) == MOECCL_LINK_GROUP, "group");
  CHECK(moeccl_topo_class(&t, 0, 8) == MOECCL_LINK_GLOBAL, "global");
  CHECK(moeccl_topo_class(&t, 15, 14) == MOECCL_LINK_NODE, "node (high)");
  CHECK(moeccl_topo_class(&t, 9, 15) == MOECCL_LINK_GROUP, "group (high)");
  CHECK(moeccl_topo_class(&t, 7, 8) == MOECCL_LINK_GLOBAL, "global at the boundary");
  CHECK(moeccl_topo_regular(&t, 3), "8 nodes in groups of 4 are regular");
  moeccl_topo_free(&t);
  CHECK(moeccl_topo_from_nodes(&t, 16, ids, 3, 0) == moecclSuccess, "groups of 3");
  check_tables(&t, "groups of 3");
  CHECK(t.ngroups == 3 && moeccl_topo_regular(&t, 2) && !moeccl_topo_regular(&t, 3),
        "8 nodes in groups of 3: %d groups, not regular for 3 levels", t.ngroups);
  moeccl_topo_free(&t);
  CHECK(moeccl_topo_from_nodes(&t, 16, ids, 8, 0) == moecclSuccess, "group of all");
  CHECK(t.nodes_per_group == 0 && t.ngroups == 1, "a group of every node is one group");
  CHECK(moeccl_topo_class(&t, 0, 15) == MOECCL_LINK_GROUP, "one group: no global links");
  moeccl_topo_free(&t);
}

static void test_placement(void) {
  moeccl_topo_t t;
  const int ok[6] = {0, 1, 0, 2, 1, 2};
  CHECK(moeccl_topo_from_placement(&t, 6, 3, ok, 2, 1) == moecclSuccess, "placement");
  check_tables(&t, "placement");
  CHECK(t.ranks_per_node == 2 && t.ngroups == 2 && t.rank_local[4] == 1, "placement shape");
  moeccl_topo_free(&t);
  const int unordered[4] = {1, 0, 0, 1}, empty[4] = {0, 0, 1, 1}, range[3] = {0, 1, 5};
  CHECK(moeccl_topo_from_placement(&t, 4, 2, unordered, 0, 0) == moecclInvalidArgument,
        "nodes out of order");
  CHECK(moeccl_topo_from_placement(&t, 4, 3, empty, 0, 0) == moecclInvalidArgument,
        "an empty node");
  CHECK(moeccl_topo_from_placement(&t, 3, 2, range, 0, 0) == moecclInvalidArgument,
        "node out of range");
  CHECK(t.rank_node == NULL, "failed placement leaves t empty");
  CHECK(moeccl_topo_regular_shape(&t, 3, 4, 2, 4) == moecclSuccess, "regular shape");
  check_tables(&t, "regular shape");
  CHECK(t.nranks == 12 && t.ranks_per_node == 4 && t.ngroups == 2 && t.nrails == 4,
        "regular shape fields");
  moeccl_topo_free(&t);
}

/* ---- dump -> load ---------------------------------------------------------------- */

static double random_double(unsigned* seed, double scale) {
  double a = (double)rand_r(seed) / RAND_MAX, b = (double)rand_r(seed) / RAND_MAX;
  return (a + b / 4096.0) * scale; /* all 53 bits in play */
}

static void random_costs(moeccl_topo_t* t, unsigned* seed) {
  static const double odd[] = {0.1, 25.0, 1e-9, 4.9406564584124654e-324, 1e300, 1.0 / 3.0};
  for (int c = MOECCL_LINK_NODE; c < MOECCL_LINK_NCLASSES; c++) {
    t->link[c].latency_us = random_double(seed, 100.0);
    t->link[c].overhead_us = rand_r(seed) % 4 ? random_double(seed, 10.0) : 0.0;
    t->link[c].bw_GBps =
        rand_r(seed) % 4 ? random_double(seed, 500.0) + 1e-3 : odd[rand_r(seed) % 6];
    t->link[c].rndv_bytes = rand_r(seed) % 2 ? (double)(rand_r(seed) % 1000000) : 0.0;
  }
  t->copy_overhead_us = random_double(seed, 1.0);
  t->copy_GBps = odd[rand_r(seed) % 6];
  snprintf(t->hw, sizeof(t->hw), "%s",
           rand_r(seed) % 2 ? "" : "1 package, 2 cores, 1 NIC: eth0 (pci 0000:00:03.0, NUMA 0)");
}

/* A random regular shape, or a random placement (node ids drawn at random). */
static int random_topo(moeccl_topo_t* t, unsigned* seed, int blocks) {
  int res;
  if (blocks) {
    int nodes = 1 + rand_r(seed) % 40, per = 1 + rand_r(seed) % 8;
    res = moeccl_topo_regular_shape(t, nodes, per, rand_r(seed) % (nodes + 2), rand_r(seed) % 9);
  } else {
    int n = 1 + rand_r(seed) % 300, ids_range = 1 + rand_r(seed) % n;
    uint64_t* ids = malloc((size_t)n * sizeof(uint64_t));
    int interleaved = rand_r(seed) % 3 == 0; /* equal sizes, not blocks */
    for (int r = 0; r < n; r++)
      ids[r] = interleaved ? (uint64_t)(r % ids_range) : (uint64_t)(rand_r(seed) % ids_range);
    res = moeccl_topo_from_nodes(t, n, ids, rand_r(seed) % 6, rand_r(seed) % 9);
    free(ids);
  }
  if (res == moecclSuccess) random_costs(t, seed);
  return res;
}

static int same_ints(const int* a, const int* b, int n) {
  return !memcmp(a, b, (size_t)n * sizeof(int));
}

/* Every field except source (which names where a topology came from). */
static int same_topo(const moeccl_topo_t* a, const moeccl_topo_t* b, const char* what) {
  int before = failures;
  CHECK(a->nranks == b->nranks && a->nnodes == b->nnodes && a->ngroups == b->ngroups &&
            a->nodes_per_group == b->nodes_per_group && a->ranks_per_node == b->ranks_per_node &&
            a->nrails == b->nrails,
        "%s: shape %d/%d/%d/%d/%d/%d vs %d/%d/%d/%d/%d/%d", what, a->nranks, a->nnodes, a->ngroups,
        a->nodes_per_group, a->ranks_per_node, a->nrails, b->nranks, b->nnodes, b->ngroups,
        b->nodes_per_group, b->ranks_per_node, b->nrails);
  if (failures != before) return 0;
  CHECK(same_ints(a->rank_node, b->rank_node, a->nranks) &&
            same_ints(a->rank_local, b->rank_local, a->nranks) &&
            same_ints(a->node_first, b->node_first, a->nnodes + 1) &&
            same_ints(a->node_ranks, b->node_ranks, a->nranks) &&
            same_ints(a->node_group, b->node_group, a->nnodes),
        "%s: tables differ", what);
  for (int c = 0; c < MOECCL_LINK_NCLASSES; c++)
    CHECK(a->link[c].latency_us == b->link[c].latency_us &&
              a->link[c].overhead_us == b->link[c].overhead_us &&
              a->link[c].bw_GBps == b->link[c].bw_GBps,
          "%s: link %d: %.17g/%.17g/%.17g vs %.17g/%.17g/%.17g", what, c, a->link[c].latency_us,
          a->link[c].overhead_us, a->link[c].bw_GBps, b->link[c].latency_us, b->link[c].overhead_us,
          b->link[c].bw_GBps);
  CHECK(a->copy_overhead_us == b->copy_overhead_us && a->copy_GBps == b->copy_GBps,
        "%s: copy costs differ", what);
  CHECK(!strcmp(a->hw, b->hw), "%s: hw '%s' vs '%s'", what, a->hw, b->hw);
  return failures == before;
}

static void round_trip(const moeccl_topo_t* t, const char* what, int expect_blocks) {
  char path[600], err[512];
  path_of(path, sizeof(path), "roundtrip.topo");
  CHECK(moeccl_topo_dump(t, path, err, sizeof(err)) == moecclSuccess, "%s: dump: %s", what, err);
  char* text = read_file(path);
  int blocks = text && strstr(text, "\nranks_per_node ") != NULL;
  int lines = text && strstr(text, "\nrank 0 node 0\n") != NULL;
  CHECK(blocks == expect_blocks && lines == !expect_blocks, "%s: placement written %s, expected %s",
        what, blocks ? "by blocks" : "by rank lines",
        expect_blocks ? "by blocks" : "by rank lines");
  for (int pass = 0; pass < 2; pass++) {
    moeccl_topo_t u;
    int nranks = pass ? 0 : t->nranks; /* with and without the expected count */
    moecclResult_t res = moeccl_topo_load(&u, path, nranks, err, sizeof(err));
    CHECK(res == moecclSuccess, "%s: load (nranks %d): %s", what, nranks, err);
    if (res == moecclSuccess && !same_topo(t, &u, what) && text)
      fprintf(stderr, "--- %s\n%s---\n", path, text);
    CHECK(!strncmp(u.source, "file ", 5), "%s: source '%s'", what, u.source);
    moeccl_topo_free(&u);
  }
  free(text);
}

static void test_round_trips(void) {
  unsigned seed = 20261130;
  for (int i = 0; i < 60; i++) {
    moeccl_topo_t t;
    char what[64];
    int blocks = i % 2;
    snprintf(what, sizeof(what), "random %s topology %d", blocks ? "regular" : "placed", i);
    if (random_topo(&t, &seed, blocks) != moecclSuccess) {
      CHECK(0, "%s: cannot build", what);
      continue;
    }
    int by_blocks = t.ranks_per_node > 0;
    for (int r = 0; r < t.nranks && by_blocks; r++)
      by_blocks = t.rank_node[r] == r / t.ranks_per_node;
    round_trip(&t, what, by_blocks);
    moeccl_topo_free(&t);
  }
  /* Equal node sizes that are not blocks must still be written rank by rank. */
  uint64_t ids[6] = {1, 2, 3, 1, 2, 3};
  moeccl_topo_t t;
  if (moeccl_topo_from_nodes(&t, 6, ids, 2, 3) == moecclSuccess) {
    round_trip(&t, "interleaved 3x2", 0);
    moeccl_topo_free(&t);
  }
}

/* ---- malformed files -------------------------------------------------------------- */

typedef struct {
  const char* name;
  const char* text;
  int nranks;
  int line;        /* the line the message must name */
  const char* why; /* a part of the message */
} bad_file_t;

#define H "moeccl-topo 1\n"
static const bad_file_t bad_files[] = {
    {"no header", "nodes 1\nranks_per_node 1\n", 0, 1, "expected 'moeccl-topo 1'"},
    {"hw before header", "hw x\n" H "nodes 1\nranks_per_node 1\n", 0, 1, "moeccl-topo"},
    {"version 2", "moeccl-topo 2\nnodes 1\nranks_per_node 1\n", 0, 1, "version 1"},
    {"header twice", "# c\n" H "nodes 1\n" H, 0, 4, "first statement"},
    {"empty file", "", 0, 0, "empty file"},
    {"only comments", "# nothing\n\n   # here\n", 0, 3, "empty file"},
    {"unknown statement", H "nodes 1\nswitches 4\nranks_per_node 1\n", 0, 3,
     "unknown statement 'switches'"},
    {"nodes word", H "nodes two\nranks_per_node 1\n", 0, 2, "bad nodes 'two'"},
    {"nodes suffix", H "nodes 2x\nranks_per_node 1\n", 0, 2, "bad nodes '2x'"},
    {"nodes 0", H "nodes 0\nranks_per_node 1\n", 0, 2, "bad nodes '0'"},
    {"nodes negative", H "nodes -1\nranks_per_node 1\n", 0, 2, "bad nodes"},
    {"nodes huge", H "nodes 99999999999\nranks_per_node 1\n", 0, 2, "bad nodes"},
    {"nodes twice", H "nodes 1\nnodes 1\nranks_per_node 1\n", 0, 3,
     "second 'nodes' (first at line 2)"},
    {"nodes two numbers", H "nodes 1 2\nranks_per_node 1\n", 0, 2, "one number"},
    {"ranks_per_node 0", H "nodes 1\nranks_per_node 0\n", 0, 3, "bad ranks_per_node"},
    {"groups negative", H "nodes 1\nranks_per_node 1\nnodes_per_group -1\n", 0, 4,
     "bad nodes_per_group"},
    {"rails word", H "nodes 1\nranks_per_node 1\nrails many\n", 0, 4, "bad rails 'many'"},
    {"bw 0", H "nodes 1\nranks_per_node 1\nlink node bw_GBps=0\n", 0, 4, "greater than 0"},
    {"bw negative", H "nodes 1\nranks_per_node 1\nlink group bw_GBps=-2\n", 0, 4, "greater than 0"},
    {"bw word", H "nodes 1\nranks_per_node 1\nlink global bw_GBps=fast\n", 0, 4, "bad bw_GBps"},
    {"bw nan", H "nodes 1\nranks_per_node 1\nlink node bw_GBps=nan\n", 0, 4, "bad bw_GBps"},
    {"bw inf", H "nodes 1\nranks_per_node 1\nlink node bw_GBps=inf\n", 0, 4, "bad bw_GBps"},
    {"bw empty", H "nodes 1\nranks_per_node 1\nlink node bw_GBps=\n", 0, 4, "bad bw_GBps"},
    {"latency negative", H "nodes 1\nranks_per_node 1\nlink node latency_us=-1\n", 0, 4,
     "0 or more"},
    {"overhead suffix", H "nodes 1\nranks_per_node 1\nlink node overhead_us=3us\n", 0, 4,
     "bad overhead_us"},
    {"link class", H "nodes 1\nranks_per_node 1\nlink rack bw_GBps=1\n", 0, 4,
     "unknown link class 'rack'"},
    {"link self", H "nodes 1\nranks_per_node 1\nlink self bw_GBps=1\n", 0, 4, "unknown link class"},
    {"link key", H "nodes 1\nranks_per_node 1\nlink node speed=3\n", 0, 4, "unknown key 'speed'"},
    {"link no value", H "nodes 1\nranks_per_node 1\nlink node bw_GBps\n", 0, 4, "key=value"},
    {"link key twice", H "nodes 1\nranks_per_node 1\nlink node bw_GBps=1 bw_GBps=2\n", 0, 4,
     "given twice"},
    {"link no keys", H "nodes 1\nranks_per_node 1\nlink node\n", 0, 4, "no costs"},
    {"link no class", H "nodes 1\nranks_per_node 1\nlink\n", 0, 4, "expected 'link"},
    {"too many words", H "nodes 1\nlink node a=1 b=2 c=3 d=4 e=5 f=6 g=7\n", 0, 3,
     "too many words"},
    {"copy latency", H "nodes 1\nranks_per_node 1\ncopy latency_us=1\n", 0, 4,
     "unknown key 'latency_us'"},
    {"copy bw 0", H "nodes 1\nranks_per_node 1\ncopy bw_GBps=0\n", 0, 4, "greater than 0"},
    {"rank syntax", H "nodes 1\nrank 0 nod 0\n", 0, 3, "expected 'rank R node N'"},
    {"rank negative", H "nodes 1\nrank -1 node 0\n", 0, 3, "bad rank '-1'"},
    {"rank word", H "nodes 1\nrank one node 0\n", 0, 3, "bad rank 'one'"},
    {"node word", H "nodes 1\nrank 0 node x\n", 0, 3, "bad node 'x'"},
    {"rank out of range", H "nodes 2\nrank 0 node 0\nrank 4 node 1\n", 4, 4,
     "rank 4 out of range: the communicator has 4 ranks"},
    {"rank beyond lines", H "nodes 1\nrank 0 node 0\nrank 2 node 0\n", 0, 4, "rank 2 out of range"},
    {"rank twice", H "nodes 1\nrank 0 node 0\nrank 1 node 0\nrank 0 node 0\n", 0, 5,
     "rank 0 placed twice (first at line 3)"},
    {"rank never placed", H "nodes 1\nrank 0 node 0\nrank 2 node 0\n# end\n", 3, 5,
     "rank 1 is never placed"},
    {"node out of range", H "nodes 2\nrank 0 node 0\nrank 1 node 2\n", 0, 4,
     "node 2 out of range: 'nodes 2' (line 2)"},
    {"node without ranks", H "nodes 3\nrank 0 node 0\nrank 1 node 1\n", 0, 2,
     "node 2 holds no rank"},
    {"nodes out of order", H "nodes 2\nrank 0 node 1\nrank 1 node 0\n", 0, 3, "lowest rank"},
    {"ranks count", H "nodes 2\nranks_per_node 2\n", 6, 3, "the communicator has 6"},
    {"both placements", H "nodes 1\nranks_per_node 2\nrank 0 node 0\nrank 1 node 0\n", 0, 4,
     "exclude each other"},
    {"no placement", H "nodes 2\nrails 1\n", 0, 3, "no placement"},
    {"no nodes", H "ranks_per_node 2\n", 0, 2, "no 'nodes' statement"},
    {"too many rails", H "nodes 2\nranks_per_node 2\nrails 65\n", 0, 4, "at most 64"},
};
#undef H

static void test_bad_files(void) {
  char path[600], err[512], prefix[700];
  path_of(path, sizeof(path), "bad.topo");
  for (size_t i = 0; i < sizeof(bad_files) / sizeof(bad_files[0]); i++) {
    const bad_file_t* b = &bad_files[i];
    write_file(path, b->text);
    moeccl_topo_t t;
    memset(&t, 0xab, sizeof(t));
    strcpy(err, "untouched");
    moecclResult_t res = moeccl_topo_load(&t, path, b->nranks, err, sizeof(err));
    CHECK(res == moecclInvalidArgument, "%s: result %d", b->name, (int)res);
    snprintf(prefix, sizeof(prefix), "%s:%d: ", path, b->line);
    CHECK(!strncmp(err, prefix, strlen(prefix)), "%s: message '%s' does not start '%s'", b->name,
          err, prefix);
    CHECK(strstr(err, b->why) != NULL, "%s: message '%s' lacks '%s'", b->name, err, b->why);
    CHECK(t.rank_node == NULL && t.nranks == 0, "%s: t not left empty", b->name);
    moeccl_topo_free(&t);
  }
  /* the caps: a line past 4096 characters, a file past 64 MiB, and a
   * file with no end (/dev/zero: NUL bytes, refused at the first) */
  static char longline[6000];
  memset(longline, 'x', sizeof(longline) - 2);
  longline[0] = '#', longline[sizeof(longline) - 2] = '\n';
  char text[7000];
  snprintf(text, sizeof(text), "moeccl-topo 1\n%s", longline);
  write_file(path, text);
  moeccl_topo_t t;
  CHECK(moeccl_topo_load(&t, path, 0, err, sizeof(err)) == moecclInvalidArgument &&
            strstr(err, ":2: ") && strstr(err, "longer than 4096"),
        "long line: '%s'", err);
  CHECK(moeccl_topo_load(&t, "/dev/zero", 0, err, sizeof(err)) == moecclInvalidArgument &&
            strstr(err, "NUL byte"),
        "/dev/zero: '%s'", err);
  FILE* big = fopen(path, "w");
  if (big) {
    fputs("moeccl-topo 1\n", big);
    for (int i = 0; i < (66 << 20) / 60; i++)
      fputs("# a comment line that is sixty-four bytes long, padding......\n", big);
    fclose(big);
  }
  CHECK(moeccl_topo_load(&t, path, 0, err, sizeof(err)) == moecclInvalidArgument &&
            strstr(err, "larger than 64 MiB"),
        "big file: '%s'", err);
  unlink(path);
  path_of(path, sizeof(path), "no-such-file.topo");
  CHECK(moeccl_topo_load(&t, path, 0, err, sizeof(err)) == moecclInvalidArgument &&
            strstr(err, path) != NULL,
        "missing file: '%s'", err);
  CHECK(moeccl_topo_load(&t, path, 0, NULL, 0) == moecclInvalidArgument, "no err buffer");
}

/* Free form that is valid: comments, blanks, CRLF, tabs, any statement
 * order after the header, keys in any order, missing keys at defaults. */
static void test_good_file(void) {
  char path[600], err[512];
  path_of(path, sizeof(path), "good.topo");
  write_file(path, "# a hand-written file\r\n"
                   "\n"
                   "moeccl-topo 1   # version\r\n"
                   "link global bw_GBps=2.5 latency_us=40\n"
                   "\trails\t2\n"
                   "rank 3 node 1\nrank 0 node 0\nrank 2 node 1\nrank 1 node 0\n"
                   "nodes 2\n"
                   "copy bw_GBps=16\n"
                   "nodes_per_group 1\n"
                   "hw   some host  with  spaces   \n"
                   "hw   a second hw line is ignored\n");
  moeccl_topo_t t, d;
  moeccl_topo_default_costs(&d);
  moecclResult_t res = moeccl_topo_load(&t, path, 4, err, sizeof(err));
  CHECK(res == moecclSuccess, "good file: %s", err);
  if (res != moecclSuccess) return;
  check_tables(&t, "good file");
  CHECK(t.nnodes == 2 && t.ngroups == 2 && t.nrails == 2 && t.ranks_per_node == 2,
        "good file shape");
  CHECK(t.link[MOECCL_LINK_GLOBAL].bw_GBps == 2.5 && t.link[MOECCL_LINK_GLOBAL].latency_us == 40,
        "given keys");
  CHECK(t.link[MOECCL_LINK_GLOBAL].overhead_us == d.link[MOECCL_LINK_GLOBAL].overhead_us,
        "missing key keeps the default");
  CHECK(!memcmp(&t.link[MOECCL_LINK_NODE], &d.link[MOECCL_LINK_NODE], sizeof(moeccl_link_t)),
        "class not given keeps the defaults");
  CHECK(t.copy_GBps == 16 && t.copy_overhead_us == d.copy_overhead_us, "copy line");
  CHECK(t.copy_given == 1, "copy line: copy_given"); /* the tuner then measures no copies */
  CHECK(!strcmp(t.hw, "some host  with  spaces"), "hw '%s'", t.hw);
  CHECK(moeccl_topo_class(&t, 0, 2) == MOECCL_LINK_GLOBAL, "one node per group");
  moeccl_topo_free(&t);
}

/* ---- MOECCL_TUNE_FILE ------------------------------------------------------------- */

static void test_tune_file(void) {
  char path[600], err[512];
  moeccl_topo_t t, ref;
  moeccl_topo_regular_shape(&t, 4, 2, 2, 2);
  moeccl_topo_regular_shape(&ref, 4, 2, 2, 2);
  CHECK(t.copy_given == 0, "built: copy_given %d", t.copy_given);
  path_of(path, sizeof(path), "tune.txt");
  write_file(path, "link group bw_GBps=3.5\n");
  CHECK(moeccl_topo_load_costs(&t, path, err, sizeof(err)) == moecclSuccess && !t.copy_given,
        "tune without copy: copy_given %d (%s)", t.copy_given, err);
  write_file(path, "# measured\nlink group bw_GBps=3.5\n"
                   "link node overhead_us=0.125 latency_us=0.25\ncopy bw_GBps=12\n");
  CHECK(moeccl_topo_load_costs(&t, path, err, sizeof(err)) == moecclSuccess, "tune: %s", err);
  CHECK(t.link[MOECCL_LINK_GROUP].bw_GBps == 3.5 &&
            t.link[MOECCL_LINK_GROUP].latency_us == ref.link[MOECCL_LINK_GROUP].latency_us,
        "tune: group link");
  CHECK(t.link[MOECCL_LINK_NODE].latency_us == 0.25 &&
            t.link[MOECCL_LINK_NODE].overhead_us == 0.125 &&
            t.link[MOECCL_LINK_NODE].bw_GBps == ref.link[MOECCL_LINK_NODE].bw_GBps,
        "tune: node link");
  CHECK(!memcmp(&t.link[MOECCL_LINK_GLOBAL], &ref.link[MOECCL_LINK_GLOBAL], sizeof(moeccl_link_t)),
        "tune: global link untouched");
  CHECK(t.copy_GBps == 12 && t.copy_overhead_us == ref.copy_overhead_us && t.copy_given,
        "tune: copy");
  /* A whole topology file as tune file: its costs apply, its placement does not. */
  moeccl_topo_t other;
  const int placement[3] = {0, 0, 1};
  moeccl_topo_from_placement(&other, 3, 2, placement, 0, 7);
  unsigned seed = 7;
  random_costs(&other, &seed);
  path_of(path, sizeof(path), "tune-topo.topo");
  CHECK(moeccl_topo_dump(&other, path, err, sizeof(err)) == moecclSuccess, "dump: %s", err);
  CHECK(moeccl_topo_load_costs(&t, path, err, sizeof(err)) == moecclSuccess, "tune topo: %s", err);
  for (int c = MOECCL_LINK_NODE; c < MOECCL_LINK_NCLASSES; c++)
    CHECK(!memcmp(&t.link[c], &other.link[c], sizeof(moeccl_link_t)), "tune topo: link %d", c);
  CHECK(t.copy_GBps == other.copy_GBps && t.copy_overhead_us == other.copy_overhead_us,
        "tune topo: copy");
  memcpy(ref.link, t.link, sizeof(ref.link));
  ref.copy_GBps = t.copy_GBps;
  ref.copy_overhead_us = t.copy_overhead_us;
  same_topo(&t, &ref, "tune changes costs only");
  /* A bad line after a good one: nothing applies. */
  path_of(path, sizeof(path), "tune-bad.txt");
  write_file(path, "link group bw_GBps=9\nlink node bw_GBps=0\n");
  CHECK(moeccl_topo_load_costs(&t, path, err, sizeof(err)) == moecclInvalidArgument &&
            strstr(err, "tune-bad.txt:2: ") != NULL,
        "bad tune file: '%s'", err);
  same_topo(&t, &ref, "a failed tune file changes nothing");
  write_file(path, "link node bw_GBps=1\nmoeccl-topo 1\n");
  CHECK(moeccl_topo_load_costs(&t, path, err, sizeof(err)) == moecclInvalidArgument &&
            strstr(err, ":2: ") != NULL,
        "late header in a tune file: '%s'", err);
  moeccl_topo_free(&t);
  moeccl_topo_free(&ref);
  moeccl_topo_free(&other);
}

/* ---- moeccl_topo_configure --------------------------------------------------------- */

static void unset_topo_env(void) {
  unsetenv("MOECCL_TOPO_FILE");
  unsetenv("MOECCL_TOPO_GROUP_SIZE");
  unsetenv("MOECCL_TOPO_RAILS");
  unsetenv("MOECCL_TUNE_FILE");
}

static void test_configure(void) {
  char path[600], tune[600], err[512];
  uint64_t ids[8];
  for (int r = 0; r < 8; r++) ids[r] = 0x1234 + (uint64_t)(r / 2); /* 4 nodes x 2 */
  moeccl_topo_t t, probe = {0};
  int nics = moeccl_topo_discover_hw(&probe);
  unset_topo_env();
  CHECK(moeccl_topo_configure(&t, 8, ids, err, sizeof(err)) == moecclSuccess, "default: %s", err);
  CHECK(t.nnodes == 4 && t.ngroups == 1 && t.nrails == (nics > 0 ? nics : 1),
        "default: %d nodes, %d groups, %d rails (hwloc: %d NICs)", t.nnodes, t.ngroups, t.nrails,
        nics);
  CHECK(!strcmp(t.hw, probe.hw) && !strcmp(t.source, "discovered"), "default: hw, source");
  moeccl_topo_free(&t);

  setenv("MOECCL_TOPO_GROUP_SIZE", "2", 1);
  setenv("MOECCL_TOPO_RAILS", "3", 1);
  CHECK(moeccl_topo_configure(&t, 8, ids, err, sizeof(err)) == moecclSuccess, "env: %s", err);
  CHECK(t.ngroups == 2 && t.nodes_per_group == 2 && t.nrails == 3, "env: %d groups, %d rails",
        t.ngroups, t.nrails);
  moeccl_topo_free(&t);
  setenv("MOECCL_TOPO_GROUP_SIZE", "-2", 1);
  CHECK(moeccl_topo_configure(&t, 8, ids, err, sizeof(err)) == moecclInvalidArgument &&
            strstr(err, "MOECCL_TOPO_GROUP_SIZE") != NULL && t.rank_node == NULL,
        "negative group size: '%s'", err);
  setenv("MOECCL_TOPO_GROUP_SIZE", "2", 1);

  /* A file wins over the node ids and over GROUP_SIZE / RAILS. */
  moeccl_topo_t file_topo;
  moeccl_topo_regular_shape(&file_topo, 2, 4, 0, 5);
  file_topo.link[MOECCL_LINK_GROUP].bw_GBps = 42.0;
  path_of(path, sizeof(path), "configure.topo");
  moeccl_topo_dump(&file_topo, path, err, sizeof(err));
  setenv("MOECCL_TOPO_FILE", path, 1);
  CHECK(moeccl_topo_configure(&t, 8, ids, err, sizeof(err)) == moecclSuccess, "file: %s", err);
  CHECK(t.nnodes == 2 && t.ngroups == 1 && t.nrails == 5 &&
            t.link[MOECCL_LINK_GROUP].bw_GBps == 42.0 && !strncmp(t.source, "file ", 5),
        "file: %d nodes, %d groups, %d rails, source %s", t.nnodes, t.ngroups, t.nrails, t.source);
  CHECK(!strcmp(t.hw, probe.hw), "file: hw from this host");
  moeccl_topo_free(&t);
  /* A communicator of another size discovers its topology instead. */
  CHECK(moeccl_topo_configure(&t, 6, ids, err, sizeof(err)) == moecclSuccess && t.nranks == 6 &&
            !strcmp(t.source, "discovered"),
        "file for 8 ranks, communicator of 6: %s (%d ranks, source %s)", err, t.nranks, t.source);
  moeccl_topo_free(&t);

  /* TUNE_FILE over a file and over discovered tables; a bad one fails. */
  path_of(tune, sizeof(tune), "configure.tune");
  write_file(tune, "link group bw_GBps=7.5\n");
  setenv("MOECCL_TUNE_FILE", tune, 1);
  CHECK(moeccl_topo_configure(&t, 8, ids, err, sizeof(err)) == moecclSuccess &&
            t.link[MOECCL_LINK_GROUP].bw_GBps == 7.5 && t.nnodes == 2,
        "file + tune: %s", err);
  moeccl_topo_free(&t);
  unsetenv("MOECCL_TOPO_FILE");
  CHECK(moeccl_topo_configure(&t, 8, ids, err, sizeof(err)) == moecclSuccess &&
            t.link[MOECCL_LINK_GROUP].bw_GBps == 7.5 && t.nnodes == 4,
        "ids + tune: %s", err);
  moeccl_topo_free(&t);
  write_file(tune, "link group bw_GBps=-7.5\n");
  CHECK(moeccl_topo_configure(&t, 8, ids, err, sizeof(err)) == moecclInvalidArgument &&
            strstr(err, "MOECCL_TUNE_FILE") && strstr(err, ":1: ") && t.rank_node == NULL,
        "bad tune file: '%s'", err);
  setenv("MOECCL_TOPO_FILE", tune, 1); /* not a topology: no header */
  CHECK(moeccl_topo_configure(&t, 8, ids, err, sizeof(err)) == moecclInvalidArgument,
        "tune file as topology file");
  unset_topo_env();
  moeccl_topo_free(&file_topo);
}

/* ---- examples/topo ----------------------------------------------------------------- */

static void test_examples(void) {
  static const struct {
    const char* file;
    int nranks, nnodes, ngroups, nrails, levels;
  } examples[] = {
      {"2nodes-x-2.topo", 4, 2, 1, 1, 3},
      {"dragonfly-4096.topo", 4096, 1024, 32, 4, 3},
      {"fattree-64x8.topo", 512, 64, 2, 8, 3},
  };
  const char* srcdir = getenv("srcdir");
  char path[1024], err[512];
  for (size_t i = 0; i < sizeof(examples) / sizeof(examples[0]); i++) {
    snprintf(path, sizeof(path), "%s/examples/topo/%s", srcdir ? srcdir : ".", examples[i].file);
    moeccl_topo_t t;
    moecclResult_t res = moeccl_topo_load(&t, path, examples[i].nranks, err, sizeof(err));
    CHECK(res == moecclSuccess, "%s: %s", examples[i].file, err);
    if (res != moecclSuccess) continue;
    check_tables(&t, examples[i].file);
    CHECK(t.nnodes == examples[i].nnodes && t.ngroups == examples[i].ngroups &&
              t.nrails == examples[i].nrails && moeccl_topo_regular(&t, examples[i].levels),
          "%s: %d nodes, %d groups, %d rails", examples[i].file, t.nnodes, t.ngroups, t.nrails);
    if (i == 0) { /* it writes out the defaults */
      moeccl_topo_t d;
      moeccl_topo_default_costs(&d);
      CHECK(!memcmp(t.link, d.link, sizeof(t.link)) && t.copy_GBps == d.copy_GBps &&
                t.copy_overhead_us == d.copy_overhead_us,
            "%s: costs differ from the defaults", examples[i].file);
    }
    moeccl_topo_free(&t);
  }
}

/* ---- hwloc ------------------------------------------------------------------------- */

static void test_discover_hw(void) {
  moeccl_topo_t t = {0}, again = {0};
  int nics = moeccl_topo_discover_hw(&t);
  CHECK(nics >= 0 && t.hw[0] != '\0', "discover_hw: %d, '%s'", nics, t.hw);
  CHECK(strstr(t.hw, "NUMA node") != NULL || !strcmp(t.hw, "hwloc not available"), "summary '%s'",
        t.hw);
  CHECK(moeccl_topo_discover_hw(&again) == nics && !strcmp(t.hw, again.hw), "stable");
  CHECK(moeccl_topo_discover_hw(NULL) == nics, "NULL topology");
  printf("hw summary: %s\n", t.hw);
  CHECK(moeccl_topo_dump_hw(stdout, NULL) >= 1, "dump_hw writes details");
  char path[600], err[512];
  path_of(path, sizeof(path), "hw.txt");
  FILE* f = fopen(path, "w");
  CHECK(f && moeccl_topo_dump_hw(f, "") == 0 && moeccl_topo_dump_hw(f, "elsewhere") == 0,
        "dump_hw: nothing for another host");
  if (f) fclose(f);
  /* A dump of this host's topology carries the details and still loads. */
  moeccl_topo_t u;
  moeccl_topo_regular_shape(&u, 2, 2, 0, 1);
  memcpy(u.hw, t.hw, sizeof(u.hw));
  path_of(path, sizeof(path), "hw.topo");
  CHECK(moeccl_topo_dump(&u, path, err, sizeof(err)) == moecclSuccess, "dump: %s", err);
  char* text = read_file(path);
  CHECK(text && strstr(text, "\n# hw ") && strstr(text, "\nhw "), "dump has hw lines");
  free(text);
  moeccl_topo_t v;
  CHECK(moeccl_topo_load(&v, path, 4, err, sizeof(err)) == moecclSuccess, "load: %s", err);
  same_topo(&u, &v, "dump with hw details");
  moeccl_topo_free(&u);
  moeccl_topo_free(&v);
}

static void test_dump_errors(void) {
  char err[512];
  moeccl_topo_t t = {0};
  CHECK(moeccl_topo_dump(&t, "/nonexistent-dir/x.topo", err, sizeof(err)) == moecclInvalidArgument,
        "dump of an empty topology");
  moeccl_topo_regular_shape(&t, 1, 1, 0, 0);
  CHECK(moeccl_topo_dump(&t, "/nonexistent-dir/x.topo", err, sizeof(err)) == moecclSystemError &&
            strstr(err, "/nonexistent-dir/x.topo") != NULL,
        "dump to a missing folder: '%s'", err);
  moeccl_topo_free(&t);
}

/* "test_topo --hw": only this host's hardware, summary then details (for
 * tests/test_topo_hw.sh, which points hwloc at a made-up node). */
/* ---- files that declare huge communicators (issue 25, item 3) -------------------- */

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static long peak_kib(void) {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return ru.ru_maxrss;
}

/* A file declaring 100 million ranks (100,000 nodes x 1,000) cost every
 * rank 1.5 GB and 3.6 s under MOECCL_TOPO_FILE, which loaded it without
 * the communicator's size and only then compared.  It is refused before
 * anything of its size is allocated, with or without a size, and a file
 * of another (allowed) size is not built for a communicator it does not
 * describe.  Runs first, so the peak resident size says what it cost. */
static void test_huge_files(void) {
  char path[600], big[600], err[512];
  path_of(path, sizeof(path), "huge.topo");
  path_of(big, sizeof(big), "max.topo");
  write_file(path, "moeccl-topo 1\nnodes 100000\nranks_per_node 1000\n");
  write_file(big, "moeccl-topo 1\nnodes 1024\nranks_per_node 1024\n"); /* the most allowed */
  moeccl_topo_t t;
  long kib0 = peak_kib();
  double t0 = now_s();
  moecclResult_t res = moeccl_topo_load(&t, path, 0, err, sizeof(err));
  CHECK(res == moecclInvalidArgument && strstr(err, "100000000 ranks") && strstr(err, "1048576") &&
            strstr(err, ":3: "),
        "100M ranks, no size: %d '%s'", (int)res, err);
  res = moeccl_topo_load(&t, path, 8, err, sizeof(err));
  CHECK(res == moecclInvalidArgument && strstr(err, "100000000 ranks"), "100M ranks for 8: %d '%s'",
        (int)res, err);
  unset_topo_env();
  setenv("MOECCL_TOPO_FILE", path, 1);
  uint64_t ids[8] = {1, 1, 2, 2, 3, 3, 4, 4};
  res = moeccl_topo_configure(&t, 8, ids, err, sizeof(err));
  CHECK(res == moecclInvalidArgument && strstr(err, "MOECCL_TOPO_FILE") &&
            strstr(err, "100000000 ranks"),
        "MOECCL_TOPO_FILE of 100M ranks: %d '%s'", (int)res, err);
  /* 2^20 ranks: allowed, but not for 8 ranks: discovered, nothing built */
  setenv("MOECCL_TOPO_FILE", big, 1);
  res = moeccl_topo_configure(&t, 8, ids, err, sizeof(err));
  CHECK(res == moecclSuccess && t.nranks == 8 && t.nnodes == 4 && !strcmp(t.source, "discovered"),
        "MOECCL_TOPO_FILE of 2^20 ranks for 8: %d '%s' (%s)", (int)res, err, t.source);
  if (res == moecclSuccess) moeccl_topo_free(&t);
  unset_topo_env();
  double secs = now_s() - t0;
  long grew = peak_kib() - kib0;
  CHECK(secs < 0.5, "refusing and skipping took %.3f s", secs);
  CHECK(grew < 8 * 1024, "refusing and skipping raised the peak resident size by %ld KiB", grew);
  printf("test_topo: 100M-rank file refused, 2^20-rank file skipped for 8 ranks: %.4f s, peak "
         "+%ld KiB\n",
         secs, grew);
  /* the cap itself loads, and one past it in either statement is refused */
  res = moeccl_topo_load(&t, big, 0, err, sizeof(err));
  CHECK(res == moecclSuccess && t.nranks == MOECCL_TOPO_MAX_RANKS, "2^20 ranks: %d '%s'", (int)res,
        err);
  if (res == moecclSuccess) moeccl_topo_free(&t);
  write_file(path, "moeccl-topo 1\nnodes 1048577\nranks_per_node 1\n");
  CHECK(moeccl_topo_load(&t, path, 0, err, sizeof(err)) == moecclInvalidArgument &&
            strstr(err, ":2: ") && strstr(err, "1048576"),
        "nodes 2^20+1: '%s'", err);
  write_file(path, "moeccl-topo 1\nnodes 2\nranks_per_node 524289\n");
  CHECK(moeccl_topo_load(&t, path, 0, err, sizeof(err)) == moecclInvalidArgument &&
            strstr(err, "1048578 ranks"),
        "2 x (2^19+1): '%s'", err);
  unlink(path);
  unlink(big);
}

static int print_hw(void) {
  moeccl_topo_t t = {0};
  int rails = moeccl_topo_discover_hw(&t);
  printf("rails %d\nsummary %s\n", rails, t.hw);
  moeccl_topo_dump_hw(stdout, NULL);
  return 0;
}

int main(int argc, char** argv) {
  if (argc > 1 && !strcmp(argv[1], "--hw")) return print_hw();
  const char* base = getenv("TMPDIR");
  snprintf(tmpdir, sizeof(tmpdir), "%s/test_topo.XXXXXX", base && *base ? base : "/tmp");
  if (!mkdtemp(tmpdir)) {
    perror("mkdtemp");
    return 1;
  }
  test_huge_files();
  test_from_nodes_interleaved();
  test_from_nodes_irregular();
  test_groups();
  test_placement();
  test_round_trips();
  test_bad_files();
  test_good_file();
  test_tune_file();
  test_configure();
  test_examples();
  test_discover_hw();
  test_dump_errors();
  remove_tmpdir();
  printf("test_topo: %d checks, %d failure(s)\n", checks, failures);
  return failures ? 1 : 0;
}
