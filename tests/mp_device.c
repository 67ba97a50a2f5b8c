/*
 * mp_device.c - device buffers between the ranks of one node (the same-node
 * GPU path: shared-memory transport, descriptors passed over Unix sockets,
 * the copy engine), on 2..4 forked ranks of one device.  MOECCL_DEVICE
 * defaults to emu (the host emulation of the device seam, so this runs in
 * CI); MOECCL_DEVICE=cuda runs the same checks on a GPU.  The test touches
 * device memory only through the device seam's stream copies.
 *
 *   a2a       moecclAlltoAll on moecclMemAllocDevice buffers: 0, 1, 1000
 *             elements and blocks past the shared-memory eager size, several
 *             datatypes; send buffers unchanged, bytes past the receive
 *             buffer untouched
 *   a2av      moecclAlltoAllv: uneven blocks, zero blocks, gaps, buffers at
 *             an offset inside their allocation
 *   p2p       grouped send/recv ring shifts device to device, host to
 *             device and device to host, and every pair at once
 *   coll      the copy-only collectives on device buffers: AllGather,
 *             Broadcast (out of place and in place), Gather and Scatter,
 *             each root
 *   reuse     many calls over a few allocations and fresh ones (the
 *             receivers' import caches: hits, misses, evictions)
 *   stream    calls on a device stream: each returns at once and runs in
 *             the stream's order: with the stream held at a gate (a flag
 *             the test writes), the receive buffer is untouched after the
 *             call returned; once the gate opens, the send buffer the
 *             stream filled before the call is what arrives, and a copy
 *             queued after the call reads the result; a group of
 *             send/recv and an all-to-all follow on the same stream
 *   reduce    the reductions on device buffers (the copy engine and the
 *             device kernels, the C twins on the emulation): AllReduce
 *             (float sum, int32 max, int32 Avg, a PreMulSum, in place),
 *             ReduceScatter, Reduce to every root, and AllReduce and
 *             ReduceScatter from device inputs into host results, with
 *             exact values; on device buffers only, kernels run and no
 *             byte goes through host memory (counted and printed)
 *   moe       MoE dispatch, combine, dispatch backward and combine
 *             backward (expert rows and gate gradients in device memory)
 *             on device token and row buffers give bit for bit what they
 *             give on host buffers (the same plans, -1 slots included;
 *             float32 and bfloat16; the NULL stream and a device stream),
 *             by kernels with no byte through host memory; on the stream
 *             path each call is counted before the stream ran it (no host
 *             wait, kernels, stream memory operations, copies: printed,
 *             docs/ARCHITECTURE.md quotes them); 40 calls of two layouts
 *             queued back to back (more than the ring of pinned buffers
 *             for the row programs holds, the caller's weights scribbled
 *             on as each call returns) give the host's results; gate
 *             weights in device memory give the same; the combine backward
 *             with expert rows and gate gradients in host memory (the host
 *             path) gives the same; one in each kind, and device ones
 *             beside host token buffers, are refused with a text
 *   devscalar AllReduce, ReduceScatter and Reduce by PreMulSum ops whose
 *             scalar is device memory, queued on a device stream held at a
 *             gate, the scalar rewritten on the stream between the calls:
 *             each scales by the value the stream gave it before the call;
 *             on the stream path lowered, no host wait (counted)
 *   refused   moecclMemAllocDevice of a bad device, moecclMemFree of a
 *             device pointer, a made-up stream
 *   flood     rank 1 sends rank 0 more device messages (14) than a Unix
 *             socket queues by default (net.unix.max_dgram_qlen, 10 here)
 *             while rank 0 first waits for one from rank 2, whose
 *             descriptor must get into the same queue: rank 0 drains its
 *             socket whenever descriptors wait, not only when it needs one
 *   counts    the structure of a repeated all-to-all on the same buffers, on
 *             the NULL stream (lowered by the ipc transport): per call and
 *             rank, the stream memory operations and copies queued, and no
 *             descriptor passed, no allocation mapped, no system call, no
 *             host function (thread hop) and no host wait for a stream;
 *             the counts are printed (docs/ARCHITECTURE.md quotes them)
 *   lowred    AllReduce, ReduceScatter and Reduce (to every root) on device
 *             buffers, every datatype x sum, prod, max, min, Avg and
 *             PreMulSum (by 3), out of place and in place, lowered onto
 *             the stream: bit for bit the host direct algorithm's fold
 *             (the owner's input, then the next ranks' in turn, by the
 *             host kernels), and per call, counted before the stream ran
 *             it, no host wait and one fold kernel (two with integer
 *             Avg's division); a few calls' counts are printed
 *             (docs/ARCHITECTURE.md quotes them)
 *   killed    (a run of its own, 3 ranks) rank 1 hands over its part of a
 *             device all-to-all whose turn its stream never reaches, and
 *             dies (SIGKILL): the survivors' streams, which wait for it, are
 *             let go within seconds (the ipc watchdog), their next call
 *             fails naming rank 1, and destroy returns
 *   disagree  (two runs of their own, 2 ranks) rank 1 passes another
 *             hidden size to a MoE dispatch, then in the second run to a
 *             combine backward, on device buffers: both ranks' calls fail
 *             at once with a text saying the ranks disagree, the
 *             communicator is broken, destroy returns
 *   mixed     (a run of its own, 2 ranks, MOECCL_TIMEOUT=3) rank 0 passes
 *             the combine backward's expert rows and gate gradients in
 *             device memory (the stream path), rank 1 in host memory (the
 *             host path): both calls fail within the timeout, the
 *             communicator is broken on both, none hangs,
 *             destroy returns
 *   nodes     (variant two-nodes: 2 simulated nodes) a collective on device
 *             buffers is refused on every rank with a text naming a peer on
 *             the other node, and the communicator goes on; send/recv of
 *             device buffers between the ranks of one node works
 *
 * Variants: random delays in the emulated streams; two slots per pair
 * (device messages wait for ring space and for their descriptors); and
 * allocations that export only legacy IPC handles, as cudaMalloc memory
 * does (MOECCL_DEVICE_EMU_LEGACY: the handle travels instead of a
 * descriptor); and the bruck all-to-all, whose steps go through the
 * communicator's scratch buffer (device memory for device calls), and
 * the reductions under the ring and tree algorithms; and kernels that do
 * not load (MOECCL_DEVICE_EMU_NO_KERNELS: the reductions and the MoE calls
 * take the host path and stage through host memory, the same results);
 * and one rank (the MoE calls and a device scalar with no peer).
 */
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include "device/device.h"
#include "exec/executor.h"
#include "kernels/devkern.h"
#include "kernels/mem.h"
#include "kernels/reduce.h"
#include "moeccl_moe.h"
#include "mp_harness.h"
#include "transport/transport.h"

#define GUARD 256

static const moeccl_device_ops_t* D;

static uint64_t seed_of(int n, int test, int k) {
  return mp_mix64(((uint64_t)n << 48) ^ ((uint64_t)test << 24) ^ (uint64_t)k ^ 0xDE71CE);
}

/* Host <-> device through the seam (the only way the test touches device
 * memory), after the legacy default stream's work: calls on the NULL stream
 * are queued there and return, as with NCCL, so the test synchronizes it
 * as a CUDA program would (cudaStreamSynchronize(0)). */
static int to_dev(void* dst, const void* src, size_t bytes) {
  if (D->synchronize(NULL) != moecclSuccess) return -1;
  return moeccl_device_copy(dst, src, bytes) == moecclSuccess ? 0 : -1;
}
#define from_dev to_dev

static void* dev_alloc(moecclComm_t comm, size_t bytes) {
  void* p = NULL;
  if (moecclMemAllocDevice(&p, bytes, 0) != moecclSuccess) {
    mp_failf(__FILE__, __LINE__, "moecclMemAllocDevice(%zu): %s", bytes, mp_last_error_text(comm));
    return NULL;
  }
  return p;
}

/* Fills the device range dst like mp_fill would fill host memory. */
static int dev_fill(void* dst, size_t elsize, size_t n, uint64_t seed, int src, int to) {
  unsigned char* h = mp_xmalloc(elsize * n + 1);
  mp_fill(h, elsize, n, seed, src, to, 0);
  int rc = to_dev(dst, h, elsize * n);
  free(h);
  return rc;
}

static int dev_sentinel(void* dst, size_t bytes) {
  unsigned char* h = mp_xmalloc(bytes + 1);
  mp_fill_sentinel(h, bytes);
  int rc = to_dev(dst, h, bytes);
  free(h);
  return rc;
}

/* A host copy of a device range, which the caller frees. */
static unsigned char* dev_read(const void* src, size_t bytes) {
  unsigned char* h = mp_xmalloc(bytes + 1);
  if (from_dev(h, src, bytes) != 0) {
    free(h);
    return NULL;
  }
  return h;
}

static int a2a_round(moecclComm_t comm, int rank, int n, moecclDataType_t dt, size_t count,
                     uint64_t seed) {
  size_t es = mp_dtype_size(dt), block = count * es, total = block * (size_t)n;
  unsigned char* s = dev_alloc(comm, total + GUARD);
  unsigned char* r = dev_alloc(comm, total + GUARD);
  MP_CHECK(s && r, "no device memory");
  for (int j = 0; j < n; j++) MP_CHECK(dev_fill(s + j * block, es, count, seed, rank, j) == 0, "fill");
  MP_CHECK(dev_sentinel(r, total + GUARD) == 0, "sentinel");
  MP_OK_COMM(comm, moecclAlltoAll(s, r, count, dt, comm, NULL));
  unsigned char* hr = dev_read(r, total + GUARD);
  unsigned char* hs = dev_read(s, total);
  MP_CHECK(hr && hs, "reading device memory back failed");
  char what[160];
  for (int i = 0; i < n; i++) {
    snprintf(what, sizeof(what), "device alltoall %s count %zu from rank %d", mp_dtypes[dt].name, count, i);
    MP_CHECK_BLOCK(what, hr + i * block, es, count, seed, i, rank, 0);
    snprintf(what, sizeof(what), "device alltoall %s count %zu: send block %d changed", mp_dtypes[dt].name,
             count, i);
    MP_CHECK_BLOCK(what, hs + i * block, es, count, seed, rank, i, 0);
  }
  snprintf(what, sizeof(what), "device alltoall count %zu: guard past recvbuff", count);
  MP_CHECK_SENTINEL(what, hr + total, GUARD);
  free(hr);
  free(hs);
  MP_OK_COMM(comm, moecclMemFree(s));
  MP_OK_COMM(comm, moecclMemFree(r));
  return 0;
}

static int a2a(moecclComm_t comm, int rank, int n) {
  const struct {
    moecclDataType_t dt;
    size_t count;
  } rounds[] = {{moecclFloat32, 0},     {moecclFloat32, 1},       {moecclInt8, 1000},
                {moecclBfloat16, 40000}, {moecclFloat32, 70000}, {moecclUint64, 3}};
  for (size_t i = 0; i < sizeof(rounds) / sizeof(rounds[0]); i++)
    if (a2a_round(comm, rank, n, rounds[i].dt, rounds[i].count, seed_of(n, 1, (int)i))) return 1;
  return 0;
}

/* Elements src sends to dst: uneven, some zero. */
static size_t v_count(uint64_t seed, int src, int dst) {
  uint64_t h = mp_mix64(seed ^ ((uint64_t)(src + 1) << 20) ^ (uint64_t)(dst + 1));
  return h % 4 == 0 ? 0 : 1 + (h >> 8) % 50000;
}

static int a2av(moecclComm_t comm, int rank, int n) {
  for (int round = 0; round < 3; round++) {
    uint64_t seed = seed_of(n, 2, round);
    size_t sc[8], sd[8], rc[8], rd[8], spos = 7, rpos = 13; /* start off the allocation's base */
    for (int p = 0; p < n; p++) {
      sc[p] = v_count(seed, rank, p), rc[p] = v_count(seed, p, rank);
      sd[p] = spos, spos += sc[p] + (size_t)p; /* gaps */
      rd[p] = rpos, rpos += rc[p] + 3;
    }
    unsigned char* s = dev_alloc(comm, spos * 4);
    unsigned char* r = dev_alloc(comm, rpos * 4 + GUARD);
    MP_CHECK(s && r, "no device memory");
    for (int p = 0; p < n; p++) MP_CHECK(dev_fill(s + sd[p] * 4, 4, sc[p], seed, rank, p) == 0, "fill");
    MP_CHECK(dev_sentinel(r, rpos * 4 + GUARD) == 0, "sentinel");
    MP_OK_COMM(comm, moecclAlltoAllv(s, sc, sd, r, rc, rd, moecclFloat32, comm, NULL));
    unsigned char* hr = dev_read(r, rpos * 4 + GUARD);
    MP_CHECK(hr, "reading device memory back failed");
    char what[160];
    size_t expect_end = 13 * 4;
    for (int p = 0; p < n; p++) {
      snprintf(what, sizeof(what), "device alltoallv round %d block from rank %d (%zu elements)", round, p, rc[p]);
      MP_CHECK_BLOCK(what, hr + rd[p] * 4, 4, rc[p], seed, p, rank, 0);
      snprintf(what, sizeof(what), "device alltoallv round %d: gap after block from rank %d", round, p);
      MP_CHECK_SENTINEL(what, hr + (rd[p] + rc[p]) * 4, 12);
      expect_end = (rd[p] + rc[p]) * 4 + 12;
    }
    MP_CHECK_SENTINEL("device alltoallv: head before the first block", hr, 13 * 4);
    MP_CHECK(expect_end <= rpos * 4 + GUARD, "layout");
    free(hr);
    MP_OK_COMM(comm, moecclMemFree(s));
    MP_OK_COMM(comm, moecclMemFree(r));
  }
  return 0;
}

/* In place on device buffers: alltoall, then alltoallv with the send blocks
 * after the receive blocks' start (overlapping), gaps kept. */
static int inplace(moecclComm_t comm, int rank, int n) {
  size_t counts[] = {1, 1000, 70000};
  for (int k = 0; k < 3; k++) {
    uint64_t seed = seed_of(n, 9, k);
    size_t count = counts[k], block = count * 4, total = block * (size_t)n;
    unsigned char* b = dev_alloc(comm, total + GUARD);
    MP_CHECK(b, "no device memory");
    for (int j = 0; j < n; j++)
      MP_CHECK(dev_fill(b + j * block, 4, count, seed, rank, j) == 0, "fill");
    MP_CHECK(dev_sentinel(b + total, GUARD) == 0, "sentinel");
    MP_OK_COMM(comm, moecclAlltoAll(b, b, count, moecclFloat32, comm, NULL));
    unsigned char* h = dev_read(b, total + GUARD);
    MP_CHECK(h, "read");
    for (int i = 0; i < n; i++)
      MP_CHECK_BLOCK("device in-place alltoall", h + i * block, 4, count, seed, i, rank, 0);
    MP_CHECK_SENTINEL("device in-place alltoall guard", h + total, GUARD);
    free(h);
    MP_OK_COMM(comm, moecclMemFree(b));
  }
  for (int round = 0; round < 3; round++) {
    uint64_t seed = seed_of(n, 10, round);
    size_t sc[8], sd[8], rc[8], rd[8], rpos = 5, spos;
    for (int p = 0; p < n; p++) rc[p] = v_count(seed, p, rank), rd[p] = rpos, rpos += rc[p] + 3;
    spos = rpos / 2 * (size_t)round / 2 + 1;
    for (int p = 0; p < n; p++) sc[p] = v_count(seed, rank, p), sd[p] = spos, spos += sc[p] + 2;
    size_t bytes = (spos > rpos ? spos : rpos) * 4 + GUARD;
    unsigned char* host = mp_xmalloc(bytes);
    mp_fill_sentinel(host, bytes);
    for (int p = 0; p < n; p++) mp_fill(host + sd[p] * 4, 4, sc[p], seed, rank, p, 0);
    unsigned char* b = dev_alloc(comm, bytes);
    MP_CHECK(b && to_dev(b, host, bytes) == 0, "device buffer");
    MP_OK_COMM(comm, moecclAlltoAllv(b, sc, sd, b, rc, rd, moecclFloat32, comm, NULL));
    unsigned char* h = dev_read(b, bytes);
    MP_CHECK(h, "read");
    for (int p = 0; p < n; p++) {
      MP_CHECK_BLOCK("device in-place alltoallv", h + rd[p] * 4, 4, rc[p], seed, p, rank, 0);
      memcpy(h + rd[p] * 4, host + rd[p] * 4, rc[p] * 4);
    }
    MP_CHECK(memcmp(h, host, bytes) == 0,
             "device in-place alltoallv: bytes outside the receive blocks changed");
    free(h), free(host);
    MP_OK_COMM(comm, moecclMemFree(b));
  }
  return 0;
}

/* One ring shift: send from src_dev? device : host, receive into dst_dev? device : host. */
static int shift(moecclComm_t comm, int rank, int n, int src_dev, int dst_dev, size_t count, uint64_t seed) {
  int next = (rank + 1) % n, prev = (rank + n - 1) % n;
  size_t bytes = count * 4;
  unsigned char* s = src_dev ? dev_alloc(comm, bytes + 1) : mp_xmalloc(bytes + 1);
  unsigned char* r = dst_dev ? dev_alloc(comm, bytes + GUARD) : mp_xmalloc(bytes + GUARD);
  MP_CHECK(s && r, "no memory");
  if (src_dev) MP_CHECK(dev_fill(s, 4, count, seed, rank, next) == 0, "fill");
  else mp_fill(s, 4, count, seed, rank, next, 0);
  if (dst_dev) MP_CHECK(dev_sentinel(r, bytes + GUARD) == 0, "sentinel");
  else mp_fill_sentinel(r, bytes + GUARD);
  MP_OK_COMM(comm, moecclGroupStart());
  MP_OK_COMM(comm, moecclSend(s, count, moecclFloat32, next, comm, NULL));
  MP_OK_COMM(comm, moecclRecv(r, count, moecclFloat32, prev, comm, NULL));
  MP_OK_COMM(comm, moecclGroupEnd());
  unsigned char* hr = dst_dev ? dev_read(r, bytes + GUARD) : r;
  MP_CHECK(hr, "reading device memory back failed");
  char what[160];
  snprintf(what, sizeof(what), "ring shift %s -> %s, %zu floats", src_dev ? "device" : "host",
           dst_dev ? "device" : "host", count);
  MP_CHECK_BLOCK(what, hr, 4, count, seed, prev, rank, 0);
  MP_CHECK_SENTINEL(what, hr + bytes, GUARD);
  if (dst_dev) {
    free(hr);
    MP_OK_COMM(comm, moecclMemFree(r));
  } else {
    free(r);
  }
  if (src_dev) MP_OK_COMM(comm, moecclMemFree(s));
  else free(s);
  return 0;
}

static int p2p(moecclComm_t comm, int rank, int n) {
  const size_t counts[] = {3, 5000, 300000};
  for (int c = 0; c < 3; c++)
    for (int mode = 0; mode < 3; mode++) /* dev->dev, host->dev, dev->host */
      if (shift(comm, rank, n, mode != 1, mode != 2, counts[c], seed_of(n, 3, c * 3 + mode))) return 1;
  /* Every pair at once, self included, in one group. */
  size_t count = 20000, bytes = count * 4;
  unsigned char* s = dev_alloc(comm, bytes * (size_t)n);
  unsigned char* r = dev_alloc(comm, bytes * (size_t)n);
  MP_CHECK(s && r, "no device memory");
  uint64_t seed = seed_of(n, 3, 99);
  for (int p = 0; p < n; p++) MP_CHECK(dev_fill(s + p * bytes, 4, count, seed, rank, p) == 0, "fill");
  MP_OK_COMM(comm, moecclGroupStart());
  for (int k = 0; k < n; k++) {
    int to = (rank + k) % n, from = (rank - k + n) % n;
    MP_OK_COMM(comm, moecclSend(s + to * bytes, count, moecclFloat32, to, comm, NULL));
    MP_OK_COMM(comm, moecclRecv(r + from * bytes, count, moecclFloat32, from, comm, NULL));
  }
  MP_OK_COMM(comm, moecclGroupEnd());
  unsigned char* hr = dev_read(r, bytes * (size_t)n);
  MP_CHECK(hr, "reading device memory back failed");
  for (int p = 0; p < n; p++) MP_CHECK_BLOCK("all pairs, device", hr + p * bytes, 4, count, seed, p, rank, 0);
  free(hr);
  MP_OK_COMM(comm, moecclMemFree(s));
  MP_OK_COMM(comm, moecclMemFree(r));
  return 0;
}

static int coll(moecclComm_t comm, int rank, int n) {
  size_t count = 20000, bytes = count * 4, all = bytes * (size_t)n;
  unsigned char* s = dev_alloc(comm, all);
  unsigned char* r = dev_alloc(comm, all + GUARD);
  MP_CHECK(s && r, "no device memory");
  char what[96];
  uint64_t seed = seed_of(n, 7, 0);
  /* AllGather: block i of r is rank i's s. */
  MP_CHECK(dev_fill(s, 4, count, seed, rank, -1) == 0 && dev_sentinel(r, all + GUARD) == 0, "fill");
  MP_OK_COMM(comm, moecclAllGather(s, r, count, moecclFloat32, comm, NULL));
  unsigned char* h = dev_read(r, all + GUARD);
  MP_CHECK(h, "reading device memory back failed");
  for (int i = 0; i < n; i++) {
    snprintf(what, sizeof(what), "device AllGather block %d", i);
    MP_CHECK_BLOCK(what, h + i * bytes, 4, count, seed, i, -1, 0);
  }
  MP_CHECK_SENTINEL("device AllGather guard", h + all, GUARD);
  free(h);
  for (int root = 0; root < n; root++) {
    uint64_t sd = seed_of(n, 7, 1 + root);
    /* Broadcast, out of place, then in place. */
    if (rank == root) MP_CHECK(dev_fill(s, 4, count, sd, root, -2) == 0, "fill");
    MP_CHECK(dev_sentinel(r, bytes + GUARD) == 0, "sentinel");
    MP_OK_COMM(comm, moecclBroadcast(s, r, count, moecclFloat32, root, comm, NULL));
    MP_OK_COMM(comm, moecclBcast(r, count, moecclFloat32, root, comm, NULL));
    h = dev_read(r, bytes + GUARD);
    MP_CHECK(h, "reading device memory back failed");
    snprintf(what, sizeof(what), "device Broadcast from root %d", root);
    MP_CHECK_BLOCK(what, h, 4, count, sd, root, -2, 0);
    MP_CHECK_SENTINEL(what, h + bytes, GUARD);
    free(h);
    /* Gather into the root, then Scatter back from it. */
    MP_CHECK(dev_fill(s, 4, count, sd, rank, root) == 0, "fill");
    if (rank == root) MP_CHECK(dev_sentinel(r, all + GUARD) == 0, "sentinel");
    /* off the root the receive buffer is unused, and NULL (as NCCL allows) */
    MP_OK_COMM(comm,
               moecclGather(s, rank == root ? r : NULL, count, moecclFloat32, root, comm, NULL));
    if (rank == root) {
      h = dev_read(r, all + GUARD);
      MP_CHECK(h, "reading device memory back failed");
      for (int i = 0; i < n; i++) {
        snprintf(what, sizeof(what), "device Gather to root %d, block %d", root, i);
        MP_CHECK_BLOCK(what, h + i * bytes, 4, count, sd, i, root, 0);
      }
      free(h);
      for (int i = 0; i < n; i++) MP_CHECK(dev_fill(r + i * bytes, 4, count, sd + 1, root, i) == 0, "fill");
    }
    MP_CHECK(dev_sentinel(s, bytes) == 0, "sentinel");
    MP_OK_COMM(comm,
               moecclScatter(rank == root ? r : NULL, s, count, moecclFloat32, root, comm, NULL));
    h = dev_read(s, bytes);
    MP_CHECK(h, "reading device memory back failed");
    snprintf(what, sizeof(what), "device Scatter from root %d", root);
    MP_CHECK_BLOCK(what, h, 4, count, sd + 1, root, rank, 0);
    free(h);
  }
  MP_OK_COMM(comm, moecclMemFree(s));
  MP_OK_COMM(comm, moecclMemFree(r));
  return 0;
}

/* A device send/recv exchange with peer (both ways, one group). */
static int shift2(moecclComm_t comm, int rank, int peer, void* s, void* r, size_t count, uint64_t seed) {
  MP_CHECK(dev_fill(s, 4, count, seed, rank, peer) == 0, "fill");
  MP_OK_COMM(comm, moecclGroupStart());
  MP_OK_COMM(comm, moecclSend(s, count, moecclFloat32, peer, comm, NULL));
  MP_OK_COMM(comm, moecclRecv(r, count, moecclFloat32, peer, comm, NULL));
  MP_OK_COMM(comm, moecclGroupEnd());
  unsigned char* h = dev_read(r, count * 4);
  MP_CHECK(h, "reading device memory back failed");
  MP_CHECK_BLOCK("same-node device send/recv on two nodes", h, 4, count, seed, peer, rank, 0);
  free(h);
  return 0;
}

/* Calls over a few long-lived allocations at varying offsets, and over
 * fresh ones: more distinct allocations than a receiver caches. */
static int reuse(moecclComm_t comm, int rank, int n) {
  enum { KEEP = 3 };
  size_t count = 3000, bytes = count * 4 * (size_t)n;
  unsigned char* keep[KEEP];
  for (int k = 0; k < KEEP; k++) MP_CHECK((keep[k] = dev_alloc(comm, bytes + 4096)) != NULL, "no device memory");
  unsigned char* r = dev_alloc(comm, bytes);
  MP_CHECK(r, "no device memory");
  for (int it = 0; it < 40; it++) {
    uint64_t seed = seed_of(n, 4, it);
    int fresh = it % 2 == 1;
    unsigned char* base = fresh ? dev_alloc(comm, bytes + 4096) : keep[it % KEEP];
    MP_CHECK(base, "no device memory");
    unsigned char* s = base + (size_t)(it % 7) * 512;
    for (int p = 0; p < n; p++) MP_CHECK(dev_fill(s + p * count * 4, 4, count, seed, rank, p) == 0, "fill");
    MP_OK_COMM(comm, moecclAlltoAll(s, r, count, moecclFloat32, comm, NULL));
    unsigned char* hr = dev_read(r, bytes);
    MP_CHECK(hr, "reading device memory back failed");
    char what[96];
    for (int p = 0; p < n; p++) {
      snprintf(what, sizeof(what), "reuse #%d (%s) from rank %d", it, fresh ? "fresh" : "kept", p);
      MP_CHECK_BLOCK(what, hr + p * count * 4, 4, count, seed, p, rank, 0);
    }
    free(hr);
    if (fresh) MP_OK_COMM(comm, moecclMemFree(base));
  }
  for (int k = 0; k < KEEP; k++) MP_OK_COMM(comm, moecclMemFree(keep[k]));
  MP_OK_COMM(comm, moecclMemFree(r));
  return 0;
}

static int on_stream(moecclComm_t comm, int rank, int n) {
  size_t count = 30000, bytes = count * 4 * (size_t)n;
  uint64_t seed = seed_of(n, 6, 0), one = 1;
  void* st = NULL;
  MP_CHECK(D->stream_create(&st) == moecclSuccess, "no device stream");
  uint64_t* gate = dev_alloc(comm, 8);
  unsigned char* s = dev_alloc(comm, bytes);
  unsigned char* r = dev_alloc(comm, bytes + GUARD);
  MP_CHECK(gate && s && r, "no device memory");
  /* Pinned host memory, as a CUDA program needs for copies queued behind a
   * wait: from pageable memory cuMemcpyAsync first waits for the stream's
   * earlier work (here the gate this thread opens later), which hung this
   * test on an H200; the emulation does the same. */
  unsigned char *pattern = NULL, *out = NULL;
  MP_CHECK(D->host_alloc((void**)&pattern, bytes) == moecclSuccess &&
               D->host_alloc((void**)&out, bytes + GUARD) == moecclSuccess,
           "no pinned host memory");
  for (int p = 0; p < n; p++) mp_fill(pattern + p * count * 4, 4, count, seed, rank, p, 0);
  MP_CHECK(dev_sentinel(s, bytes) == 0 && dev_sentinel(r, bytes + GUARD) == 0, "sentinel");
  MP_CHECK(to_dev(gate, &(uint64_t){0}, 8) == 0, "gate");
  /* Held at the gate: the send buffer is filled on the stream, after it. */
  MP_CHECK(D->wait_value(st, (volatile uint64_t*)gate, 1) == moecclSuccess, "gate wait");
  MP_CHECK(D->copy_async(s, pattern, bytes, st) == moecclSuccess, "copy");
  MP_OK_COMM(comm, moecclAlltoAll(s, r, count, moecclFloat32, comm, st));
  MP_CHECK(D->copy_async(out, r, bytes + GUARD, st) == moecclSuccess, "copy back");
  unsigned char* early = dev_read(r, bytes + GUARD);
  MP_CHECK(early, "reading device memory back failed");
  MP_CHECK_SENTINEL("the receive buffer while the stream is held before the call", early, bytes + GUARD);
  free(early);
  MP_CHECK(to_dev(gate, &one, 8) == 0, "opening the gate");
  MP_CHECK(D->synchronize(st) == moecclSuccess, "stream synchronize");
  char what[96];
  for (int p = 0; p < n; p++) {
    snprintf(what, sizeof(what), "alltoall on a device stream, from rank %d", p);
    MP_CHECK_BLOCK(what, out + p * count * 4, 4, count, seed, p, rank, 0);
  }
  MP_CHECK_SENTINEL("alltoall on a device stream: guard", out + bytes, GUARD);
  /* A group of send/recv, then an all-to-all, both queued before either runs. */
  int next = (rank + 1) % n, prev = (rank + n - 1) % n;
  uint64_t seed2 = seed_of(n, 6, 1);
  mp_fill(pattern, 4, count, seed2, rank, next, 0);
  MP_CHECK(D->copy_async(s, pattern, count * 4, st) == moecclSuccess, "copy");
  MP_OK_COMM(comm, moecclGroupStart());
  MP_OK_COMM(comm, moecclSend(s, count, moecclFloat32, next, comm, st));
  MP_OK_COMM(comm, moecclRecv(r, count, moecclFloat32, prev, comm, st));
  MP_OK_COMM(comm, moecclGroupEnd());
  MP_OK_COMM(comm, moecclAlltoAll(r, s, count / (size_t)n, moecclFloat32, comm, st));
  MP_CHECK(D->copy_async(out, s, count / (size_t)n * 4 * (size_t)n, st) == moecclSuccess, "copy back");
  MP_CHECK(D->synchronize(st) == moecclSuccess, "stream synchronize");
  /* s now holds, from each rank p, block `rank` of what p received from p-1. */
  size_t blk = count / (size_t)n;
  for (int p = 0; p < n; p++) {
    int orig = (p + n - 1) % n;
    snprintf(what, sizeof(what), "send/recv then alltoall on a device stream, via rank %d", p);
    MP_CHECK_BLOCK(what, out + p * blk * 4, 4, blk, seed2, orig, p, (size_t)rank * blk);
  }
  moecclResult_t async = moecclSuccess;
  MP_OK_COMM(comm, moecclCommGetAsyncError(comm, &async));
  MP_CHECK(async == moecclSuccess, "async error %d after the stream calls", (int)async);
  MP_CHECK(D->stream_destroy(st) == moecclSuccess, "stream destroy");
  D->host_free(pattern);
  D->host_free(out);
  MP_OK_COMM(comm, moecclMemFree(gate));
  MP_OK_COMM(comm, moecclMemFree(s));
  MP_OK_COMM(comm, moecclMemFree(r));
  return 0;
}

/* Rank r's element i: small integers, so every sum is exact in float. */
static int32_t val(int r, size_t i) { return (int32_t)(i % 7) + r; }

static int check_i32(const char* what, const int32_t* got, size_t n, size_t off, int32_t (*want)(size_t, int),
                     int nr) {
  for (size_t i = 0; i < n; i++)
    MP_CHECK(got[i] == want(off + i, nr), "%s: element %zu is %d, want %d", what, off + i, (int)got[i],
             (int)want(off + i, nr));
  return 0;
}
static int32_t want_sum(size_t i, int n) { return (int32_t)(n * (int)(i % 7) + n * (n - 1) / 2); }
static int32_t want_max(size_t i, int n) { return (int32_t)(i % 7) + n - 1; }
static int32_t want_avg(size_t i, int n) { return want_sum(i, n) / n; }
static int32_t want_premul(size_t i, int n) { return 3 * want_sum(i, n); }

/* What the device memory kind and the emulation did in this process. */
typedef struct {
  moeccl_mem_device_counts_t mem;
  moeccl_device_emu_counts_t emu;
} kcount_t;

static void kc_snap(kcount_t* k) {
  moeccl_mem_device_counts(&k->mem);
  moeccl_device_emu_counts(&k->emu);
}

/* Since *a: kernels ran, nothing was staged in host memory; rank 0 prints
 * the counts.  Where the kernels did not load (the no-kernels variant) the
 * device memory kind staged the operands through host memory instead, and
 * no kernel ran. */
static int kc_report(const char* what, int rank, int n, const kcount_t* a, int calls) {
  kcount_t b;
  kc_snap(&b);
  unsigned long long launches = b.mem.launches - a->mem.launches;
  unsigned long long staged = b.mem.staged_bytes - a->mem.staged_bytes;
  unsigned long long syncs = b.emu.syncs - a->emu.syncs;
  if (rank == 0)
    printf("kernels: %s, rank 0 of %d, %d calls: %llu kernels launched, %llu bytes staged through "
           "host memory, %llu host waits for a stream\n",
           what, n, calls, launches, staged, syncs);
  if (!moeccl_devkern_ready()) {
    MP_CHECK(launches == 0 && staged > 0, "%s without kernels: %llu launched, %llu bytes staged",
             what, launches, staged);
    return 0;
  }
  MP_CHECK(launches > 0, "%s: no kernel launched", what);
  MP_CHECK(staged == 0, "%s: %llu bytes went through host memory", what, staged);
  return 0;
}

static int reduce(moecclComm_t comm, int rank, int n) {
  size_t count = 70000, bytes = count * 4;
  int32_t* hi = mp_xmalloc(bytes);
  float* hf = mp_xmalloc(bytes);
  for (size_t i = 0; i < count; i++) hi[i] = val(rank, i), hf[i] = (float)val(rank, i);
  void* s = dev_alloc(comm, bytes);
  void* r = dev_alloc(comm, bytes);
  MP_CHECK(s && r, "no device memory");
  int32_t* out = mp_xmalloc(bytes);
  kcount_t k0;
  kc_snap(&k0);
  /* float sum */
  MP_CHECK(to_dev(s, hf, bytes) == 0, "fill");
  MP_OK_COMM(comm, moecclAllReduce(s, r, count, moecclFloat32, moecclSum, comm, NULL));
  MP_CHECK(from_dev(out, r, bytes) == 0, "read");
  for (size_t i = 0; i < count; i++)
    MP_CHECK(((float*)out)[i] == (float)want_sum(i, n), "device AllReduce float sum: element %zu is %g, want %d",
             i, (double)((float*)out)[i], (int)want_sum(i, n));
  /* int32 max, int32 Avg (a division), in place */
  MP_CHECK(to_dev(s, hi, bytes) == 0, "fill");
  MP_OK_COMM(comm, moecclAllReduce(s, r, count, moecclInt32, moecclMax, comm, NULL));
  MP_CHECK(from_dev(out, r, bytes) == 0, "read");
  if (check_i32("device AllReduce int32 max", out, count, 0, want_max, n)) return 1;
  MP_CHECK(to_dev(r, hi, bytes) == 0, "fill");
  MP_OK_COMM(comm, moecclAllReduce(r, r, count, moecclInt32, moecclAvg, comm, NULL));
  MP_CHECK(from_dev(out, r, bytes) == 0, "read");
  if (check_i32("device AllReduce int32 avg in place", out, count, 0, want_avg, n)) return 1;
  /* PreMulSum by 3 (a scaling) */
  int32_t three = 3;
  moecclRedOp_t op;
  MP_OK_COMM(comm, moecclRedOpCreatePreMulSum(&op, &three, moecclInt32, moecclScalarHostImmediate, comm));
  MP_CHECK(to_dev(s, hi, bytes) == 0, "fill");
  MP_OK_COMM(comm, moecclAllReduce(s, r, count, moecclInt32, op, comm, NULL));
  MP_OK_COMM(comm, moecclRedOpDestroy(op, comm));
  MP_CHECK(from_dev(out, r, bytes) == 0, "read");
  if (check_i32("device AllReduce int32 PreMulSum(3)", out, count, 0, want_premul, n)) return 1;
  /* ReduceScatter: block `rank` of the sum. */
  size_t per = count / (size_t)n;
  MP_OK_COMM(comm, moecclReduceScatter(s, r, per, moecclInt32, moecclSum, comm, NULL));
  MP_CHECK(from_dev(out, r, per * 4) == 0, "read");
  if (check_i32("device ReduceScatter int32 sum", out, per, (size_t)rank * per, want_sum, n)) return 1;
  if (kc_report("AllReduce x4, ReduceScatter on device buffers", rank, n, &k0, 5)) return 1;
  /* Device inputs, host results: peers' device messages reduced into host memory. */
  int32_t* hr = mp_xmalloc(bytes);
  MP_OK_COMM(comm, moecclAllReduce(s, hr, count, moecclInt32, moecclSum, comm, NULL));
  if (check_i32("AllReduce int32 sum, device input, host result", hr, count, 0, want_sum, n)) return 1;
  MP_OK_COMM(comm, moecclReduceScatter(s, hr, per, moecclInt32, moecclSum, comm, NULL));
  if (check_i32("ReduceScatter int32 sum, device input, host result", hr, per, (size_t)rank * per, want_sum, n))
    return 1;
  free(hr);
  /* Reduce to every root. */
  kc_snap(&k0);
  for (int root = 0; root < n; root++) {
    MP_OK_COMM(comm, moecclReduce(s, r, count, moecclInt32, moecclSum, root, comm, NULL));
    if (rank != root) continue;
    MP_CHECK(from_dev(out, r, bytes) == 0, "read");
    char what[64];
    snprintf(what, sizeof(what), "device Reduce int32 sum to root %d", root);
    if (check_i32(what, out, count, 0, want_sum, n)) return 1;
  }
  if (n > 1 && kc_report("Reduce to every root on device buffers", rank, n, &k0, n)) return 1;
  free(hi), free(hf), free(out);
  MP_OK_COMM(comm, moecclMemFree(s));
  MP_OK_COMM(comm, moecclMemFree(r));
  return 0;
}

/* ---- lowred: reductions lowered onto the stream ---------------------------- */

static const moecclDataType_t lr_types[] = {moecclInt8,    moecclUint8,    moecclInt32,
                                            moecclUint32,  moecclInt64,    moecclUint64,
                                            moecclFloat16, moecclFloat32,  moecclFloat64,
                                            moecclBfloat16, moecclFloat8e4m3, moecclFloat8e5m2};
enum { LR_SUM, LR_PROD, LR_MAX, LR_MIN, LR_AVG, LR_PREMUL, LR_NOPS };
static const char* const lr_op_name[LR_NOPS] = {"sum", "prod", "max", "min", "avg", "premulsum"};

static int lr_floating(moecclDataType_t t) { return t >= moecclFloat16; }

/* Rank r's elements: random bits, for the floating types with the top
 * exponent bit clear (finite, below 2 in magnitude: no NaN payloads). */
static void lr_fill(unsigned char* h, moecclDataType_t t, size_t es, size_t n, uint64_t seed,
                    int r) {
  for (size_t i = 0; i < n; i++) {
    uint64_t v = mp_pattern(seed, r, 0, i);
    if (lr_floating(t)) v &= ~((uint64_t)1 << (8 * es - 2));
    memcpy(h + i * es, &v, es);
  }
}

/* The reduction an op gives on n ranks, as the library sets it up. */
static void lr_red(moeccl_red_t* red, moecclDataType_t t, int op, int n, const void* scalar) {
  static const moeccl_red_op_t kop[LR_NOPS] = {MOECCL_RED_SUM, MOECCL_RED_PROD, MOECCL_RED_MAX,
                                               MOECCL_RED_MIN, MOECCL_RED_SUM,  MOECCL_RED_SUM};
  moeccl_red_init(red, t, kop[op]);
  if (op == LR_AVG && lr_floating(t)) moeccl_red_set_premul_inverse(red, n);
  if (op == LR_AVG && !lr_floating(t)) red->postdiv = n;
  if (op == LR_PREMUL) moeccl_red_set_premul(red, scalar);
}

/* want[i] for i in [lo, hi): the host direct algorithm's fold, owner o's
 * own input first, then o+1, ..., o+n-1 (mod n), by the host kernels. */
static void lr_expect(const moeccl_red_t* red, unsigned char* want, unsigned char* const* in, int n,
                      int o, size_t lo, size_t hi) {
  size_t es = red->elem_size, off = lo * es;
  if (hi <= lo) return;
  moeccl_reduce(red, want + off, in[o] + off, in[(o + 1) % n] + off, hi - lo,
                MOECCL_OPF_PRE_A | MOECCL_OPF_PRE_B);
  for (int k = 2; k < n; k++)
    moeccl_reduce(red, want + off, want + off, in[(o + k) % n] + off, hi - lo, MOECCL_OPF_PRE_B);
  moeccl_reduce_postdiv(red, want + off, hi - lo);
}

/* Slice p of count over n (coll_slices: the first count % n one more). */
static size_t lr_slice(size_t count, int n, int p) {
  size_t q = count / (size_t)n, r = count % (size_t)n;
  return (size_t)p * q + ((size_t)p < r ? (size_t)p : r);
}

typedef struct {
  moeccl_device_emu_counts_t emu;
  uint64_t launches;
} lr_snap_t;

static void lr_take(lr_snap_t* s) {
  moeccl_device_emu_counts(&s->emu);
  moeccl_mem_device_counts_t m;
  moeccl_mem_device_counts(&m);
  s->launches = m.launches;
}

enum { LR_ALLREDUCE, LR_REDUCESCATTER, LR_REDUCE };
static const char* const lr_coll_name[] = {"AllReduce", "ReduceScatter", "Reduce"};

/* One call of coll on device buffers (in place or not), its counts before
 * the stream ran it (on the emulation: no host wait, the kernels and
 * stream operations it queued), and its result against the fold. */
/* How lr_call calls: on a device stream of its own (else NULL), and for
 * Reduce with no receive buffer off the root, and with one element (most
 * ranks' slices are empty: their ops drop out). */
enum { LR_ON_STREAM = 1, LR_NULL_RECV = 2, LR_TINY = 4 };

static int lr_call(moecclComm_t comm, int rank, int n, int coll, moecclDataType_t t, int op,
                   int inplace, int root, uint64_t seed, int report, int how) {
  size_t es = t == moecclInt8 || t == moecclUint8 || t >= moecclFloat8e4m3 ? 1
              : t == moecclFloat16 || t == moecclBfloat16                 ? 2
              : t == moecclInt32 || t == moecclUint32 || t == moecclFloat32 ? 4
                                                                            : 8;
  size_t count = how & LR_TINY ? 1 : coll == LR_REDUCESCATTER ? 257 : 1003; /* uneven slices */
  size_t in_n = coll == LR_REDUCESCATTER ? count * (size_t)n : count;
  size_t out_n = count;
  unsigned char** in = mp_xmalloc(sizeof(*in) * (size_t)n);
  for (int p = 0; p < n; p++) {
    in[p] = mp_xmalloc(in_n * es);
    lr_fill(in[p], t, es, in_n, seed, p);
  }
  uint64_t scalar = 0;
  if (op == LR_PREMUL) { /* 3, in the type */
    float f = 3.0f;
    double d = 3.0;
    uint16_t h = moeccl_float_to_half(3.0f), bf = 0x4040; /* bfloat16 3 */
    uint8_t e4 = 0x44, e5 = 0x42;                         /* float8 e4m3 and e5m2 3 */
    if (t == moecclFloat32) memcpy(&scalar, &f, 4);
    else if (t == moecclFloat64) memcpy(&scalar, &d, 8);
    else if (t == moecclFloat16) memcpy(&scalar, &h, 2);
    else if (t == moecclBfloat16) memcpy(&scalar, &bf, 2);
    else if (t == moecclFloat8e4m3) memcpy(&scalar, &e4, 1);
    else if (t == moecclFloat8e5m2) memcpy(&scalar, &e5, 1);
    else scalar = 3; /* little-endian: 3 in every integer width */
  }
  moeccl_red_t red;
  lr_red(&red, t, op, n, &scalar);
  static const moecclRedOp_t builtin[LR_PREMUL] = {moecclSum, moecclProd, moecclMax, moecclMin,
                                                   moecclAvg};
  moecclRedOp_t rop = op == LR_PREMUL ? moecclSum : builtin[op];
  if (op == LR_PREMUL)
    MP_OK_COMM(comm, moecclRedOpCreatePreMulSum(&rop, &scalar, t, moecclScalarHostImmediate, comm));
  /* device buffers: in place, the input sits where NCCL says */
  size_t in_bytes = in_n * es, out_bytes = out_n * es;
  size_t whole = in_bytes > out_bytes ? in_bytes : out_bytes;
  void* sb = dev_alloc(comm, whole);
  void* rb = inplace ? sb : dev_alloc(comm, out_bytes);
  MP_CHECK(sb && rb, "no device memory");
  MP_CHECK(to_dev(sb, in[rank], in_bytes) == 0, "fill");
  void* recv = coll == LR_REDUCESCATTER && inplace ? (char*)sb + (size_t)rank * out_bytes : rb;
  if ((how & LR_NULL_RECV) && rank != root) recv = NULL;
  void* st = NULL;
  if (how & LR_ON_STREAM) MP_CHECK(D->stream_create(&st) == moecclSuccess, "no device stream");
  lr_snap_t a, b;
  lr_take(&a);
  moecclResult_t rc;
  if (coll == LR_ALLREDUCE) rc = moecclAllReduce(sb, recv, count, t, rop, comm, st);
  else if (coll == LR_REDUCESCATTER) rc = moecclReduceScatter(sb, recv, count, t, rop, comm, st);
  else rc = moecclReduce(sb, recv, count, t, rop, root, comm, st);
  lr_take(&b);
  MP_OK_COMM(comm, rc);
  if (st) {
    MP_CHECK(D->synchronize(st) == moecclSuccess, "sync");
    MP_CHECK(D->stream_destroy(st) == moecclSuccess, "stream destroy");
  }
  if (op == LR_PREMUL) MP_OK_COMM(comm, moecclRedOpDestroy(rop, comm));
  char what[160];
  snprintf(what, sizeof what, "%s %s type %d%s%s%s%s%s", lr_coll_name[coll], lr_op_name[op], (int)t,
           inplace ? " in place" : "", coll == LR_REDUCE ? (root ? " root>0" : " root 0") : "",
           how & LR_ON_STREAM ? " on a device stream" : "",
           how & LR_NULL_RECV ? " (no receive buffer off the root)" : "",
           how & LR_TINY ? " (1 element)" : "");
  if (D == &moeccl_device_emu_ops) {
    uint64_t syncs = b.emu.syncs - a.emu.syncs, k = b.launches - a.launches;
    uint64_t memops = b.emu.memops - a.emu.memops, copies = b.emu.copies - a.emu.copies;
    if (report && rank == 0)
      printf("lowred: %s, rank 0 of %d: %llu host waits, %llu kernels, %llu stream memory "
             "operations, %llu copies\n",
             what, n, (unsigned long long)syncs, (unsigned long long)k, (unsigned long long)memops,
             (unsigned long long)copies);
    MP_CHECK(syncs == 0, "%s: the host waited for a stream %llu times", what,
             (unsigned long long)syncs);
    MP_CHECK(k == b.emu.launches - a.emu.launches, "%s: launches not on the emulated stream", what);
    /* direct: one fold kernel for the reduce-scatter part (n <= 16), and
     * integer Avg's division */
    int folds = !(how & LR_TINY) || coll == LR_REDUCESCATTER || rank == 0; /* slice 0 only */
    uint64_t want_k = (uint64_t)folds + (red.postdiv != 0 && (coll != LR_REDUCE || rank == root));
    MP_CHECK(k == want_k, "%s: %llu kernels launched, want %llu", what, (unsigned long long)k,
             (unsigned long long)want_k);
  }
  unsigned char* got = mp_xmalloc(out_bytes);
  unsigned char* want = mp_xmalloc(out_bytes);
  int check = coll != LR_REDUCE || rank == root;
  if (check) MP_CHECK(from_dev(got, recv, out_bytes) == 0, "read");
  if (coll == LR_REDUCESCATTER) {
    for (int p = 0; p < n; p++) /* block rank of the vector, its owner rank */
      if (p == rank) {
        moeccl_reduce(&red, want, in[rank] + (size_t)rank * out_bytes,
                      in[(rank + 1) % n] + (size_t)rank * out_bytes, count,
                      MOECCL_OPF_PRE_A | MOECCL_OPF_PRE_B);
        for (int k = 2; k < n; k++)
          moeccl_reduce(&red, want, want, in[(rank + k) % n] + (size_t)rank * out_bytes, count,
                        MOECCL_OPF_PRE_B);
        moeccl_reduce_postdiv(&red, want, count);
      }
  } else {
    for (int o = 0; o < n; o++)
      lr_expect(&red, want, in, n, o, lr_slice(count, n, o), lr_slice(count, n, o + 1));
  }
  for (size_t i = 0; check && i < out_bytes; i++)
    MP_CHECK(got[i] == want[i], "%s on %d ranks: byte %zu (element %zu) is %02x, want %02x", what,
             n, i, i / es, got[i], want[i]);
  free(got), free(want);
  for (int p = 0; p < n; p++) free(in[p]);
  free(in);
  MP_OK_COMM(comm, moecclMemFree(sb));
  if (rb != sb) MP_OK_COMM(comm, moecclMemFree(rb));
  return 0;
}

/* Every datatype x op of AllReduce, ReduceScatter and Reduce (to every
 * root), out of place and in place: lowered with no host wait where the
 * stream path takes them, and bit for bit the host direct algorithm's
 * fold. */
static int lowred(moecclComm_t comm, int rank, int n) {
  /* the stream path's direct fold only (the host path picks its own
   * algorithms, part reduce checks it) */
  if (moeccl_peer_stream_transport(comm, (rank + 1) % n) < 0) return 0;
  const char* forced[] = {"MOECCL_ALLREDUCE_ALGO", "MOECCL_REDUCESCATTER_ALGO",
                          "MOECCL_REDUCE_ALGO"};
  for (int i = 0; i < 3; i++)
    if (getenv(forced[i]) && *getenv(forced[i])) return 0;
  int ntypes = (int)(sizeof lr_types / sizeof lr_types[0]);
  for (int ti = 0; ti < ntypes; ti++)
    for (int op = 0; op < LR_NOPS; op++)
      for (int coll = LR_ALLREDUCE; coll <= LR_REDUCE; coll++)
        for (int inplace = 0; inplace < 2; inplace++)
          for (int root = 0; root < (coll == LR_REDUCE ? n : 1); root++) {
            uint64_t seed = seed_of(n, 40 + coll, (uint64_t)(ti * 16 + op * 2 + inplace));
            int report = !inplace && root == 0 &&
                         ((lr_types[ti] == moecclFloat32 && op == LR_SUM) ||
                          (lr_types[ti] == moecclInt32 && op == LR_AVG));
            if (lr_call(comm, rank, n, coll, lr_types[ti], op, inplace, root, seed, report, 0))
              return 1;
          }
  for (int root = 0; root < n; root++)
    if (lr_call(comm, rank, n, LR_REDUCE, moecclFloat32, LR_SUM, 0, root, seed_of(n, 43, 0), 0,
                LR_NULL_RECV))
      return 1;
  for (int coll = LR_ALLREDUCE; coll <= LR_REDUCE; coll++)
    if (lr_call(comm, rank, n, coll, moecclBfloat16, LR_AVG, 0, n - 1, seed_of(n, 44, 0), 0,
                LR_ON_STREAM) ||
        lr_call(comm, rank, n, coll, moecclInt32, LR_AVG, coll == LR_ALLREDUCE, n - 1,
                seed_of(n, 45, 0), 0, LR_TINY))
      return 1;
  return 0;
}

/* A buffer of bytes on the device holding what host holds. */
static void* dev_copy_of(moecclComm_t comm, const void* host, size_t bytes) {
  void* d = dev_alloc(comm, bytes + 1);
  if (d && to_dev(d, host, bytes) != 0) return NULL;
  return d;
}

/* One MoE layout of a part: its plan, the router's output, and the three
 * calls' results on host buffers (the reference), with the device buffers
 * the same calls run on. */
typedef struct {
  moecclMoePlan_t plan;
  moecclDataType_t dt;
  size_t T, R, cap, H, row;
  int K;
  float* w;                     /* T*K gate weights, host memory */
  unsigned char* tok;           /* T rows */
  unsigned char *rows_h, *out_h, *grad_h;
  /* the combine backward of out (as gradTokens) through rows (the forward's
   * expert rows): gradExpertRows, gradWeights */
  unsigned char* gexp_h;
  float* gw_h;
  void *dtok, *drows, *dout, *dgrad, *dgexp, *dw;
  float* dgw;
} moe_case_t;

static uint16_t to_bf16(float f) { /* the values used are exact in bfloat16 */
  uint32_t u;
  memcpy(&u, &f, 4);
  return (uint16_t)(u >> 16);
}

/* The four calls (dispatch, combine, dispatch backward, combine backward
 * of the combine's output through the dispatched rows) of c on tokens,
 * rows, out, grad, gexp and gw, on stream st. */
static int moe_calls(moecclComm_t comm, const moe_case_t* c, const void* tok, void* rows, void* out,
                     void* grad, void* gexp, float* gw, void* st) {
  MP_OK_COMM(comm, moecclMoeDispatch(c->plan, tok, rows, c->cap, c->H, c->dt, st));
  MP_OK_COMM(comm, moecclMoeCombine(c->plan, rows, c->cap, c->w, out, c->H, c->dt, st));
  MP_OK_COMM(comm, moecclMoeDispatchBackward(c->plan, rows, c->cap, grad, c->H, c->dt, st));
  MP_OK_COMM(comm,
             moecclMoeCombineBackward(c->plan, out, c->w, rows, gexp, c->cap, gw, c->H, c->dt, st));
  return 0;
}

static int moe_case_make(moecclComm_t comm, int rank, int n, moe_case_t* c, int E, size_t T,
                         moecclDataType_t dt, uint64_t seed) {
  memset(c, 0, sizeof(*c));
  c->dt = dt, c->T = T, c->H = 64, c->K = 2;
  c->row = c->H * (dt == moecclFloat32 ? 4 : 2);
  MP_OK_COMM(comm, moecclMoePlanCreate(&c->plan, E, NULL, comm));
  size_t slots = T * (size_t)c->K;
  int32_t* ids = mp_xmalloc(slots * sizeof(int32_t));
  c->w = mp_xmalloc(slots * sizeof(float) + 1);
  c->tok = mp_xmalloc(T * c->row + 1);
  mp_rng rng;
  mp_rng_seed(&rng, seed);
  for (size_t t = 0; t < T; t++) {
    int a = (int)mp_rng_below(&rng, (uint64_t)E);
    int b = (a + 1 + (int)mp_rng_below(&rng, (uint64_t)E - 1)) % E;
    ids[t * 2] = a, ids[t * 2 + 1] = t % 11 == 0 ? -1 : b;
    c->w[t * 2] = 0.75f - 0.125f * (float)(t % 3), c->w[t * 2 + 1] = 0.25f;
    for (size_t h = 0; h < c->H; h++) {
      float v = (float)((int)((t * 7 + h * 3 + (size_t)rank) % 13) - 6) / 4.0f;
      if (dt == moecclFloat32) ((float*)c->tok)[t * c->H + h] = v;
      else ((uint16_t*)c->tok)[t * c->H + h] = to_bf16(v);
    }
  }
  size_t recv[64] = {0};
  MP_CHECK(E <= 64, "too many experts");
  MP_OK_COMM(comm, moecclMoeLayout(c->plan, ids, T, c->K, 0, recv, NULL));
  free(ids);
  for (int e = 0; e < E; e++) c->R += recv[e];
  c->cap = c->R + 1;
  c->rows_h = mp_xmalloc(c->cap * c->row);
  c->out_h = mp_xmalloc(T * c->row + 1);
  c->grad_h = mp_xmalloc(T * c->row + 1);
  c->gexp_h = mp_xmalloc(c->cap * c->row);
  c->gw_h = mp_xmalloc(slots * sizeof(float) + 1);
  if (moe_calls(comm, c, c->tok, c->rows_h, c->out_h, c->grad_h, c->gexp_h, c->gw_h, NULL))
    return 1;
  c->dtok = dev_copy_of(comm, c->tok, T * c->row);
  c->drows = dev_alloc(comm, c->cap * c->row);
  c->dout = dev_alloc(comm, T * c->row + 1);
  c->dgrad = dev_alloc(comm, T * c->row + 1);
  c->dgexp = dev_alloc(comm, c->cap * c->row);
  c->dgw = dev_alloc(comm, slots * sizeof(float) + 1);
  c->dw = dev_copy_of(comm, c->w, slots * sizeof(float));
  MP_CHECK(c->dtok && c->drows && c->dout && c->dgrad && c->dgexp && c->dgw && c->dw,
           "no device memory");
  (void)n;
  return 0;
}

/* A combine backward's results (gexp device memory, gw device or host
 * memory) are the host ones, bit for bit. */
static int moe_cb_check(const moe_case_t* c, const void* gexp, const float* gw, const char* what) {
  size_t nw = c->T * (size_t)c->K * sizeof(float);
  unsigned char *r1 = dev_read(gexp, c->R * c->row), *r2 = dev_read(gw, nw);
  MP_CHECK(r1 && r2, "reading device memory back failed");
  MP_CHECK(memcmp(r1, c->gexp_h, c->R * c->row) == 0,
           "%s: device combine backward's gradExpertRows differ from the host's", what);
  for (size_t i = 0; i < c->T * (size_t)c->K; i++)
    MP_CHECK(memcmp(r2 + 4 * i, &c->gw_h[i], 4) == 0,
             "%s: combine backward's gradWeights[%zu][%zu] is %.9g, the host's %.9g", what,
             i / (size_t)c->K, i % (size_t)c->K, (double)((float*)r2)[i], (double)c->gw_h[i]);
  free(r1), free(r2);
  return 0;
}

/* The device results of c are the host ones, bit for bit. */
static int moe_case_check(const moe_case_t* c, const char* what) {
  unsigned char *r1 = dev_read(c->drows, c->R * c->row), *r2 = dev_read(c->dout, c->T * c->row),
                *r3 = dev_read(c->dgrad, c->T * c->row);
  MP_CHECK(r1 && r2 && r3, "reading device memory back failed");
  MP_CHECK(memcmp(r1, c->rows_h, c->R * c->row) == 0,
           "%s: device dispatch rows differ from host ones (%zu rows)", what, c->R);
  MP_CHECK(memcmp(r2, c->out_h, c->T * c->row) == 0,
           "%s: device combine differs from host combine (%zu tokens)", what, c->T);
  MP_CHECK(memcmp(r3, c->grad_h, c->T * c->row) == 0,
           "%s: device dispatch backward differs from host", what);
  free(r1), free(r2), free(r3);
  return moe_cb_check(c, c->dgexp, c->dgw, what);
}

/* Overwrites c's device results with a sentinel (a later round must write them again). */
static int moe_case_clear(moecclComm_t comm, const moe_case_t* c) {
  (void)comm;
  return dev_sentinel(c->drows, c->cap * c->row) || dev_sentinel(c->dout, c->T * c->row) ||
         dev_sentinel(c->dgrad, c->T * c->row) || dev_sentinel(c->dgexp, c->cap * c->row) ||
         dev_sentinel(c->dgw, c->T * (size_t)c->K * sizeof(float));
}

static int moe_case_free(moecclComm_t comm, moe_case_t* c) {
  free(c->w), free(c->tok), free(c->rows_h), free(c->out_h), free(c->grad_h);
  free(c->gexp_h), free(c->gw_h);
  MP_OK_COMM(comm, moecclMemFree(c->dgexp));
  MP_OK_COMM(comm, moecclMemFree(c->dgw));
  MP_OK_COMM(comm, moecclMemFree(c->dw));
  MP_OK_COMM(comm, moecclMemFree(c->dtok));
  MP_OK_COMM(comm, moecclMemFree(c->drows));
  MP_OK_COMM(comm, moecclMemFree(c->dout));
  MP_OK_COMM(comm, moecclMemFree(c->dgrad));
  MP_OK_COMM(comm, moecclMoePlanDestroy(c->plan));
  return 0;
}

/* What one MoE call queued (or, on the host path, did), counted. */
typedef struct {
  moeccl_device_emu_counts_t emu;
  moeccl_ipc_stats_t ipc;
  moeccl_mem_device_counts_t mem;
  uint64_t term_calls, term_waits;
} moe_snap_t;

static void moe_snap(moecclComm_t comm, moe_snap_t* m) {
  moeccl_device_emu_counts(&m->emu);
  moeccl_ipc_stats(comm, &m->ipc);
  moeccl_mem_device_counts(&m->mem);
  moeccl_exec_terms_stats(comm, &m->term_calls, &m->term_waits);
}

/* The three calls of c on its device buffers, one at a time, each counted
 * before the stream ran it: on the stream path no host wait of any kind,
 * kernels and no byte staged in host memory; rank 0 prints the counts
 * (docs/ARCHITECTURE.md quotes them). */
static int moe_counted(moecclComm_t comm, int rank, int n, const moe_case_t* c) {
  static const char* names[4] = {"dispatch", "combine", "dispatch backward", "combine backward"};
  int kernels_loaded = moeccl_devkern_ready(); /* else the host path, staging */
  /* one rank: lowered with no transport (no message) */
  int lowered =
      kernels_loaded && (n == 1 || moeccl_peer_stream_transport(comm, (rank + 1) % n) >= 0);
  for (int k = 0; k < 4; k++) {
    moe_snap_t a, b;
    moe_snap(comm, &a);
    if (k == 0)
      MP_OK_COMM(comm, moecclMoeDispatch(c->plan, c->dtok, c->drows, c->cap, c->H, c->dt, NULL));
    if (k == 1)
      MP_OK_COMM(comm,
                 moecclMoeCombine(c->plan, c->drows, c->cap, c->w, c->dout, c->H, c->dt, NULL));
    if (k == 2)
      MP_OK_COMM(comm, moecclMoeDispatchBackward(c->plan, c->drows, c->cap, c->dgrad, c->H, c->dt,
                                                 NULL));
    if (k == 3) /* expertRows and gradWeights in device memory: the stream path */
      MP_OK_COMM(comm, moecclMoeCombineBackward(c->plan, c->dout, c->w, c->drows, c->dgexp, c->cap,
                                                c->dgw, c->H, c->dt, NULL));
    moe_snap(comm, &b);
    unsigned long long kernels = b.mem.launches - a.mem.launches;
    unsigned long long memops = b.emu.memops - a.emu.memops, copies = b.emu.copies - a.emu.copies;
    unsigned long long syncs = b.emu.syncs - a.emu.syncs, ring = b.term_waits - a.term_waits;
    unsigned long long staged = b.mem.staged_bytes - a.mem.staged_bytes;
    if (rank == 0)
      printf("moe counts: %s path, rank 0 of %d, moecclMoe%s (%s, %zu tokens, %zu rows of %zu B): "
             "%llu kernels, %llu stream memory operations, %llu copies, %llu host waits for a "
             "stream (%llu of them for the row programs' pinned memory), %llu bytes staged in host "
             "memory\n",
             lowered ? "stream" : "host", n,
             k == 0   ? "Dispatch"
             : k == 1 ? "Combine"
             : k == 2 ? "DispatchBackward"
                      : "CombineBackward",
             c->dt == moecclFloat32 ? "float32" : "bfloat16", c->T, c->R, c->row, kernels, memops,
             copies, syncs + ring, ring, staged);
    if (!kernels_loaded) {
      MP_CHECK(kernels == 0 && staged > 0 && b.ipc.calls == a.ipc.calls,
               "%s without kernels: %llu launched, %llu bytes staged, lowered %d", names[k],
               kernels, staged, (int)(b.ipc.calls - a.ipc.calls));
      continue;
    }
    /* one rank's dispatch only copies its own rows */
    MP_CHECK(kernels > 0 || (n == 1 && k == 0), "%s: no kernel launched", names[k]);
    MP_CHECK(staged == 0, "%s: %llu bytes went through host memory", names[k], staged);
    if (!lowered) continue;
    MP_CHECK(n == 1 || b.ipc.calls - a.ipc.calls == 1, "%s: not lowered onto the stream",
             names[k]);
    MP_CHECK(syncs == 0 && ring == 0, "%s: the host waited for a stream %llu times (%llu for "
             "pinned memory)", names[k], syncs + ring, ring);
    MP_CHECK(b.emu.host_fns == a.emu.host_fns, "%s: a host function was queued", names[k]);
  }
  return 0;
}

/* Many calls of two layouts queued back to back on the NULL stream, more
 * than the ring of pinned buffers holds: each call's terms and weights
 * stay its own until the stream passed it (the caller's weights are
 * scribbled on as soon as each combine returns), and the results are the
 * host's. */
static int moe_rounds(moecclComm_t comm, int rank, int n, moe_case_t* a, moe_case_t* b) {
  enum { ROUNDS = 5 };
  MP_CHECK(moe_case_clear(comm, a) == 0 && moe_case_clear(comm, b) == 0, "clear");
  moe_snap_t s0, s1;
  moe_snap(comm, &s0);
  size_t na = a->T * (size_t)a->K, nb = b->T * (size_t)b->K;
  float* keep_a = mp_xmalloc(na * sizeof(float) + 1);
  float* keep_b = mp_xmalloc(nb * sizeof(float) + 1);
  memcpy(keep_a, a->w, na * sizeof(float)), memcpy(keep_b, b->w, nb * sizeof(float));
  for (int r = 0; r < ROUNDS; r++)
    for (int which = 0; which < 2; which++) {
      moe_case_t* c = which ? b : a;
      float* keep = which ? keep_b : keep_a;
      size_t nw = which ? nb : na;
      memcpy(c->w, keep, nw * sizeof(float));
      if (moe_calls(comm, c, c->dtok, c->drows, c->dout, c->dgrad, c->dgexp, c->dgw, NULL))
        return 1;
      for (size_t i = 0; i < nw; i++) c->w[i] = -1e30f; /* the calls copied them */
    }
  moe_snap(comm, &s1);
  memcpy(a->w, keep_a, na * sizeof(float)), memcpy(b->w, keep_b, nb * sizeof(float));
  free(keep_a), free(keep_b);
  if (rank == 0)
    printf("moe rounds: rank 0 of %d, %d MoE calls queued back to back: %llu took pinned memory, "
           "the host waited %llu times for the stream to free some\n",
           n, 8 * ROUNDS, (unsigned long long)(s1.term_calls - s0.term_calls),
           (unsigned long long)(s1.term_waits - s0.term_waits));
  return moe_case_check(a, "layout A after the rounds") ||
         moe_case_check(b, "layout B after the rounds");
}

/* The memory kinds of the gate weights, expert rows and gate gradients
 * beside device token and row buffers: weights in device memory (combine,
 * combine backward); the combine backward's expert rows and gate gradients
 * both in host memory (the host path, as before), the same bits; one in
 * each kind refused, and device ones beside host token buffers refused,
 * each with a text, the communicator usable after. */
static int moe_other_kinds(moecclComm_t comm, moe_case_t* c) {
  size_t nw = c->T * (size_t)c->K * sizeof(float);
  MP_CHECK(moe_case_clear(comm, c) == 0, "clear");
  MP_OK_COMM(comm, moecclMoeDispatch(c->plan, c->dtok, c->drows, c->cap, c->H, c->dt, NULL));
  MP_OK_COMM(comm, moecclMoeCombine(c->plan, c->drows, c->cap, c->dw, c->dout, c->H, c->dt, NULL));
  MP_OK_COMM(comm,
             moecclMoeDispatchBackward(c->plan, c->drows, c->cap, c->dgrad, c->H, c->dt, NULL));
  MP_OK_COMM(comm, moecclMoeCombineBackward(c->plan, c->dout, c->dw, c->drows, c->dgexp, c->cap,
                                            c->dgw, c->H, c->dt, NULL));
  if (moe_case_check(c, "weights in device memory")) return 1;
  /* host expertRows and gradWeights (a host mirror of the expert rows) */
  float* gw = mp_xmalloc(nw + 1);
  memset(gw, 0xee, nw);
  MP_CHECK(dev_sentinel(c->dgexp, c->cap * c->row) == 0, "clear");
  MP_OK_COMM(comm, moecclMoeCombineBackward(c->plan, c->dout, c->w, c->rows_h, c->dgexp, c->cap, gw,
                                            c->H, c->dt, NULL));
  MP_CHECK(D->synchronize(NULL) == moecclSuccess, "sync");
  for (size_t i = 0; i < nw / 4; i++)
    MP_CHECK(memcmp(&gw[i], &c->gw_h[i], 4) == 0,
             "combine backward, host expertRows and gradWeights: gradWeights[%zu] is %.9g, "
             "want %.9g",
             i, (double)gw[i], (double)c->gw_h[i]);
  unsigned char* r1 = dev_read(c->dgexp, c->R * c->row);
  MP_CHECK(r1 && memcmp(r1, c->gexp_h, c->R * c->row) == 0,
           "combine backward, host expertRows and gradWeights: gradExpertRows differ");
  free(r1);
  /* refused: expertRows in device memory, gradWeights in host memory (and
   * the reverse), before anything is issued */
  for (int k = 0; k < 2 && c->T > 0 && c->R > 0; k++) {
    moecclResult_t rc =
        moecclMoeCombineBackward(c->plan, c->dout, c->w, k ? c->rows_h : c->drows, c->dgexp, c->cap,
                                 k ? c->dgw : gw, c->H, c->dt, NULL);
    MP_CHECK(rc == moecclInvalidArgument,
             "combine backward, expertRows and gradWeights in different memory (%d): %d", k,
             (int)rc);
    MP_CHECK(strstr(mp_last_error_text(comm), "both in device memory") != NULL, "the text says: %s",
             mp_last_error_text(comm));
  }
  /* refused: device weights beside host token and row buffers */
  unsigned char* out = mp_xmalloc(c->T * c->row + 1);
  moecclResult_t rc = moecclMoeCombine(c->plan, c->rows_h, c->cap, c->dw, out, c->H, c->dt, NULL);
  MP_CHECK(c->T == 0 || rc == moecclInvalidArgument, "combine of host rows, device weights: %d",
           (int)rc);
  MP_CHECK(c->T == 0 || strstr(mp_last_error_text(comm), "pass host memory") != NULL,
           "the text says: %s", mp_last_error_text(comm));
  free(out), free(gw);
  return 0;
}

static int moe(moecclComm_t comm, int rank, int n) {
  moe_case_t a, b, h;
  if (moe_case_make(comm, rank, n, &a, 2 * n, 300 + 37 * (size_t)rank, moecclFloat32,
                    seed_of(n, 8, rank)))
    return 1;
  if (moe_case_make(comm, rank, n, &b, n + 1, 200 + 53 * (size_t)((rank + 1) % n), moecclFloat32,
                    seed_of(n, 13, rank)))
    return 1;
  if (moe_case_make(comm, rank, n, &h, 2 * n, 150 + 11 * (size_t)rank, moecclBfloat16,
                    seed_of(n, 14, rank)))
    return 1;
  kcount_t k0;
  kc_snap(&k0);
  if (moe_counted(comm, rank, n, &a)) return 1;
  if (kc_report("MoE dispatch, combine, both backward calls on device buffers", rank, n, &k0, 4))
    return 1;
  if (moe_case_check(&a, "float32") || moe_counted(comm, rank, n, &h) ||
      moe_case_check(&h, "bfloat16"))
    return 1;
  if (moe_rounds(comm, rank, n, &a, &b)) return 1;
  /* on a device stream */
  void* st = NULL;
  MP_CHECK(D->stream_create(&st) == moecclSuccess, "no device stream");
  MP_CHECK(moe_case_clear(comm, &b) == 0, "clear");
  if (moe_calls(comm, &b, b.dtok, b.drows, b.dout, b.dgrad, b.dgexp, b.dgw, st)) return 1;
  MP_CHECK(D->synchronize(st) == moecclSuccess, "stream synchronize");
  MP_CHECK(D->stream_destroy(st) == moecclSuccess, "stream destroy");
  if (moe_case_check(&b, "on a device stream")) return 1;
  if (moe_other_kinds(comm, &a) || moe_other_kinds(comm, &h)) return 1;
  if (moe_case_free(comm, &a) || moe_case_free(comm, &b) || moe_case_free(comm, &h)) return 1;
  /* The communicator goes on after the refusal. */
  return a2a_round(comm, rank, n, moecclFloat32, 64, seed_of(n, 8, 99));
}

/* ---- devscalar: a PreMulSum whose scalar is device memory ------------------ */

static int32_t ds_want_i(size_t i, int n, int32_t s) { return s * want_sum(i, n); }

/* Four reductions by PreMulSum ops whose scalar is device memory
 * (moecclScalarDevice), queued on a device stream held at a gate, the
 * scalars rewritten on the stream before each call and once more after the
 * last: each call scales by the value the stream gave its scalar before it,
 * as NCCL has it.  On the stream path every call is lowered with no host
 * wait (counted before the gate opens); the host path reads the scalar when
 * the stream hands it the call.  int32 and float32, exact values. */
static int devscalar(moecclComm_t comm, int rank, int n) {
  size_t count = 5003, bytes = count * 4, per = count / (size_t)n;
  int root = n - 1;
  int32_t* hi = mp_xmalloc(bytes);
  float* hf = mp_xmalloc(bytes);
  for (size_t i = 0; i < count; i++) hi[i] = val(rank, i), hf[i] = (float)val(rank, i);
  void *si = dev_alloc(comm, bytes), *sf = dev_alloc(comm, bytes), *gate = dev_alloc(comm, 8);
  void *scal_i = dev_alloc(comm, 4), *scal_f = dev_alloc(comm, 4), *r[4];
  for (int k = 0; k < 4; k++) r[k] = dev_alloc(comm, bytes);
  MP_CHECK(si && sf && gate && scal_i && scal_f && r[0] && r[1] && r[2] && r[3],
           "no device memory");
  MP_CHECK(to_dev(si, hi, bytes) == 0 && to_dev(sf, hf, bytes) == 0, "fill");
  MP_CHECK(to_dev(gate, &(uint64_t){0}, 8) == 0, "gate");
  /* pinned host memory for the copies queued behind the gate (on_stream) */
  int32_t* vi = NULL;
  float* vf = NULL;
  unsigned char* out = NULL;
  MP_CHECK(D->host_alloc((void**)&vi, 3 * 4) == moecclSuccess &&
               D->host_alloc((void**)&vf, 3 * 4) == moecclSuccess &&
               D->host_alloc((void**)&out, 4 * bytes) == moecclSuccess,
           "no pinned host memory");
  vi[0] = 3, vi[1] = -2, vi[2] = 1000, vf[0] = 0.5f, vf[1] = 3.0f, vf[2] = -1e30f;
  moecclRedOp_t op_i, op_f;
  MP_OK_COMM(comm,
             moecclRedOpCreatePreMulSum(&op_i, scal_i, moecclInt32, moecclScalarDevice, comm));
  MP_OK_COMM(comm,
             moecclRedOpCreatePreMulSum(&op_f, scal_f, moecclFloat32, moecclScalarDevice, comm));
  void* st = NULL;
  MP_CHECK(D->stream_create(&st) == moecclSuccess, "no device stream");
  MP_CHECK(D->wait_value(st, (volatile uint64_t*)gate, 1) == moecclSuccess, "gate wait");
  int lowered =
      moeccl_devkern_ready() && (n == 1 || moeccl_peer_stream_transport(comm, (rank + 1) % n) >= 0);
  moe_snap_t a, b;
  moe_snap(comm, &a);
  MP_CHECK(D->copy_async(scal_i, &vi[0], 4, st) == moecclSuccess, "copy");
  MP_OK_COMM(comm, moecclAllReduce(si, r[0], count, moecclInt32, op_i, comm, st));
  MP_CHECK(D->copy_async(scal_f, &vf[0], 4, st) == moecclSuccess, "copy");
  MP_OK_COMM(comm, moecclAllReduce(sf, r[1], count, moecclFloat32, op_f, comm, st));
  MP_CHECK(D->copy_async(scal_i, &vi[1], 4, st) == moecclSuccess, "copy");
  MP_OK_COMM(comm, moecclReduceScatter(si, r[2], per, moecclInt32, op_i, comm, st));
  MP_CHECK(D->copy_async(scal_f, &vf[1], 4, st) == moecclSuccess, "copy");
  MP_OK_COMM(comm, moecclReduce(sf, r[3], count, moecclFloat32, op_f, root, comm, st));
  MP_CHECK(D->copy_async(scal_i, &vi[2], 4, st) == moecclSuccess, "copy");
  MP_CHECK(D->copy_async(scal_f, &vf[2], 4, st) == moecclSuccess, "copy");
  moe_snap(comm, &b);
  for (int k = 0; k < 4; k++)
    MP_CHECK(D->copy_async(out + (size_t)k * bytes, r[k], bytes, st) == moecclSuccess, "copy");
  unsigned long long syncs = b.emu.syncs - a.emu.syncs, calls = b.ipc.calls - a.ipc.calls;
  unsigned long long kernels = b.mem.launches - a.mem.launches;
  if (rank == 0)
    printf("devscalar: %s path, rank 0 of %d, 4 PreMulSum calls with a device scalar queued behind "
           "a gate: %llu lowered, %llu kernels, %llu host waits for a stream\n",
           lowered ? "stream" : "host", n, calls, kernels, syncs);
  if (lowered) {
    MP_CHECK(n == 1 || calls == 4, "%llu of the 4 calls were lowered onto the stream", calls);
    MP_CHECK(D != &moeccl_device_emu_ops || syncs == 0, "the host waited for a stream %llu times",
             syncs);
    MP_CHECK(b.emu.host_fns == a.emu.host_fns, "a host function was queued");
  }
  MP_CHECK(to_dev(gate, &(uint64_t){1}, 8) == 0, "opening the gate");
  MP_CHECK(D->synchronize(st) == moecclSuccess, "stream synchronize");
  const int32_t* g0 = (const int32_t*)out;
  const float *g1 = (const float*)(out + bytes), *g3 = (const float*)(out + 3 * bytes);
  const int32_t* g2 = (const int32_t*)(out + 2 * bytes);
  for (size_t i = 0; i < count; i++) {
    MP_CHECK(g0[i] == ds_want_i(i, n, vi[0]),
             "AllReduce int32 by a device scalar 3: element %zu "
             "is %d, want %d",
             i, (int)g0[i], (int)ds_want_i(i, n, vi[0]));
    float w1 = vf[0] * (float)want_sum(i, n), w3 = vf[1] * (float)want_sum(i, n);
    MP_CHECK(g1[i] == w1, "AllReduce float32 by a device scalar 0.5: element %zu is %g, want %g", i,
             (double)g1[i], (double)w1);
    MP_CHECK(rank != root || g3[i] == w3,
             "Reduce float32 by a device scalar 3: element %zu is "
             "%g, want %g",
             i, (double)g3[i], (double)w3);
  }
  for (size_t i = 0; i < per; i++) {
    int32_t w2 = ds_want_i((size_t)rank * per + i, n, vi[1]);
    MP_CHECK(g2[i] == w2, "ReduceScatter int32 by a device scalar -2: element %zu is %d, want %d",
             i, (int)g2[i], (int)w2);
  }
  MP_OK_COMM(comm, moecclRedOpDestroy(op_i, comm));
  MP_OK_COMM(comm, moecclRedOpDestroy(op_f, comm));
  MP_CHECK(D->stream_destroy(st) == moecclSuccess, "stream destroy");
  D->host_free(vi), D->host_free(vf), D->host_free(out);
  void* frees[] = {si, sf, gate, scal_i, scal_f, r[0], r[1], r[2], r[3]};
  for (int k = 0; k < 9; k++) MP_OK_COMM(comm, moecclMemFree(frees[k]));
  free(hi), free(hf);
  return 0;
}

static int refused(moecclComm_t comm, int rank, int n) {
  float* d = dev_alloc(comm, 4096);
  MP_CHECK(d, "no device memory");
  (void)rank;
  void* p = NULL;
  moecclResult_t rc = moecclMemAllocDevice(&p, 4096, 1 << 20);
  MP_CHECK(rc == moecclInvalidArgument && p == NULL, "a bad device gave %d", (int)rc);
  MP_OK_COMM(comm, moecclMemAllocDevice(&p, 4096, -1)); /* the current device */
  MP_OK_COMM(comm, moecclMemFree(p));
  rc = moecclMemAllocDevice(NULL, 4096, 0);
  MP_CHECK(rc == moecclInvalidArgument, "a NULL ptr gave %d", (int)rc);
  /* A stream that is neither a host stream nor a live device stream: the
   * emulation knows its streams and refuses it; on CUDA a made-up stream
   * is undefined behaviour, as with NCCL (moeccl(3)), and reached the
   * driver (SIGSEGV on an H200): not tried there. */
  if (D == &moeccl_device_emu_ops) {
    int not_a_stream;
    rc = moecclAlltoAll(d, d, 0, moecclFloat32, comm, (moecclStream_t)&not_a_stream);
    MP_CHECK(rc == moecclInvalidArgument, "a made-up stream gave %d", (int)rc);
  }
  MP_OK_COMM(comm, moecclMemFree(d));
  rc = moecclMemFree((char*)d + 64); /* inside no allocation any more */
  MP_CHECK(rc == moecclInvalidArgument, "freeing a freed device pointer gave %d", (int)rc);
  /* The communicator still works on device memory after the refusal. */
  return a2a_round(comm, rank, n, moecclFloat32, 100, seed_of(n, 5, 0));
}

static int flood(moecclComm_t comm, int rank, int n) {
  enum { MSGS = 14 };
  if (n < 3 || rank > 2) return 0;
  size_t count = 4096, bytes = count * 4;
  unsigned char* buf = dev_alloc(comm, bytes * MSGS);
  MP_CHECK(buf, "no device memory");
  uint64_t seed = seed_of(n, 10, 0);
  if (rank == 1 || rank == 2) {
    int k = rank == 1 ? MSGS : 1;
    if (rank == 2) mp_sleep_ms(300); /* let rank 1's flood fill rank 0's queue first */
    for (int m = 0; m < k; m++) MP_CHECK(dev_fill(buf + m * bytes, 4, count, seed + (uint64_t)m, rank, 0) == 0, "fill");
    MP_OK_COMM(comm, moecclGroupStart());
    for (int m = 0; m < k; m++) MP_OK_COMM(comm, moecclSend(buf + m * bytes, count, moecclFloat32, 0, comm, NULL));
    MP_OK_COMM(comm, moecclGroupEnd());
  } else {
    MP_OK_COMM(comm, moecclRecv(buf, count, moecclFloat32, 2, comm, NULL)); /* first, alone */
    unsigned char* h = dev_read(buf, bytes);
    MP_CHECK(h, "reading device memory back failed");
    MP_CHECK_BLOCK("flood: the message from rank 2", h, 4, count, seed, 2, 0, 0);
    free(h);
    MP_OK_COMM(comm, moecclGroupStart());
    for (int m = 0; m < MSGS; m++) MP_OK_COMM(comm, moecclRecv(buf + m * bytes, count, moecclFloat32, 1, comm, NULL));
    MP_OK_COMM(comm, moecclGroupEnd());
    h = dev_read(buf, bytes * MSGS);
    MP_CHECK(h, "reading device memory back failed");
    for (int m = 0; m < MSGS; m++) MP_CHECK_BLOCK("flood: a message from rank 1", h + m * bytes, 4, count, seed + (uint64_t)m, 1, 0, 0);
    free(h);
  }
  MP_OK_COMM(comm, moecclMemFree(buf));
  return 0;
}

static int nodes(moecclComm_t comm, int rank, int n) {
  const char* ppn = getenv("MP_RANKS_PER_NODE");
  if (!ppn || atoi(ppn) != 2 || n % 2) return 0; /* only on nodes of 2 */
  size_t count = 1000, bytes = count * 4 * (size_t)n;
  void* s = dev_alloc(comm, bytes);
  void* r = dev_alloc(comm, bytes);
  MP_CHECK(s && r, "no device memory");
  moecclResult_t rc = moecclAlltoAll(s, r, count, moecclFloat32, comm, NULL);
  MP_CHECK(rc == moecclInvalidArgument, "a device all-to-all across nodes gave %d", (int)rc);
  MP_CHECK(strstr(mp_last_error_text(comm), "between the ranks of one node") != NULL, "the text says: %s",
           mp_last_error_text(comm));
  /* Same-node send/recv (rank ^ 1 is on this rank's node). */
  if (shift2(comm, rank, rank ^ 1, s, r, count, seed_of(n, 9, 0))) return 1;
  MP_OK_COMM(comm, moecclMemFree(s));
  MP_OK_COMM(comm, moecclMemFree(r));
  /* Host buffers still go everywhere. */
  unsigned char* hs = mp_xmalloc(bytes);
  unsigned char* hr = mp_xmalloc(bytes);
  uint64_t seed = seed_of(n, 9, 1);
  for (int p = 0; p < n; p++) mp_fill(hs + p * count * 4, 4, count, seed, rank, p, 0);
  MP_OK_COMM(comm, moecclAlltoAll(hs, hr, count, moecclFloat32, comm, NULL));
  for (int p = 0; p < n; p++) MP_CHECK_BLOCK("host all-to-all after the refusal", hr + p * count * 4, 4, count, seed, p, rank, 0);
  free(hs), free(hr);
  return 0;
}

/* The calls of one stream (NULL or st), counted by the emulation and the
 * ipc transport. */
typedef struct {
  moeccl_ipc_stats_t ipc;
  moeccl_device_emu_counts_t emu;
} snap_t;

static void snap(moecclComm_t comm, snap_t* out) {
  moeccl_ipc_stats(comm, &out->ipc);
  moeccl_device_emu_counts(&out->emu);
}

static int count_calls(moecclComm_t comm, int rank, int n, void* st, const char* path) {
  enum { CALLS = 20 };
  size_t count = 4096, bytes = count * 4 * (size_t)n;
  void* s = dev_alloc(comm, bytes);
  void* r = dev_alloc(comm, bytes);
  MP_CHECK(s && r, "no device memory");
  MP_CHECK(dev_fill(s, 4, count * (size_t)n, seed_of(n, 11, 0), rank, 0) == 0, "fill");
  MP_OK_COMM(comm, moecclAlltoAll(s, r, count, moecclFloat32, comm, st)); /* maps, hands over */
  MP_CHECK(D->synchronize(st) == moecclSuccess, "sync");
  snap_t a, b;
  snap(comm, &a);
  for (int i = 0; i < CALLS; i++)
    MP_OK_COMM(comm, moecclAlltoAll(s, r, count, moecclFloat32, comm, st));
  int lowered = strcmp(path, "stream path") == 0;
  if (lowered) snap(comm, &b); /* what the calls queued, before any wait */
  MP_CHECK(D->synchronize(st) == moecclSuccess, "sync");
  if (!lowered) { /* the host path's work runs later, on a library thread */
    MP_CHECK(D->synchronize(NULL) == moecclSuccess, "sync");
    snap(comm, &b);
    b.emu.syncs -= 2; /* the test's own */
  }
  double k = CALLS;
  uint64_t memops = b.emu.memops - a.emu.memops, copies = b.emu.copies - a.emu.copies;
  uint64_t fns = b.emu.host_fns - a.emu.host_fns, syncs = b.emu.syncs - a.emu.syncs;
  if (rank == 0)
    printf("counts: %s, %s stream, rank 0 of %d, per repeated moecclAlltoAll (%zu B per peer): "
           "%.1f copies (%.1f batched calls), %.1f stream memory operations in %.1f batches, %.1f "
           "host functions, "
           "%.1f host waits for a stream, %.1f send-buffer look-ups, %.1f descriptors, %.1f "
           "mappings, %.1f socket system calls; the host waited for a peer's call in %.0f%% of "
           "calls\n",
           path, st ? "a device" : "the NULL", n, count * 4, copies / k,
           (double)(b.ipc.copy_calls - a.ipc.copy_calls) / k, memops / k,
           (double)(b.ipc.batches - a.ipc.batches) / k, fns / k, syncs / k,
           (double)(b.ipc.range_queries - a.ipc.range_queries) / k,
           (double)(b.ipc.fds_sent - a.ipc.fds_sent) / k,
           (double)(b.ipc.imports - a.ipc.imports) / k,
           (double)(b.ipc.syscalls - a.ipc.syscalls) / k,
           100.0 * (double)(b.ipc.host_waits - a.ipc.host_waits) / k);
  if (lowered) {
    MP_CHECK(b.ipc.calls - a.ipc.calls == CALLS, "%llu calls lowered, want %d",
             (unsigned long long)(b.ipc.calls - a.ipc.calls), CALLS);
    MP_CHECK(b.ipc.fds_sent == a.ipc.fds_sent && b.ipc.handles_sent == a.ipc.handles_sent &&
                 b.ipc.imports == a.ipc.imports,
             "a repeated call handed over or mapped allocations");
    MP_CHECK(b.ipc.syscalls == a.ipc.syscalls, "a repeated call made system calls on the socket");
    MP_CHECK(fns == 0, "%llu host functions queued (library thread hops)", (unsigned long long)fns);
    MP_CHECK(syncs == 0, "the library waited for a stream %llu times", (unsigned long long)syncs);
    /* per call, with direct (the stream path's own choice, unless
     * MOECCL_ALGO forces another): n-1 copies and the self block; two
     * batches: ready writes and waits (2(n-1)), read marks and waits
     * (2(n-1)) and the passed flag */
    const char* algo = getenv("MOECCL_ALGO");
    if (algo && *algo) goto done;
    MP_CHECK(copies == (uint64_t)CALLS * (uint64_t)n, "%llu copies", (unsigned long long)copies);
    MP_CHECK(memops == (uint64_t)CALLS * (4 * (uint64_t)(n - 1) + 1),
             "%llu stream memory operations", (unsigned long long)memops);
    MP_CHECK(b.ipc.range_queries - a.ipc.range_queries == CALLS, "send-buffer look-ups");
    MP_CHECK(b.ipc.copy_calls - a.ipc.copy_calls == CALLS, "%llu batched copy calls",
             (unsigned long long)(b.ipc.copy_calls - a.ipc.copy_calls));
  }
done:
  MP_OK_COMM(comm, moecclMemFree(s));
  MP_OK_COMM(comm, moecclMemFree(r));
  return 0;
}

/* Fresh buffers every call, freed after it: the peers unmap what their
 * owners freed, so what stays mapped does not grow with the calls. */
static int churn(moecclComm_t comm, int rank, int n) {
  enum { ROUNDS = 12 };
  size_t count = 1000, bytes = count * 4 * (size_t)n;
  moeccl_ipc_stats_t a, b;
  moeccl_ipc_stats(comm, &a);
  for (int k = 0; k < ROUNDS; k++) {
    void* s = dev_alloc(comm, bytes);
    void* r = dev_alloc(comm, bytes);
    MP_CHECK(s && r, "no device memory");
    uint64_t seed = seed_of(n, 12, (uint64_t)k);
    for (int p = 0; p < n; p++)
      MP_CHECK(dev_fill((char*)s + p * count * 4, 4, count, seed, rank, p) == 0, "fill");
    MP_OK_COMM(comm, moecclAlltoAll(s, r, count, moecclFloat32, comm, NULL));
    unsigned char* h = dev_read(r, bytes);
    MP_CHECK(h, "read");
    for (int p = 0; p < n; p++)
      MP_CHECK_BLOCK("fresh buffers", h + p * count * 4, 4, count, seed, p, rank, 0);
    free(h);
    MP_OK_COMM(comm, moecclMemFree(s));
    MP_OK_COMM(comm, moecclMemFree(r));
  }
  moeccl_ipc_stats(comm, &b);
  int64_t mapped =
      (int64_t)(b.imports - a.imports) - (int64_t)(b.unmaps - a.unmaps); /* may be < 0 */
  const char* algo = getenv("MOECCL_ALGO"); /* bruck sends from scratch: nothing new to map */
  MP_CHECK((algo && *algo) ||
               b.imports - a.imports >= (uint64_t)ROUNDS * (uint64_t)(n - 1) - (uint64_t)(n - 1),
           "%llu imports for %d rounds", (unsigned long long)(b.imports - a.imports), ROUNDS);
  MP_CHECK(mapped <= 2 * (int64_t)(n - 1),
           "%lld more of the peers' allocations mapped after %d rounds", (long long)mapped, ROUNDS);
  return 0;
}

static int counts(moecclComm_t comm, int rank, int n) {
  if (D != &moeccl_device_emu_ops) return 0; /* counted on the emulation */
  if (moeccl_peer_stream_transport(comm, (rank + 1) % n) >= 0 && churn(comm, rank, n)) return 1;
  const char* path =
      moeccl_peer_stream_transport(comm, (rank + 1) % n) >= 0 ? "stream path" : "host path";
  void* st = NULL;
  MP_CHECK(D->stream_create(&st) == moecclSuccess, "no device stream");
  int rc = count_calls(comm, rank, n, NULL, path) || count_calls(comm, rank, n, st, path);
  MP_CHECK(D->stream_destroy(st) == moecclSuccess, "stream destroy");
  return rc;
}

static int killed_body(moecclComm_t comm, int rank, int n, void* arg) {
  (void)arg;
  D = moeccl_device();
  MP_CHECK(D, "no device backend");
  size_t count = 2048, bytes = count * 4 * (size_t)n;
  void* s = dev_alloc(comm, bytes);
  void* r = dev_alloc(comm, bytes);
  uint64_t* gate = dev_alloc(comm, 8);
  void* st = NULL;
  MP_CHECK(s && r && gate && D->stream_create(&st) == moecclSuccess, "setup");
  MP_CHECK(to_dev(gate, &(uint64_t){0}, 8) == 0, "gate");
  for (int i = 0; i < 3; i++)
    MP_OK_COMM(comm, moecclAlltoAll(s, r, count, moecclFloat32, comm, st));
  MP_CHECK(D->synchronize(st) == moecclSuccess, "synchronize");
  if (rank == 1) {
    /* its part of the next call is handed over, but its stream never gets
     * there: the survivors' streams wait for flags it will not write */
    MP_CHECK(D->wait_value(st, (volatile uint64_t*)gate, 1) == moecclSuccess, "gate wait");
    MP_OK_COMM(comm, moecclAlltoAll(s, r, count, moecclFloat32, comm, st));
    raise(SIGKILL);
  }
  MP_OK_COMM(comm, moecclAlltoAll(s, r, count, moecclFloat32, comm, st));
  double t0 = mp_now();
  MP_CHECK(D->synchronize(st) == moecclSuccess, "the survivor's stream failed");
  double waited = mp_now() - t0;
  MP_CHECK(waited < 5.0 * (getenv("MP_DEADLINE_SCALE") ? atof(getenv("MP_DEADLINE_SCALE")) : 1.0),
           "the survivor's stream was let go after %.1f s", waited);
  moecclResult_t rc = moecclAlltoAll(s, r, count, moecclFloat32, comm, st);
  MP_CHECK(rc == moecclRemoteError, "the call after the death gave %d", (int)rc);
  MP_CHECK(strstr(mp_last_error_text(comm), "rank 1") != NULL, "the error names: %s",
           mp_last_error_text(comm));
  /* destroy must return (the run's deadline says so) */
  (void)moecclCommDestroy(comm);
  D->stream_destroy(st);
  _exit(MP_EXIT_PASS); /* the communicator is gone: skip the harness's destroy */
}

/* Ranks whose MoE calls disagree: rank 1 passes half the hidden size to a
 * dispatch (arg NULL) or a combine backward (arg not NULL) on device
 * buffers.  On the stream path each rank finds it in its peer's
 * descriptors before anything is queued: every rank's call fails with a
 * text saying so, none hangs, the communicator is broken and destroy
 * returns. */
static int disagree_body(moecclComm_t comm, int rank, int n, void* arg) {
  D = moeccl_device();
  MP_CHECK(D, "no device backend");
  moe_case_t c;
  if (moe_case_make(comm, rank, n, &c, 2 * n, 200, moecclFloat32, seed_of(n, 15, rank))) return 1;
  size_t H = rank == 1 ? c.H / 2 : c.H;
  moecclResult_t rc = arg ? moecclMoeCombineBackward(c.plan, c.dout, c.w, c.drows, c.dgexp, c.cap,
                                                     c.dgw, H, c.dt, NULL)
                          : moecclMoeDispatch(c.plan, c.dtok, c.drows, c.cap, H, c.dt, NULL);
  MP_CHECK(rc == moecclInvalidArgument, "a %s whose ranks disagree gave %d",
           arg ? "combine backward" : "dispatch", (int)rc);
  MP_CHECK(strstr(mp_last_error_text(comm), "disagree") != NULL, "the text says: %s",
           mp_last_error_text(comm));
  moecclResult_t async = moecclSuccess;
  MP_OK_COMM(comm, moecclCommGetAsyncError(comm, &async));
  MP_CHECK(async != moecclSuccess, "the communicator is not broken");
  (void)moecclCommDestroy(comm); /* must return (the run's deadline says so) */
  _exit(MP_EXIT_PASS);           /* the communicator is gone: skip the harness's destroy */
}

/* Ranks that pass the combine backward's expert rows and gate gradients
 * in different kinds of memory (rank 0 device memory: the stream path;
 * rank 1 host memory: the host path) cannot meet: within MOECCL_TIMEOUT
 * (3 s here) every rank's call fails, naming the cause, none hangs, and
 * destroy returns. */
static int mixed_body(moecclComm_t comm, int rank, int n, void* arg) {
  (void)arg;
  D = moeccl_device();
  MP_CHECK(D, "no device backend");
  moe_case_t c;
  if (moe_case_make(comm, rank, n, &c, 2 * n, 200, moecclFloat32, seed_of(n, 16, rank))) return 1;
  float* gw = mp_xmalloc(c.T * (size_t)c.K * sizeof(float) + 1);
  double t0 = mp_now();
  moecclResult_t rc = moecclMoeCombineBackward(c.plan, c.dout, c.w, rank ? c.rows_h : c.drows,
                                               c.dgexp, c.cap, rank ? gw : c.dgw, c.H, c.dt, NULL);
  if (rc == moecclSuccess) rc = D->synchronize(NULL); /* a queued call fails on the stream */
  moecclResult_t async = moecclSuccess;
  MP_OK_COMM(comm, moecclCommGetAsyncError(comm, &async));
  MP_CHECK(async != moecclSuccess, "rank %d: the communicator is not broken", rank);
  if (rank == 0)
    printf("mixed kinds: rank 0's call gave %d (async %d) after %.1f s: %s\n", (int)rc, (int)async,
           mp_now() - t0, mp_last_error_text(comm));
  fflush(stdout); /* _exit below */
  MP_CHECK(rc != moecclSuccess || async != moecclSuccess,
           "a combine backward whose ranks passed different kinds of memory succeeded");
  free(gw);
  (void)moecclCommDestroy(comm); /* must return (the run's deadline says so) */
  _exit(MP_EXIT_PASS);
}

static int body(moecclComm_t comm, int rank, int n, void* arg) {
  (void)arg;
  D = moeccl_device();
  MP_CHECK(D, "no device backend (MOECCL_DEVICE=%s)", getenv("MOECCL_DEVICE"));
  if (mp_want("a2a") && a2a(comm, rank, n)) return 1;
  if (mp_want("a2av") && a2av(comm, rank, n)) return 1;
  if (mp_want("inplace") && inplace(comm, rank, n)) return 1;
  if (mp_want("p2p") && p2p(comm, rank, n)) return 1;
  if (mp_want("coll") && coll(comm, rank, n)) return 1;
  if (mp_want("reuse") && reuse(comm, rank, n)) return 1;
  if (mp_want("stream") && on_stream(comm, rank, n)) return 1;
  if (mp_want("reduce") && reduce(comm, rank, n)) return 1;
  if (mp_want("moe") && moe(comm, rank, n)) return 1;
  if (mp_want("refused") && refused(comm, rank, n)) return 1;
  if (mp_want("flood") && flood(comm, rank, n)) return 1;
  if (mp_want("nodes") && nodes(comm, rank, n)) return 1;
  if (mp_want("counts") && counts(comm, rank, n)) return 1;
  if (mp_want("lowred") && lowred(comm, rank, n)) return 1;
  if (mp_want("devscalar") && devscalar(comm, rank, n)) return 1;
  return 0;
}

static const mp_variant variants[] = {
    {"emu-delays", {"MOECCL_DEVICE_EMU_DELAY_US=200"}, "3"},
    {"two-slots", {"MOECCL_SHM_SLOTS=2", "MOECCL_SHM_EAGER_SIZE=256"}, "2,4"},
    {"legacy-ipc", {"MOECCL_DEVICE_EMU_LEGACY=1"}, "3"},
    {"bruck", {"MOECCL_ALGO=bruck"}, "3,4"}, /* a device scratch buffer */
    {"reduce-ring",
     {"MOECCL_ALLREDUCE_ALGO=ring", "MOECCL_REDUCESCATTER_ALGO=ring",
      "MP_SUBTESTS=reduce,devscalar"},
     "3,4"},
    {"reduce-tree",
     {"MOECCL_ALLREDUCE_ALGO=tree", "MOECCL_REDUCE_ALGO=tree", "MP_SUBTESTS=reduce,devscalar"},
     "3"},
    {"reduce-direct",
     {"MOECCL_ALLREDUCE_ALGO=direct", "MOECCL_REDUCESCATTER_ALGO=direct",
      "MP_SUBTESTS=reduce,devscalar"},
     "3,4"},
    {"two-nodes", {"MP_RANKS_PER_NODE=2", "MP_SUBTESTS=nodes"}, "4"},
    /* the host-driven path the stream path replaced, still used for what it
     * cannot lower (reductions, MoE) and on request */
    {"host-path", {"MOECCL_DEVICE_STREAM_DISABLE=1"}, "3"},
    {"host-path-delays", {"MOECCL_DEVICE_STREAM_DISABLE=1", "MOECCL_DEVICE_EMU_DELAY_US=200"}, "2"},
    /* no kernels (a CUDA build without nvcc): reductions and MoE calls
     * take the host path and stage through host memory, same results */
    {"no-kernels", {"MOECCL_DEVICE_EMU_NO_KERNELS=1", "MP_SUBTESTS=moe,reduce,devscalar"}, "3"},
    /* one rank: the MoE calls and a device scalar lowered with no transport */
    {"one-rank", {"MP_SUBTESTS=moe,devscalar"}, "1"},
    {NULL, {NULL}, NULL},
};

static const int ranks[] = {2, 3, 4, 0};

int main(int argc, char** argv) {
  setenv("MOECCL_DEVICE", "emu", 0);
  /* Linked with the library's objects, this program is not "beside
   * libmoeccl": point the network modules' search at the build tree's. */
  char exe[4096];
  ssize_t len = readlink("/proc/self/exe", exe, sizeof(exe) - 32);
  if (len > 0) {
    exe[len] = '\0';
    char* slash = strrchr(exe, '/');
    if (slash) {
      if (slash - exe >= 6 && !strncmp(slash - 6, "/.libs", 6)) slash -= 6; /* libtool's copy */
      snprintf(slash, sizeof(exe) - (size_t)(slash - exe), "/../.libs");
      setenv("MOECCL_PLUGIN_PATH", exe, 0);
    }
  }
  int rc = mp_main(argc, argv, ranks, body, NULL, 120, variants);
  if (argc == 1 && !getenv("MP_VARIANT") && mp_want("killed")) {
    mp_opts opts = MP_OPTS_DEFAULT;
    opts.deadline_s = 90;
    opts.expect_killed_rank = 1;
    opts.expect_killed_signal = SIGKILL;
    printf("killed (3 ranks):\n");
    rc = mp_fold(rc, mp_run_opts(3, killed_body, NULL, &opts));
  }
  if (argc == 1 && !getenv("MP_VARIANT") && mp_want("disagree")) {
    mp_opts opts = MP_OPTS_DEFAULT;
    opts.deadline_s = 60;
    printf("disagree (2 ranks, a MoE dispatch on device buffers):\n");
    rc = mp_fold(rc, mp_run_opts(2, disagree_body, NULL, &opts));
    printf("disagree (2 ranks, a MoE combine backward on device buffers):\n");
    rc = mp_fold(rc, mp_run_opts(2, disagree_body, (void*)1, &opts));
    printf("mixed kinds (2 ranks, a MoE combine backward, MOECCL_TIMEOUT=3):\n");
    setenv("MOECCL_TIMEOUT", "3", 1);
    rc = mp_fold(rc, mp_run_opts(2, mixed_body, NULL, &opts));
    unsetenv("MOECCL_TIMEOUT");
  }
  return rc;
}
