/*
 * The simulator behind moecclSim_t (include/moeccl_sim.h): a cluster's
 * topology and costs, copied from a preset, a file or a communicator.
 * sim.c holds the handle's calls and send/recv, sim_price.c the calls
 * among members (all-to-all(v), the collectives); this header what they
 * share.
 */
#ifndef MOECCL_API_SIM_INT_H_
#define MOECCL_API_SIM_INT_H_

#include <stdint.h>

#include "base/check.h"
#include "comm/comm.h"
#include "moeccl_sim.h"
#include "topo/topo.h"

#define MOECCL_SIM_MAGIC 0x6d6f656363536d31ULL /* "moeccSm1" */

struct moecclSim {
  uint64_t magic;
  moeccl_topo_t topo; /* the cluster: placement and costs */
  int window;         /* direct's peers per step (MOECCL_A2A_WINDOW) */
  const char* what;   /* the preset's description, or NULL */
  /* From a communicator whose machines hold more ranks than cores: every
   * price is floored as its tuner floors it (moeccl_tuner_machines). */
  int nmachines;     /* 0: no floor */
  int* machine_of;   /* [topo.nranks] */
  int* machine_cpus; /* [nmachines] cores */
};

/* moecclInvalidArgument naming fn when sim is not a live simulator. */
moecclResult_t moeccl_sim_check(const struct moecclSim* sim, const char* fn);

#endif
