/* Pricing the candidates of one call (pricing.h): the loop over candidates
 * and ranks, the all-to-all and collective candidates, the samples. */
#include "tune/pricing.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/check.h"
#include "tune/cost_model.h"

/* rank's schedule of algo, built into p->sched with the standard buffers. */
static moecclResult_t build_std(moeccl_pricing_t* p, int algo, int rank) {
  moeccl_sched_t* s = p->sched;
  moeccl_sched_reset(s);
  uint32_t b;
  for (int j = 0; j < MOECCL_BUF_NSTD; j++) MOECCL_CHECK(moeccl_sched_add_buf(s, NULL, &b));
  s->scratch_buf = MOECCL_BUF_SCRATCH;
  return p->build(p, algo, rank, s);
}

/* One candidate's schedules for moeccl_model_nic_load. */
typedef struct {
  moeccl_pricing_t* p;
  int algo;
} nic_plan_t;

static moecclResult_t nic_plan(void* ctx, int rank, int priced) {
  (void)priced;
  nic_plan_t* n = ctx;
  return build_std(n->p, n->algo, rank);
}

double moeccl_pricing_price(moeccl_pricing_t* p, int algo) {
  double worst = -1.0;
  p->slowest = -1;
  for (int i = 0; i < p->nranks; i++) {
    int rank = p->ranks ? p->ranks[i] : i;
    moeccl_sched_t* s = p->sched;
    nic_plan_t plan = {p, algo};
    moecclResult_t r = p->nic ? moeccl_model_nic_load(p->nic, p->topo, rank, s, nic_plan, &plan)
                              : build_std(p, algo, rank);
    if (r != moecclSuccess) return MOECCL_PRICE_FAILED;
    moeccl_cost_t cost = {0};
    double us = moeccl_model_price_nic(p->topo, s, rank, p->nic, &cost);
    if (p->extra && p->extra(p, algo, rank, s, &us, &cost.cpu_us) != moecclSuccess)
      return MOECCL_PRICE_FAILED;
    if (p->cpu_us) p->cpu_us[i] = cost.cpu_us;
    if (us > worst) worst = us, p->slowest = rank;
  }
  return p->bound ? p->bound(p, p->cpu_us, worst) : worst;
}

int moeccl_pricing_cheapest(moeccl_pricing_t* p, char* line, size_t cap, double* best_us) {
  int len = 0, best = -1;
  double best_time = -1.0;
  line[0] = '\0';
  for (int o = 0; o < p->n; o++) {
    int i = p->order ? p->order[o] : o;
    if (!p->applies(p, i)) continue;
    double us = moeccl_pricing_price(p, i);
    if (us == MOECCL_PRICE_FAILED) return -2;
    if (us < 0) continue;
    if (len < (int)cap)
      len += snprintf(line + len, cap - (size_t)len, "%s%s %.1f", len ? ", " : "", p->name(i), us);
    if (best_time < 0 || us < best_time * (1.0 - p->tie)) best_time = us, best = i;
  }
  if (best_us) *best_us = best_time;
  return best;
}

/* ---- all-to-all ----------------------------------------------------------- */

static const char* a2a_name(int algo) { return moeccl_a2a_algos[algo].name; }

/* Whether a's count exchange runs for a v-call on d's ranks
 * (moeccl_a2a_needs_meta without needing d's counts). */
static int a2a_meta_runs(const moeccl_a2a_algo_t* a, const moeccl_a2a_desc_t* d) {
  if (a->meta == MOECCL_META_NONE) return 0;
  if (a->meta == MOECCL_META_ALL && d->nranks > MOECCL_META_ALL_MAX_RANKS) return 0;
  return !a->applies || a->applies(d);
}

static int a2a_applies(const moeccl_pricing_t* p, int algo) {
  const moeccl_a2a_pricing_t* call = p->call;
  const moeccl_a2a_algo_t* a = &moeccl_a2a_algos[algo];
  if (!a->schedule) return 0;
  /* Past the cap, an alltoallv of bruck gathers no counts and runs
   * pairwise, which is priced as itself. */
  if (call->v && a->meta == MOECCL_META_ALL && call->d.nranks > MOECCL_META_ALL_MAX_RANKS) return 0;
  return !a->applies || a->applies(&call->d);
}

static moecclResult_t a2a_build(const moeccl_pricing_t* p, int algo, int rank, moeccl_sched_t* s) {
  const moeccl_a2a_pricing_t* call = p->call;
  const moeccl_a2a_algo_t* a = &moeccl_a2a_algos[algo];
  moeccl_a2a_desc_t d = call->d;
  d.rank = rank;
  if (call->rank_part) {
    call->rank_part(call->ctx, rank, &d);
    if (!a2a_meta_runs(a, &d)) d.pair_bytes = NULL, d.pair_ctx = NULL;
  }
  return a->schedule(&d, s);
}

/* A v-call's count exchange, before the blocks move. */
static moecclResult_t a2a_counts(const moeccl_pricing_t* p, int algo, int rank, moeccl_sched_t* s,
                                 double* us, double* cpu_us) {
  const moeccl_a2a_pricing_t* call = p->call;
  const moeccl_a2a_algo_t* a = &moeccl_a2a_algos[algo];
  if (!call->v || !a2a_meta_runs(a, &call->d)) return moecclSuccess;
  moeccl_cost_t mc = {0};
  uint32_t b;
  moeccl_sched_reset(s);
  moeccl_meta_members(p->topo, rank, a->meta, call->meta_index);
  MOECCL_CHECK(moeccl_sched_add_buf(s, NULL, &b));
  MOECCL_CHECK(moeccl_meta_schedule(p->topo, rank, a->meta, call->meta_index, b, s));
  *us += moeccl_model_price(p->topo, s, rank, &mc);
  *cpu_us += mc.cpu_us;
  return moecclSuccess;
}

void moeccl_pricing_a2a(moeccl_pricing_t* p, const moeccl_a2a_pricing_t* call) {
  p->call = call;
  p->order = NULL; /* table order */
  p->n = MOECCL_A2A_NALGOS;
  p->tie = 0.0;
  p->name = a2a_name;
  p->applies = a2a_applies;
  p->build = a2a_build;
  p->extra = a2a_counts;
}

int moeccl_pricing_a2a_chunks(moeccl_pricing_t* p, moeccl_a2a_pricing_t* call) {
  static const int candidates[] = {2, 4, 8, 16};
  moeccl_pricing_a2a(p, call);
  /* A pipelined plan costs its chunks times its bulk one's: the count is
   * chosen on the first two priced ranks alone (0 and n-1 of a sample),
   * without the machine floor or their NIC-mates' load, so that a miss at
   * 16,384 ranks stays well under a second. */
  moeccl_pricing_t few = *p;
  int ranks01[2] = {0, p->nranks - 1};
  if (few.nranks > 2) few.nranks = 2;
  if (!few.ranks) few.ranks = ranks01;
  few.bound = NULL, few.cpu_us = NULL, few.nic = NULL; /* and each rank alone */
  int best = -1;
  double best_us = -1.0;
  for (int a = 0; a < MOECCL_A2A_NALGOS; a++) {
    if (!moeccl_a2a_pipelined(a) || !a2a_applies(p, a)) continue;
    for (size_t i = 0; i < sizeof(candidates) / sizeof(candidates[0]); i++) {
      call->d.chunks = candidates[i];
      double us = moeccl_pricing_price(&few, a);
      if (us == MOECCL_PRICE_FAILED) return -2;
      /* more chunks must win by 2%: more messages for a gain the model barely sees */
      if (us >= 0 && (best_us < 0 || us < best_us * (candidates[i] > best ? 0.98 : 1.0)))
        best_us = us, best = candidates[i];
    }
  }
  call->d.chunks = best > 0 ? best : 0;
  return call->d.chunks;
}

const char* moeccl_pricing_a2a_runs(const moeccl_a2a_algo_t* a, const moeccl_a2a_desc_t* d, int v) {
  if (v && a->meta == MOECCL_META_ALL && d->nranks > MOECCL_META_ALL_MAX_RANKS)
    return moeccl_a2a_algos[MOECCL_A2A_PAIRWISE].name;
  if (a->applies && !a->applies(d)) return moeccl_a2a_algos[MOECCL_A2A_DIRECT].name;
  return a->name;
}

/* ---- the other collectives ------------------------------------------------ */

static const char* coll_name(int algo) { return moeccl_coll_algos[algo].name; }

static int coll_applies(const moeccl_pricing_t* p, int algo) {
  const moeccl_coll_desc_t* d = p->call;
  const moeccl_coll_algo_t* a = &moeccl_coll_algos[algo];
  return a->schedule[d->kind] && (!a->applies || a->applies(d));
}

static moecclResult_t coll_build(const moeccl_pricing_t* p, int algo, int rank, moeccl_sched_t* s) {
  moeccl_coll_desc_t d = *(const moeccl_coll_desc_t*)p->call;
  d.rank = rank;
  MOECCL_CHECK(moeccl_coll_algos[algo].schedule[d.kind](&d, s));
  return moeccl_sched_end_step(s);
}

void moeccl_pricing_coll(moeccl_pricing_t* p, const moeccl_coll_desc_t* call) {
  /* Priced in this order, so a tie goes to the earlier row: direct keeps each
   * rank's working slice smallest (its reductions stay in cache), which
   * the model does not see. */
  static const int order[MOECCL_COLL_NALGOS] = {MOECCL_COLL_DIRECT, MOECCL_COLL_RHD,
                                                MOECCL_COLL_RING,   MOECCL_COLL_RD,
                                                MOECCL_COLL_TREE,   MOECCL_COLL_HIER};
  p->call = call;
  p->order = order;
  p->n = MOECCL_COLL_NALGOS;
  p->tie = 1e-9;
  p->name = coll_name;
  p->applies = coll_applies;
  p->build = coll_build;
  p->extra = NULL;
}

/* ---- which ranks to price ------------------------------------------------- */

int moeccl_pricing_sample_add(int rank, int n, unsigned char* seen, int* out, int k) {
  if (rank < 0 || rank >= n || seen[rank]) return k;
  seen[rank] = 1;
  out[k++] = rank;
  return k;
}

int moeccl_pricing_sample_spread(const moeccl_topo_t* t, int count, unsigned char* seen, int* out,
                                 int k) {
  int n = t->nranks;
  k = moeccl_pricing_sample_add(0, n, seen, out, k);
  k = moeccl_pricing_sample_add(n - 1, n, seen, out, k);
  for (int i = 0; i < count; i++) {
    int node = (int)((long long)i * t->nnodes / count);
    int size = t->node_first[node + 1] - t->node_first[node];
    k = moeccl_pricing_sample_add(t->node_ranks[t->node_first[node] + i % size], n, seen, out, k);
  }
  return k;
}

/* The top entries of v[0..n), heaviest first, the lower index first among
 * equals, added to the sample. */
static int add_top(const size_t* v, int n, int top, unsigned char* seen, int* out, int k) {
  int best[16], nbest = 0;
  size_t bestv[16];
  if (top > 16) top = 16;
  for (int a = 0; a < n && top > 0; a++) {
    int i = nbest < top ? nbest++ : top;
    if (i == top && v[a] <= bestv[top - 1]) continue;
    if (i == top) i = top - 1;
    for (; i > 0 && bestv[i - 1] < v[a]; i--) best[i] = best[i - 1], bestv[i] = bestv[i - 1];
    best[i] = a, bestv[i] = v[a];
  }
  for (int i = 0; i < nbest; i++) k = moeccl_pricing_sample_add(best[i], n, seen, out, k);
  return k;
}

int moeccl_pricing_sample_heavy(const size_t* counts, int n, int top, unsigned char* seen, int* out,
                                int k) {
  size_t* sent = calloc((size_t)n, sizeof(size_t));
  size_t* received = calloc((size_t)n, sizeof(size_t));
  if (sent && received) {
    for (int a = 0; a < n; a++) {
      const size_t* row = &counts[(size_t)a * (size_t)n];
      for (int b = 0; b < n; b++) sent[a] += row[b], received[b] += row[b];
    }
    k = add_top(sent, n, top, seen, out, k);
    k = add_top(received, n, top, seen, out, k);
  }
  free(sent);
  free(received);
  return k;
}

/* ---- MoE dispatch and combine ----------------------------------------------- */

/* Microseconds to move rows of rb bytes at GBps (0: free). */
static double rows_us(double rows, double rb, double GBps) {
  return GBps > 0.0 ? rows * rb / (GBps * 1e3) : 0.0;
}

/* One step of a MoE exchange: CPU time, each link class's time, latency. */
typedef struct {
  double cpu, net, node, latency;
} moe_step_t;

/* Step j of the exchange's steps (moeccl_pricing_moe) for k's rows in C
 * chunks: j = -1 the packing, 0 .. nx-1 the exchange, nx the expansion.
 * A rank's own view prices the node rows as the node link's; a machine's
 * (machine) counts the rows its receiving cores copy in, and the loopback
 * network's copies, as CPU time. */
static moe_step_t moe_step(const moeccl_moe_pricing_t* m, const moeccl_moe_cost_rows_t* k,
                           double rb, int path, int C, int j, int machine) {
  const moeccl_topo_t* t = m->topo;
  const moeccl_link_t* net = &t->link[t->ngroups > 1 ? MOECCL_LINK_GLOBAL : MOECCL_LINK_GROUP];
  const moeccl_link_t* node = &t->link[MOECCL_LINK_NODE];
  int nx = path ? C + 2 : 1;
  moe_step_t s = {0};
  if (j < 0 || j >= nx) {
    s.cpu = rows_us((double)(j < 0 ? k->pack_rows : k->expand_rows), rb, t->copy_GBps);
    return s;
  }
  if (j < C) { /* chunk j between nodes */
    s.net = rows_us((double)k->net_rows / C, rb, net->bw_GBps);
    s.cpu += (double)k->net_msgs * net->overhead_us;
    if (machine && m->loop_GBps > 0.0)
      s.cpu += 0.5 * rows_us((double)k->net_io_rows / C, rb, m->loop_GBps);
    if (k->net_msgs) s.latency = net->latency_us;
  }
  if (j == 0) { /* the rows straight to this node's ranks */
    s.node = rows_us((double)k->node_rows, rb, node->bw_GBps);
    s.cpu += (double)k->node_msgs * node->overhead_us;
    if (machine) s.cpu += rows_us((double)k->node_in_rows, rb, node->bw_GBps);
    if (k->node_msgs && node->latency_us > s.latency) s.latency = node->latency_us;
  }
  if (path && j >= 1 && j <= C) /* the forwarders' copies of chunk j-1 */
    s.cpu += rows_us((double)k->fwd_rows / C, rb, t->copy_GBps);
  if (path && j >= 2) { /* their messages of chunk j-2 on the node */
    s.node += rows_us((double)k->fwd_node_rows / C, rb, node->bw_GBps);
    s.cpu += (double)k->fwd_node_msgs * node->overhead_us;
    if (machine) s.cpu += rows_us((double)k->fwd_in_rows / C, rb, node->bw_GBps);
    if (k->fwd_node_msgs && node->latency_us > s.latency) s.latency = node->latency_us;
  }
  return s;
}

/* The most any machine's cores take for their ranks' CPU time of step j. */
static double moe_machine_floor(const moeccl_moe_pricing_t* m, int path, double rb, int C, int j) {
  for (int i = 0; i < m->nmachines; i++) m->scratch[i] = 0.0;
  for (int r = 0; r < m->nranks; r++)
    m->scratch[m->machine_of[r]] += moe_step(m, &m->all[2 * r + path], rb, path, C, j, 1).cpu;
  double most = 0.0;
  for (int i = 0; i < m->nmachines; i++) {
    double us = m->machine_cpus[i] > 0 ? m->scratch[i] / m->machine_cpus[i] : 0.0;
    if (us > most) most = us;
  }
  return most;
}

double moeccl_pricing_moe(const moeccl_moe_pricing_t* m, int path, double row_bytes, int chunks) {
  int C = path && chunks > 1 ? chunks : 1, nx = path ? C + 2 : 1;
  double us = 0.0;
  for (int j = -1; j <= nx; j++) {
    moe_step_t s = moe_step(m, &m->most[path], row_bytes, path, C, j, 0);
    double step = s.cpu > s.net ? s.cpu : s.net;
    if (s.node > step) step = s.node;
    if (m->all) {
      double floor = moe_machine_floor(m, path, row_bytes, C, j);
      if (floor > step) step = floor;
    }
    us += step + s.latency;
  }
  return us;
}

/* How much more than 1 chunk the cheapest chunk count may be priced and
 * still run (moeccl_pricing_moe_pick). */
#define MOE_PIPELINE_SLACK 0.10

int moeccl_pricing_moe_pick(const moeccl_moe_pricing_t* m, double row_bytes, int hier_ok, int path,
                            int chunks_forced, double us[3], int* chunks) {
  static const int candidates[] = {2, 4, 8, 16};
  us[0] = moeccl_pricing_moe(m, 0, row_bytes, 1);
  us[1] = us[2] = -1;
  *chunks = 1;
  if (!hier_ok) return 0;
  us[1] = moeccl_pricing_moe(m, 1, row_bytes, 1);
  double best = us[1];
  if (chunks_forced > 0) {
    *chunks = chunks_forced;
    if (*chunks > 1) best = moeccl_pricing_moe(m, 1, row_bytes, *chunks);
  } else {
    /* The most chunks priced within 2% of the cheapest count, run unless
     * priced more than MOE_PIPELINE_SLACK over 1 chunk (pricing.h). */
    enum { NC = sizeof(candidates) / sizeof(candidates[0]) };
    double p[NC], cheapest = -1.0;
    for (int i = 0; i < NC; i++) {
      p[i] = moeccl_pricing_moe(m, 1, row_bytes, candidates[i]);
      if (cheapest < 0 || p[i] < cheapest) cheapest = p[i];
    }
    int i = NC - 1, c = 0;
    while (i > 0 && p[i] > cheapest * 1.02) i--;
    while (p[c] > cheapest) c++;
    if (p[i] > best * (1.0 + MOE_PIPELINE_SLACK)) i = c; /* the cheapest may still pass */
    if (p[i] <= best * (1.0 + MOE_PIPELINE_SLACK)) best = p[i], *chunks = candidates[i];
  }
  us[2] = best;
  if (path == 0 || path == 1) return path;
  /* a forced count is what runs: the path is priced in it */
  if (chunks_forced > 0) return best < us[0];
  return (best < us[1] ? best : us[1]) < us[0];
}
