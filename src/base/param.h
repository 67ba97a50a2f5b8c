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

/* What a bad value does: fail communicator creation with a text naming the
 * variable (the default), or warn once and use the default value. */
typedef enum { MOECCL_PARAM_FAIL = 0, MOECCL_PARAM_WARN = 1 } moeccl_param_bad_t;

typedef struct {
  const char* name;
  moeccl_param_type_t type;
  const char* default_value;
  const char* help;
  /* Validation, where the variable is declared: INT and SIZE values must
   * lie in [min, max] (both 0: any); STR values must be one of choices
   * ('|'-separated, case-insensitive; NULL: any); every value must pass
   * check (NULL: no check; it gets the text, writes why into a buffer of n
   * bytes and returns -1). */
  int64_t min, max;
  const char* choices;
  int (*check)(const char* value, char* why, size_t n);
  moeccl_param_bad_t on_bad;
} moeccl_param_t;

/* The table and its length (for the env man page test and moeccl_param_log_all). */
extern const moeccl_param_t moeccl_params[];
extern const int moeccl_nparams;

/* Every variable set in the environment checked against its declaration:
 * 0, or -1 with the first bad value of a MOECCL_PARAM_FAIL variable
 * described in why (variable, value, what is allowed).  Bad values of
 * MOECCL_PARAM_WARN variables are logged once and their default is used.
 * Communicator creation and moecclGetUniqueId call it. */
int moeccl_param_validate(char* why, size_t n);
/* The same for one variable: -1 with why when its environment value is bad. */
int moeccl_param_check(const char* name, char* why, size_t n);

/* Values in effect: the environment's when it is valid, else the default
 * (a bad value of a MOECCL_PARAM_FAIL variable has already failed
 * creation; read before that, it gives the default too).  Names not in the
 * table are a programming error (abort in debug builds, default 0/NULL). */
int64_t moeccl_param_int(const char* name);
size_t moeccl_param_size(const char* name); /* accepts K, M, G suffixes */
int moeccl_param_bool(const char* name);
const char* moeccl_param_str(const char* name); /* NULL or "" when unset without default */

/* MOECCL_TIMEOUT in seconds (1 or more: the table refuses the rest). */
double moeccl_param_timeout(void);
/* Parses "123", "4K", "16M", "1G" into *out; 0 on success, -1 on error. */
int moeccl_parse_size(const char* s, size_t* out);
/* Prints every variable with its value and origin at INFO. */
void moeccl_param_log_all(void);

#endif
