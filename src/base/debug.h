/* Logging: MOECCL_DEBUG levels, MOECCL_DEBUG_SUBSYS masks, MOECCL_DEBUG_FILE. */
#ifndef MOECCL_DEBUG_H_
#define MOECCL_DEBUG_H_

#include <stdint.h>

typedef enum {
  MOECCL_LOG_NONE = 0,
  MOECCL_LOG_VERSION = 1,
  MOECCL_LOG_WARN = 2,
  MOECCL_LOG_INFO = 3,
  MOECCL_LOG_TRACE = 4
} moeccl_log_level_t;

typedef enum {
  MOECCL_SUBSYS_INIT = 1u << 0,
  MOECCL_SUBSYS_BOOT = 1u << 1,
  MOECCL_SUBSYS_SHM = 1u << 2,
  MOECCL_SUBSYS_COLL = 1u << 3,
  MOECCL_SUBSYS_P2P = 1u << 4,
  MOECCL_SUBSYS_ALGO = 1u << 5,
  MOECCL_SUBSYS_ENV = 1u << 6,
  MOECCL_SUBSYS_NET = 1u << 7,
  MOECCL_SUBSYS_ALL = ~0u
} moeccl_subsys_t;

extern int moeccl_log_level; /* -1 until moeccl_debug_init ran */
extern uint32_t moeccl_log_mask;

void moeccl_debug_init(void);
/* Whether s is a valid MOECCL_DEBUG_SUBSYS value. */
int moeccl_debug_subsys_ok(const char* s);
void moeccl_log(moeccl_log_level_t level, uint32_t subsys, const char* file, int line,
                const char* fmt, ...) __attribute__((format(printf, 5, 6)));

#define MOECCL_LOG_ENABLED(lvl, sys)                                                               \
  ((moeccl_log_level < 0 ? (moeccl_debug_init(), 0) : 0),                                          \
   moeccl_log_level >= (lvl) && (moeccl_log_mask & (sys)))

#define WARN(sys, ...)                                                                             \
  do {                                                                                             \
    if (MOECCL_LOG_ENABLED(MOECCL_LOG_WARN, MOECCL_SUBSYS_##sys))                                  \
      moeccl_log(MOECCL_LOG_WARN, MOECCL_SUBSYS_##sys, __FILE__, __LINE__, __VA_ARGS__);           \
  } while (0)
#define INFO(sys, ...)                                                                             \
  do {                                                                                             \
    if (MOECCL_LOG_ENABLED(MOECCL_LOG_INFO, MOECCL_SUBSYS_##sys))                                  \
      moeccl_log(MOECCL_LOG_INFO, MOECCL_SUBSYS_##sys, __FILE__, __LINE__, __VA_ARGS__);           \
  } while (0)
#define TRACE(sys, ...)                                                                            \
  do {                                                                                             \
    if (MOECCL_LOG_ENABLED(MOECCL_LOG_TRACE, MOECCL_SUBSYS_##sys))                                 \
      moeccl_log(MOECCL_LOG_TRACE, MOECCL_SUBSYS_##sys, __FILE__, __LINE__, __VA_ARGS__);          \
  } while (0)

#endif
