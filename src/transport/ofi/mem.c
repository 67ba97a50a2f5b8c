/*
 * libfabric transport (ofi.h): pools of operation and transfer records
 * (slabs, registered where the provider asks for local registration),
 * the cache of memory registrations, and how failures are kept and named.
 */
#include "transport/ofi/ofi.h"

moecclResult_t ofi_mr_register(ofi_state_t* s, void* buf, size_t len, struct fid_mr** mr) {
  uint64_t access = FI_SEND | FI_RECV;
  if (s->rma) access |= FI_WRITE | FI_READ | FI_REMOTE_WRITE | FI_REMOTE_READ;
  int rc = fi_mr_reg(s->domain, buf, len, access, 0, ++s->next_key, 0, mr, NULL);
  if (rc == 0 && (s->mr_mode & FI_MR_ENDPOINT)) {
    rc = fi_mr_bind(*mr, &s->ep[0]->fid, 0);
    if (rc == 0) rc = fi_mr_enable(*mr);
    if (rc != 0) fi_close(&(*mr)->fid);
  }
  if (rc != 0)
    return moeccl_error(s->comm, moecclSystemError, "ofi: registering %zu bytes at %p failed: %s",
                        len, buf, fi_strerror(-rc));
  return moecclSuccess;
}

void* ofi_pool_get(ofi_state_t* s, pool_t* p, int registered) {
  if (!p->free) {
    slab_t* sl = calloc(1, sizeof(slab_t) + p->size * SLAB);
    if (!sl) return NULL;
    if (registered && (s->mr_mode & FI_MR_LOCAL) &&
        ofi_mr_register(s, sl->items, p->size * SLAB, &sl->mr) != moecclSuccess)
      return free(sl), NULL;
    sl->next = p->slabs, p->slabs = sl;
    for (int i = SLAB - 1; i >= 0; i--) {
      void** item = (void**)(sl->items + (size_t)i * p->size);
      *item = p->free, p->free = item;
    }
  }
  void** item = p->free;
  p->free = *item;
  return item;
}

void ofi_pool_put(pool_t* p, void* item) {
  *(void**)item = p->free;
  p->free = item;
}

/* The slab holding item (its registration's descriptor for FI_MR_LOCAL). */
void* ofi_pool_desc(const pool_t* p, const void* item) {
  for (const slab_t* sl = p->slabs; sl; sl = sl->next)
    if ((const char*)item >= sl->items && (const char*)item < sl->items + p->size * SLAB)
      return sl->mr ? fi_mr_desc(sl->mr) : NULL;
  return NULL;
}

void ofi_pool_free(pool_t* p) {
  while (p->slabs) {
    slab_t* sl = p->slabs;
    p->slabs = sl->next;
    if (sl->mr) fi_close(&sl->mr->fid);
    free(sl);
  }
}

/* A registration covering [buf, buf+len), from the cache when one does.
 * Memory is cached only where a stale registration cannot hurt: providers
 * that pin nothing, or moecclMemAlloc regions (which never move). */
mr_ent_t* ofi_mr_get(ofi_state_t* s, void* buf, size_t len) {
  uintptr_t a = (uintptr_t)buf;
  mr_ent_t* victim = NULL;
  for (int i = 0; i < MR_CACHE; i++) {
    mr_ent_t* e = &s->mrs[i];
    if (e->mr && e->cached && e->addr <= a && a + len <= e->addr + e->len) {
      e->refs++, e->last_use = ++s->mr_clock;
      return e;
    }
    if (!e->mr) {
      if (!victim || victim->mr) victim = e;
    } else if (e->refs == 0 && (!victim || (victim->mr && e->last_use < victim->last_use))) {
      victim = e;
    }
  }
  int heap = !victim; /* every slot in use: a registration of its own */
  if (heap && !(victim = calloc(1, sizeof(*victim)))) return NULL;
  if (victim->mr) fi_close(&victim->mr->fid), victim->mr = NULL;
  moeccl_mem_handle_t mh;
  int cached = !heap && (!s->pins || moeccl_mem_lookup(buf, len, &mh));
  if (ofi_mr_register(s, buf, len, &victim->mr) != moecclSuccess) {
    if (heap) free(victim);
    return NULL;
  }
  *victim = (mr_ent_t){a, len, victim->mr, 1, cached, heap, ++s->mr_clock};
  return victim;
}

void ofi_mr_put(mr_ent_t* e) {
  if (!e || !e->mr || --e->refs > 0) return; /* !mr: closed by cancel_all */
  if (!e->cached) fi_close(&e->mr->fid), e->mr = NULL;
  if (e->heap) free(e);
}

/* Closes e whoever uses it (cancel_all, fini). */
void ofi_mr_drop(mr_ent_t* e) {
  if (!e) return;
  if (e->mr) fi_close(&e->mr->fid), e->mr = NULL;
  e->refs = 0;
  if (e->heap) free(e);
}

void* ofi_mr_desc(mr_ent_t* e) { return e ? fi_mr_desc(e->mr) : NULL; }

moecclResult_t ofi_fail_keep(ofi_state_t* s, moecclResult_t rc) {
  if (s->failed == moecclSuccess) s->failed = rc;
  return rc;
}

moecclResult_t ofi_peer_error(ofi_state_t* s, int peer, const char* what, const char* why) {
  const char* host = peer >= 0 ? s->comm->peers[peer].hostname : "?";
  return ofi_fail_keep(s, moeccl_comm_peer_lost(s->comm, peer,
                                                "rank %d (%s) unreachable over ofi: %s failed: %s",
                                                peer, host, what, why));
}

/* got 0: the provider only said the message did not fit. */
moecclResult_t ofi_truncated(ofi_state_t* s, int peer, uint64_t got, size_t posted) {
  char size[48];
  if (got) snprintf(size, sizeof(size), "%llu bytes", (unsigned long long)got);
  else snprintf(size, sizeof(size), "larger than %zu bytes", posted);
  return ofi_fail_keep(s,
                       moeccl_comm_fail(s->comm, moecclInvalidUsage,
                                        "message from rank %d is %s but the receive posted for it "
                                        "is %zu bytes",
                                        peer, size, posted));
}
