/* The algorithm choices the environment forces (MOECCL_ALGO,
 * MOECCL_<COLL>_ALGO, MOECCL_MOE_ALGO), read once per communicator into the
 * tuner's state: the tuner returns them instead of pricing. */
#include "tune/tuner.h"

#include "base/param.h"


/* The per-collective override, MOECCL_<COLL>_ALGO (param.c). */
static const moeccl_param_id_t coll_algo_env[MOECCL_COLL_NKINDS] = {
    [MOECCL_COLL_ALLREDUCE] = MOECCL_P_ALLREDUCE_ALGO,
    [MOECCL_COLL_REDUCE_SCATTER] = MOECCL_P_REDUCESCATTER_ALGO,
    [MOECCL_COLL_ALLGATHER] = MOECCL_P_ALLGATHER_ALGO,
    [MOECCL_COLL_BROADCAST] = MOECCL_P_BROADCAST_ALGO,
    [MOECCL_COLL_REDUCE] = MOECCL_P_REDUCE_ALGO,
    [MOECCL_COLL_GATHER] = MOECCL_P_GATHER_ALGO,
    [MOECCL_COLL_SCATTER] = MOECCL_P_SCATTER_ALGO,
};

static void force_coll(const moeccl_comm_t* c, moeccl_coll_kind_t kind, moeccl_forced_t* f) {
  const char* name = moeccl_param_str_at(coll_algo_env[kind]);
  if (!name || !*name) return;
  const moeccl_coll_algo_t* a = moeccl_coll_algo_by_name(name);
  if (a && a->schedule[kind]) f->coll[kind] = (int)a->id;
  else if (c->rank == 0)
    WARN(ALGO, "%s=%s is not an algorithm of %s; the tuner decides",
         moeccl_params[coll_algo_env[kind]].name, name, moeccl_coll_kind_name(kind));
}

/* An unknown name is not an error: rank 0 warns and the tuner decides. */
void moeccl_forced_read(const moeccl_comm_t* c, moeccl_forced_t* f) {
  f->algo = -1;
  f->moe = -1;
  for (int k = 0; k < MOECCL_COLL_NKINDS; k++) f->coll[k] = -1;
  const char* algo = moeccl_param_algo();
  if (algo && *algo) {
    const moeccl_a2a_algo_t* a = moeccl_a2a_algo_by_name(algo);
    if (a) f->algo = (int)a->id;
    else if (c->rank == 0)
      WARN(ALGO, "MOECCL_ALGO=%s is not an algorithm; the tuner decides", algo);
  }
  for (int k = 0; k < MOECCL_COLL_NKINDS; k++) force_coll(c, (moeccl_coll_kind_t)k, f);
  const char* moe = moeccl_param_moe_algo();
  int path = moeccl_moe_path_by_name(moe);
  if (path >= 0) f->moe = path;
  else if (moe && *moe && c->rank == 0)
    WARN(ALGO, "MOECCL_MOE_ALGO=%s is not flat or hier; the tuner decides", moe);
}
