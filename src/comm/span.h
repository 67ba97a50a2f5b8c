/*
 * Where a buffer the caller passes can end.  The library cannot know the
 * size of a user's malloc buffer, but some spans are surely wrong: one that
 * wraps around the address space or reaches past the top of user space, one
 * that runs past the moecclMemAlloc or device allocation its pointer lies
 * in (those sizes are known), and one that reaches memory this process has
 * not mapped (msync(MS_ASYNC) tells, in one system call that walks the
 * mappings, not the pages).  The entry points check the span of every
 * buffer before anything is sent, so such a call is refused instead of
 * faulting in a copy on whichever path (self block, local peer, network)
 * would have touched it.
 *
 * A span once found good is remembered per thread (a few entries) until a
 * moecclMemFree, so a call repeated on the same buffers costs a few
 * compares.  Memory the caller unmaps behind the library's back is not
 * noticed: that is a use after free, as it would be for any library.
 */
#ifndef MOECCL_SPAN_H_
#define MOECCL_SPAN_H_

#include <stddef.h>

typedef enum {
  MOECCL_SPAN_OK = 0,
  MOECCL_SPAN_WRAPS,      /* ptr + bytes overflows */
  MOECCL_SPAN_PAST_TOP,   /* past the end of the user address space */
  MOECCL_SPAN_PAST_ALLOC, /* past the end of the allocation ptr lies in */
  MOECCL_SPAN_UNMAPPED,   /* memory this process has not mapped */
} moeccl_span_t;

/* Whether [ptr, ptr + bytes) can be one buffer the caller gave; on
 * MOECCL_SPAN_PAST_ALLOC, *room (if not NULL) is the bytes the allocation
 * has from ptr.  bytes 0 is always good. */
moeccl_span_t moeccl_span_check(const void* ptr, size_t bytes, size_t* room);
/* Why, for an error text: "reach past the end of the address space", ... */
const char* moeccl_span_text(moeccl_span_t why);
/* Spans remembered as good are forgotten (moecclMemFree). */
void moeccl_span_forget(void);

#endif
