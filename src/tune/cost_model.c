/* Cost model of a schedule (see model.h): one pass over the ops, step by
 * step, with constant work per op and per step. */
#include "tune/cost_model.h"

#include <stdlib.h>
#include <string.h>

/* What one step of one rank adds up to, before it is turned into time. */
typedef struct {
  double cpu_us;                            /* message overheads and copies */
  double sent[MOECCL_LINK_NCLASSES];        /* bytes sent per class */
  double received[MOECCL_LINK_NCLASSES];    /* bytes received per class */
  unsigned char used[MOECCL_LINK_NCLASSES]; /* classes the step touches */
  unsigned char rndv[MOECCL_LINK_NCLASSES]; /* ... with a rendezvous message */
} step_load_t;

/* Bytes per microsecond of a bandwidth in GB/s (1e9 bytes/s).  A class with
 * no bandwidth set prices its bytes as free rather than infinite: the file
 * that left it out did not mean "this link does not exist". */
static double bytes_per_us(double GBps) { return GBps > 0.0 ? GBps * 1e3 : 0.0; }

static double transfer_us(double bytes, double GBps) {
  double rate = bytes_per_us(GBps);
  return rate > 0.0 ? bytes / rate : 0.0;
}

/* Adds one op to the step's load and to the whole schedule's counters. */
/* A reduction reads two operands and writes one: half as much traffic again
 * as a copy of the same bytes. */
#define REDUCE_TRAFFIC 1.5

static void add_op(const moeccl_topo_t* t, int rank, const moeccl_sched_op_t* op, step_load_t* l,
                   moeccl_cost_t* d) {
  if (op->type == MOECCL_OP_COPY || op->type == MOECCL_OP_REDUCE) {
    double traffic = op->type == MOECCL_OP_REDUCE ? REDUCE_TRAFFIC : 1.0;
    l->cpu_us += t->copy_overhead_us + transfer_us(traffic * (double)op->bytes, t->copy_GBps);
    l->used[MOECCL_LINK_SELF] = 1;
    d->msgs[MOECCL_LINK_SELF]++;
    d->bytes[MOECCL_LINK_SELF] += (double)op->bytes;
    return;
  }
  moeccl_link_class_t c = moeccl_topo_class(t, rank, op->peer);
  l->cpu_us += t->link[c].overhead_us;
  l->used[c] = 1;
  if (t->link[c].rndv_bytes > 0 && (double)op->bytes > t->link[c].rndv_bytes) {
    l->cpu_us += t->link[c].overhead_us; /* the control message */
    l->rndv[c] = 1;
  }
  if (op->type == MOECCL_OP_SEND) {
    l->sent[c] += (double)op->bytes;
    d->msgs[c]++;
    d->bytes[c] += (double)op->bytes;
  } else {
    l->received[c] += (double)op->bytes;
  }
  /* Reducing on receive: within a node the receiver's core moves the bytes
   * out of the peer's memory, so the local operand's read is more of the
   * same link traffic; from the network the reduction is CPU work after the
   * bytes arrive. */
  if (op->type == MOECCL_OP_RECV_REDUCE) {
    if (c == MOECCL_LINK_NODE) l->received[c] += (REDUCE_TRAFFIC - 1.0) * (double)op->bytes;
    else l->cpu_us += transfer_us(REDUCE_TRAFFIC * (double)op->bytes, t->copy_GBps);
  }
}

/* Turns a step's load into time: CPU and every link class work at once, the
 * slowest of them decides, and the step pays one start-up latency, that of
 * the farthest class it uses.  With nic (the step's bytes of every rank on
 * the rank's NIC, nic_ranks of them) a network class moves the NIC's bytes
 * at the class's bandwidth times nic_ranks: the NIC's whole rate, whoever of
 * its ranks sends. */
static double step_us(const moeccl_topo_t* t, const step_load_t* l, const double* nic,
                      int nic_ranks, moeccl_cost_t* d) {
  double link = 0.0, latency = 0.0;
  for (int c = 0; c < MOECCL_LINK_NCLASSES; c++) {
    if (!l->used[c]) continue;
    if (c != MOECCL_LINK_SELF) {
      double bytes = l->sent[c] > l->received[c] ? l->sent[c] : l->received[c];
      double GBps = t->link[c].bw_GBps;
      if (nic && c != MOECCL_LINK_NODE) {
        const double* b = &nic[2 * c];
        double shared = b[0] > b[1] ? b[0] : b[1];
        if (shared > bytes) bytes = shared;
        GBps *= nic_ranks;
      }
      double us = transfer_us(bytes, GBps);
      if (us > link) link = us;
    }
    /* A rendezvous waits a round trip for the clear to send first. */
    double lat = t->link[c].latency_us * (l->rndv[c] ? 3.0 : 1.0);
    if (lat > latency) latency = lat;
  }
  d->cpu_us += l->cpu_us;
  d->link_us += link;
  d->latency_us += latency;
  return (l->cpu_us > link ? l->cpu_us : link) + latency;
}

/* Doubles per step of a NIC's load: sent and received bytes per class. */
#define NIC_STEP (2 * MOECCL_LINK_NCLASSES)

/* Step k's place in its algorithm (schedule.h's step_id; the index where
 * steps were not ended by moeccl_sched_end_step). */
static int step_of(const moeccl_sched_t* s, int k) { return s->step_id ? s->step_id[k] : k; }

static int valid_ops(const moeccl_topo_t* t, const moeccl_sched_t* s) {
  for (int i = 0; i < s->nops; i++) {
    const moeccl_sched_op_t* op = &s->ops[i];
    if (op->type >= MOECCL_OP_NTYPES) return 0;
    int local = op->type == MOECCL_OP_COPY || op->type == MOECCL_OP_REDUCE;
    if (!local && (op->peer < 0 || op->peer >= t->nranks)) return 0;
  }
  return 1;
}

double moeccl_model_price_nic(const moeccl_topo_t* t, const moeccl_sched_t* s, int rank,
                              const moeccl_nic_load_t* nic, moeccl_cost_t* detail) {
  moeccl_cost_t d;
  memset(&d, 0, sizeof(d));
  if (!t || !s || !t->rank_node || rank < 0 || rank >= t->nranks || !valid_ops(t, s)) return -1.0;
  if (nic && nic->nranks < 1) nic = NULL;
  int begin = 0;
  for (int step = 0; step < s->nsteps; step++) {
    step_load_t load;
    memset(&load, 0, sizeof(load));
    int end = s->step_end[step];
    for (int i = begin; i < end; i++) add_op(t, rank, &s->ops[i], &load, &d);
    int id = step_of(s, step);
    const double* shared = nic && id < nic->nsteps ? &nic->bytes[NIC_STEP * id] : NULL;
    d.total_us += step_us(t, &load, shared, nic ? nic->nranks : 1, &d);
    begin = end;
  }
  d.nsteps = s->nsteps;
  if (detail) *detail = d;
  return d.total_us;
}

double moeccl_model_price(const moeccl_topo_t* t, const moeccl_sched_t* s, int rank,
                          moeccl_cost_t* detail) {
  return moeccl_model_price_nic(t, s, rank, NULL, detail);
}

/* ---- the ranks of one NIC ------------------------------------------------------ */

int moeccl_model_nic_mates(const moeccl_topo_t* t, int rank, int* out) {
  if (!t || !t->rank_node || rank < 0 || rank >= t->nranks) return 0;
  int node = t->rank_node[rank], k = 0;
  int rails = t->nrails, rail = rails > 0 ? t->rank_local[rank] % rails : 0;
  for (int i = t->node_first[node]; i < t->node_first[node + 1]; i++) {
    int r = t->node_ranks[i];
    if (rails > 0 && t->rank_local[r] % rails != rail) continue;
    out[k++] = r;
  }
  return k;
}

void moeccl_model_nic_reset(moeccl_nic_load_t* nic) {
  nic->nsteps = 0;
  nic->nranks = 0;
}

moecclResult_t moeccl_model_nic_add(moeccl_nic_load_t* nic, const moeccl_topo_t* t,
                                    const moeccl_sched_t* s, int rank) {
  if (!t || !s || !t->rank_node || rank < 0 || rank >= t->nranks || !valid_ops(t, s))
    return moecclInvalidArgument;
  int n = s->nsteps ? step_of(s, s->nsteps - 1) + 1 : 0; /* logical steps covered */
  if (n > nic->cap) {
    int cap = nic->cap ? nic->cap : 64;
    while (cap < n) cap *= 2;
    double* b = realloc(nic->bytes, (size_t)cap * NIC_STEP * sizeof(double));
    if (!b) return moecclSystemError;
    nic->bytes = b, nic->cap = cap;
  }
  if (n > nic->nsteps) {
    memset(&nic->bytes[NIC_STEP * nic->nsteps], 0,
           (size_t)(n - nic->nsteps) * NIC_STEP * sizeof(double));
    nic->nsteps = n;
  }
  int begin = 0;
  for (int step = 0; step < s->nsteps; step++) {
    double* b = &nic->bytes[NIC_STEP * step_of(s, step)];
    for (int i = begin; i < s->step_end[step]; i++) {
      const moeccl_sched_op_t* op = &s->ops[i];
      if (op->type != MOECCL_OP_SEND && op->type != MOECCL_OP_RECV &&
          op->type != MOECCL_OP_RECV_REDUCE)
        continue;
      moeccl_link_class_t c = moeccl_topo_class(t, rank, op->peer);
      if (c == MOECCL_LINK_SELF || c == MOECCL_LINK_NODE) continue;
      b[2 * c + (op->type == MOECCL_OP_SEND ? 0 : 1)] += (double)op->bytes;
    }
    begin = s->step_end[step];
  }
  nic->nranks++;
  return moecclSuccess;
}

moecclResult_t moeccl_model_nic_load(moeccl_nic_load_t* nic, const moeccl_topo_t* t, int rank,
                                     const moeccl_sched_t* s, moeccl_model_plan_fn plan,
                                     void* ctx) {
  moeccl_model_nic_reset(nic);
  if (!t || !t->rank_node || rank < 0 || rank >= t->nranks) return plan(ctx, rank, 1);
  int node = t->rank_node[rank], size = t->node_first[node + 1] - t->node_first[node];
  if (size > nic->mates_cap) {
    int* m = realloc(nic->mates, (size_t)size * sizeof(int));
    if (!m) return moecclSystemError;
    nic->mates = m, nic->mates_cap = size;
  }
  int k = moeccl_model_nic_mates(t, rank, nic->mates);
  for (int i = 0; i <= k; i++) {
    int who = i < k ? nic->mates[i] : rank; /* rank's own last: it stays in s */
    if (i < k && who == rank) continue;
    moecclResult_t r = plan(ctx, who, i == k);
    if (r == moecclSuccess) r = moeccl_model_nic_add(nic, t, s, who);
    if (r != moecclSuccess) return r;
  }
  return moecclSuccess;
}

void moeccl_model_nic_free(moeccl_nic_load_t* nic) {
  free(nic->bytes);
  free(nic->mates);
  memset(nic, 0, sizeof(*nic));
}
