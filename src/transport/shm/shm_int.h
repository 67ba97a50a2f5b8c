/*
 * Shared-memory transport: ranks of one node, host memory.
 *
 * One segment per communicator and node holds, for every ordered pair of
 * local ranks, a ring of slots.  A message up to one slot travels eagerly:
 * the sender copies it into a slot, the receiver copies it out.  A larger
 * message is copied once (from moecclMemAlloc memory also one that fits a
 * slot, past SHM_MAP_MIN bytes: see map_min): the sender publishes its
 * address in a slot and the
 * receiver pulls it with process_vm_readv (Linux cross-memory attach) in
 * chunks, then frees the slot, which completes the send.  Without CMA, large
 * messages stream through the slots (two copies, pipelined).
 *
 * Device memory (where a device backend is in use, device/device.h): a
 * send from device memory is always published (never copied into a slot,
 * which the host may not touch), with its allocation's id and offset; just
 * before, the sender exports the allocation and passes the descriptor to
 * the receiver's Unix datagram socket (SCM_RIGHTS; one per rank, in the
 * abstract namespace under a name derived from the communicator's secret;
 * the kernel's SCM_CREDENTIALS must show the peer's pid).  The receiver
 * imports the allocation (cached by id), has the copy engine copy the
 * message straight into its receive buffer, then frees the slot: one copy,
 * device to device (CUDA IPC over NVLink or PCIe).  Eager messages into
 * device memory and host-published messages into device memory are copied
 * by the copy engine too.
 *
 * Waiting: a rank that finds nothing to do spins, then sleeps on a futex in
 * its own doorbell word; whoever publishes or frees a slot for it rings it.
 *
 * A receive with a consumer (transport.h) hands it the bytes where they
 * lie -- a slot, the sender's mapped memory, the bounce buffer -- instead
 * of writing its buffer; shm never knows what the consumer computes.
 *
 * This header holds what the files share: setup.c (the segment, doorbells,
 * the abort word), shm.c (the ops table, posting, eager slots, progress
 * and waiting), large.c (single-copy messages: mapped regions and CMA) and
 * device.c (messages to or from device memory).
 */
#ifndef MOECCL_TRANSPORT_SHM_INT_H_
#define MOECCL_TRANSPORT_SHM_INT_H_

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "base/futex.h"
#include "device/device.h"
#include "transport/transport.h"

#define SHM_MAGIC 0x6d6f6573686d3031ULL
#define CACHELINE 64

enum { SLOT_FRAG = 1, SLOT_RNDV = 2 };
/* A gathered rendezvous (req->gather_span): addr and the region cover the
 * sender's whole buffer of frag_bytes bytes; the receiver picks its
 * msg_bytes of rows from it through its consumer (consume_gathered, map). */
enum { HDR_GATHERED = 1, HDR_DEVICE = 2 };

typedef struct {
  _Atomic uint64_t seq; /* slot sequence + 1 once the slot is filled */
  uint32_t kind;
  uint32_t flags;      /* SLOT_RNDV: HDR_GATHERED */
  uint64_t msg_bytes;  /* whole message (every fragment carries it) */
  uint64_t frag_bytes; /* SLOT_FRAG: bytes in this slot */
  uint64_t addr;       /* SLOT_RNDV: the sender's buffer */
  uint64_t region_id;  /* SLOT_RNDV from moecclMemAlloc or device memory: region to map */
  uint64_t region_off; /* offset of the buffer in that region */
  int32_t region_fd;   /* fd of the region in the sender, -1 if not mapped memory */
  uint32_t pad2;
} slot_hdr_t;
_Static_assert(sizeof(slot_hdr_t) == CACHELINE, "slot header is one cache line");

typedef struct {
  uint64_t magic;
  int32_t nlocal;
  int32_t nslots;
  uint64_t slot_bytes;
  _Atomic int32_t abort_rank; /* comm rank + 1 of a dead rank, 0 if none */
} seg_header_t;

typedef struct {
  _Atomic uint32_t doorbell;
  _Atomic uint32_t sleeping;
  _Atomic uint32_t dev_sent; /* device descriptors peers sent this rank's socket */
  char pad[CACHELINE - 12];
} rank_area_t;

typedef struct {
  _Atomic uint64_t tail; /* slots the receiver has consumed */
  char pad[CACHELINE - 8];
} chan_ctrl_t;

#define MAP_CACHE 16
#define SHM_MAP_MIN 4096 /* see map_min */

/* A peer's moecclMemAlloc region mapped into this process. */
typedef struct {
  uint64_t id;
  void* base;
  size_t size;
  uint64_t last_use;
  int ipc; /* a device allocation opened by legacy IPC handle (else imported by fd) */
} peer_map_t;

/* A descriptor of a peer's device allocation, received ahead of the slot
 * that names it (one per published device message, in slot order). */
typedef struct {
  uint64_t id, bytes;
  int32_t device;
  int fd; /* -1: the allocation comes by its legacy IPC handle */
  unsigned char ipc[MOECCL_IPC_HANDLE_BYTES];
} dev_fd_t;

/* What travels with the descriptor. */
#define DEV_MAGIC 0x6d6f656363646576ULL
typedef struct {
  uint64_t magic, id, bytes;
  int32_t device, from; /* from: the sender's local index */
  int32_t by_ipc, pad;  /* 1: no descriptor, ipc holds a legacy IPC handle */
  unsigned char ipc[MOECCL_IPC_HANDLE_BYTES];
} dev_msg_t;

typedef struct {
  int comm_rank;
  pid_t pid;
  peer_map_t maps[MAP_CACHE];
  peer_map_t dev_maps[MAP_CACHE]; /* its device allocations imported here */
  dev_fd_t* stash;                /* received descriptors not yet used, a ring */
  int stash_head, stash_count;
  struct sockaddr_un dev_addr; /* its descriptor socket */
  socklen_t dev_addr_len;
  uint64_t pid_start;
  moeccl_req_t *send_head, *send_tail;
  moeccl_req_t *recv_head, *recv_tail;
  uint64_t send_seq;  /* next slot this rank fills towards the peer */
  uint64_t recv_seq;  /* next slot this rank reads from the peer */
  uint64_t tail_seen; /* the peer's tail of this rank's ring as last read */
  int ring_due;       /* in shm_state_t.due: to be rung at the next ring_due() */
} shm_peer_t;

typedef struct {
  moeccl_comm_t* comm;
  char name[96];       /* the segment's, for logs (a memfd: nothing in /dev/shm) */
  uint8_t seg_key[32];  /* names the sockets that pass the segment at init */
  uint8_t seg_auth[32]; /* proves a segment message comes from a member */
  void* base;
  size_t size;
  int nlocal, me, nslots;
  uint64_t slot_mask;   /* nslots - 1 when a power of two (the default), else 0 */
  int can_reach_memory; /* every local peer may read this rank's memory (probed) */
  int use_cma;          /* ... and MOECCL_CMA_DISABLE does not forbid CMA */
  int no_map;           /* MOECCL_SHM_MAP_DISABLE: read peers' memory by CMA only */
  size_t map_min;       /* sends from mapped moecclMemAlloc memory larger than this are
                         * published even when they fit a slot; 0: never */
  size_t slot_bytes, slot_stride, chunk;
  seg_header_t* hdr;
  rank_area_t* ranks;
  chan_ctrl_t* ctrl;
  char* slots;
  shm_peer_t* peers; /* by local index */
  int* due;          /* local indices of the peers ring_later() marked, ndue of them */
  int ndue;
  uint32_t armed;
  uint64_t map_clock; /* LRU clock of the peers' mapping caches */
  /* Receives consumed piece by piece, by CMA: a chunk is read here, then
   * consumed (reduced into the destination) while it is still in cache. */
  char* bounce;
  size_t bounce_bytes;
  /* Device messages: this rank's descriptor socket (-1: no device path) and
   * the first failure of a device send, which progress reports. */
  int dev_fd, stash_cap;
  uint32_t dev_drained; /* descriptors read from the socket (rank_area_t.dev_sent) */
  moecclResult_t dev_error;
} shm_state_t;

static inline size_t align_up(size_t v, size_t a) { return (v + a - 1) / a * a; }

static inline int chan(const shm_state_t* s, int from, int to) { return from * s->nlocal + to; }

static inline slot_hdr_t* slot_at(const shm_state_t* s, int ch, uint64_t seq) {
  /* a division is tens of cycles on the path of every message */
  uint64_t in_ring = s->slot_mask ? seq & s->slot_mask : seq % (uint64_t)s->nslots;
  size_t idx = (size_t)ch * (size_t)s->nslots + (size_t)in_ring;
  return (slot_hdr_t*)(s->slots + idx * s->slot_stride);
}

/* r->aux bits (shm_post clears them). */
enum {
  AUX_PUBLISHED = 1, /* the descriptor is in a slot */
  AUX_DECIDED = 2,   /* AUX_RNDV holds is_rndv's answer */
  AUX_RNDV = 4,
};

/* The data path rings later, once per post or progress pass for every peer
 * it published or freed slots for (ring_due): the fence waits for this
 * rank's stores to reach the other cores, and paying it once per message
 * (six times a small call on 4 ranks) stalled the path that many times. */
static inline void moeccl_shm_ring_later(shm_state_t* s, int local) {
  shm_peer_t* p = &s->peers[local];
  if (p->ring_due) return;
  p->ring_due = 1;
  s->due[s->ndue++] = local;
}

/* Whether send r goes by single copy: decided once per send (a pass asks
 * several times; large.c decides). */
int moeccl_shm_decide_rndv(const shm_state_t* s, const moeccl_req_t* r);

/* setup.c: the segment, doorbells and the abort word */
moecclResult_t moeccl_shm_init(moeccl_comm_t* comm, const uint8_t* use, int needed_anywhere,
                               void** state);
void moeccl_shm_fini(void* state);
int moeccl_shm_can_reach(const moeccl_comm_t* comm, int peer);
void moeccl_shm_notify_abort(void* state, int culprit);
void moeccl_shm_ring(shm_state_t* s, int local);
void moeccl_shm_ring_due(shm_state_t* s);
moecclResult_t moeccl_shm_check_abort(shm_state_t* s);
moecclResult_t moeccl_shm_peer_died(shm_state_t* s, const shm_peer_t* p);
moecclResult_t moeccl_shm_truncated(shm_state_t* s, shm_peer_t* p, uint64_t got, size_t posted);
void moeccl_shm_dev_unmap(const peer_map_t* m);

/* large.c: single-copy messages */
int moeccl_shm_can_gather(void* state, int peer, const void* buf, size_t bytes);
const char* moeccl_shm_map_region(shm_state_t* s, shm_peer_t* p, const slot_hdr_t* h);
moecclResult_t moeccl_shm_bounce_alloc(shm_state_t* s);
moecclResult_t moeccl_shm_cma_to_bounce(shm_state_t* s, shm_peer_t* p, const slot_hdr_t* h,
                                        const moeccl_req_t* r, size_t n, size_t* got);
moecclResult_t moeccl_shm_pull_rndv(shm_state_t* s, shm_peer_t* p, const slot_hdr_t* h,
                                    moeccl_req_t* r, int* wait);

/* device.c: device memory on either side */
int moeccl_shm_send_device(shm_state_t* s, shm_peer_t* p, moeccl_req_t* r, slot_hdr_t* h);
moecclResult_t moeccl_shm_drain_dev_fds(shm_state_t* s);
moecclResult_t moeccl_shm_pull_device(shm_state_t* s, shm_peer_t* p, const slot_hdr_t* h,
                                      moeccl_req_t* r, int* wait);

#endif
