/*
 * mp_alltoall.c - moecclAlltoAll on 1..8 forked ranks: every datatype, counts
 * 0 .. 4 MiB per rank, block sizes around the shared-memory eager and chunk
 * limits, 100-200 calls with random sizes and types, repeated calls on one
 * communicator with alternating sizes, unaligned buffers, buffers from
 * moecclMemAlloc (also at offsets inside a region, and freed and allocated
 * again between calls), in place (sendbuff == recvbuff).  Every element is
 * checked, the send buffer must be unchanged and the bytes past the end of
 * the receive buffer must stay untouched.  Re-run under
 * MOECCL_ALGO=direct/pairwise, MOECCL_CMA_DISABLE=1 and tiny shared-memory
 * slots and chunks.  The alternating sizes also run
 * over every network transport and libfabric provider of the build (each
 * rank its own simulated node): ofi shm and tcp, with RMA and with tagged
 * chunks, and ucx.
 */
#include "config.h"

#include <stdlib.h>

#include "mp_harness.h"

#define GUARD_BYTES 256
#define BIG_BYTES_PER_RANK (4u << 20)

typedef struct {
  unsigned char* send;
  unsigned char* recv;
  size_t capacity; /* bytes usable in each, guard not included */
} buffers;

/* One checked alltoall of count elements of dt from send to recv. */
static int alltoall_checked(moecclComm_t comm, int rank, int nranks, moecclDataType_t dt,
                            size_t count, uint64_t seed, unsigned char* send, unsigned char* recv,
                            size_t guard) {
  size_t elsize = mp_dtype_size(dt);
  size_t block = count * elsize, total = block * (size_t)nranks;
  for (int j = 0; j < nranks; j++) mp_fill(send + j * block, elsize, count, seed, rank, j, 0);
  mp_fill_sentinel(recv, total + guard);
  MP_OK_COMM(comm, moecclAlltoAll(send, recv, count, dt, comm, NULL));
  char what[128];
  for (int i = 0; i < nranks; i++) {
    snprintf(what, sizeof(what), "alltoall %s count %zu recv block %d", mp_dtypes[dt].name, count,
             i);
    MP_CHECK_BLOCK(what, recv + i * block, elsize, count, seed, i, rank, 0);
    snprintf(what, sizeof(what), "alltoall %s count %zu send block %d changed", mp_dtypes[dt].name,
             count, i);
    MP_CHECK_BLOCK(what, send + i * block, elsize, count, seed, rank, i, 0);
  }
  snprintf(what, sizeof(what), "alltoall %s count %zu: guard past recvbuff", mp_dtypes[dt].name,
           count);
  MP_CHECK_SENTINEL(what, recv + total, guard);
  return 0;
}

static uint64_t seed_of(int nranks, int step) {
  return mp_mix64(((uint64_t)nranks << 32) ^ (uint64_t)step);
}

/* Every datatype with counts 0, 1, 7, 1000 and 64 KiB worth of elements. */
static int all_types_small(moecclComm_t comm, int rank, int nranks, buffers* b, int* step) {
  for (int t = 0; t < moecclNumTypes; t++) {
    moecclDataType_t dt = mp_dtypes[t].type;
    size_t counts[] = {0, 1, 7, 1000, 65536 / mp_dtypes[t].size};
    for (size_t c = 0; c < sizeof(counts) / sizeof(counts[0]); c++) {
      if (alltoall_checked(comm, rank, nranks, dt, counts[c], seed_of(nranks, (*step)++), b->send,
                           b->recv, GUARD_BYTES))
        return 1;
    }
  }
  return 0;
}

/* count 0 with NULL buffers is a legal no-op. */
static int zero_count_null_buffers(moecclComm_t comm) {
  MP_OK_COMM(comm, moecclAlltoAll(NULL, NULL, 0, moecclFloat32, comm, NULL));
  return 0;
}

/* Up to 4 MiB of send buffer per rank, one aligned and one odd size. */
static int big_sizes(moecclComm_t comm, int rank, int nranks, buffers* b, int* step) {
  size_t c8 = BIG_BYTES_PER_RANK / ((size_t)nranks * 8);
  size_t c1 = (BIG_BYTES_PER_RANK / 4) / (size_t)nranks + 3;
  if (alltoall_checked(comm, rank, nranks, moecclFloat64, c8, seed_of(nranks, (*step)++), b->send,
                       b->recv, GUARD_BYTES))
    return 1;
  return alltoall_checked(comm, rank, nranks, moecclUint8, c1, seed_of(nranks, (*step)++), b->send,
                          b->recv, GUARD_BYTES);
}

/* Ten calls on the same communicator, sizes alternating, seeds changing. */
static int repeated(moecclComm_t comm, int rank, int nranks, buffers* b, int* step) {
  for (int it = 0; it < 10; it++) {
    size_t count = (it % 2) ? 16384 : 1000 + (size_t)it;
    moecclDataType_t dt = (it % 3 == 0)   ? moecclInt32
                          : (it % 3 == 1) ? moecclBfloat16
                                          : moecclUint64;
    if (alltoall_checked(comm, rank, nranks, dt, count, seed_of(nranks, (*step)++), b->send,
                         b->recv, GUARD_BYTES))
      return 1;
  }
  return 0;
}

/* Block sizes that alternate between calls across the network transports'
 * eager and rendezvous paths (280,000 and 4,375 bytes, then both sides of
 * the default eager limits), on one communicator. */
static int alternate(moecclComm_t comm, int rank, int nranks, buffers* b, int* step) {
  /* 1,048,579: past 1 MiB, where ofi over tcp asks for tagged pieces (and
   * within the buffers on 4 ranks) */
  static const size_t bytes[] = {280000, 4375, 280000,  4375, 65536, 65537, 8192,
                                 8191,   280000, 1, 1048579, 4375, 280000, 1048579};
  for (size_t it = 0; it < sizeof(bytes) / sizeof(bytes[0]); it++) {
    size_t count = bytes[it];
    if (count * (size_t)nranks > b->capacity) continue;
    if (alltoall_checked(comm, rank, nranks, moecclUint8, count, seed_of(nranks, (*step)++),
                         b->send, b->recv, GUARD_BYTES))
      return 1;
  }
  return 0;
}

/* Buffers that start at odd addresses (byte-sized elements). */
static int unaligned(moecclComm_t comm, int rank, int nranks, buffers* b, int* step) {
  size_t counts[] = {1, 13, 4099};
  for (size_t c = 0; c < 3; c++)
    if (alltoall_checked(comm, rank, nranks, moecclInt8, counts[c], seed_of(nranks, (*step)++),
                         b->send + 1, b->recv + 3, GUARD_BYTES))
      return 1;
  return 0;
}

/* Send and receive buffers from moecclMemAlloc, and one of each kind mixed. */
static int memalloc_buffers(moecclComm_t comm, int rank, int nranks, buffers* b, int* step) {
  size_t bytes = (size_t)nranks * 65536 + GUARD_BYTES;
  void *send = NULL, *recv = NULL;
  MP_OK_COMM(comm, moecclMemAlloc(&send, bytes));
  MP_OK_COMM(comm, moecclMemAlloc(&recv, bytes));
  MP_CHECK(send && recv, "moecclMemAlloc returned NULL");
  int rc = 0;
  /* 512 bytes and 516 bytes: either side of the single-copy limit for
   * blocks that fit a slot; 16 KiB: the slot size */
  size_t counts[] = {1, 128, 129, 777, 4096, 65536 / 4};
  for (size_t c = 0; c < sizeof(counts) / sizeof(counts[0]) && !rc; c++)
    rc = alltoall_checked(comm, rank, nranks, moecclFloat32, counts[c], seed_of(nranks, (*step)++),
                          send, recv, GUARD_BYTES);
  if (!rc) /* pinned send, ordinary receive */
    rc = alltoall_checked(comm, rank, nranks, moecclFloat16, 5000, seed_of(nranks, (*step)++), send,
                          b->recv, GUARD_BYTES);
  if (!rc) /* ordinary send, pinned receive */
    rc = alltoall_checked(comm, rank, nranks, moecclUint64, 3000, seed_of(nranks, (*step)++),
                          b->send, recv, GUARD_BYTES);
  MP_OK_COMM(comm, moecclMemFree(send));
  MP_OK_COMM(comm, moecclMemFree(recv));
  return rc;
}

/* Block sizes around the shared-memory limits (eager size 16 KiB, chunk 1 MiB
 * by default), byte-sized elements, in fresh buffers. */
static int boundaries(moecclComm_t comm, int rank, int nranks, int* step) {
  size_t counts[] = {16383, 16384, 16385, 16384 * 2 + 1, 1048575, 1048576, 1048577};
  for (size_t c = 0; c < sizeof(counts) / sizeof(counts[0]); c++) {
    if (nranks > 4 && counts[c] > 65536) continue; /* keep memory modest on many ranks */
    size_t total = counts[c] * (size_t)nranks;
    unsigned char* send = mp_xmalloc(total);
    unsigned char* recv = mp_xmalloc(total + GUARD_BYTES);
    int rc = alltoall_checked(comm, rank, nranks, moecclUint8, counts[c],
                              seed_of(nranks, (*step)++), send, recv, GUARD_BYTES);
    free(send);
    free(recv);
    if (rc) return 1;
  }
  return 0;
}

/* Many calls with sizes and datatypes drawn from a shared seed (log-uniform
 * block sizes up to 64 KiB), every one checked. */
static int stress(moecclComm_t comm, int rank, int nranks, buffers* b, int* step) {
  mp_rng rng;
  mp_rng_seed(&rng, 0x57E55 + (uint64_t)nranks);
  int iters = nranks > 4 ? 100 : 200;
  for (int it = 0; it < iters; it++) {
    const mp_dtype_info* d = &mp_dtypes[mp_rng_below(&rng, moecclNumTypes)];
    size_t bytes = (size_t)1 << mp_rng_below(&rng, 17);
    bytes += mp_rng_below(&rng, bytes);
    size_t count = bytes / d->size;
    if (alltoall_checked(comm, rank, nranks, d->type, count, seed_of(nranks, (*step)++), b->send,
                         b->recv, GUARD_BYTES))
      return 1;
  }
  return 0;
}

/* moecclMemAlloc memory freed and allocated again (often at the same address,
 * but a new segment): a peer that cached the old mapping would write into
 * the old one.  Also buffers that start inside a moecclMemAlloc region. */
static int memalloc_reuse(moecclComm_t comm, int rank, int nranks, int* step) {
  size_t big = 65536 / 4 + 5, bytes = big * 4 * (size_t)nranks + 8192 + GUARD_BYTES;
  for (int round = 0; round < 8; round++) {
    size_t count = round < 6 ? big : 300; /* the last two: blocks that fit a slot */
    void *send = NULL, *recv = NULL;
    MP_OK_COMM(comm, moecclMemAlloc(&send, bytes));
    MP_OK_COMM(comm, moecclMemAlloc(&recv, bytes));
    size_t soff = (round % 2) ? 4096 + 12 : 0, roff = (round % 4 >= 2) ? 8192 - 4 : 0;
    int rc =
        alltoall_checked(comm, rank, nranks, moecclFloat32, count, seed_of(nranks, (*step)++),
                         (unsigned char*)send + soff, (unsigned char*)recv + roff, GUARD_BYTES);
    MP_OK_COMM(comm, moecclMemFree(recv));
    MP_OK_COMM(comm, moecclMemFree(send));
    MP_CHECK(!rc, "moecclMemAlloc round %d (offsets %zu, %zu) failed", round, soff, roff);
  }
  return 0;
}

/* In place (sendbuff == recvbuff, as nccl-tests' alltoall_perf calls it):
 * block j of buf goes to rank j, and block i is replaced by what rank i
 * sent; the bytes past the n blocks stay untouched.  stream: NULL or a
 * host stream; with other, in a group with an out-of-place call of the same
 * shape on other's buffers. */
static int inplace_checked(moecclComm_t comm, int rank, int nranks, moecclDataType_t dt,
                           size_t count, uint64_t seed, unsigned char* buf, moecclStream_t stream,
                           buffers* other) {
  size_t elsize = mp_dtype_size(dt), block = count * elsize, total = block * (size_t)nranks;
  for (int j = 0; j < nranks; j++) mp_fill(buf + j * block, elsize, count, seed, rank, j, 0);
  mp_fill_sentinel(buf + total, GUARD_BYTES);
  if (other) { /* in a group with an out-of-place call of the same shape */
    for (int j = 0; j < nranks; j++)
      mp_fill(other->send + j * block, elsize, count, ~seed, rank, j, 0);
    MP_OK_COMM(comm, moecclGroupStart());
    MP_OK_COMM(comm, moecclAlltoAll(buf, buf, count, dt, comm, NULL));
    MP_OK_COMM(comm, moecclAlltoAll(other->send, other->recv, count, dt, comm, NULL));
    MP_OK_COMM(comm, moecclGroupEnd());
  } else {
    MP_OK_COMM(comm, moecclAlltoAll(buf, buf, count, dt, comm, stream));
    if (stream) MP_OK_COMM(comm, moecclHostStreamSynchronize(stream));
  }
  char what[128];
  for (int i = 0; i < nranks; i++) {
    snprintf(what, sizeof(what), "in-place alltoall %s count %zu block %d", mp_dtypes[dt].name,
             count, i);
    MP_CHECK_BLOCK(what, buf + i * block, elsize, count, seed, i, rank, 0);
    if (other) MP_CHECK_BLOCK(what, other->recv + i * block, elsize, count, ~seed, i, rank, 0);
  }
  snprintf(what, sizeof(what), "in-place alltoall %s count %zu: guard past the blocks",
           mp_dtypes[dt].name, count);
  MP_CHECK_SENTINEL(what, buf + total, GUARD_BYTES);
  return 0;
}

/* In place: every datatype at small counts, 4 MiB per rank, an odd
 * address, repeats of one call (the unbuilt schedule) with out-of-place
 * calls on the same pointers between them. */
static int in_place_sizes(moecclComm_t comm, int rank, int nranks, buffers* b, int* step) {
  for (int t = 0; t < moecclNumTypes; t++) {
    size_t counts[] = {0, 1, 7, 1000, 65536 / mp_dtypes[t].size};
    for (size_t c = 0; c < sizeof(counts) / sizeof(counts[0]); c++)
      if (inplace_checked(comm, rank, nranks, mp_dtypes[t].type, counts[c],
                          seed_of(nranks, (*step)++), b->recv, NULL, NULL))
        return 1;
  }
  size_t big = BIG_BYTES_PER_RANK / ((size_t)nranks * 8);
  if (inplace_checked(comm, rank, nranks, moecclFloat64, big, seed_of(nranks, (*step)++), b->recv,
                      NULL, NULL) ||
      inplace_checked(comm, rank, nranks, moecclInt8, 4099, seed_of(nranks, (*step)++), b->send + 3,
                      NULL, NULL))
    return 1;
  for (int it = 0; it < 6; it++) { /* repeats, and out of place between them */
    if (inplace_checked(comm, rank, nranks, moecclInt32, 3000, seed_of(nranks, (*step)++), b->recv,
                        NULL, NULL))
      return 1;
    if (it % 3 == 2 && alltoall_checked(comm, rank, nranks, moecclInt32, 3000,
                                        seed_of(nranks, (*step)++), b->send, b->recv, GUARD_BYTES))
      return 1;
  }
  return 0;
}

/* In place: a moecclMemAlloc buffer (which peers map), a host stream, ranks
 * that mix in-place and out-of-place buffers in one call, and a group. */
static int in_place_paths(moecclComm_t comm, int rank, int nranks, buffers* b, int* step) {
  void* pinned = NULL;
  MP_OK_COMM(comm, moecclMemAlloc(&pinned, (size_t)nranks * 65536 + GUARD_BYTES));
  int rc = 0;
  size_t counts[] = {1, 129, 4096, 65536 / 4};
  for (size_t c = 0; c < sizeof(counts) / sizeof(counts[0]) && !rc; c++)
    rc = inplace_checked(comm, rank, nranks, moecclFloat32, counts[c], seed_of(nranks, (*step)++),
                         pinned, NULL, NULL);
  MP_OK_COMM(comm, moecclMemFree(pinned));
  if (rc) return 1;
  moecclStream_t st = NULL;
  MP_OK_COMM(comm, moecclHostStreamCreate(&st));
  rc = inplace_checked(comm, rank, nranks, moecclFloat16, 5000, seed_of(nranks, (*step)++), b->recv,
                       st, NULL);
  MP_OK_COMM(comm, moecclHostStreamDestroy(st));
  if (rc) return 1;
  rc = rank % 2 ? alltoall_checked(comm, rank, nranks, moecclFloat32, 777, seed_of(nranks, *step),
                                   b->send, b->recv, GUARD_BYTES)
                : inplace_checked(comm, rank, nranks, moecclFloat32, 777, seed_of(nranks, *step),
                                  b->recv, NULL, NULL);
  (*step)++;
  if (rc) return 1;
  unsigned char* single = mp_xmalloc((size_t)nranks * 2000 * 8 + GUARD_BYTES);
  buffers other = {mp_xmalloc((size_t)nranks * 2000 * 8), mp_xmalloc((size_t)nranks * 2000 * 8), 0};
  rc = inplace_checked(comm, rank, nranks, moecclUint64, 2000, seed_of(nranks, (*step)++), single,
                       NULL, &other);
  free(single);
  free(other.send);
  free(other.recv);
  return rc;
}

static int body(moecclComm_t comm, int rank, int nranks, void* arg) {
  (void)arg;
  buffers b;
  b.capacity = BIG_BYTES_PER_RANK + 16 * (size_t)nranks + 64;
  if (b.capacity < (size_t)nranks * 65536 + 64) b.capacity = (size_t)nranks * 65536 + 64;
  b.send = mp_xmalloc(b.capacity + GUARD_BYTES);
  b.recv = mp_xmalloc(b.capacity + GUARD_BYTES);
  int step = 0, rc = 0;
  if (!rc && mp_want("types")) rc = all_types_small(comm, rank, nranks, &b, &step);
  if (!rc && mp_want("zero")) rc = zero_count_null_buffers(comm);
  if (!rc && mp_want("big")) rc = big_sizes(comm, rank, nranks, &b, &step);
  if (!rc && mp_want("repeated")) rc = repeated(comm, rank, nranks, &b, &step);
  if (!rc && mp_want("alternate")) rc = alternate(comm, rank, nranks, &b, &step);
  if (!rc && mp_want("unaligned")) rc = unaligned(comm, rank, nranks, &b, &step);
  if (!rc && mp_want("memalloc")) rc = memalloc_buffers(comm, rank, nranks, &b, &step);
  if (!rc && mp_want("memreuse")) rc = memalloc_reuse(comm, rank, nranks, &step);
  if (!rc && mp_want("boundaries")) rc = boundaries(comm, rank, nranks, &step);
  if (!rc && mp_want("stress")) rc = stress(comm, rank, nranks, &b, &step);
  if (!rc && mp_want("inplace")) rc = in_place_sizes(comm, rank, nranks, &b, &step);
  if (!rc && mp_want("inplace")) rc = in_place_paths(comm, rank, nranks, &b, &step);
  free(b.send);
  free(b.recv);
  return rc;
}

/* The same checks under other algorithms and shared-memory settings. */
static const mp_variant variants[] = {
    {"algo-direct", {"MOECCL_ALGO=direct"}, "3,4"},
    {"algo-pairwise", {"MOECCL_ALGO=pairwise"}, "3,5"},
    {"algo-bruck", {"MOECCL_ALGO=bruck"}, "2,3,5,8"},
    {"no-cma", {"MOECCL_CMA_DISABLE=1"}, "3"},
    {"small-shm",
     {"MOECCL_SHM_EAGER_SIZE=256", "MOECCL_SHM_SLOTS=2", "MOECCL_SHM_CHUNK_SIZE=40000"},
     "4"},
    {"nt-copy", {"MOECCL_NT_COPY_SIZE=1"}, "2,3"},
    /* moecclMemAlloc blocks that fit a slot through the slots (by default
     * the receiver copies them once) */
    {"map-small-off", {"MOECCL_SHM_MAP_SMALL_DISABLE=1", "MP_SUBTESTS=memalloc,memreuse"}, "2,4"},
    {NULL, {NULL}, NULL},
};

/* Sizes alternating across the eager and rendezvous paths of each network
 * transport and provider (libfabric 1.17's shm provider lost rendezvous
 * headers that arrived before their receive; 4 ranks stalled every time). */
static const mp_variant net_variants[] = {
#ifdef MOECCL_HAVE_LIBFABRIC
    {"alt-ofi-shm",
     {"MOECCL_NET=ofi", "MOECCL_OFI_PROVIDER=shm", "MP_RANKS_PER_NODE=1", "MP_SUBTESTS=alternate"},
     "2,4"},
    {"alt-ofi-shm-tagged",
     {"MOECCL_NET=ofi", "MOECCL_OFI_PROVIDER=shm", "MOECCL_OFI_RMA_DISABLE=1",
      "MP_RANKS_PER_NODE=1", "MP_SUBTESTS=alternate"},
     "4"},
    {"alt-ofi-shm-eager4k",
     {"MOECCL_NET=ofi", "MOECCL_OFI_PROVIDER=shm", "MOECCL_NET_EAGER_SIZE=4096",
      "MP_RANKS_PER_NODE=1", "MP_SUBTESTS=alternate"},
     "4"},
    /* "tcp": the native TCP provider where libfabric has one ("net" in
     * 1.17); "tcp;ofi_rxm": the rxm layering, which "tcp" was before */
    {"alt-ofi-tcp",
     {"MOECCL_NET=ofi", "MOECCL_OFI_PROVIDER=tcp", "MP_RANKS_PER_NODE=1", "MP_SUBTESTS=alternate"},
     "2,4"},
    {"alt-ofi-tcp-rxm",
     {"MOECCL_NET=ofi", "MOECCL_OFI_PROVIDER=tcp;ofi_rxm", "MP_RANKS_PER_NODE=1",
      "MP_SUBTESTS=alternate"},
     "2,4"},
    {"alt-ofi-tcp-rxm-chunk4k",
     {"MOECCL_NET=ofi", "MOECCL_OFI_PROVIDER=tcp;ofi_rxm", "MOECCL_NET_CHUNK_SIZE=4096",
      "MP_RANKS_PER_NODE=1", "MP_SUBTESTS=alternate"},
     "4"},
    /* 69 writes per 280,000-byte block: the receiver counts 69 remote
     * completions (write data), or FIN follows a window of writes */
    {"alt-ofi-tcp-chunk4k",
     {"MOECCL_NET=ofi", "MOECCL_OFI_PROVIDER=tcp", "MOECCL_NET_CHUNK_SIZE=4096",
      "MP_RANKS_PER_NODE=1", "MP_SUBTESTS=alternate"},
     "2,4"},
    {"alt-ofi-tcp-fin",
     {"MOECCL_NET=ofi", "MOECCL_OFI_PROVIDER=tcp", "MOECCL_OFI_WRITEDATA_DISABLE=1",
      "MP_RANKS_PER_NODE=1", "MP_SUBTESTS=alternate"},
     "2,4"},
    {"alt-ofi-tcp-chunk4k-fin",
     {"MOECCL_NET=ofi", "MOECCL_OFI_PROVIDER=tcp", "MOECCL_NET_CHUNK_SIZE=4096",
      "MOECCL_OFI_WRITEDATA_DISABLE=1", "MP_RANKS_PER_NODE=1", "MP_SUBTESTS=alternate"},
     "4"},
    {"alt-ofi-shm-chunk4k",
     {"MOECCL_NET=ofi", "MOECCL_OFI_PROVIDER=shm", "MOECCL_NET_CHUNK_SIZE=4096",
      "MP_RANKS_PER_NODE=1", "MP_SUBTESTS=alternate"},
     "4"},
    {"alt-ofi-tcp-tagged",
     {"MOECCL_NET=ofi", "MOECCL_OFI_PROVIDER=tcp", "MOECCL_OFI_RMA_DISABLE=1",
      "MP_RANKS_PER_NODE=1", "MP_SUBTESTS=alternate"},
     "4"},
#endif
#ifdef MOECCL_HAVE_UCX
    {"alt-ucx", {"MOECCL_NET=ucx", "MP_RANKS_PER_NODE=1", "MP_SUBTESTS=alternate"}, "2,4"},
    {"alt-ucx-tcp",
     {"MOECCL_NET=ucx", "UCX_TLS=tcp,self", "MP_RANKS_PER_NODE=1", "MP_SUBTESTS=alternate"},
     "4"},
#endif
    {NULL, {NULL}, NULL},
};

int main(int argc, char** argv) {
  int rc = mp_main(argc, argv, mp_default_ranks, body, NULL, 120, variants);
  rc = mp_fold(rc, mp_run_variants(argc, argv, net_variants, 120));
  return mp_fold(rc, mp_run_variants(argc, argv, mp_topo_variants, 120));
}
