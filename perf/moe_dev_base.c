/*
 * moe_dev_base.c - the baseline of moe_perf --device (moe_dev.c): what a
 * framework does without a dedicated MoE library, on device buffers.
 *
 * Per call: a counting sort of the slots by expert on the host (the
 * router output is in host memory, as moecclMoeLayout reads it), one copy
 * of the terms and the send counts to the device, the permute into send
 * order (one row per (token, expert)) with the library's row-copy kernel,
 * the counts' all-to-all and their copy to the host, waited for (the
 * sizes of the sends, as torch's all_to_all_single needs them), grouped
 * send/recv of the rows and the same back (identity experts; the
 * received rows are not regrouped by expert, which a framework would also
 * do), and the unpermute: token t = sum_j w[t][j] * its row of slot j, in
 * float32, rounded once, with the library's weighted row-sum kernel, the
 * weights in device memory.  The kernels are the library's own
 * (src/kernels/devmath.h: the fatbin on CUDA, the C twins on the
 * emulation), launched through the device seam on the rank's stream, so
 * the two sides move rows with the same code; the communication is
 * NCCL's (dlopen, 2.30 or newer) or, with --baseline moeccl, moeccl's
 * calls of the same shape.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <string.h>

#include "kernels/devkern.h"
#include "kernels/devmath.h"
#include "moe_dev_int.h"

#define NCCL_MIN_VERSION 23000 /* 2.28 refuses two ranks on one GPU */

static int m_alltoall(const void* s, void* r, size_t n, int t, void* c, void* st) {
  return moecclAlltoAll(s, r, n, (moecclDataType_t)t, c, st);
}
static int m_send(const void* b, size_t n, int t, int p, void* c, void* st) {
  return moecclSend(b, n, (moecclDataType_t)t, p, c, st);
}
static int m_recv(void* b, size_t n, int t, int p, void* c, void* st) {
  return moecclRecv(b, n, (moecclDataType_t)t, p, c, st);
}
static int m_group_start(void) { return moecclGroupStart(); }
static int m_group_end(void) { return moecclGroupEnd(); }
static const char* m_error_string(int r) { return moecclGetErrorString((moecclResult_t)r); }
static const char* m_last_error(void* c) { return moecclGetLastError(c); }

/* The baseline's host part: counting sort of the slots by expert (so by
 * destination rank); the permute's terms (perm row q = token t), the
 * unpermute's (token t = sum over its slots of w * perm row), the send
 * counts, all into pinned memory for one copy to the device. */
static void base_prepare(bench_t* b) {
  int E = b->o->E;
  memset(b->ecnt, 0, sizeof(int) * (size_t)E);
  for (size_t i = 0; i < b->TK; i++)
    if (b->ids[i] >= 0) b->ecnt[b->ids[i]]++;
  int64_t* scnt = (int64_t*)b->pin;
  memset(scnt, 0, sizeof(int64_t) * (size_t)b->n);
  int off = 0;
  for (int e = 0; e < E; e++) {
    b->eoff[e] = off, off += b->ecnt[e];
    scnt[b->owner[e]] += b->ecnt[e];
  }
  dm_term_t* ct = (dm_term_t*)(b->pin + b->off_cterms);
  dm_term_t* st = (dm_term_t*)(b->pin + b->off_sterms);
  uint32_t* first = (uint32_t*)(b->pin + b->off_first);
  for (size_t i = 0; i < b->TK; i++) {
    uint32_t t = (uint32_t)(i / (size_t)b->K);
    int e = b->ids[i];
    if (e < 0) {
      st[i] = (dm_term_t){t, DM_ROW_NONE, DM_ROW_NONE};
      continue;
    }
    uint32_t q = (uint32_t)b->eoff[e]++;
    ct[q] = (dm_term_t){q, t, DM_ROW_NONE};
    st[i] = (dm_term_t){t, q, (uint32_t)i};
  }
  for (size_t t = 0; t <= b->T; t++) first[t] = (uint32_t)(t * (size_t)b->K);
  b->ncopy = (size_t)off;
  size_t d = 0;
  for (int p = 0; p < b->n; p++) b->sdsp[p] = d, d += (size_t)scnt[p];
}

static void launch_rows(bench_t* b, void* fn, int mode, moeccl_krows_args_t* g) {
  uint64_t items = dm_rows_items(mode, g), grid = (items + 255) / 256;
  if (!items) return;
  moe_dev_check(b->d->launch(fn, grid > 4096 ? 4096 : (unsigned)grid, 256, g, sizeof *g, b->stream),
                "launch");
}

static void base_exchange(bench_t* b, char* from, const size_t* fd, const int64_t* fc, char* to,
                          const size_t* td, const int64_t* tc) {
  xport_t* x = &b->x;
  int r = x->group_start();
  for (int p = 0; p < b->n && r == 0; p++) {
    if (fc[p])
      r = x->send(from + fd[p] * b->rb, (size_t)fc[p] * b->rb, DEV_NCCL_UINT8, p, b->xcomm, b->stream);
    if (r == 0 && tc[p])
      r = x->recv(to + td[p] * b->rb, (size_t)tc[p] * b->rb, DEV_NCCL_UINT8, p, b->xcomm, b->stream);
  }
  int e = x->group_end();
  if (r == 0) r = e;
  if (r != 0)
    dev_die("baseline send/recv: %s: %s", x->error_string(r),
                x->last_error ? x->last_error(b->xcomm) : "");
}

void moe_dev_base_issue(bench_t* b) {
  base_prepare(b);
  moe_dev_check(b->d->copy_async(b->dterms, b->pin, b->pin_bytes, b->stream), "copy of the terms");
  moeccl_krows_args_t g = {.dst = b->perm,
                           .src = b->tok,
                           .terms = (void*)(b->dterms + b->off_cterms),
                           .nterms = b->ncopy,
                           .elems = b->rb,
                           .type = (int32_t)b->dt,
                           .unit = 16};
  while (b->rb % (size_t)g.unit) g.unit /= 2; /* device allocations are aligned */
  launch_rows(b, b->kcopy, 2, &g);
  xport_t* x = &b->x;
  int64_t* rcnt = (int64_t*)(b->pin + b->pin_bytes);
  int r = x->alltoall(b->dterms, b->dcnt, 1, DEV_NCCL_INT64, b->xcomm, b->stream);
  if (r != 0) dev_die("baseline counts all-to-all: %s", x->error_string(r));
  moe_dev_check(b->d->copy_async(rcnt, b->dcnt, sizeof(int64_t) * (size_t)b->n, b->stream),
                "copy of the counts");
  moe_dev_check(b->d->synchronize(b->stream), "stream synchronize"); /* the sizes, on the host */
  size_t d = 0;
  for (int p = 0; p < b->n; p++) b->rdsp[p] = d, d += (size_t)rcnt[p];
  if (d > b->R) dev_die("the baseline receives %zu rows, moeccl's layout %zu", d, b->R);
  const int64_t* scnt = (const int64_t*)b->pin;
  base_exchange(b, b->perm, b->sdsp, scnt, b->rows, b->rdsp, rcnt);
  base_exchange(b, b->rows, b->rdsp, rcnt, b->perm, b->sdsp, scnt); /* identity experts */
  g = (moeccl_krows_args_t){.dst = b->out_base,
                            .src = b->perm,
                            .aux = b->wdev,
                            .terms = (void*)(b->dterms + b->off_sterms),
                            .first = (void*)(b->dterms + b->off_first),
                            .nterms = b->TK,
                            .ngroups = b->T,
                            .elems = b->H,
                            .type = (int32_t)b->dt,
                            .unit = 1};
  launch_rows(b, b->ksum, 0, &g);
}

/* The checks in the order a user can act on them: the backend, the
 * kernels, NCCL itself. */
void moe_dev_base_load(bench_t* b, dev_nccl_id_t* id, char* why, size_t len) {
  if (b->o->baseline == BASE_NCCL && strcmp(b->d->name, "cuda") != 0) {
    snprintf(why, len, "the device backend is %s, not cuda", b->d->name);
    return;
  }
  const moeccl_dev_image_t image = {moeccl_kernels_fatbin, moeccl_kernels_fatbin_bytes,
                                    moeccl_kernel_twins, MOECCL_K_COUNT};
  void* module = NULL;
  moecclResult_t r = b->d->module_load(&image, &module);
  if (r == moecclSuccess) r = b->d->function(module, "moeccl_k_rows_copy", &b->kcopy);
  if (r == moecclSuccess) r = b->d->function(module, "moeccl_k_rows_sum", &b->ksum);
  if (r != moecclSuccess) {
    snprintf(why, len, "the library's row kernels do not load (%s%s)", moecclGetErrorString(r),
             moeccl_kernels_fatbin_bytes ? "" : "; this build has no fatbin: no nvcc");
    return;
  }
  if (b->o->baseline == BASE_MOECCL) {
    b->x = (xport_t){.alltoall = m_alltoall,
                     .send = m_send,
                     .recv = m_recv,
                     .group_start = m_group_start,
                     .group_end = m_group_end,
                     .error_string = m_error_string,
                     .last_error = m_last_error};
    return;
  }
  if (dev_nccl_load(&b->x, b->o->nccl_path, NCCL_MIN_VERSION, why, len) != 0) return;
  int rc = b->me == 0 ? b->x.get_unique_id(id) : 0;
  if (rc != 0) snprintf(why, len, "ncclGetUniqueId: %s", b->x.error_string(rc));
}
