/*
 * all_reduce_perf - moecclAllReduce against MPI_Allreduce on the same
 * buffers, in the shape of nccl-tests' all_reduce_perf.  The harness
 * (perf_common.h) does everything but what is below.
 */
#include "perf_common.h"

static double factor(int n) { return 2.0 * (n - 1) / n; }

/* A size is the bytes of the vector on each rank (sent and received).
 * The single-copy shared-memory AllReduce of C bytes makes each rank read
 * C + (n-1)C/n and write C; a memcpy of B bytes reads B and writes B. */
static void shape(struct perf_ctx* c, size_t req)
{
  size_t ts = c->dt->size, n = (size_t)c->n;
  c->count = req / ts;
  c->bytes = c->send_bytes = c->recv_bytes = c->count * ts;
  c->roof_bytes = (c->bytes + (n - 1) * c->bytes / n + c->bytes) / 2;
}

static void fill(struct perf_ctx* c) { perf_red_fill(c, c->B.send, 0, c->count); }

static long long verify(struct perf_ctx* c)
{
  return perf_red_wrong(c, c->B.recv, 0, c->count) + perf_guard_wrong(c);
}

static moecclResult_t moe(struct perf_ctx* c)
{
  return moecclAllReduce(c->B.send, c->B.recv, c->count, c->dt->type, c->op, c->comm, NULL);
}

static void mpi(struct perf_ctx* c)
{
  MPI_Allreduce(c->B.send, c->B.recv, (int)c->count, c->mpi_type, c->mpi_op, MPI_COMM_WORLD);
}

static const struct perf_coll coll = {
    .prog = "all_reduce_perf",
    .call = "AllReduce",
    .reduces = 1,
    .factor = factor,
    .factor_help = "2(n-1)/n",
    .algo_env = "MOECCL_ALLREDUCE_ALGO",
    .algos = "ring,rhd,rd,tree,direct,hier,auto",
    .size_help = "bytes of the vector on each rank (count = size / type size)",
    .roof_help = "every rank at once copies (C + (n-1)C/n + C)/2 bytes, C = size: the\n"
                 "  single-copy shared-memory AllReduce reads C + (n-1)C/n and writes C per rank",
    .mpi_help = "MPI_Allreduce on the same buffers (n/a for half, bfloat16, fp8 and avg)",
    .shape = shape,
    .ops = {.fill = fill, .verify = verify, .moe = moe, .mpi = mpi},
};

int main(int argc, char** argv) { return perf_coll_main(argc, argv, &coll); }
