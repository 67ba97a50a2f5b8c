/*
 * all_gather_perf - moecclAllGather against MPI_Allgather on the same
 * buffers, in the shape of nccl-tests' all_gather_perf.
 */
#include "perf_common.h"

static double factor(int n) { return (double)(n - 1) / n; }

/* A size is the bytes each rank receives (n blocks); count is the block
 * each sends.  Each rank copies in the n-1 blocks of its peers. */
static void shape(struct perf_ctx* c, size_t req)
{
  size_t ts = c->dt->size, n = (size_t)c->n;
  c->count = req / (ts * n);
  c->send_bytes = c->count * ts;
  c->bytes = c->recv_bytes = n * c->send_bytes;
  c->roof_bytes = (n - 1) * c->send_bytes;
}

static void fill(struct perf_ctx* c) { perf_pattern_fill(c, c->B.send, c->me, 0, c->count); }

static long long verify(struct perf_ctx* c)
{
  long long wrong = perf_guard_wrong(c);
  for (int j = 0; j < c->n; j++)
    wrong += perf_pattern_wrong(c, c->B.recv + (size_t)j * c->send_bytes, j, 0, c->count);
  return wrong;
}

static moecclResult_t moe(struct perf_ctx* c)
{
  return moecclAllGather(c->B.send, c->B.recv, c->count, c->dt->type, c->comm, NULL);
}

static void mpi(struct perf_ctx* c)
{
  MPI_Allgather(c->B.send, (int)c->count, c->mpi_type, c->B.recv, (int)c->count, c->mpi_type,
                MPI_COMM_WORLD);
}

static const struct perf_coll coll = {
    .prog = "all_gather_perf",
    .call = "AllGather",
    .factor = factor,
    .factor_help = "(n-1)/n",
    .algo_env = "MOECCL_ALLGATHER_ALGO",
    .algos = "ring,rhd,direct,auto",
    .size_help = "bytes each rank receives, n blocks (count = elements each rank sends)",
    .roof_help = "every rank at once copies (n-1)R/n bytes, R = size: the n-1 blocks of\n"
                 "  its peers",
    .mpi_help = "MPI_Allgather on the same buffers (16- and 8-bit floats moved as integers)",
    .shape = shape,
    .ops = {.fill = fill, .verify = verify, .moe = moe, .mpi = mpi},
};

int main(int argc, char** argv) { return perf_coll_main(argc, argv, &coll); }
