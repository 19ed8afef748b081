/*
 * The agent's replies as the library reads them (libcoll/src/bootstrap/agent_client.c): a fake
 * agent on a Unix socket reads the library's request frame and answers with the input, byte for
 * byte (frame header included), then closes. The library sends a hello and then a report; both
 * get the same answer. A reply the library accepts must carry facts it can use; one it rejects
 * must leave a message saying why. The file is included (not linked) so that the fuzz build's
 * library, compiled without jansson, still gets the real client.
 */
#define COLL_HAVE_JANSSON 1
#include "bootstrap/agent_client.c"

#include <pthread.h>

#include "fuzz.h"

static char sock_path[108];
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static const uint8_t *answer;
static size_t answer_len;

static int read_full(int fd, void *p, size_t n)
{
    while (n > 0) {
        ssize_t r = read(fd, p, n);
        if (r <= 0)
            return -1;
        p = (char *)p + r;
        n -= (size_t)r;
    }
    return 0;
}

static void *fake_agent(void *arg)
{
    int lfd = *(int *)arg;
    for (;;) {
        int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
        if (fd < 0)
            continue;
        unsigned char hdr[COLLI_PROTO_FRAME_HEADER];
        if (read_full(fd, hdr, sizeof(hdr)) == 0) {
            uint32_t n = colli_proto_frame_length(hdr);
            char *req = n <= COLLI_PROTO_FRAME_MAX ? malloc(n ? n : 1) : NULL;
            if (req != NULL && read_full(fd, req, n) == 0) {
                pthread_mutex_lock(&mu);
                size_t off = 0;
                while (off < answer_len) {
                    ssize_t w = send(fd, answer + off, answer_len - off, MSG_NOSIGNAL);
                    if (w <= 0)
                        break;
                    off += (size_t)w;
                }
                pthread_mutex_unlock(&mu);
            }
            free(req);
        }
        close(fd);
    }
    return NULL;
}

static void remove_socket(void)
{
    unlink(sock_path);
}

static void start_agent(void)
{
    static int lfd = -1;
    if (lfd >= 0)
        return;
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    snprintf(sock_path, sizeof(sock_path), "/tmp/kcoll-fuzz-agent-%d.sock", (int)getpid());
    unlink(sock_path);
    atexit(remove_socket);
    snprintf(a.sun_path, sizeof(a.sun_path), "%s", sock_path);
    lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (lfd < 0 || bind(lfd, (struct sockaddr *)&a, sizeof(a)) != 0 || listen(lfd, 16) != 0)
        fuzz_fail("cannot listen as the fake agent");
    pthread_t t;
    if (pthread_create(&t, NULL, fake_agent, &lfd) != 0)
        fuzz_fail("cannot start the fake agent");
    pthread_detach(t);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    start_agent();
    pthread_mutex_lock(&mu);
    answer = data;
    answer_len = size;
    pthread_mutex_unlock(&mu);

    colli_proto_facts_t f;
    memset(&f, 0x5a, sizeof(f));
    coll_result_t rc = colli_agent_hello(sock_path, 2000, &f);
    if (rc == COLL_SUCCESS) {
        /* timeouts of 0 or less are not checked: they mean "not given" (agent_init.c then
         * keeps COLL_BOOTSTRAP_TIMEOUT and COLL_TIMEOUT) */
        if (f.nranks <= 0 || f.rank < 0 || f.rank >= f.nranks || f.root_port <= 0 ||
            f.root_port > 65535)
            fuzz_fail("the library accepted facts it cannot use");
        if (strnlen(f.root_host, sizeof(f.root_host)) == sizeof(f.root_host) ||
            strnlen(f.ifname, sizeof(f.ifname)) == sizeof(f.ifname) ||
            strnlen(f.transport, sizeof(f.transport)) == sizeof(f.transport))
            fuzz_fail("accepted facts with an unterminated string");
    } else if (colli_agent_last_error()[0] == '\0') {
        fuzz_fail("a rejected hello reply without a message");
    }
    rc = colli_agent_report(sock_path, 2000, COLLI_PROTO_PHASE_READY, NULL);
    if (rc != COLL_SUCCESS && colli_agent_last_error()[0] == '\0')
        fuzz_fail("a rejected report reply without a message");

    pthread_mutex_lock(&mu);
    answer = NULL;
    answer_len = 0;
    pthread_mutex_unlock(&mu);
    return 0;
}
