/* What the harnesses' sources call outside the few library sources each is
 * built from (scripts/fuzz.sh), so that a harness need not link the whole
 * library (its transports, threads and hwloc). */
#include "core.h"
#include "sha256.h"
#include "topo/topo.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* src/error.c records the text for moecclGetLastError; a parser's error
 * return is what the harnesses check, so the text is only formatted (which
 * still runs the format under the sanitizers). */
moecclResult_t moeccl_error(moeccl_comm_t* comm, moecclResult_t err, const char* fmt, ...) {
  char text[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(text, sizeof(text), fmt, ap);
  va_end(ap);
  return err;
}

/* As src/comm.c (bootstrap.c derives the communicator's public tag). */
uint64_t moeccl_secret_tag(const uint8_t secret[MOECCL_SECRET_BYTES]) {
  uint8_t d[32];
  moeccl_sha256_labelled("moeccl-comm", secret, MOECCL_SECRET_BYTES, d);
  uint64_t tag;
  memcpy(&tag, d, sizeof(tag));
  return tag;
}

/* src/topo/topo_hw.c needs hwloc; a parsed topology's hw line is never this
 * host's summary, for which alone it writes anything. */
int moeccl_topo_dump_hw(FILE* f, const char* summary) { return 0; }
