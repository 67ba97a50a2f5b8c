/*
 * Unit test of the configuration table: size parsing, typed reads from the
 * environment with fallback to defaults, and that man/moeccl-env.7.md
 * documents exactly the variables declared in src/base/param.c (line starts
 * "**MOECCL_NAME**=").
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "moeccl.h"
#include "base/param.h"
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

static void test_env_values(void) {
  unsetenv("MOECCL_TIMEOUT");
  CHECK(moeccl_param_int("MOECCL_TIMEOUT") == 300, "default MOECCL_TIMEOUT");
  setenv("MOECCL_TIMEOUT", "17", 1);
  CHECK(moeccl_param_int("MOECCL_TIMEOUT") == 17, "MOECCL_TIMEOUT=17");
  setenv("MOECCL_TIMEOUT", "soon", 1);
  CHECK(moeccl_param_int("MOECCL_TIMEOUT") == 300, "a malformed value falls back to the default");
  setenv("MOECCL_SHM_CHUNK_SIZE", "2M", 1);
  CHECK(moeccl_param_size("MOECCL_SHM_CHUNK_SIZE") == 2u << 20, "MOECCL_SHM_CHUNK_SIZE=2M");
  setenv("MOECCL_CMA_DISABLE", "yes", 1);
  CHECK(moeccl_param_bool("MOECCL_CMA_DISABLE") == 1, "MOECCL_CMA_DISABLE=yes");
  setenv("MOECCL_CMA_DISABLE", "off", 1);
  CHECK(moeccl_param_bool("MOECCL_CMA_DISABLE") == 0, "MOECCL_CMA_DISABLE=off");
  setenv("MOECCL_ALGO", "pairwise", 1);
  CHECK(strcmp(moeccl_param_str("MOECCL_ALGO"), "pairwise") == 0, "MOECCL_ALGO string");
  unsetenv("MOECCL_TIMEOUT"), unsetenv("MOECCL_SHM_CHUNK_SIZE"), unsetenv("MOECCL_CMA_DISABLE");
  unsetenv("MOECCL_ALGO");
}

/* One bad value of p: a FAIL variable makes moeccl_param_validate fail
 * with a text naming it and the value; a WARN one passes validation and
 * reads as its default.  Either way the default is what a read gives. */
static void expect_bad(const moeccl_param_t* p, const char* bad) {
  setenv(p->name, bad, 1);
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
    int64_t def = moeccl_param_int(p->name);
    setenv(p->name, bad, 1);
    CHECK(moeccl_param_int(p->name) == def, "%s=%s does not read as its default", p->name, bad);
  }
  unsetenv(p->name);
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

/* Every table entry is documented, and every documented entry is in the table. */
static void test_man_page(void) {
  const char* srcdir = getenv("srcdir");
  char path[1024];
  snprintf(path, sizeof(path), "%s/man/moeccl-env.7.md", srcdir ? srcdir : ".");
  FILE* f = fopen(path, "r");
  CHECK(f != NULL, "cannot open %s", path);
  if (!f) return;
  int* seen = calloc((size_t)moeccl_nparams, sizeof(int));
  char line[1024];
  while (fgets(line, sizeof(line), f)) {
    if (strncmp(line, "**MOECCL_", 9) != 0) continue;
    char* end = strstr(line + 2, "**");
    if (!end) continue;
    *end = '\0';
    const char* name = line + 2;
    int found = 0;
    for (int i = 0; i < moeccl_nparams; i++)
      if (strcmp(moeccl_params[i].name, name) == 0) seen[i]++, found = 1;
    CHECK(found, "%s documents %s, which src/base/param.c does not declare", path, name);
  }
  fclose(f);
  for (int i = 0; i < moeccl_nparams; i++)
    CHECK(seen[i] == 1, "%s is documented %d times in %s (expected once)", moeccl_params[i].name,
          seen[i], path);
  free(seen);
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
  test_man_page();
  test_bad_values();
  test_log_write_fails();
  test_device_cuda_refused();
  printf("test_param: %d failure(s)\n", failures);
  return failures ? 1 : 0;
}
