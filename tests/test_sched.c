/*
 * Unit test of the all-to-all schedule generators, without processes: every
 * rank's schedule is built for random rank counts, topologies (ranks per
 * node, placements by blocks, shuffled or irregular, nodes per group,
 * rails), direct's window, and uniform or uneven splits (zero blocks, gaps
 * between blocks); then all schedules are run by a tiny in-memory simulator
 * with per-pair FIFO matching.  Every byte must reach exactly the right
 * place once; gap bytes must stay untouched; nothing may be left unmatched;
 * no op may reach outside its buffer.  Buffers hold byte identities (uint32
 * per byte), so a misplaced byte is found, not just a wrong checksum.
 *
 * Beyond the bytes: every rank's plan must be O(n) ops in a bounded number
 * of steps; an algorithm may ask pair_bytes only for pairs its meta scope
 * covers (src or dst in its node / group; any pair for MOECCL_META_ALL);
 * Bruck must send and receive at most one message per round, to rank + 2^k
 * and from rank - 2^k, uniform or not (so a fallback to pairwise fails),
 * on zero, skewed and dense splits as well as random ones; where applies() says no, the
 * schedule must be exactly direct's; where it says yes, the message counts
 * must be those of the hierarchy (so a silent fallback to direct fails);
 * and one rank's plan at 16,384 ranks must take milliseconds.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "algos/algos.h"
#include "algos/pipeline.h"
#include "topo/topo.h"
#include "tune/cost_model.h"
#include "tune/pricing.h"

#define SENTINEL 0xffffffffu
#define ELEM sizeof(uint32_t)

/* How the counts of a world are drawn. */
typedef enum {
  SPLIT_RANDOM,  /* about a third of the blocks empty, the rest 0..max_block */
  SPLIT_UNIFORM, /* moecclAlltoAll: one count, packed blocks */
  SPLIT_ZERO,    /* an alltoallv with every count 0 */
  SPLIT_SKEWED,  /* MoE-like: a few hot destinations and one heavy sender, most blocks empty */
  SPLIT_DENSE    /* every block 1..max_block (no empty block: every message is sent) */
} split_t;

typedef struct {
  int n;
  split_t split;
  size_t *sc, *sd, *rc, *rd; /* n*n each: [rank*n + peer], in elements of 1 "byte" */
  uint32_t **send, **recv;   /* per rank, identities */
  size_t *send_len, *recv_len;
  uint32_t** scratch; /* per rank, sized by its schedule */
  int uniform;        /* plan as moecclAlltoAll: equal blocks, packed */
} world_t;

/* One generated case: the algorithm, the world, where its ranks sit. */
typedef struct {
  const moeccl_a2a_algo_t* algo;
  const moeccl_topo_t* topo; /* NULL: no topology */
  int window;
  int chunks; /* pipelined algorithms: desc->chunks */
  int applies;
  moeccl_meta_scope_t scope; /* what pair_bytes may be asked: none unless applies */
  int violations;
  const char* topo_text;
} case_t;

typedef struct {
  const world_t* w; /* NULL: sizes from pair_formula */
  case_t* c;
  int me;
} pair_ctx_t;

typedef struct msg {
  uint32_t* data;
  size_t bytes;
  struct msg* next;
} msg_t;

static uint64_t rng_state;
static int hier_cases[MOECCL_A2A_NALGOS]; /* cases run as themselves, per hierarchical algorithm */
static uint64_t rnd(void) {
  rng_state ^= rng_state << 13, rng_state ^= rng_state >> 7, rng_state ^= rng_state << 17;
  return rng_state;
}

static uint32_t ident(int rank, size_t off) { return ((uint32_t)rank << 22) | (uint32_t)off; }

static size_t split_count(split_t split, int n, int src, int dst, size_t max_block) {
  switch (split) {
    case SPLIT_ZERO: return 0;
    case SPLIT_DENSE: return 1 + rnd() % (max_block ? max_block : 1);
    case SPLIT_SKEWED:
      if (dst % 8 == 3 || dst == n - 1) return 4 * max_block + rnd() % (max_block + 1);
      if (src == n / 2) return 2 * max_block;
      return rnd() % 4 == 0 ? rnd() % (max_block / 2 + 1) : 0;
    default: return rnd() % 3 == 0 ? 0 : rnd() % (max_block + 1);
  }
}

/* Uneven splits (split_t); displacements leave gaps.  recvcounts mirror
 * sendcounts of the peers. */
static void make_world(world_t* w, int n, size_t max_block, split_t split) {
  memset(w, 0, sizeof(*w));
  w->n = n, w->split = split, w->uniform = split == SPLIT_UNIFORM;
  size_t nn = (size_t)n * (size_t)n;
  w->sc = calloc(nn, sizeof(size_t)), w->sd = calloc(nn, sizeof(size_t));
  w->rc = calloc(nn, sizeof(size_t)), w->rd = calloc(nn, sizeof(size_t));
  size_t fixed = rnd() % (max_block + 1);
  for (size_t i = 0; i < nn; i++)
    w->sc[i] = w->uniform ? fixed : split_count(split, n, (int)(i / n), (int)(i % n), max_block);
  for (int r = 0; r < n; r++)
    for (int p = 0; p < n; p++) w->rc[r * n + p] = w->sc[p * n + r];
  w->send = calloc((size_t)n, sizeof(*w->send)), w->recv = calloc((size_t)n, sizeof(*w->recv));
  w->send_len = calloc((size_t)n, sizeof(size_t)), w->recv_len = calloc((size_t)n, sizeof(size_t));
  for (int r = 0; r < n; r++) {
    size_t so = 0, ro = 0;
    for (int p = 0; p < n; p++) { /* blocks in a shuffled-ish order with gaps */
      int q = (p + r) % n;        /* blocks not in rank order */
      if (w->uniform) q = p;      /* moecclAlltoAll: block p at p * count, no gaps */
      w->sd[r * n + q] = so, so += w->sc[r * n + q] + (w->uniform ? 0 : rnd() % 3);
      w->rd[r * n + q] = ro, ro += w->rc[r * n + q] + (w->uniform ? 0 : rnd() % 3);
    }
    w->send_len[r] = so, w->recv_len[r] = ro;
    w->send[r] = malloc((so + 1) * ELEM);
    w->recv[r] = malloc((ro + 1) * ELEM);
    for (size_t i = 0; i < so; i++) w->send[r][i] = ident(r, i);
    for (size_t i = 0; i < ro; i++) w->recv[r][i] = SENTINEL;
  }
  w->scratch = calloc((size_t)n, sizeof(*w->scratch));
}

static void free_world(world_t* w) {
  for (int r = 0; r < w->n; r++) free(w->send[r]), free(w->recv[r]), free(w->scratch[r]);
  free(w->scratch);
  free(w->send), free(w->recv), free(w->send_len), free(w->recv_len);
  free(w->sc), free(w->sd), free(w->rc), free(w->rd);
}

/* ---- meta scope ---- */

static int in_scope(const case_t* c, int me, int r) {
  const moeccl_topo_t* t = c->topo;
  if (c->scope == MOECCL_META_ALL) return 1;
  if (c->scope == MOECCL_META_NONE || !t) return 0;
  int a = t->rank_node[r], b = t->rank_node[me];
  return c->scope == MOECCL_META_NODE ? a == b : t->node_group[a] == t->node_group[b];
}

/* Sizes of the 16,384-rank timing plans, where no matrix is kept. */
static size_t pair_formula(int src, int dst) {
  return (size_t)(((unsigned)src * 2654435761u + (unsigned)dst * 40503u) >> 7) % 5 * 24;
}

/* pair_bytes: answers from the whole matrix, but counts each question the
 * algorithm's meta scope does not cover (neither the send row of src nor
 * the receive row of dst would have been gathered). */
static size_t test_pair_bytes(const void* ctx, int src, int dst) {
  const pair_ctx_t* p = ctx;
  if (!in_scope(p->c, p->me, src) && !in_scope(p->c, p->me, dst) && p->c->violations++ < 3)
    fprintf(stderr, "%s: rank %d asked pair_bytes(%d, %d), outside its meta scope\n",
            p->c->algo->name, p->me, src, dst);
  if (!p->w) return pair_formula(src, dst);
  return p->w->sc[(size_t)src * p->w->n + dst] * ELEM;
}

/* Schedules count "bytes" as elements of 4 bytes (one identity each). */
static moeccl_a2a_desc_t desc_of(const world_t* w, case_t* c, pair_ctx_t* p, int r) {
  moeccl_a2a_desc_t d = {.rank = r,
                         .nranks = w->n,
                         .elem_size = ELEM,
                         .window = c->window,
                         .chunks = c->chunks,
                         .topo = c->topo,
                         .pair_bytes = test_pair_bytes,
                         .pair_ctx = p};
  *p = (pair_ctx_t){.w = w, .c = c, .me = r};
  if (w->uniform) {
    d.block_bytes = w->sc[0] * ELEM;
  } else {
    d.send_counts = w->sc + (size_t)r * w->n, d.send_displs = w->sd + (size_t)r * w->n;
    d.recv_counts = w->rc + (size_t)r * w->n, d.recv_displs = w->rd + (size_t)r * w->n;
  }
  return d;
}

/* ---- simulator ---- */

static uint32_t* buf_of(const world_t* w, const moeccl_sched_t* s, int r, uint32_t b,
                        uint64_t off) {
  uint32_t* base = b == MOECCL_BUF_SEND                                  ? w->send[r]
                   : b == MOECCL_BUF_RECV                                ? w->recv[r]
                   : (int)b == s->scratch_buf || b == MOECCL_BUF_SCRATCH ? w->scratch[r]
                                                                         : NULL;
  return base ? base + off / ELEM : NULL;
}

static int range_ok(const world_t* w, const moeccl_sched_t* s, int r, uint32_t b, uint64_t off,
                    uint64_t bytes) {
  uint64_t len = b == MOECCL_BUF_SEND      ? w->send_len[r] * ELEM
                 : b == MOECCL_BUF_RECV    ? w->recv_len[r] * ELEM
                 : b == MOECCL_BUF_SCRATCH ? s->scratch_bytes
                                           : 0;
  return off % ELEM == 0 && bytes % ELEM == 0 && off <= len && bytes <= len - off;
}

/* Every op stays inside its buffers, sends and receives name a real peer. */
static int check_ranges(const world_t* w, const moeccl_sched_t* s, int r) {
  for (int i = 0; i < s->nops; i++) {
    const moeccl_sched_op_t* op = &s->ops[i];
    int ok = op->type == MOECCL_OP_COPY || (op->peer >= 0 && op->peer < w->n && op->peer != r);
    if (op->type != MOECCL_OP_RECV)
      ok = ok && range_ok(w, s, r, op->src_buf, op->src_off, op->bytes);
    if (op->type != MOECCL_OP_SEND)
      ok = ok && range_ok(w, s, r, op->dst_buf, op->dst_off, op->bytes);
    if (!ok) {
      fprintf(stderr,
              "rank %d op %d (type %d peer %d, %u+%llu -> %u+%llu, %llu bytes) is out of "
              "bounds (scratch %zu)\n",
              r, i, op->type, op->peer, op->src_buf, (unsigned long long)op->src_off, op->dst_buf,
              (unsigned long long)op->dst_off, (unsigned long long)op->bytes, s->scratch_bytes);
      return 1;
    }
  }
  return 0;
}

/* Hazards within a step: its sends and receives run concurrently with each
 * other and with its copies (copies run in order among themselves), so a
 * receive may not overlap anything else of the step, and a copy may not
 * write what a send of the step reads. */
enum { HZ_RECV_W, HZ_SEND_R, HZ_COPY_R, HZ_COPY_W, HZ_KINDS };
typedef struct {
  uint32_t buf, kind;
  uint64_t start, end;
} span_t;

static int span_cmp(const void* a, const void* b) {
  const span_t *x = a, *y = b;
  if (x->buf != y->buf) return x->buf < y->buf ? -1 : 1;
  return x->start < y->start ? -1 : x->start > y->start;
}

static int conflicts(int a, int b) {
  if (a == HZ_RECV_W || b == HZ_RECV_W) return 1;
  return (a == HZ_SEND_R && b == HZ_COPY_W) || (a == HZ_COPY_W && b == HZ_SEND_R);
}

static int step_hazards(span_t* sp, int m) {
  qsort(sp, (size_t)m, sizeof(*sp), span_cmp);
  uint64_t reach[HZ_KINDS] = {0}; /* furthest end of each kind so far, this buffer */
  for (int i = 0; i < m; i++) {
    if (i && sp[i].buf != sp[i - 1].buf) memset(reach, 0, sizeof(reach));
    for (int k = 0; k < HZ_KINDS; k++)
      if (conflicts(k, (int)sp[i].kind) && reach[k] > sp[i].start) return 1;
    if (sp[i].end > reach[sp[i].kind]) reach[sp[i].kind] = sp[i].end;
  }
  return 0;
}

static int check_hazards(const moeccl_sched_t* s, int r) {
  span_t* sp = malloc(2 * (size_t)(s->nops + 1) * sizeof(*sp));
  int errors = 0;
  for (int st = 0, begin = 0; st < s->nsteps && !errors; begin = s->step_end[st++]) {
    int m = 0;
    for (int i = begin; i < s->step_end[st]; i++) {
      const moeccl_sched_op_t* op = &s->ops[i];
      if (op->type != MOECCL_OP_RECV)
        sp[m++] = (span_t){op->src_buf, op->type == MOECCL_OP_SEND ? HZ_SEND_R : HZ_COPY_R,
                           op->src_off, op->src_off + op->bytes};
      if (op->type != MOECCL_OP_SEND)
        sp[m++] = (span_t){op->dst_buf, op->type == MOECCL_OP_RECV ? HZ_RECV_W : HZ_COPY_W,
                           op->dst_off, op->dst_off + op->bytes};
    }
    if (step_hazards(sp, m))
      fprintf(stderr, "rank %d step %d: an op writes what another op of the step uses\n", r, st),
          errors++;
  }
  free(sp);
  return errors;
}

static void post_step(world_t* w, moeccl_sched_t* s, int r, int begin, int end, msg_t** head,
                      msg_t** tail) {
  int n = w->n;
  for (int i = begin; i < end; i++) {
    moeccl_sched_op_t* op = &s->ops[i];
    uint32_t* src = op->type != MOECCL_OP_RECV ? buf_of(w, s, r, op->src_buf, op->src_off) : NULL;
    if (op->type == MOECCL_OP_COPY) {
      memcpy(buf_of(w, s, r, op->dst_buf, op->dst_off), src, op->bytes);
    } else if (op->type == MOECCL_OP_SEND) {
      msg_t* m = calloc(1, sizeof(*m));
      m->data = malloc(op->bytes), m->bytes = op->bytes;
      memcpy(m->data, src, op->bytes);
      size_t q = (size_t)r * n + op->peer;
      if (tail[q]) tail[q]->next = m;
      else head[q] = m;
      tail[q] = m;
    }
  }
}

/* Runs all schedules; sends are buffered, receives match per pair in order.
 * Returns the number of errors. */
static int simulate(world_t* w, moeccl_sched_t* sch) {
  int n = w->n, errors = 0;
  msg_t **head = calloc((size_t)n * n, sizeof(msg_t*)),
        **tail = calloc((size_t)n * n, sizeof(msg_t*));
  int *step = calloc((size_t)n, sizeof(int)), *posted = calloc((size_t)n, sizeof(int));
  int* next_op = calloc((size_t)n, sizeof(int));
  for (int progress = 1; progress;) {
    progress = 0;
    for (int r = 0; r < n; r++) {
      moeccl_sched_t* s = &sch[r];
      while (step[r] < s->nsteps) {
        int begin = step[r] ? s->step_end[step[r] - 1] : 0, end = s->step_end[step[r]];
        if (!posted[r]) { /* post sends and copies once */
          post_step(w, s, r, begin, end, head, tail);
          posted[r] = 1, next_op[r] = begin, progress = 1;
        }
        for (; next_op[r] < end; next_op[r]++) { /* receives, in order */
          moeccl_sched_op_t* op = &s->ops[next_op[r]];
          if (op->type != MOECCL_OP_RECV) continue;
          size_t q = (size_t)op->peer * n + r;
          msg_t* m = head[q];
          if (!m) break;
          if (m->bytes != op->bytes) {
            fprintf(stderr, "rank %d: message from %d is %zu bytes, receive %llu\n", r, op->peer,
                    m->bytes, (unsigned long long)op->bytes);
            errors++;
          }
          memcpy(buf_of(w, s, r, op->dst_buf, op->dst_off), m->data,
                 m->bytes < op->bytes ? m->bytes : op->bytes);
          head[q] = m->next;
          if (!head[q]) tail[q] = NULL;
          free(m->data), free(m);
          progress = 1;
        }
        if (next_op[r] < end) break;
        step[r]++, posted[r] = 0;
      }
    }
  }
  for (int r = 0; r < n; r++)
    if (step[r] < sch[r].nsteps)
      fprintf(stderr, "rank %d stuck in step %d\n", r, step[r]), errors++;
  for (size_t q = 0; q < (size_t)n * n; q++) {
    if (head[q]) fprintf(stderr, "unmatched message %zu->%zu\n", q / n, q % n), errors++;
    for (msg_t* m = head[q]; m;) {
      msg_t* next = m->next;
      free(m->data), free(m);
      m = next;
    }
  }
  free(head), free(tail), free(step), free(posted), free(next_op);
  return errors;
}

/* Every received element is the right identity; gaps hold the sentinel. */
static int verify(const world_t* w) {
  int n = w->n, errors = 0;
  for (int r = 0; r < n && errors < 10; r++) {
    char* covered = calloc(w->recv_len[r] + 1, 1);
    for (int p = 0; p < n; p++) {
      size_t cnt = w->rc[r * n + p], rd = w->rd[r * n + p], sd = w->sd[p * n + r];
      for (size_t i = 0; i < cnt; i++) {
        covered[rd + i] = 1;
        if (w->recv[r][rd + i] != ident(p, sd + i)) {
          if (errors++ < 10)
            fprintf(stderr, "rank %d: element %zu of the block from %d is %08x, expected %08x\n", r,
                    i, p, w->recv[r][rd + i], ident(p, sd + i));
        }
      }
    }
    for (size_t i = 0; i < w->recv_len[r]; i++)
      if (!covered[i] && w->recv[r][i] != SENTINEL && errors++ < 10)
        fprintf(stderr, "rank %d: gap element %zu was overwritten\n", r, i);
    free(covered);
  }
  return errors;
}

/* ---- shape of each plan ---- */

typedef struct {
  int sends[MOECCL_LINK_NCLASSES], recvs[MOECCL_LINK_NCLASSES];
  int copies, off_rail; /* off_rail: messages between nodes to another local index */
  int off_plane;        /* hier3: messages between groups to another node index */
  int max_step_sends, max_step_recvs;
} shape_t;

static shape_t shape_of(const moeccl_sched_t* s, const moeccl_topo_t* t, int r) {
  shape_t sh = {0};
  for (int st = 0, begin = 0; st < s->nsteps; begin = s->step_end[st++]) {
    int sends = 0, recvs = 0;
    for (int i = begin; i < s->step_end[st]; i++) {
      const moeccl_sched_op_t* op = &s->ops[i];
      if (op->type == MOECCL_OP_COPY) {
        sh.copies++;
        continue;
      }
      int cls = t ? (int)moeccl_topo_class(t, r, op->peer) : MOECCL_LINK_GLOBAL;
      if (op->type == MOECCL_OP_SEND) sh.sends[cls]++, sends++;
      else sh.recvs[cls]++, recvs++;
      if (t && cls >= MOECCL_LINK_GROUP && t->rank_local[op->peer] != t->rank_local[r])
        sh.off_rail++;
      if (t && cls == MOECCL_LINK_GLOBAL && t->nodes_per_group &&
          t->rank_node[op->peer] % t->nodes_per_group != t->rank_node[r] % t->nodes_per_group)
        sh.off_plane++;
    }
    if (sends > sh.max_step_sends) sh.max_step_sends = sends;
    if (recvs > sh.max_step_recvs) sh.max_step_recvs = recvs;
  }
  return sh;
}

static int ceil_div(int a, int b) { return (a + b - 1) / b; }

/* The chunks a pipelined schedule of the case has (1: not pipelined). */
static int chunks_of(const case_t* c) {
  if (!moeccl_a2a_pipelined(c->algo->id)) return 1;
  moeccl_a2a_desc_t d = {.chunks = c->chunks};
  return moeccl_pipeline_chunks(&d);
}

/* Message counts of each hierarchical algorithm on a regular topology. */
static int check_hier_shape(const case_t* c, const shape_t* sh) {
  const moeccl_topo_t* t = c->topo;
  int C = chunks_of(c);
  int L = t->ranks_per_node, N = t->nnodes, ng = t->ngroups;
  int P = t->nodes_per_group ? t->nodes_per_group : N;
  int node = sh->sends[MOECCL_LINK_NODE], group = sh->sends[MOECCL_LINK_GROUP];
  int global = sh->sends[MOECCL_LINK_GLOBAL], across = group + global;
  int racross = sh->recvs[MOECCL_LINK_GROUP] + sh->recvs[MOECCL_LINK_GLOBAL];
  switch (c->algo->id) {
    case MOECCL_A2A_HIER2:
      return across <= ceil_div(N - 1, L) && racross <= ceil_div(N - 1, L) && node <= 2 * (L - 1) &&
             sh->off_rail == 0;
    case MOECCL_A2A_HIER2P: /* hier2's messages once per chunk */
      return across <= C * ceil_div(N - 1, L) && racross <= C * ceil_div(N - 1, L) &&
             node <= C * 2 * (L - 1) && sh->off_rail == 0;
    case MOECCL_A2A_RAIL:
    case MOECCL_A2A_RAILP: /* C = 1 for rail */
      return across <= C * (N - 1) && racross <= C * (N - 1) && node <= C * (L - 1) &&
             sh->off_rail == 0;
    case MOECCL_A2A_HIER3:
    case MOECCL_A2A_HIER3P:
      return global <= C * (ng - 1) && group <= C * (P - 1) && node <= C * (L - 1) &&
             sh->off_rail == 0 && sh->off_plane == 0 &&
             sh->recvs[MOECCL_LINK_GLOBAL] <= C * (ng - 1);
    default: return 1;
  }
}

static int same_ops(const moeccl_sched_t* a, const moeccl_sched_t* b) {
  if (a->nops != b->nops || a->nsteps != b->nsteps || a->scratch_bytes != b->scratch_bytes)
    return 0;
  for (int i = 0; i < a->nops; i++)
    if (memcmp(&a->ops[i], &b->ops[i], sizeof(a->ops[i]))) return 0;
  return !memcmp(a->step_end, b->step_end, (size_t)a->nsteps * sizeof(int));
}

static int direct_steps(int n, int window) {
  return n <= 1 ? 1 : window > 0 && window < n - 1 ? ceil_div(n - 1, window) : 1;
}

/* Bruck's messages: round k sends to rank + 2^k and receives from rank - 2^k,
 * rounds in order, one message each way per step, in at most ceil(log2 n)
 * steps; all of them when no block is empty. */
static int check_bruck_shape(const world_t* w, const moeccl_sched_t* s, int r, int log2n) {
  int n = w->n, ks = 0, kr = 0, sends = 0, recvs = 0, data_steps = 0, bad = 0;
  for (int st = 0, begin = 0; st < s->nsteps; begin = s->step_end[st++]) {
    int step_sends = 0, step_recvs = 0;
    for (int i = begin; i < s->step_end[st]; i++) {
      const moeccl_sched_op_t* op = &s->ops[i];
      if (op->type == MOECCL_OP_SEND) {
        while (ks < log2n && op->peer != (r + (1 << ks)) % n) ks++;
        bad |= ks++ >= log2n, sends++, step_sends++;
      } else if (op->type == MOECCL_OP_RECV) {
        while (kr < log2n && op->peer != (r - (1 << kr) % n + n) % n) kr++;
        bad |= kr++ >= log2n, recvs++, step_recvs++;
      }
    }
    bad |= step_sends > 1 || step_recvs > 1;
    data_steps += step_sends || step_recvs;
  }
  int dense = w->split == SPLIT_DENSE || (w->uniform && w->sc[0]);
  bad |= data_steps > log2n || (dense && (sends != log2n || recvs != log2n));
  if (bad)
    fprintf(stderr, "bruck n=%d rank %d: %d sends, %d receives in %d steps: not Bruck's rounds\n",
            n, r, sends, recvs, data_steps);
  return bad;
}

/* The hierarchical algorithms (their own shape where they apply, direct's
 * plan where not); a new one is added here, a new flat one to check_plan's
 * bounds. */
static int is_hier(int id) {
  return id == MOECCL_A2A_HIER2 || id == MOECCL_A2A_HIER3 || id == MOECCL_A2A_RAIL ||
         moeccl_a2a_pipelined(id);
}

/* Steps and ops of rank r's plan are bounded, O(n); a fallback is direct. */
static int check_plan(const world_t* w, case_t* c, const moeccl_a2a_desc_t* d,
                      const moeccl_sched_t* s) {
  int n = w->n, log2n = 0, id = c->algo->id;
  while ((1 << log2n) < n) log2n++;
  int hier = is_hier(id) && c->applies, bruck = id == MOECCL_A2A_BRUCK;
  int window = id == MOECCL_A2A_DIRECT || (is_hier(id) && !c->applies) ? c->window : 0;
  /* a pipeline of C chunks: a chunk's 7 (rail: 5) steps, each further chunk one more */
  int C = chunks_of(c);
  int rail = id == MOECCL_A2A_RAIL || id == MOECCL_A2A_RAILP;
  int max_steps = id == MOECCL_A2A_PAIRWISE ? n
                  : bruck                   ? 2 * log2n + 1
                  : hier                    ? (rail ? 5 : 7) + C - 1
                                            : direct_steps(n, window);
  /* uneven Bruck: self copy, n-1 own blocks packed, at most about n merged
   * runs of relayed blocks, n-1 final copies */
  int max_ops = bruck ? (w->uniform ? 4 * n : 3 * n) + 4 * log2n
                : hier && C > 1 ? C * (8 * n + 16) /* slices of adjacent blocks do not merge */
                : hier          ? 5 * n + 16
                        : 2 * n + 1;
  shape_t sh = shape_of(s, c->topo, d->rank);
  int errors = bruck ? check_bruck_shape(w, s, d->rank, log2n) : 0;
  if (s->nsteps > max_steps || s->nops > max_ops) {
    fprintf(stderr, "%s n=%d rank %d: %d steps, %d ops (at most %d, %d)\n", c->algo->name, n,
            d->rank, s->nsteps, s->nops, max_steps, max_ops);
    errors++;
  }
  if (window && (sh.max_step_sends > window || sh.max_step_recvs > window)) {
    fprintf(stderr, "%s n=%d: %d sends in a step, window %d\n", c->algo->name, n, sh.max_step_sends,
            window);
    errors++;
  }
  if (hier && !check_hier_shape(c, &sh)) {
    fprintf(stderr,
            "%s n=%d rank %d (%s): sends node %d group %d global %d, %d off rail, "
            "%d off plane: not hierarchical\n",
            c->algo->name, n, d->rank, c->topo_text, sh.sends[MOECCL_LINK_NODE],
            sh.sends[MOECCL_LINK_GROUP], sh.sends[MOECCL_LINK_GLOBAL], sh.off_rail, sh.off_plane);
    errors++;
  }
  if (is_hier(id) && !c->applies) {
    moeccl_sched_t ref = {0};
    moeccl_sched_reset(&ref);
    if (moeccl_a2a_direct(d, &ref) != moecclSuccess || !same_ops(s, &ref)) {
      fprintf(stderr, "%s n=%d rank %d (%s): does not apply, but the plan is not direct's\n",
              c->algo->name, n, d->rank, c->topo_text);
      errors++;
    }
    moeccl_sched_free(&ref);
  }
  return errors;
}

/* ---- cases ---- */

static const char* const split_names[] = {"", " uniform", " all-zero", " skewed", " dense"};

static int run_case(case_t* c, int n, size_t max_block, split_t split) {
  world_t w;
  make_world(&w, n, max_block, split);
  moeccl_sched_t* sch = calloc((size_t)n, sizeof(*sch));
  pair_ctx_t* pc = calloc((size_t)n, sizeof(*pc));
  int errors = 0;
  for (int r = 0; r < n && !errors; r++) {
    moeccl_a2a_desc_t d = desc_of(&w, c, &pc[r], r);
    moeccl_sched_reset(&sch[r]);
    if (c->algo->schedule(&d, &sch[r]) != moecclSuccess) {
      fprintf(stderr, "%s n=%d rank %d: the generator failed\n", c->algo->name, n, r);
      errors++;
      break;
    }
    errors += check_plan(&w, c, &d, &sch[r]);
    errors += check_ranges(&w, &sch[r], r);
    errors += check_hazards(&sch[r], r);
    w.scratch[r] = malloc(sch[r].scratch_bytes + ELEM);
    memset(w.scratch[r], 0xa5,
           sch[r].scratch_bytes + ELEM); /* no identity: reads of unwritten scratch show */
  }
  errors += c->violations;
  hier_cases[c->algo->id] += c->applies;
  if (!errors) errors += simulate(&w, sch);
  if (!errors) errors += verify(&w);
  for (int r = 0; r < n; r++) moeccl_sched_free(&sch[r]);
  free(sch), free(pc);
  free_world(&w);
  if (errors)
    fprintf(stderr, "FAIL %s nranks=%d max_block=%zu%s window=%d chunks=%d topo %s\n",
            c->algo->name, n, max_block, split_names[split], c->window, c->chunks, c->topo_text);
  return errors != 0;
}

/* Whether a hierarchical algorithm must run as itself, from the topology
 * alone (not from its applies(), which is checked against this). */
static int should_apply(moeccl_a2a_algo_id_t id, const moeccl_topo_t* t) {
  if (!t || t->ranks_per_node <= 0) return 0;
  if (id == MOECCL_A2A_HIER2 || id == MOECCL_A2A_RAIL || id == MOECCL_A2A_HIER2P ||
      id == MOECCL_A2A_RAILP)
    return t->nnodes >= 2;
  if ((id != MOECCL_A2A_HIER3 && id != MOECCL_A2A_HIER3P) || t->nodes_per_group <= 0) return 0;
  return t->nnodes % t->nodes_per_group == 0 && t->nnodes / t->nodes_per_group >= 2;
}

static int finish_case(case_t* c, const moeccl_a2a_algo_t* algo, const moeccl_topo_t* t) {
  c->algo = algo, c->topo = t, c->violations = 0;
  c->applies = should_apply(algo->id, t);
  /* an algorithm without applies() always runs as itself */
  c->scope = c->applies || !algo->applies ? algo->meta : MOECCL_META_NONE;
  moeccl_a2a_desc_t probe = {.nranks = t ? t->nranks : 0, .topo = t};
  int says = algo->applies ? algo->applies(&probe) : 0;
  if (says == c->applies) return 0;
  fprintf(stderr, "%s: applies() says %d on %s\n", algo->name, says, c->topo_text);
  return 1;
}

static int random_window(int n) {
  switch (rnd() % 6) {
    case 0: return 0;
    case 1: return 1;
    case 2: return 2 + (int)(rnd() % 3);
    case 3: return n > 1 ? 1 + (int)(rnd() % (unsigned)n) : 0;
    case 4: return n + (int)(rnd() % 3) - 1;
    default: return 64;
  }
}

/* Nodes per group: often a divisor of nnodes (regular groups), sometimes not. */
static int random_group(int nnodes) {
  if (rnd() % 3 == 0) return (int)(rnd() % (unsigned)(nnodes + 1));
  int div[64], nd = 0;
  for (int g = 1; g < nnodes && nd < 64; g++)
    if (nnodes % g == 0) div[nd++] = g;
  return nd ? div[rnd() % (unsigned)nd] : 0;
}

typedef enum { TOPO_NONE, TOPO_BLOCKS, TOPO_SHUFFLED, TOPO_IRREGULAR, TOPO_KINDS } topo_kind_t;

/* A random placement of about max_n ranks; returns nranks, fills t (NULL
 * for TOPO_NONE) and a description. */
static int random_topo(moeccl_topo_t* t, topo_kind_t kind, int max_n, char* text, size_t len) {
  static const int per_node[] = {1, 2, 3, 4, 8};
  int L = per_node[rnd() % 5], nrails = (int)(rnd() % 3) == 2 ? L : (int)(rnd() % 3);
  if (kind == TOPO_NONE || max_n < 2) {
    int n = 1 + (int)(rnd() % (unsigned)max_n);
    snprintf(text, len, "none");
    return n;
  }
  int N = 1 + (int)(rnd() % (unsigned)(max_n / L > 1 ? max_n / L : 1));
  int n = kind == TOPO_IRREGULAR ? 1 + (int)(rnd() % (unsigned)max_n) : N * L;
  uint64_t* node_of = malloc((size_t)n * sizeof(*node_of));
  int* perm = malloc((size_t)n * sizeof(*perm));
  for (int r = 0; r < n; r++) perm[r] = r;
  for (int r = n - 1; r > 0 && kind == TOPO_SHUFFLED; r--) {
    int k = (int)(rnd() % (unsigned)(r + 1)), tmp = perm[r];
    perm[r] = perm[k], perm[k] = tmp;
  }
  int scatter = kind == TOPO_IRREGULAR && rnd() % 2;
  for (int r = 0; r < n; r++) node_of[perm[r]] = scatter ? rnd() % (unsigned)N : (uint64_t)r / L;
  int nnodes = 0;
  for (int r = 0; r < n; r++)
    nnodes = node_of[r] + 1 > (uint64_t)nnodes ? (int)node_of[r] + 1 : nnodes;
  int group = random_group(nnodes);
  moeccl_topo_from_nodes(t, n, node_of, group, nrails);
  snprintf(text, len, "%s %d nodes x %d%s, %d per group (%d groups), %d rails",
           kind == TOPO_BLOCKS     ? "blocks"
           : kind == TOPO_SHUFFLED ? "shuffled"
                                   : "irregular",
           t->nnodes, t->ranks_per_node, t->ranks_per_node ? "" : " (uneven)", t->nodes_per_group,
           t->ngroups, nrails);
  free(node_of), free(perm);
  return n;
}

static int random_case(const moeccl_a2a_algo_t* algo, int max_n, size_t max_block, split_t split) {
  /* the hierarchical ones mostly on regular topologies, where they run */
  topo_kind_t kind = (topo_kind_t)(rnd() % TOPO_KINDS);
  if (algo->applies && kind == TOPO_IRREGULAR && rnd() % 2) kind = TOPO_BLOCKS;
  moeccl_topo_t topo;
  char text[160];
  int n = random_topo(&topo, kind, max_n, text, sizeof(text));
  int has_topo = strcmp(text, "none") != 0;
  /* chunks: the default (0), one, a few, or more than a block has elements */
  static const int chunk_choices[] = {0, 1, 2, 3, 5, 64};
  case_t c = {.window = random_window(n),
              .chunks = chunk_choices[rnd() % 6],
              .topo_text = text};
  int failed = finish_case(&c, algo, has_topo ? &topo : NULL);
  failed |= run_case(&c, n, max_block, split);
  if (has_topo) moeccl_topo_free(&topo);
  return failed;
}

/* ---- 16,384 ranks: one rank's plan takes milliseconds ---- */

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static int timing_check(void) {
  moeccl_topo_t t;
  const int nnodes = 2048, L = 8, n = nnodes * L;
  moeccl_topo_regular_shape(&t, nnodes, L, 16, 8);
  size_t *counts = malloc(4 * (size_t)n * sizeof(size_t)), *displs = counts + 2 * n;
  int failed = 0;
  static const int ranks[] = {0, 9001};
  for (int a = 0; a < MOECCL_A2A_NALGOS; a++) {
    case_t c = {.topo_text = "2048 x 8, 16 per group"};
    failed += finish_case(&c, &moeccl_a2a_algos[a], &t);
    double worst = 0;
    int ops = 0;
    for (int v = 0; v < 2; v++) {
      for (size_t k = 0; k < sizeof(ranks) / sizeof(ranks[0]); k++) {
        int r = ranks[k];
        pair_ctx_t p = {.c = &c, .me = r};
        moeccl_a2a_desc_t d = {.rank = r,
                               .nranks = n,
                               .elem_size = 1,
                               .block_bytes = 64,
                               .topo = &t,
                               .window = 64,
                               .pair_bytes = test_pair_bytes,
                               .pair_ctx = &p};
        if (v) {
          for (int q = 0; q < n; q++) {
            counts[q] = pair_formula(r, q), counts[n + q] = pair_formula(q, r);
            displs[q] = displs[n + q] = (size_t)q * 96;
          }
          d.send_counts = counts, d.recv_counts = counts + n;
          d.send_displs = displs, d.recv_displs = displs + n;
        }
        moeccl_sched_t s = {0};
        moeccl_sched_reset(&s);
        double t0 = now_ms();
        moecclResult_t rc = c.algo->schedule(&d, &s);
        double ms = now_ms() - t0;
        if (ms > worst) worst = ms;
        if (s.nops > ops) ops = s.nops;
        if (rc != moecclSuccess) failed++, fprintf(stderr, "%s at 16384: failed\n", c.algo->name);
        moeccl_sched_free(&s);
      }
    }
    printf("16384 ranks: %-8s one rank's plan %6.2f ms (at most), %d ops\n", c.algo->name, worst,
           ops);
    /* milliseconds; a generous limit for shared or sanitized machines */
    if (worst > 1000 || c.violations) failed++, fprintf(stderr, "%s too slow\n", c.algo->name);
  }
  free(counts);
  moeccl_topo_free(&t);
  return failed;
}

/* ---- what each algorithm costs one rank: 64 nodes x 8, 4 KiB blocks ---- */

static void print_shapes(void) {
  moeccl_topo_t t;
  moeccl_topo_regular_shape(&t, 64, 8, 8, 8);
  int n = t.nranks;
  printf("64 nodes x 8 ranks, 8 nodes per group, uniform 4 KiB blocks (%d KiB per rank), most "
         "over ranks:\n",
         n * 4);
  printf("  %-8s %5s %5s %6s %6s %6s %6s %10s\n", "algo", "steps", "ops", "copies", "node", "group",
         "global", "scratch");
  for (int a = 0; a < MOECCL_A2A_NALGOS; a++) {
    case_t c = {.topo_text = "64 x 8"};
    if (finish_case(&c, &moeccl_a2a_algos[a], &t)) continue;
    int worst[6] = {0};
    size_t scratch = 0;
    for (int r = 0; r < n; r++) {
      moeccl_a2a_desc_t d = {
          .rank = r, .nranks = n, .elem_size = 1, .block_bytes = 4096, .topo = &t, .window = 0};
      moeccl_sched_t s = {0};
      moeccl_sched_reset(&s);
      c.algo->schedule(&d, &s);
      shape_t sh = shape_of(&s, &t, r);
      int v[6] = {s.nsteps,
                  s.nops,
                  sh.copies,
                  sh.sends[MOECCL_LINK_NODE],
                  sh.sends[MOECCL_LINK_GROUP],
                  sh.sends[MOECCL_LINK_GLOBAL]};
      for (int k = 0; k < 6; k++)
        if (v[k] > worst[k]) worst[k] = v[k];
      if (s.scratch_bytes > scratch) scratch = s.scratch_bytes;
      moeccl_sched_free(&s);
    }
    printf("  %-8s %5d %5d %6d %6d %6d %6d %7zu KiB\n", c.algo->name, worst[0], worst[1], worst[2],
           worst[3], worst[4], worst[5], scratch / 1024);
  }
  moeccl_topo_free(&t);
}

/* ---- uneven Bruck: its plan per rank on a skewed split ---- */

static void print_bruck_v(void) {
  static const int sizes[] = {8, 64, 1024};
  const moeccl_a2a_algo_t* algo = moeccl_a2a_algo_by_name("bruck");
  printf("bruck alltoallv, skewed split (max_block 16 x 4 B), most over ranks:\n");
  printf("  %5s %5s %5s %6s %5s %5s %9s %9s %8s\n", "ranks", "steps", "ops", "copies", "sends",
         "recvs", "scratch", "sent", "plan ms");
  for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
    world_t w;
    make_world(&w, sizes[k], 16, SPLIT_SKEWED);
    case_t c = {.topo_text = "none"};
    finish_case(&c, algo, NULL);
    int worst[5] = {0};
    size_t scratch = 0, sent = 0;
    double ms = 0;
    for (int r = 0; r < w.n; r++) {
      pair_ctx_t p;
      moeccl_a2a_desc_t d = desc_of(&w, &c, &p, r);
      moeccl_sched_t s = {0};
      moeccl_sched_reset(&s);
      double t0 = now_ms();
      algo->schedule(&d, &s);
      ms += now_ms() - t0;
      shape_t sh = shape_of(&s, NULL, r);
      int v[5] = {s.nsteps, s.nops, sh.copies, sh.sends[MOECCL_LINK_GLOBAL],
                  sh.recvs[MOECCL_LINK_GLOBAL]};
      for (int i = 0; i < 5; i++)
        if (v[i] > worst[i]) worst[i] = v[i];
      if (s.scratch_bytes > scratch) scratch = s.scratch_bytes;
      size_t bytes = 0;
      for (int q = 0; q < w.n; q++) bytes += w.sc[(size_t)r * w.n + q] * ELEM;
      if (bytes > sent) sent = bytes;
      moeccl_sched_free(&s);
    }
    printf("  %5d %5d %5d %6d %5d %5d %9zu %9zu %8.3f\n", w.n, worst[0], worst[1], worst[2],
           worst[3], worst[4], scratch, sent, ms / w.n);
    free_world(&w);
  }
}

/* Splits beyond the random one for every algorithm on a few rank counts,
 * and Bruck's uneven variant on many, up to 1,024 ranks. */
static int split_cases(int* cases) {
  static const int small[] = {1, 2, 3, 5, 8, 33};
  static const int bruck_n[] = {1,  2,  3,  4,  5,   6,   7,   9,   12,  15,  16,   17,
                                31, 63, 64, 65, 100, 127, 128, 129, 255, 257, 1000, 1024};
  static const split_t splits[] = {SPLIT_ZERO, SPLIT_SKEWED, SPLIT_DENSE};
  int failed = 0;
  for (int a = 0; a < MOECCL_A2A_NALGOS; a++)
    for (size_t i = 0; i < sizeof(small) / sizeof(small[0]); i++)
      for (size_t k = 0; k < sizeof(splits) / sizeof(splits[0]); k++, (*cases)++) {
        case_t c = {.topo_text = "none"};
        failed +=
            finish_case(&c, &moeccl_a2a_algos[a], NULL) | run_case(&c, small[i], 12, splits[k]);
      }
  const moeccl_a2a_algo_t* bruck = moeccl_a2a_algo_by_name("bruck");
  for (size_t i = 0; i < sizeof(bruck_n) / sizeof(bruck_n[0]); i++) {
    int n = bruck_n[i];
    size_t max_block = n <= 64 ? 40 : n <= 256 ? 8 : 1;
    for (int split = SPLIT_RANDOM; split <= SPLIT_DENSE; split++) {
      /* uniform and random calls run above; keep the largest ones brief */
      if (split == SPLIT_UNIFORM || (n >= 1000 && split == SPLIT_RANDOM) ||
          (n == 1000 && split == SPLIT_DENSE))
        continue;
      case_t c = {.topo_text = "none"};
      failed += finish_case(&c, bruck, NULL) | run_case(&c, n, max_block, (split_t)split);
      (*cases)++;
    }
  }
  return failed;
}

/* The buffer table records each buffer's memory kind (mem.h), host by
 * default, kept across growth and reset by moeccl_sched_reset. */
static int mem_kinds(void) {
  moeccl_sched_t s;
  memset(&s, 0, sizeof(s));
  moeccl_sched_reset(&s);
  int bad = 0;
  for (int i = 0; i < 40; i++) {
    uint32_t b;
    moeccl_mem_t m = {MOECCL_MEM_DEVICE, (int16_t)(i % 3)};
    moecclResult_t rc =
        i % 2 ? moeccl_sched_add_buf_mem(&s, NULL, m, &b) : moeccl_sched_add_buf(&s, NULL, &b);
    bad |= rc != moecclSuccess || b != (uint32_t)i;
  }
  for (int i = 0; i < 40; i++) {
    moeccl_mem_t m = s.mems[i];
    bad |= i % 2 ? m.kind != MOECCL_MEM_DEVICE || m.device != i % 3
                 : m.kind != MOECCL_MEM_HOST || m.device != -1;
  }
  bad |= moeccl_mem_ops(MOECCL_MEM_HOST_INIT) != &moeccl_host_mem_ops;
  bad |= moeccl_mem_ops((moeccl_mem_t){MOECCL_MEM_DEVICE, 0}) != NULL; /* no devices here */
  bad |= moeccl_mem_of(&s).kind != MOECCL_MEM_HOST;
  moeccl_sched_reset(&s);
  bad |= s.nbufs != 0;
  moeccl_sched_free(&s);
  if (bad) fprintf(stderr, "mem_kinds: the buffer table lost a memory kind\n");
  return bad;
}

/* ---- overlap priced ---- */

/* Rank r's schedule of algo in `chunks` chunks, priced by the cost model. */
static double price_of(const moeccl_topo_t* t, int algo, int r, size_t block, int chunks,
                       moeccl_cost_t* cost) {
  moeccl_a2a_desc_t d = {.rank = r,
                         .nranks = t->nranks,
                         .block_bytes = block,
                         .elem_size = 1,
                         .chunks = chunks,
                         .topo = t};
  moeccl_sched_t s = {0};
  moeccl_sched_reset(&s);
  double us = moeccl_a2a_algos[algo].schedule(&d, &s) == moecclSuccess
                  ? moeccl_model_price(t, &s, r, cost)
                  : -1.0;
  moeccl_sched_free(&s);
  return us;
}

/* The tuner's choice for a uniform call of block bytes per peer on t. */
static int tuner_choice(const moeccl_topo_t* t, size_t block, int* chunks) {
  moeccl_a2a_pricing_t call = {
      .d = {.nranks = t->nranks, .block_bytes = block, .elem_size = 1, .topo = t}};
  moeccl_sched_t s = {0};
  moeccl_sched_reset(&s);
  moeccl_pricing_t p = {.topo = t, .sched = &s, .nranks = t->nranks};
  *chunks = moeccl_pricing_a2a_chunks(&p, &call);
  moeccl_pricing_a2a(&p, &call);
  char line[640];
  int best = moeccl_pricing_cheapest(&p, line, sizeof(line), NULL);
  moeccl_sched_free(&s);
  return best;
}

/* A pipeline's price is about its slowest stage once per chunk plus fill
 * and drain: on nodes joined by a slow network, hier2 in C chunks costs
 * less than hier2 and at least its network stage (the bytes hier2 sends
 * across at the network's rate); its steps are C - 1 + 7.  Where the
 * hierarchy does not pay (one node; every link as fast as the node's), the
 * tuner keeps direct with the pipelined rows in the table. */
static int pipeline_pricing(void) {
  int failed = 0;
  moeccl_topo_t t;
  moeccl_topo_regular_shape(&t, 4, 4, 0, 1);
  t.link[MOECCL_LINK_NODE] = (moeccl_link_t){1.0, 0.2, 20.0};
  t.link[MOECCL_LINK_GROUP] = (moeccl_link_t){5.0, 1.0, 1.0};
  t.link[MOECCL_LINK_GLOBAL] = t.link[MOECCL_LINK_GROUP];
  t.copy_overhead_us = 0.1, t.copy_GBps = 20.0;
  size_t block = 1u << 20;
  moeccl_cost_t bulk, piped;
  double h2 = price_of(&t, MOECCL_A2A_HIER2, 0, block, 0, &bulk);
  double h2p = price_of(&t, MOECCL_A2A_HIER2P, 0, block, 8, &piped);
  double across = bulk.bytes[MOECCL_LINK_GROUP] / (t.link[MOECCL_LINK_GROUP].bw_GBps * 1e3);
  if (!(h2p < h2 && h2p >= across && piped.nsteps == 7 + 7)) {
    fprintf(stderr, "pipelined pricing: hier2 %.1f us, hier2p/8 %.1f us in %d steps, "
            "network stage %.1f us\n", h2, h2p, piped.nsteps, across);
    failed++;
  }
  printf("4 nodes x 4, 1 MiB per peer, 1 GB/s across: hier2 %.1f us, hier2p/8 %.1f us "
         "(network stage %.1f us)\n", h2, h2p, across);
  int chunks;
  static const size_t blocks[] = {64, 4096, 1u << 20};
  for (size_t i = 0; i < sizeof(blocks) / sizeof(blocks[0]); i++) {
    t.link[MOECCL_LINK_GROUP] = t.link[MOECCL_LINK_GLOBAL] = t.link[MOECCL_LINK_NODE];
    int best = tuner_choice(&t, blocks[i], &chunks);
    if (moeccl_a2a_pipelined(best)) {
      fprintf(stderr, "uniform links, %zu B per peer: the tuner picks %s\n", blocks[i],
              best >= 0 ? moeccl_a2a_algos[best].name : "none");
      failed++;
    }
  }
  moeccl_topo_free(&t);
  moeccl_topo_regular_shape(&t, 1, 8, 0, 1);
  for (size_t i = 0; i < sizeof(blocks) / sizeof(blocks[0]); i++) {
    int best = tuner_choice(&t, blocks[i], &chunks);
    if (best != MOECCL_A2A_DIRECT) {
      fprintf(stderr, "one node, %zu B per peer: the tuner picks %s, not direct\n", blocks[i],
              best >= 0 ? moeccl_a2a_algos[best].name : "none");
      failed++;
    }
  }
  moeccl_topo_free(&t);
  return failed;
}

int main(void) {
  int failed = 0, cases = 0;
  failed += mem_kinds(), cases++;
  rng_state = 0x9e3779b97f4a7c15ULL;
  double t0 = now_ms();
  static const int fixed[] = {1, 2, 3, 4, 5, 7, 8, 16, 33};
  for (int a = 0; a < MOECCL_A2A_NALGOS; a++) {
    const moeccl_a2a_algo_t* algo = &moeccl_a2a_algos[a];
    for (int u = 0; u < 2; u++) {
      split_t split = u ? SPLIT_UNIFORM : SPLIT_RANDOM;
      for (size_t i = 0; i < sizeof(fixed) / sizeof(fixed[0]); i++, cases++) {
        case_t c = {.topo_text = "none"};
        failed += finish_case(&c, algo, NULL) | run_case(&c, fixed[i], 40, split);
      }
      for (int k = 0; k < 40; k++, cases++) failed += random_case(algo, 64, 40, split);
      for (int k = 0; k < 12; k++, cases++) failed += random_case(algo, 256, 8, split);
      for (int k = 0; k < 4; k++, cases++) failed += random_case(algo, 1024, k % 2 ? 3 : 1, split);
    }
  }
  failed += split_cases(&cases);
  failed += pipeline_pricing(), cases++;
  for (int a = 0; a < MOECCL_A2A_NALGOS; a++) {
    if (!is_hier(a)) continue;
    printf("%s ran as itself in %d cases\n", moeccl_a2a_algos[a].name, hier_cases[a]);
    if (hier_cases[a] < 20) failed++, fprintf(stderr, "too few hierarchical cases\n");
  }
  print_shapes();
  print_bruck_v();
  failed += timing_check();
  printf("%d passed, %d failed (%.1f s)\n", cases - failed, failed, (now_ms() - t0) / 1e3);
  return failed ? 1 : 0;
}
