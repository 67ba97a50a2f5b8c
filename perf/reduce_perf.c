/*
 * reduce_perf - moecclReduce against MPI_Reduce on the same buffers, in the
 * shape of nccl-tests' reduce_perf.
 */
#include "perf_common.h"

static double factor(int n) { return 1.0; }

/* A size is the bytes of the vector.  The root's traffic is the AllReduce's
 * (reduce a 1/n slice from n ranks, then gather the n-1 others): it reads
 * C + (n-1)C/n and writes C. */
static void shape(struct perf_ctx* c, size_t req)
{
  size_t ts = c->dt->size, n = (size_t)c->n;
  c->count = req / ts;
  c->bytes = c->send_bytes = c->recv_bytes = c->count * ts;
  c->roof_bytes = (c->bytes + (n - 1) * c->bytes / n + c->bytes) / 2;
}

static void fill(struct perf_ctx* c) { perf_red_fill(c, c->B.send, 0, c->count); }

/* The result on the root; elsewhere recvbuff must stay untouched. */
static long long verify(struct perf_ctx* c)
{
  if (c->me != c->root)
    return perf_untouched_wrong(c, c->B.recv, c->recv_bytes + PERF_GUARD_BYTES);
  return perf_red_wrong(c, c->B.recv, 0, c->count) + perf_guard_wrong(c);
}

static moecclResult_t moe(struct perf_ctx* c)
{
  return moecclReduce(c->B.send, c->B.recv, c->count, c->dt->type, c->op, c->root, c->comm, NULL);
}

static void mpi(struct perf_ctx* c)
{
  MPI_Reduce(c->B.send, c->B.recv, (int)c->count, c->mpi_type, c->mpi_op, c->root,
             MPI_COMM_WORLD);
}

static const struct perf_coll coll = {
    .prog = "reduce_perf",
    .call = "Reduce",
    .reduces = 1,
    .rooted = 1,
    .factor = factor,
    .factor_help = "1",
    .algo_env = "MOECCL_REDUCE_ALGO",
    .algos = "tree,direct,auto",
    .size_help = "bytes of the vector (count = size / type size)",
    .roof_help = "every rank at once copies (C + (n-1)C/n + C)/2 bytes, C = size: the\n"
                 "  root's traffic, as in the single-copy AllReduce",
    .mpi_help = "MPI_Reduce on the same buffers (n/a for half, bfloat16, fp8 and avg)",
    .shape = shape,
    .ops = {.fill = fill, .verify = verify, .moe = moe, .mpi = mpi},
};

int main(int argc, char** argv) { return perf_coll_main(argc, argv, &coll); }
