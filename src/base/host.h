/* This host as the library sees it: which node and machine a process is on,
 * whether a process still runs, and the CPUs this process may use.  Read
 * from the kernel (/proc, the affinity mask); no communicator involved. */
#ifndef MOECCL_HOST_H_
#define MOECCL_HOST_H_

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* Node identity: MOECCL_HOSTID when set, else hostname plus boot id; writes
 * the hostname (len bytes at most) too. */
uint64_t moeccl_host_hash(char* hostname, size_t len);
/* The machine (boot id), whatever MOECCL_HOSTID says. */
uint64_t moeccl_machine_hash(void);
uint64_t moeccl_pid_start_time(pid_t pid); /* 0 if the process is gone */
/* 1 if the process (pid, start) still runs (not a zombie). */
int moeccl_process_alive(pid_t pid, uint64_t start);
/* Cores this process may run on (its affinity mask), at least 1. */
int moeccl_cpus_available(void);
/* The affinity mask as 1,024 bits (CPUs past it are not represented). */
void moeccl_cpu_mask(uint64_t mask[16]);

#endif
