/*
 * Futexes (Linux) and the 64-bit flags built on them.  A flag is a counter
 * that one thread or process stores and others wait to reach a value; the
 * waiters sleep on its low 32 bits.  The futexes are shared ones (no
 * FUTEX_PRIVATE_FLAG): the words may live in a mapping other processes
 * share (the shm transport's doorbells, the emulated device's flags).
 */
#ifndef MOECCL_FUTEX_H_
#define MOECCL_FUTEX_H_

#include <limits.h>
#include <linux/futex.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/* Sleeps while the 32-bit word at addr holds expected, at most timeout
 * (NULL: no bound).  It also returns on a signal or for no reason, so the
 * caller checks its condition again. */
static inline void moeccl_futex_wait(const volatile void* addr, uint32_t expected,
                                     const struct timespec* timeout) {
  syscall(SYS_futex, addr, FUTEX_WAIT, expected, timeout, NULL, 0);
}

/* Wakes every sleeper on the 32-bit word at addr. */
static inline void moeccl_futex_wake(const volatile void* addr) {
  syscall(SYS_futex, addr, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

/* The low 32 bits of a 64-bit flag, which its waiters sleep on. */
static inline volatile uint32_t* moeccl_flag_word(volatile uint64_t* flag) {
  return (volatile uint32_t*)flag + (__BYTE_ORDER__ == __ORDER_BIG_ENDIAN__);
}

/* Stores value (release) and wakes the flag's waiters. */
static inline void moeccl_flag_store(volatile uint64_t* flag, uint64_t value) {
  __atomic_store_n(flag, value, __ATOMIC_RELEASE);
  moeccl_futex_wake(moeccl_flag_word(flag));
}

/* Sleeps until the flag may have moved from seen (its last value read), at
 * most timeout: a store made in another process can be missed between the
 * read and the sleep, which the timeout bounds. */
static inline void moeccl_flag_sleep(volatile uint64_t* flag, uint64_t seen,
                                     const struct timespec* timeout) {
  moeccl_futex_wait(moeccl_flag_word(flag), (uint32_t)seen, timeout);
}

#endif
