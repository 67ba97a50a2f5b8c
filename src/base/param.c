/* The one table of MOECCL_* variables: name, type, default, one-line help.
 * man/moeccl-env.7.md documents the same list; tests/test_param checks it. */
#include "base/param.h"
#include "base/debug.h"

#include <assert.h>
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
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

const moeccl_param_t moeccl_params[] = {
    {"MOECCL_DEBUG", MOECCL_PARAM_STR, "WARN", "log level: NONE, VERSION, WARN, INFO or TRACE", 0,
     0, "NONE|VERSION|WARN|INFO|TRACE", NULL, MOECCL_PARAM_FAIL},
    {"MOECCL_DEBUG_SUBSYS", MOECCL_PARAM_STR, "ALL",
     "subsystems to log: INIT,BOOT,SHM,COLL,P2P,ALGO,ENV,NET,ALL; a leading ^ inverts", 0, 0, NULL,
     check_subsys, MOECCL_PARAM_FAIL},
    {"MOECCL_DEBUG_FILE", MOECCL_PARAM_STR, "",
     "log to this file instead of stderr; %h host, %p pid", 0, 0, NULL, check_log_file,
     MOECCL_PARAM_WARN},
    {"MOECCL_TIMEOUT", MOECCL_PARAM_INT, "300", "seconds any wait may last before moecclTimeout",
     1LL, 604800LL, NULL, NULL, MOECCL_PARAM_FAIL},
    {"MOECCL_COMM_ID", MOECCL_PARAM_STR, "", "host:port of the root bootstrap socket", 0, 0, NULL,
     check_comm_id, MOECCL_PARAM_FAIL},
    {"MOECCL_SOCKET_IFNAME", MOECCL_PARAM_STR, "",
     "bootstrap interfaces: prefix list, ^ excludes, = exact; unset: loopback only", 0, 0, NULL,
     check_ifname, MOECCL_PARAM_FAIL},
    {"MOECCL_HOSTID", MOECCL_PARAM_STR, "",
     "node identity; ranks with different ids act as separate nodes", 0, 0, NULL, check_hostid,
     MOECCL_PARAM_FAIL},
    {"MOECCL_ALGO", MOECCL_PARAM_STR, "",
     "force the all-to-all algorithm: direct, pairwise, bruck, hier2, hier3 or rail", 0, 0,
     "direct|pairwise|bruck|hier2|hier3|rail", NULL, MOECCL_PARAM_WARN},
    {"MOECCL_ALLREDUCE_ALGO", MOECCL_PARAM_STR, "",
     "force the AllReduce algorithm: ring, rhd, rd, tree, direct or hier", 0, 0,
     "ring|rhd|rd|tree|direct|hier", NULL, MOECCL_PARAM_WARN},
    {"MOECCL_REDUCESCATTER_ALGO", MOECCL_PARAM_STR, "",
     "force the ReduceScatter algorithm: ring, rhd or direct", 0, 0, "ring|rhd|direct", NULL,
     MOECCL_PARAM_WARN},
    {"MOECCL_ALLGATHER_ALGO", MOECCL_PARAM_STR, "",
     "force the AllGather algorithm: ring, rhd or direct", 0, 0, "ring|rhd|direct", NULL,
     MOECCL_PARAM_WARN},
    {"MOECCL_BROADCAST_ALGO", MOECCL_PARAM_STR, "", "force the Broadcast algorithm: tree or direct",
     0, 0, "tree|direct", NULL, MOECCL_PARAM_WARN},
    {"MOECCL_REDUCE_ALGO", MOECCL_PARAM_STR, "", "force the Reduce algorithm: tree or direct", 0, 0,
     "tree|direct", NULL, MOECCL_PARAM_WARN},
    {"MOECCL_GATHER_ALGO", MOECCL_PARAM_STR, "", "force the Gather algorithm: direct", 0, 0,
     "direct", NULL, MOECCL_PARAM_WARN},
    {"MOECCL_SCATTER_ALGO", MOECCL_PARAM_STR, "", "force the Scatter algorithm: direct", 0, 0,
     "direct", NULL, MOECCL_PARAM_WARN},
    {"MOECCL_MOE_ALGO", MOECCL_PARAM_STR, "",
     "force the MoE dispatch/combine path across nodes: flat or hier", 0, 0, "flat|hier", NULL,
     MOECCL_PARAM_WARN},
    {"MOECCL_A2A_WINDOW", MOECCL_PARAM_INT, "64",
     "peers the direct algorithm exchanges with per step (0: all at once)", 0, 1048576LL, NULL,
     NULL, MOECCL_PARAM_FAIL},
    {"MOECCL_TOPO_FILE", MOECCL_PARAM_STR, "",
     "load the topology (nodes, groups, rails, link costs) from this file", 0, 0, NULL, NULL,
     MOECCL_PARAM_FAIL},
    {"MOECCL_TOPO_DUMP_FILE", MOECCL_PARAM_STR, "",
     "rank 0 writes the topology it found to this file", 0, 0, NULL, NULL, MOECCL_PARAM_FAIL},
    {"MOECCL_TOPO_GROUP_SIZE", MOECCL_PARAM_INT, "0",
     "nodes per group (switch or dragonfly group); 0: one group", 0, 65536LL, NULL, NULL,
     MOECCL_PARAM_FAIL},
    {"MOECCL_TOPO_RAILS", MOECCL_PARAM_INT, "0", "NICs (rails) per node; 0: as hwloc finds", 0,
     64LL, NULL, NULL, MOECCL_PARAM_FAIL},
    {"MOECCL_TUNE_V_BYTES", MOECCL_PARAM_SIZE, "65536",
     "per-peer bytes at which the tuner prices alltoallv calls", 1LL, 1099511627776LL, NULL, NULL,
     MOECCL_PARAM_FAIL},
    {"MOECCL_TUNE_FILE", MOECCL_PARAM_STR, "",
     "link and copy costs for the tuner's cost model, over the defaults", 0, 0, NULL,
     check_cost_file, MOECCL_PARAM_FAIL},
    {"MOECCL_NET", MOECCL_PARAM_STR, "auto", "network transport between nodes: ofi, ucx or auto", 0,
     0, "auto|ofi|ucx", NULL, MOECCL_PARAM_FAIL},
    {"MOECCL_PLUGIN_PATH", MOECCL_PARAM_STR, "",
     "directories (colon-separated) searched first for moeccl's modules (moeccl_net_ofi.so, "
     "moeccl_net_ucx.so)",
     0, 0, NULL, check_plugin_path, MOECCL_PARAM_WARN},
    {"MOECCL_SHM_DISABLE", MOECCL_PARAM_BOOL, "0",
     "1: no shared memory; ranks of one node use the network too", 0, 0, NULL, NULL,
     MOECCL_PARAM_FAIL},
    {"MOECCL_OFI_PROVIDER", MOECCL_PARAM_STR, "",
     "libfabric provider to use (e.g. tcp, verbs;ofi_rxm, cxi); unset: the best available", 0, 0,
     NULL, NULL, MOECCL_PARAM_FAIL},
    {"MOECCL_OFI_RMA_DISABLE", MOECCL_PARAM_BOOL, "0",
     "1: large ofi messages go as tagged pieces instead of RMA writes", 0, 0, NULL, NULL,
     MOECCL_PARAM_FAIL},
    {"MOECCL_OFI_WRITEDATA_DISABLE", MOECCL_PARAM_BOOL, "0",
     "1: ofi RMA writes end with a FIN message instead of carrying remote CQ data", 0, 0, NULL,
     NULL, MOECCL_PARAM_FAIL},
    {"MOECCL_NET_NCHANNELS", MOECCL_PARAM_INT, "1", "endpoints (channels) per network peer", 1LL,
     16LL, NULL, NULL, MOECCL_PARAM_FAIL},
    {"MOECCL_NET_EAGER_SIZE", MOECCL_PARAM_SIZE, "65536",
     "network messages up to this size are sent eagerly; larger ones by RMA or rendezvous", 64LL,
     16777216LL, NULL, NULL, MOECCL_PARAM_FAIL},
    {"MOECCL_NET_CHUNK_SIZE", MOECCL_PARAM_SIZE, "1048576",
     "large network messages move in pieces of this size", 4096LL, 1073741824LL, NULL, NULL,
     MOECCL_PARAM_FAIL},
    {"MOECCL_SHM_EAGER_SIZE", MOECCL_PARAM_SIZE, "16384",
     "messages up to this size go through shared-memory slots; larger ones are copied once", 64LL,
     4194304LL, NULL, NULL, MOECCL_PARAM_FAIL},
    {"MOECCL_SHM_MAP_SMALL_DISABLE", MOECCL_PARAM_BOOL, "0",
     "1: messages that fit a slot go through the slots even from moecclMemAlloc memory (by "
     "default those from 4097 bytes are copied once by the receiver)",
     0, 0, NULL, NULL, MOECCL_PARAM_FAIL},
    {"MOECCL_SHM_SLOTS", MOECCL_PARAM_INT, "16",
     "shared-memory slots per ordered pair of local ranks", 2LL, 1024LL, NULL, NULL,
     MOECCL_PARAM_FAIL},
    {"MOECCL_SHM_CHUNK_SIZE", MOECCL_PARAM_SIZE, "1048576",
     "bytes a single-copy transfer moves before the executor looks at other work (a multiple "
     "of 64)",
     4096LL, 1073741824LL, NULL, check_cacheline_multiple, MOECCL_PARAM_FAIL},
    {"MOECCL_CMA_DISABLE", MOECCL_PARAM_BOOL, "0",
     "1: no cross-memory attach; large messages are pipelined through the slots", 0, 0, NULL, NULL,
     MOECCL_PARAM_FAIL},
    {"MOECCL_SHM_MAP_DISABLE", MOECCL_PARAM_BOOL, "0",
     "1: never map peers' moecclMemAlloc memory; read it by cross-memory attach", 0, 0, NULL, NULL,
     MOECCL_PARAM_FAIL},
    {"MOECCL_NT_COPY_SIZE", MOECCL_PARAM_SIZE, "32M",
     "operations receiving at least this many bytes per rank copy with streaming stores (0: "
     "never)",
     0, 1125899906842624LL, NULL, NULL, MOECCL_PARAM_FAIL},
    {"MOECCL_SPIN_COUNT", MOECCL_PARAM_INT, "2000",
     "polls before a waiting rank yields the core; oversubscribed nodes spin less", 0, 100000000LL,
     NULL, NULL, MOECCL_PARAM_FAIL},
    {"MOECCL_DEVICE", MOECCL_PARAM_STR, "auto",
     "device backend: auto (CUDA when a driver and device are found), cuda, emu or none", 0, 0,
     "auto|cuda|emu|none", NULL, MOECCL_PARAM_FAIL},
    {"MOECCL_DEVICE_EMU_DELAY_US", MOECCL_PARAM_INT, "0",
     "emu backend: a random delay of up to this many microseconds before each stream operation", 0,
     1000000LL, NULL, NULL, MOECCL_PARAM_FAIL},
    {"MOECCL_DEVICE_EMU_LEGACY", MOECCL_PARAM_BOOL, "0",
     "emu backend: allocations export only legacy IPC handles, as cudaMalloc memory does", 0, 0,
     NULL, NULL, MOECCL_PARAM_FAIL},
    {"MOECCL_DEVICE_STREAM_DISABLE", MOECCL_PARAM_BOOL, "0",
     "device calls run by the host (a library thread per stream) instead of lowered onto the "
     "caller's stream by the ipc transport",
     0, 0, NULL, NULL, MOECCL_PARAM_FAIL},
    {"MOECCL_NCCL_VERSION", MOECCL_PARAM_INT, "22809",
     "the NCCL drop-in (libnccl.so.2) reports this version code from ncclGetVersion", 1000LL,
     999999LL, NULL, NULL, MOECCL_PARAM_WARN},
};
const int moeccl_nparams = sizeof(moeccl_params) / sizeof(moeccl_params[0]);

static const moeccl_param_t* param_find(const char* name) {
  for (int i = 0; i < moeccl_nparams; i++)
    if (strcmp(moeccl_params[i].name, name) == 0) return &moeccl_params[i];
  assert(!"unknown MOECCL_ parameter");
  return NULL;
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

int moeccl_param_check(const char* name, char* why, size_t n) {
  const moeccl_param_t* p = param_find(name);
  const char* s = getenv(name);
  char w[200];
  if (!p || !s || !*s || value_ok(p, s, w, sizeof(w)) == 0) return 0;
  snprintf(why, n, "%s=%.*s%s is %s", name, SHOWN, s, strlen(s) > SHOWN ? "..." : "", w);
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

/* Parses name's value (env or default) as an integer-like type. */
static int64_t param_number(const char* name) {
  const moeccl_param_t* p = param_find(name);
  if (!p) return 0;
  const char* env = getenv(name);
  int64_t v = 0;
  char why[200];
  if (env && *env) {
    if (number_ok(p, env, &v, why, sizeof(why)) == 0) return v;
    if (p->on_bad == MOECCL_PARAM_WARN) warn_once(p, env, why);
  }
  return number_of(p, p->default_value, &v, why, sizeof(why)) == 0 ? v : 0;
}

int64_t moeccl_param_int(const char* name) { return param_number(name); }
size_t moeccl_param_size(const char* name) { return (size_t)param_number(name); }
int moeccl_param_bool(const char* name) { return param_number(name) != 0; }

double moeccl_param_timeout(void) { return (double)moeccl_param_int("MOECCL_TIMEOUT"); }

const char* moeccl_param_str(const char* name) {
  const moeccl_param_t* p = param_find(name);
  const char* env = getenv(name);
  char why[200];
  if (env && *env && p && string_ok(p, env, why, sizeof(why)) == 0) return env;
  if (env && *env && p && p->on_bad == MOECCL_PARAM_WARN) warn_once(p, env, why);
  return p ? p->default_value : NULL;
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
