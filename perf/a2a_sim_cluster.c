/*
 * a2a_sim_cluster.c - the cluster a2a_sim prices on (a2a_sim_int.h): the
 * presets, a topology file instead (--topo), a cost file over it (--costs)
 * and the --link and --copy overrides.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "a2a_sim_int.h"

/* A preset is a cluster shape and its link costs; docs/SIMULATOR.md and
 * a2a_sim(1) give the reasoning behind each number. */
struct preset {
  const char* name;
  const char* what;
  int nodes, ppn, group, rails;
  moeccl_link_t link[MOECCL_LINK_NCLASSES];
  double copy_overhead_us, copy_GBps;
};

static const struct preset presets[] = {
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

static const struct preset* find_preset(const char* name) {
  for (size_t i = 0; i < sizeof presets / sizeof presets[0]; i++)
    if (strcmp(presets[i].name, name) == 0) return &presets[i];
  return NULL;
}

/* Applies one "KEY=V,KEY=V" list to a link (or, link NULL, to the copy costs). */
const char* sim_preset_what(const char* name) {
  const struct preset* p = find_preset(name);
  return p ? p->what : NULL;
}

static int apply_costs(char* list, moeccl_link_t* link, moeccl_topo_t* t) {
  for (char *save = NULL, *kv = strtok_r(list, ",", &save); kv; kv = strtok_r(NULL, ",", &save)) {
    char* eq = strchr(kv, '=');
    char* end;
    if (!eq) return -1;
    *eq = '\0';
    double v = strtod(eq + 1, &end);
    if (end == eq + 1 || *end || !(v >= 0.0) || isinf(v)) return -1;
    if (strcmp(kv, "latency_us") == 0 && link) link->latency_us = v;
    else if (strcmp(kv, "overhead_us") == 0)
      *(link ? &link->overhead_us : &t->copy_overhead_us) = v;
    else if (strcmp(kv, "bw_GBps") == 0 && v > 0.0) *(link ? &link->bw_GBps : &t->copy_GBps) = v;
    else if (strcmp(kv, "rndv_bytes") == 0 && link && v >= 0.0) link->rndv_bytes = v;
    else return -1;
  }
  return 0;
}

static int apply_override(moeccl_topo_t* t, const char* arg) {
  static const char* classes[MOECCL_LINK_NCLASSES] = {NULL, "node", "group", "global"};
  char buf[256];
  snprintf(buf, sizeof buf, "%s", arg);
  char* colon = strchr(buf, ':');
  if (!colon) return apply_costs(buf, NULL, t); /* --copy */
  *colon = '\0';
  for (int c = MOECCL_LINK_NODE; c < MOECCL_LINK_NCLASSES; c++)
    if (strcmp(buf, classes[c]) == 0) return apply_costs(colon + 1, &t->link[c], t);
  return -1;
}

static int preset_topo(const struct opts* o, moeccl_topo_t* t) {
  const struct preset* p = find_preset(o->preset);
  if (!p) {
    fprintf(stderr, "a2a_sim: unknown preset '%s' (fattree, dragonfly)\n", o->preset);
    return -1;
  }
  int ppn = o->ppn > 0 ? o->ppn : p->ppn;
  int nodes = o->nodes > 0 ? o->nodes : p->nodes;
  if (o->ranks > 0) {
    if (o->ranks % ppn) {
      fprintf(stderr, "a2a_sim: --ranks %d is not a multiple of %d ranks per node\n", o->ranks,
              ppn);
      return -1;
    }
    nodes = o->ranks / ppn;
  }
  int group = o->group >= 0 ? o->group : p->group, rails = o->rails >= 0 ? o->rails : p->rails;
  if (moeccl_topo_regular_shape(t, nodes, ppn, group, rails) != moecclSuccess) {
    fprintf(stderr, "a2a_sim: cannot build %d nodes of %d ranks\n", nodes, ppn);
    return -1;
  }
  memcpy(t->link, p->link, sizeof t->link);
  t->copy_overhead_us = p->copy_overhead_us;
  t->copy_GBps = p->copy_GBps;
  snprintf(t->source, sizeof t->source, "preset %s", p->name);
  return 0;
}

int sim_build_topo(const struct opts* o, moeccl_topo_t* t) {
  char err[512] = "";
  if (o->topo_file) {
    if (moeccl_topo_load(t, o->topo_file, 0, err, sizeof err) != moecclSuccess) {
      fprintf(stderr, "a2a_sim: %s\n", err[0] ? err : o->topo_file);
      return -1;
    }
  } else if (preset_topo(o, t)) {
    return -1;
  }
  if (o->costs_file && moeccl_topo_load_costs(t, o->costs_file, err, sizeof err) != moecclSuccess) {
    fprintf(stderr, "a2a_sim: %s\n", err[0] ? err : o->costs_file);
    return -1;
  }
  for (int i = 0; i < o->noverrides; i++) {
    if (apply_override(t, o->overrides[i])) {
      fprintf(stderr, "a2a_sim: bad cost override '%s' (see -h)\n", o->overrides[i]);
      return -1;
    }
  }
  return 0;
}
