/*
 * perf_parse.h - the command-line number parsers every perf/ tool shares
 * (a2a_perf and the *_perf tools through perf_common, a2a_sim and
 * a2a_dev_perf without MPI).
 */
#ifndef MOECCL_PERF_PARSE_H_
#define MOECCL_PERF_PARSE_H_

#include <stddef.h>
#include <stdint.h>

/* A decimal integer in [lo, hi] into *out: 0, or -1 (out unchanged). */
int perf_parse_int(const char* s, int lo, int hi, int* out);
/* A byte count with an optional K, M or G (binary) and B: 0, or -1. */
int perf_parse_size(const char* s, size_t* out);
/* An unsigned 64-bit number (decimal, 0x hex or 0 octal), as --seed: 0, or -1. */
int perf_parse_u64(const char* s, uint64_t* out);
/* The tool's name for its usage line: argv0's last component without the
 * "lt-" of libtool's wrapper (build/perf/.libs/lt-a2a_perf: "a2a_perf"). */
const char* perf_tool_name(const char* argv0);

#endif
