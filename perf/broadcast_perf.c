/*
 * broadcast_perf - moecclBroadcast against MPI_Bcast on the same buffers,
 * in the shape of nccl-tests' broadcast_perf.
 */
#include "perf_common.h"

static double factor(int n) { return 1.0; }

/* A size is the bytes of the vector; every rank but the root copies it. */
static void shape(struct perf_ctx* c, size_t req)
{
  c->count = req / c->dt->size;
  c->bytes = c->send_bytes = c->recv_bytes = c->roof_bytes = c->count * c->dt->size;
}

/* Every rank fills its own pattern, so data from a wrong rank shows. */
static void fill(struct perf_ctx* c) { perf_pattern_fill(c, c->B.send, c->me, 0, c->count); }

static long long verify(struct perf_ctx* c)
{
  /* MPI_Bcast sends from the root's sendbuff and leaves its recvbuff. */
  if (c->lib == PERF_MPI && c->me == c->root)
    return perf_untouched_wrong(c, c->B.recv, c->recv_bytes + PERF_GUARD_BYTES);
  return perf_pattern_wrong(c, c->B.recv, c->root, 0, c->count) + perf_guard_wrong(c);
}

static moecclResult_t moe(struct perf_ctx* c)
{
  return moecclBroadcast(c->B.send, c->B.recv, c->count, c->dt->type, c->root, c->comm, NULL);
}

static void mpi(struct perf_ctx* c)
{
  MPI_Bcast(c->me == c->root ? c->B.send : c->B.recv, (int)c->count, c->mpi_type, c->root,
            MPI_COMM_WORLD);
}

static const struct perf_coll coll = {
    .prog = "broadcast_perf",
    .call = "Broadcast",
    .rooted = 1,
    .factor = factor,
    .factor_help = "1",
    .algo_env = "MOECCL_BROADCAST_ALGO",
    .algos = "tree,direct,auto",
    .size_help = "bytes of the vector (count = size / type size)",
    .roof_help = "every rank at once copies C bytes, C = size: each non-root copies the\n"
                 "  root's vector",
    .mpi_help = "MPI_Bcast from the root's sendbuff into the others' recvbuff (moeccl also\n"
                "  fills the root's recvbuff; 16- and 8-bit floats moved as integers)",
    .shape = shape,
    .ops = {.fill = fill, .verify = verify, .moe = moe, .mpi = mpi},
};

int main(int argc, char** argv) { return perf_coll_main(argc, argv, &coll); }
