/* Bruck all-to-all (Bruck et al., 1997): ceil(log2 n) exchange rounds instead
 * of n-1, for small blocks where per-message latency dominates.  Round k
 * sends to rank+2^k every block whose slot index has bit k set, packed into
 * one message; each block travels a distance equal to its slot index.
 *
 * Layout in scratch: slots (n blocks, slot i first holds the block for rank
 * r+i) | pack area | unpack area (each ceil(n/2) blocks).  Steps: rotate
 * into slots and pack round 0 | exchange 0 | unpack 0, pack 1 | ... |
 * unpack the last round and rotate out.  Copy-only steps finish at once, and
 * copies within a step run in order, so unpacking round k before packing
 * round k+1 in one step is safe.
 *
 * Uniform blocks only: an alltoallv's block sizes at other ranks are not
 * known here, so v-calls use the pairwise schedule. */
#include "algos.h"

#define CHECK(call)                                                                                \
  do {                                                                                             \
    moecclResult_t rc_ = (call);                                                                   \
    if (rc_ != moecclSuccess) return rc_;                                                          \
  } while (0)

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
      CHECK(moeccl_sched_add(s, MOECCL_OP_COPY, -1, MOECCL_BUF_SCRATCH, slot, MOECCL_BUF_SCRATCH,
                             area, bytes));
    else
      CHECK(moeccl_sched_add(s, MOECCL_OP_COPY, -1, MOECCL_BUF_SCRATCH, area, MOECCL_BUF_SCRATCH,
                             slot, bytes));
    packed += bytes;
  }
  return moecclSuccess;
}

static uint64_t round_bytes(const bruck_layout_t* L, int n, int k) {
  uint64_t count = 0;
  for (int i = 1; i < n; i++) count += (i & (1 << k)) != 0;
  return count * L->block;
}

moecclResult_t moeccl_a2a_bruck(const moeccl_a2a_desc_t* d, moeccl_sched_t* s) {
  if (d->send_counts) return moeccl_a2a_pairwise(d, s);
  int n = d->nranks, r = d->rank, rounds = 0;
  while ((1 << rounds) < n) rounds++;
  bruck_layout_t L = {.block = d->block_bytes, .slots = 0};
  L.pack = (uint64_t)n * L.block;
  L.unpack = L.pack + (uint64_t)((n + 1) / 2) * L.block;
  s->scratch_bytes = (size_t)(L.unpack + (uint64_t)((n + 1) / 2) * L.block);
  CHECK(moeccl_sched_reserve(s, 4 * n + 2 * rounds, 2 * rounds + 1));
  CHECK(moeccl_a2a_add_self_copy(d, s));
  for (int i = 1; i < n; i++) /* slot i <- block for rank r+i */
    CHECK(moeccl_sched_add(s, MOECCL_OP_COPY, -1, MOECCL_BUF_SEND,
                           moeccl_a2a_send_off(d, (r + i) % n), MOECCL_BUF_SCRATCH,
                           (uint64_t)i * L.block, L.block));
  for (int k = 0; k < rounds; k++) {
    CHECK(copy_round(s, &L, n, k, 1));
    CHECK(moeccl_sched_end_step(s));
    uint64_t bytes = round_bytes(&L, n, k);
    int to = (r + (1 << k)) % n, from = (r - (1 << k) % n + n) % n;
    CHECK(moeccl_sched_add(s, MOECCL_OP_SEND, to, MOECCL_BUF_SCRATCH, L.pack, 0, 0, bytes));
    CHECK(moeccl_sched_add(s, MOECCL_OP_RECV, from, 0, 0, MOECCL_BUF_SCRATCH, L.unpack, bytes));
    CHECK(moeccl_sched_end_step(s));
    CHECK(copy_round(s, &L, n, k, 0));
  }
  for (int i = 1; i < n; i++) /* slot i now holds the block from rank r-i */
    CHECK(moeccl_sched_add(s, MOECCL_OP_COPY, -1, MOECCL_BUF_SCRATCH, (uint64_t)i * L.block,
                           MOECCL_BUF_RECV, moeccl_a2a_recv_off(d, (r - i + n) % n), L.block));
  return moeccl_sched_end_step(s);
}
