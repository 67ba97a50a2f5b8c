/* A communicator's topology as the environment asks for it
 * (MOECCL_TOPO_FILE, MOECCL_TOPO_GROUP_SIZE, MOECCL_TOPO_RAILS,
 * MOECCL_TUNE_FILE).  No communication here: the caller gathers the ranks'
 * node ids, and every rank, reading the same files, builds the same tables. */
#include "base/debug.h"
#include "base/param.h"
#include "topo/topo.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* Puts "var: " in front of the error text a loader wrote. */
static moecclResult_t blame(moecclResult_t res, const char* var, char* err, size_t errlen) {
  if (!err || !errlen) return res;
  char why[512];
  snprintf(why, sizeof(why), "%s", err);
  snprintf(err, errlen, "%s: %s", var, why[0] ? why : "failed");
  return res;
}

static moecclResult_t __attribute__((format(printf, 4, 5)))
fail(moecclResult_t res, char* err, size_t errlen, const char* fmt, ...) {
  if (err && errlen) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
  }
  return res;
}

/* A count variable: 0 or more. */
/* A count from the environment, checked by its declaration (param.c). */
static moecclResult_t env_count(moeccl_param_id_t id, int* out, char* err, size_t errlen) {
  char why[240];
  if (moeccl_param_check_at(id, why, sizeof(why)) != 0)
    return fail(moecclInvalidArgument, err, errlen, "%s", why);
  *out = (int)moeccl_param_int_at(id);
  return moecclSuccess;
}

static moecclResult_t from_env(moeccl_topo_t* t, int nranks, const uint64_t* node_of, char* err,
                               size_t errlen);

/* The file describes one communicator size (usually the world's); a
 * communicator of another size (a sub-communicator made from its own unique
 * id) discovers its topology instead.  That depends only on nranks and the
 * file, so every rank of the communicator does the same. */
static moecclResult_t from_file(moeccl_topo_t* t, const char* path, int nranks,
                                const uint64_t* node_of, char* err, size_t errlen) {
  if (nranks <= 0)
    return fail(moecclInvalidArgument, err, errlen, "MOECCL_TOPO_FILE: %d ranks", nranks);
  int other = 0; /* the size, checked before the file's tables are built */
  moecclResult_t res = moeccl_topo_load_for(t, path, nranks, &other, err, errlen);
  if (res != moecclSuccess) return blame(res, "MOECCL_TOPO_FILE", err, errlen);
  if (other) {
    INFO(INIT,
         "MOECCL_TOPO_FILE %s describes %d ranks, this communicator has %d: discovering its "
         "topology instead",
         path, other, nranks);
    return from_env(t, nranks, node_of, err, errlen);
  }
  if (moeccl_param_topo_group_size() || moeccl_param_topo_rails())
    INFO(INIT, "MOECCL_TOPO_GROUP_SIZE and MOECCL_TOPO_RAILS are ignored: %s sets groups and rails",
         path);
  return moecclSuccess;
}

static moecclResult_t from_env(moeccl_topo_t* t, int nranks, const uint64_t* node_of, char* err,
                               size_t errlen) {
  int group = 0, rails = 0;
  moecclResult_t res = env_count(MOECCL_P_TOPO_GROUP_SIZE, &group, err, errlen);
  if (res == moecclSuccess) res = env_count(MOECCL_P_TOPO_RAILS, &rails, err, errlen);
  if (res != moecclSuccess) return res;
  if (rails == 0) {
    int nics = moeccl_topo_discover_hw(NULL);
    rails = nics > 0 ? nics : 1;
  }
  res = moeccl_topo_from_nodes(t, nranks, node_of, group, rails);
  if (res != moecclSuccess)
    return fail(res, err, errlen, "topology of %d ranks from their node ids: %s", nranks,
                res == moecclSystemError ? "out of memory" : "invalid arguments");
  return moecclSuccess;
}

moecclResult_t moeccl_topo_configure(moeccl_topo_t* t, int nranks, const uint64_t* node_of,
                                     char* err, size_t errlen) {
  if (!t) return fail(moecclInvalidArgument, err, errlen, "no topology to fill");
  memset(t, 0, sizeof(*t));
  if (err && errlen) err[0] = '\0';
  const char* file = moeccl_param_topo_file();
  moecclResult_t res = file && *file ? from_file(t, file, nranks, node_of, err, errlen)
                                     : from_env(t, nranks, node_of, err, errlen);
  if (res != moecclSuccess) {
    moeccl_topo_free(t);
    return res;
  }
  moeccl_topo_discover_hw(t);
  const char* tune = moeccl_param_tune_file();
  if (tune && *tune) {
    res = moeccl_topo_load_costs(t, tune, err, errlen);
    if (res != moecclSuccess) {
      moeccl_topo_free(t);
      return blame(res, "MOECCL_TUNE_FILE", err, errlen);
    }
  }
  INFO(INIT, "topology (%s): %d ranks, %d nodes, %d groups, %d rails; hw: %s", t->source, t->nranks,
       t->nnodes, t->ngroups, t->nrails, t->hw);
  return moecclSuccess;
}
