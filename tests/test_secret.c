/*
 * test_secret.c - the one-way functions behind public names: SHA-256
 * against FIPS 180-4's example digests (empty, "abc", the 448-bit message,
 * a million 'a's fed in odd pieces); a secret's tag and a split's derived
 * secret (deterministic, different per color and per split, neither equal
 * to the parent's bytes); a unique id's 128-bit secret (both halves random
 * across ids).
 */
#include <stdio.h>
#include <string.h>

#include "comm/bootstrap.h"
#include "comm/comm.h"
#include "base/sha256.h"
#include "unit_check.h"


static void hex(const uint8_t d[32], char out[65]) {
  for (int i = 0; i < 32; i++) snprintf(out + 2 * i, 3, "%02x", d[i]);
}

static void digest(const char* msg, size_t n, size_t piece, const char* want) {
  moeccl_sha256_t c;
  uint8_t d[32];
  char h[65];
  moeccl_sha256_init(&c);
  for (size_t o = 0; o < n; o += piece)
    moeccl_sha256_update(&c, msg + o, n - o < piece ? n - o : piece);
  moeccl_sha256_final(&c, d);
  hex(d, h);
  CHECK(strcmp(h, want) == 0, "SHA-256 of %zu bytes: %s, want %s", n, h, want);
}

int main(void) {
  digest("", 0, 1, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  digest("abc", 3, 1, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  const char* m448 = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
  digest(m448, strlen(m448), 7, "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  static char million[1000000];
  memset(million, 'a', sizeof(million));
  digest(million, sizeof(million), 997,
         "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");

  { /* RFC 4231, test case 2 */
    uint8_t d[32];
    char h[65];
    const char* msg = "what do ya want for nothing?";
    moeccl_hmac_sha256((const uint8_t*)"Jefe", 4, msg, strlen(msg), d);
    hex(d, h);
    CHECK(strcmp(h, "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843") == 0,
          "HMAC-SHA-256 of RFC 4231 case 2: %s", h);
  }
  uint8_t s[MOECCL_SECRET_BYTES], a[MOECCL_SECRET_BYTES], b[MOECCL_SECRET_BYTES];
  uint8_t a2[MOECCL_SECRET_BYTES], c[MOECCL_SECRET_BYTES];
  for (int i = 0; i < MOECCL_SECRET_BYTES; i++) s[i] = (uint8_t)(i * 37 + 1);
  CHECK(moeccl_secret_tag(s) == moeccl_secret_tag(s), "the tag is not deterministic");
  uint64_t head;
  memcpy(&head, s, 8);
  CHECK(moeccl_secret_tag(s) != head, "the tag is the secret's first bytes");
  moeccl_secret_split(s, 0, 1, a);
  moeccl_secret_split(s, 0, 1, a2);
  moeccl_secret_split(s, 0, 2, b);
  moeccl_secret_split(s, 1, 1, c);
  CHECK(memcmp(a, a2, sizeof(a)) == 0, "a split's secret is not deterministic");
  CHECK(memcmp(a, b, sizeof(a)) != 0, "two colors of one split share a secret");
  CHECK(memcmp(a, c, sizeof(a)) != 0, "two splits share a secret");
  CHECK(memcmp(a, s, sizeof(a)) != 0, "a split keeps its parent's secret");

  moecclUniqueId id1, id2;
  uint8_t s1[MOECCL_SECRET_BYTES], s2[MOECCL_SECRET_BYTES];
  CHECK(moeccl_bootstrap_unique_id(&id1) == moecclSuccess, "no id");
  CHECK(moeccl_bootstrap_unique_id(&id2) == moecclSuccess, "no id");
  CHECK(moeccl_bootstrap_id_secret(&id1, s1) == moecclSuccess, "id 1 has no secret");
  CHECK(moeccl_bootstrap_id_secret(&id2, s2) == moecclSuccess, "id 2 has no secret");
  CHECK(memcmp(s1, s2, 8) != 0 && memcmp(s1 + 8, s2 + 8, 8) != 0,
        "two ids' secrets share a half: not 128 random bits");
  printf("test_secret: %s (%d failures)\n", failures ? "FAIL" : "PASS", failures);
  return failures ? 1 : 0;
}
