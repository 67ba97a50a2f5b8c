/*
 * Unit test of the configuration table: size parsing, typed reads from the
 * environment with fallback to defaults, the accessors' kept values (ONCE
 * rows) and fresh ones (EACH rows), that man/moeccl-env.7.md and the page
 * made from it document exactly the variables declared in
 * src/base/param_list.h (line starts "**MOECCL_NAME**="), and that the
 * algorithm tables (all-to-all, collectives, MoE paths) name exactly the
 * choices of MOECCL_ALGO, MOECCL_<COLL>_ALGO and MOECCL_MOE_ALGO.
 */
#include <ctype.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/wait.h>
#include <unistd.h>

#include "algos/algos.h"
#include "algos/coll_algos.h"
#include "algos/moe_algos.h"
#include "base/param.h"
#include "moeccl.h"
#include "unit_check.h"

static void test_parse_size(void) {
  static const struct {
    const char* s;
    int ok;
    size_t v;
  } cases[] = {{"0", 1, 0},          {"123", 1, 123},
               {"4K", 1, 4096},      {"4k", 1, 4096},
               {"16M", 1, 16 << 20}, {"1G", 1, 1 << 30},
               {"2KiB", 1, 2048},    {"3MB", 1, 3 << 20},
               {"", 0, 0},           {"abc", 0, 0},
               {"-1", 0, 0},         {"12Q", 0, 0},
               {"1K2", 0, 0},        {"99999999999999999999", 0, 0}};
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    size_t v = 12345;
    int rc = moeccl_parse_size(cases[i].s, &v);
    CHECK((rc == 0) == cases[i].ok, "parse_size(\"%s\") returned %d", cases[i].s, rc);
    if (cases[i].ok)
      CHECK(v == cases[i].v, "parse_size(\"%s\") = %zu, expected %zu", cases[i].s, v, cases[i].v);
  }
}

/* setenv, and the values ONCE rows kept forgotten (as a fresh process). */
static void set_env(const char* name, const char* value) {
  setenv(name, value, 1);
  moeccl_param_reset();
}

static void test_env_values(void) {
  unsetenv("MOECCL_TIMEOUT");
  CHECK(moeccl_param_int("MOECCL_TIMEOUT") == 300, "default MOECCL_TIMEOUT");
  set_env("MOECCL_TIMEOUT", "17");
  CHECK(moeccl_param_int("MOECCL_TIMEOUT") == 17, "MOECCL_TIMEOUT=17");
  set_env("MOECCL_TIMEOUT", "soon");
  CHECK(moeccl_param_int("MOECCL_TIMEOUT") == 300, "a malformed value falls back to the default");
  set_env("MOECCL_SHM_CHUNK_SIZE", "2M");
  CHECK(moeccl_param_size("MOECCL_SHM_CHUNK_SIZE") == 2u << 20, "MOECCL_SHM_CHUNK_SIZE=2M");
  set_env("MOECCL_CMA_DISABLE", "yes");
  CHECK(moeccl_param_bool("MOECCL_CMA_DISABLE") == 1, "MOECCL_CMA_DISABLE=yes");
  set_env("MOECCL_CMA_DISABLE", "off");
  CHECK(moeccl_param_bool("MOECCL_CMA_DISABLE") == 0, "MOECCL_CMA_DISABLE=off");
  set_env("MOECCL_ALGO", "pairwise");
  CHECK(strcmp(moeccl_param_str("MOECCL_ALGO"), "pairwise") == 0, "MOECCL_ALGO string");
  unsetenv("MOECCL_TIMEOUT"), unsetenv("MOECCL_SHM_CHUNK_SIZE"), unsetenv("MOECCL_CMA_DISABLE");
  unsetenv("MOECCL_ALGO");
  moeccl_param_reset();
}

/* The typed accessors read what the names read; a ONCE row keeps its first
 * read until moeccl_param_reset, an EACH row follows the environment. */
static void test_accessors(void) {
  set_env("MOECCL_SHM_CHUNK_SIZE", "2M");
  CHECK(moeccl_param_shm_chunk_size() == 2u << 20, "moeccl_param_shm_chunk_size() with 2M");
  CHECK(moeccl_params[MOECCL_P_SHM_CHUNK_SIZE].read == MOECCL_PARAM_ONCE, "SHM_CHUNK_SIZE EACH");
  setenv("MOECCL_SHM_CHUNK_SIZE", "4M", 1);
  CHECK(moeccl_param_shm_chunk_size() == 2u << 20, "a ONCE row read again from the environment");
  CHECK(moeccl_param_size("MOECCL_SHM_CHUNK_SIZE") == 2u << 20, "by name, another value");
  moeccl_param_reset();
  CHECK(moeccl_param_shm_chunk_size() == 4u << 20, "moeccl_param_reset did not forget the value");
  set_env("MOECCL_DEBUG_FILE", "/tmp/a.log");
  const char* file = moeccl_param_debug_file();
  setenv("MOECCL_DEBUG_FILE", "/tmp/b.log", 1);
  CHECK(file && !strcmp(file, "/tmp/a.log") && !strcmp(moeccl_param_debug_file(), "/tmp/a.log"),
        "a ONCE string changed with the environment");
  set_env("MOECCL_TIMEOUT", "17");
  CHECK(moeccl_param_timeout() == 17, "moeccl_param_timeout() with 17");
  setenv("MOECCL_TIMEOUT", "18", 1);
  CHECK(moeccl_param_timeout() == 18, "an EACH row did not follow the environment");
  set_env("MOECCL_ALLREDUCE_ALGO", "ring");
  CHECK(!strcmp(moeccl_param_allreduce_algo(), "ring"), "moeccl_param_allreduce_algo()");
  CHECK(!strcmp(moeccl_param_str_at(MOECCL_P_ALLREDUCE_ALGO), "ring"), "by id");
  CHECK(moeccl_param_shm_disable() == 0 && moeccl_param_net_eager_size() == 65536,
        "the defaults of SHM_DISABLE and NET_EAGER_SIZE");
  unsetenv("MOECCL_SHM_CHUNK_SIZE"), unsetenv("MOECCL_DEBUG_FILE"), unsetenv("MOECCL_TIMEOUT");
  unsetenv("MOECCL_ALLREDUCE_ALGO");
  moeccl_param_reset();
}

/* One bad value of p: a FAIL variable makes moeccl_param_validate fail
 * with a text naming it and the value; a WARN one passes validation and
 * reads as its default.  Either way the default is what a read gives. */
static void expect_bad(const moeccl_param_t* p, const char* bad) {
  set_env(p->name, bad);
  char why[400] = "";
  int rc = moeccl_param_validate(why, sizeof(why));
  if (p->on_bad == MOECCL_PARAM_FAIL) {
    CHECK(rc == -1, "%s=%s passed validation", p->name, bad);
    char start[33]; /* a long value is named by its start */
    snprintf(start, sizeof(start), "%s", bad);
    CHECK(strstr(why, p->name) && strstr(why, start), "%s=%.40s: the text does not name it: %.400s",
          p->name, bad, why);
  } else {
    CHECK(rc == 0, "%s=%s (warn and use the default) failed validation: %s", p->name, bad, why);
  }
  if (p->type == MOECCL_PARAM_STR) {
    const char* v = moeccl_param_str(p->name);
    CHECK(v && strcmp(v, p->default_value) == 0, "%s=%s reads as %s, not its default", p->name, bad,
          v ? v : "NULL");
  } else {
    unsetenv(p->name);
    moeccl_param_reset();
    int64_t def = moeccl_param_int(p->name);
    set_env(p->name, bad);
    CHECK(moeccl_param_int(p->name) == def, "%s=%s does not read as its default", p->name, bad);
  }
  unsetenv(p->name);
  moeccl_param_reset();
}

/* Every variable's bad values (range ends, malformed numbers, hex and
 * octal, values outside its choices, the custom checks), and its default
 * and a good value accepted. */
static void test_bad_values(void) {
  char why[400];
  static char long_hostid[5001];
  memset(long_hostid, 'h', sizeof(long_hostid) - 1);
  CHECK(moeccl_param_validate(why, sizeof(why)) == 0, "the clean environment fails: %s", why);
  for (int i = 0; i < moeccl_nparams; i++) {
    const moeccl_param_t* p = &moeccl_params[i];
    char v[64];
    if (p->default_value[0]) { /* the default itself is valid */
      setenv(p->name, p->default_value, 1);
      CHECK(moeccl_param_validate(why, sizeof(why)) == 0, "%s=%s (its default) fails: %s", p->name,
            p->default_value, why);
      unsetenv(p->name);
    }
    switch (p->type) {
      case MOECCL_PARAM_BOOL:
        expect_bad(p, "2");
        expect_bad(p, "maybe");
        break;
      case MOECCL_PARAM_INT:
      case MOECCL_PARAM_SIZE:
        expect_bad(p, "abc");
        expect_bad(p, p->type == MOECCL_PARAM_INT ? "0x10" : "12Q");
        if (p->type == MOECCL_PARAM_INT) expect_bad(p, "010");
        CHECK(p->min || p->max, "%s has no range", p->name);
        if (p->min > 0 || p->type == MOECCL_PARAM_INT) {
          snprintf(v, sizeof(v), "%lld", (long long)p->min - 1);
          expect_bad(p, v);
        }
        snprintf(v, sizeof(v), "%lld", (long long)p->max + 1);
        expect_bad(p, v);
        break;
      case MOECCL_PARAM_STR:
        if (p->choices) expect_bad(p, "bogus");
        break;
    }
  }
  static const struct {
    const char *name, *bad;
  } custom[] = {{"MOECCL_COMM_ID", "127.0.0.1:99999"},
                {"MOECCL_COMM_ID", "127.0.0.1"},
                {"MOECCL_COMM_ID", ":80"},
                {"MOECCL_COMM_ID", "host:0"},
                {"MOECCL_DEBUG_SUBSYS", "INIT,FOO"},
                {"MOECCL_DEBUG_SUBSYS", "^"},
                {"MOECCL_DEBUG_FILE", "/nonexistent/dir/x"},
                /* issue 25: values that were taken silently */
                {"MOECCL_SOCKET_IFNAME", "^"},
                {"MOECCL_SOCKET_IFNAME", "="},
                {"MOECCL_SOCKET_IFNAME", "^=,"},
                {"MOECCL_HOSTID", long_hostid},
                {"MOECCL_TUNE_FILE", "/dev/null"},
                {"MOECCL_TUNE_FILE", "/nonexistent/tune.txt"},
                {"MOECCL_TOPO_GROUP_SIZE", "1000000"},
                {"MOECCL_SHM_CHUNK_SIZE", "4097"},
                {"MOECCL_PLUGIN_PATH", "/nonexistent/a:/nonexistent/b"}};
  for (size_t k = 0; k < sizeof(custom) / sizeof(custom[0]); k++)
    for (int i = 0; i < moeccl_nparams; i++)
      if (strcmp(moeccl_params[i].name, custom[k].name) == 0)
        expect_bad(&moeccl_params[i], custom[k].bad);
  static const struct {
    const char *name, *good;
  } fine[] = {{"MOECCL_COMM_ID", "10.0.0.1:29500"},
              {"MOECCL_DEBUG_SUBSYS", "^SHM,net"},
              {"MOECCL_DEBUG", "info"},
              {"MOECCL_TIMEOUT", "1"},
              {"MOECCL_NET_EAGER_SIZE", "16M"},
              {"MOECCL_DEBUG_FILE", "/tmp/x.%p.log"},
              {"MOECCL_SOCKET_IFNAME", "^docker,lo"},
              {"MOECCL_SOCKET_IFNAME", "=eth0"},
              {"MOECCL_HOSTID", "node7"},
              {"MOECCL_SHM_CHUNK_SIZE", "64K"},
              {"MOECCL_SHM_CHUNK_SIZE", "4160"},
              {"MOECCL_PLUGIN_PATH", "/nonexistent:/tmp"}};
  for (size_t k = 0; k < sizeof(fine) / sizeof(fine[0]); k++) {
    setenv(fine[k].name, fine[k].good, 1);
    CHECK(moeccl_param_validate(why, sizeof(why)) == 0, "%s=%s fails: %s", fine[k].name,
          fine[k].good, why);
    unsetenv(fine[k].name);
  }
}

static int param_index(const char* name, size_t len) {
  for (int i = 0; i < moeccl_nparams; i++)
    if (strlen(moeccl_params[i].name) == len && !strncmp(moeccl_params[i].name, name, len))
      return i;
  return -1;
}

/* Every MOECCL_ name on a line of the page (the man escapes "\_" read as
 * "_"), each counted in seen[] or, when the table has none of that name,
 * reported: the page documents nothing the library does not read. */
static void names_on_line(const char* path, const char* raw, int* seen) {
  char line[1024];
  size_t o = 0;
  for (const char* r = raw; *r && o + 1 < sizeof(line); r++)
    if (!(r[0] == '\\' && r[1] == '_')) line[o++] = *r;
  line[o] = '\0';
  for (const char* m = line; (m = strstr(m, "MOECCL_")) != NULL;) {
    size_t len = strspn(m, "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_");
    if (len > 7 && m[len] != '<' && m[len - 1] != '_') { /* not MOECCL_<COLL>_ALGO */
      int i = param_index(m, len);
      CHECK(i >= 0, "%s names %.*s, which src/base/param_list.h does not declare", path, (int)len,
            m);
      if (i >= 0) seen[i]++;
    }
    m += len;
  }
}

/* choices as the page writes them: `a`|`b` in an entry, "one of a, b" in
 * the list of bad values. */
static void choices_as(const char* choices, const char* lead, const char* open, const char* sep,
                       char* out, size_t n) {
  size_t o = (size_t)snprintf(out, n, "%s%s", lead, open);
  for (const char* c = choices; *c && o < n; c++)
    o += (size_t)(*c == '|' ? snprintf(out + o, n - o, "%s%s%s", open, sep, open)
                            : snprintf(out + o, n - o, "%c", *c));
  if (o < n) snprintf(out + o, n - o, "%s", open);
}

/* An entry, "**MOECCL_X**=values (default: value)": the table's choices
 * and default. */
static void check_entry(const moeccl_param_t* p, const char* line) {
  const char* values = strstr(line, "**=");
  const char* def = strstr(line, "(default: ");
  CHECK(values && def, "the entry of %s is not \"**%s**=... (default: ...)\"", p->name, p->name);
  if (!values || !def) return;
  char want[256], got[256];
  if (p->choices) {
    choices_as(p->choices, "", "`", "|", want, sizeof(want));
    snprintf(got, sizeof(got), "%.*s", (int)(def - values - 4), values + 3);
    CHECK(!strcasecmp(got, want), "%s's entry says =%s, the table %s", p->name, got, want);
  }
  size_t len = strcspn(def + 10, ")");
  snprintf(got, sizeof(got), "%.*s", (int)len, def + 10);
  size_t g = 0; /* without the backquotes */
  for (size_t k = 0; got[k]; k++)
    if (got[k] != '`') got[g++] = got[k];
  got[g] = '\0';
  if (p->default_value[0])
    CHECK(!strcmp(got, p->default_value), "%s: the page's default %s, the table's %s", p->name, got,
          p->default_value);
  else
    CHECK(!strcmp(got, "unset") || !strcmp(got, "standard error"),
          "%s: the page's default %s, the table has none", p->name, got);
}

/* An item of the list of bad values, "- **MOECCL_X**: allowed; a bad
 * value: what it does": the choices, and what a bad value does. */
static void check_bad_row(const moeccl_param_t* p, const char* line) {
  const char* allowed = strstr(line, "**: ");
  const char* effect = allowed ? strstr(allowed + 4, "; a bad value: ") : NULL;
  CHECK(effect != NULL, "the bad-value item of %s is not \"- **%s**: ...; a bad value: ...\"",
        p->name, p->name);
  if (!effect) return;
  effect += 15;
  int fails = !strncmp(effect, "creation fails", 14), warns = !strncmp(effect, "warning", 7);
  CHECK(p->on_bad == MOECCL_PARAM_FAIL ? fails : warns, "%s: the page says a bad value: %.30s",
        p->name, effect);
  if (!p->choices) return;
  char want[256];
  choices_as(p->choices, "one of ", "", ", ", want, sizeof(want));
  CHECK(!strncasecmp(allowed + 4, want, strlen(want)), "%s: the page allows %.60s, not %s", p->name,
        allowed + 4, want);
}

/* The page's text outside <!-- --> comments, line by line: the MOECCL_
 * names it mentions, and (the .md) its entries and bad-value rows, whose
 * first appearances are counted in seen[] and must follow the table. */
static void scan_page(const char* name, int entries, int* seen, int* mentioned) {
  const char* srcdir = getenv("srcdir");
  char path[1024];
  snprintf(path, sizeof(path), "%s/man/%s", srcdir ? srcdir : ".", name);
  FILE* f = fopen(path, "r");
  CHECK(f != NULL, "cannot open %s", path);
  if (!f) return;
  char line[1024];
  int in_comment = 0, last_entry = -1, last_row = -1;
  while (fgets(line, sizeof(line), f)) {
    if (strstr(line, "<!--")) in_comment = 1;
    if (in_comment) {
      in_comment = !strstr(line, "-->");
      continue;
    }
    names_on_line(path, line, mentioned);
    int row = !strncmp(line, "- **MOECCL_", 11);
    if (!entries || (strncmp(line, "**MOECCL_", 9) != 0 && !row)) continue;
    char* start = line + (row ? 4 : 2);
    char* end = strstr(start, "**");
    int i = end ? param_index(start, (size_t)(end - start)) : -1;
    if (i < 0) continue;
    int* last = row ? &last_row : &last_entry;
    CHECK(i > *last, "%s: %s comes after %s (keep the table's order)", path, moeccl_params[i].name,
          *last >= 0 ? moeccl_params[*last].name : "?");
    *last = i;
    if (row) check_bad_row(&moeccl_params[i], line);
    else seen[i]++, check_entry(&moeccl_params[i], line);
  }
  fclose(f);
}

/* Every table entry is documented once, in the table's order, and the page
 * (its source and the page man reads) names no variable the table lacks. */
static void test_man_page(void) {
  int* seen = calloc((size_t)moeccl_nparams, sizeof(int));
  int* md = calloc((size_t)moeccl_nparams, sizeof(int));
  int* page = calloc((size_t)moeccl_nparams, sizeof(int));
  scan_page("moeccl-env.7.md", 1, seen, md);
  scan_page("moeccl-env.7", 0, NULL, page);
  for (int i = 0; i < moeccl_nparams; i++) {
    CHECK(seen[i] == 1, "%s has %d entries in man/moeccl-env.7.md (expected one)",
          moeccl_params[i].name, seen[i]);
    CHECK(page[i] > 0, "%s is not in man/moeccl-env.7 (run man/regen.sh)", moeccl_params[i].name);
  }
  free(seen), free(md), free(page);
}

/* choices ('|'-separated) and names[0..n) hold the same names. */
static void same_names(const char* what, const char* choices, const char* const* names, int n) {
  int found = 0, listed = 0;
  for (const char* c = choices ? choices : ""; *c;) {
    size_t len = strcspn(c, "|");
    int in = 0;
    for (int k = 0; k < n; k++) in |= strlen(names[k]) == len && !strncmp(names[k], c, len);
    CHECK(in, "%s: the choice %.*s is no algorithm's name", what, (int)len, c);
    found += in, listed++;
    c += len + (c[len] == '|');
  }
  CHECK(found == n && listed == n, "%s: %d algorithms, choices \"%s\" name %d of them", what, n,
        choices ? choices : "(none)", found);
}

/* MOECCL_ALGO, MOECCL_<COLL>_ALGO and MOECCL_MOE_ALGO take exactly the
 * names of the algorithm tables: a choice the library cannot run would be
 * accepted and then ignored with a warning; an algorithm missing from the
 * choices could not be forced. */
static void test_algo_choices(void) {
  const char* names[64];
  for (int i = 0; i < MOECCL_A2A_NALGOS; i++) names[i] = moeccl_a2a_algos[i].name;
  same_names("MOECCL_ALGO", moeccl_params[MOECCL_P_ALGO].choices, names, MOECCL_A2A_NALGOS);
  for (int k = 0; k < MOECCL_COLL_NKINDS; k++) {
    char var[64];
    size_t o = (size_t)snprintf(var, sizeof(var), "MOECCL_");
    for (const char* c = moeccl_coll_kind_name((moeccl_coll_kind_t)k); *c && o < 48; c++)
      var[o++] = (char)toupper((unsigned char)*c);
    snprintf(var + o, sizeof(var) - o, "_ALGO");
    int i = param_index(var, strlen(var)), n = 0;
    CHECK(i >= 0, "%s (the collective %s) is not in the table", var,
          moeccl_coll_kind_name((moeccl_coll_kind_t)k));
    if (i < 0) continue;
    for (int a = 0; a < MOECCL_COLL_NALGOS; a++)
      if (moeccl_coll_algos[a].schedule[k]) names[n++] = moeccl_coll_algos[a].name;
    same_names(var, moeccl_params[i].choices, names, n);
  }
  same_names("MOECCL_MOE_ALGO", moeccl_params[MOECCL_P_MOE_ALGO].choices, moeccl_moe_paths,
             MOECCL_MOE_NPATHS);
}

/* Runs this program again as "test_param MODE" (a fresh process: the
 * library reads its log settings once) with stderr into a pipe; returns
 * what it wrote there (at most n - 1 bytes) and its exit code in *code. */
static void in_child(const char* mode, char* out, size_t n, int* code) {
  int fds[2];
  out[0] = '\0', *code = -1;
  /* this program's path: under valgrind /proc/self/exe is the tool, while
   * readlink of it answers the program (valgrind says so) */
  char self[4096];
  ssize_t len = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (len <= 0 || pipe(fds) != 0) return;
  self[len] = '\0';
  fflush(stdout), fflush(stderr);
  pid_t pid = fork();
  if (pid == 0) {
    dup2(fds[1], 2);
    close(fds[0]), close(fds[1]);
    execl(self, "test_param", mode, (char*)NULL);
    _exit(127);
  }
  close(fds[1]);
  size_t got = 0;
  for (ssize_t r; got + 1 < n && (r = read(fds[0], out + got, n - 1 - got)) > 0;) got += (size_t)r;
  out[got] = '\0';
  close(fds[0]);
  int st = 0;
  if (pid > 0 && waitpid(pid, &st, 0) == pid && WIFEXITED(st)) *code = WEXITSTATUS(st);
}

static void log_to_dev_full(void) {
  setenv("MOECCL_DEBUG", "INFO", 1);
  setenv("MOECCL_DEBUG_FILE", "/dev/full", 1);
  moecclUniqueId id;
  _exit(moecclGetUniqueId(&id) == moecclSuccess ? 0 : 3);
}

/* A log file that takes nothing (writes fail, as on a full disk): said once
 * on stderr, and the lines go there instead of nowhere. */
static void test_log_write_fails(void) {
  char out[1 << 16];
  int code;
  in_child("dev-full", out, sizeof(out), &code);
  CHECK(code == 0, "moecclGetUniqueId with MOECCL_DEBUG_FILE=/dev/full exited %d: %s", code, out);
  const char* first = strstr(out, "MOECCL_DEBUG_FILE=/dev/full failed");
  CHECK(first != NULL,
        "MOECCL_DEBUG_FILE=/dev/full: nothing on stderr says the writes fail: \"%s\"", out);
  CHECK(!first || !strstr(first + 1, "MOECCL_DEBUG_FILE=/dev/full failed"),
        "MOECCL_DEBUG_FILE=/dev/full: the failure is said more than once: \"%s\"", out);
  CHECK(strstr(out, "moeccl version") != NULL,
        "MOECCL_DEBUG_FILE=/dev/full: the log lines were lost instead of going to stderr: \"%s\"",
        out);
}

static void init_with_cuda(void) {
  setenv("MOECCL_DEVICE", "cuda", 1);
  moecclUniqueId id;
  moecclResult_t rc = moecclGetUniqueId(&id);
  fprintf(stderr, "result %d: %s\n", (int)rc, moecclGetLastError(NULL));
  _exit(rc == moecclSuccess ? 0 : 4);
}

static void device_auto(void) {
  setenv("MOECCL_DEVICE", "auto", 1);
  moecclUniqueId id;
  _exit(moecclGetUniqueId(&id) == moecclSuccess ? 0 : 4);
}

/* MOECCL_DEVICE=cuda asked for by name on a machine without CUDA (no
 * driver, or a build without it) fails with the reason; auto does not. */
static void test_device_cuda_refused(void) {
  char out[1 << 14];
  int code;
  in_child("device-auto", out, sizeof(out), &code);
  CHECK(code == 0, "MOECCL_DEVICE=auto failed: %s", out);
  void* driver = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
  if (driver) {
    dlclose(driver);
    printf("test_param: a CUDA driver loads here: MOECCL_DEVICE=cuda's refusal not checked\n");
    return;
  }
  in_child("device-cuda", out, sizeof(out), &code);
  CHECK(code == 4, "MOECCL_DEVICE=cuda without a CUDA driver: moecclGetUniqueId succeeded: %s",
        out);
  CHECK(strstr(out, "MOECCL_DEVICE=cuda, but ") != NULL,
        "MOECCL_DEVICE=cuda without a CUDA driver: the error does not say why: %s", out);
}

int main(int argc, char** argv) {
  if (argc > 1 && !strcmp(argv[1], "dev-full")) log_to_dev_full();
  if (argc > 1 && !strcmp(argv[1], "device-auto")) device_auto();
  if (argc > 1 && !strcmp(argv[1], "device-cuda")) init_with_cuda();
  test_parse_size();
  test_env_values();
  test_accessors();
  test_man_page();
  test_algo_choices();
  test_bad_values();
  test_log_write_fails();
  test_device_cuda_refused();
  printf("test_param: %d failure(s)\n", failures);
  return failures ? 1 : 0;
}
