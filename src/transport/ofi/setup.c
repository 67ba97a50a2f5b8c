/*
 * libfabric transport (ofi.h): choosing the provider, opening the domain,
 * completion queue and endpoints, exchanging their names and wiring up
 * every pair, teardown, and the transport's ops table.
 */
#include "transport/ofi/ofi.h"

/* Preference order (lower is better) and score of a provider name.  Over
 * TCP the provider with its own RDM endpoints ("tcp" from libfabric 1.18,
 * "net" in 1.16-1.17) comes before the rxm layering over connected
 * endpoints: rxm's extra layer cost 2 ranks here 7-10 us a message (0.51x-
 * 0.77x of Open MPI's TCP at 1-16 KiB per rank, against 0.79x-0.95x; 64
 * KiB 0.72x-0.83x against 0.99x-1.12x; 3 interleaved runs, af70547). */
static int prov_rank(const char* name) {
  static const char* const order[] = {"cxi", "verbs;ofi_rxm", "efa",         "tcp",
                                      "net", "tcp;ofi_rxm",   "net;ofi_rxm", "shm"};
  for (int i = 0; i < (int)(sizeof(order) / sizeof(order[0])); i++)
    if (strcmp(name, order[i]) == 0) return i;
  return 100;
}

static int prov_score(const char* name) {
  static const char* const fast[] = {"cxi", "verbs", "efa", "psm2", "psm3", "opx"};
  for (int i = 0; i < (int)(sizeof(fast) / sizeof(fast[0])); i++)
    if (strstr(name, fast[i])) return 2;
  return 1;
}

/* Defaults for libfabric's own variables, set before it reads them (at the
 * first fi_getinfo of the process) and only where the user left them unset
 * (setenv never overwrites).  rxm sends eagerly only up to 16 KiB by
 * default, and between that and moeccl's eager size it segments messages
 * through its bounce buffers: a 32 KiB message took 36 us there against 18
 * us eager (2 ranks over tcp;ofi_rxm here, a2a_perf 64 KiB per rank, 0.41x
 * -> 0.82x of MPI).  So rxm's eager limit follows MOECCL_NET_EAGER_SIZE;
 * above it moeccl's own rendezvous (RMA or chunks) takes over anyway.  Over
 * tcp the limit may exceed rxm's buffer size, which keeps its memory use. */
static void set_defaults_once(void) {
  char v[32];
  snprintf(v, sizeof(v), "%zu", moeccl_param_net_eager_size());
  setenv("FI_OFI_RXM_EAGER_LIMIT", v, 0);
}

/* Once per process: setenv must not race with another thread's getenv
 * (two threads creating communicators). */
static void apply_defaults(void) {
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  pthread_once(&once, set_defaults_once);
}

/* fi_getinfo for RDM tagged messaging; rma adds the RMA capabilities,
 * mr_local lets the provider ask for registered local buffers. */
static struct fi_info* query(const char* prov, int rma, int mr_local) {
  apply_defaults();
  struct fi_info* hints = fi_allocinfo();
  if (!hints) return NULL;
  hints->caps = FI_TAGGED | FI_MSG | FI_DIRECTED_RECV;
  if (rma) hints->caps |= FI_RMA | FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE;
  hints->mode = FI_CONTEXT | FI_CONTEXT2;
  hints->ep_attr->type = FI_EP_RDM;
  hints->domain_attr->mr_mode = FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY | FI_MR_ENDPOINT;
  if (mr_local) hints->domain_attr->mr_mode |= FI_MR_LOCAL;
  hints->domain_attr->threading = FI_THREAD_DOMAIN; /* the comm lock serialises us */
  if (prov && *prov) hints->fabric_attr->prov_name = strdup(prov);
  struct fi_info* info = NULL;
  if (fi_getinfo(OFI_API, NULL, NULL, 0, hints, &info) != 0) info = NULL;
  fi_freeinfo(hints);
  return info;
}

/* The best entry of list, the most preferred provider's first (a forced
 * provider's list holds only its own entries; "tcp" may list both the
 * native and the rxm endpoints).  FI_MR_RAW is not supported. */
static struct fi_info* best_of(struct fi_info* list, int* rank) {
  struct fi_info* best = NULL;
  *rank = 1000;
  for (struct fi_info* i = list; i; i = i->next) {
    if (i->domain_attr->mr_mode & FI_MR_RAW) continue;
    int r = prov_rank(i->fabric_attr->prov_name);
    if (r < *rank) best = i, *rank = r;
  }
  return best;
}

/* Picks the provider: RMA-capable entries win ties; entries that need no
 * local registration are tried first.  Returns a copy the caller frees. */
static struct fi_info* choose_info(int allow_rma, const char** why) {
  const char* prov = moeccl_param_ofi_provider();
  int forced = prov && *prov;
  *why = forced ? "MOECCL_OFI_PROVIDER" : getenv("FI_PROVIDER") ? "FI_PROVIDER" : "best available";
  /* "tcp" names TCP: libfabric 1.16-1.17 call its native RDM provider
   * "net" (from 1.18 it is "tcp" itself), so both are asked for; the rxm
   * layering stays reachable as "tcp;ofi_rxm". */
  const char* names[2] = {prov, NULL};
  if (forced && strcmp(prov, "tcp") == 0) names[1] = "net";
  struct fi_info* chosen = NULL;
  int chosen_rank = 1000;
  for (int mr_local = 0; mr_local < 2 && !chosen; mr_local++)
    for (int rma = allow_rma; rma >= 0; rma--)
      for (int n = 0; n < 2 && (n == 0 || names[n]); n++) {
        struct fi_info* list = query(names[n], rma, mr_local);
        int r;
        struct fi_info* b = list ? best_of(list, &r) : NULL;
        if (b && r < chosen_rank) {
          if (chosen) fi_freeinfo(chosen);
          chosen = fi_dupinfo(b), chosen_rank = r;
        }
        if (list) fi_freeinfo(list);
      }
  return chosen;
}

static int ofi_score(void) {
  const char* why;
  struct fi_info* info = choose_info(0, &why);
  if (!info) return 0;
  int score = prov_score(info->fabric_attr->prov_name);
  fi_freeinfo(info);
  return score;
}

static int ofi_can_reach(const moeccl_comm_t* comm, int peer) {
  (void)comm, (void)peer;
  return 1;
}

/* What each rank publishes: its provider and its endpoints' names. */
typedef struct {
  int32_t ok, nch, rma, rts_data, wdata;
  uint64_t eager;
  char prov[32];
  uint32_t namelen[MAX_CH];
  char names[MAX_CH][NAME_MAX_BYTES];
} ofi_card_t;

static void ofi_fini(void* state) {
  ofi_state_t* s = state;
  if (!s) return;
  for (int c = 0; c < MAX_CH; c++)
    if (s->ep[c]) fi_close(&s->ep[c]->fid);
  for (int i = 0; i < MR_CACHE; i++)
    if (s->mrs[i].mr) fi_close(&s->mrs[i].mr->fid);
  if (s->ctl_mr) fi_close(&s->ctl_mr->fid);
  for (slab_t* sl = s->xfers.slabs; sl; sl = sl->next) /* registrations outside the cache */
    for (int i = 0; i < SLAB; i++) {
      ofi_xfer_t* x = (ofi_xfer_t*)(sl->items + (size_t)i * s->xfers.size);
      if (x->mr && x->mr->heap) ofi_mr_drop(x->mr), x->mr = NULL;
    }
  ofi_pool_free(&s->xfers);
  ofi_pool_free(&s->ops);
  if (s->av) fi_close(&s->av->fid);
  if (s->cq) fi_close(&s->cq->fid);
  if (s->domain) fi_close(&s->domain->fid);
  if (s->fabric) fi_close(&s->fabric->fid);
  if (s->info) fi_freeinfo(s->info);
  free(s->peers);
  free(s);
}

static moecclResult_t open_cq(ofi_state_t* s) {
  struct fi_cq_attr attr = {.format = FI_CQ_FORMAT_TAGGED, .wait_obj = FI_WAIT_FD, .size = 0};
  s->wait_fd = -1;
  if (fi_cq_open(s->domain, &attr, &s->cq, NULL) == 0) {
    if (fi_control(&s->cq->fid, FI_GETWAIT, &s->wait_fd) != 0) s->wait_fd = -1;
    return moecclSuccess;
  }
  attr.wait_obj = FI_WAIT_NONE;
  int rc = fi_cq_open(s->domain, &attr, &s->cq, NULL);
  return rc == 0 ? moecclSuccess : moecclSystemError;
}

static moecclResult_t open_ep(ofi_state_t* s, int c, ofi_card_t* card) {
  int rc = fi_endpoint(s->domain, s->info, &s->ep[c], NULL);
  if (rc == 0) rc = fi_ep_bind(s->ep[c], &s->av->fid, 0);
  if (rc == 0) rc = fi_ep_bind(s->ep[c], &s->cq->fid, FI_TRANSMIT | FI_RECV);
  if (rc == 0) rc = fi_enable(s->ep[c]);
  size_t len = NAME_MAX_BYTES;
  if (rc == 0) rc = fi_getname(&s->ep[c]->fid, card->names[c], &len);
  card->namelen[c] = (uint32_t)len;
  if (rc != 0) WARN(NET, "ofi: endpoint %d: %s", c, fi_strerror(-rc));
  return rc == 0 ? moecclSuccess : moecclSystemError;
}

/* Opens fabric, domain, CQ, AV and the channels' endpoints. */
static moecclResult_t open_local(ofi_state_t* s, ofi_card_t* card) {
  struct fi_info* i = s->info;
  struct fi_av_attr av_attr = {.type = FI_AV_TABLE};
  if (fi_fabric(i->fabric_attr, &s->fabric, NULL) || fi_domain(s->fabric, i, &s->domain, NULL) ||
      open_cq(s) != moecclSuccess || fi_av_open(s->domain, &av_attr, &s->av, NULL))
    return moecclSystemError;
  for (int c = 0; c < s->nch; c++) MOECCL_CHECK(open_ep(s, c, card));
  if (s->mr_mode & FI_MR_LOCAL)
    MOECCL_CHECK(ofi_mr_register(s, &s->ctl, sizeof(s->ctl), &s->ctl_mr));
  return moecclSuccess;
}

/* Local settings from the parameters and the chosen provider's limits. */
static void configure(ofi_state_t* s) {
  struct fi_info* i = s->info;
  s->mr_mode = i->domain_attr->mr_mode;
  s->rma = (i->caps & FI_RMA) && !s->rma_disabled && !(s->mr_mode & FI_MR_RAW);
  s->max_msg = i->ep_attr->max_msg_size ? i->ep_attr->max_msg_size : (size_t)1 << 30;
  s->eager = moeccl_param_net_eager_size();
  if (s->eager < sizeof(rts_t)) s->eager = sizeof(rts_t);
  if (s->eager > s->max_msg) s->eager = s->max_msg;
  s->chunk = moeccl_param_net_chunk_size();
  if (s->chunk < 4096) s->chunk = 4096;
  if (s->chunk > s->max_msg) s->chunk = s->max_msg;
  int64_t nch = moeccl_param_net_nchannels();
  s->nch = nch < 1 ? 1 : nch > MAX_CH ? MAX_CH : (int)nch;
  if (s->mr_mode & FI_MR_ENDPOINT) s->nch = 1; /* a registration binds to one endpoint */
  /* Providers that register without pinning cannot hold a stale mapping. */
  const char* p = i->fabric_attr->prov_name;
  s->pins = !(strstr(p, "tcp") || strstr(p, "sockets") || strstr(p, "shm") || strstr(p, "udp") ||
              strstr(p, "net"));
  s->delivery_complete = 1;
  s->rts_data = i->domain_attr->cq_data_size > 0;
  /* Over tcp;ofi_rxm a large tagged message goes by rxm's own rendezvous,
   * the receiver reading from the sender, which beat writes from 1 MiB
   * (2 ranks, a2a_perf -M, per rank: 2 MiB 382-422 us against 474-505; 4
   * MiB 707-734 against 922-1036; 8 MiB 1,717-1,757 against 1,920-2,200)
   * but not below (512 KiB: 82-116 us against 68-98).  Not over the
   * native TCP provider ("net", or "tcp" alone from libfabric 1.18), whose
   * tagged messages have no such rendezvous. */
  s->tagged_min = strstr(p, "tcp") && strstr(p, "ofi_rxm") ? TCP_TAGGED_MIN : 0;
  s->wdata = s->rma && i->domain_attr->cq_data_size >= sizeof(uint64_t) &&
             !moeccl_param_ofi_writedata_disable();
}

static moecclResult_t connect_peers(ofi_state_t* s, const uint8_t* use, const ofi_card_t* cards,
                                    const ofi_card_t* mine) {
  moeccl_comm_t* c = s->comm;
  for (int p = 0; p < c->nranks; p++) {
    if (!use[p]) continue;
    const ofi_card_t* o = &cards[p];
    if (!o->ok)
      return moeccl_error(c, moecclSystemError, "ofi: rank %d (%s) could not start libfabric", p,
                          c->peers[p].hostname);
    if (strcmp(o->prov, mine->prov) != 0)
      return moeccl_error(c, moecclSystemError,
                          "ofi: rank %d (%s) uses provider %s, this rank uses %s", p,
                          c->peers[p].hostname, o->prov, mine->prov);
    ofi_peer_t* pe = &s->peers[p];
    pe->nch = o->nch < s->nch ? o->nch : s->nch;
    pe->rma = o->rma && s->rma;
    pe->rts_data = o->rts_data && s->rts_data;
    pe->wdata = pe->rma && o->wdata && s->wdata;
    pe->eager = o->eager < s->eager ? (size_t)o->eager : s->eager;
    for (int ch = 0; ch < pe->nch; ch++)
      if (fi_av_insert(s->av, o->names[ch], 1, &pe->addr[ch], 0, NULL) != 1)
        return moeccl_error(c, moecclSystemError, "ofi: cannot insert rank %d's address (%s)", p,
                            c->peers[p].hostname);
  }
  return moecclSuccess;
}

/* Connects every pair before any data flows: the lower rank sends a hello,
 * the higher one waits for it.  tcp;ofi_rxm connects lazily and mishandles
 * two ranks connecting to each other at once (connect() fails with
 * EADDRNOTAVAIL, and messages were seen lost); one connector per pair avoids
 * that.  Both ranks of a pair see each other's card ok, so neither waits on
 * a rank that gave up. */
static moecclResult_t wire_up(ofi_state_t* s, const uint8_t* use) {
  moeccl_comm_t* c = s->comm;
  for (int p = 0; p < c->nranks; p++)
    if (use[p]) {
      MOECCL_CHECK(ofi_submit(s, p > c->rank ? OP_HELLO_SEND : OP_HELLO_RECV, NULL, 0, p));
      s->hellos_out++;
    }
  double deadline = moeccl_now() + c->timeout;
  while (s->hellos_out > 0) {
    int moved = 0;
    MOECCL_CHECK(ofi_progress(s, &moved));
    if (moved) continue;
    if (moeccl_now() > deadline)
      return moeccl_error(c, moecclTimeout, "ofi: connecting to the other ranks timed out");
    ofi_wait(s, 1000);
  }
  return moecclSuccess;
}

static moecclResult_t start_local(moeccl_comm_t* comm, ofi_state_t* s, ofi_card_t* card) {
  const char* why;
  s->info = choose_info(!s->rma_disabled, &why);
  if (!s->info) {
    WARN(NET,
         "ofi: no libfabric provider offers reliable tagged messaging (MOECCL_OFI_PROVIDER=%s)",
         moeccl_param_ofi_provider());
    return moecclSystemError;
  }
  configure(s);
  s->peers = calloc((size_t)comm->nranks, sizeof(*s->peers));
  if (!s->peers) return moecclSystemError;
  s->xfers.size = sizeof(ofi_xfer_t);
  s->ops.size = sizeof(ofi_op_t);
  MOECCL_CHECK(open_local(s, card));
  card->nch = s->nch;
  card->rma = s->rma;
  card->rts_data = s->rts_data;
  card->wdata = s->wdata;
  card->eager = s->eager;
  snprintf(card->prov, sizeof(card->prov), "%s", s->info->fabric_attr->prov_name);
  INFO(NET,
       "rank %d: ofi provider %s (fabric %s, domain %s), chosen by %s; %s; %d channel(s), "
       "eager %zu, chunk %zu, wait %s",
       comm->rank, card->prov, s->info->fabric_attr->name, s->info->domain_attr->name, why,
       s->rma && s->wdata ? "large messages by RMA write with remote CQ data"
       : s->rma           ? "large messages by RMA write, then FIN"
       : s->rma_disabled  ? "RMA disabled (MOECCL_OFI_RMA_DISABLE): large messages in tagged chunks"
                          : "no FI_RMA: large messages in tagged chunks",
       s->nch, s->eager, s->chunk, s->wait_fd >= 0 ? "fd" : "sleep");
  return moecclSuccess;
}

/* Allgathers one flag; *all_ok when every rank's is set. */
static moecclResult_t agree_all(moeccl_comm_t* comm, int mine, int* all_ok) {
  int32_t* v = calloc((size_t)comm->nranks, sizeof(*v));
  if (!v) return moecclSystemError;
  v[comm->rank] = mine;
  moecclResult_t rc = moeccl_bootstrap_allgather(comm->boot, v, sizeof(*v));
  *all_ok = rc == moecclSuccess;
  for (int r = 0; r < comm->nranks && *all_ok; r++) *all_ok = v[r] != 0;
  free(v);
  return rc;
}

static moecclResult_t ofi_init(moeccl_comm_t* comm, const uint8_t* use, int needed, void** state) {
  *state = NULL;
  if (!needed) return moecclSuccess;
  /* Without memory for the exchange this rank cannot take part: the others'
   * allgather then fails on their deadline. */
  ofi_card_t* cards = calloc((size_t)comm->nranks, sizeof(*cards));
  if (!cards) return moecclSystemError;
  ofi_state_t* s = calloc(1, sizeof(*s));
  moecclResult_t rc = s ? moecclSuccess : moecclSystemError;
  if (rc == moecclSuccess) {
    s->comm = comm;
    s->wait_fd = -1;
    s->rma_disabled = moeccl_param_ofi_rma_disable();
    rc = start_local(comm, s, &cards[comm->rank]);
    cards[comm->rank].ok = rc == moecclSuccess;
  }
  /* Every rank takes part in the exchange, failed or not (ok = 0 marks it). */
  moecclResult_t brc = moeccl_bootstrap_allgather(comm->boot, cards, sizeof(*cards));
  if (rc == moecclSuccess) rc = brc;
  for (int p = 0; p < comm->nranks && rc == moecclSuccess; p++)
    if (!cards[p].ok) /* every rank sees this: all give up alike */
      rc = moeccl_error(comm, moecclSystemError, "ofi: rank %d (%s) could not start libfabric", p,
                        comm->peers[p].hostname);
  if (rc == moecclSuccess) rc = connect_peers(s, use, cards, &cards[comm->rank]);
  /* A second exchange, after every rank filled its AV: a message from a
   * rank not yet in the receiver's AV would never match a directed receive.
   * It also lets every rank see whether all could insert their peers. */
  if (brc == moecclSuccess) {
    int all_ok = 0;
    moecclResult_t arc = agree_all(comm, rc == moecclSuccess, &all_ok);
    if (rc == moecclSuccess && (arc != moecclSuccess || !all_ok))
      rc = arc != moecclSuccess ? arc : moecclSystemError;
  }
  if (rc == moecclSuccess) rc = wire_up(s, use);
  if (rc == moecclSuccess) rc = ofi_submit(s, OP_ABORT_RECV, NULL, 0, -1);
  free(cards);
  if (rc != moecclSuccess) {
    ofi_fini(s);
    return rc;
  }
  *state = s;
  return moecclSuccess;
}

/* What the links between nodes cost (transport.h: query), fitted over
 * kernel TCP as tuner.c says.  A message past the eager size goes by
 * rendezvous (header, CTS, then the data: see Protocols at the top). */
static moecclResult_t ofi_query(void* state, const moeccl_comm_t* comm,
                                moeccl_transport_attr_t* out) {
  (void)comm;
  const ofi_state_t* s = state;
  *out = moeccl_transport_attr_of(&moeccl_net_module_ops);
  out->latency_us = 10.0, out->overhead_us = 15.0, out->bw_GBps = 1.0;
  out->eager_bytes = out->rndv_bytes = s ? s->eager : moeccl_param_net_eager_size();
  return moecclSuccess;
}

/* Reached through the proxy moeccl_ofi_ops of libmoeccl (ofi_load.c), which
 * checks that the name, caps and mem_types match. */
const moeccl_transport_ops_t moeccl_net_module_ops = {
    .name = "ofi",
    .caps = MOECCL_TRANSPORT_CAP_NETWORK,
    .mem_types = MOECCL_MEM_TYPE_HOST,
    .score = ofi_score,
    .can_reach = ofi_can_reach,
    .init = ofi_init,
    .query = ofi_query,
    .post = ofi_post,
    .progress = ofi_progress,
    .arm = ofi_arm,
    .wait = ofi_wait,
    .check_peers = ofi_check_peers,
    .notify_abort = ofi_notify_abort,
    .cancel_all = ofi_cancel_all,
    .fini = ofi_fini,
};
