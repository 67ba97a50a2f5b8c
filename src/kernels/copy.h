/* The copy kernel every byte-moving path uses (executor copies, mapped pulls). */
#ifndef MOECCL_COPY_H_
#define MOECCL_COPY_H_

#include <stddef.h>

/* Whether an operation that writes total_bytes into its receive buffers
 * should copy with non-temporal stores (MOECCL_NT_COPY_SIZE; the CPU must
 * have them).  Past the cache, streaming stores skip the read-for-ownership
 * of the destination; below it they only lose the cache. */
int moeccl_copy_streaming(size_t total_bytes);
/* memcpy, with streaming stores when stream is set and the copy is large. */
void moeccl_copy(void* dst, const void* src, size_t bytes, int stream);

#endif
