/* Topology files (MOECCL_TOPO_FILE, src/topo/topo_file.c) through
 * moeccl_topo_parse, the loader's own reader over a buffer.  A file that
 * parses must give a topology whose tables agree (topo_check.h) and hold
 * the ranks asked for, and must come back identical through
 * moeccl_topo_dump and moeccl_topo_load (topo.h promises both); a file
 * that does not must leave the topology zeroed and say why, "name:line: ...".
 *
 * Input: one byte choosing the communicator size the file must describe
 * (below 64: 0, any size; else 1 to 192), then the file's bytes. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* memfd_create, memmem */
#endif
#include "fuzz.h"
#include "topo/topo.h"
#include "topo_check.h"

#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static char dump_path[64]; /* a memfd, so no file is left behind */

int LLVMFuzzerInitialize(int* argc, char*** argv) {
  int fd = memfd_create("fuzz_topo_dump", MFD_CLOEXEC);
  if (fd < 0) {
    perror("memfd_create");
    abort();
  }
  snprintf(dump_path, sizeof(dump_path), "/proc/self/fd/%d", fd);
  return 0;
}

/* hw as it reads back from a dump: put_hw writes CR as a blank and trims */
static void hw_normal(const char* in, char* out, size_t n) {
  snprintf(out, n, "%s", in);
  for (char* c = out; *c; c++)
    if (*c == '\r') *c = ' ';
  size_t len = strlen(out);
  while (len > 0 && strchr(" \t\r\n\v\f", out[len - 1])) out[--len] = '\0';
}

static void check_round_trip(const moeccl_topo_t* t) {
  char err[256];
  moecclResult_t rc = moeccl_topo_dump(t, dump_path, err, sizeof(err));
  FUZZ_ASSERT(rc == moecclSuccess, "dump failed: %s", err);
  moeccl_topo_t u;
  rc = moeccl_topo_load(&u, dump_path, t->nranks, err, sizeof(err));
  FUZZ_ASSERT(rc == moecclSuccess, "its dump does not load: %s", err);
  FUZZ_ASSERT(u.nranks == t->nranks && u.nnodes == t->nnodes &&
                  u.nodes_per_group == t->nodes_per_group && u.nrails == t->nrails &&
                  u.ngroups == t->ngroups && u.ranks_per_node == t->ranks_per_node,
              "shape changed through its dump");
  FUZZ_ASSERT(memcmp(u.rank_node, t->rank_node, sizeof(int) * (size_t)t->nranks) == 0,
              "placement changed through its dump");
  FUZZ_ASSERT(fuzz_same_costs(&u, t), "costs changed through its dump");
  char a[sizeof(t->hw)], b[sizeof(t->hw)];
  hw_normal(t->hw, a, sizeof(a));
  hw_normal(u.hw, b, sizeof(b));
  FUZZ_ASSERT(strcmp(a, b) == 0, "hw '%s' reads back as '%s'", a, b);
  moeccl_topo_free(&u);
}

/* The harness's own reading of the size rule (docs/TOPOLOGY.md): the first
 * 'nodes N' and 'ranks_per_node L' statements (first words of a line, before
 * any '#') declare N x L ranks.  -1 when either is absent or not plain
 * decimal digits (then the rule says nothing here). */
static long long declared_ranks(const char* text, size_t len) {
  long long nodes = -1, per = -1;
  for (size_t i = 0; i < len;) {
    size_t end = i;
    while (end < len && text[end] != '\n') end++;
    char line[128];
    size_t n = end - i < sizeof(line) - 1 ? end - i : sizeof(line) - 1;
    memcpy(line, text + i, n);
    line[n] = '\0';
    char* hash = strchr(line, '#');
    if (hash) *hash = '\0';
    char *save = NULL, *w0 = strtok_r(line, " \t\r\v\f", &save);
    char* w1 = w0 ? strtok_r(NULL, " \t\r\v\f", &save) : NULL;
    char* w2 = w1 ? strtok_r(NULL, " \t\r\v\f", &save) : NULL;
    long long* slot = !w0                             ? NULL
                      : !strcmp(w0, "nodes")          ? &nodes
                      : !strcmp(w0, "ranks_per_node") ? &per
                                                      : NULL;
    if (slot && *slot == -1) {
      int digits = w1 && !w2 && end - i < sizeof(line) - 1 && strlen(w1) <= 9 &&
                   strspn(w1, "0123456789") == strlen(w1);
      *slot = digits ? atoll(w1) : -2;
    }
    i = end + 1;
  }
  return nodes >= 0 && per >= 0 ? nodes * per : -1;
}

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  int nranks = data[0] < 64 ? 0 : data[0] - 63;
  const char* text = (const char*)data + 1;
  size_t len = size - 1;
  /* With no size asked a file may describe up to MOECCL_TOPO_MAX_RANKS
   * (2^20) ranks, some 20 MiB to build: within the fuzzer's memory limit,
   * so such files are parsed as MOECCL_TOPO_FILE once did, without one. */
  long long declared = declared_ranks(text, len);
  char err[200];
  moeccl_topo_t t;
  memset(&t, 0x5a, sizeof(t));
  moecclResult_t rc = moeccl_topo_parse(&t, "fuzz", text, len, nranks, err, sizeof(err));
  if (rc != moecclSuccess) {
    FUZZ_ASSERT(rc == moecclInvalidArgument || rc == moecclSystemError, "result %d", rc);
    FUZZ_ASSERT(fuzz_topo_zero(&t), "a failed load left the topology set");
    FUZZ_ASSERT(err[0] != '\0' && memchr(err, '\0', sizeof(err)), "no error text");
    FUZZ_ASSERT(rc != moecclInvalidArgument || strncmp(err, "fuzz:", 5) == 0,
                "the text does not start with the file's name: %s", err);
    /* the parser and moeccl_topo_from_placement must agree on what is valid */
    FUZZ_ASSERT(!strstr(err, "cannot build the topology"), "%s", err);
    return 0;
  }
  /* the size rules: never more than the cap, and 'nodes' x 'ranks_per_node' */
  FUZZ_ASSERT(declared <= MOECCL_TOPO_MAX_RANKS, "a file declaring %lld ranks was accepted",
              declared);
  fuzz_check_topo(&t);
  FUZZ_ASSERT(nranks == 0 || t.nranks == nranks, "asked %d ranks, got %d", nranks, t.nranks);
  FUZZ_ASSERT(declared <= 0 || t.nranks == declared, "declares %lld ranks, got %d", declared,
              t.nranks);
  FUZZ_ASSERT(strcmp(t.source, "file fuzz") == 0, "source '%s'", t.source);
  check_round_trip(&t);
  moeccl_topo_free(&t);
  return 0;
}
