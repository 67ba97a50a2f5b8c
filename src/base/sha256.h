/* SHA-256 (FIPS 180-4), for one-way names and derived secrets. */
#ifndef MOECCL_SHA256_H_
#define MOECCL_SHA256_H_

#include <stddef.h>
#include <stdint.h>

typedef struct {
  uint32_t h[8];
  uint64_t bytes;
  uint8_t block[64];
  size_t fill;
} moeccl_sha256_t;

void moeccl_sha256_init(moeccl_sha256_t* c);
void moeccl_sha256_update(moeccl_sha256_t* c, const void* data, size_t n);
void moeccl_sha256_final(moeccl_sha256_t* c, uint8_t out[32]);
/* out = SHA-256(label || data), the label naming what the digest is for. */
void moeccl_sha256_labelled(const char* label, const void* data, size_t n, uint8_t out[32]);
/* HMAC-SHA-256 (RFC 2104) of msg under key (at most 64 bytes). */
void moeccl_hmac_sha256(const uint8_t* key, size_t klen, const void* msg, size_t n,
                        uint8_t out[32]);

#endif
