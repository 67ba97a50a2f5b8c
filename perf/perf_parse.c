/* The command-line number parsers of perf/ (perf_parse.h). */
#include "perf_parse.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

const char* perf_tool_name(const char* argv0) {
  const char* slash = argv0 ? strrchr(argv0, '/') : NULL;
  const char* name = slash ? slash + 1 : argv0 ? argv0 : "";
  return strncmp(name, "lt-", 3) == 0 && name[3] ? name + 3 : name;
}

int perf_parse_size(const char* s, size_t* out) {
  char* end;
  unsigned long long mul = 1;
  errno = 0;
  unsigned long long v = strtoull(s, &end, 10);
  if (errno || end == s || *s == '-') return -1;
  switch (*end) {
    case 'G':
    case 'g': mul <<= 10; /* fall through */
    case 'M':
    case 'm': mul <<= 10; /* fall through */
    case 'K':
    case 'k':
      mul <<= 10;
      end++;
      break;
    default: break;
  }
  if (*end == 'B' || *end == 'b') end++;
  if (*end || v > SIZE_MAX / mul) return -1;
  *out = (size_t)(v * mul);
  return 0;
}

int perf_parse_int(const char* s, int lo, int hi, int* out) {
  char* end;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (errno || end == s || *end || v < lo || v > hi) return -1;
  *out = (int)v;
  return 0;
}

int perf_parse_u64(const char* s, uint64_t* out) {
  char* end;
  errno = 0;
  unsigned long long v = strtoull(s, &end, 0);
  if (errno || end == s || *end) return -1;
  *out = (uint64_t)v;
  return 0;
}
