/* Every MOECCL_* environment variable is declared once, in param_list.h;
 * this header gives each an id and a typed accessor, so that a mistyped
 * name is a compile error: moeccl_param_net_eager_size(), not a string. */
#ifndef MOECCL_PARAM_H_
#define MOECCL_PARAM_H_

#include <stddef.h>
#include <stdint.h>

#include "base/param_list.h"

typedef enum {
  MOECCL_PARAM_INT,
  MOECCL_PARAM_SIZE,
  MOECCL_PARAM_BOOL,
  MOECCL_PARAM_STR
} moeccl_param_type_t;

/* What a bad value does: fail communicator creation with a text naming the
 * variable (the default), or warn once and use the default value. */
typedef enum { MOECCL_PARAM_FAIL = 0, MOECCL_PARAM_WARN = 1 } moeccl_param_bad_t;

/* When the environment is read: once per process, or at every read. */
typedef enum { MOECCL_PARAM_ONCE = 0, MOECCL_PARAM_EACH = 1 } moeccl_param_read_t;

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
  moeccl_param_read_t read;
} moeccl_param_t;

/* One id per row of param_list.h, in its order: MOECCL_P_TIMEOUT, ... */
typedef enum {
#define MOECCL_PARAM_ID_(NAME, ...) MOECCL_P_##NAME,
  MOECCL_PARAM_LIST(MOECCL_PARAM_ID_)
#undef MOECCL_PARAM_ID_
      MOECCL_NPARAMS
} moeccl_param_id_t;

/* The table, indexed by id (for the env man page test and moeccl_param_log_all). */
extern const moeccl_param_t moeccl_params[MOECCL_NPARAMS];
extern const int moeccl_nparams;

/* Every variable set in the environment checked against its declaration:
 * 0, or -1 with the first bad value of a MOECCL_PARAM_FAIL variable
 * described in why (variable, value, what is allowed).  Bad values of
 * MOECCL_PARAM_WARN variables are logged once and their default is used.
 * Communicator creation and moecclGetUniqueId call it. */
int moeccl_param_validate(char* why, size_t n);
/* The same for one variable: -1 with why when its environment value is bad. */
int moeccl_param_check_at(moeccl_param_id_t id, char* why, size_t n);

/* Values in effect: the environment's when it is valid, else the default
 * (a bad value of a MOECCL_PARAM_FAIL variable has already failed
 * creation; read before that, it gives the default too), kept after the
 * first read for ONCE rows.  Code names a variable by its accessor below;
 * these serve tables of ids. */
int64_t moeccl_param_int_at(moeccl_param_id_t id);
size_t moeccl_param_size_at(moeccl_param_id_t id); /* accepts K, M, G suffixes */
int moeccl_param_bool_at(moeccl_param_id_t id);
const char* moeccl_param_str_at(moeccl_param_id_t id); /* "" when unset without default */

/* The typed accessors: int64_t moeccl_param_timeout(void), size_t
 * moeccl_param_net_eager_size(void), int moeccl_param_shm_disable(void),
 * const char* moeccl_param_algo(void), ... */
#define MOECCL_PARAM_CTYPE_INT int64_t
#define MOECCL_PARAM_CTYPE_SIZE size_t
#define MOECCL_PARAM_CTYPE_BOOL int
#define MOECCL_PARAM_CTYPE_STR const char*
#define MOECCL_PARAM_READ_INT moeccl_param_int_at
#define MOECCL_PARAM_READ_SIZE moeccl_param_size_at
#define MOECCL_PARAM_READ_BOOL moeccl_param_bool_at
#define MOECCL_PARAM_READ_STR moeccl_param_str_at
#define MOECCL_PARAM_ACCESSOR_(NAME, name, TYPE, ...)                                              \
  static inline MOECCL_PARAM_CTYPE_##TYPE moeccl_param_##name(void) {                              \
    return MOECCL_PARAM_READ_##TYPE(MOECCL_P_##NAME);                                              \
  }
MOECCL_PARAM_LIST(MOECCL_PARAM_ACCESSOR_)
#undef MOECCL_PARAM_ACCESSOR_

/* By name, for the network modules' host table (net_module.h), tests and
 * the fuzzer, which walk the table; the same values as the accessors.
 * Names not in the table are a programming error (abort in debug builds,
 * default 0/NULL). */
int64_t moeccl_param_int(const char* name);
size_t moeccl_param_size(const char* name);
int moeccl_param_bool(const char* name);
const char* moeccl_param_str(const char* name);
int moeccl_param_check(const char* name, char* why, size_t n);

/* Forgets the values of ONCE rows, so that the next reads see the
 * environment as it is now: for tests that change it between reads (no
 * other thread may be reading; a string read before is freed). */
void moeccl_param_reset(void);

/* Parses "123", "4K", "16M", "1G" into *out; 0 on success, -1 on error. */
int moeccl_parse_size(const char* s, size_t* out);
/* Prints every variable with its value and origin at INFO. */
void moeccl_param_log_all(void);
/* The entry points' first call: starts logging (debug.h) and, at INFO
 * with the ENV subsystem, logs every variable once per process. */
void moeccl_param_init(void);

#endif
