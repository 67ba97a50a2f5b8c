/* TCP helpers for the bootstrap.  Nothing here blocks past a deadline. */
#include "base/socket.h"
#include "base/debug.h"
#include "base/param.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

double moeccl_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

socklen_t moeccl_sockaddr_len(const moeccl_sockaddr_t* a) {
  return a->sa.sa_family == AF_INET6 ? sizeof(a->sin6) : sizeof(a->sin);
}

const char* moeccl_sockaddr_str(const moeccl_sockaddr_t* a, char* buf, size_t len) {
  char host[INET6_ADDRSTRLEN] = "?";
  if (a->sa.sa_family == AF_INET6) {
    inet_ntop(AF_INET6, &a->sin6.sin6_addr, host, sizeof(host));
    snprintf(buf, len, "[%s]:%u", host, ntohs(a->sin6.sin6_port));
  } else {
    inet_ntop(AF_INET, &a->sin.sin_addr, host, sizeof(host));
    snprintf(buf, len, "%s:%u", host, ntohs(a->sin.sin_port));
  }
  return buf;
}

moecclResult_t moeccl_sockaddr_parse(const char* s, moeccl_sockaddr_t* out) {
  char host[256];
  const char* port;
  if (s[0] == '[') {
    const char* close = strchr(s, ']');
    if (!close || close[1] != ':' || (size_t)(close - s - 1) >= sizeof(host))
      return moecclInvalidArgument;
    memcpy(host, s + 1, close - s - 1);
    host[close - s - 1] = '\0';
    port = close + 2;
  } else {
    const char* colon = strrchr(s, ':');
    if (!colon || (size_t)(colon - s) >= sizeof(host)) return moecclInvalidArgument;
    memcpy(host, s, colon - s);
    host[colon - s] = '\0';
    port = colon + 1;
  }
  struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *res = NULL;
  if (getaddrinfo(host, port, &hints, &res) != 0 || !res) return moecclInvalidArgument;
  memset(out, 0, sizeof(*out));
  memcpy(out, res->ai_addr, res->ai_addrlen < sizeof(*out) ? res->ai_addrlen : sizeof(*out));
  freeaddrinfo(res);
  return moecclSuccess;
}

/* MOECCL_SOCKET_IFNAME: "eth,ib" prefixes, "^docker" excludes, "=eth0" exact. */
static int ifname_matches(const char* name, const char* spec) {
  int exclude = spec[0] == '^', exact = spec[exclude] == '=';
  char buf[256];
  snprintf(buf, sizeof(buf), "%s", spec + exclude + exact);
  int hit = 0;
  char* save = NULL;
  for (char* tok = strtok_r(buf, ",", &save); tok && !hit; tok = strtok_r(NULL, ",", &save))
    hit = exact ? strcmp(name, tok) == 0 : strncmp(name, tok, strlen(tok)) == 0;
  return exclude ? !hit : hit;
}

moecclResult_t moeccl_socket_pick_addr(moeccl_sockaddr_t* out) {
  /* Without MOECCL_SOCKET_IFNAME the bootstrap stays on loopback: a job that
   * spans nodes names its interface, so nothing is sent on a network the
   * user did not choose. */
  const char* spec = moeccl_param_socket_ifname();
  struct ifaddrs *ifs = NULL, *it;
  int found = 0;
  if (spec && *spec && getifaddrs(&ifs) == 0) {
    for (it = ifs; it && !found; it = it->ifa_next) {
      if (!it->ifa_addr || !(it->ifa_flags & IFF_UP) || it->ifa_addr->sa_family != AF_INET)
        continue;
      if (!ifname_matches(it->ifa_name, spec)) continue;
      memset(out, 0, sizeof(*out));
      memcpy(&out->sin, it->ifa_addr, sizeof(out->sin));
      INFO(BOOT, "bootstrap interface %s", it->ifa_name);
      found = 1;
    }
    freeifaddrs(ifs);
  }
  if (!found) {
    if (spec && *spec)
      WARN(BOOT, "no interface matches MOECCL_SOCKET_IFNAME=%s; using loopback", spec);
    memset(out, 0, sizeof(*out));
    out->sin.sin_family = AF_INET;
    out->sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  }
  out->sin.sin_port = 0;
  return moecclSuccess;
}

static void set_socket_options(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  fcntl(fd, F_SETFD, FD_CLOEXEC);
}

moecclResult_t moeccl_socket_listen(moeccl_sockaddr_t* addr, int* fd_out) {
  int fd = socket(addr->sa.sa_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return moecclSystemError;
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  socklen_t len = moeccl_sockaddr_len(addr);
  if (bind(fd, &addr->sa, len) != 0 || listen(fd, 1024) != 0 ||
      getsockname(fd, &addr->sa, &len) != 0) {
    char s[64];
    WARN(BOOT, "cannot listen on %s: %s", moeccl_sockaddr_str(addr, s, sizeof(s)), strerror(errno));
    close(fd);
    return moecclSystemError;
  }
  *fd_out = fd;
  return moecclSuccess;
}

/* Waits for events on fd until deadline; 1 ready, 0 timed out, -1 error. */
static int wait_fd(int fd, short events, double deadline) {
  for (;;) {
    double left = deadline - moeccl_now();
    if (left <= 0) return 0;
    struct pollfd p = {.fd = fd, .events = events};
    int ms = left > 1000.0 ? 1000000 : (int)(left * 1000.0) + 1;
    int rc = poll(&p, 1, ms);
    if (rc > 0) return 1;
    if (rc < 0 && errno != EINTR) return -1;
  }
}

/* One non-blocking connect attempt bounded by deadline: 0 connected, else
 * the errno that ended it (ETIMEDOUT when the deadline passed). */
static int connect_once(int fd, const moeccl_sockaddr_t* addr, double deadline) {
  if (connect(fd, &addr->sa, moeccl_sockaddr_len(addr)) == 0) return 0;
  if (errno != EINPROGRESS) return errno;
  int w = wait_fd(fd, POLLOUT, deadline);
  if (w <= 0) return w == 0 ? ETIMEDOUT : errno;
  int err = 0;
  socklen_t len = sizeof(err);
  if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0) return errno;
  return err;
}

static moecclResult_t connect_retry(const moeccl_sockaddr_t* addr, double deadline, int warn,
                                    int* fd_out) {
  char s[64];
  for (;;) {
    /* Non-blocking, so an address that drops packets cannot hold us past the
     * deadline in the kernel's SYN retries. */
    int fd = socket(addr->sa.sa_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) return moecclSystemError;
    int err = connect_once(fd, addr, deadline);
    if (err == 0) {
      fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
      set_socket_options(fd);
      *fd_out = fd;
      return moecclSuccess;
    }
    close(fd);
    if (err != ECONNREFUSED && err != EINTR && err != ETIMEDOUT && err != EAGAIN) {
      WARN(BOOT, "connect to %s: %s", moeccl_sockaddr_str(addr, s, sizeof(s)), strerror(err));
      return moecclSystemError;
    }
    if (moeccl_now() > deadline) {
      if (warn) WARN(BOOT, "connect to %s timed out", moeccl_sockaddr_str(addr, s, sizeof(s)));
      return moecclTimeout;
    }
    usleep(2000);
  }
}

moecclResult_t moeccl_socket_connect(const moeccl_sockaddr_t* addr, double deadline, int* fd_out) {
  return connect_retry(addr, deadline, 1, fd_out);
}

moecclResult_t moeccl_socket_try_connect(const moeccl_sockaddr_t* addr, double deadline,
                                         int* fd_out) {
  return connect_retry(addr, deadline, 0, fd_out);
}

moecclResult_t moeccl_socket_accept(int listen_fd, double deadline, int* fd_out) {
  for (;;) {
    int w = wait_fd(listen_fd, POLLIN, deadline);
    if (w == 0) return moecclTimeout;
    if (w < 0) return moecclSystemError;
    int fd = accept4(listen_fd, NULL, NULL, SOCK_CLOEXEC);
    if (fd >= 0) {
      set_socket_options(fd);
      *fd_out = fd;
      return moecclSuccess;
    }
    if (errno != EINTR && errno != EAGAIN && errno != ECONNABORTED) return moecclSystemError;
  }
}

moecclResult_t moeccl_socket_send(int fd, const void* buf, size_t len, double deadline) {
  const char* p = buf;
  while (len > 0) {
    ssize_t n = send(fd, p, len, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      p += n;
      len -= (size_t)n;
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
      int w = wait_fd(fd, POLLOUT, deadline);
      if (w == 0) return moecclTimeout;
      if (w < 0) return moecclSystemError;
      continue;
    }
    return moecclRemoteError;
  }
  return moecclSuccess;
}

moecclResult_t moeccl_socket_recv(int fd, void* buf, size_t len, double deadline) {
  char* p = buf;
  while (len > 0) {
    ssize_t n = recv(fd, p, len, MSG_DONTWAIT);
    if (n > 0) {
      p += n;
      len -= (size_t)n;
      continue;
    }
    if (n == 0) return moecclRemoteError;
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) {
      int w = wait_fd(fd, POLLIN, deadline);
      if (w == 0) return moecclTimeout;
      if (w < 0) return moecclSystemError;
      continue;
    }
    return moecclRemoteError;
  }
  return moecclSuccess;
}
