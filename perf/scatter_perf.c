/*
 * scatter_perf - moecclScatter against MPI_Scatter on the same buffers, in
 * the shape of nccl-tests' scatter_perf.
 */
#include "perf_common.h"

static double factor(int n) { return (double)(n - 1) / n; }

/* A size is the bytes the root sends (n blocks); count is the block each
 * rank receives.  Each rank's block is copied once, all at once. */
static void shape(struct perf_ctx* c, size_t req)
{
  size_t ts = c->dt->size, n = (size_t)c->n;
  c->count = req / (ts * n);
  c->recv_bytes = c->roof_bytes = c->count * ts;
  c->bytes = c->send_bytes = n * c->recv_bytes;
}

/* Every rank fills its own pattern, so blocks from a wrong rank show. */
static void fill(struct perf_ctx* c)
{
  perf_pattern_fill(c, c->B.send, c->me, 0, (size_t)c->n * c->count);
}

static long long verify(struct perf_ctx* c)
{
  return perf_pattern_wrong(c, c->B.recv, c->root, (size_t)c->me * c->count, c->count) +
         perf_guard_wrong(c);
}

static moecclResult_t moe(struct perf_ctx* c)
{
  return moecclScatter(c->B.send, c->B.recv, c->count, c->dt->type, c->root, c->comm, NULL);
}

static void mpi(struct perf_ctx* c)
{
  MPI_Scatter(c->B.send, (int)c->count, c->mpi_type, c->B.recv, (int)c->count, c->mpi_type,
              c->root, MPI_COMM_WORLD);
}

static const struct perf_coll coll = {
    .prog = "scatter_perf",
    .call = "Scatter",
    .rooted = 1,
    .factor = factor,
    .factor_help = "(n-1)/n",
    .algo_env = "MOECCL_SCATTER_ALGO",
    .algos = "direct,auto",
    .size_help = "bytes the root sends, n blocks (count = elements each rank receives)",
    .roof_help = "every rank at once copies b = size/n bytes: its block",
    .mpi_help = "MPI_Scatter on the same buffers (16- and 8-bit floats moved as integers)",
    .shape = shape,
    .ops = {.fill = fill, .verify = verify, .moe = moe, .mpi = mpi},
};

int main(int argc, char** argv) { return perf_coll_main(argc, argv, &coll); }
