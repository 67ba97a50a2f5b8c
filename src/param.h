/* Every MOECCL_* environment variable is declared once, in param.c's table. */
#ifndef MOECCL_PARAM_H_
#define MOECCL_PARAM_H_

#include <stddef.h>
#include <stdint.h>

typedef enum {
  MOECCL_PARAM_INT,
  MOECCL_PARAM_SIZE,
  MOECCL_PARAM_BOOL,
  MOECCL_PARAM_STR
} moeccl_param_type_t;

typedef struct {
  const char* name;
  moeccl_param_type_t type;
  const char* default_value;
  const char* help;
} moeccl_param_t;

/* The table and its length (for the env man page test and moeccl_param_log_all). */
extern const moeccl_param_t moeccl_params[];
extern const int moeccl_nparams;

/* Values in effect: the environment's when it parses, else the default.  A
 * malformed value is logged once and the default is used.  Names not in the
 * table are a programming error (abort in debug builds, default 0/NULL). */
int64_t moeccl_param_int(const char* name);
size_t moeccl_param_size(const char* name); /* accepts K, M, G suffixes */
int moeccl_param_bool(const char* name);
const char* moeccl_param_str(const char* name); /* NULL or "" when unset without default */

/* MOECCL_TIMEOUT in seconds; a value <= 0 means the default (300), so that
 * every wait in the library uses the same positive deadline. */
double moeccl_param_timeout(void);
/* Parses "123", "4K", "16M", "1G" into *out; 0 on success, -1 on error. */
int moeccl_parse_size(const char* s, size_t* out);
/* Prints every variable with its value and origin at INFO. */
void moeccl_param_log_all(void);

#endif
