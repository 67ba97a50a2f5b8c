/* The one-way derivations from a communicator's secret (core.h): its public
 * tag and a split's secret.  A file of its own, using only sha256.c, so that
 * the bootstrap code's fuzz harnesses (scripts/fuzz.sh) build it as it is
 * instead of a copy. */
#include "comm/comm.h"
#include "base/sha256.h"

#include <string.h>

uint64_t moeccl_secret_tag(const uint8_t secret[MOECCL_SECRET_BYTES]) {
  uint8_t d[32];
  moeccl_sha256_labelled("moeccl-comm", secret, MOECCL_SECRET_BYTES, d);
  uint64_t tag;
  memcpy(&tag, d, sizeof(tag));
  return tag;
}

void moeccl_secret_split(const uint8_t parent[MOECCL_SECRET_BYTES], uint64_t split_count,
                         int32_t color, uint8_t out[MOECCL_SECRET_BYTES]) {
  uint8_t in[MOECCL_SECRET_BYTES + 12], d[32];
  memcpy(in, parent, MOECCL_SECRET_BYTES);
  memcpy(in + MOECCL_SECRET_BYTES, &split_count, 8);
  memcpy(in + MOECCL_SECRET_BYTES + 8, &color, 4);
  moeccl_sha256_labelled("moeccl-split", in, sizeof(in), d);
  memcpy(out, d, MOECCL_SECRET_BYTES);
}
