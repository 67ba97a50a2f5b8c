/* Modelled clusters by name (perf/a2a_sim --preset, moecclSimCreate) and
 * the cost-override syntax both take (a2a_sim --link/--copy,
 * moecclSimSetCosts).  docs/SIMULATOR.md and a2a_sim(1) give the reasoning
 * behind each number. */
#include "topo/topo.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const moeccl_topo_preset_t presets[] = {
    {.name = "fattree",
     .what = "rail-optimised non-blocking fat tree, 8 GPUs per node on NVLink/NVSwitch, one "
             "400 Gb/s NIC per GPU",
     .nodes = 64,
     .ppn = 8,
     .group = 0,
     .rails = 8,
     .link = {[MOECCL_LINK_NODE] = {2.0, 0.2, 360.0},
              [MOECCL_LINK_GROUP] = {4.0, 0.5, 50.0},
              [MOECCL_LINK_GLOBAL] = {4.0, 0.5, 50.0}},
     .copy_overhead_us = 0.05,
     .copy_GBps = 1000.0},
    {.name = "dragonfly",
     .what = "dragonfly, 4 GPUs per node, one 200 Gb/s NIC per GPU, groups of 32 nodes, global "
             "links tapered to half the injection bandwidth",
     .nodes = 1024,
     .ppn = 4,
     .group = 32,
     .rails = 4,
     .link = {[MOECCL_LINK_NODE] = {2.0, 0.2, 200.0},
              [MOECCL_LINK_GROUP] = {3.0, 0.5, 25.0},
              [MOECCL_LINK_GLOBAL] = {5.0, 0.5, 12.5}},
     .copy_overhead_us = 0.05,
     .copy_GBps = 1000.0},
};

#define NPRESETS ((int)(sizeof presets / sizeof presets[0]))

const moeccl_topo_preset_t* moeccl_topo_preset_at(int i) {
  return i >= 0 && i < NPRESETS ? &presets[i] : NULL;
}

const moeccl_topo_preset_t* moeccl_topo_preset_find(const char* name) {
  for (int i = 0; name && i < NPRESETS; i++)
    if (strcmp(presets[i].name, name) == 0) return &presets[i];
  return NULL;
}

moecclResult_t moeccl_topo_preset_shape(moeccl_topo_t* t, const moeccl_topo_preset_t* p, int nodes,
                                        int ppn, int group, int rails) {
  moecclResult_t rc =
      moeccl_topo_regular_shape(t, nodes > 0 ? nodes : p->nodes, ppn > 0 ? ppn : p->ppn,
                                group >= 0 ? group : p->group, rails >= 0 ? rails : p->rails);
  if (rc != moecclSuccess) return rc;
  memcpy(t->link, p->link, sizeof t->link);
  t->copy_overhead_us = p->copy_overhead_us;
  t->copy_GBps = p->copy_GBps;
  snprintf(t->source, sizeof t->source, "preset %s", p->name);
  return moecclSuccess;
}

static moecclResult_t __attribute__((format(printf, 4, 5)))
fail(moecclResult_t rc, char* err, size_t errlen, const char* fmt, ...) {
  if (err && errlen) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
  }
  return rc;
}

/* "fattree, dragonfly" */
static void preset_names(char* buf, size_t len) {
  size_t used = 0;
  buf[0] = '\0';
  for (int i = 0; i < NPRESETS && used < len; i++)
    used += (size_t)snprintf(buf + used, len - used, "%s%s", i ? ", " : "", presets[i].name);
}

moecclResult_t moeccl_topo_preset(moeccl_topo_t* t, const char* name, int nranks, char* err,
                                  size_t errlen) {
  memset(t, 0, sizeof(*t));
  const moeccl_topo_preset_t* p = moeccl_topo_preset_find(name);
  char names[128];
  preset_names(names, sizeof names);
  if (!p) return fail(moecclInvalidArgument, err, errlen, "unknown preset '%s' (%s)", name, names);
  if (nranks < 0 || nranks > MOECCL_TOPO_MAX_RANKS)
    return fail(moecclInvalidArgument, err, errlen, "preset %s: %d ranks is not in [0, %d]",
                p->name, nranks, MOECCL_TOPO_MAX_RANKS);
  if (nranks % p->ppn)
    return fail(moecclInvalidArgument, err, errlen,
                "preset %s: %d ranks is not a multiple of its %d ranks per node", p->name, nranks,
                p->ppn);
  moecclResult_t rc = moeccl_topo_preset_shape(t, p, nranks / p->ppn, -1, -1, -1);
  if (rc != moecclSuccess)
    return fail(rc, err, errlen, "preset %s: cannot build %d nodes of %d ranks", p->name,
                nranks ? nranks / p->ppn : p->nodes, p->ppn);
  return moecclSuccess;
}

/* ---- cost overrides -------------------------------------------------------- */

static const char* class_names[MOECCL_LINK_NCLASSES] = {NULL, "node", "group", "global"};

int moeccl_topo_class_by_name(const char* name) {
  for (int c = MOECCL_LINK_NODE; c < MOECCL_LINK_NCLASSES; c++)
    if (name && strcmp(name, class_names[c]) == 0) return c;
  return -1;
}

/* One KEY=VALUE of a list; 0, or -1 when the key does not apply or the
 * value is not a finite number >= 0 (> 0 for a bandwidth). */
static int apply_one(char* kv, moeccl_link_t* link, moeccl_topo_t* t) {
  char* eq = strchr(kv, '=');
  char* end;
  if (!eq) return -1;
  *eq = '\0';
  double v = strtod(eq + 1, &end);
  if (end == eq + 1 || *end || !(v >= 0.0) || isinf(v)) return -1;
  if (strcmp(kv, "latency_us") == 0 && link) link->latency_us = v;
  else if (strcmp(kv, "overhead_us") == 0) *(link ? &link->overhead_us : &t->copy_overhead_us) = v;
  else if (strcmp(kv, "bw_GBps") == 0 && v > 0.0) *(link ? &link->bw_GBps : &t->copy_GBps) = v;
  else if (strcmp(kv, "rndv_bytes") == 0 && link) link->rndv_bytes = v;
  else return -1;
  return 0;
}

int moeccl_topo_apply_costs(moeccl_topo_t* t, int cls, char* list) {
  if (cls == 0 || cls >= MOECCL_LINK_NCLASSES) return -1;
  moeccl_link_t* link = cls > 0 ? &t->link[cls] : NULL;
  for (char *save = NULL, *kv = strtok_r(list, ",", &save); kv; kv = strtok_r(NULL, ",", &save))
    if (apply_one(kv, link, t)) return -1;
  return 0;
}
