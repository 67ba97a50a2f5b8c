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

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  int nranks = data[0] < 64 ? 0 : data[0] - 63;
  const char* text = (const char*)data + 1;
  size_t len = size - 1;
  /* With no size asked, "ranks_per_node" may describe up to 2^30 ranks and
   * the loader builds them all (20 bytes a rank): valid, but past the
   * fuzzer's memory limit.  Such files are parsed for a given size. */
  if (nranks == 0 && memmem(text, len, "ranks_per_node", 14)) nranks = 1 + data[0];
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
  fuzz_check_topo(&t);
  FUZZ_ASSERT(nranks == 0 || t.nranks == nranks, "asked %d ranks, got %d", nranks, t.nranks);
  FUZZ_ASSERT(strcmp(t.source, "file fuzz") == 0, "source '%s'", t.source);
  check_round_trip(&t);
  moeccl_topo_free(&t);
  return 0;
}
