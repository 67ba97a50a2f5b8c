/*
 * The ipc transport: device memory between the ranks of one node, moved by
 * the copy engine on the caller's stream (CUDA IPC over NVLink or PCIe, or
 * one GPU shared by several ranks; the emulation in CI).  It is a stream
 * transport (transport.h: MOECCL_TRANSPORT_CAP_STREAM): the executor hands
 * it a whole device schedule, and
 *   - on the host (lower_begin), each rank writes one descriptor per SEND
 *     op (its allocation's id and offset, the size) into a ring in shared
 *     memory towards the receiver, and reads the descriptors of the
 *     messages its RECV ops match from its senders' rings, in posting order
 *     per pair.  A peer's allocation is mapped once and cached by its id
 *     (VMM memory by a file descriptor passed once over a Unix socket,
 *     cudaMalloc memory by its legacy IPC handle in the descriptor), so a
 *     repeated call passes no descriptor and makes no system call.  The
 *     host may wait for a peer to have made its side of the call (its
 *     descriptors), with the communicator's deadline, never for a device;
 *   - on the stream (lower_step), per step: the rank marks its sends ready
 *     (a counter per pair in the receiver's shared memory, written by the
 *     stream), waits until its senders' streams marked theirs, copies each
 *     message straight from the sender's buffer into its own (one copy,
 *     pulled by the receiver; a reducing receive is a kernel reading the
 *     sender's buffer, one launch per run of them folding into one
 *     destination; a consuming receive, a MoE row program, is one launch
 *     reading the sender's message, or for a gathered send the sender's
 *     whole buffer its program picks rows from), marks them read, and
 *     waits until its
 *     receivers read its sends.  Waits and writes of a phase go in one batch
 *     of stream memory operations.  No library thread, no host function and
 *     no spinning kernel is involved: when the stream passes the call, the
 *     receive buffers hold the result and the send buffers may be reused.
 * The counters live in host memory every rank maps and registers with the
 * device, so the host can see how far each stream got: destroy waits for
 * its streams' work with the peers to be past before it unmaps anything,
 * and an abort releases this rank's waits.
 *
 * This header holds what the files share: setup.c (segments, the socket,
 * setup and teardown), maps.c (peers' allocations: the freed log, legacy
 * handles opened), lower.c (lower_begin and lower_step), watch.c (how far
 * the streams got: the watchdog, draining before teardown) and ipc.c (the
 * ops table and its host-side entries).
 */
#ifndef MOECCL_TRANSPORT_IPC_INT_H_
#define MOECCL_TRANSPORT_IPC_INT_H_

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "base/param.h"
#include "base/sha256.h"
#include "comm/bootstrap.h"
#include "device/device.h"
#include "transport/transport.h"

#define RING 256 /* descriptors in flight per ordered pair */
#define LINE 64
#define MSG_MAGIC 0x6d6f6563636c4950ULL /* "moecclIP" */
#define SEG_MAGIC 0x6d6f6563636c5347ULL

/* How a descriptor names its allocation. */
enum { HOW_KNOWN = 0, HOW_FD = 1, HOW_IPC = 2 };

/* One message of a sender, in its ring towards the receiver. */
typedef struct {
  uint64_t id;    /* the allocation (device.h range: never reused in the sender) */
  uint64_t off;   /* of the message in it */
  uint64_t bytes; /* of the message */
  uint64_t alloc_bytes;
  /* a gathered send (MOECCL_OPF_ROWS): bytes is the sender's whole buffer,
   * whose rows the receiver's program picks; this is the message it reads
   * (its receive's length).  0: a plain message */
  uint64_t gathered;
  int32_t device, how;
  unsigned char ipc[MOECCL_IPC_HANDLE_BYTES]; /* HOW_IPC: the legacy handle */
} desc_t;

typedef struct {
  _Atomic uint64_t head; /* descriptors written (the sender's) */
  char pad0[LINE - 8];
  _Atomic uint64_t tail; /* descriptors read (the receiver's) */
  char pad1[LINE - 8];
  desc_t ent[RING];
} ring_t;

typedef struct {
  volatile uint64_t v;
  char pad[LINE - 8];
} flag_t;

/* A rank's shared segment (a memfd every local peer maps):
 *   ready[l]  messages local rank l made ready for this rank (l's stream writes)
 *   done[l]   messages of this rank that local rank l has read (l's stream writes)
 *   passed[k] calls this rank lowered on its k-th stream that the stream
 *             has passed (its own stream writes: destroy waits for them)
 *   freed     ids of this rank's allocations freed (moecclMemFree) that it
 *             had handed over: the peers unmap them
 *   ring[l]   this rank's descriptors towards local rank l */
typedef struct {
  uint64_t magic;
  int32_t nlocal, pid;
  /* times a sender found this rank's socket full (it then waits for the
   * rank to read it: lower_begin empties its socket when this moved) */
  _Atomic uint64_t blocked;
  char pad[LINE - 24];
} seg_hdr_t;

/* A datagram on a rank's socket: a segment (at init) or an allocation's
 * descriptor (HOW_FD), with the file descriptor as SCM_RIGHTS. */
typedef struct {
  uint64_t magic;
  int32_t from, kind; /* kind 0: segment, 1: allocation */
  uint64_t id, bytes;
  int32_t device, pad;
} msg_t;

typedef struct {
  uint64_t id;
  void* base;
  size_t bytes;
  int ipc; /* opened by legacy handle (else imported from a descriptor) */
} import_t;

typedef struct {
  uint64_t id, bytes;
  int fd, device;
} stash_t;

typedef struct {
  int comm_rank, in_use;
  pid_t pid;
  uint64_t pid_start;
  char* seg;          /* its segment, mapped here (this rank's own for l == me) */
  char* seg_dev;      /* the same, as the device sees it (host_register) */
  uint64_t sent;      /* messages this rank lowered towards it */
  uint64_t recvd;     /* messages of it this rank lowered */
  uint64_t* exported; /* ids of allocations whose descriptor it has */
  int nexported, exported_cap;
  import_t* imports; /* its allocations mapped here */
  int nimports, imports_cap;
  stash_t* stash; /* descriptors received ahead of need */
  int nstash, stash_cap;
  uint64_t freed_tail; /* entries of its freed ring this rank has acted on */
  struct sockaddr_un addr;
  socklen_t addr_len;
} ipeer_t;

/* What lower_begin decided per op of the schedule, for lower_step. */
typedef struct {
  const char* src; /* RECV: the sender's memory, mapped here */
  uint64_t bytes;  /* RECV: what to copy (a consuming one: its program's message) */
  uint64_t count;  /* the pair's message count after this one (ready / done value) */
  uint64_t span;   /* RECV of a gathered message: src is the sender's whole buffer, of span bytes */
} match_t;

#define STREAM_SLOTS 16 /* streams whose progress the segment shows */
#define FREED_RING 256  /* allocations freed lately, in a rank's segment */
#define FREED_LOG 1024  /* ... and in the process, for its communicators */

typedef struct ipc_state {
  moeccl_comm_t* comm;
  const moeccl_device_ops_t* d;
  int me, nlocal, sock;
  size_t seg_bytes;
  int seg_fd;
  ipeer_t* peers; /* by local index */
  match_t* match;
  int match_cap;
  uint64_t* agg; /* lower_step: per local index, last send count / last recv count */
  moeccl_dev_memop_t* memops;
  int registered; /* segments registered with the device */
  /* lower_begin: the allocation of the schedule's buffer last looked up */
  struct {
    int buf; /* -1: none this call */
    void* base;
    size_t size;
    uint64_t id;
    int device;
  } range;
  struct {
    void* stream;
    uint64_t lowered; /* calls lowered on it (the value its passed flag reaches) */
  } streams[STREAM_SLOTS];
  int nstreams;
  uint64_t freed_seen; /* entries of the process's freed log handled */
  uint64_t blocked_seen; /* this rank's seg_hdr_t.blocked when it last emptied its socket */
  /* the watchdog's: 1 + the comm rank of a peer that died with work queued
   * (its waits were released); the next call fails naming it */
  _Atomic int lost;
  struct ipc_state* next_watched;
  /* lower_step's copies of a step, queued in one batch */
  void** copy_dst;
  const void** copy_src;
  size_t* copy_bytes;
  int copies_cap;
  moeccl_ipc_stats_t stats;
} ipc_state_t;

static inline size_t off_ready(void) { return sizeof(seg_hdr_t); }

static inline size_t off_done(int nlocal) { return off_ready() + (size_t)nlocal * sizeof(flag_t); }

static inline size_t off_passed(int nlocal) {
  return off_done(nlocal) + (size_t)nlocal * sizeof(flag_t);
}

typedef struct {
  _Atomic uint64_t head;
  char pad[LINE - 8];
  uint64_t id[FREED_RING];
} freed_ring_t;

static inline size_t off_freed(int nlocal) {
  return off_passed(nlocal) + STREAM_SLOTS * sizeof(flag_t);
}

static inline size_t off_ring(int nlocal) { return off_freed(nlocal) + sizeof(freed_ring_t); }

static inline size_t seg_size(int nlocal) {
  size_t b = off_ring(nlocal) + (size_t)nlocal * sizeof(ring_t);
  long page = sysconf(_SC_PAGESIZE);
  return (b + (size_t)page - 1) / (size_t)page * (size_t)page;
}

static inline flag_t* ready_of(char* seg, int l) { return (flag_t*)(seg + off_ready()) + l; }

/* Flags are written by streams (and, on a failure, by hosts) of several
 * processes: read and written whole, atomically. */
static inline uint64_t flag_get(const flag_t* f) {
  return __atomic_load_n(&f->v, __ATOMIC_ACQUIRE);
}

static inline void flag_set(flag_t* f, uint64_t v) { __atomic_store_n(&f->v, v, __ATOMIC_RELEASE); }

static inline flag_t* done_of(char* seg, int nlocal, int l) {
  return (flag_t*)(seg + off_done(nlocal)) + l;
}

static inline flag_t* passed_of(char* seg, int nlocal, int k) {
  return (flag_t*)(seg + off_passed(nlocal)) + k;
}

static inline ring_t* ring_of(char* seg, int nlocal, int l) {
  return (ring_t*)(seg + off_ring(nlocal)) + l;
}

static inline freed_ring_t* freed_of(char* seg, int nlocal) {
  return (freed_ring_t*)(seg + off_freed(nlocal));
}

/* A flag of peer l's segment as the device addresses it. */
static inline volatile uint64_t* dev_addr(const ipc_state_t* s, int l, const flag_t* f) {
  const ipeer_t* p = &s->peers[l];
  return (volatile uint64_t*)(p->seg_dev + ((const char*)f - p->seg));
}

/* maps.c: peers' allocations */
void moeccl_ipc_freed_start(ipc_state_t* s);
void moeccl_ipc_announce_freed(ipc_state_t* s);
moecclResult_t moeccl_ipc_open(const moeccl_device_ops_t* d, pid_t pid, uint64_t id,
                               const unsigned char* handle, void** base);
void moeccl_ipc_unref(const moeccl_device_ops_t* d, void* base);
void moeccl_ipc_unmap_import(ipc_state_t* s, const import_t* im);
void moeccl_ipc_drop_freed(ipc_state_t* s);

/* setup.c: setup and teardown */
int moeccl_ipc_can_reach(const moeccl_comm_t* comm, int peer);
int moeccl_ipc_send_msg(ipc_state_t* s, int l, const msg_t* m, int fd);
int moeccl_ipc_recv_msg(ipc_state_t* s, msg_t* m, int* fd, int* from);
moecclResult_t moeccl_ipc_init(moeccl_comm_t* comm, const uint8_t* use, int needed, void** state);
void moeccl_ipc_fini(void* state);

/* watch.c: how far the streams got */
void moeccl_ipc_release_waits(ipc_state_t* s);
void moeccl_ipc_drain(ipc_state_t* s);
void moeccl_ipc_watch(ipc_state_t* s);
void moeccl_ipc_unwatch(ipc_state_t* s);

/* lower.c: lowering */
moecclResult_t moeccl_ipc_lower_begin(void* state, const moeccl_sched_t* sc);
moecclResult_t moeccl_ipc_lower_step(void* state, const moeccl_sched_t* sc, int step, int phase,
                                     void* stream);

#endif
