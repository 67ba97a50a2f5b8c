/* moecclAlltoAll and moecclAlltoAllv: argument checks, planning, issue. */
#include "algos/algos.h"
#include "enqueue.h"
#include "executor.h"
#include "transport/transport.h"
#include "topo/topo.h"
#include "tune/tuner.h"

#include <stdlib.h>
#include <string.h>

/* Bytes src sends dst, from the count rows gathered by meta_plan. */
static size_t meta_pair_bytes(const void* ctx, int src, int dst) {
  const moeccl_comm_t* c = ctx;
  size_t n = (size_t)c->nranks;
  int m = c->meta_index[src];
  if (m >= 0) return c->meta_rows[(2 * (size_t)m) * n + (size_t)dst] * c->meta_elem;
  m = c->meta_index[dst];
  if (m >= 0) return c->meta_rows[(2 * (size_t)m + 1) * n + (size_t)src] * c->meta_elem;
  return 0; /* outside the algorithm's scope: test_sched checks none asks */
}

/* Gathers the count rows of the algorithm's scope (moeccl_meta_schedule)
 * into comm->meta_rows, where meta_pair_bytes finds them. */
static moecclResult_t meta_plan(moeccl_comm_t* c, const moeccl_a2a_algo_t* a,
                                const moeccl_a2a_desc_t* d, moeccl_sched_t* s) {
  int n = c->nranks;
  if (!c->meta_index) {
    c->meta_index = malloc(sizeof(int) * (size_t)n);
    if (!c->meta_index) return moeccl_error(c, moecclSystemError, "out of memory");
  }
  int members = moeccl_meta_members(c->topo, c->rank, a->meta, c->meta_index);
  size_t need = 2 * (size_t)members * (size_t)n;
  if (need > c->meta_cap) {
    size_t* p = realloc(c->meta_rows, need * sizeof(size_t));
    if (!p) return moeccl_error(c, moecclSystemError, "out of memory");
    c->meta_rows = p, c->meta_cap = need;
  }
  c->meta_elem = d->elem_size;
  size_t* mine = c->meta_rows + 2 * (size_t)c->meta_index[c->rank] * (size_t)n;
  memcpy(mine, d->send_counts, (size_t)n * sizeof(size_t));
  memcpy(mine + n, d->recv_counts, (size_t)n * sizeof(size_t));
  moeccl_sched_reset(s);
  uint32_t rows;
  MOECCL_CHECK(moeccl_sched_add_buf(s, c->meta_rows, &rows));
  return moeccl_meta_schedule(c->topo, c->rank, a->meta, c->meta_index, rows, s);
}

/* Whether a v-call of algo exchanges count rows first.  Every rank's rows
 * (MOECCL_META_ALL) grow as n^2 (16 n^2 bytes held, the last round sends
 * half of them): past MOECCL_META_ALL_MAX_RANKS the exchange is skipped and
 * the generator, without pair_bytes, falls back (bruck: pairwise).  This
 * depends only on the algorithm, n and the agreed topology, so every rank
 * decides alike. */
int moeccl_a2a_needs_meta(const moeccl_a2a_algo_t* algo, const moeccl_a2a_desc_t* d) {
  if (!d->send_counts || algo->meta == MOECCL_META_NONE) return 0;
  if (algo->meta == MOECCL_META_ALL && d->nranks > MOECCL_META_ALL_MAX_RANKS) return 0;
  return !algo->applies || algo->applies(d);
}

moecclResult_t moeccl_a2a_prepare(moeccl_comm_t* comm, const moeccl_a2a_desc_t* desc,
                                  int* need_meta) {
  *need_meta = 0;
  const moeccl_a2a_algo_t* algo = moeccl_tuner_pick(comm, desc);
  if (!algo)
    return moeccl_comm_fail(comm, moecclSystemError,
                            "the tuner could not price the candidates (out of memory); the ranks "
                            "may now disagree, abort the communicator");
  comm->cur_algo = (int)algo->id;
  moeccl_a2a_desc_t d = *desc;
  d.topo = comm->topo;
  if (!moeccl_a2a_needs_meta(algo, &d)) return moecclSuccess;
  *need_meta = 1;
  moecclResult_t rc = meta_plan(comm, algo, desc, &comm->meta_sched);
  if (rc != moecclSuccess)
    return moeccl_comm_fail(comm, rc, "planning the count exchange of %s failed (%s)",
                            algo->name, moecclGetErrorString(rc));
  return moecclSuccess;
}

moecclResult_t moeccl_a2a_plan(moeccl_comm_t* comm, const moeccl_a2a_desc_t* desc,
                               const void* sendbuf, void* recvbuf, moeccl_sched_t* s) {
  const moeccl_a2a_algo_t* algo = &moeccl_a2a_algos[comm->cur_algo];
  TRACE(ALGO, "rank %d: all-to-all%s with %s", comm->rank, desc->send_counts ? "v" : "",
        algo->name);
  moeccl_a2a_desc_t d = *desc;
  d.topo = comm->topo;
  d.window = comm->a2a_window;
  if (moeccl_a2a_needs_meta(algo, &d)) d.pair_bytes = meta_pair_bytes, d.pair_ctx = comm;
  moeccl_sched_reset(s);
  uint32_t b;
  MOECCL_CHECK(moeccl_sched_add_buf(s, (void*)sendbuf, &b));
  MOECCL_CHECK(moeccl_sched_add_buf(s, recvbuf, &b));
  MOECCL_CHECK(moeccl_sched_add_buf(s, NULL, &b)); /* scratch, provided by the executor */
  s->scratch_buf = (int)b;
  moecclResult_t rc = algo->schedule(&d, s);
  if (rc != moecclSuccess)
    return moeccl_error(comm, rc, "planning the all-to-all%s with %s failed (%s)",
                        desc->send_counts ? "v" : "", algo->name, moecclGetErrorString(rc));
  return moecclSuccess;
}

/* Highest byte (exclusive) a v-call touches in a buffer; sets *bad to the
 * first index whose displacement + count overflows. */
static size_t extent_bytes(const size_t* counts, const size_t* displs, int n, size_t size,
                           int* bad) {
  size_t top = 0;
  *bad = -1;
  for (int i = 0; i < n; i++) {
    if (counts[i] == 0) continue;
    if (displs[i] > SIZE_MAX - counts[i] || displs[i] + counts[i] > SIZE_MAX / size) {
      *bad = i;
      return 0;
    }
    size_t end = (displs[i] + counts[i]) * size;
    if (end > top) top = end;
  }
  return top;
}

static moecclResult_t check_overlap(moeccl_comm_t* c, const void* s, size_t sbytes, const void* r,
                                    size_t rbytes, const char* fn) {
  uintptr_t a = (uintptr_t)s, b = (uintptr_t)r;
  if (sbytes && rbytes && a < b + rbytes && b < a + sbytes)
    return moeccl_error(c, moecclInvalidArgument,
                        "%s: sendbuff and recvbuff overlap (in-place is not supported)", fn);
  return moecclSuccess;
}

static moecclResult_t check_common(moeccl_comm_t* comm, moecclDataType_t type,
                                   moecclStream_t stream, const char* fn) {
  MOECCL_CHECK(moeccl_comm_check(comm, "comm"));
  if (moeccl_type_size(type) == 0)
    return moeccl_error(comm, moecclInvalidArgument, "%s: datatype %d is invalid", fn, (int)type);
  return moeccl_stream_check(comm, stream);
}

static moecclResult_t check_alltoall(moeccl_comm_t* c, const void* sendbuff, void* recvbuff,
                                     size_t count, moecclDataType_t type, moecclStream_t stream) {
  const char* fn = "moecclAlltoAll";
  MOECCL_CHECK(check_common(c, type, stream, fn));
  size_t size = moeccl_type_size(type);
  if (count > SIZE_MAX / size / (size_t)c->nranks)
    return moeccl_error(c, moecclInvalidArgument,
                        "%s: count %zu times %d ranks times datatype size overflows", fn, count,
                        c->nranks);
  if (count && !sendbuff)
    return moeccl_error(c, moecclInvalidArgument, "%s: sendbuff is NULL with count %zu", fn, count);
  if (count && !recvbuff)
    return moeccl_error(c, moecclInvalidArgument, "%s: recvbuff is NULL with count %zu", fn, count);
  size_t bytes = count * size * (size_t)c->nranks;
  return check_overlap(c, sendbuff, bytes, recvbuff, bytes, fn);
}

static moecclResult_t check_side(moeccl_comm_t* c, const void* buf, const char* bufname,
                                 const size_t* counts, const char* cname, const size_t* displs,
                                 const char* dname, size_t size, size_t* extent) {
  const char* fn = "moecclAlltoAllv";
  if (!counts) return moeccl_error(c, moecclInvalidArgument, "%s: %s is NULL", fn, cname);
  if (!displs) return moeccl_error(c, moecclInvalidArgument, "%s: %s is NULL", fn, dname);
  int bad;
  *extent = extent_bytes(counts, displs, c->nranks, size, &bad);
  if (bad >= 0)
    return moeccl_error(c, moecclInvalidArgument,
                        "%s: %s[%d] + %s[%d] times datatype size overflows", fn, dname, bad, cname,
                        bad);
  if (*extent && !buf)
    return moeccl_error(c, moecclInvalidArgument, "%s: %s is NULL but %s has non-zero counts", fn,
                        bufname, cname);
  return moecclSuccess;
}

static moecclResult_t check_alltoallv(moeccl_comm_t* c, const void* sendbuff, const size_t* sc,
                                      const size_t* sd, void* recvbuff, const size_t* rc,
                                      const size_t* rd, moecclDataType_t type,
                                      moecclStream_t stream) {
  MOECCL_CHECK(check_common(c, type, stream, "moecclAlltoAllv"));
  size_t size = moeccl_type_size(type), sext, rext;
  MOECCL_CHECK(check_side(c, sendbuff, "sendbuff", sc, "sendcounts", sd, "sdispls", size, &sext));
  MOECCL_CHECK(check_side(c, recvbuff, "recvbuff", rc, "recvcounts", rd, "rdispls", size, &rext));
  if (sc[c->rank] != rc[c->rank])
    return moeccl_error(
        c, moecclInvalidArgument,
        "moecclAlltoAllv: sendcounts[%d]=%zu but recvcounts[%d]=%zu for the block to self", c->rank,
        sc[c->rank], c->rank, rc[c->rank]);
  return check_overlap(c, sendbuff, sext, recvbuff, rext, "moecclAlltoAllv");
}

/* Runs one all-to-all now, on the calling thread. */
static moecclResult_t a2a_run_now(moeccl_comm_t* c, const moeccl_a2a_desc_t* d, const void* sendbuf,
                                  void* recvbuf) {
  moeccl_comm_wait_turn(c, moeccl_comm_issue(c, 1));
  pthread_mutex_lock(&c->lock);
  int meta = 0;
  moecclResult_t rc = moeccl_a2a_prepare(c, d, &meta);
  if (rc == moecclSuccess && meta) {
    moeccl_job_t job = {.comm = c, .sched = &c->meta_sched};
    rc = moeccl_executor_run(&job, 1);
  }
  if (rc == moecclSuccess) {
    rc = moeccl_a2a_plan(c, d, sendbuf, recvbuf, &c->sched);
    /* The peers ran the count exchange and go on to the call itself. */
    if (rc != moecclSuccess && meta)
      moeccl_comm_fail(c, rc, "planning failed after the count exchange; abort the communicator");
  }
  if (rc == moecclSuccess) {
    moeccl_job_t job = {.comm = c, .sched = &c->sched};
    rc = moeccl_executor_run(&job, 1);
  }
  pthread_mutex_unlock(&c->lock);
  moeccl_comm_retire(c, 1);
  return rc;
}

/* Captures the call for a group or a host stream; v arrays are copied. */
static moecclResult_t a2a_defer(moeccl_comm_t* c, const moeccl_a2a_desc_t* d, const void* sendbuf,
                                void* recvbuf, moecclStream_t stream) {
  moeccl_task_t* t = calloc(1, sizeof(*t));
  if (!t) return moeccl_error(c, moecclSystemError, "out of memory");
  *t = (moeccl_task_t){
      .comm = c, .kind = MOECCL_TASK_A2A, .sendbuf = sendbuf, .recvbuf = recvbuf, .desc = *d};
  if (d->send_counts) {
    size_t n = (size_t)c->nranks;
    t->counts = malloc(4 * n * sizeof(size_t));
    if (!t->counts) return free(t), moeccl_error(c, moecclSystemError, "out of memory");
    memcpy(t->counts, d->send_counts, n * sizeof(size_t));
    memcpy(t->counts + n, d->send_displs, n * sizeof(size_t));
    memcpy(t->counts + 2 * n, d->recv_counts, n * sizeof(size_t));
    memcpy(t->counts + 3 * n, d->recv_displs, n * sizeof(size_t));
    t->desc.send_counts = t->counts;
    t->desc.send_displs = t->counts + n;
    t->desc.recv_counts = t->counts + 2 * n;
    t->desc.recv_displs = t->counts + 3 * n;
  }
  return moeccl_task_submit(t, stream);
}

static moecclResult_t a2a_issue(moeccl_comm_t* c, const moeccl_a2a_desc_t* d, const void* sendbuf,
                                void* recvbuf, moecclStream_t stream) {
  if (stream || moeccl_group_active()) return a2a_defer(c, d, sendbuf, recvbuf, stream);
  return a2a_run_now(c, d, sendbuf, recvbuf);
}

MOECCL_EXPORT moecclResult_t moecclAlltoAll(const void* sendbuff, void* recvbuff, size_t count,
                                            moecclDataType_t datatype, moecclComm_t comm,
                                            moecclStream_t stream) {
  MOECCL_CHECK(check_alltoall(comm, sendbuff, recvbuff, count, datatype, stream));
  moeccl_a2a_desc_t d = {.rank = comm->rank,
                         .nranks = comm->nranks,
                         .block_bytes = count * moeccl_type_size(datatype),
                         .elem_size = moeccl_type_size(datatype)};
  return a2a_issue(comm, &d, sendbuff, recvbuff, stream);
}

MOECCL_EXPORT moecclResult_t moecclAlltoAllv(const void* sendbuff, const size_t sendcounts[],
                                             const size_t sdispls[], void* recvbuff,
                                             const size_t recvcounts[], const size_t rdispls[],
                                             moecclDataType_t datatype, moecclComm_t comm,
                                             moecclStream_t stream) {
  MOECCL_CHECK(check_alltoallv(comm, sendbuff, sendcounts, sdispls, recvbuff, recvcounts, rdispls,
                               datatype, stream));
  moeccl_a2a_desc_t d = {.rank = comm->rank,
                         .nranks = comm->nranks,
                         .send_counts = sendcounts,
                         .send_displs = sdispls,
                         .recv_counts = recvcounts,
                         .recv_displs = rdispls,
                         .elem_size = moeccl_type_size(datatype)};
  return a2a_issue(comm, &d, sendbuff, recvbuff, stream);
}
