/* Socket helpers with deadlines, used where blocking is natural (bootstrap, abort notices). */
#ifndef COLLI_SOCKUTIL_H
#define COLLI_SOCKUTIL_H

#include <stdbool.h>
#include <sys/socket.h>

#include "coll.h"

enum { COLLI_IO_OK = 0, COLLI_IO_ERR = -1, COLLI_IO_EOF = -2, COLLI_IO_TIMEOUT = -3 };

socklen_t colli_sockaddr_len(const struct sockaddr_storage *sa);
/* Non-blocking, close-on-exec listening socket on addr (port 0: any); *bound gets the address. */
coll_result_t colli_sock_listen(const struct sockaddr_storage *addr, int *fd,
                                struct sockaddr_storage *bound);
/* Start a non-blocking connect from bind_addr (port 0; NULL: let the kernel choose) to `to`.
 * Returns COLLI_IO_OK with *fd (connection may still be in progress) or COLLI_IO_ERR (errno). */
int colli_sock_connect_start(const struct sockaddr_storage *to,
                             const struct sockaddr_storage *bind_addr, int *fd);
/* Finish a connect started above, waiting until deadline; retries refused connections until the
 * deadline when retry is set, but "no route" (ENETUNREACH, EHOSTUNREACH) for 10 s only. Returns
 * COLLI_IO_* (errno: the error on COLLI_IO_ERR; on COLLI_IO_TIMEOUT the last real failure of
 * the attempts, 0 when they only waited). */
int colli_sock_connect(const struct sockaddr_storage *to, const struct sockaddr_storage *bind_addr,
                       double deadline, bool retry, int *fd);
/* As colli_sock_connect with retry, and once the peer has refused every attempt for refused_s
 * seconds, on_refused(arg) is called (once) while the retries go on: a caller says so before
 * its deadline. */
int colli_sock_connect_noted(const struct sockaddr_storage *to,
                             const struct sockaddr_storage *bind_addr, double deadline,
                             double refused_s, void (*on_refused)(void *arg), void *arg, int *fd);
int colli_sock_write_all(int fd, const void *buf, size_t len, double deadline);
int colli_sock_read_all(int fd, void *buf, size_t len, double deadline);
void colli_sock_tune(int fd); /* TCP_NODELAY, keepalive */
/* host:port (a name or a numeric address) into *out; on failure COLL_ERR_NETWORK saying
 * "<what> <host>:<port> does not resolve: <why><hint>". */
coll_result_t colli_sock_resolve(const char *host, int port, struct sockaddr_storage *out,
                                 const char *what, const char *hint);
/* Text for a COLLI_IO_* result ("connection closed by peer", "timed out", strerror). */
const char *colli_io_str(int io, int err);

#endif
