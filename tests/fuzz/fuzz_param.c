/* The environment table (src/base/param.c): values of the MOECCL_* variables
 * set from the input, then moeccl_param_validate, moeccl_param_check and
 * every typed getter.  Their answers are compared with this file's own
 * reading of the rules (man/moeccl-env.7 and the table): decimal integers
 * only, sizes with K/M/G (and KB, KiB), the switches' words, choices
 * case-insensitive, ranges inclusive, a bad value refused (FAIL variables)
 * or read as the default; a getter never returns a value outside its
 * variable's range.  Every variable set is unset again before the next
 * input, and the strings given to putenv are freed then, and the values
 * ONCE rows keep are forgotten (moeccl_param_reset) before each input:
 * nothing carries over (but that a WARN variable's bad value is logged
 * once, and logging is off here).
 *
 * Input: up to 8 records of one byte (the variable: its index in the table,
 * modulo its length) and the value, up to a NUL byte or the end; the last
 * record's byte before its value also sizes the buffer the texts go into,
 * and the input's last byte picks one more variable to read. */
#include "base/debug.h"
#include "fuzz.h"
#include "base/param.h"

#include <ctype.h>
#include <inttypes.h>
#include <string.h>
#include <strings.h>

int LLVMFuzzerInitialize(int* argc, char*** argv) {
  FUZZ_ASSERT(moeccl_nparams <= 256, "%d variables: widen look[]", moeccl_nparams);
  /* Logging reads the environment once; this harness's values must not
   * pick its level or open its MOECCL_DEBUG_FILE. */
  setenv("MOECCL_DEBUG", "NONE", 1);
  moeccl_debug_init();
  for (int i = 0; i < moeccl_nparams; i++) unsetenv(moeccl_params[i].name);
  return 0;
}

/* ---- the rules, read independently of param.c ------------------------------ */

/* [+-]?(0|[1-9][0-9]*) within int64 */
static int ref_int(const char* s, int64_t* out) {
  int neg = *s == '-';
  if (*s == '-' || *s == '+') s++;
  if (!isdigit((unsigned char)*s) || (s[0] == '0' && s[1])) return -1;
  uint64_t v = 0, lim = neg ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX;
  for (; isdigit((unsigned char)*s); s++) {
    unsigned d = (unsigned)(*s - '0');
    if (v > (lim - d) / 10) return -1;
    v = v * 10 + d;
  }
  if (*s) return -1;
  *out = neg ? (int64_t)(0 - v) : (int64_t)v;
  return 0;
}

/* [0-9]+ then nothing, B, or K/M/G (either case) alone or with B or iB */
static int ref_size(const char* s, uint64_t* out) {
  if (!isdigit((unsigned char)*s)) return -1;
  uint64_t v = 0;
  for (; isdigit((unsigned char)*s); s++) {
    unsigned d = (unsigned)(*s - '0');
    if (v > (UINT64_MAX - d) / 10) return -1;
    v = v * 10 + d;
  }
  unsigned shift = 0;
  switch (toupper((unsigned char)*s)) {
    case 'K': shift = 10; break;
    case 'M': shift = 20; break;
    case 'G': shift = 30; break;
  }
  if (shift) {
    s++;
    if (!strcmp(s, "iB")) s += 2;
  }
  if (!strcmp(s, "B")) s++;
  if (*s || v > (SIZE_MAX >> shift)) return -1;
  *out = v << shift;
  return 0;
}

static int ref_bool(const char* s, int64_t* out) {
  static const char* const yes[] = {"yes", "true", "on"};
  static const char* const no[] = {"no", "false", "off"};
  if (!strcmp(s, "1")) return *out = 1, 0;
  if (!strcmp(s, "0")) return *out = 0, 0;
  for (int i = 0; i < 3; i++) {
    if (!strcasecmp(s, yes[i])) return *out = 1, 0;
    if (!strcasecmp(s, no[i])) return *out = 0, 0;
  }
  return -1;
}

/* A number of p's type, in its range: 0 and *out, or -1. */
static int ref_number(const moeccl_param_t* p, const char* s, int64_t* out) {
  int64_t v;
  uint64_t u;
  if (p->type == MOECCL_PARAM_BOOL) {
    if (ref_bool(s, &v)) return -1;
  } else if (p->type == MOECCL_PARAM_SIZE) {
    if (ref_size(s, &u)) return -1;
    v = u > INT64_MAX ? INT64_MAX : (int64_t)u;
  } else if (ref_int(s, &v)) {
    return -1;
  }
  if ((p->min || p->max) && (v < p->min || v > p->max)) return -1;
  *out = v;
  return 0;
}

static int ref_choice(const moeccl_param_t* p, const char* s) {
  char c[128];
  snprintf(c, sizeof(c), "%s", p->choices);
  char* save = NULL;
  for (char* tok = strtok_r(c, "|", &save); tok; tok = strtok_r(NULL, "|", &save))
    if (!strcasecmp(tok, s)) return 1;
  return 0;
}

/* Whether value s of p is valid; -1: not known here. */
static int ref_valid(const moeccl_param_t* p, const char* s) {
  int64_t v;
  if (p->type != MOECCL_PARAM_STR) {
    if (ref_number(p, s, &v) != 0) return 0;
    /* moeccl-env(7): a chunk size is a multiple of 64 (whole cache lines) */
    if (!strcmp(p->name, "MOECCL_SHM_CHUNK_SIZE")) return v % 64 == 0;
    return p->check ? -1 : 1; /* a check not modelled here is not judged */
  }
  if (p->choices && !ref_choice(p, s)) return 0;
  if (!strcmp(p->name, "MOECCL_DEBUG_SUBSYS")) {
    static const char* const names[] = {"INIT", "BOOT", "SHM", "COLL", "P2P",
                                        "ALGO", "ENV",  "NET", "ALL"};
    if (strlen(s) >= 256) return 0;
    char buf[256];
    snprintf(buf, sizeof(buf), "%s", s + (s[0] == '^'));
    int any = 0;
    char* save = NULL;
    for (char* tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save), any = 1) {
      int known = 0;
      for (int i = 0; i < 9; i++) known |= !strcasecmp(tok, names[i]);
      if (!known) return 0;
    }
    return any;
  }
  /* MOECCL_COMM_ID is checked by implication below; the file system
   * decides MOECCL_DEBUG_FILE; a check not modelled here is not judged */
  return p->check ? -1 : 1;
}

/* ---- the harness ----------------------------------------------------------- */

#define MAX_SET 8

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  char* owned[MAX_SET]; /* the putenv strings, freed after unsetenv */
  const char* names[MAX_SET];
  int nset = 0;
  size_t whylen = 400;
  /* Only the variables set, and the one the last byte picks (unset, most
   * often: its default), are read one by one: an unset variable reads the
   * same in every run, and each read looks its name up in the table. */
  unsigned char look[256] = {0};
  moeccl_param_reset();
  if (size > 0) look[data[size - 1] % moeccl_nparams] = 1;
  while (size > 0 && nset < MAX_SET) {
    const moeccl_param_t* p = &moeccl_params[data[0] % moeccl_nparams];
    whylen = 1 + data[0] % 200 * 2;
    const uint8_t* v = data + 1;
    size_t vlen = 0;
    while (vlen < size - 1 && v[vlen]) vlen++;
    size_t used = 1 + vlen + (vlen < size - 1); /* the NUL, when there is one */
    data += used, size -= used;
    size_t nlen = strlen(p->name);
    char* s = malloc(nlen + 1 + vlen + 1);
    if (!s) break;
    memcpy(s, p->name, nlen);
    s[nlen] = '=';
    memcpy(s + nlen + 1, v, vlen);
    s[nlen + 1 + vlen] = '\0';
    putenv(s);
    look[p - moeccl_params] = 1;
    names[nset] = p->name;
    owned[nset++] = s;

    /* the size parser alone, on any text */
    size_t got = 12345;
    uint64_t want = 0;
    const char* val = s + nlen + 1;
    int rc = moeccl_parse_size(val, &got), ref = ref_size(val, &want);
    FUZZ_ASSERT(rc == (ref == 0 ? 0 : -1), "parse_size(\"%s\") = %d, expected %s", val, rc,
                ref == 0 ? "ok" : "refused");
    if (rc == 0) FUZZ_ASSERT(got == want, "parse_size(\"%s\") = %zu, not %" PRIu64, val, got, want);
    else FUZZ_ASSERT(got == 12345, "a refused size wrote its result");
  }

  /* texts go into buffers of exactly whylen bytes: a longer write is ASan's */
  char* why = malloc(whylen);
  if (!why) goto out;
  int first_bad = -1; /* the first FAIL variable whose value is bad */
  for (int i = 0; i < moeccl_nparams; i++) {
    if (!look[i]) continue;
    const moeccl_param_t* p = &moeccl_params[i];
    const char* env = getenv(p->name);
    int set = env && *env;
    int bad = moeccl_param_check(p->name, why, whylen) != 0;
    if (bad) FUZZ_ASSERT(memchr(why, '\0', whylen), "%s: text not terminated", p->name);
    int ref = set ? ref_valid(p, env) : 1;
    if (ref >= 0)
      FUZZ_ASSERT(bad == !ref, "%s=%s: check says %s", p->name, env, bad ? "bad" : "ok");
    if (!strcmp(p->name, "MOECCL_COMM_ID") && set && !bad) {
      const char* colon = strrchr(env, ':');
      long port = colon ? strtol(colon + 1, NULL, 10) : 0;
      FUZZ_ASSERT(colon && colon != env && port >= 1 && port <= 65535, "COMM_ID %s passed", env);
    }
    if (bad && p->on_bad == MOECCL_PARAM_FAIL && first_bad < 0) first_bad = i;

    /* the getters: the environment's value when valid, else the default */
    int64_t def = 0, val = 0;
    if (p->type == MOECCL_PARAM_STR) {
      const char* s = moeccl_param_str(p->name);
      FUZZ_ASSERT(s && !strcmp(s, set && !bad ? env : p->default_value), "%s reads as %s", p->name,
                  s ? s : "NULL");
      continue;
    }
    FUZZ_ASSERT(ref_number(p, p->default_value, &def) == 0, "%s's default %s", p->name,
                p->default_value);
    int64_t want = set && !bad ? (ref_number(p, env, &val), val) : def;
    int64_t got = p->type == MOECCL_PARAM_INT    ? moeccl_param_int(p->name)
                  : p->type == MOECCL_PARAM_SIZE ? (int64_t)moeccl_param_size(p->name)
                                                 : moeccl_param_bool(p->name);
    if (p->type == MOECCL_PARAM_BOOL) want = want != 0;
    FUZZ_ASSERT(got == want, "%s=%s reads as %" PRId64 ", expected %" PRId64, p->name,
                set ? env : "", got, want);
    if (p->min || p->max)
      FUZZ_ASSERT(got >= p->min && got <= p->max, "%s reads as %" PRId64 ", outside its range",
                  p->name, got);
  }
  double timeout = moeccl_param_timeout();
  FUZZ_ASSERT(timeout >= 1 && timeout == (double)moeccl_param_int("MOECCL_TIMEOUT"), "timeout %g",
              timeout);

  int rc = moeccl_param_validate(why, whylen);
  FUZZ_ASSERT(rc == (first_bad >= 0 ? -1 : 0), "validate %d, first bad FAIL variable %s", rc,
              first_bad >= 0 ? moeccl_params[first_bad].name : "none");
  if (rc != 0) {
    const char* name = moeccl_params[first_bad].name;
    size_t n = strlen(name);
    FUZZ_ASSERT(memchr(why, '\0', whylen), "validate's text not terminated");
    if (whylen > n + 1)
      FUZZ_ASSERT(!strncmp(why, name, n) && why[n] == '=', "validate names %.40s, not %s", why,
                  name);
  }
  free(why);
out:
  for (int i = 0; i < nset; i++) unsetenv(names[i]);
  for (int i = 0; i < nset; i++) free(owned[i]);
  return 0;
}
