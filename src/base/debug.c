/* Logging.  Lines start "host:pid:tid moeccl LEVEL" so logs of many ranks merge.
 * The bottom of base/: it reads its three variables itself and calls no
 * other file of the library (param.c, which checks them, logs through it). */
#include "base/debug.h"
#include "moeccl.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

int moeccl_log_level = -1;
uint32_t moeccl_log_mask = MOECCL_SUBSYS_ALL;
static FILE* log_file;
static const char* log_pattern; /* MOECCL_DEBUG_FILE, for the text of a failed write */
static char log_host[64];
static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t log_once = PTHREAD_ONCE_INIT;

static const struct {
  const char* name;
  uint32_t bit;
} subsys_names[] = {
    {"INIT", MOECCL_SUBSYS_INIT}, {"BOOT", MOECCL_SUBSYS_BOOT}, {"SHM", MOECCL_SUBSYS_SHM},
    {"COLL", MOECCL_SUBSYS_COLL}, {"P2P", MOECCL_SUBSYS_P2P},   {"ALGO", MOECCL_SUBSYS_ALGO},
    {"ENV", MOECCL_SUBSYS_ENV},   {"NET", MOECCL_SUBSYS_NET},   {"ALL", MOECCL_SUBSYS_ALL},
};

static int parse_level(const char* s) {
  static const char* names[] = {"NONE", "VERSION", "WARN", "INFO", "TRACE"};
  for (int i = 0; i < 5; i++)
    if (strcasecmp(s, names[i]) == 0) return i;
  return MOECCL_LOG_WARN;
}

int moeccl_debug_subsys_ok(const char* s) {
  char buf[256];
  if (strlen(s) >= sizeof(buf)) return 0;
  snprintf(buf, sizeof(buf), "%s", s + (s[0] == '^'));
  char* save = NULL;
  int any = 0;
  for (char* tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save), any = 1) {
    size_t i = 0;
    while (i < sizeof(subsys_names) / sizeof(subsys_names[0]) &&
           strcasecmp(tok, subsys_names[i].name) != 0)
      i++;
    if (i == sizeof(subsys_names) / sizeof(subsys_names[0])) return 0;
  }
  return any;
}

static uint32_t parse_subsys(const char* s) {
  int invert = (s[0] == '^');
  uint32_t mask = 0;
  char buf[256];
  snprintf(buf, sizeof(buf), "%s", s + invert);
  char* save = NULL;
  for (char* tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
    for (size_t i = 0; i < sizeof(subsys_names) / sizeof(subsys_names[0]); i++)
      if (strcasecmp(tok, subsys_names[i].name) == 0) mask |= subsys_names[i].bit;
  }
  return invert ? ~mask : mask;
}

/* Expands %h (host) and %p (pid) in MOECCL_DEBUG_FILE. */
static void open_log_file(const char* pattern) {
  char path[512];
  size_t o = 0;
  for (const char* p = pattern; *p && o + 32 < sizeof(path); p++) {
    if (p[0] == '%' && p[1] == 'h') {
      o += snprintf(path + o, sizeof(path) - o, "%s", log_host), p++;
    } else if (p[0] == '%' && p[1] == 'p') {
      o += snprintf(path + o, sizeof(path) - o, "%d", (int)getpid()), p++;
    } else {
      path[o++] = *p;
    }
  }
  path[o] = '\0';
  log_file = fopen(path, "a");
  if (log_file) setvbuf(log_file, NULL, _IOLBF, 0);
  else
    fprintf(stderr, "moeccl WARN cannot open MOECCL_DEBUG_FILE=%s (%s): logging to stderr\n",
            pattern, strerror(errno));
}

static void debug_init_once(void) {
  gethostname(log_host, sizeof(log_host) - 1);
  char* dot = strchr(log_host, '.');
  if (dot) *dot = '\0';
  /* Read here, not through param.h (which logs with this file): a value
   * the settings table refuses reads as its default there, and here too
   * (an unknown level is WARN, a bad subsystem list leaves ALL). */
  const char* lvl = getenv("MOECCL_DEBUG");
  int level = lvl && *lvl ? parse_level(lvl) : MOECCL_LOG_WARN;
  const char* sub = getenv("MOECCL_DEBUG_SUBSYS");
  if (sub && *sub && moeccl_debug_subsys_ok(sub)) moeccl_log_mask = parse_subsys(sub);
  const char* file = getenv("MOECCL_DEBUG_FILE");
  if (file && *file) open_log_file(file), log_pattern = file;
  if (!log_file) log_file = stderr;
  __atomic_store_n(&moeccl_log_level, level, __ATOMIC_RELEASE);
  if (level == MOECCL_LOG_VERSION || level >= MOECCL_LOG_INFO)
    moeccl_log(MOECCL_LOG_VERSION, MOECCL_SUBSYS_INIT, __FILE__, __LINE__,
               "moeccl version %d.%d.%d", MOECCL_MAJOR, MOECCL_MINOR, MOECCL_PATCH);
}

/* A process that forks while another of its threads writes a log line
 * (the rendezvous root logs dropped connections) would leave the child
 * with log_lock held, and the child's first log line would wait forever:
 * fork waits for the line instead.  (The FILE's own lock is glibc's to
 * reset in the child; the line is written under log_lock, so no log
 * writer holds it at the fork.) */
static void log_prefork(void) { pthread_mutex_lock(&log_lock); }
static void log_postfork(void) { pthread_mutex_unlock(&log_lock); }
static void debug_init_atfork(void) {
  debug_init_once();
  pthread_atfork(log_prefork, log_postfork, log_postfork);
}

void moeccl_debug_init(void) { pthread_once(&log_once, debug_init_atfork); }

void moeccl_log(moeccl_log_level_t level, uint32_t subsys, const char* file, int line,
                const char* fmt, ...) {
  static const char* names[] = {"NONE", "VERSION", "WARN", "INFO", "TRACE"};
  char msg[1024];
  int o = snprintf(msg, sizeof(msg), "%s:%d:%ld moeccl %s ", log_host, (int)getpid(),
                   (long)syscall(SYS_gettid), names[level]);
  if (level == MOECCL_LOG_TRACE) {
    const char* base = strrchr(file, '/');
    o += snprintf(msg + o, sizeof(msg) - o, "%s:%d ", base ? base + 1 : file, line);
  }
  va_list ap;
  va_start(ap, fmt);
  if (o < (int)sizeof(msg)) vsnprintf(msg + o, sizeof(msg) - o, fmt, ap);
  va_end(ap);
  pthread_mutex_lock(&log_lock);
  FILE* f = log_file ? log_file : stderr;
  if ((fprintf(f, "%s\n", msg) < 0 || fflush(f) != 0) && f != stderr) {
    /* A log file that takes no more lines (a full disk, /dev/full): say so
     * once, and log the rest of the process's lines to stderr. */
    int err = errno;
    fprintf(stderr,
            "%s:%d:%ld moeccl WARN writing to MOECCL_DEBUG_FILE=%s failed (%s): logging to "
            "stderr\n%s\n",
            log_host, (int)getpid(), (long)syscall(SYS_gettid), log_pattern ? log_pattern : "?",
            strerror(err), msg);
    fclose(f);
    log_file = stderr;
  }
  pthread_mutex_unlock(&log_lock);
}
