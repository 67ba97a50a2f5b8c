/* This host as the library sees it (host.h): node identity, process
 * liveness read from /proc, the CPUs this process may run on. */
#include "base/host.h"
#include "base/param.h"

#include <ctype.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static uint64_t fnv1a(uint64_t h, const char* s) {
  for (; *s; s++) h = (h ^ (unsigned char)*s) * 0x100000001b3ULL;
  return h;
}

static void read_boot_id(char* boot, size_t len) {
  boot[0] = '\0';
  FILE* f = fopen("/proc/sys/kernel/random/boot_id", "r");
  if (!f) return;
  if (!fgets(boot, (int)len, f)) boot[0] = '\0';
  fclose(f);
}

/* The machine whose CPUs a process runs on: the kernel's boot id, which
 * containers and network namespaces of one machine share (and which
 * MOECCL_HOSTID does not change); the hostname where it cannot be read. */
uint64_t moeccl_machine_hash(void) {
  char boot[64];
  read_boot_id(boot, sizeof(boot));
  if (!boot[0]) gethostname(boot, sizeof(boot) - 1), boot[sizeof(boot) - 1] = '\0';
  return fnv1a(fnv1a(0xcbf29ce484222325ULL, "machine:"), boot);
}

/* Node identity: MOECCL_HOSTID when set; otherwise hostname plus the kernel
 * boot id, so two containers with one hostname on different machines still
 * differ. */
uint64_t moeccl_host_hash(char* hostname, size_t len) {
  gethostname(hostname, len - 1);
  hostname[len - 1] = '\0';
  uint64_t h = 0xcbf29ce484222325ULL;
  const char* forced = moeccl_param_hostid();
  if (forced && *forced) return fnv1a(fnv1a(h, "hostid:"), forced);
  char boot[64];
  read_boot_id(boot, sizeof(boot));
  return fnv1a(fnv1a(h, hostname), boot);
}

/* Field 22 of /proc/pid/stat (start time in clock ticks); state in *state. */
static uint64_t read_stat(pid_t pid, char* state) {
  char path[64], buf[1024];
  snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
  FILE* f = fopen(path, "r");
  if (!f) return 0;
  size_t n = fread(buf, 1, sizeof(buf) - 1, f);
  fclose(f);
  buf[n] = '\0';
  char* p = strrchr(buf, ')'); /* the command name may hold spaces */
  if (!p) return 0;
  p += 2;
  *state = *p;
  for (int field = 3; field < 22 && p; field++) {
    p = strchr(p, ' ');
    if (p) p++;
  }
  return p ? strtoull(p, NULL, 10) : 0;
}

uint64_t moeccl_pid_start_time(pid_t pid) {
  char state = '?';
  return read_stat(pid, &state);
}

int moeccl_process_alive(pid_t pid, uint64_t start) {
  char state = '?';
  uint64_t now = read_stat(pid, &state);
  if (now == 0 || now != start) return 0;
  return state != 'Z' && state != 'X' && state != 'x';
}

/* Cores this process may run on (its affinity mask: cpusets, Slurm,
 * container limits), else the machine's. */
int moeccl_cpus_available(void) {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0 && CPU_COUNT(&set) > 0) return CPU_COUNT(&set);
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? (int)n : 1;
}

void moeccl_cpu_mask(uint64_t mask[16]) {
  memset(mask, 0, 16 * sizeof(uint64_t));
  cpu_set_t set;
  int n = 0;
  if (sched_getaffinity(0, sizeof(set), &set) == 0)
    for (int cpu = 0; cpu < 1024 && cpu < CPU_SETSIZE; cpu++)
      if (CPU_ISSET(cpu, &set)) mask[cpu / 64] |= 1ULL << (cpu % 64), n++;
  /* No mask (or more CPUs than it holds): the first cores the machine has. */
  int online = n == 0 ? moeccl_cpus_available() : 0;
  for (int cpu = 0; cpu < online && cpu < 1024; cpu++) mask[cpu / 64] |= 1ULL << (cpu % 64);
}
