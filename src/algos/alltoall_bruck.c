/* Bruck all-to-all (Bruck et al., 1997): ceil(log2 n) exchange rounds instead
 * of n-1, for small blocks where per-message latency dominates.  Round k
 * sends to rank+2^k every block whose slot index has bit k set, packed into
 * one message; each block travels a distance equal to its slot index.  At
 * the start of round k, slot i of rank r holds the block from s = r - (i mod
 * 2^k) to s + i: its own block to r + i at first, the block from r - i at
 * the end.
 *
 * Uniform calls.  Layout in scratch: slots (n blocks, slot i first holds
 * the block for rank r+i) | pack area | unpack area (each ceil(n/2)
 * blocks).  Steps: rotate into slots and pack round 0 | exchange 0 |
 * unpack 0, pack 1 | ... | unpack the last round and rotate out.
 * Copy-only steps finish at once, and copies within a step run in order, so
 * unpacking round k before packing round k+1 in one step is safe.
 *
 * Uneven calls (alltoallv, desc->pair_bytes set): the same rounds and
 * partners, each message holding exactly the bytes of its blocks (both ends
 * add up the same sizes; an empty message is neither sent nor received).
 * Blocks have no fixed slot size, so nothing is unpacked: round k receives
 * into its own scratch area, and a block stays there until the round of its
 * slot's next set bit packs it (or, if final, the next step copies it out).
 * Own blocks are packed straight from the send buffer, so there is no
 * rotation in.  Steps: self copy, pack 0 | exchange 0 | copy out round 0's
 * final blocks, pack 1 | ... | copy out the last round's.  A pack copies
 * one run per block group that lies contiguous (merged copies), which adds
 * up to at most about n copies over all rounds, plus n-1 own blocks and n-1
 * final blocks: O(n) ops.  A message that is one run is sent from where it
 * lies; one whose blocks are all final and one run in the receive buffer is
 * received there.  Scratch: the receive areas of all rounds (each block's
 * bytes once per hop, about log2(n)/2 times the rank's volume: Bruck is for
 * small blocks) then one pack area (the largest packed message).  Planning
 * costs O(n log n) time (one size per slot and round), O(n) workspace.
 *
 * Alltoallv metadata (MOECCL_META_ALL): besides its own row and column,
 * rank r asks pair_bytes for the blocks it relays: (r - j, r - j + i) for
 * every slot i and j = i mod 2^(k+1) for each set bit k of i below its
 * highest (the block arrives in round k and leaves at i's next set bit).
 * That is about (n/2) log2 n pairs, spread over every rank's rows, hence
 * the all-rows scope.  Without pair_bytes a v-call runs pairwise. */
#include "algos.h"
#include "base/check.h"

typedef struct {
  uint64_t block, slots, pack, unpack; /* byte offsets in scratch */
} bruck_layout_t;

/* Copies the slots whose index has bit k set between the slots and a packed
 * area (to_pack) or back.  Those slots come in runs of 2^k, one copy each,
 * so all rounds together cost O(n) ops, not O(n log n). */
static moecclResult_t copy_round(moeccl_sched_t* s, const bruck_layout_t* L, int n, int k,
                                 int to_pack) {
  uint64_t packed = 0;
  int run = 1 << k;
  for (int start = run; start < n; start += 2 * run) {
    int len = start + run <= n ? run : n - start;
    uint64_t slot = L->slots + (uint64_t)start * L->block, bytes = (uint64_t)len * L->block;
    uint64_t area = (to_pack ? L->pack : L->unpack) + packed;
    if (to_pack)
      MOECCL_CHECK(moeccl_sched_add(s, MOECCL_OP_COPY, -1, MOECCL_BUF_SCRATCH, slot,
                                    MOECCL_BUF_SCRATCH, area, bytes));
    else
      MOECCL_CHECK(moeccl_sched_add(s, MOECCL_OP_COPY, -1, MOECCL_BUF_SCRATCH, area,
                                    MOECCL_BUF_SCRATCH, slot, bytes));
    packed += bytes;
  }
  return moecclSuccess;
}

static uint64_t round_bytes(const bruck_layout_t* L, int n, int k) {
  uint64_t count = 0;
  for (int i = 1; i < n; i++) count += (i & (1 << k)) != 0;
  return count * L->block;
}

/* ---- uneven blocks (alltoallv) ---- */

/* Pack-area offsets are tagged until the receive areas before it are laid
 * out; relocate() rewrites them. */
#define PACK_TAG (UINT64_C(1) << 63)

typedef struct {
  uint64_t off, bytes; /* where the block now in the slot lies in scratch, its size */
} bruck_slot_t;

typedef struct {
  const moeccl_a2a_desc_t* d;
  moeccl_sched_t* s;
  bruck_slot_t* slot; /* n entries, in the sched workspace */
  uint64_t areas;     /* scratch bytes taken by the receive areas so far */
  uint64_t pack_max;  /* largest packed message */
  /* The copy being merged: later pieces that continue both ends join it. */
  uint32_t src_buf, dst_buf;
  uint64_t src, dst, bytes;
  int runs; /* copies started for the message being packed */
} bruck_v_t;

static moecclResult_t run_flush(bruck_v_t* v) {
  uint64_t bytes = v->bytes;
  v->bytes = 0;
  return moeccl_sched_add(v->s, MOECCL_OP_COPY, -1, v->src_buf, v->src, v->dst_buf, v->dst, bytes);
}

static moecclResult_t run_add(bruck_v_t* v, uint32_t src_buf, uint64_t src, uint32_t dst_buf,
                              uint64_t dst, uint64_t bytes) {
  if (!bytes) return moecclSuccess;
  if (v->bytes && src_buf == v->src_buf && dst_buf == v->dst_buf && src == v->src + v->bytes &&
      dst == v->dst + v->bytes) {
    v->bytes += bytes;
    return moecclSuccess;
  }
  MOECCL_CHECK(run_flush(v));
  v->src_buf = src_buf, v->src = src, v->dst_buf = dst_buf, v->dst = dst, v->bytes = bytes;
  v->runs++;
  return moecclSuccess;
}

static uint64_t align64(uint64_t x) { return (x + 63) & ~(uint64_t)63; }

typedef struct {
  uint32_t buf;
  uint64_t off, bytes;
} bruck_msg_t;

/* Round k's message: slots with bit k set, in slot order.  A slot none of
 * whose lower bits is set still holds this rank's own block (in the send
 * buffer); any other holds what an earlier round received (in its area).
 * Packs it, or, when it is one run, sets *m to where that run lies. */
static moecclResult_t pack_round(bruck_v_t* v, int k, bruck_msg_t* m) {
  const moeccl_a2a_desc_t* d = v->d;
  int n = d->nranks, r = d->rank, run = 1 << k;
  uint64_t total = 0;
  v->runs = 0, v->bytes = 0;
  for (int start = run; start < n; start += 2 * run) {
    for (int i = start; i < start + run && i < n; i++) {
      int own = (i & (run - 1)) == 0, to = (r + i) % n;
      uint64_t bytes = own ? moeccl_a2a_send_bytes(d, to) : v->slot[i].bytes;
      uint64_t src = own ? moeccl_a2a_send_off(d, to) : v->slot[i].off;
      MOECCL_CHECK(run_add(v, own ? MOECCL_BUF_SEND : MOECCL_BUF_SCRATCH, src, MOECCL_BUF_SCRATCH,
                           PACK_TAG | total, bytes));
      total += bytes;
    }
  }
  *m = (bruck_msg_t){MOECCL_BUF_SCRATCH, PACK_TAG, total};
  if (v->runs == 1) {
    m->buf = v->src_buf, m->off = v->src, v->bytes = 0; /* sent from there, no copy */
    return moecclSuccess;
  }
  if (total > v->pack_max) v->pack_max = total;
  return run_flush(v);
}

/* Receives round k's message from rank - 2^k.  Slot i (bit k set) then
 * holds the block from s = rank - (i mod 2^(k+1)) to s + i, final when
 * i < 2^(k+1).  Records where each lands; the message goes straight to the
 * receive buffer when its blocks are all final and form one run there.
 * Sets *direct to say so. */
static moecclResult_t recv_round(bruck_v_t* v, int k, int* direct) {
  const moeccl_a2a_desc_t* d = v->d;
  int n = d->nranks, r = d->rank, run = 1 << k;
  uint64_t base = align64(v->areas), total = 0, first = 0, end = 0;
  int all_final = 1, final_runs = 0;
  for (int start = run; start < n; start += 2 * run) {
    for (int i = start; i < start + run && i < n; i++) {
      int src = (r - i % (2 * run) + n) % n, dst = (src + i) % n;
      uint64_t bytes = moeccl_a2a_bytes(d, src, dst);
      v->slot[i] = (bruck_slot_t){base + total, bytes};
      total += bytes;
      if (!bytes) continue;
      if (i >= 2 * run) {
        all_final = 0;
        continue;
      }
      uint64_t off = moeccl_a2a_recv_off(d, src);
      if (!final_runs) first = off;
      if (!final_runs || off != end) final_runs++;
      end = off + bytes;
    }
  }
  *direct = all_final && final_runs == 1;
  int from = (r - run % n + n) % n;
  if (*direct)
    return moeccl_sched_add(v->s, MOECCL_OP_RECV, from, 0, 0, MOECCL_BUF_RECV, first, total);
  if (total) v->areas = base + total;
  return moeccl_sched_add(v->s, MOECCL_OP_RECV, from, 0, 0, MOECCL_BUF_SCRATCH, base, total);
}

/* The final blocks round k left in its area (slots 2^k .. 2^(k+1)-1, from
 * rank - i) to their place in the receive buffer. */
static moecclResult_t copy_out_round(bruck_v_t* v, int k) {
  const moeccl_a2a_desc_t* d = v->d;
  int n = d->nranks, r = d->rank;
  v->bytes = 0;
  for (int i = 1 << k; i < 2 << k && i < n; i++)
    MOECCL_CHECK(run_add(v, MOECCL_BUF_SCRATCH, v->slot[i].off, MOECCL_BUF_RECV,
                         moeccl_a2a_recv_off(d, (r - i + n) % n), v->slot[i].bytes));
  return run_flush(v);
}

/* Puts the pack area after the receive areas: rewrites the tagged offsets
 * of ops [first, nops) and sizes scratch. */
static void relocate(bruck_v_t* v, int first) {
  uint64_t pack = align64(v->areas);
  for (int i = first; i < v->s->nops; i++) {
    moeccl_sched_op_t* op = &v->s->ops[i];
    if (op->type != MOECCL_OP_RECV && op->src_buf == MOECCL_BUF_SCRATCH && op->src_off & PACK_TAG)
      op->src_off = pack + (op->src_off & ~PACK_TAG);
    if (op->type != MOECCL_OP_SEND && op->dst_buf == MOECCL_BUF_SCRATCH && op->dst_off & PACK_TAG)
      op->dst_off = pack + (op->dst_off & ~PACK_TAG);
  }
  uint64_t total = v->pack_max ? pack + v->pack_max : v->areas;
  if (total > v->s->scratch_bytes) v->s->scratch_bytes = (size_t)total;
}

/* Steps: self copy, pack 0 | exchange 0 | copy out 0, pack 1 | ... |
 * copy out the last round. */
static moecclResult_t bruck_uneven(const moeccl_a2a_desc_t* d, moeccl_sched_t* s, int rounds) {
  int n = d->nranks, r = d->rank, first = s->nops, direct = 1;
  void* work;
  MOECCL_CHECK(moeccl_sched_workspace(s, (size_t)n * sizeof(bruck_slot_t), &work));
  bruck_v_t v = {.d = d, .s = s, .slot = work};
  MOECCL_CHECK(moeccl_sched_reserve(s, 3 * n + 2 * rounds, 2 * rounds + 1));
  MOECCL_CHECK(moeccl_a2a_add_self_copy(d, s));
  for (int k = 0; k < rounds; k++) {
    bruck_msg_t m;
    if (!direct) MOECCL_CHECK(copy_out_round(&v, k - 1));
    MOECCL_CHECK(pack_round(&v, k, &m));
    MOECCL_CHECK(moeccl_sched_end_step(s));
    MOECCL_CHECK(
        moeccl_sched_add(s, MOECCL_OP_SEND, (r + (1 << k)) % n, m.buf, m.off, 0, 0, m.bytes));
    MOECCL_CHECK(recv_round(&v, k, &direct));
    MOECCL_CHECK(moeccl_sched_end_step(s));
  }
  if (!direct) MOECCL_CHECK(copy_out_round(&v, rounds - 1));
  MOECCL_CHECK(moeccl_sched_end_step(s));
  relocate(&v, first);
  return moecclSuccess;
}

moecclResult_t moeccl_a2a_bruck(const moeccl_a2a_desc_t* d, moeccl_sched_t* s) {
  if (d->send_counts && !d->pair_bytes) return moeccl_a2a_pairwise(d, s);
  int n = d->nranks, r = d->rank, rounds = 0;
  while ((1 << rounds) < n) rounds++;
  if (d->send_counts) return bruck_uneven(d, s, rounds);
  bruck_layout_t L = {.block = d->block_bytes, .slots = 0};
  L.pack = (uint64_t)n * L.block;
  L.unpack = L.pack + (uint64_t)((n + 1) / 2) * L.block;
  s->scratch_bytes = (size_t)(L.unpack + (uint64_t)((n + 1) / 2) * L.block);
  MOECCL_CHECK(moeccl_sched_reserve(s, 4 * n + 2 * rounds, 2 * rounds + 1));
  MOECCL_CHECK(moeccl_a2a_add_self_copy(d, s));
  for (int i = 1; i < n; i++) /* slot i <- block for rank r+i */
    MOECCL_CHECK(moeccl_sched_add(s, MOECCL_OP_COPY, -1, MOECCL_BUF_SEND,
                                  moeccl_a2a_send_off(d, (r + i) % n), MOECCL_BUF_SCRATCH,
                                  (uint64_t)i * L.block, L.block));
  for (int k = 0; k < rounds; k++) {
    MOECCL_CHECK(copy_round(s, &L, n, k, 1));
    MOECCL_CHECK(moeccl_sched_end_step(s));
    uint64_t bytes = round_bytes(&L, n, k);
    int to = (r + (1 << k)) % n, from = (r - (1 << k) % n + n) % n;
    MOECCL_CHECK(moeccl_sched_add(s, MOECCL_OP_SEND, to, MOECCL_BUF_SCRATCH, L.pack, 0, 0, bytes));
    MOECCL_CHECK(
        moeccl_sched_add(s, MOECCL_OP_RECV, from, 0, 0, MOECCL_BUF_SCRATCH, L.unpack, bytes));
    MOECCL_CHECK(moeccl_sched_end_step(s));
    MOECCL_CHECK(copy_round(s, &L, n, k, 0));
  }
  for (int i = 1; i < n; i++) /* slot i now holds the block from rank r-i */
    MOECCL_CHECK(moeccl_sched_add(s, MOECCL_OP_COPY, -1, MOECCL_BUF_SCRATCH, (uint64_t)i * L.block,
                                  MOECCL_BUF_RECV, moeccl_a2a_recv_off(d, (r - i + n) % n),
                                  L.block));
  return moeccl_sched_end_step(s);
}
