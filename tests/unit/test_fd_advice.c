/* What a rank out of descriptors is told to do (colli_fd_advice, transport.c): the process's own
 * limit (EMFILE) asks to raise ulimit -n to what the communicator needs; the host's table
 * (ENFILE) says that ulimit -n is not the cause and names fs.file-max instead. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>

#include "base/comm.h"
#include "transport/transport.h"

static int failures;

static void expect(const char *what, const char *text, const char *needle, bool present)
{
    if ((strstr(text, needle) != NULL) != present) {
        fprintf(stderr, "FAIL %s: \"%s\" %s in: %s\n", what, needle,
                present ? "missing" : "present", text);
        failures++;
    }
}

int main(void)
{
    struct coll_comm comm;
    memset(&comm, 0, sizeof(comm));
    comm.nranks = 32;
    comm.rank = 5;
    char buf[512];
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur < 256) {
        fprintf(stderr, "FAIL: the open-file limit is below 256 here; raise it to run this test\n");
        return 1;
    }
    /* a limit of 64: below the 64 descriptors of a communicator's own overhead */
    struct rlimit low = {64, rl.rlim_max};
    if (setrlimit(RLIMIT_NOFILE, &low) != 0) {
        perror("setrlimit");
        return 1;
    }
    colli_fd_advice(&comm, EMFILE, buf, sizeof(buf));
    expect("EMFILE", buf, "the open-file limit (ulimit -n) is 64", true);
    expect("EMFILE", buf, "rank 5 with 31 peers", true);
    expect("EMFILE", buf, "raise it (ulimit -n", true);
    expect("EMFILE", buf, "fs.file-max", false);
    colli_fd_advice(&comm, ENFILE, buf, sizeof(buf));
    expect("ENFILE", buf, "the whole host is out of open files", true);
    expect("ENFILE", buf, "ulimit -n 64, is not the cause", true);
    expect("ENFILE", buf, "raise fs.file-max", true);
    expect("ENFILE", buf, "rank 5 with 31 peers", true);
    expect("ENFILE", buf, "raise it (ulimit -n", false);
    (void)setrlimit(RLIMIT_NOFILE, &rl);
    printf("%s\n", failures == 0 ? "ok" : "FAILED");
    return failures == 0 ? 0 : 1;
}
