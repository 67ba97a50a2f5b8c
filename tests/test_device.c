/*
 * test_device.c - the host emulation of the device seam (src/device/emu.c)
 * through its ops table, as the GPU transport will use it, with random
 * delays before every stream operation (MOECCL_DEVICE_EMU_DELAY_US=300
 * unless set): pointer kinds; in-order streams (copies, then a host
 * function that sees their data); a stream held by a flag wait until
 * another stream writes the flag (query says in progress meanwhile); an
 * allocation exported as a file descriptor, passed over a Unix socket to
 * a forked process that maps it, reads it on its own stream and answers
 * through a flag in it that this process's stream waits on; a stream
 * destroyed while waiting on a flag nobody writes returns; free and
 * unimport of bad pointers are refused; a collective on a device buffer is
 * refused (no device transport yet) and the communicator stays usable.  Every wait has a deadline
 * (alarm), so a broken wait fails instead of hanging.
 */
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "device/device.h"
#include "moeccl.h"

static int failures;
#define CHECK(cond, ...)                                                                           \
  do {                                                                                             \
    if (!(cond)) {                                                                                 \
      fprintf(stderr, "%s:%d: ", __FILE__, __LINE__);                                              \
      fprintf(stderr, __VA_ARGS__);                                                                \
      fprintf(stderr, "\n");                                                                       \
      failures++;                                                                                  \
    }                                                                                              \
  } while (0)
#define OK(call) CHECK((call) == moecclSuccess, "%s failed", #call)

static const moeccl_device_ops_t* D;

static void pointers(void) {
  void* p = NULL;
  OK(D->alloc(&p, 1 << 16, 1));
  int dev = -1, host = 0;
  CHECK(D->pointer(p, &dev) == 1 && dev == 1, "alloc's pointer is not device 1 memory");
  CHECK(D->pointer((char*)p + 12345, &dev) == 1 && dev == 1, "an interior pointer is not");
  CHECK(D->pointer(&host, &dev) == 0, "a stack address counts as device memory");
  CHECK(D->alloc(&p, 16, 99) == moecclInvalidArgument, "device 99 was accepted");
  CHECK(D->free(&host) == moecclInvalidArgument, "freeing a host pointer was accepted");
  void* q = p;
  OK(D->alloc(&q, 4096, 0));
  OK(D->free(q));
  CHECK(D->pointer(q, &dev) == 0, "a freed allocation still counts as device memory");
  OK(D->free(p));
}

static int seen_ok;
static const unsigned char* seen_buf;
static void host_fn(void* arg) { /* runs after the stream's earlier copies */
  size_t n = (size_t)(uintptr_t)arg;
  seen_ok = 1;
  for (size_t i = 0; i < n; i++) seen_ok &= seen_buf[i] == (unsigned char)(i * 7 + 3);
}

static void order(void) {
  const size_t n = 1 << 20;
  unsigned char *a, *b, *c;
  OK(D->alloc((void**)&a, n, 0));
  OK(D->alloc((void**)&b, n, 0));
  OK(D->alloc((void**)&c, n, 0));
  for (size_t i = 0; i < n; i++) a[i] = (unsigned char)(i * 7 + 3);
  memset(b, 0, n), memset(c, 0, n);
  void* s;
  OK(D->stream_create(&s));
  for (int k = 0; k < 4; k++) { /* a chain: each copy needs the one before */
    OK(D->copy_async(b, a, n, s));
    OK(D->copy_async(c, b, n, s));
    seen_buf = c;
    OK(D->host_fn(s, host_fn, (void*)(uintptr_t)n));
    OK(D->synchronize(s));
    CHECK(seen_ok, "round %d: the host function ran before the copies landed", k);
    CHECK(memcmp(a, c, n) == 0, "round %d: the chained copies lost data", k);
    memset(b, 0, n), memset(c, 0, n), seen_ok = 0;
  }
  OK(D->query(s));
  OK(D->stream_destroy(s));
  OK(D->free(a));
  OK(D->free(b));
  OK(D->free(c));
}

static void flags(void) {
  uint64_t* f;
  OK(D->alloc((void**)&f, 4096, 0));
  f[0] = 0, f[1] = 0;
  char *x = (char*)(f + 64), *y = x + 1024;
  memset(x, 'x', 512), memset(y, 0, 512);
  void *s1, *s2;
  OK(D->stream_create(&s1));
  OK(D->stream_create(&s2));
  OK(D->wait_value(s1, &f[0], 5));  /* s1 holds here ... */
  OK(D->copy_async(y, x, 512, s1)); /* ... so this has not run */
  OK(D->write_value(s1, &f[1], 1));
  usleep(20000);
  CHECK(D->query(s1) == moecclInProgress, "a stream waiting on a flag reports done");
  CHECK(y[0] == 0 && __atomic_load_n(&f[1], __ATOMIC_ACQUIRE) == 0, "work ran past the wait");
  OK(D->write_value(s2, &f[0], 3)); /* not enough */
  OK(D->synchronize(s2));
  usleep(20000);
  CHECK(D->query(s1) == moecclInProgress, "a wait for >= 5 passed at 3");
  OK(D->write_value(s2, &f[0], 7));
  OK(D->synchronize(s1));
  CHECK(y[0] == 'x' && y[511] == 'x', "the copy after the wait did not run");
  CHECK(__atomic_load_n(&f[1], __ATOMIC_ACQUIRE) == 1, "the flag after the copy was not written");
  /* destroyed while waiting on a flag nobody writes: returns, no hang */
  OK(D->wait_value(s1, &f[0], 1000));
  OK(D->stream_destroy(s1));
  OK(D->stream_destroy(s2));
  OK(D->free(f));
}

static int send_fd(int sock, int fd) {
  char c = 'f', ctl[CMSG_SPACE(sizeof(int))];
  memset(ctl, 0, sizeof(ctl));
  struct iovec iov = {&c, 1};
  struct msghdr m = {
      .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl, .msg_controllen = sizeof(ctl)};
  struct cmsghdr* h = CMSG_FIRSTHDR(&m);
  h->cmsg_level = SOL_SOCKET, h->cmsg_type = SCM_RIGHTS, h->cmsg_len = CMSG_LEN(sizeof(int));
  memcpy(CMSG_DATA(h), &fd, sizeof(int));
  return sendmsg(sock, &m, 0) == 1 ? 0 : -1;
}

static int recv_fd(int sock) {
  char c, ctl[CMSG_SPACE(sizeof(int))];
  struct iovec iov = {&c, 1};
  struct msghdr m = {
      .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl, .msg_controllen = sizeof(ctl)};
  if (recvmsg(sock, &m, 0) != 1) return -1;
  struct cmsghdr* h = CMSG_FIRSTHDR(&m);
  if (!h || h->cmsg_type != SCM_RIGHTS) return -1;
  int fd;
  memcpy(&fd, CMSG_DATA(h), sizeof(int));
  return fd;
}

/* The child: maps the parent's allocation, checks its data on its own
 * stream, and answers through the flag at its start. */
static int child(int sock, size_t bytes) {
  int fd = recv_fd(sock);
  if (fd < 0) return 10;
  void* p;
  if (D->import_fd(fd, bytes, 0, &p) != moecclSuccess) return 11;
  close(fd);
  uint64_t* flag = p;
  unsigned char* data = (unsigned char*)p + 4096;
  unsigned char* mine = malloc(bytes - 4096);
  void* s;
  if (!mine || D->stream_create(&s) != moecclSuccess) return 12;
  D->copy_async(mine, data, bytes - 4096, s);
  D->write_value(s, flag, 42); /* after the copy: the parent may reuse the memory */
  if (D->synchronize(s) != moecclSuccess) return 13;
  for (size_t i = 0; i < bytes - 4096; i++)
    if (mine[i] != (unsigned char)(i ^ 0x5a)) return 14;
  D->stream_destroy(s);
  free(mine);
  return D->unimport(p, bytes) == moecclSuccess ? 0 : 15;
}

static void across_processes(void) {
  const size_t bytes = 4096 + (3 << 20);
  void* p;
  OK(D->alloc(&p, bytes, 0));
  uint64_t* flag = p;
  *flag = 0;
  unsigned char* data = (unsigned char*)p + 4096;
  for (size_t i = 0; i < bytes - 4096; i++) data[i] = (unsigned char)(i ^ 0x5a);
  int fd = -1;
  size_t got = 0;
  OK(D->export_fd(p, &fd, &got));
  CHECK(got == bytes, "export says %zu bytes, want %zu", got, bytes);
  int sv[2];
  CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0, "socketpair");
  pid_t pid = fork();
  if (pid == 0) {
    close(sv[0]);
    _exit(child(sv[1], bytes));
  }
  close(sv[1]);
  CHECK(send_fd(sv[0], fd) == 0, "passing the descriptor failed");
  close(fd);
  void* s;
  OK(D->stream_create(&s));
  OK(D->wait_value(s, flag, 42)); /* written by the child's stream */
  OK(D->synchronize(s));
  CHECK(*flag == 42, "the child's flag is %llu", (unsigned long long)*flag);
  int status = 0;
  waitpid(pid, &status, 0);
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the child failed (status %d)", status);
  OK(D->stream_destroy(s));
  CHECK(D->unimport(p, bytes) == moecclInvalidArgument, "unimport of an own allocation accepted");
  OK(D->free(p));
  close(sv[0]);
}

/* Until a device transport exists, a device buffer handed to a call is
 * refused with a text before anything is issued, and the communicator
 * stays usable (a 1-rank communicator in this process). */
static void refused(void) {
  moecclUniqueId id;
  moecclComm_t comm;
  OK(moecclGetUniqueId(&id));
  OK(moecclCommInitRank(&comm, 1, id, 0));
  float* dev = NULL;
  float host[4] = {1, 2, 3, 4}, out[4] = {0};
  OK(D->alloc((void**)&dev, 4096, 0));
  moecclResult_t rc = moecclAllReduce(dev, out, 4, moecclFloat32, moecclSum, comm, NULL);
  CHECK(rc == moecclInvalidArgument, "a device send buffer gave %d", (int)rc);
  CHECK(strstr(moecclGetLastError(comm), "device memory") != NULL, "the text says: %s",
        moecclGetLastError(comm));
  rc = moecclAllReduce(host, dev, 4, moecclFloat32, moecclSum, comm, NULL);
  CHECK(rc == moecclInvalidArgument, "a device receive buffer gave %d", (int)rc);
  OK(moecclAllReduce(host, out, 4, moecclFloat32, moecclSum, comm, NULL));
  CHECK(out[3] == 4.0f, "the host call after the refusals is wrong: %g", (double)out[3]);
  OK(D->free(dev));
  OK(moecclCommDestroy(comm));
}

int main(void) {
  setenv("MOECCL_DEVICE_EMU_DELAY_US", "300", 0);
  setenv("MOECCL_DEVICE", "emu", 1);
  alarm(120); /* a wait that never ends fails the test */
  D = moeccl_device();
  CHECK(D == &moeccl_device_emu_ops, "MOECCL_DEVICE=emu did not select the emulation");
  if (!D) return 1;
  CHECK(D->count() > 1, "the emulation has %d devices", D->count());
  pointers();
  order();
  flags();
  across_processes();
  refused();
  printf("test_device: %s (%d failures)\n", failures ? "FAIL" : "PASS", failures);
  return failures ? 1 : 0;
}
