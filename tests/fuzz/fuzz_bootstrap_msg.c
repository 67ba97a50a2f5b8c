/* The messages the bootstrap receives from the network (src/comm/bootstrap.c,
 * bootstrap_ring.c):
 * the rendezvous hello the root reads from each joining rank, the hello a
 * rank reads on its ring socket, and the status word a joining rank reads
 * from the root.  Each is checked by the library's function and by this
 * file's own reading of the wire format (below); both must agree, so a
 * check that lets through a hello it should refuse, or refuses a good
 * one, is a finding like a crash.
 *
 * Input: up to 4 records, independent of each other (more are ignored:
 * each costs up to three HMACs, and inputs of tens of them slowed a
 * 600 s run to 1,800 executions a second), each
 *   kind   byte: kind % 3 (0 hello, 1 ring hello, 2 status); bit 2: write
 *          the right nonce into the message, bit 3: sign it with the
 *          right MAC (so that the fuzzer gets past authentication),
 *          bit 4 (ring): expect the rank the message claims
 *   len    byte: message bytes (fewer where the input ends)
 *   arg    byte: ring: the rank expected; status: nranks - 1
 *   challenge  16 bytes
 *   message    len bytes, copied into a buffer of exactly len bytes
 */
#include "comm/bootstrap.h"
#include "fuzz.h"
#include "base/sha256.h"

#include <string.h>

/* The wire format, as join_root and moeccl_bootstrap_ring write it. */
#define HELLO_MAGIC 0x4d4f4548u /* the ring hello; the rendezvous hello of older versions */
#define JOIN_MAGIC 0x4d4f454au  /* the rendezvous hello with the rank's wait */
#define HELLO_BYTES 72 /* magic, rank, nranks, wait (ms), nonce (8), challenge (16), mac (32) */
#define HELLO_SIGNED 40
#define RING_BYTES 48 /* magic, rank, nonce (8), mac (32) */
#define RING_SIGNED 16
#define CH MOECCL_BOOT_CHALLENGE_BYTES

static uint8_t key[32];
static uint64_t nonce;

int LLVMFuzzerInitialize(int* argc, char*** argv) {
  uint8_t secret[MOECCL_SECRET_BYTES];
  for (int i = 0; i < MOECCL_SECRET_BYTES; i++) secret[i] = (uint8_t)(0x5a + 7 * i);
  moeccl_bootstrap_auth_key(secret, key);
  nonce = moeccl_secret_tag(secret);
  return 0;
}

/* HMAC-SHA-256(key, challenge || msg[0, n)). */
static void mac_of(const uint8_t* challenge, const uint8_t* msg, size_t n, uint8_t out[32]) {
  uint8_t buf[CH + HELLO_SIGNED];
  memcpy(buf, challenge, CH);
  memcpy(buf + CH, msg, n);
  moeccl_hmac_sha256(key, sizeof(key), buf, CH + n, out);
}

static void check_hello(uint8_t* m, size_t len, int flags, const uint8_t* ch) {
  if ((flags & 1) && len >= 24) fuzz_put_le(m + 16, nonce, 8);
  if ((flags & 2) && len >= HELLO_BYTES) mac_of(ch, m, HELLO_SIGNED, m + HELLO_SIGNED);
  int rank = -7, nranks = -7;
  double wait = -7;
  moecclResult_t got = moeccl_bootstrap_check_hello(m, len, nonce, key, ch, &rank, &nranks, &wait);
  if (len < HELLO_BYTES) {
    FUZZ_ASSERT(got == moecclInProgress, "%zu bytes: result %d", len, got);
    return;
  }
  int32_t r = (int32_t)fuzz_le(m + 4, 4), n = (int32_t)fuzz_le(m + 8, 4);
  uint32_t w = (uint32_t)fuzz_le(m + 12, 4);
  uint8_t mac[32];
  mac_of(ch, m, HELLO_SIGNED, mac);
  /* an older version's hello is told apart by its magic alone */
  int older = fuzz_le(m, 4) == HELLO_MAGIC;
  int ok = fuzz_le(m, 4) == JOIN_MAGIC && fuzz_le(m + 16, 8) == nonce && n > 0 && r >= 0 && r < n &&
           memcmp(mac, m + HELLO_SIGNED, 32) == 0;
  moecclResult_t want = older ? moecclInvalidUsage : ok ? moecclSuccess : moecclInvalidArgument;
  FUZZ_ASSERT(got == want, "hello rank %d nranks %d: result %d, expected %d", r, n, got, want);
  if (ok)
    FUZZ_ASSERT(rank == r && nranks == n && wait == w / 1000.0 && wait >= 0,
                "claims %d/%d waiting %u ms, read %d/%d waiting %g s", r, n, w, rank, nranks, wait);
  else FUZZ_ASSERT(rank == -7 && nranks == -7 && wait == -7, "a refused hello wrote its fields");
}

static void check_ring(uint8_t* m, size_t len, int flags, int prev, const uint8_t* ch) {
  if ((flags & 1) && len >= 16) fuzz_put_le(m + 8, nonce, 8);
  if ((flags & 2) && len >= RING_BYTES) mac_of(ch, m, RING_SIGNED, m + RING_SIGNED);
  if ((flags & 4) && len >= 8) prev = (int32_t)fuzz_le(m + 4, 4);
  moecclResult_t got = moeccl_bootstrap_check_ring_hello(m, len, nonce, key, ch, prev);
  if (len < RING_BYTES) {
    FUZZ_ASSERT(got == moecclInProgress, "%zu bytes: result %d", len, got);
    return;
  }
  uint8_t mac[32];
  mac_of(ch, m, RING_SIGNED, mac);
  int ok = fuzz_le(m, 4) == HELLO_MAGIC && (int32_t)fuzz_le(m + 4, 4) == prev &&
           fuzz_le(m + 8, 8) == nonce && memcmp(mac, m + RING_SIGNED, 32) == 0;
  FUZZ_ASSERT(got == (ok ? moecclSuccess : moecclInvalidArgument),
              "ring hello expecting rank %d: result %d, expected %s", prev, got,
              ok ? "ok" : "refused");
}

static void check_status(const uint8_t* m, size_t len, int nranks) {
  int missing = -7;
  moecclResult_t got = moeccl_bootstrap_check_status(m, len, nranks, &missing);
  if (len < 4) {
    FUZZ_ASSERT(got == moecclInProgress, "%zu bytes: result %d", len, got);
    return;
  }
  int32_t s = (int32_t)fuzz_le(m, 4);
  /* -2 - m: rank m missing; nranks: the table follows; else disagreement */
  moecclResult_t want = s <= -2       ? moecclRemoteError
                        : s == nranks ? moecclSuccess
                                      : moecclInvalidUsage;
  FUZZ_ASSERT(got == want, "status %d of %d ranks: result %d, expected %d", s, nranks, got, want);
  if (want == moecclRemoteError)
    FUZZ_ASSERT(missing >= 0 && (int64_t)missing == -2 - (int64_t)s, "status %d: missing %d", s,
                missing);
  else FUZZ_ASSERT(missing == -7, "status %d wrote missing", s);
}

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  for (int records = 0; records < 4 && size >= 3; records++) {
    int kind = data[0] % 3, flags = data[0] >> 2, arg = data[2];
    size_t len = data[1];
    data += 3, size -= 3;
    uint8_t ch[CH] = {0};
    memcpy(ch, data, size < CH ? size : CH);
    data += size < CH ? size : CH, size -= size < CH ? size : CH;
    if (len > size) len = size;
    /* exactly len bytes on the heap: a read past the message is ASan's */
    uint8_t* m = malloc(len ? len : 1);
    if (!m) return 0;
    memcpy(m, data, len);
    data += len, size -= len;
    if (kind == 0) check_hello(m, len, flags, ch);
    else if (kind == 1) check_ring(m, len, flags, arg, ch);
    else check_status(m, len, arg + 1);
    free(m);
  }
  return 0;
}
