/*
 * a2a_sim_cluster.c - the cluster a2a_sim prices on (a2a_sim_int.h): the
 * presets, a topology file instead (--topo), a cost file over it (--costs)
 * and the --link and --copy overrides.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "a2a_sim_int.h"

/* The presets are the topology layer's (src/topo/topo_presets.c), which
 * moecclSimCreate reads too; docs/SIMULATOR.md and a2a_sim(1) give the
 * reasoning behind each number. */
const char* sim_preset_what(const char* name) {
  const moeccl_topo_preset_t* p = moeccl_topo_preset_find(name);
  return p ? p->what : NULL;
}

/* One --link CLASS:K=V,.. or --copy K=V,.. (no class). */
static int apply_override(moeccl_topo_t* t, const char* arg) {
  char buf[256];
  snprintf(buf, sizeof buf, "%s", arg);
  char* colon = strchr(buf, ':');
  if (!colon) return moeccl_topo_apply_costs(t, -1, buf); /* --copy */
  *colon = '\0';
  int c = moeccl_topo_class_by_name(buf);
  return c < 0 ? -1 : moeccl_topo_apply_costs(t, c, colon + 1);
}

static int preset_topo(const struct opts* o, moeccl_topo_t* t) {
  const moeccl_topo_preset_t* p = moeccl_topo_preset_find(o->preset);
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
  if (moeccl_topo_preset_shape(t, p, nodes, ppn, o->group, o->rails) != moecclSuccess) {
    fprintf(stderr, "a2a_sim: cannot build %d nodes of %d ranks\n", nodes, ppn);
    return -1;
  }
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
  if (o->device) { /* the view shares t's tables: t keeps owning them */
    moeccl_topo_t view;
    moeccl_topo_device_view(t, &view);
    *t = view;
  }
  for (int i = 0; i < o->noverrides; i++) {
    if (apply_override(t, o->overrides[i])) {
      fprintf(stderr, "a2a_sim: bad cost override '%s' (see -h)\n", o->overrides[i]);
      return -1;
    }
  }
  return 0;
}
