/* Shared by the libFuzzer targets and by fuzz_replay (the corpus replayed without libFuzzer). */
#ifndef COLL_FUZZ_H
#define COLL_FUZZ_H

#include <stddef.h>
#include <poll.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/un.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

/* An invariant of the code under test does not hold: report and crash, so that libFuzzer keeps
 * the input. */
void fuzz_fail(const char *what) __attribute__((noreturn));

/* poll() that waits the whole timeout: libFuzzer's -timeout timer (SIGALRM every timeout/2 + 1 s)
 * interrupts a poll with EINTR, which a target must not take for "no answer" (fuzz_agent_server
 * did, once every 50-170 thousand inputs). Returns poll's result, never -1 with EINTR. */
int fuzz_poll(struct pollfd *fds, nfds_t nfds, int timeout_ms);

/* A non-blocking listener on the abstract Unix socket "kcoll-fuzz-<what>-<pid>" (nothing on disk,
 * gone with the process) for a target's fake peers; its address in *addr and *len. SIGPIPE is
 * ignored from then on (a peer may close first). */
int fuzz_listen(const char *what, struct sockaddr_un *addr, socklen_t *len);

/* The input as a file the code under test opens by name: a memfd, rewritten on each call; returns
 * its path (/proc/self/fd/N). */
const char *fuzz_as_file(const uint8_t *data, size_t size);

#endif
