/*
 * MoE dispatch and combine (include/moeccl_moe.h), the public calls: the
 * plan (placement), moecclMoeLayout (its exchanges and tables are
 * moe_layout.c's, the hierarchical path's moe_hier.c's) and the data calls'
 * checks.  The data calls go down the one planning path
 * (moeccl_call_issue, plan.c, the generator, the executor); nothing here
 * moves a row.
 */
#include "api/moe_int.h"
#include "comm/span.h"
#include "exec/enqueue.h"
#include "kernels/rows.h"
#include "tune/tuner.h"

#include <stdlib.h>
#include <string.h>

static moecclResult_t plan_check(moecclMoePlan_t plan, const char* fn) {
  if (!plan || plan->magic != MOECCL_MOE_MAGIC)
    return moeccl_error(NULL, moecclInvalidArgument, "%s: plan %p is not a live MoE plan", fn,
                        (void*)plan);
  return moeccl_comm_check(plan->comm, "comm");
}

/* ---- the plan ------------------------------------------------------------ */

static moecclResult_t check_placement(moeccl_comm_t* c, int E, const int* placement) {
  for (int e = 0; placement && e < E; e++) {
    if (placement[e] == -1)
      return moeccl_error(c, moecclInvalidArgument,
                          "moecclMoePlanCreate: placement[%d] is -1: expert %d has no rank (the "
                          "placement must cover every expert)",
                          e, e);
    if (placement[e] < 0 || placement[e] >= c->nranks)
      return moeccl_error(c, moecclInvalidArgument,
                          "moecclMoePlanCreate: placement[%d] = %d is out of range [0,%d)", e,
                          placement[e], c->nranks);
  }
  return moecclSuccess;
}

static void plan_free(moecclMoePlan_t p) {
  void* arrays[] = {
      p->owner,       p->local_index, p->local_experts, p->send_first, p->recv_first, p->counts,
      p->stamp,       p->tpair,       p->msg_out,       p->msg_in,     p->ecount,     p->ecur,
      p->pair_token,  p->route_send,  p->route_recv,    p->exp_all,    p->exp_remote, p->exp_self,
      p->part,        p->own,         p->dot,           p->tok,        p->via,        p->node_rank,
      p->relay_first, p->rin_first,   p->fw_first,      p->fw_cur,     p->cost_out,   p->cost_in,
      p->tmask,       p->relay_token, p->relay_mask,    p->rin_mask,   p->fw_rows,    p->fsum,
      p->own_h,       p->progs,       p->exp_src_first, p->exp_src,    p->own_self,   p->own_src,
      p->seen,        p->exp_src_idx, p->src_token,     p->gather,     p->cost_all,   p->rin_token,
      p->rin_key,     p->peer_T};
  for (size_t i = 0; i < sizeof(arrays) / sizeof(arrays[0]); i++) free(arrays[i]);
  if (p->send_area) moecclMemFree(p->send_area);
  p->magic = 0;
  free(p);
}

/* owner, local_index, local_experts and the placement hash. */
static void place(moecclMoePlan_t p, const int* placement) {
  int n = p->comm->nranks, E = p->E;
  for (int e = 0; e < E; e++) {
    if (placement) {
      p->owner[e] = placement[e];
      continue;
    }
    int r = 0; /* the r with r*E/n <= e < (r+1)*E/n */
    while ((long)(r + 1) * E / n <= e) r++;
    p->owner[e] = r;
  }
  uint64_t h = 1469598103934665603ULL ^ (uint64_t)n;
  p->nlocal = 0;
  for (int e = 0; e < E; e++) {
    h = (h ^ (uint64_t)p->owner[e]) * 1099511628211ULL;
    if (p->owner[e] == p->comm->rank) p->local_experts[p->nlocal++] = e;
  }
  p->placement_hash = h;
  /* local index: experts of each rank in ascending id order */
  size_t* next = p->send_first; /* scratch here: n entries */
  memset(next, 0, sizeof(size_t) * (size_t)n);
  for (int e = 0; e < E; e++) p->local_index[e] = (int)next[p->owner[e]]++;
}

MOECCL_EXPORT moecclResult_t moecclMoePlanCreate(moecclMoePlan_t* plan, int numExperts,
                                                 const int* placement, moecclComm_t comm) {
  MOECCL_CHECK(moeccl_comm_check(comm, "comm"));
  if (!plan) return moeccl_error(comm, moecclInvalidArgument, "moecclMoePlanCreate: plan is NULL");
  if (numExperts < 1)
    return moeccl_error(comm, moecclInvalidArgument,
                        "moecclMoePlanCreate: numExperts %d is not positive", numExperts);
  /* programs are named by a 16-bit index in the schedule (MOECCL_MOE_MAX_PROGS + 2n) */
  if (comm->nranks > (UINT16_MAX - MOECCL_MOE_MAX_PROGS) / 2)
    return moeccl_error(comm, moecclInvalidArgument,
                        "moecclMoePlanCreate: %d ranks; MoE plans support at most %d", comm->nranks,
                        (UINT16_MAX - MOECCL_MOE_MAX_PROGS) / 2);
  MOECCL_CHECK(check_placement(comm, numExperts, placement));
  moecclMoePlan_t p = calloc(1, sizeof(*p));
  if (!p) return moeccl_error(comm, moecclSystemError, "out of memory");
  size_t n = (size_t)comm->nranks, E = (size_t)numExperts;
  p->magic = MOECCL_MOE_MAGIC;
  p->comm = comm;
  p->E = numExperts;
  p->owner = malloc(E * sizeof(int));
  p->local_index = malloc(E * sizeof(int));
  p->local_experts = malloc(E * sizeof(int));
  p->send_first = calloc(n + 1, sizeof(size_t));
  p->recv_first = calloc(n + 1, sizeof(size_t));
  p->counts = calloc(4 * n, sizeof(size_t));
  p->stamp = malloc(n * sizeof(long));
  p->tpair = malloc(n * sizeof(long));
  p->msg_out = calloc(MOE_MSG * n, sizeof(uint64_t));
  p->msg_in = calloc(MOE_MSG * n, sizeof(uint64_t));
  p->ecount = calloc(E, sizeof(size_t));
  p->ecur = calloc(E, sizeof(size_t));
  p->progs = calloc(MOECCL_MOE_MAX_PROGS + MOECCL_MOE_MAX_CHUNKS + 2 * n, sizeof(moeccl_rows_t));
  p->exp_src_first = calloc(n + 1, sizeof(size_t));
  if (!p->owner || !p->local_index || !p->local_experts || !p->send_first || !p->recv_first ||
      !p->counts || !p->stamp || !p->tpair || !p->msg_out || !p->msg_in || !p->ecount || !p->ecur ||
      !p->progs || !p->exp_src_first) {
    plan_free(p);
    return moeccl_error(comm, moecclSystemError, "out of memory");
  }
  place(p, placement);
  if (moeccl_moeplan_hier_setup(p) != moecclSuccess) {
    plan_free(p);
    return moeccl_error(comm, moecclSystemError, "out of memory");
  }
  *plan = p;
  return moecclSuccess;
}

MOECCL_EXPORT moecclResult_t moecclMoePlanDestroy(moecclMoePlan_t plan) {
  if (!plan || plan->magic != MOECCL_MOE_MAGIC)
    return moeccl_error(NULL, moecclInvalidArgument,
                        "moecclMoePlanDestroy: plan %p is not a live MoE plan", (void*)plan);
  plan_free(plan);
  return moecclSuccess;
}

MOECCL_EXPORT moecclResult_t moecclMoeLocalExperts(moecclMoePlan_t plan, int* numLocalExperts,
                                                   int* localExperts) {
  MOECCL_CHECK(plan_check(plan, "moecclMoeLocalExperts"));
  if (numLocalExperts) *numLocalExperts = plan->nlocal;
  if (localExperts) memcpy(localExperts, plan->local_experts, sizeof(int) * (size_t)plan->nlocal);
  return moecclSuccess;
}

/* ---- the layout (its work: moe_layout.c) -------------------------------- */

/* Waits until every operation issued on the communicator before now has
 * finished: queued calls of this plan read the tables a layout rewrites. */
static void wait_idle(moeccl_comm_t* c) {
  moeccl_comm_wait_turn(c, moeccl_comm_issue(c, 1));
  moeccl_comm_retire(c, 1);
}

MOECCL_EXPORT moecclResult_t moecclMoeLayout(moecclMoePlan_t plan, const int32_t* topkIdx,
                                             size_t numTokens, int topk, size_t capacity,
                                             size_t* recvCounts, size_t* numDropped) {
  MOECCL_CHECK(plan_check(plan, "moecclMoeLayout"));
  MOECCL_CHECK(moeccl_moeplan_check_layout(plan, topkIdx, numTokens, topk));
  wait_idle(plan->comm);
  plan->laid_out = 0;
  size_t dropped = 0;
  MOECCL_CHECK(moeccl_moeplan_layout(plan, topkIdx, numTokens, topk, capacity, &dropped));
  plan->laid_out = 1;
  plan->capacity = capacity;
  if (recvCounts) memcpy(recvCounts, plan->ecount, sizeof(size_t) * (size_t)plan->nlocal);
  if (numDropped) *numDropped = dropped;
  return moecclSuccess;
}

/* ---- the data calls ------------------------------------------------------ */

/* One data call before it is checked: in is read, out written.  The entry
 * points fill it by field name; what they leave out is 0 or NULL. */
typedef struct {
  const char* fn;
  moeccl_moe_op_t op;
  const void* in;
  const char* in_name;
  size_t in_rows;
  void* out;
  const char* out_name;
  size_t out_rows;
  size_t rows_cap; /* what the caller says its expert-row buffer holds */
  int weighted, gate_grad;
  const float* weights;
  const void* expert_out;
  float* grad_weights;
  size_t hidden;
  moecclDataType_t type;
  moecclStream_t stream;
} moe_args_t;

static int overlaps(const void* a, size_t abytes, const void* b, size_t bbytes) {
  uintptr_t x = (uintptr_t)a, y = (uintptr_t)b;
  return abytes && bbytes && x < y + bbytes && y < x + abytes;
}

/* buf holds rows rows of row_bytes (checked not to overflow): not NULL
 * when rows > 0, and a span a buffer of the caller can have (span.h). */
static moecclResult_t check_rows(moeccl_comm_t* c, const moe_args_t* a, const void* buf,
                                 const char* name, size_t rows, size_t row_bytes) {
  if (rows && !buf)
    return moeccl_error(c, moecclInvalidArgument, "%s: %s is NULL with %zu rows", a->fn, name,
                        rows);
  moeccl_span_t why = moeccl_span_check(buf, rows * row_bytes, NULL);
  if (why != MOECCL_SPAN_OK)
    return moeccl_error(c, moecclInvalidArgument,
                        "%s on rank %d: %s %p of %zu rows of %zu bytes (hidden %zu) would %s",
                        a->fn, c->rank, name, buf, rows, row_bytes, a->hidden,
                        moeccl_span_text(why));
  return moecclSuccess;
}

/* The combine backward's dot products read expertRows and write
 * gradWeights where they lie: both in device memory (the stream path runs
 * the dots as kernels there) or both in host memory (the host path). */
static moecclResult_t check_dot_kinds(moeccl_comm_t* c, const moe_args_t* a) {
  if (!a->expert_out || !a->grad_weights) return moecclSuccess;
  moeccl_mem_t e = moeccl_mem_of(a->expert_out), g = moeccl_mem_of(a->grad_weights);
  if (e.kind == g.kind) return moecclSuccess;
  return moeccl_error(c, moecclInvalidArgument,
                      "%s on rank %d: expertRows is %s memory but gradWeights %s memory: pass "
                      "both in device memory (the stream path) or both in host memory",
                      a->fn, c->rank, moeccl_mem_name(e), moeccl_mem_name(g));
}

static moecclResult_t check_data(moecclMoePlan_t p, const moe_args_t* a) {
  moeccl_comm_t* c = p->comm;
  const moeccl_moe_layout_t* l = &p->lay;
  if (!p->laid_out)
    return moeccl_error(c, moecclInvalidUsage, "%s: the plan has no layout (moecclMoeLayout)",
                        a->fn);
  size_t es = moeccl_type_size(a->type);
  if (es == 0)
    return moeccl_error(c, moecclInvalidArgument, "%s: datatype %d is invalid", a->fn,
                        (int)a->type);
  if (a->op != MOECCL_MOE_DISPATCH && !moeccl_rows_type_ok(a->type))
    return moeccl_error(c, moecclInvalidArgument,
                        "%s: datatype %d is not float32, float16 or bfloat16", a->fn, (int)a->type);
  if (a->hidden == 0 && (l->T > 0 || l->R > 0))
    return moeccl_error(c, moecclInvalidArgument, "%s: hidden is 0 with %zu tokens, %zu rows",
                        a->fn, l->T, l->R);
  /* Across nodes a rank may forward others' rows, and the path is chosen
   * by the row size: every rank must pass the same hidden, never 0. */
  if (a->hidden == 0 && l->hier_ok)
    return moeccl_error(c, moecclInvalidArgument,
                        "%s: hidden is 0 on a communicator that spans nodes (this rank may "
                        "forward other ranks' rows; pass the same hidden as every rank)",
                        a->fn);
  size_t most = l->T > l->R ? l->T : l->R;
  if (a->hidden && most > SIZE_MAX / a->hidden / es)
    return moeccl_error(c, moecclInvalidArgument, "%s: hidden %zu times rows overflows", a->fn,
                        a->hidden);
  if (a->rows_cap < l->R)
    return moeccl_error(c, moecclInvalidArgument,
                        "%s: the expert-row buffer holds %zu rows, this rank receives %zu", a->fn,
                        a->rows_cap, l->R);
  size_t rb = a->hidden * es;
  MOECCL_CHECK(check_rows(c, a, a->in, a->in_name, a->in_rows, rb));
  MOECCL_CHECK(check_rows(c, a, a->out, a->out_name, a->out_rows, rb));
  size_t slots = l->T * (size_t)l->K;
  if (a->weighted) MOECCL_CHECK(check_rows(c, a, a->weights, "weights", slots, sizeof(float)));
  if (a->gate_grad) {
    MOECCL_CHECK(check_rows(c, a, a->expert_out, "expertRows", l->R, rb));
    MOECCL_CHECK(check_rows(c, a, a->grad_weights, "gradWeights", slots, sizeof(float)));
    if (overlaps(a->grad_weights, slots * sizeof(float), a->out, a->out_rows * a->hidden * es))
      return moeccl_error(c, moecclInvalidArgument, "%s: gradWeights overlaps gradExpertRows",
                          a->fn);
    MOECCL_CHECK(check_dot_kinds(c, a));
  }
  if (overlaps(a->in, a->in_rows * rb, a->out, a->out_rows * rb))
    return moeccl_error(c, moecclInvalidArgument, "%s: %s and %s overlap", a->fn, a->in_name,
                        a->out_name);
  if (moeccl_stream_check(c, a->stream) != moecclSuccess)
    return moeccl_error(c, moecclInvalidArgument,
                        "%s: stream %p is not NULL nor a live moeccl host stream", a->fn,
                        a->stream);
  return moecclSuccess;
}

/* The send area for a call of rows of rb bytes: (P + Q) rows of
 * moecclMemAlloc memory, so that local peers read the rows this rank sends
 * from a mapping instead of by CMA.  It grows (rarely: the plan keeps the
 * largest) only once the calls queued before have finished; inside a group,
 * or when the memory cannot be had, the call uses scratch as before. */
static void* send_area(moecclMoePlan_t p, size_t rb) {
  const moeccl_moe_layout_t* l = &p->lay;
  size_t rows = moeccl_moe_area_rows(l);
  if (rb && rows > SIZE_MAX / rb) return NULL;
  size_t need = rows * rb;
  if (need == 0) return NULL;
  if (need <= p->send_area_bytes) return p->send_area;
  if (moeccl_group_active()) return NULL;
  wait_idle(p->comm);
  if (p->send_area) moecclMemFree(p->send_area);
  p->send_area = NULL, p->send_area_bytes = 0;
  size_t bytes = need + need / 4;
  void* q = NULL;
  if (moecclMemAlloc(&q, bytes) != moecclSuccess) return NULL;
  p->send_area = q, p->send_area_bytes = bytes;
  return q;
}

/* A call on device buffers packs in the schedule's scratch, which is device
 * memory then (the send area is host memory), so that its row programs run
 * as device kernels. */
static int on_device(const moe_args_t* a) {
  return moeccl_mem_of(a->out).kind == MOECCL_MEM_DEVICE ||
         (a->in && moeccl_mem_of(a->in).kind == MOECCL_MEM_DEVICE);
}

/* The tuner's path for rows of rb bytes, and its chunks, logged at ALGO
 * when they change. */
static int pick_path(moecclMoePlan_t p, const moe_args_t* a, size_t rb, int* chunks) {
  double us[3];
  int hier = moeccl_tuner_pick_moe(p->comm, &p->lay, rb, us, chunks);
  int logged = hier ? 1 + *chunks : 0;
  if (p->comm->rank == 0 && (logged != p->logged_path || rb != p->logged_rb)) {
    p->logged_path = logged, p->logged_rb = rb;
    if (us[1] < 0)
      INFO(ALGO, "rank %d: %s of %zu-byte rows: flat (%s)", p->comm->rank, a->fn, rb,
           moeccl_tuner_forced(p->comm)->moe == 0 ? "MOECCL_MOE_ALGO=flat"
                                                  : "one node, or a node of more than 64 ranks");
    else
      INFO(ALGO,
           "rank %d: %s of %zu-byte rows: %s%s (predicted us: flat %.1f, hier %.1f, "
           "hier in %d chunks %.1f%s)",
           p->comm->rank, a->fn, rb, hier ? "hier" : "flat",
           hier && *chunks > 1 ? " in chunks" : "", us[0], us[1], *chunks, us[2],
           moeccl_tuner_forced(p->comm)->moe >= 0 ? "; forced by MOECCL_MOE_ALGO" : "");
  }
  return hier;
}

static moecclResult_t moe_issue(moecclMoePlan_t p, const moe_args_t* a) {
  MOECCL_CHECK(plan_check(p, a->fn));
  MOECCL_CHECK(check_data(p, a));
  size_t rb = a->hidden * moeccl_type_size(a->type);
  moeccl_call_t call = {.kind = MOECCL_CALL_MOE, .sendbuf = a->in, .recvbuf = a->out};
  int chunks = 1, hier = pick_path(p, a, rb, &chunks);
  call.moe = (moeccl_moe_call_t){.op = a->op,
                                 .lay = &p->lay,
                                 .hier = hier,
                                 .chunks = chunks,
                                 .type = a->type,
                                 .hidden = a->hidden,
                                 .elem_size = moeccl_type_size(a->type),
                                 .weighted = a->weighted,
                                 .gate_grad = a->gate_grad,
                                 .weights = a->weights,
                                 .expert_out = a->expert_out,
                                 .grad_weights = a->grad_weights,
                                 .progs = p->progs,
                                 .nprogs_cap = MOECCL_MOE_MAX_PROGS + MOECCL_MOE_MAX_CHUNKS +
                                               2 * (size_t)p->comm->nranks,
                                 .send_area = on_device(a) ? NULL : send_area(p, rb)};
  return moeccl_call_issue(p->comm, &call, a->stream);
}

/* Rows the plan gives each side (0 when the plan is not valid: checked later). */
static size_t tokens_of(moecclMoePlan_t p) {
  return p && p->magic == MOECCL_MOE_MAGIC ? p->lay.T : 0;
}
static size_t rows_of(moecclMoePlan_t p) {
  return p && p->magic == MOECCL_MOE_MAGIC ? p->lay.R : 0;
}

MOECCL_EXPORT moecclResult_t moecclMoeDispatch(moecclMoePlan_t plan, const void* tokens,
                                               void* expertRows, size_t expertRowsCap,
                                               size_t hidden, moecclDataType_t datatype,
                                               moecclStream_t stream) {
  moe_args_t a = {.fn = "moecclMoeDispatch",
                  .op = MOECCL_MOE_DISPATCH,
                  .in = tokens,
                  .in_name = "tokens",
                  .in_rows = tokens_of(plan),
                  .out = expertRows,
                  .out_name = "expertRows",
                  .out_rows = rows_of(plan),
                  .rows_cap = expertRowsCap,
                  .hidden = hidden,
                  .type = datatype,
                  .stream = stream};
  return moe_issue(plan, &a);
}

MOECCL_EXPORT moecclResult_t moecclMoeCombine(moecclMoePlan_t plan, const void* expertRows,
                                              size_t expertRowsCap, const float* weights,
                                              void* tokens, size_t hidden,
                                              moecclDataType_t datatype, moecclStream_t stream) {
  moe_args_t a = {.fn = "moecclMoeCombine",
                  .op = MOECCL_MOE_COMBINE,
                  .in = expertRows,
                  .in_name = "expertRows",
                  .in_rows = rows_of(plan),
                  .out = tokens,
                  .out_name = "tokens",
                  .out_rows = tokens_of(plan),
                  .rows_cap = expertRowsCap,
                  .weighted = 1,
                  .weights = weights,
                  .hidden = hidden,
                  .type = datatype,
                  .stream = stream};
  return moe_issue(plan, &a);
}

MOECCL_EXPORT moecclResult_t moecclMoeDispatchBackward(moecclMoePlan_t plan,
                                                       const void* gradExpertRows,
                                                       size_t expertRowsCap, void* gradTokens,
                                                       size_t hidden, moecclDataType_t datatype,
                                                       moecclStream_t stream) {
  moe_args_t a = {.fn = "moecclMoeDispatchBackward",
                  .op = MOECCL_MOE_COMBINE,
                  .in = gradExpertRows,
                  .in_name = "gradExpertRows",
                  .in_rows = rows_of(plan),
                  .out = gradTokens,
                  .out_name = "gradTokens",
                  .out_rows = tokens_of(plan),
                  .rows_cap = expertRowsCap,
                  .hidden = hidden,
                  .type = datatype,
                  .stream = stream};
  return moe_issue(plan, &a);
}

MOECCL_EXPORT moecclResult_t moecclMoeCombineBackward(moecclMoePlan_t plan, const void* gradTokens,
                                                      const float* weights, const void* expertRows,
                                                      void* gradExpertRows, size_t expertRowsCap,
                                                      float* gradWeights, size_t hidden,
                                                      moecclDataType_t datatype,
                                                      moecclStream_t stream) {
  moe_args_t a = {.fn = "moecclMoeCombineBackward",
                  .op = MOECCL_MOE_COMBINE_BACKWARD,
                  .in = gradTokens,
                  .in_name = "gradTokens",
                  .in_rows = tokens_of(plan),
                  .out = gradExpertRows,
                  .out_name = "gradExpertRows",
                  .out_rows = rows_of(plan),
                  .rows_cap = expertRowsCap,
                  .weighted = 1,
                  .gate_grad = 1,
                  .weights = weights,
                  .expert_out = expertRows,
                  .grad_weights = gradWeights,
                  .hidden = hidden,
                  .type = datatype,
                  .stream = stream};
  return moe_issue(plan, &a);
}
