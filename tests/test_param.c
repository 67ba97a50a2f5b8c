/*
 * Unit test of the configuration table: size parsing, typed reads from the
 * environment with fallback to defaults, and that man/moeccl-env.7.md
 * documents exactly the variables declared in src/param.c (line starts
 * "**MOECCL_NAME**=").
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "param.h"

static int failures;
#define EXPECT(cond, ...)                                         \
  do {                                                            \
    if (!(cond)) {                                                \
      fprintf(stderr, "%s:%d: ", __FILE__, __LINE__);             \
      fprintf(stderr, __VA_ARGS__);                               \
      fprintf(stderr, "\n");                                      \
      failures++;                                                 \
    }                                                             \
  } while (0)

static void test_parse_size(void) {
  static const struct {
    const char* s;
    int ok;
    size_t v;
  } cases[] = {{"0", 1, 0},          {"123", 1, 123},     {"4K", 1, 4096},   {"4k", 1, 4096},
               {"16M", 1, 16 << 20}, {"1G", 1, 1 << 30},  {"2KiB", 1, 2048}, {"3MB", 1, 3 << 20},
               {"", 0, 0},           {"abc", 0, 0},       {"-1", 0, 0},      {"12Q", 0, 0},
               {"1K2", 0, 0},        {"99999999999999999999", 0, 0}};
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    size_t v = 12345;
    int rc = moeccl_parse_size(cases[i].s, &v);
    EXPECT((rc == 0) == cases[i].ok, "parse_size(\"%s\") returned %d", cases[i].s, rc);
    if (cases[i].ok) EXPECT(v == cases[i].v, "parse_size(\"%s\") = %zu, expected %zu", cases[i].s, v, cases[i].v);
  }
}

static void test_env_values(void) {
  unsetenv("MOECCL_TIMEOUT");
  EXPECT(moeccl_param_int("MOECCL_TIMEOUT") == 300, "default MOECCL_TIMEOUT");
  setenv("MOECCL_TIMEOUT", "17", 1);
  EXPECT(moeccl_param_int("MOECCL_TIMEOUT") == 17, "MOECCL_TIMEOUT=17");
  setenv("MOECCL_TIMEOUT", "soon", 1);
  EXPECT(moeccl_param_int("MOECCL_TIMEOUT") == 300, "a malformed value falls back to the default");
  setenv("MOECCL_SHM_CHUNK_SIZE", "2M", 1);
  EXPECT(moeccl_param_size("MOECCL_SHM_CHUNK_SIZE") == 2u << 20, "MOECCL_SHM_CHUNK_SIZE=2M");
  setenv("MOECCL_CMA_DISABLE", "yes", 1);
  EXPECT(moeccl_param_bool("MOECCL_CMA_DISABLE") == 1, "MOECCL_CMA_DISABLE=yes");
  setenv("MOECCL_CMA_DISABLE", "off", 1);
  EXPECT(moeccl_param_bool("MOECCL_CMA_DISABLE") == 0, "MOECCL_CMA_DISABLE=off");
  setenv("MOECCL_ALGO", "pairwise", 1);
  EXPECT(strcmp(moeccl_param_str("MOECCL_ALGO"), "pairwise") == 0, "MOECCL_ALGO string");
  unsetenv("MOECCL_TIMEOUT"), unsetenv("MOECCL_SHM_CHUNK_SIZE"), unsetenv("MOECCL_CMA_DISABLE");
  unsetenv("MOECCL_ALGO");
}

/* Every table entry is documented, and every documented entry is in the table. */
static void test_man_page(void) {
  const char* srcdir = getenv("srcdir");
  char path[1024];
  snprintf(path, sizeof(path), "%s/man/moeccl-env.7.md", srcdir ? srcdir : ".");
  FILE* f = fopen(path, "r");
  EXPECT(f != NULL, "cannot open %s", path);
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
    EXPECT(found, "%s documents %s, which src/param.c does not declare", path, name);
  }
  fclose(f);
  for (int i = 0; i < moeccl_nparams; i++)
    EXPECT(seen[i] == 1, "%s is documented %d times in %s (expected once)", moeccl_params[i].name, seen[i], path);
  free(seen);
}

int main(void) {
  test_parse_size();
  test_env_values();
  test_man_page();
  printf("test_param: %d failure(s)\n", failures);
  return failures ? 1 : 0;
}
