/*
 * Relayed all-to-all schedules: blocks reach their destination through
 * intermediate ranks, in phases (hier2, hier3, rail).  In each phase a rank
 * sends each of its peers one message holding every block it forwards to
 * that peer, in an order both ends agree on, and receives one such message
 * from each peer.  An algorithm describes, per phase, which blocks each
 * message holds; this helper turns that into steps:
 *
 *   [self copy, pack 0] [exchange 0] [unpack 0, pack 1] [exchange 1] ... [unpack last]
 *
 * - Held blocks: a block that arrived in an earlier phase (or sits in the
 *   send buffer) is named by an index the algorithm chooses, 0..nblocks-1;
 *   two tables (this stage, next stage) record where each lies and its size.
 * - Packing: a message's blocks are copied into scratch with one copy per
 *   contiguous run; a message whose blocks form one run already is sent
 *   straight from them (no copy).
 * - Receiving: a message whose blocks are all final and contiguous in the
 *   receive buffer is received there; any other goes to scratch, its final
 *   blocks are copied out (merged runs) and the rest become held blocks.
 * - Scratch: a pack area reused by every phase and two receive areas used
 *   by alternate phases (phase k receives into area k % 2; what phase k-1
 *   received is read at the latest by pack k+1, which comes before exchange
 *   k+1), so scratch stays within about three stages' worth of bytes.
 *
 * Zero-byte blocks cost nothing, and a message whose blocks are all empty is
 * not sent, on both sides alike.  Cost: O(blocks described) time and ops,
 * workspace O(nblocks + max_msgs), no allocation once it has grown.
 */
#ifndef MOECCL_RELAY_H_
#define MOECCL_RELAY_H_

#include "algos.h"

typedef struct moeccl_relay moeccl_relay_t;

typedef struct {
  /* This rank's messages of the phase, in the order they are posted: per
   * peer, moeccl_relay_send_begin, one moeccl_relay_send_own/held per block
   * in message order, moeccl_relay_send_end. */
  void (*send)(moeccl_relay_t* x, const void* ctx);
  /* The messages it receives, each with its blocks in the sender's order:
   * moeccl_relay_recv_begin, recv_final/recv_held per block, recv_end.
   * Called twice (sizing, then unpacking); must describe the same both times. */
  void (*recv)(moeccl_relay_t* x, const void* ctx);
  /* Held blocks that do not move in this phase (moeccl_relay_stay_*), or NULL. */
  void (*stay)(moeccl_relay_t* x, const void* ctx);
} moeccl_relay_phase_t;

typedef struct {
  const moeccl_relay_phase_t* phases;
  int nphases;
  int nblocks;  /* size of the held-block index space */
  int max_msgs; /* most messages sent, and most received, in one phase */
  /* For a pipelined generator (pipeline.h), NULL otherwise: the steps are
   * not closed; step_ends[k] gets the op count at the end of logical step k
   * of the layout above (2 * nphases + 1 of them, empty ones included), and
   * *scratch the scratch bytes this run's ops use (from offset 0). */
  int* step_ends;
  uint64_t* scratch;
} moeccl_relay_plan_t;

/* Appends this rank's steps for plan (ctx goes to the callbacks). */
moecclResult_t moeccl_relay_run(const moeccl_a2a_desc_t* d, moeccl_sched_t* s,
                                const moeccl_relay_plan_t* plan, const void* ctx);

void moeccl_relay_send_begin(moeccl_relay_t* x, int peer);
/* This rank's own block to dst, from the send buffer. */
void moeccl_relay_send_own(moeccl_relay_t* x, int dst);
/* Held block `block` of the current stage. */
void moeccl_relay_send_held(moeccl_relay_t* x, int block);
void moeccl_relay_send_end(moeccl_relay_t* x);

void moeccl_relay_recv_begin(moeccl_relay_t* x, int peer);
/* The block rank src sends this rank: it lands in the receive buffer. */
void moeccl_relay_recv_final(moeccl_relay_t* x, int src);
/* A block of `bytes` kept as held block `block` of the next stage. */
void moeccl_relay_recv_held(moeccl_relay_t* x, int block, uint64_t bytes);
void moeccl_relay_recv_end(moeccl_relay_t* x);

/* Next stage's held block `block` is this rank's own block to dst. */
void moeccl_relay_stay_own(moeccl_relay_t* x, int block, int dst);
/* Next stage's held block `block` is the current stage's block `held`. */
void moeccl_relay_stay_held(moeccl_relay_t* x, int block, int held);

#endif
