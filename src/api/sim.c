/*
 * The simulator's handle (include/moeccl_sim.h): a cluster from a preset,
 * a topology file or a communicator, its costs, its description, and
 * send/recv between two of its ranks.  The calls among members are
 * sim_price.c's.  Nothing here sends a byte.
 */
#include "api/sim_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/param.h"
#include "tune/cost_model.h"
#include "tune/tuner.h"

moecclResult_t moeccl_sim_check(const struct moecclSim* sim, const char* fn) {
  if (!sim || sim->magic != MOECCL_SIM_MAGIC)
    return moeccl_error(NULL, moecclInvalidArgument, "%s: sim %p is not a live simulator", fn,
                        (const void*)sim);
  return moecclSuccess;
}

static void sim_free(struct moecclSim* s) {
  moeccl_topo_free(&s->topo);
  free(s->machine_of);
  free(s->machine_cpus);
  s->magic = 0;
  free(s);
}

static struct moecclSim* sim_new(void) {
  struct moecclSim* s = calloc(1, sizeof(*s));
  if (!s) return NULL;
  s->magic = MOECCL_SIM_MAGIC;
  long long w = moeccl_param_a2a_window(); /* as a communicator reads it */
  s->window = w > 0 ? (int)w : 0;
  return s;
}

/* The cluster called name: a preset, else a topology file. */
static moecclResult_t load_cluster(struct moecclSim* s, const char* name, int nranks) {
  char err[512] = "";
  if (moeccl_topo_preset_find(name)) {
    moecclResult_t rc = moeccl_topo_preset(&s->topo, name, nranks, err, sizeof err);
    if (rc != moecclSuccess) return moeccl_error(NULL, rc, "moecclSimCreate: %s", err);
    s->what = moeccl_topo_preset_find(name)->what;
    return moecclSuccess;
  }
  moecclResult_t rc = moeccl_topo_load(&s->topo, name, nranks, err, sizeof err);
  if (rc == moecclSuccess) return moecclSuccess;
  char names[128] = "";
  size_t used = 0;
  for (int i = 0; moeccl_topo_preset_at(i) && used < sizeof names; i++)
    used += (size_t)snprintf(names + used, sizeof names - used, "%s%s", i ? ", " : "",
                             moeccl_topo_preset_at(i)->name);
  return moeccl_error(NULL, rc, "moecclSimCreate: '%s' is no preset (%s) and no topology file: %s",
                      name, names, err[0] ? err : "cannot read it");
}

MOECCL_EXPORT moecclResult_t moecclSimCreate(moecclSim_t* sim, const char* cluster, int nranks) {
  if (!sim) return moeccl_error(NULL, moecclInvalidArgument, "moecclSimCreate: sim is NULL");
  if (!cluster || !*cluster)
    return moeccl_error(NULL, moecclInvalidArgument, "moecclSimCreate: cluster is %s",
                        cluster ? "empty" : "NULL");
  if (nranks < 0)
    return moeccl_error(NULL, moecclInvalidArgument, "moecclSimCreate: nranks %d is negative",
                        nranks);
  struct moecclSim* s = sim_new();
  if (!s) return moeccl_error(NULL, moecclSystemError, "moecclSimCreate: out of memory");
  moecclResult_t rc = load_cluster(s, cluster, nranks);
  if (rc != moecclSuccess) return sim_free(s), rc;
  *sim = s;
  return moecclSuccess;
}

/* The communicator's oversubscribed machines, if any. */
static moecclResult_t copy_machines(struct moecclSim* s, const moeccl_comm_t* comm) {
  const int *of = NULL, *cores = NULL;
  int m = moeccl_tuner_machines(comm, &of, &cores);
  if (m <= 0) return moecclSuccess;
  s->machine_of = malloc(sizeof(int) * (size_t)comm->nranks);
  s->machine_cpus = malloc(sizeof(int) * (size_t)m);
  if (!s->machine_of || !s->machine_cpus) return moecclSystemError;
  memcpy(s->machine_of, of, sizeof(int) * (size_t)comm->nranks);
  memcpy(s->machine_cpus, cores, sizeof(int) * (size_t)m);
  s->nmachines = m;
  return moecclSuccess;
}

MOECCL_EXPORT moecclResult_t moecclSimCreateFromComm(moecclSim_t* sim, moecclComm_t comm) {
  MOECCL_CHECK(moeccl_comm_check(comm, "moecclSimCreateFromComm: comm"));
  if (!sim)
    return moeccl_error(NULL, moecclInvalidArgument, "moecclSimCreateFromComm: sim is NULL");
  if (!comm->topo)
    return moeccl_error(NULL, moecclInvalidUsage,
                        "moecclSimCreateFromComm: the communicator has no topology yet");
  struct moecclSim* s = sim_new();
  if (!s || moeccl_topo_copy(&s->topo, comm->topo) != moecclSuccess ||
      copy_machines(s, comm) != moecclSuccess) {
    if (s) sim_free(s);
    return moeccl_error(NULL, moecclSystemError, "moecclSimCreateFromComm: out of memory");
  }
  s->window = comm->a2a_window;
  snprintf(s->topo.source, sizeof s->topo.source, "communicator (%.100s)", comm->topo->source);
  *sim = s;
  return moecclSuccess;
}

MOECCL_EXPORT moecclResult_t moecclSimDestroy(moecclSim_t sim) {
  MOECCL_CHECK(moeccl_sim_check(sim, "moecclSimDestroy"));
  sim_free(sim);
  return moecclSuccess;
}

MOECCL_EXPORT moecclResult_t moecclSimRanks(moecclSim_t sim, int* nranks) {
  MOECCL_CHECK(moeccl_sim_check(sim, "moecclSimRanks"));
  if (!nranks) return moeccl_error(NULL, moecclInvalidArgument, "moecclSimRanks: nranks is NULL");
  *nranks = sim->topo.nranks;
  return moecclSuccess;
}

/* ---- costs ---------------------------------------------------------------- */

/* One "CLASS:KEY=VALUE,..." onto t's costs; 0 or -1. */
static int apply_statement(moeccl_topo_t* t, char* stmt) {
  char* colon = strchr(stmt, ':');
  if (!colon) return -1;
  *colon = '\0';
  int cls = strcmp(stmt, "copy") == 0 ? -1 : moeccl_topo_class_by_name(stmt);
  if (cls == -1 && strcmp(stmt, "copy") != 0) return -1;
  if (!colon[1]) return -1; /* a class and nothing to set */
  return moeccl_topo_apply_costs(t, cls, colon + 1);
}

MOECCL_EXPORT moecclResult_t moecclSimSetCosts(moecclSim_t sim, const char* spec) {
  MOECCL_CHECK(moeccl_sim_check(sim, "moecclSimSetCosts"));
  if (!spec) return moeccl_error(NULL, moecclInvalidArgument, "moecclSimSetCosts: spec is NULL");
  char* text = strdup(spec);
  char* one = malloc(strlen(spec) + 1);
  if (!text || !one) {
    free(text), free(one);
    return moeccl_error(NULL, moecclSystemError, "moecclSimSetCosts: out of memory");
  }
  moeccl_topo_t work = sim->topo; /* costs only: the shared tables are not touched */
  int nstmts = 0, bad = 0;
  for (char *save = NULL, *st = strtok_r(text, " \t\n;", &save); st && !bad;
       st = strtok_r(NULL, " \t\n;", &save), nstmts++) {
    strcpy(one, st);
    if (apply_statement(&work, one)) {
      moeccl_error(NULL, moecclInvalidArgument,
                   "moecclSimSetCosts: bad statement '%s' (CLASS:KEY=VALUE,... with CLASS "
                   "node|group|global: latency_us, overhead_us, bw_GBps, rndv_bytes; copy: "
                   "overhead_us, bw_GBps; values >= 0, bandwidths > 0)",
                   st);
      bad = 1;
    }
  }
  free(text), free(one);
  if (bad) return moecclInvalidArgument;
  if (nstmts == 0)
    return moeccl_error(NULL, moecclInvalidArgument, "moecclSimSetCosts: spec has no statement");
  memcpy(sim->topo.link, work.link, sizeof work.link);
  sim->topo.copy_overhead_us = work.copy_overhead_us;
  sim->topo.copy_GBps = work.copy_GBps;
  return moecclSuccess;
}

/* ---- description ------------------------------------------------------------ */

MOECCL_EXPORT moecclResult_t moecclSimDescribe(moecclSim_t sim, char* buf, size_t len) {
  MOECCL_CHECK(moeccl_sim_check(sim, "moecclSimDescribe"));
  if (!buf || len == 0)
    return moeccl_error(NULL, moecclInvalidArgument, "moecclSimDescribe: buf is %s",
                        buf ? "of length 0" : "NULL");
  static const char* names[MOECCL_LINK_NCLASSES] = {"self", "node", "group", "global"};
  const moeccl_topo_t* t = &sim->topo;
  char per_node[32] = "irregular";
  if (t->ranks_per_node > 0) snprintf(per_node, sizeof per_node, "%d", t->ranks_per_node);
  size_t used = 0;
#define PUT(...)                                                                                   \
  used += (size_t)snprintf(buf + used, used < len ? len - used : 0, __VA_ARGS__),                  \
      used = used < len ? used : len - 1
  PUT("cluster %s: %d ranks = %d nodes x %s, %d group%s of %d nodes, %d rails\n", t->source,
      t->nranks, t->nnodes, per_node, t->ngroups, t->ngroups == 1 ? "" : "s",
      t->nodes_per_group ? t->nodes_per_group : t->nnodes, t->nrails);
  if (sim->what) PUT("  the preset: %s\n", sim->what);
  for (int c = MOECCL_LINK_NODE; c < MOECCL_LINK_NCLASSES; c++)
    PUT("link %-6s latency_us=%g overhead_us=%g bw_GBps=%g rndv_bytes=%g\n", names[c],
        t->link[c].latency_us, t->link[c].overhead_us, t->link[c].bw_GBps, t->link[c].rndv_bytes);
  PUT("copy        overhead_us=%g bw_GBps=%g\n", t->copy_overhead_us, t->copy_GBps);
  PUT("direct window %d\n", sim->window);
  if (sim->nmachines)
    PUT("%d machines, some with more ranks than cores: prices floored at a machine's CPU time "
        "over its cores\n",
        sim->nmachines);
#undef PUT
  return moecclSuccess;
}

/* ---- send/recv ---------------------------------------------------------------- */

/* rank's side of the send (and receive, when src == dst) priced on t. */
static double price_side(const moeccl_topo_t* t, moeccl_sched_t* s, int rank, int src, int dst,
                         size_t bytes) {
  uint32_t b;
  moeccl_sched_reset(s);
  if (moeccl_sched_add_buf(s, NULL, &b) != moecclSuccess) return -1.0;
  if (rank == src && moeccl_sched_add(s, MOECCL_OP_SEND, dst, b, 0, 0, 0, bytes) != moecclSuccess)
    return -1.0;
  if (rank == dst && moeccl_sched_add(s, MOECCL_OP_RECV, src, 0, 0, b, 0, bytes) != moecclSuccess)
    return -1.0;
  if (moeccl_sched_end_step(s) != moecclSuccess) return -1.0;
  return moeccl_model_price(t, s, rank, NULL);
}

MOECCL_EXPORT moecclResult_t moecclSimSendRecv(moecclSim_t sim, int src, int dst, size_t bytes,
                                               double* seconds) {
  MOECCL_CHECK(moeccl_sim_check(sim, "moecclSimSendRecv"));
  int n = sim->topo.nranks;
  if (!seconds)
    return moeccl_error(NULL, moecclInvalidArgument, "moecclSimSendRecv: seconds is NULL");
  if (src < 0 || src >= n || dst < 0 || dst >= n)
    return moeccl_error(NULL, moecclInvalidArgument,
                        "moecclSimSendRecv: %s %d is not a rank of the cluster [0,%d)",
                        src < 0 || src >= n ? "src" : "dst", src < 0 || src >= n ? src : dst, n);
  moeccl_sched_t s = {0};
  double us = price_side(&sim->topo, &s, src, src, dst, bytes);
  double other = src == dst || us < 0 ? us : price_side(&sim->topo, &s, dst, src, dst, bytes);
  moeccl_sched_free(&s);
  if (us < 0 || other < 0)
    return moeccl_error(NULL, moecclSystemError, "moecclSimSendRecv: out of memory");
  *seconds = 1e-6 * (us > other ? us : other);
  return moecclSuccess;
}
