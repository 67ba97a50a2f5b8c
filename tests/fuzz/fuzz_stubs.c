/* What the harnesses' sources call outside the few library sources each is
 * built from (scripts/fuzz.sh), so that a harness need not link the whole
 * library (its transports, threads and hwloc).  Only stand-ins belong here:
 * a function the harnesses need as it is goes in a small source file of its
 * own that fuzz.sh compiles (as src/comm/secret.c). */
#include "comm/comm.h"
#include "topo/topo.h"

#include <stdarg.h>
#include <stdio.h>

/* src/comm/error.c records the text for moecclGetLastError; a parser's error
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

/* src/topo/topo_hw.c needs hwloc; a parsed topology's hw line is never this
 * host's summary, for which alone it writes anything. */
int moeccl_topo_dump_hw(FILE* f, const char* summary) { return 0; }
