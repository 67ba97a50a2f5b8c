/* The settings: the table made from param_list.h's rows, their parsing and
 * validation, the values in effect (kept after the first read for ONCE
 * rows), and the environment's log at INFO.  man/moeccl-env.7.md documents
 * the same list; tests/test_param checks it. */
#include "base/param.h"
#include "base/debug.h"

#include <assert.h>
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

static int check_subsys(const char* v, char* why, size_t n);
static int check_log_file(const char* v, char* why, size_t n);
static int check_comm_id(const char* v, char* why, size_t n);
static int check_plugin_path(const char* v, char* why, size_t n);
static int check_ifname(const char* v, char* why, size_t n);
static int check_hostid(const char* v, char* why, size_t n);
static int check_cost_file(const char* v, char* why, size_t n);
static int check_cacheline_multiple(const char* v, char* why, size_t n);

/* The rows of param_list.h, in its order: moeccl_params[id] is id's. */
#define ROW(NAME, name, TYPE, BAD, READ, dflt, lo, hi, choices, check, help)                       \
  {"MOECCL_" #NAME,    MOECCL_PARAM_##TYPE, dflt, help, lo, hi, choices, check,                    \
   MOECCL_PARAM_##BAD, MOECCL_PARAM_##READ},
const moeccl_param_t moeccl_params[MOECCL_NPARAMS] = {MOECCL_PARAM_LIST(ROW)};
#undef ROW
const int moeccl_nparams = MOECCL_NPARAMS;

/* The row of id, or NULL (abort in debug builds) for no row's id. */
static const moeccl_param_t* param_at(moeccl_param_id_t id) {
  if ((unsigned)id < MOECCL_NPARAMS) return &moeccl_params[id];
  assert(!"no MOECCL_ parameter of this id");
  return NULL;
}

static int param_find(const char* name) {
  for (int i = 0; i < moeccl_nparams; i++)
    if (strcmp(moeccl_params[i].name, name) == 0) return i;
  assert(!"unknown MOECCL_ parameter");
  return -1;
}

int moeccl_parse_size(const char* s, size_t* out) {
  if (!s || !isdigit((unsigned char)*s)) return -1;
  errno = 0;
  char* end = NULL;
  unsigned long long v = strtoull(s, &end, 10);
  if (errno) return -1;
  unsigned shift = 0;
  switch (toupper((unsigned char)*end)) {
    case 'K':
      shift = 10;
      end++;
      break;
    case 'M':
      shift = 20;
      end++;
      break;
    case 'G':
      shift = 30;
      end++;
      break;
    default: break;
  }
  /* "KiB" and "KB" after a suffix, "B" after bytes; "1i" or "1BB" is no size */
  if (shift && end[0] == 'i' && end[1] == 'B') end += 2;
  else if (*end == 'B') end++;
  if (*end != '\0' || (shift && v > (SIZE_MAX >> shift))) return -1;
  *out = (size_t)(v << shift);
  return 0;
}

/* Decimal only: "0x10" or "010" must not quietly mean 16 or 8. */
static int parse_int(const char* s, int64_t* out) {
  const char* d = s + (*s == '-' || *s == '+');
  if (!isdigit((unsigned char)*d) || (d[0] == '0' && d[1] != '\0')) return -1;
  errno = 0;
  char* end = NULL;
  long long v = strtoll(s, &end, 10);
  if (errno || end == s || *end != '\0') return -1;
  *out = v;
  return 0;
}

static int parse_bool(const char* s, int64_t* out) {
  if (!strcmp(s, "1") || !strcasecmp(s, "yes") || !strcasecmp(s, "true") || !strcasecmp(s, "on"))
    return *out = 1, 0;
  if (!strcmp(s, "0") || !strcasecmp(s, "no") || !strcasecmp(s, "false") || !strcasecmp(s, "off"))
    return *out = 0, 0;
  return -1;
}

/* Parses s as p's integer-like type and checks its range: 0, or -1 with
 * what is allowed in why. */
static int number_of(const moeccl_param_t* p, const char* s, int64_t* out, char* why, size_t n) {
  int64_t v = 0;
  size_t sz = 0;
  int rc;
  if (p->type == MOECCL_PARAM_BOOL) {
    rc = parse_bool(s, &v);
  } else if (p->type == MOECCL_PARAM_SIZE) {
    rc = moeccl_parse_size(s, &sz);
    v = sz > (size_t)INT64_MAX ? INT64_MAX : (int64_t)sz;
  } else {
    rc = parse_int(s, &v);
  }
  if (rc != 0) {
    snprintf(why, n, "%s",
             p->type == MOECCL_PARAM_BOOL   ? "not 0/1, yes/no, true/false or on/off"
             : p->type == MOECCL_PARAM_SIZE ? "not a size (digits, then K, M or G)"
                                            : "not a decimal integer");
    return -1;
  }
  if ((p->min || p->max) && (v < p->min || v > p->max)) {
    snprintf(why, n, "out of range (%" PRId64 " to %" PRId64 ")", p->min, p->max);
    return -1;
  }
  *out = v;
  return 0;
}

/* Whether s is one of p's choices and passes its check. */
static int string_ok(const moeccl_param_t* p, const char* s, char* why, size_t n) {
  if (p->choices) {
    size_t len = strlen(s);
    for (const char* c = p->choices; *c;) {
      const char* bar = strchr(c, '|');
      size_t clen = bar ? (size_t)(bar - c) : strlen(c);
      if (clen == len && strncasecmp(c, s, len) == 0) goto chosen;
      c += clen + (bar != NULL);
    }
    snprintf(why, n, "not one of %s", p->choices);
    return -1;
  }
chosen:
  return p->check ? p->check(s, why, n) : 0;
}

/* A number of p's type in its range that passes its check (if any). */
static int number_ok(const moeccl_param_t* p, const char* s, int64_t* out, char* why, size_t n) {
  if (number_of(p, s, out, why, n) != 0) return -1;
  return p->check ? p->check(s, why, n) : 0;
}

/* 0 when the environment's value of p (set and non-empty) is valid. */
static int value_ok(const moeccl_param_t* p, const char* s, char* why, size_t n) {
  int64_t v;
  return p->type == MOECCL_PARAM_STR ? string_ok(p, s, why, n) : number_ok(p, s, &v, why, n);
}

/* How much of a bad value a text shows (a 5,000-character one would push
 * the reason out of it). */
#define SHOWN 64

/* A WARN variable's bad value, logged once per process. */
static void warn_once(const moeccl_param_t* p, const char* s, const char* why) {
  static _Atomic unsigned char warned[256];
  int i = (int)(p - moeccl_params);
  if (i >= 0 && i < 256 && warned[i]++) return;
  WARN(ENV, "ignoring %s=%.*s%s: %s; using the default%s%s", p->name, SHOWN, s,
       strlen(s) > SHOWN ? "..." : "", why, p->default_value[0] ? " " : "", p->default_value);
}

int moeccl_param_check_at(moeccl_param_id_t id, char* why, size_t n) {
  const moeccl_param_t* p = param_at(id);
  const char* s = p ? getenv(p->name) : NULL;
  char w[200];
  if (!p || !s || !*s || value_ok(p, s, w, sizeof(w)) == 0) return 0;
  snprintf(why, n, "%s=%.*s%s is %s", p->name, SHOWN, s, strlen(s) > SHOWN ? "..." : "", w);
  return -1;
}

int moeccl_param_validate(char* why, size_t n) {
  for (int i = 0; i < moeccl_nparams; i++) {
    const moeccl_param_t* p = &moeccl_params[i];
    const char* s = getenv(p->name);
    char w[200];
    if (!s || !*s || value_ok(p, s, w, sizeof(w)) == 0) continue;
    if (p->on_bad == MOECCL_PARAM_WARN) {
      warn_once(p, s, w);
      continue;
    }
    snprintf(why, n, "%s=%.*s%s is %s (moeccl-env(7))", p->name, SHOWN, s,
             strlen(s) > SHOWN ? "..." : "", w);
    return -1;
  }
  return 0;
}

/* p's value (env or default) as an integer-like type. */
static int64_t read_number(const moeccl_param_t* p) {
  const char* env = getenv(p->name);
  int64_t v = 0;
  char why[200];
  if (env && *env) {
    if (number_ok(p, env, &v, why, sizeof(why)) == 0) return v;
    if (p->on_bad == MOECCL_PARAM_WARN) warn_once(p, env, why);
  }
  return number_of(p, p->default_value, &v, why, sizeof(why)) == 0 ? v : 0;
}

/* p's value (env or default) as a string: the environment's own text. */
static const char* read_string(const moeccl_param_t* p) {
  const char* env = getenv(p->name);
  char why[200];
  if (env && *env && string_ok(p, env, why, sizeof(why)) == 0) return env;
  if (env && *env && p->on_bad == MOECCL_PARAM_WARN) warn_once(p, env, why);
  return p->default_value;
}

/* The first read of each ONCE row, kept for the process.  No lock: threads
 * that read a row at once compute the same value and store it alike (and a
 * lock held across fork would stop the child); a string is copied, as the
 * environment's text may change or be freed (putenv) under it. */
static struct {
  _Atomic int have_num, have_str;
  _Atomic int64_t num;
  char* _Atomic str;
} kept[MOECCL_NPARAMS];

int64_t moeccl_param_int_at(moeccl_param_id_t id) {
  const moeccl_param_t* p = param_at(id);
  if (!p) return 0;
  if (p->read == MOECCL_PARAM_EACH) return read_number(p);
  if (atomic_load_explicit(&kept[id].have_num, memory_order_acquire)) return kept[id].num;
  int64_t v = read_number(p);
  kept[id].num = v;
  atomic_store_explicit(&kept[id].have_num, 1, memory_order_release);
  return v;
}

size_t moeccl_param_size_at(moeccl_param_id_t id) { return (size_t)moeccl_param_int_at(id); }
int moeccl_param_bool_at(moeccl_param_id_t id) { return moeccl_param_int_at(id) != 0; }

const char* moeccl_param_str_at(moeccl_param_id_t id) {
  const moeccl_param_t* p = param_at(id);
  if (!p) return NULL;
  if (p->read == MOECCL_PARAM_EACH) return read_string(p);
  if (atomic_load_explicit(&kept[id].have_str, memory_order_acquire)) return kept[id].str;
  const char* v = read_string(p);
  char* copy = strdup(v);
  char* none = NULL;
  if (!copy) return v; /* out of memory: this read only, not kept */
  if (!atomic_compare_exchange_strong(&kept[id].str, &none, copy)) free(copy);
  atomic_store_explicit(&kept[id].have_str, 1, memory_order_release);
  return kept[id].str;
}

void moeccl_param_reset(void) {
  for (int i = 0; i < MOECCL_NPARAMS; i++) {
    atomic_store(&kept[i].have_num, 0);
    atomic_store(&kept[i].have_str, 0);
    free(atomic_exchange(&kept[i].str, NULL));
  }
}

int64_t moeccl_param_int(const char* name) {
  int i = param_find(name);
  return i < 0 ? 0 : moeccl_param_int_at((moeccl_param_id_t)i);
}
size_t moeccl_param_size(const char* name) { return (size_t)moeccl_param_int(name); }
int moeccl_param_bool(const char* name) { return moeccl_param_int(name) != 0; }

const char* moeccl_param_str(const char* name) {
  int i = param_find(name);
  return i < 0 ? NULL : moeccl_param_str_at((moeccl_param_id_t)i);
}

int moeccl_param_check(const char* name, char* why, size_t n) {
  int i = param_find(name);
  return i < 0 ? 0 : moeccl_param_check_at((moeccl_param_id_t)i, why, n);
}

/* ---- the checks of string variables --------------------------------------- */

static int check_subsys(const char* v, char* why, size_t n) {
  if (moeccl_debug_subsys_ok(v)) return 0;
  snprintf(why, n, "not a comma list of INIT, BOOT, SHM, COLL, P2P, ALGO, ENV, NET, ALL");
  return -1;
}

/* The log file's directory must exist (the file itself is made). */
static int check_log_file(const char* v, char* why, size_t n) {
  const char* slash = strrchr(v, '/');
  if (!slash || slash == v) return 0;
  char dir[512];
  snprintf(dir, sizeof(dir), "%.*s", (int)(slash - v), v);
  struct stat st;
  if (strchr(dir, '%') || (stat(dir, &st) == 0 && S_ISDIR(st.st_mode))) return 0;
  snprintf(why, n, "in a directory that does not exist (logging to stderr)");
  return -1;
}

/* host:port, the port 1 to 65535. */
static int check_comm_id(const char* v, char* why, size_t n) {
  const char* colon = strrchr(v, ':');
  char* end = NULL;
  long port = colon ? strtol(colon + 1, &end, 10) : -1;
  if (colon && colon != v && end && end != colon + 1 && *end == '\0' && port >= 1 && port <= 65535)
    return 0;
  snprintf(why, n, "not host:port with a port from 1 to 65535");
  return -1;
}

/* Absolute directories only: a relative one would depend on the working
 * directory at the moment the module is first needed.  A list none of whose
 * directories exists is a typo or a missing mount, not a choice. */
static int check_plugin_path(const char* v, char* why, size_t n) {
  int exists = 0;
  for (const char* p = v; *p;) {
    size_t len = strcspn(p, ":");
    if (len && *p != '/') {
      snprintf(why, n, "not a colon list of absolute directories");
      return -1;
    }
    char dir[4096];
    struct stat st;
    if (len && len < sizeof(dir)) {
      snprintf(dir, sizeof(dir), "%.*s", (int)len, p);
      exists |= stat(dir, &st) == 0 && S_ISDIR(st.st_mode);
    }
    p += len + (p[len] == ':');
  }
  if (exists) return 0;
  snprintf(why, n, "naming no directory that exists");
  return -1;
}

/* "eth,ib", "^docker,lo", "=eth0": some name must follow the ^ and =, and
 * the whole fits the matcher's buffer (socket.c). */
static int check_ifname(const char* v, char* why, size_t n) {
  const char* names = v + (v[0] == '^');
  names += names[0] == '=';
  if (strlen(v) > 255) {
    snprintf(why, n, "longer than 255 characters");
    return -1;
  }
  if (strspn(names, ",") == strlen(names)) {
    snprintf(why, n, "an empty list (name interfaces after ^ or =)");
    return -1;
  }
  return 0;
}

/* A node id is a name, as a hostname is: at most 255 characters. */
static int check_hostid(const char* v, char* why, size_t n) {
  if (strlen(v) <= 255) return 0;
  snprintf(why, n, "%zu characters long (at most 255)", strlen(v));
  return -1;
}

/* A cost file the loader can read: a regular file with something in it
 * (/dev/null or an empty file would quietly mean "no costs"). */
static int check_cost_file(const char* v, char* why, size_t n) {
  struct stat st;
  if (stat(v, &st) != 0) snprintf(why, n, "not readable (%s)", strerror(errno));
  else if (!S_ISREG(st.st_mode)) snprintf(why, n, "not a regular file");
  else if (st.st_size == 0) snprintf(why, n, "an empty file");
  else return 0;
  return -1;
}

/* Reducing receives consume whole elements of up to 64 bytes a chunk. */
static int check_cacheline_multiple(const char* v, char* why, size_t n) {
  size_t sz = 0;
  if (moeccl_parse_size(v, &sz) == 0 && sz % 64 == 0) return 0;
  snprintf(why, n, "not a multiple of 64");
  return -1;
}

void moeccl_param_log_all(void) {
  for (int i = 0; i < moeccl_nparams; i++) {
    const char* env = getenv(moeccl_params[i].name);
    const char* v = env && *env ? env : moeccl_params[i].default_value;
    moeccl_log(MOECCL_LOG_INFO, MOECCL_SUBSYS_ENV, __FILE__, __LINE__, "%s=%s (%s)",
               moeccl_params[i].name, v, env && *env ? "environment" : "default");
  }
}

static void log_all_if_asked(void) {
  if (MOECCL_LOG_ENABLED(MOECCL_LOG_INFO, MOECCL_SUBSYS_ENV)) moeccl_param_log_all();
}

/* Logging starts first (debug.c reads its own variables, so that it needs
 * nothing of this file); the variables' log follows it, as its second part. */
void moeccl_param_init(void) {
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  moeccl_debug_init();
  pthread_once(&once, log_all_if_asked);
}
