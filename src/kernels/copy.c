/* Copy kernel: glibc memcpy, or an AVX2 streaming-store loop for large copies. */
#include "kernels/copy.h"
#include "base/param.h"

#include <stdint.h>
#include <string.h>

#if defined(__x86_64__)
#include <immintrin.h>

__attribute__((target("avx2"))) static void copy_stream_avx2(void* dst, const void* src,
                                                             size_t bytes) {
  char* d = dst;
  const char* s = src;
  size_t head = (32 - ((uintptr_t)d & 31)) & 31; /* stores must be 32-byte aligned */
  memcpy(d, s, head);
  d += head, s += head, bytes -= head;
  size_t body = bytes & ~(size_t)127;
  for (size_t i = 0; i < body; i += 128) {
    __m256i a = _mm256_loadu_si256((const __m256i*)(s + i));
    __m256i b = _mm256_loadu_si256((const __m256i*)(s + i + 32));
    __m256i c = _mm256_loadu_si256((const __m256i*)(s + i + 64));
    __m256i e = _mm256_loadu_si256((const __m256i*)(s + i + 96));
    _mm256_stream_si256((__m256i*)(d + i), a);
    _mm256_stream_si256((__m256i*)(d + i + 32), b);
    _mm256_stream_si256((__m256i*)(d + i + 64), c);
    _mm256_stream_si256((__m256i*)(d + i + 96), e);
  }
  _mm_sfence(); /* streaming stores are weakly ordered: publish before returning */
  memcpy(d + body, s + body, bytes - body);
}
#endif

static size_t stream_threshold = (size_t)-1;
static int initialised;

static void copy_init(void) {
#if defined(__x86_64__)
  if (__builtin_cpu_supports("avx2")) stream_threshold = moeccl_param_nt_copy_size();
#endif
  if (stream_threshold == 0) stream_threshold = (size_t)-1;
  __atomic_store_n(&initialised, 1, __ATOMIC_RELEASE);
}

int moeccl_copy_streaming(size_t total_bytes) {
  if (!__atomic_load_n(&initialised, __ATOMIC_ACQUIRE)) copy_init();
  return total_bytes >= stream_threshold;
}

#define STREAM_MIN_COPY 4096 /* below this the alignment head and fence dominate */

void moeccl_copy(void* dst, const void* src, size_t bytes, int stream) {
#if defined(__x86_64__)
  if (stream && bytes >= STREAM_MIN_COPY) {
    copy_stream_avx2(dst, src, bytes);
    return;
  }
#endif
  (void)stream;
  memcpy(dst, src, bytes);
}
