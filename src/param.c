/* The one table of MOECCL_* variables: name, type, default, one-line help.
 * man/moeccl-env.7.md documents the same list; tests/test_param checks it. */
#include "param.h"
#include "debug.h"

#include <assert.h>
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

const moeccl_param_t moeccl_params[] = {
    {"MOECCL_DEBUG", MOECCL_PARAM_STR, "WARN", "log level: NONE, VERSION, WARN, INFO or TRACE"},
    {"MOECCL_DEBUG_SUBSYS", MOECCL_PARAM_STR, "ALL",
     "subsystems to log: INIT,BOOT,SHM,COLL,P2P,ALGO,ENV,NET,ALL; a leading ^ inverts"},
    {"MOECCL_DEBUG_FILE", MOECCL_PARAM_STR, "",
     "log to this file instead of stderr; %h host, %p pid"},
    {"MOECCL_TIMEOUT", MOECCL_PARAM_INT, "300", "seconds any wait may last before moecclTimeout"},
    {"MOECCL_COMM_ID", MOECCL_PARAM_STR, "", "host:port of the root bootstrap socket"},
    {"MOECCL_SOCKET_IFNAME", MOECCL_PARAM_STR, "",
     "bootstrap interfaces: prefix list, ^ excludes, = exact; unset: loopback only"},
    {"MOECCL_HOSTID", MOECCL_PARAM_STR, "",
     "node identity; ranks with different ids act as separate nodes"},
    {"MOECCL_ALGO", MOECCL_PARAM_STR, "",
     "force the all-to-all algorithm: direct, pairwise, bruck, hier2, hier3 or rail"},
    {"MOECCL_ALLREDUCE_ALGO", MOECCL_PARAM_STR, "",
     "force the AllReduce algorithm: ring, rhd, rd, tree, direct or hier"},
    {"MOECCL_REDUCESCATTER_ALGO", MOECCL_PARAM_STR, "",
     "force the ReduceScatter algorithm: ring, rhd or direct"},
    {"MOECCL_ALLGATHER_ALGO", MOECCL_PARAM_STR, "",
     "force the AllGather algorithm: ring, rhd or direct"},
    {"MOECCL_BROADCAST_ALGO", MOECCL_PARAM_STR, "", "force the Broadcast algorithm: tree or direct"},
    {"MOECCL_REDUCE_ALGO", MOECCL_PARAM_STR, "", "force the Reduce algorithm: tree or direct"},
    {"MOECCL_GATHER_ALGO", MOECCL_PARAM_STR, "", "force the Gather algorithm: direct"},
    {"MOECCL_SCATTER_ALGO", MOECCL_PARAM_STR, "", "force the Scatter algorithm: direct"},
    {"MOECCL_MOE_ALGO", MOECCL_PARAM_STR, "",
     "force the MoE dispatch/combine path across nodes: flat or hier"},
    {"MOECCL_A2A_WINDOW", MOECCL_PARAM_INT, "64",
     "peers the direct algorithm exchanges with per step (0: all at once)"},
    {"MOECCL_TOPO_FILE", MOECCL_PARAM_STR, "",
     "load the topology (nodes, groups, rails, link costs) from this file"},
    {"MOECCL_TOPO_DUMP_FILE", MOECCL_PARAM_STR, "",
     "rank 0 writes the topology it found to this file"},
    {"MOECCL_TOPO_GROUP_SIZE", MOECCL_PARAM_INT, "0",
     "nodes per group (switch or dragonfly group); 0: one group"},
    {"MOECCL_TOPO_RAILS", MOECCL_PARAM_INT, "0", "NICs (rails) per node; 0: as hwloc finds"},
    {"MOECCL_TUNE_V_BYTES", MOECCL_PARAM_SIZE, "65536",
     "per-peer bytes at which the tuner prices alltoallv calls"},
    {"MOECCL_TUNE_FILE", MOECCL_PARAM_STR, "",
     "link and copy costs for the tuner's cost model, over the defaults"},
    {"MOECCL_NET", MOECCL_PARAM_STR, "auto", "network transport between nodes: ofi, ucx or auto"},
    {"MOECCL_SHM_DISABLE", MOECCL_PARAM_BOOL, "0",
     "1: no shared memory; ranks of one node use the network too"},
    {"MOECCL_OFI_PROVIDER", MOECCL_PARAM_STR, "",
     "libfabric provider to use (e.g. tcp, verbs;ofi_rxm, cxi); unset: the best available"},
    {"MOECCL_OFI_RMA_DISABLE", MOECCL_PARAM_BOOL, "0",
     "1: large ofi messages go as tagged pieces instead of RMA writes"},
    {"MOECCL_NET_NCHANNELS", MOECCL_PARAM_INT, "1", "endpoints (channels) per network peer"},
    {"MOECCL_NET_EAGER_SIZE", MOECCL_PARAM_SIZE, "65536",
     "network messages up to this size are sent eagerly; larger ones by RMA or rendezvous"},
    {"MOECCL_NET_CHUNK_SIZE", MOECCL_PARAM_SIZE, "1048576",
     "large network messages move in pieces of this size"},
    {"MOECCL_SHM_EAGER_SIZE", MOECCL_PARAM_SIZE, "16384",
     "messages up to this size go through shared-memory slots; larger ones are copied once"},
    {"MOECCL_SHM_SLOTS", MOECCL_PARAM_INT, "16",
     "shared-memory slots per ordered pair of local ranks"},
    {"MOECCL_SHM_CHUNK_SIZE", MOECCL_PARAM_SIZE, "1048576",
     "bytes a single-copy transfer moves before the executor looks at other work"},
    {"MOECCL_CMA_DISABLE", MOECCL_PARAM_BOOL, "0",
     "1: no cross-memory attach; large messages are pipelined through the slots"},
    {"MOECCL_SHM_MAP_DISABLE", MOECCL_PARAM_BOOL, "0",
     "1: never map peers' moecclMemAlloc memory; read it by cross-memory attach"},
    {"MOECCL_NT_COPY_SIZE", MOECCL_PARAM_SIZE, "32M",
     "operations receiving at least this many bytes per rank copy with streaming stores (0: "
     "never)"},
    {"MOECCL_SPIN_COUNT", MOECCL_PARAM_INT, "2000",
     "polls before a waiting rank yields the core; oversubscribed nodes spin less"},
    {"MOECCL_DEVICE", MOECCL_PARAM_STR, "auto",
     "device backend: auto (CUDA when a driver and device are found), cuda, emu or none"},
    {"MOECCL_DEVICE_EMU_DELAY_US", MOECCL_PARAM_INT, "0",
     "emu backend: a random delay of up to this many microseconds before each stream operation"},
    {"MOECCL_NCCL_VERSION", MOECCL_PARAM_INT, "22809",
     "the NCCL drop-in (libnccl.so.2) reports this version code from ncclGetVersion"},
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
  if (*end == 'i' || *end == 'B') end++; /* "KiB", "KB" */
  if (*end == 'B') end++;
  if (*end != '\0' || (shift && v > (SIZE_MAX >> shift))) return -1;
  *out = (size_t)(v << shift);
  return 0;
}

static int parse_int(const char* s, int64_t* out) {
  errno = 0;
  char* end = NULL;
  long long v = strtoll(s, &end, 0);
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

/* Parses name's value (env or default) as an integer-like type. */
static int64_t param_number(const char* name) {
  const moeccl_param_t* p = param_find(name);
  if (!p) return 0;
  const char* env = getenv(name);
  for (int pass = 0; pass < 2; pass++) {
    const char* s = pass == 0 ? env : p->default_value;
    if (!s || !*s) continue;
    int64_t v = 0;
    size_t sz = 0;
    int rc;
    if (p->type == MOECCL_PARAM_BOOL) {
      rc = parse_bool(s, &v);
    } else if (p->type == MOECCL_PARAM_SIZE) {
      rc = moeccl_parse_size(s, &sz);
      v = (int64_t)sz;
    } else {
      rc = parse_int(s, &v);
    }
    if (rc == 0) return v;
    if (pass == 0)
      WARN(ENV, "ignoring %s=%s: not a valid value, using %s", name, s, p->default_value);
  }
  return 0;
}

int64_t moeccl_param_int(const char* name) { return param_number(name); }
size_t moeccl_param_size(const char* name) { return (size_t)param_number(name); }
int moeccl_param_bool(const char* name) { return param_number(name) != 0; }

double moeccl_param_timeout(void) {
  int64_t t = moeccl_param_int("MOECCL_TIMEOUT");
  return t > 0 ? (double)t : 300.0;
}

const char* moeccl_param_str(const char* name) {
  const moeccl_param_t* p = param_find(name);
  const char* env = getenv(name);
  if (env && *env) return env;
  return p ? p->default_value : NULL;
}

void moeccl_param_log_all(void) {
  for (int i = 0; i < moeccl_nparams; i++) {
    const char* env = getenv(moeccl_params[i].name);
    const char* v = env && *env ? env : moeccl_params[i].default_value;
    moeccl_log(MOECCL_LOG_INFO, MOECCL_SUBSYS_ENV, __FILE__, __LINE__, "%s=%s (%s)",
               moeccl_params[i].name, v, env && *env ? "environment" : "default");
  }
}
