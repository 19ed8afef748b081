/*
 * The agent's socket server as the pod's containers reach it (k8s-agent/ipc_server.c: frame
 * lengths, truncated frames, several requests on one connection, then hello, report and
 * nccl_init through their handlers), started once with agent_ipc_start on a socket in a private
 * directory, for an agent whose facts are ready. Each input is written on one connection as it
 * is (frame headers included), then the connection is half-closed and every answer read back.
 * Every answer must be a frame whose JSON is an object with a type: the server never answers
 * with bytes the library cannot decode.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "agent.h"
#include "fuzz.h"

static agent_ctx_t ctx;
static char path[108];
static char dir[64];

static void stop(void)
{
    unlink(path);
    rmdir(dir);
}

static void start(void)
{
    static agent_ipc_t *ipc;
    if (ipc != NULL)
        return;
    snprintf(dir, sizeof(dir), "/tmp/kcoll-fuzz-server.XXXXXX");
    if (mkdtemp(dir) == NULL)
        fuzz_fail("mkdtemp");
    snprintf(path, sizeof(path), "%s/agent.sock", dir);
    pthread_mutex_init(&ctx.mu, NULL);
    pthread_cond_init(&ctx.cv, NULL);
    agent_facts_t f;
    memset(&f, 0, sizeof(f));
    f.rank = 1;
    f.nranks = 4;
    f.root_port = 29500;
    f.bootstrap_timeout_s = 60;
    f.timeout_s = 600;
    snprintf(f.root_host, sizeof(f.root_host), "10.0.0.1");
    snprintf(f.ifname, sizeof(f.ifname), "eth0");
    snprintf(f.address, sizeof(f.address), "10.0.0.2");
    snprintf(f.transport, sizeof(f.transport), "Socket");
    snprintf(f.job, sizeof(f.job), "train");
    snprintf(f.ns, sizeof(f.ns), "ml");
    snprintf(f.pod, sizeof(f.pod), "train-1");
    ctx.facts = f;
    ctx.state = AGENT_STATE_READY;
    if (agent_ipc_start(&ctx, path, &ipc) != 0)
        fuzz_fail("agent_ipc_start");
    atexit(stop);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    start();
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    snprintf(a.sun_path, sizeof(a.sun_path), "%s", path);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0)
        fuzz_fail("cannot connect to the agent's socket");
    for (size_t off = 0; off < size;) {
        ssize_t w = send(fd, data + off, size - off, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            break; /* the server closed (a bad frame): its answer is read below */
        off += (size_t)w;
    }
    shutdown(fd, SHUT_WR);
    /* every answer, until the server closes (it does at the end of the input) */
    size_t cap = 1 << 16, len = 0;
    unsigned char *buf = malloc(cap);
    for (;;) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (fuzz_poll(&p, 1, 60000) != 1) /* generous: a loaded 2-core CI machine */
            fuzz_fail("the agent neither answered nor closed within 60 s");
        if (len == cap) {
            cap *= 2;
            buf = realloc(buf, cap);
        }
        ssize_t n = recv(fd, buf + len, cap - len, 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        len += (size_t)n;
    }
    close(fd);
    for (size_t off = 0; off < len;) {
        if (len - off < COLLI_PROTO_FRAME_HEADER)
            fuzz_fail("a partial frame header in the agent's answers");
        uint32_t n = colli_proto_frame_length(buf + off);
        off += COLLI_PROTO_FRAME_HEADER;
        if (n == 0 || n > len - off)
            fuzz_fail("an answer frame whose length is not what follows");
        json_t *r = json_loadb((const char *)buf + off, n, 0, NULL);
        if (!json_is_object(r) || colli_proto_type(r) == NULL)
            fuzz_fail("an answer that is not a JSON object with a type");
        json_decref(r);
        off += n;
    }
    free(buf);
    return 0;
}
