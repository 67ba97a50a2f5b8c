/* The algorithm choices the environment forces (MOECCL_ALGO,
 * MOECCL_<COLL>_ALGO, MOECCL_MOE_ALGO), read once per communicator into the
 * tuner's state: the tuner returns them instead of pricing. */
#include "tune/tuner.h"

#include "base/param.h"

#include <string.h>

/* The per-collective override, MOECCL_<COLL>_ALGO (param.c). */
static const char* const coll_algo_env[MOECCL_COLL_NKINDS] = {
    [MOECCL_COLL_ALLREDUCE] = "MOECCL_ALLREDUCE_ALGO",
    [MOECCL_COLL_REDUCE_SCATTER] = "MOECCL_REDUCESCATTER_ALGO",
    [MOECCL_COLL_ALLGATHER] = "MOECCL_ALLGATHER_ALGO",
    [MOECCL_COLL_BROADCAST] = "MOECCL_BROADCAST_ALGO",
    [MOECCL_COLL_REDUCE] = "MOECCL_REDUCE_ALGO",
    [MOECCL_COLL_GATHER] = "MOECCL_GATHER_ALGO",
    [MOECCL_COLL_SCATTER] = "MOECCL_SCATTER_ALGO",
};

static void force_coll(const moeccl_comm_t* c, moeccl_coll_kind_t kind, moeccl_forced_t* f) {
  const char* name = moeccl_param_str(coll_algo_env[kind]);
  if (!name || !*name) return;
  const moeccl_coll_algo_t* a = moeccl_coll_algo_by_name(name);
  if (a && a->schedule[kind]) f->coll[kind] = (int)a->id;
  else if (c->rank == 0)
    WARN(ALGO, "%s=%s is not an algorithm of %s; the tuner decides", coll_algo_env[kind], name,
         moeccl_coll_kind_name(kind));
}

/* An unknown name is not an error: rank 0 warns and the tuner decides. */
void moeccl_forced_read(const moeccl_comm_t* c, moeccl_forced_t* f) {
  f->algo = -1;
  f->moe = -1;
  for (int k = 0; k < MOECCL_COLL_NKINDS; k++) f->coll[k] = -1;
  const char* algo = moeccl_param_str("MOECCL_ALGO");
  if (algo && *algo) {
    const moeccl_a2a_algo_t* a = moeccl_a2a_algo_by_name(algo);
    if (a) f->algo = (int)a->id;
    else if (c->rank == 0)
      WARN(ALGO, "MOECCL_ALGO=%s is not an algorithm; the tuner decides", algo);
  }
  for (int k = 0; k < MOECCL_COLL_NKINDS; k++) force_coll(c, (moeccl_coll_kind_t)k, f);
  const char* moe = moeccl_param_str("MOECCL_MOE_ALGO");
  if (moe && !strcmp(moe, "flat")) f->moe = 0;
  else if (moe && !strcmp(moe, "hier")) f->moe = 1;
  else if (moe && *moe && c->rank == 0)
    WARN(ALGO, "MOECCL_MOE_ALGO=%s is not flat or hier; the tuner decides", moe);
}
