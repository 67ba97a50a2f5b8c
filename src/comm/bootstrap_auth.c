/*
 * Bootstrap: the keys and MACs that authenticate its messages (the scheme:
 * bootstrap_int.h).  Below the rendezvous (bootstrap.c) and the ring
 * (bootstrap_ring.c), which both use them.
 */
#include "comm/bootstrap_int.h"

void moeccl_bootstrap_auth_key(const uint8_t secret[MOECCL_SECRET_BYTES], uint8_t key[32]) {
  moeccl_sha256_labelled("moeccl-auth", secret, MOECCL_SECRET_BYTES, key);
}

void moeccl_bootstrap_reply_mac(const uint8_t key[32], const uint8_t* challenge, int32_t status,
                                const void* table, size_t table_bytes, uint8_t out[32]) {
  static const char label[] = "moeccl-root-reply"; /* never the start of a hello's MAC input */
  uint8_t buf[sizeof(label) + CHALLENGE_BYTES + sizeof(status) + 32];
  uint8_t* q = buf;
  memcpy(q, label, sizeof(label)), q += sizeof(label);
  memcpy(q, challenge, CHALLENGE_BYTES), q += CHALLENGE_BYTES;
  memcpy(q, &status, sizeof(status)), q += sizeof(status);
  moeccl_sha256_t c; /* the table's digest: the root hashes it once for all ranks */
  moeccl_sha256_init(&c);
  if (table_bytes) moeccl_sha256_update(&c, table, table_bytes);
  moeccl_sha256_final(&c, q);
  moeccl_hmac_sha256(key, 32, buf, sizeof(buf), out);
}
