/*
 * test_device.c - the device seam (src/device/device.h) through its ops
 * table, as the GPU transport will use it: the host emulation by default
 * (src/device/emu.c, with random delays before every stream operation,
 * MOECCL_DEVICE_EMU_DELAY_US=300 unless set), the CUDA backend with
 * MOECCL_DEVICE=cuda on a GPU machine (scripts/gpu-check.sh); the host
 * touches device memory only through stream copies: pointer kinds; in-order streams (copies, then a
 * host function that sees their data); a stream held by a flag wait until another stream writes the
 * flag (query says in progress meanwhile); an allocation exported as a file descriptor, passed over
 * a Unix socket to a forked process that maps it, reads it on its own stream and answers through a
 * flag in it that this process's stream waits on; a stream destroyed while waiting on a flag nobody
 * writes returns; free and unimport of bad pointers are refused; the MoE calls refuse device memory
 * where they read on the host and the communicator stays usable.  Every wait has a deadline
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
#include "moeccl_moe.h"
#include "unit_check.h"

#define OK(call) CHECK((call) == moecclSuccess, "%s failed", #call)

static const moeccl_device_ops_t* D;
static int dev; /* the device the test uses: the last one */

/* Host <-> device through a stream: the host never touches device memory
 * (so the same checks hold for the CUDA backend). */
static void put(void* d, const void* h, size_t n, void* s) {
  OK(D->copy_async(d, h, n, s));
  OK(D->synchronize(s));
}
static void get(void* h, const void* d, size_t n, void* s) {
  OK(D->copy_async(h, d, n, s));
  OK(D->synchronize(s));
}

static void pointers(void) {
  void* p = NULL;
  OK(D->alloc(&p, 1 << 16, dev));
  int d = -1, host = 0;
  CHECK(D->pointer(p, &d) == 1 && d == dev, "alloc's pointer is not device %d memory", dev);
  CHECK(D->pointer((char*)p + 12345, &d) == 1 && d == dev, "an interior pointer is not");
  CHECK(D->pointer(&host, &d) == 0, "a stack address counts as device memory");
  CHECK(D->alloc(&p, 16, 99) != moecclSuccess, "device 99 was accepted");
  CHECK(D->free(&host) != moecclSuccess, "freeing a host pointer was accepted");
  void* q = p;
  OK(D->alloc(&q, 4096, dev));
  OK(D->free(q));
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
  unsigned char *a, *b, *h = malloc(n), *out = malloc(n);
  OK(D->alloc((void**)&a, n, dev));
  OK(D->alloc((void**)&b, n, dev));
  for (size_t i = 0; i < n; i++) h[i] = (unsigned char)(i * 7 + 3);
  void* s;
  OK(D->stream_create(&s));
  for (int k = 0; k < 4; k++) { /* a chain: each copy needs the one before */
    memset(out, 0, n), seen_ok = 0, seen_buf = out;
    OK(D->copy_async(a, h, n, s));
    OK(D->copy_async(b, a, n, s));
    OK(D->copy_async(out, b, n, s));
    OK(D->host_fn(s, host_fn, (void*)(uintptr_t)n));
    OK(D->synchronize(s));
    CHECK(seen_ok, "round %d: the host function ran before the copies landed", k);
    CHECK(memcmp(h, out, n) == 0, "round %d: the chained copies lost data", k);
  }
  OK(D->query(s));
  OK(D->stream_destroy(s));
  OK(D->free(a));
  OK(D->free(b));
  free(h), free(out);
}

static void flags(void) {
  char* m; /* device: two flags, then x and y */
  OK(D->alloc((void**)&m, 4096, dev));
  uint64_t* f = (uint64_t*)m;
  char *x = m + 512, *y = m + 1536, hx[512], hy[512];
  uint64_t hf[2] = {0, 0};
  void *s1, *s2, *s3;
  OK(D->stream_create(&s1));
  OK(D->stream_create(&s2));
  OK(D->stream_create(&s3));
  memset(hx, 'x', sizeof(hx)), memset(hy, 0, sizeof(hy));
  put(f, hf, sizeof(hf), s3);
  put(x, hx, sizeof(hx), s3);
  put(y, hy, sizeof(hy), s3);
  OK(D->wait_value(s1, &f[0], 5));  /* s1 holds here ... */
  OK(D->copy_async(y, x, 512, s1)); /* ... so this has not run */
  OK(D->write_value(s1, &f[1], 1));
  usleep(20000);
  CHECK(D->query(s1) == moecclInProgress, "a stream waiting on a flag reports done");
  get(hy, y, sizeof(hy), s3);
  get(hf, f, sizeof(hf), s3);
  CHECK(hy[0] == 0 && hf[1] == 0, "work ran past the wait");
  OK(D->write_value(s2, &f[0], 3)); /* not enough */
  OK(D->synchronize(s2));
  usleep(20000);
  CHECK(D->query(s1) == moecclInProgress, "a wait for >= 5 passed at 3");
  OK(D->write_value(s2, &f[0], 7));
  OK(D->synchronize(s1));
  get(hy, y, sizeof(hy), s3);
  get(hf, f, sizeof(hf), s3);
  CHECK(hy[0] == 'x' && hy[511] == 'x', "the copy after the wait did not run");
  CHECK(hf[1] == 1, "the flag after the copy was not written");
  OK(D->stream_destroy(s1));
  OK(D->stream_destroy(s2));
  OK(D->stream_destroy(s3));
  OK(D->free(m));
}

static int send_fd(int sock, int fd, size_t bytes) {
  char ctl[CMSG_SPACE(sizeof(int))];
  memset(ctl, 0, sizeof(ctl));
  struct iovec iov = {&bytes, sizeof(bytes)};
  struct msghdr m = {
      .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl, .msg_controllen = sizeof(ctl)};
  struct cmsghdr* h = CMSG_FIRSTHDR(&m);
  h->cmsg_level = SOL_SOCKET, h->cmsg_type = SCM_RIGHTS, h->cmsg_len = CMSG_LEN(sizeof(int));
  memcpy(CMSG_DATA(h), &fd, sizeof(int));
  return sendmsg(sock, &m, 0) == (ssize_t)sizeof(bytes) ? 0 : -1;
}

static int recv_fd(int sock, size_t* bytes) {
  char ctl[CMSG_SPACE(sizeof(int))];
  struct iovec iov = {bytes, sizeof(*bytes)};
  struct msghdr m = {
      .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl, .msg_controllen = sizeof(ctl)};
  if (recvmsg(sock, &m, 0) != (ssize_t)sizeof(*bytes)) return -1;
  struct cmsghdr* h = CMSG_FIRSTHDR(&m);
  if (!h || h->cmsg_type != SCM_RIGHTS) return -1;
  int fd;
  memcpy(&fd, CMSG_DATA(h), sizeof(int));
  return fd;
}

/* The peer process (forked before either side touched a device, as CUDA
 * needs): maps the allocation it is sent, reads it on its own stream, and
 * answers through the flag at its start; then says it is done. */
static int peer(int sock) {
  D = moeccl_device();
  if (!D) return 9;
  dev = D->count() - 1;
  size_t bytes = 0;
  int fd = recv_fd(sock, &bytes);
  if (fd < 0) return 10;
  void* p;
  if (D->import_fd(fd, bytes, dev, &p) != moecclSuccess) return 11;
  close(fd);
  unsigned char* mine = malloc(bytes - 4096);
  void* s;
  if (!mine || D->stream_create(&s) != moecclSuccess) return 12;
  D->copy_async(mine, (char*)p + 4096, bytes - 4096, s);
  D->write_value(s, (uint64_t*)p, 42); /* after the copy: the owner may reuse the memory */
  if (D->synchronize(s) != moecclSuccess) return 13;
  /* On an H200 this read other bytes than the owner wrote (cause not found
   * without a GPU since): say which, so that the next run tells. */
  size_t wrong = 0, first = 0, zero = 0;
  for (size_t i = 0; i < bytes - 4096; i++) {
    zero += mine[i] == 0;
    if (mine[i] != (unsigned char)(i ^ 0x5a) && !wrong++) first = i;
  }
  if (wrong) {
    fprintf(stderr,
            "test_device peer: %zu of %zu bytes wrong, the first at +%zu (got 0x%02x, want "
            "0x%02x); %zu bytes are 0; imported %zu bytes at %p\n",
            wrong, bytes - 4096, first + 4096, mine[first], (unsigned)((first ^ 0x5a) & 0xff), zero,
            bytes, p);
    return 14;
  }
  D->stream_destroy(s);
  free(mine);
  char done = 'd';
  if (write(sock, &done, 1) != 1) return 15; /* the owner unmaps only after this */
  return D->unimport(p, bytes) == moecclSuccess ? 0 : 16;
}

static void across_processes(int sock, pid_t pid) {
  const size_t bytes = 4096 + (3 << 20);
  void* p;
  OK(D->alloc(&p, bytes, dev));
  unsigned char* h = malloc(bytes);
  memset(h, 0, 4096);
  for (size_t i = 0; i < bytes - 4096; i++) h[4096 + i] = (unsigned char)(i ^ 0x5a);
  void* s;
  OK(D->stream_create(&s));
  put(p, h, bytes, s);
  int fd = -1;
  size_t got = 0;
  OK(D->export_fd(p, &fd, &got));
  CHECK(got >= bytes, "export says %zu bytes, want at least %zu", got, bytes);
  CHECK(send_fd(sock, fd, got) == 0, "passing the descriptor failed");
  close(fd);
  OK(D->wait_value(s, (uint64_t*)p, 42)); /* written by the peer's stream */
  OK(D->synchronize(s));
  uint64_t flag = 0;
  get(&flag, p, sizeof(flag), s);
  CHECK(flag == 42, "the peer's flag is %llu", (unsigned long long)flag);
  char done = 0;
  CHECK(read(sock, &done, 1) == 1 && done == 'd', "the peer did not finish");
  int status = 0;
  waitpid(pid, &status, 0);
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the peer failed (status %d)", status);
  OK(D->stream_destroy(s));
  CHECK(D->unimport(p, bytes) != moecclSuccess, "unimport of an own allocation accepted");
  OK(D->free(p));
  free(h);
}

/* A call that reads a buffer on the host (the MoE calls' ids and gate
 * weights) is refused with a text before anything is issued, and the
 * communicator stays usable (a 1-rank communicator in this process); a
 * reduction between device and host buffers runs (on one rank, a copy
 * through the device table).  Device buffers between ranks: tests/mp_device. */
static void refused(void) {
  moecclUniqueId id;
  moecclComm_t comm;
  OK(moecclGetUniqueId(&id));
  OK(moecclCommInitRank(&comm, 1, id, 0));
  float* dbuf = NULL;
  float host[4] = {1, 2, 3, 4}, out[4] = {0};
  OK(D->alloc((void**)&dbuf, 4096, dev));
  OK(moecclAllReduce(host, dbuf, 4, moecclFloat32, moecclSum, comm, NULL));
  OK(moecclAllReduce(dbuf, out, 4, moecclFloat32, moecclSum, comm, NULL));
  CHECK(out[3] == 4.0f && out[0] == 1.0f, "host -> device -> host AllReduce gave %g %g",
        (double)out[0], (double)out[3]);
  /* The MoE calls' other buffers too: the router's ids (read by the layout
   * on the host) and the gate weights of a combine. */
  moecclMoePlan_t plan = NULL;
  OK(moecclMoePlanCreate(&plan, 2, NULL, comm));
  int32_t ids[4] = {0, 1, 1, 0};
  moecclResult_t rc = moecclMoeLayout(plan, (const int32_t*)dbuf, 2, 2, 0, NULL, NULL);
  CHECK(rc == moecclInvalidArgument, "device topkIdx gave %d", (int)rc);
  CHECK(strstr(moecclGetLastError(comm), "device memory") != NULL, "the text says: %s",
        moecclGetLastError(comm));
  OK(moecclMoeLayout(plan, ids, 2, 2, 0, NULL, NULL));
  float rows[4 * 2] = {1, 2, 3, 4, 5, 6, 7, 8}, tokens[2 * 2] = {0};
  rc = moecclMoeCombine(plan, rows, 4, dbuf, tokens, 2, moecclFloat32, NULL);
  CHECK(rc == moecclInvalidArgument, "device gate weights gave %d", (int)rc);
  CHECK(strstr(moecclGetLastError(comm), "weights") != NULL, "the text says: %s",
        moecclGetLastError(comm));
  float w[4] = {0.5f, 0.5f, 0.5f, 0.5f};
  OK(moecclMoeCombine(plan, rows, 4, w, tokens, 2, moecclFloat32, NULL));
  OK(moecclMoePlanDestroy(plan));
  OK(D->free(dbuf));
  OK(moecclCommDestroy(comm));
}

/* Nothing of the library calls the driver from an exit-time handler: the
 * CUDA driver may be torn down before they run (nccl-tests died at exit in
 * cuStreamDestroy, called from libmoeccl's atexit handler, on an H200).
 * A child makes the library create its copy stream, then registers the
 * emulation's teardown so that it runs before any handler the library
 * registered; after it every emulated call aborts.  The child must exit
 * cleanly. */
static void no_driver_calls_at_exit(void) {
  pid_t pid = fork(); /* before this process touched the device */
  if (pid == 0) {
    const moeccl_device_ops_t* d = moeccl_device();
    void* p = NULL;
    uint64_t v = 7;
    if (!d || d->alloc(&p, 4096, 0) != moecclSuccess) _exit(3);
    if (moeccl_device_copy(p, &v, sizeof(v)) != moecclSuccess) _exit(4);
    atexit(moeccl_device_emu_teardown);
    exit(0);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0,
        "a process that used the device did not exit cleanly once the driver was gone (status "
        "0x%x): the library called it from an exit-time handler",
        status);
}

int main(void) {
  setenv("MOECCL_DEVICE_EMU_DELAY_US", "300", 0);
  const char* want = getenv("MOECCL_DEVICE");
  if (!want || !*want) setenv("MOECCL_DEVICE", "emu", 1), want = "emu";
  alarm(120); /* a wait that never ends fails the test */
  if (strcmp(want, "emu") == 0) no_driver_calls_at_exit();
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) return perror("socketpair"), 1;
  pid_t pid = fork(); /* before any device call */
  if (pid == 0) {
    close(sv[0]);
    _exit(peer(sv[1]));
  }
  close(sv[1]);
  D = moeccl_device();
  if (!D) {
    printf("test_device: SKIP (MOECCL_DEVICE=%s: no such backend here)\n", want);
    kill(pid, SIGKILL);
    return 77;
  }
  if (strcmp(want, "emu") == 0) {
    CHECK(D == &moeccl_device_emu_ops, "MOECCL_DEVICE=emu did not select the emulation");
    CHECK(D->count() > 1, "the emulation has %d devices", D->count());
  }
  dev = D->count() - 1;
  printf("test_device: the %s backend, device %d of %d\n", D->name, dev, D->count());
  pointers();
  order();
  flags();
  across_processes(sv[0], pid);
  refused();
  printf("test_device: %s (%d failures)\n", failures ? "FAIL" : "PASS", failures);
  return failures ? 1 : 0;
}
