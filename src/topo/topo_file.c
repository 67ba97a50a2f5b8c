/* Topology files (format in topo.h, rules in docs/TOPOLOGY.md): strict
 * parsing into a topology or over its costs, and writing one back.  A file
 * is parsed whole into a parse_t first, so that statements may come in any
 * order after the header and every check can name the line at fault. */
#include "topo/topo.h"

#include <errno.h>
#include <locale.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_RANKS MOECCL_TOPO_MAX_RANKS /* what a file may declare (topo.h) */
#define MAX_RAILS 64        /* as MOECCL_TOPO_RAILS (param.c) */
#define MAX_WORDS 8         /* "link CLASS" and three keys, with room to spare */
#define BLANKS " \t\r\n\v\f"

typedef struct {
  int rank, node, line;
} placed_t;

/* What a file says, with the line of each statement (0: absent). */
typedef struct {
  const char* path;
  int line; /* the line being parsed; after the last one, the line count */
  char* err;
  size_t errlen;
  int costs_only; /* MOECCL_TUNE_FILE: header optional, placement ignored */
  int statements; /* statements seen so far */
  int nnodes, nnodes_line;
  int ranks_per_node, ranks_per_node_line;
  int nodes_per_group, nodes_per_group_line;
  int nrails, nrails_line;
  placed_t* placed;
  int nplaced, placed_cap;
  int* other; /* load_for: the size a file of another size declares */
  moeccl_link_t link[MOECCL_LINK_NCLASSES];
  double copy_overhead_us, copy_GBps;
  int copy_given; /* a copy line was read */
  moeccl_topo_device_t dev;
  char hw[sizeof(((moeccl_topo_t*)0)->hw)];
  int hw_line;
} parse_t;

static const char* const class_names[MOECCL_LINK_NCLASSES] = {
    [MOECCL_LINK_NODE] = "node", [MOECCL_LINK_GROUP] = "group", [MOECCL_LINK_GLOBAL] = "global"};

/* Writes "path:line: why" into p->err; returns moecclInvalidArgument. */
static moecclResult_t __attribute__((format(printf, 3, 4)))
fail_at(parse_t* p, int line, const char* fmt, ...) {
  if (p->err && p->errlen) {
    int n = snprintf(p->err, p->errlen, "%s:%d: ", p->path, line);
    if (n >= 0 && (size_t)n < p->errlen) {
      va_list ap;
      va_start(ap, fmt);
      vsnprintf(p->err + n, p->errlen - (size_t)n, fmt, ap);
      va_end(ap);
    }
  }
  return moecclInvalidArgument;
}

static void set_err(char* err, size_t errlen, const char* fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void set_err(char* err, size_t errlen, const char* fmt, ...) {
  if (!err || !errlen) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, errlen, fmt, ap);
  va_end(ap);
}

/* Numbers are read and written in the C locale whatever the application
 * chose, so that "1.5" means one and a half everywhere. */
typedef struct {
  locale_t c, saved;
} c_numeric_t;

static void c_numeric_begin(c_numeric_t* l) {
  l->c = newlocale(LC_NUMERIC_MASK, "C", (locale_t)0);
  l->saved = l->c ? uselocale(l->c) : (locale_t)0;
}

static void c_numeric_end(c_numeric_t* l) {
  if (!l->c) return;
  uselocale(l->saved);
  freelocale(l->c);
}

/* A whole word as a decimal integer in [lo, hi]. */
static int word_to_int(const char* s, long lo, long hi, int* out) {
  errno = 0;
  char* end = NULL;
  long v = strtol(s, &end, 10);
  if (end == s || *end || errno || v < lo || v > hi) return -1;
  *out = (int)v;
  return 0;
}

/* A whole word as a finite number. */
static int word_to_double(const char* s, double* out) {
  char* end = NULL;
  double v = strtod(s, &end);
  if (end == s || *end || !isfinite(v)) return -1;
  *out = v;
  return 0;
}

/* "nodes N", "ranks_per_node L", "nodes_per_group G", "rails K". */
static moecclResult_t parse_count(parse_t* p, char** w, int nw, int lo, int* value, int* line) {
  if (nw != 2) return fail_at(p, p->line, "'%s' takes one number", w[0]);
  if (*line) return fail_at(p, p->line, "second '%s' (first at line %d)", w[0], *line);
  if (word_to_int(w[1], lo, MAX_RANKS, value))
    return fail_at(p, p->line, "bad %s '%s': expected an integer from %d to %d", w[0], w[1], lo,
                   MAX_RANKS);
  *line = p->line;
  return moecclSuccess;
}

/* "rank R node N" */
static moecclResult_t parse_rank(parse_t* p, char** w, int nw) {
  placed_t pl = {0, 0, p->line};
  if (nw != 4 || strcmp(w[2], "node") != 0) return fail_at(p, p->line, "expected 'rank R node N'");
  if (word_to_int(w[1], 0, MAX_RANKS - 1, &pl.rank))
    return fail_at(p, p->line, "bad rank '%s': expected an integer from 0", w[1]);
  if (word_to_int(w[3], 0, MAX_RANKS - 1, &pl.node))
    return fail_at(p, p->line, "bad node '%s': expected an integer from 0", w[3]);
  if (p->nplaced == p->placed_cap) {
    int cap = p->placed_cap ? 2 * p->placed_cap : 64;
    placed_t* grown = cap <= MAX_RANKS ? realloc(p->placed, (size_t)cap * sizeof(*grown)) : NULL;
    if (!grown) {
      fail_at(p, p->line, "too many 'rank' lines (out of memory)");
      return moecclSystemError;
    }
    p->placed = grown;
    p->placed_cap = cap;
  }
  p->placed[p->nplaced++] = pl;
  return moecclSuccess;
}

/* key=value words of a link or copy line over *l; copy has no latency. */
static moecclResult_t parse_costs(parse_t* p, char** w, int nw, int with_latency,
                                  moeccl_link_t* l) {
  static const char* const keys[4] = {"latency_us", "overhead_us", "bw_GBps", "rndv_bytes"};
  double* fields[4] = {&l->latency_us, &l->overhead_us, &l->bw_GBps, &l->rndv_bytes};
  int seen[4] = {0, 0, 0, 0}, nkeys = with_latency ? 4 : 3;
  if (nw == 0) return fail_at(p, p->line, "no costs given (latency_us=, overhead_us=, bw_GBps=)");
  for (int i = 0; i < nw; i++) {
    char* eq = strchr(w[i], '=');
    if (!eq) return fail_at(p, p->line, "expected key=value, got '%s'", w[i]);
    *eq = '\0';
    int k = with_latency ? 0 : 1;
    while (k < nkeys && strcmp(w[i], keys[k]) != 0) k++;
    if (k == nkeys) return fail_at(p, p->line, "unknown key '%s'", w[i]);
    if (seen[k]++) return fail_at(p, p->line, "%s given twice", keys[k]);
    double v;
    if (word_to_double(eq + 1, &v))
      return fail_at(p, p->line, "bad %s '%s': expected a finite number", keys[k], eq + 1);
    if (k == 2 ? v <= 0 : v < 0)
      return fail_at(p, p->line, "%s=%s: must be %s", keys[k], eq + 1,
                     k == 2 ? "greater than 0" : "0 or more");
    *fields[k] = v;
  }
  return moecclSuccess;
}

/* "link CLASS key=value..." */
static moecclResult_t parse_link(parse_t* p, char** w, int nw) {
  if (nw < 2) return fail_at(p, p->line, "expected 'link node|group|global key=value...'");
  int c = MOECCL_LINK_NODE;
  while (c < MOECCL_LINK_NCLASSES && strcmp(w[1], class_names[c]) != 0) c++;
  if (c == MOECCL_LINK_NCLASSES)
    return fail_at(p, p->line, "unknown link class '%s' (node, group or global)", w[1]);
  moeccl_link_t l = p->link[c];
  moecclResult_t res = parse_costs(p, w + 2, nw - 2, 1, &l);
  if (res == moecclSuccess) p->link[c] = l;
  return res;
}

/* "copy overhead_us=O bw_GBps=B" */
static moecclResult_t parse_copy(parse_t* p, char** w, int nw) {
  moeccl_link_t l = {0.0, p->copy_overhead_us, p->copy_GBps, 0.0};
  moecclResult_t res = parse_costs(p, w + 1, nw - 1, 0, &l);
  if (res != moecclSuccess) return res;
  p->copy_overhead_us = l.overhead_us;
  p->copy_GBps = l.bw_GBps;
  p->copy_given = 1;
  return moecclSuccess;
}

/* "device key=value...": bandwidths > 0, latencies >= 0, each key once. */
static moecclResult_t parse_device(parse_t* p, char** w, int nw) {
  static const char* const keys[4] = {"hbm_GBps", "link_GBps", "copy_us", "launch_us"};
  moeccl_topo_device_t d = p->dev;
  double* fields[4] = {&d.hbm_GBps, &d.link_GBps, &d.copy_us, &d.launch_us};
  int seen[4] = {0, 0, 0, 0};
  if (nw < 2)
    return fail_at(p, p->line, "no costs given (hbm_GBps=, link_GBps=, copy_us=, launch_us=)");
  for (int i = 1; i < nw; i++) {
    char* eq = strchr(w[i], '=');
    if (!eq) return fail_at(p, p->line, "expected key=value, got '%s'", w[i]);
    *eq = '\0';
    int k = 0;
    while (k < 4 && strcmp(w[i], keys[k]) != 0) k++;
    if (k == 4) return fail_at(p, p->line, "unknown device key '%s'", w[i]);
    if (seen[k]++) return fail_at(p, p->line, "%s given twice", keys[k]);
    double v;
    if (word_to_double(eq + 1, &v))
      return fail_at(p, p->line, "bad %s '%s': expected a finite number", keys[k], eq + 1);
    if (k < 2 ? v <= 0 : v < 0)
      return fail_at(p, p->line, "%s=%s: must be %s", keys[k], eq + 1,
                     k < 2 ? "greater than 0" : "0 or more");
    *fields[k] = v;
  }
  d.given = 1;
  p->dev = d;
  return moecclSuccess;
}

/* "hw TEXT": the first one is kept (the host that wrote the file). */
static void parse_hw(parse_t* p, char* text) {
  if (p->hw_line) return;
  text += strspn(text, BLANKS);
  size_t n = strlen(text);
  while (n > 0 && strchr(BLANKS, text[n - 1])) n--;
  if (n >= sizeof(p->hw)) n = sizeof(p->hw) - 1;
  memcpy(p->hw, text, n);
  p->hw[n] = '\0';
  p->hw_line = p->line;
}

static moecclResult_t parse_header(parse_t* p, char** w, int nw) {
  if (p->statements > 1) return fail_at(p, p->line, "'moeccl-topo' must be the first statement");
  if (nw != 2 || strcmp(w[1], "1") != 0)
    return fail_at(p, p->line, "unsupported format '%s%s%s' (this library reads version 1)", w[0],
                   nw > 1 ? " " : "", nw > 1 ? w[1] : "");
  return moecclSuccess;
}

/* One statement (comment already stripped, at least one word). */
static moecclResult_t parse_words(parse_t* p, char** w, int nw) {
  const char* s = w[0];
  if (!strcmp(s, "moeccl-topo")) return parse_header(p, w, nw);
  if (p->statements == 1 && !p->costs_only)
    return fail_at(p, p->line, "expected 'moeccl-topo 1' before '%s'", s);
  if (!strcmp(s, "link")) return parse_link(p, w, nw);
  if (!strcmp(s, "copy")) return parse_copy(p, w, nw);
  if (!strcmp(s, "device")) return parse_device(p, w, nw);
  if (!strcmp(s, "nodes")) return parse_count(p, w, nw, 1, &p->nnodes, &p->nnodes_line);
  if (!strcmp(s, "ranks_per_node"))
    return parse_count(p, w, nw, 1, &p->ranks_per_node, &p->ranks_per_node_line);
  if (!strcmp(s, "nodes_per_group"))
    return parse_count(p, w, nw, 0, &p->nodes_per_group, &p->nodes_per_group_line);
  if (!strcmp(s, "rails")) {
    moecclResult_t r = parse_count(p, w, nw, 0, &p->nrails, &p->nrails_line);
    if (r == moecclSuccess && p->nrails > MAX_RAILS)
      return fail_at(p, p->line, "rails %d: at most %d NICs per node", p->nrails, MAX_RAILS);
    return r;
  }
  if (!strcmp(s, "rank")) return parse_rank(p, w, nw);
  return fail_at(p, p->line, "unknown statement '%s'", s);
}

static moecclResult_t parse_line(parse_t* p, char* line) {
  char* hash = strchr(line, '#');
  if (hash) *hash = '\0';
  char* start = line + strspn(line, BLANKS);
  if (!*start) return moecclSuccess;
  p->statements++;
  if (!strncmp(start, "hw", 2) && (start[2] == '\0' || strchr(BLANKS, start[2]))) {
    if (p->statements == 1 && !p->costs_only)
      return fail_at(p, p->line, "expected 'moeccl-topo 1' before 'hw'");
    parse_hw(p, start + 2);
    return moecclSuccess;
  }
  char* w[MAX_WORDS + 1];
  int nw = 0;
  char* save = NULL;
  for (char* tok = strtok_r(start, BLANKS, &save); tok; tok = strtok_r(NULL, BLANKS, &save)) {
    if (nw == MAX_WORDS) return fail_at(p, p->line, "too many words in '%s' statement", w[0]);
    w[nw++] = tok;
  }
  return parse_words(p, w, nw);
}

/* Caps on what a topology or tune file may hold: a line (a statement is
 * a few words) and the whole file (a rank line per rank of a large job
 * fits many times over); /dev/zero or a runaway file stops at the cap. */
#define MAX_LINE 4096
#define MAX_FILE_BYTES (64u << 20)

/* Reads f line by line into p (p->path names it in errors). */
static moecclResult_t parse_stream(parse_t* p, FILE* f) {
  c_numeric_t loc;
  c_numeric_begin(&loc);
  char* line = malloc(MAX_LINE + 2);
  size_t total = 0;
  moecclResult_t res = line ? moecclSuccess : moecclSystemError;
  if (!line) set_err(p->err, p->errlen, "%s: out of memory", p->path);
  /* byte by byte (FILE buffers it): every byte counts toward the caps, NULs too */
  for (int ch = 0; res == moecclSuccess && ch != EOF;) {
    size_t len = 0;
    while ((ch = getc(f)) != EOF && ch != '\n' && ch != '\0' && len <= MAX_LINE)
      line[len++] = (char)ch;
    total += len + (ch != EOF);
    if (len == 0 && ch == EOF) break;
    p->line++;
    if (ch == '\0') {
      res = fail_at(p, p->line, "a NUL byte: not a text file");
    } else if (len > MAX_LINE) {
      res = fail_at(p, p->line, "line longer than %d characters", MAX_LINE);
    } else if (total > MAX_FILE_BYTES) {
      res = fail_at(p, p->line, "file larger than %u MiB", MAX_FILE_BYTES >> 20);
    } else {
      line[len] = '\0';
      res = parse_line(p, line);
    }
  }
  if (res == moecclSuccess && ferror(f)) {
    set_err(p->err, p->errlen, "%s:%d: read error: %s", p->path, p->line + 1, strerror(errno));
    res = moecclSystemError;
  }
  if (res == moecclSuccess && p->statements == 0 && !p->costs_only)
    res = fail_at(p, p->line, "empty file: expected 'moeccl-topo 1'");
  free(line);
  c_numeric_end(&loc);
  return res;
}

/* Parses the file p->path, or the len bytes at text when text is not NULL
 * (the same reader over a memory stream, for tests/fuzz). */
static moecclResult_t parse_source(parse_t* p, const char* text, size_t len) {
  FILE* f = text ? fmemopen((void*)text, len, "r") : fopen(p->path, "r");
  if (!f) {
    set_err(p->err, p->errlen, "%s: cannot open: %s", p->path, strerror(errno));
    return text ? moecclSystemError : moecclInvalidArgument;
  }
  moecclResult_t res = parse_stream(p, f);
  fclose(f);
  return res;
}

/* Checks explicit placement lines and fills rank_node[n] (all -1 on entry). */
static moecclResult_t check_placement(parse_t* p, int n, int nranks, int* rank_node, int* line_of) {
  for (int i = 0; i < p->nplaced; i++) {
    const placed_t* pl = &p->placed[i];
    if (pl->rank >= n)
      return fail_at(p, pl->line, "rank %d out of range: %s %d ranks", pl->rank,
                     nranks > 0 ? "the communicator has" : "the 'rank' lines place", n);
    if (pl->node >= p->nnodes)
      return fail_at(p, pl->line, "node %d out of range: 'nodes %d' (line %d)", pl->node, p->nnodes,
                     p->nnodes_line);
    if (rank_node[pl->rank] >= 0)
      return fail_at(p, pl->line, "rank %d placed twice (first at line %d)", pl->rank,
                     line_of[pl->rank]);
    rank_node[pl->rank] = pl->node;
    line_of[pl->rank] = pl->line;
  }
  int next = 0; /* nodes are numbered in order of their lowest rank */
  for (int r = 0; r < n; r++) {
    if (rank_node[r] < 0) return fail_at(p, p->line, "rank %d is never placed", r);
    if (rank_node[r] > next)
      return fail_at(p, line_of[r],
                     "node %d holds rank %d but node %d holds none below it: "
                     "number nodes in order of their lowest rank",
                     rank_node[r], r, next);
    if (rank_node[r] == next) next++;
  }
  if (next < p->nnodes)
    return fail_at(p, p->nnodes_line, "'nodes %d' but node %d holds no rank", p->nnodes, next);
  return moecclSuccess;
}

/* Fills rank_node[] from "ranks_per_node" or "rank" lines; *n: rank count. */
static moecclResult_t placement(parse_t* p, int nranks, int** rank_node, int* n) {
  if (!p->nnodes_line) return fail_at(p, p->line, "no 'nodes' statement");
  if (p->ranks_per_node_line && p->nplaced)
    return fail_at(p, p->placed[0].line,
                   "'rank' lines and 'ranks_per_node' (line %d) exclude "
                   "each other",
                   p->ranks_per_node_line);
  if (!p->ranks_per_node_line && !p->nplaced)
    return fail_at(p, p->line, "no placement: give 'ranks_per_node L' or 'rank R node N' lines");
  if (p->ranks_per_node_line) {
    int line = p->ranks_per_node_line;
    long long declared = (long long)p->nnodes * p->ranks_per_node;
    if (declared > MAX_RANKS) /* checked before anything of that size is allocated */
      return fail_at(p, line,
                     "nodes %d x ranks_per_node %d is %lld ranks, more than the %d a topology "
                     "file may describe",
                     p->nnodes, p->ranks_per_node, declared, MAX_RANKS);
    if (p->other && declared != nranks) /* another communicator's file: nothing to build */
      return *p->other = (int)declared, moecclSuccess;
    if (nranks > 0 && declared != nranks)
      return fail_at(p, line,
                     "the file describes %lld ranks (%d nodes x %d), the communicator has %d",
                     declared, p->nnodes, p->ranks_per_node, nranks);
    *n = (int)declared;
  } else {
    if (p->other && p->nplaced != nranks) return *p->other = p->nplaced, moecclSuccess;
    *n = nranks > 0 ? nranks : p->nplaced;
  }
  *rank_node = malloc((size_t)*n * sizeof(int));
  int* line_of = malloc((size_t)*n * sizeof(int));
  if (!*rank_node || !line_of) {
    free(line_of);
    set_err(p->err, p->errlen, "%s: out of memory for %d ranks", p->path, *n);
    return moecclSystemError;
  }
  moecclResult_t res = moecclSuccess;
  if (p->ranks_per_node_line) {
    for (int r = 0; r < *n; r++) (*rank_node)[r] = r / p->ranks_per_node;
  } else {
    for (int r = 0; r < *n; r++) (*rank_node)[r] = -1;
    res = check_placement(p, *n, nranks, *rank_node, line_of);
  }
  free(line_of);
  return res;
}

static void parse_init(parse_t* p, const char* path, char* err, size_t errlen) {
  memset(p, 0, sizeof(*p));
  p->path = path;
  p->err = err;
  p->errlen = errlen;
  if (err && errlen) err[0] = '\0';
}

static moecclResult_t load(moeccl_topo_t* t, const char* path, const char* text, size_t len,
                           int nranks, int* other, char* err, size_t errlen) {
  memset(t, 0, sizeof(*t));
  parse_t p;
  parse_init(&p, path, err, errlen);
  if (other) *other = 0;
  p.other = other;
  moeccl_topo_t defaults;
  moeccl_topo_default_costs(&defaults);
  memcpy(p.link, defaults.link, sizeof(p.link));
  p.copy_overhead_us = defaults.copy_overhead_us;
  p.copy_GBps = defaults.copy_GBps;
  p.dev = defaults.dev;
  int* rank_node = NULL;
  int n = 0;
  moecclResult_t res = parse_source(&p, text, len);
  if (res == moecclSuccess) res = placement(&p, nranks, &rank_node, &n);
  if (res == moecclSuccess && other && *other) goto out;
  if (res == moecclSuccess) {
    res = moeccl_topo_from_placement(t, n, p.nnodes, rank_node, p.nodes_per_group, p.nrails);
    if (res != moecclSuccess) set_err(err, errlen, "%s: cannot build the topology", path);
  }
  if (res == moecclSuccess) {
    memcpy(t->link, p.link, sizeof(t->link));
    t->copy_overhead_us = p.copy_overhead_us;
    t->copy_GBps = p.copy_GBps;
    t->copy_given = p.copy_given;
    t->dev = p.dev;
    memcpy(t->hw, p.hw, sizeof(t->hw));
    snprintf(t->source, sizeof(t->source), "file %s", path);
  }
out:
  free(rank_node);
  free(p.placed);
  return res;
}

moecclResult_t moeccl_topo_load(moeccl_topo_t* t, const char* path, int nranks, char* err,
                                size_t errlen) {
  if (!t || !path) return moecclInvalidArgument;
  return load(t, path, NULL, 0, nranks, NULL, err, errlen);
}

moecclResult_t moeccl_topo_load_for(moeccl_topo_t* t, const char* path, int nranks, int* other,
                                    char* err, size_t errlen) {
  if (!t || !path || nranks <= 0 || !other) return moecclInvalidArgument;
  return load(t, path, NULL, 0, nranks, other, err, errlen);
}

moecclResult_t moeccl_topo_parse(moeccl_topo_t* t, const char* name, const char* text, size_t len,
                                 int nranks, char* err, size_t errlen) {
  if (!t || !name || !text) return moecclInvalidArgument;
  return load(t, name, text, len, nranks, NULL, err, errlen);
}

static moecclResult_t load_costs(moeccl_topo_t* t, const char* path, const char* text, size_t len,
                                 char* err, size_t errlen) {
  parse_t p;
  parse_init(&p, path, err, errlen);
  p.costs_only = 1;
  memcpy(p.link, t->link, sizeof(p.link));
  p.copy_overhead_us = t->copy_overhead_us;
  p.copy_GBps = t->copy_GBps;
  p.dev = t->dev;
  moecclResult_t res = parse_source(&p, text, len);
  free(p.placed);
  if (res != moecclSuccess) return res;
  memcpy(t->link, p.link, sizeof(t->link));
  t->copy_overhead_us = p.copy_overhead_us;
  t->copy_GBps = p.copy_GBps;
  t->copy_given |= p.copy_given;
  t->dev = p.dev;
  return moecclSuccess;
}

moecclResult_t moeccl_topo_load_costs(moeccl_topo_t* t, const char* path, char* err,
                                      size_t errlen) {
  if (!t || !path) return moecclInvalidArgument;
  return load_costs(t, path, NULL, 0, err, errlen);
}

moecclResult_t moeccl_topo_parse_costs(moeccl_topo_t* t, const char* name, const char* text,
                                       size_t len, char* err, size_t errlen) {
  if (!t || !name || !text) return moecclInvalidArgument;
  return load_costs(t, name, text, len, err, errlen);
}

/* The shortest decimal form that reads back as exactly v. */
static void put_number(FILE* f, const char* key, double v) {
  char buf[40];
  for (int digits = 6; digits <= 17; digits++) {
    snprintf(buf, sizeof(buf), "%.*g", digits, v);
    if (strtod(buf, NULL) == v) break;
  }
  fprintf(f, " %s=%s", key, buf);
}

static int placed_by_blocks(const moeccl_topo_t* t) {
  if (t->ranks_per_node <= 0) return 0;
  for (int r = 0; r < t->nranks; r++)
    if (t->rank_node[r] != r / t->ranks_per_node) return 0;
  return 1;
}

/* The hw line: one line, no comment sign, trimmed (as parse_hw reads it). */
static void put_hw(FILE* f, const char* hw) {
  char buf[sizeof(((moeccl_topo_t*)0)->hw)];
  snprintf(buf, sizeof(buf), "%s", hw);
  for (char* c = buf; *c; c++)
    if (*c == '#' || *c == '\n' || *c == '\r') *c = ' ';
  char* s = buf + strspn(buf, BLANKS);
  size_t n = strlen(s);
  while (n > 0 && strchr(BLANKS, s[n - 1])) s[--n] = '\0';
  if (n) fprintf(f, "hw %s\n", s);
}

static void put_topo(FILE* f, const moeccl_topo_t* t) {
  fprintf(f, "# moeccl topology: %d ranks on %d nodes in %d group%s (%s)\n", t->nranks, t->nnodes,
          t->ngroups, t->ngroups == 1 ? "" : "s", t->source);
  fprintf(f, "moeccl-topo 1\nnodes %d\n", t->nnodes);
  if (placed_by_blocks(t)) {
    fprintf(f, "ranks_per_node %d\n", t->ranks_per_node);
  } else {
    for (int r = 0; r < t->nranks; r++) fprintf(f, "rank %d node %d\n", r, t->rank_node[r]);
  }
  fprintf(f, "nodes_per_group %d\nrails %d\n", t->nodes_per_group, t->nrails);
  for (int c = MOECCL_LINK_NODE; c < MOECCL_LINK_NCLASSES; c++) {
    fprintf(f, "link %s", class_names[c]);
    put_number(f, "latency_us", t->link[c].latency_us);
    put_number(f, "overhead_us", t->link[c].overhead_us);
    put_number(f, "bw_GBps", t->link[c].bw_GBps);
    if (t->link[c].rndv_bytes > 0) put_number(f, "rndv_bytes", t->link[c].rndv_bytes);
    fputc('\n', f);
  }
  fputs("copy", f);
  put_number(f, "overhead_us", t->copy_overhead_us);
  put_number(f, "bw_GBps", t->copy_GBps);
  fputc('\n', f);
  if (t->dev.given) { /* the defaults stay implicit, as a file that gave none reads */
    fputs("device", f);
    put_number(f, "hbm_GBps", t->dev.hbm_GBps);
    put_number(f, "link_GBps", t->dev.link_GBps);
    put_number(f, "copy_us", t->dev.copy_us);
    put_number(f, "launch_us", t->dev.launch_us);
    fputc('\n', f);
  }
  put_hw(f, t->hw);
}

moecclResult_t moeccl_topo_dump(const moeccl_topo_t* t, const char* path, char* err,
                                size_t errlen) {
  if (err && errlen) err[0] = '\0';
  if (!t || !path || t->nranks <= 0 || t->nnodes <= 0 || !t->rank_node) {
    set_err(err, errlen, "%s: no topology to write", path ? path : "(null)");
    return moecclInvalidArgument;
  }
  FILE* f = fopen(path, "w");
  if (!f) {
    set_err(err, errlen, "%s: cannot create: %s", path, strerror(errno));
    return moecclSystemError;
  }
  c_numeric_t loc;
  c_numeric_begin(&loc);
  put_topo(f, t);
  c_numeric_end(&loc);
  moeccl_topo_dump_hw(f, t->hw);
  int failed = ferror(f);
  if (fclose(f) != 0) failed = 1;
  if (failed) {
    set_err(err, errlen, "%s: write error: %s", path, strerror(errno));
    return moecclSystemError;
  }
  return moecclSuccess;
}
