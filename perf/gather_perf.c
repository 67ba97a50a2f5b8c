/*
 * gather_perf - moecclGather against MPI_Gather on the same buffers, in the
 * shape of nccl-tests' gather_perf.
 */
#include "perf_common.h"

static double factor(int n) { return (double)(n - 1) / n; }

/* A size is the bytes the root receives (n blocks); count is the block each
 * rank sends.  Each rank's block is copied once, all at once. */
static void shape(struct perf_ctx* c, size_t req)
{
  size_t ts = c->dt->size, n = (size_t)c->n;
  c->count = req / (ts * n);
  c->send_bytes = c->roof_bytes = c->count * ts;
  c->bytes = c->recv_bytes = n * c->send_bytes;
}

static void fill(struct perf_ctx* c) { perf_pattern_fill(c, c->B.send, c->me, 0, c->count); }

/* Every block on the root; elsewhere recvbuff must stay untouched. */
static long long verify(struct perf_ctx* c)
{
  if (c->me != c->root)
    return perf_untouched_wrong(c, c->B.recv, c->recv_bytes + PERF_GUARD_BYTES);
  long long wrong = perf_guard_wrong(c);
  for (int j = 0; j < c->n; j++)
    wrong += perf_pattern_wrong(c, c->B.recv + (size_t)j * c->send_bytes, j, 0, c->count);
  return wrong;
}

static moecclResult_t moe(struct perf_ctx* c)
{
  return moecclGather(c->B.send, c->B.recv, c->count, c->dt->type, c->root, c->comm, NULL);
}

static void mpi(struct perf_ctx* c)
{
  MPI_Gather(c->B.send, (int)c->count, c->mpi_type, c->B.recv, (int)c->count, c->mpi_type,
             c->root, MPI_COMM_WORLD);
}

static const struct perf_coll coll = {
    .prog = "gather_perf",
    .call = "Gather",
    .rooted = 1,
    .factor = factor,
    .factor_help = "(n-1)/n",
    .algo_env = "MOECCL_GATHER_ALGO",
    .algos = "direct,auto",
    .size_help = "bytes the root receives, n blocks (count = elements each rank sends)",
    .roof_help = "every rank at once copies b = size/n bytes: its block",
    .mpi_help = "MPI_Gather on the same buffers (16- and 8-bit floats moved as integers)",
    .shape = shape,
    .ops = {.fill = fill, .verify = verify, .moe = moe, .mpi = mpi},
};

int main(int argc, char** argv) { return perf_coll_main(argc, argv, &coll); }
