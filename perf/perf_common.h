/*
 * perf_common.h - the harness shared by the moeccl benchmarks (a2a_perf and
 * the *_perf tools of the other collectives), in the way nccl-tests shares
 * common.cu between its tests.
 *
 * Every tool runs moeccl and the MPI baseline on the same processes and the
 * same buffers in one run, interleaved rep by rep, so that their ratio is
 * taken under the same machine noise, and times a memory roofline (every
 * rank copying with memcpy at once) in the same run.  MPI is the launcher,
 * the carrier of the unique id and the baseline; the library never sees it.
 *
 * Two levels:
 *  - building blocks (options, buffers, timing, checking, rooflines, the
 *    table and --json), which a2a_perf (alltoall_perf.c) composes itself;
 *  - perf_coll_main(), a whole tool for a collective described by a
 *    struct perf_coll: all_reduce_perf.c and the others are that struct
 *    and a few callbacks.
 *
 * One header, one library (perf/libperf_common.la), its parts in:
 *   harness.c        types, helpers, communicators, buffers, series of -a
 *   harness_args.c   options
 *   harness_time.c   timing and checking a call
 *   harness_check.c  the checks' values (patterns, reductions)
 *   roofline.c       the copy roofline and the bare net / shm exchanges
 *   report.c         header, table, summary and --json
 *   coll_main.c      perf_coll_main
 * and, shared with the tools without MPI, perf_parse.c (numbers on the
 * command line) and perf_rand.c (seeded randomness).
 */
#ifndef MOECCL_PERF_COMMON_H_
#define MOECCL_PERF_COMMON_H_

#include <getopt.h>
#include <stddef.h>
#include <stdint.h>

#include <mpi.h>

#include "moeccl.h"
#include "perf_parse.h"
#include "perf_rand.h"

#define PERF_GUARD_BYTES 4096 /* sentinel area checked after the output */
#define PERF_SENTINEL 0xA5    /* byte an output buffer holds before a check */
#define PERF_SEED 0x6d6f6563636cULL

/* ---- types and small helpers -------------------------------------------- */

struct perf_dtype {
  const char* name;
  const char* alias;
  moecclDataType_t type;
  size_t size;
};

extern const struct perf_dtype perf_dtypes[];
extern const int perf_ndtypes;

/* Reduction operations as nccl-tests names them (-o). */
extern const char* const perf_op_names[moecclNumOps];

/* The program name in messages ("a2a_perf"). */
extern const char* perf_prog;

void* perf_xcalloc(size_t n, size_t size);
double perf_median(const double* v, int n);
/* MPI type for moving elements of t: same-width unsigned integers stand in
 * for the floats MPI lacks (exact, as nothing is computed on them). */
MPI_Datatype perf_mpi_move_type(moecclDataType_t t);
/* MPI type for reducing elements of t; MPI_DATATYPE_NULL where MPI has none
 * (half, bfloat16, fp8). */
MPI_Datatype perf_mpi_reduce_type(moecclDataType_t t);
/* MPI_SUM etc.; MPI_OP_NULL for avg, which MPI lacks. */
MPI_Op perf_mpi_op(moecclRedOp_t op);

/* ---- options ------------------------------------------------------------ */

struct perf_opts {
  size_t minbytes, maxbytes, step, stepbytes; /* stepbytes > 0: -i, add instead of multiply */
  int iters, warmup, check, reps, memalloc, mpi_baseline;
  const struct perf_dtype* dt; /* NULL with -d all */
  int op;                      /* -o: moecclRedOp_t, or -1 for all */
  int root;                    /* -r: root, or -1 for all */
  const char* json;
  int net_roof;         /* --net-roofline given */
  const char* net_addr; /* address every rank listens on */
  int shm_roof;         /* --shm-roofline given (not with --net-roofline) */
};

/* What a tool adds to the common options. */
struct perf_tool {
  const char* size_what;   /* -b help: "bytes each rank sends" */
  const char* help_step;   /* lines after -f (or NULL) */
  const char* help_dtype;  /* last line of -d (NULL: "(default float)") */
  const char* help_mid;    /* lines after -d */
  const char* help_late;   /* lines after --baseline */
  const char* help_end;    /* lines after --json */
  const char* help_notes;  /* text after -h */
  const char* shortopts;   /* extra getopt letters */
  const struct option* longopts; /* extra long options, {NULL} ended */
  int types_all;           /* -d all is allowed */
  /* An extra option; 0, or -1 with the value rejected. */
  int (*apply)(int c, const char* arg, struct perf_opts* o, void* arg_state);
  void* state;
};

/* Every rank parses the same argv; only rank 0 talks.  Returns 0 to run, 1
 * after -h, 2 on a bad command line. */
int perf_parse_opts(int argc, char** argv, int me, const struct perf_tool* t, struct perf_opts* o);
/* --net-roofline[=ADDR] */
int perf_parse_net(const char* arg, struct perf_opts* o);
/* The sizes of the sweep: first, then next until 0. */
size_t perf_next_size(const struct perf_opts* o, size_t s);

/* ---- the run ------------------------------------------------------------ */

struct perf_bufs {
  char *send, *recv;          /* shared by moeccl and MPI */
  char *copy_src, *copy_dst;  /* roofline only */
  size_t send_cap, recv_cap;  /* recv_cap includes PERF_GUARD_BYTES */
  size_t copy_cap;
  int lib_alloc;              /* send/recv come from moecclMemAlloc */
};

/* Network roofline: one connected TCP socket per pair of ranks. */
struct perf_net {
  int on;                      /* mesh up on every rank; 0 once skipped */
  int shm;                     /* the shared-memory exchange, not sockets */
  int yield;                   /* sched_yield after an idle sweep (oversubscribed) */
  int local, cpus;             /* ranks on this node, CPUs they may run on */
  int* fd;                     /* per peer; -1 for this rank and when closed */
  size_t *soff, *slen, *sdone; /* per peer: send offset, length, progress (bytes) */
  size_t *roff, *rlen, *rdone; /* per peer: the same for the receive side */
  /* --shm-roofline: this node's segment; rank r's part holds a sequence
   * word per sender, then two inbox slots per sender (call parity). */
  char* seg;
  size_t part, slot;           /* bytes of a rank's part, of one slot */
  uint64_t seq;                /* exchanges so far */
  MPI_Win win;
};

enum perf_lib { PERF_MOECCL, PERF_MPI };

/* One rank's view of the run and of the call being measured. */
struct perf_ctx {
  const struct perf_opts* o;
  int me, n;
  moecclComm_t comm;
  moecclResult_t err; /* first moeccl error on this rank */
  struct perf_bufs B;
  struct perf_net net;
  /* The call being measured (perf_coll_main sets them; a2a_perf only dt). */
  const struct perf_dtype* dt;
  moecclRedOp_t op;
  int root;
  size_t count;      /* the call's count argument (elements) */
  size_t bytes;      /* the size column */
  size_t send_bytes; /* this rank's input and output, bytes */
  size_t recv_bytes;
  size_t roof_bytes; /* the roofline memcpy, bytes */
  enum perf_lib lib; /* whose result a check is verifying */
  MPI_Datatype mpi_type; /* perf_coll_main: the baseline's type and op */
  MPI_Op mpi_op;
  void* tool;        /* the tool's own state */
};

/* What the timing and checking drive. */
struct perf_ops {
  void (*fill)(struct perf_ctx*);             /* inputs of a check */
  void (*clear)(struct perf_ctx*);            /* NULL: sentinel recv_bytes + guard */
  long long (*verify)(struct perf_ctx*);      /* wrong elements on this rank */
  moecclResult_t (*moe)(struct perf_ctx*);    /* one moeccl call */
  void (*mpi)(struct perf_ctx*);              /* one MPI call */
  void (*select)(struct perf_ctx*, int series); /* NULL: a single moeccl series */
};

/* MPI is up: rank and size into c, perf_prog set. */
void perf_init(struct perf_ctx* c, const char* prog, const struct perf_opts* o);
/* Makes a communicator of all ranks (the id goes by MPI_Bcast); -1 when it
 * failed on any rank. */
int perf_comm_init(int me, int n, moecclComm_t* comm);
void perf_bufs_alloc(struct perf_bufs* B, size_t send_max, size_t recv_max, size_t copy_max,
                     int lib);
void perf_bufs_free(struct perf_bufs* B);
/* One buffer of size bytes from moecclMemAlloc (lib) or malloc, every page
 * touched; MPI_Abort when there is none. */
char* perf_buf_alloc(size_t size, int lib);
void perf_buf_free(char* p, int lib);

/* Records the first moeccl failure of this rank and says so on stderr. */
moecclResult_t perf_moe_result(struct perf_ctx* c, moecclResult_t r, const char* call,
                               size_t bytes);
/* Before a checked call: ops->clear, or the sentinel over recv_bytes and
 * the guard after them. */
void perf_clear_recv(struct perf_ctx* c, const struct perf_ops* ops);
/* One check: ops->fill, ops->clear, a barrier, one call, ops->verify.
 * Returns the wrong elements summed over ranks, or -1 when a moeccl call
 * failed on some rank. */
long long perf_check_once(struct perf_ctx* c, const struct perf_ops* ops, enum perf_lib lib);
/* Checks each moeccl series once (wrong[s], -1 unchecked), warms each and
 * MPI up, then runs the reps: in each rep every series and MPI once, the
 * series in an order rotated by one each rep and MPI first or last in turn;
 * moe_us[s] and *mpi_us get the medians (mpi_us -1 without MPI).  Returns -1
 * when a moeccl call failed. */
int perf_time(struct perf_ctx* c, const struct perf_ops* ops, int nseries, int mpi_on,
              double* moe_us, double* mpi_us, long long* wrong);
/* Copy roofline: every rank copies bytes between two buffers touched
 * beforehand, all at once, with each kernel of perf_roofline_kernels();
 * the fastest rep (the slowest rank counting in each) of the fastest
 * kernel, us. */
double perf_roofline_us(struct perf_ctx* c, size_t bytes);
/* The copy kernels perf_roofline_us tries, in words. */
const char* perf_roofline_kernels(void);

/* Network roofline (--net-roofline): the mesh is made at startup; each size
 * fills net.soff/slen/roff/rlen (bytes) and times the exchange as the copy
 * roofline, verifying the blocks with ops when -c is on.  Returns us, or -1
 * when not measured. */
void perf_net_open(struct perf_ctx* c);
void perf_net_free(struct perf_ctx* c);
double perf_net_roofline_us(struct perf_ctx* c, const struct perf_ops* ops, size_t bytes);
/* --shm-roofline: the same blocks through a bare shared-memory exchange
 * (collective; needs every rank on one node, else M->on stays 0). */
void perf_shm_open(struct perf_ctx* c, size_t max_block);
void perf_shm_free(struct perf_ctx* c);

/* Series of -a: one per algorithm name, each with its own communicator
 * made with the variable env set to the name ("auto" unsets it; NULL, the
 * single series without -a, leaves it alone).  perf_algo_list returns how
 * many names arg holds ("all": all_list; a comma list otherwise). */
int perf_algo_list(const char* arg, const char* all_list, char*** out);
void perf_algo_env(const char* env, const char* name);
void perf_algo_label(const char* env, char* dst, size_t len, const char* name);
int perf_comms_init(const char* env, char** algos, int nalgos, int me, int n, moecclComm_t* comms);
/* After a failure the peers may be gone: abort locally, never wait. */
int perf_comms_close(moecclComm_t* comms, int nalgos, int failed, int me);

/* ---- checking helpers --------------------------------------------------- */

/* Raw elements (byte order independent). */
void perf_put_bits(char* p, size_t ts, uint64_t v);
uint64_t perf_get_bits(const char* p, size_t ts);
uint64_t perf_bits_mask(size_t ts);
/* Values of any type; perf_put_value stores small integers exactly. */
void perf_put_value(char* p, const struct perf_dtype* dt, double v);
double perf_get_value(const char* p, const struct perf_dtype* dt);
/* Moving collectives: bits of element k of rank's input. */
uint64_t perf_pattern(int rank, size_t k);
/* Reductions: the input of element k on rank (small integers whose sums,
 * products, maxima and minima over the ranks are exact in c->dt), and the
 * expected reduced element; perf_red_ok compares (exact, but within n+1
 * units in the last place for avg on floating types, whose 1/n
 * pre-multiplier rounds). */
double perf_red_input(const struct perf_ctx* c, int rank, size_t k);
double perf_red_expect(const struct perf_ctx* c, size_t k);
int perf_red_ok(const struct perf_ctx* c, double got, double want);
/* Element-sized pieces of len bytes at p that lost the sentinel. */
long long perf_untouched_wrong(const struct perf_ctx* c, const char* p, size_t len);
/* The same for the guard after recv_bytes of the receive buffer. */
long long perf_guard_wrong(const struct perf_ctx* c);
/* count elements at p: rank's pattern from element k0 on; wrong ones. */
void perf_pattern_fill(const struct perf_ctx* c, char* p, int rank, size_t k0, size_t count);
long long perf_pattern_wrong(const struct perf_ctx* c, const char* p, int rank, size_t k0,
                             size_t count);
/* count elements at p: this rank's reduction inputs from element k0 on;
 * results that differ from the expected reduction. */
void perf_red_fill(const struct perf_ctx* c, char* p, size_t k0, size_t count);
long long perf_red_wrong(const struct perf_ctx* c, const char* p, size_t k0, size_t count);

/* ---- output ------------------------------------------------------------- */

struct perf_row {
  size_t bytes, count, extra;
  const char* type;
  char label[3][64];              /* the tool's text columns */
  double moe_us, mpi_us, roof_us; /* mpi_us < 0: not measured */
  double net_us;                  /* bare roofline (net or shm); < 0: not measured */
  long long moe_wrong, mpi_wrong; /* < 0: not checked */
};

struct perf_rows {
  struct perf_row* v;
  size_t len, cap;
};

/* The table's shape. */
struct perf_table {
  int nlabels;           /* text columns after type: 2 or 3 */
  const char* label[3];  /* their headers */
  int width[3];
  const char* key[3];    /* their --json keys */
  double factor;         /* busbw = algbw * factor */
  const char* coll;      /* --json "collective" (NULL: none) */
  const char* extra_key; /* --json key of row.extra after nranks (NULL: none) */
  int json_factor;       /* --json carries busbw_factor */
  int json_net;          /* --json carries the netroof keys (null when not measured) */
  /* "net" or "shm": the roofline columns show that bare exchange (row.net_us)
   * and --json carries its keys (netroof_us, shmroof_us ...); NULL: the copy
   * roofline. */
  const char* bare;
};

void perf_rows_push(struct perf_rows* rows, const struct perf_row* r);
/* "# prog: moeccl X vs MPI", "# nranks ... validation" (rank 0). */
void perf_header_top(const struct perf_ctx* c);
/* "#", the rank list (collective), the column headers (rank 0). */
void perf_header_columns(const struct perf_ctx* c, const struct perf_table* t);
void perf_print_row(const struct perf_row* r, const struct perf_table* t);
/* Averages, geomean speedup, wrong total; returns the wrong total. */
long long perf_print_summary(const struct perf_rows* rows, const struct perf_table* t, int failed);
int perf_write_json(const char* path, const struct perf_rows* rows, const struct perf_table* t,
                    int n);

/* ---- a whole tool for one collective ------------------------------------ */

struct perf_coll {
  const char* prog;   /* "all_reduce_perf" */
  const char* call;   /* "AllReduce", for messages and --json */
  int reduces;        /* -o applies */
  int rooted;         /* -r applies */
  double (*factor)(int n);   /* busbw / algbw */
  const char* factor_help;   /* "2(n-1)/n" */
  const char* algo_env;      /* -a sets it: "MOECCL_ALLREDUCE_ALGO" */
  const char* algos;         /* -a all: "ring,rhd,...,auto" */
  const char* size_help;     /* what a size is (help and header) */
  const char* roof_help;     /* the roofline's formula (help and header) */
  const char* mpi_help;      /* the baseline call (help and header) */
  /* For a requested size: c->count, bytes, send_bytes, recv_bytes,
   * roof_bytes from c->dt, c->n (whole elements; sizes round down). */
  void (*shape)(struct perf_ctx* c, size_t req);
  struct perf_ops ops;       /* fill, verify, moe, mpi (clear, select NULL) */
};

/* MPI_Init to MPI_Finalize; returns main's exit status. */
int perf_coll_main(int argc, char** argv, const struct perf_coll* coll);

#endif
