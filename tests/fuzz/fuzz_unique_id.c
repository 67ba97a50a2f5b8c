/* The unique id (src/comm/bootstrap.c): moecclCommInitRank decodes whatever
 * 128 bytes the application passes as commId.  Checks that decoding
 * accepts exactly the ids that carry the id's magic and this library's
 * version (another version's is moecclInvalidUsage), gives back the secret
 * and root address stored there, writes nothing for a refused one, that
 * encoding then decoding is the identity, and that the root address, any
 * bytes at all, formats for the logs within the buffer it is given.
 *
 * Input: the id's bytes (zero-filled to 128), then one byte: the length of
 * the buffer the root address is formatted into. */
#include "comm/bootstrap.h"
#include "fuzz.h"
#include "base/socket.h"

#include <string.h>

/* The layout moeccl_bootstrap_id_encode writes: magic "MOEI" (4 bytes),
 * version (4), secret (16), root address. */
#define ID_MAGIC 0x4d4f4549u
#define SECRET_AT 8
#define ROOT_AT (SECRET_AT + MOECCL_SECRET_BYTES)

static void check_addr_str(const moeccl_sockaddr_t* a, size_t n) {
  char* buf = malloc(n); /* exactly n bytes: a longer write is ASan's */
  if (!buf) return;
  memset(buf, 'x', n);
  const char* s = moeccl_sockaddr_str(a, buf, n);
  FUZZ_ASSERT(s == buf, "does not return its buffer");
  FUZZ_ASSERT(memchr(buf, '\0', n) != NULL, "%zu bytes: no terminating NUL", n);
  free(buf);
}

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  moecclUniqueId id;
  memset(&id, 0, sizeof(id));
  size_t n = size < sizeof(id) ? size : sizeof(id);
  memcpy(id.internal, data, n);
  size_t strlen_arg = size > sizeof(id) ? 1 + data[sizeof(id)] % 64 : 64;

  uint8_t secret[MOECCL_SECRET_BYTES], again[MOECCL_SECRET_BYTES];
  moeccl_sockaddr_t root, root2;
  memset(secret, 0xa5, sizeof(secret));
  memset(&root, 0xa5, sizeof(root));
  moecclResult_t rc = moeccl_bootstrap_id_decode(&id, secret, &root);
  int magic = fuzz_le((const uint8_t*)id.internal, 4) == ID_MAGIC;
  int same_version = fuzz_le((const uint8_t*)id.internal + 4, 4) == MOECCL_VERSION_CODE;
  int valid = magic && same_version;
  /* a bad magic is no id; another version's id is refused as such */
  moecclResult_t want = valid ? moecclSuccess : magic ? moecclInvalidUsage : moecclInvalidArgument;
  FUZZ_ASSERT(rc == want, "magic %08x version %u: result %d",
              (unsigned)fuzz_le((const uint8_t*)id.internal, 4),
              (unsigned)fuzz_le((const uint8_t*)id.internal + 4, 4), rc);
  memset(again, 0x5a, sizeof(again));
  FUZZ_ASSERT(moeccl_bootstrap_id_secret(&id, again) == rc, "id_secret disagrees with decode");
  if (!valid) {
    uint8_t untouched[MOECCL_SECRET_BYTES];
    memset(untouched, 0xa5, sizeof(untouched));
    FUZZ_ASSERT(memcmp(secret, untouched, sizeof(secret)) == 0, "a refused id wrote a secret");
    /* still formats: a made-up id's address reaches the logs too */
    memcpy(&root, id.internal + ROOT_AT, sizeof(root));
    check_addr_str(&root, strlen_arg);
    return 0;
  }
  FUZZ_ASSERT(memcmp(secret, id.internal + SECRET_AT, sizeof(secret)) == 0, "secret not as stored");
  FUZZ_ASSERT(memcmp(again, secret, sizeof(secret)) == 0, "id_secret's secret differs");
  FUZZ_ASSERT(memcmp(&root, id.internal + ROOT_AT, sizeof(root)) == 0, "root not as stored");
  check_addr_str(&root, strlen_arg);

  /* Encoding what was decoded gives an id that decodes to the same, with
   * this library's version and nothing after the layout. */
  moecclUniqueId id2;
  memset(&id2, 0x77, sizeof(id2));
  moeccl_bootstrap_id_encode(secret, &root, &id2);
  memset(again, 0, sizeof(again));
  FUZZ_ASSERT(moeccl_bootstrap_id_decode(&id2, again, &root2) == moecclSuccess,
              "an encoded id does not decode");
  FUZZ_ASSERT(memcmp(again, secret, sizeof(secret)) == 0 &&
                  memcmp(&root2, &root, sizeof(root)) == 0,
              "encode then decode changed the id");
  FUZZ_ASSERT(fuzz_le((const uint8_t*)id2.internal + 4, 4) == MOECCL_VERSION_CODE, "version");
  for (size_t i = ROOT_AT + sizeof(root); i < sizeof(id2.internal); i++)
    FUZZ_ASSERT(id2.internal[i] == 0, "byte %zu after the layout is %d", i, id2.internal[i]);
  return 0;
}
