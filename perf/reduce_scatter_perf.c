/*
 * reduce_scatter_perf - moecclReduceScatter against MPI_Reduce_scatter_block
 * on the same buffers, in the shape of nccl-tests' reduce_scatter_perf.
 */
#include "perf_common.h"

static double factor(int n) { return (double)(n - 1) / n; }

/* A size is the bytes each rank sends (n blocks); count is the block each
 * receives.  Reducing block b = count elements reads n*b and writes b. */
static void shape(struct perf_ctx* c, size_t req)
{
  size_t ts = c->dt->size, n = (size_t)c->n;
  c->count = req / (ts * n);
  c->recv_bytes = c->count * ts;
  c->bytes = c->send_bytes = n * c->recv_bytes;
  c->roof_bytes = (n * c->recv_bytes + c->recv_bytes) / 2;
}

static void fill(struct perf_ctx* c) { perf_red_fill(c, c->B.send, 0, (size_t)c->n * c->count); }

static long long verify(struct perf_ctx* c)
{
  return perf_red_wrong(c, c->B.recv, (size_t)c->me * c->count, c->count) + perf_guard_wrong(c);
}

static moecclResult_t moe(struct perf_ctx* c)
{
  return moecclReduceScatter(c->B.send, c->B.recv, c->count, c->dt->type, c->op, c->comm, NULL);
}

static void mpi(struct perf_ctx* c)
{
  MPI_Reduce_scatter_block(c->B.send, c->B.recv, (int)c->count, c->mpi_type, c->mpi_op,
                           MPI_COMM_WORLD);
}

static const struct perf_coll coll = {
    .prog = "reduce_scatter_perf",
    .call = "ReduceScatter",
    .reduces = 1,
    .factor = factor,
    .factor_help = "(n-1)/n",
    .algo_env = "MOECCL_REDUCESCATTER_ALGO",
    .algos = "ring,rhd,direct,auto",
    .size_help = "bytes each rank sends, n blocks (count = elements each rank receives)",
    .roof_help = "every rank at once copies (n*b + b)/2 bytes, b = size/n the block it\n"
                 "  receives: reducing it reads n blocks and writes one",
    .mpi_help = "MPI_Reduce_scatter_block on the same buffers (n/a for half, bfloat16, fp8, avg)",
    .shape = shape,
    .ops = {.fill = fill, .verify = verify, .moe = moe, .mpi = mpi},
};

int main(int argc, char** argv) { return perf_coll_main(argc, argv, &coll); }
