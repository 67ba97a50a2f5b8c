/* TCP helpers for the bootstrap: every call has a deadline. */
#ifndef MOECCL_SOCKET_H_
#define MOECCL_SOCKET_H_

#include <netinet/in.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "moeccl.h"

typedef union {
  struct sockaddr sa;
  struct sockaddr_in sin;
  struct sockaddr_in6 sin6;
} moeccl_sockaddr_t;

/* Monotonic clock in seconds. */
double moeccl_now(void);
/* "1.2.3.4:5" / "[::1]:5" for logs. */
const char* moeccl_sockaddr_str(const moeccl_sockaddr_t* a, char* buf, size_t len);
socklen_t moeccl_sockaddr_len(const moeccl_sockaddr_t* a);
/* Parses "host:port" (host a name or address, IPv6 in brackets). */
moecclResult_t moeccl_sockaddr_parse(const char* s, moeccl_sockaddr_t* out);
/* Picks the address of a local interface for a listening socket, honouring
 * MOECCL_SOCKET_IFNAME; falls back to loopback. */
moecclResult_t moeccl_socket_pick_addr(moeccl_sockaddr_t* out);
/* Listens on addr (port 0: any); writes the bound address back. */
moecclResult_t moeccl_socket_listen(moeccl_sockaddr_t* addr, int* fd);
/* Connects, retrying refused connections until deadline (moeccl_now() time). */
moecclResult_t moeccl_socket_connect(const moeccl_sockaddr_t* addr, double deadline, int* fd);
/* The same without a warning when the deadline passes (a caller that
 * retries in short steps). */
moecclResult_t moeccl_socket_try_connect(const moeccl_sockaddr_t* addr, double deadline, int* fd);
moecclResult_t moeccl_socket_accept(int listen_fd, double deadline, int* fd);
/* Sends / receives exactly len bytes before deadline.  A closed peer is
 * moecclRemoteError, a deadline moecclTimeout. */
moecclResult_t moeccl_socket_send(int fd, const void* buf, size_t len, double deadline);
moecclResult_t moeccl_socket_recv(int fd, void* buf, size_t len, double deadline);

#endif
