/* Tune files (MOECCL_TUNE_FILE, src/topo/topo_file.c) through
 * moeccl_topo_parse_costs over a topology with the default costs.  A file
 * that parses must leave costs the cost model can use (finite, bandwidths
 * above 0; topo_check.h), the self class and the tables untouched, the
 * same costs that moeccl_topo_parse finds in it when it is also a whole
 * topology file, and the same again through moeccl_topo_dump ("a dumped
 * topology works as a tune file", topo.h); a file that does not must leave
 * the topology unchanged and say why.
 *
 * Input: the file's bytes. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* memfd_create, memmem */
#endif
#include "fuzz.h"
#include "topo/topo.h"
#include "topo_check.h"

#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static char dump_path[64];
static moeccl_topo_t base; /* 2 nodes of 2 ranks, default costs */

int LLVMFuzzerInitialize(int* argc, char*** argv) {
  int fd = memfd_create("fuzz_tune_dump", MFD_CLOEXEC);
  if (fd < 0 || moeccl_topo_regular_shape(&base, 2, 2, 0, 1) != moecclSuccess) {
    perror("fuzz_tune_file: setup");
    abort();
  }
  snprintf(dump_path, sizeof(dump_path), "/proc/self/fd/%d", fd);
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const char* text = (const char*)data;
  moeccl_topo_t t = base, before = base;
  char err[200];
  moecclResult_t rc = moeccl_topo_parse_costs(&t, "tune", text, size, err, sizeof(err));
  FUZZ_ASSERT(t.rank_node == base.rank_node && t.nranks == base.nranks &&
                  memcmp(t.link, base.link, sizeof(t.link[0])) == 0,
              "the tables or the self class changed");
  if (rc != moecclSuccess) {
    FUZZ_ASSERT(rc == moecclInvalidArgument || rc == moecclSystemError, "result %d", rc);
    FUZZ_ASSERT(memcmp(&t, &before, sizeof(t)) == 0, "a failed load changed the topology");
    FUZZ_ASSERT(err[0] != '\0' && memchr(err, '\0', sizeof(err)), "no error text");
    FUZZ_ASSERT(rc != moecclInvalidArgument || strncmp(err, "tune:", 5) == 0, "text: %s", err);
    return 0;
  }
  fuzz_check_costs(&t);

  /* A whole topology file gives the same costs as a tune file; ranks_per_node
   * files are parsed for the size they describe, as fuzz_topo_file does. */
  moeccl_topo_t whole;
  int nranks = memmem(text, size, "ranks_per_node", 14) ? 4 : 0;
  if (moeccl_topo_parse(&whole, "tune", text, size, nranks, err, sizeof(err)) == moecclSuccess) {
    FUZZ_ASSERT(fuzz_same_costs(&whole, &t), "the topology and tune readers differ on costs");
    moeccl_topo_free(&whole);
  }

  rc = moeccl_topo_dump(&t, dump_path, err, sizeof(err));
  FUZZ_ASSERT(rc == moecclSuccess, "dump failed: %s", err);
  moeccl_topo_t u = base;
  rc = moeccl_topo_load_costs(&u, dump_path, err, sizeof(err));
  FUZZ_ASSERT(rc == moecclSuccess, "its dump does not load as a tune file: %s", err);
  FUZZ_ASSERT(fuzz_same_costs(&u, &t), "costs changed through the dump");
  return 0;
}
