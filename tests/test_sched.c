/*
 * Unit test of the all-to-all schedule generators, without processes: every
 * rank's schedule is built for random rank counts and uneven splits (zero
 * blocks, gaps between blocks), then all schedules are run by a tiny
 * in-memory simulator with per-pair FIFO matching.  Every byte must reach
 * exactly the right place once; gap bytes must stay untouched; nothing may
 * be left unmatched.  Buffers hold byte identities (uint32 per byte), so a
 * misplaced byte is found, not just a wrong checksum.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "algos/algos.h"

#define SENTINEL 0xffffffffu

typedef struct {
  int n;
  size_t *sc, *sd, *rc, *rd; /* n*n each: [rank*n + peer], in elements of 1 "byte" */
  uint32_t **send, **recv;   /* per rank, identities */
  size_t *send_len, *recv_len;
  uint32_t** scratch; /* per rank, sized by its schedule */
  int uniform;        /* plan as moecclAlltoAll: equal blocks, packed */
} world_t;

typedef struct msg {
  uint32_t* data;
  size_t bytes;
  struct msg* next;
} msg_t;

static uint64_t rng_state;
static uint64_t rnd(void) {
  rng_state ^= rng_state << 13, rng_state ^= rng_state >> 7, rng_state ^= rng_state << 17;
  return rng_state;
}

static uint32_t ident(int rank, size_t off) { return ((uint32_t)rank << 22) | (uint32_t)off; }

/* Random uneven split: about a third of the blocks are empty; displacements
 * leave gaps.  recvcounts mirror sendcounts of the peers. */
static void make_world(world_t* w, int n, size_t max_block) {
  w->n = n;
  size_t nn = (size_t)n * (size_t)n;
  w->sc = calloc(nn, sizeof(size_t)), w->sd = calloc(nn, sizeof(size_t));
  w->rc = calloc(nn, sizeof(size_t)), w->rd = calloc(nn, sizeof(size_t));
  size_t fixed = rnd() % (max_block + 1);
  for (size_t i = 0; i < nn; i++)
    w->sc[i] = w->uniform ? fixed : rnd() % 3 == 0 ? 0 : rnd() % (max_block + 1);
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
    w->send[r] = malloc((so + 1) * sizeof(uint32_t));
    w->recv[r] = malloc((ro + 1) * sizeof(uint32_t));
    for (size_t i = 0; i < so; i++) w->send[r][i] = ident(r, i);
    for (size_t i = 0; i < ro; i++) w->recv[r][i] = SENTINEL;
  }
}

static void make_world_kind(world_t* w, int n, size_t max_block, int uniform) {
  memset(w, 0, sizeof(*w));
  w->uniform = uniform;
  make_world(w, n, max_block);
}

static void free_world(world_t* w) {
  for (int r = 0; r < w->n; r++)
    free(w->send[r]), free(w->recv[r]), free(w->scratch ? w->scratch[r] : NULL);
  free(w->scratch);
  free(w->send), free(w->recv), free(w->send_len), free(w->recv_len);
  free(w->sc), free(w->sd), free(w->rc), free(w->rd);
}

/* Schedules count "bytes" as elements of 4 bytes (one identity each). */
static moeccl_a2a_desc_t desc_of(const world_t* w, int r) {
  if (w->uniform)
    return (moeccl_a2a_desc_t){.rank = r,
                               .nranks = w->n,
                               .block_bytes = w->sc[0] * sizeof(uint32_t),
                               .elem_size = sizeof(uint32_t)};
  return (moeccl_a2a_desc_t){.rank = r,
                             .nranks = w->n,
                             .send_counts = w->sc + (size_t)r * w->n,
                             .send_displs = w->sd + (size_t)r * w->n,
                             .recv_counts = w->rc + (size_t)r * w->n,
                             .recv_displs = w->rd + (size_t)r * w->n,
                             .elem_size = sizeof(uint32_t)};
}

static uint32_t* buf_of(const world_t* w, const moeccl_sched_t* s, int r, uint32_t b,
                        uint64_t off) {
  uint32_t* base = b == MOECCL_BUF_SEND                                  ? w->send[r]
                   : b == MOECCL_BUF_RECV                                ? w->recv[r]
                   : (int)b == s->scratch_buf || b == MOECCL_BUF_SCRATCH ? w->scratch[r]
                                                                         : NULL;
  return base ? base + off / sizeof(uint32_t) : NULL;
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
          for (int i = begin; i < end; i++) {
            moeccl_sched_op_t* op = &s->ops[i];
            uint32_t* src =
                op->type != MOECCL_OP_RECV ? buf_of(w, s, r, op->src_buf, op->src_off) : NULL;
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
  for (size_t q = 0; q < (size_t)n * n; q++)
    if (head[q]) fprintf(stderr, "unmatched message %zu->%zu\n", q / n, q % n), errors++;
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

static int run_case(const moeccl_a2a_algo_t* algo, int n, size_t max_block, int uniform) {
  world_t w;
  w.uniform = uniform;
  make_world_kind(&w, n, max_block, uniform);
  moeccl_sched_t* sch = calloc((size_t)n, sizeof(*sch));
  int errors = 0;
  for (int r = 0; r < n && !errors; r++) {
    moeccl_a2a_desc_t d = desc_of(&w, r);
    moeccl_sched_reset(&sch[r]);
    if (algo->schedule(&d, &sch[r]) != moecclSuccess) errors++;
    int log2n = 0;
    while ((1 << log2n) < n) log2n++;
    int bruck = algo->id == MOECCL_A2A_BRUCK && uniform;
    /* O(n) plans, bounded steps: one step, n-1 steps, or 2 per Bruck round */
    int max_steps = algo->id == MOECCL_A2A_DIRECT ? 1 : bruck ? 2 * log2n + 1 : n;
    int max_ops = bruck ? 4 * n + 4 * log2n : 2 * n + 1; /* O(n) ops: Bruck copies runs */
    if (sch[r].nsteps > max_steps || sch[r].nops > max_ops) {
      fprintf(stderr, "%s n=%d: %d steps, %d ops\n", algo->name, n, sch[r].nsteps, sch[r].nops);
      errors++;
    }
  }
  w.scratch = calloc((size_t)n, sizeof(*w.scratch));
  for (int r = 0; r < n; r++) w.scratch[r] = malloc(sch[r].scratch_bytes + 4);
  if (!errors) errors += simulate(&w, sch);
  if (!errors) errors += verify(&w);
  for (int r = 0; r < n; r++) moeccl_sched_free(&sch[r]);
  free(sch);
  free_world(&w);
  if (errors)
    fprintf(stderr, "FAIL %s nranks=%d max_block=%zu%s\n", algo->name, n, max_block,
            uniform ? " uniform" : "");
  return errors != 0;
}

int main(void) {
  int failed = 0, cases = 0;
  rng_state = 0x9e3779b97f4a7c15ULL;
  static const int fixed[] = {1, 2, 3, 4, 5, 7, 8, 16, 33};
  for (int a = 0; a < MOECCL_A2A_NALGOS; a++) {
    const moeccl_a2a_algo_t* algo = &moeccl_a2a_algos[a];
    for (int uniform = 0; uniform < 2; uniform++) {
      for (size_t i = 0; i < sizeof(fixed) / sizeof(fixed[0]); i++, cases++)
        failed += run_case(algo, fixed[i], 40, uniform);
      for (int k = 0; k < 12; k++, cases++)
        failed += run_case(algo, 1 + (int)(rnd() % 1024), k % 2 ? 3 : 0, uniform);
      for (int k = 0; k < 20; k++, cases++)
        failed += run_case(algo, 1 + (int)(rnd() % 64), 64, uniform);
    }
  }
  printf("%d passed, %d failed\n", cases - failed, failed);
  return failed ? 1 : 0;
}
