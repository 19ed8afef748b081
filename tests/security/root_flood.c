/*
 * Bootstrap root under a flood of strangers (issue 21, finding 3): 1100 connections from one
 * other address that send only the 4-byte hello magic and then nothing. Before, they held all 1024
 * pending slots for 10 s and the root thread spun at full CPU (its listener's backlog woke every
 * poll). Now: the root stops watching its listener at the cap (no busy loop: this process burns
 * well under a CPU-second in 3 s of flood), refuses one address more than its share once the table
 * is half full, drops each silent stranger after 2 s, logs a bounded number of lines, and the real
 * ranks that come during the flood still bootstrap and all-reduce. root_flood          (exit 0:
 * pass, 1: fail)
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "coll.h"

#define STRANGERS 1100
#define RANKS     2

static int failed;

static void check(int ok, const char *what)
{
    printf("%s %s\n", ok ? "ok  " : "FAIL", what);
    failed |= !ok;
}

static double cpu_s(void)
{
    struct rusage u;
    getrusage(RUSAGE_SELF, &u);
    return u.ru_utime.tv_sec + u.ru_stime.tv_sec + (u.ru_utime.tv_usec + u.ru_stime.tv_usec) * 1e-6;
}

static int rank_main(coll_unique_id_t id, int rank)
{
    coll_comm_t comm;
    if (coll_comm_init_rank(&comm, RANKS, id, rank) != COLL_SUCCESS) {
        printf("rank %d: init failed: %s\n", rank, coll_get_last_error());
        return 1;
    }
    int64_t one = rank + 1, sum = 0;
    coll_result_t rc = coll_all_reduce(&one, &sum, 1, COLL_INT64, COLL_SUM, comm, NULL);
    coll_comm_destroy(comm);
    return rc == COLL_SUCCESS && sum == 3 ? 0 : 1;
}

int main(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < STRANGERS + 256) {
        rl.rlim_cur = rl.rlim_max < STRANGERS + 256 ? rl.rlim_max : STRANGERS + 256;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur < STRANGERS + 64) {
        printf("SKIPPED: the open-files limit (%lu) is below %d\n", (unsigned long)rl.rlim_cur,
               STRANGERS + 64);
        return 77;
    }
    setenv("COLL_SOCKET_IFNAME", "lo", 1);
    setenv("COLL_BOOTSTRAP_TIMEOUT", "30", 1);
    coll_unique_id_t id;
    char str[COLL_UNIQUE_ID_STRLEN];
    if (coll_get_unique_id(&id) != COLL_SUCCESS ||
        coll_unique_id_to_string(&id, str, sizeof(str)) != COLL_SUCCESS) {
        printf("FAIL unique id: %s\n", coll_get_last_error());
        return 1;
    }
    /* "kcoll1:ADDR:PORT:SECRET" */
    char addr[64] = "";
    int port = 0;
    if (sscanf(str, "kcoll1:%63[0-9.]:%d:", addr, &port) != 2) {
        printf("FAIL cannot read the root address from %s\n", str);
        return 1;
    }
    struct sockaddr_in to = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    inet_pton(AF_INET, addr, &to.sin_addr);
    static int fds[STRANGERS];
    const uint32_t magic = 0x4c48434bu; /* the hello's magic: past the root's first check */
    int opened = 0;
    for (int i = 0; i < STRANGERS; i++) {
        fds[i] = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        /* from 127.0.0.2: another host than the ranks' 127.0.0.1, as a stranger would be */
        struct sockaddr_in from = {.sin_family = AF_INET};
        inet_pton(AF_INET, "127.0.0.2", &from.sin_addr);
        if (fds[i] < 0 || bind(fds[i], (struct sockaddr *)&from, sizeof(from)) != 0 ||
            connect(fds[i], (struct sockaddr *)&to, sizeof(to)) != 0) {
            if (fds[i] >= 0)
                close(fds[i]);
            fds[i] = -1;
            continue;
        }
        if (write(fds[i], &magic, 4) == 4)
            opened++;
    }
    printf("%d stranger connections opened, each sent the magic only\n", opened);
    check(opened > 1024, "more strangers than the root's pending slots");
    (void)opened;
    /* the ranks come during the flood */
    pid_t pids[RANKS];
    for (int r = 0; r < RANKS; r++) {
        pids[r] = fork();
        if (pids[r] == 0)
            _exit(rank_main(id, r));
    }
    const double c0 = cpu_s();
    sleep(3);
    const double burned = cpu_s() - c0;
    printf("this process (the root thread) used %.2f CPU-seconds in 3 s of flood\n", burned);
    check(burned < 0.5, "no busy loop while the strangers hold the root");
    int good = 0;
    for (int r = 0; r < RANKS; r++) {
        int st = 0;
        if (waitpid(pids[r], &st, 0) == pids[r] && WIFEXITED(st) && WEXITSTATUS(st) == 0)
            good++;
    }
    check(good == RANKS, "the ranks that came during the flood bootstrapped and all-reduced");
    for (int i = 0; i < STRANGERS; i++)
        if (fds[i] >= 0)
            close(fds[i]);
    printf("%s\n", failed ? "FAILED" : "passed");
    return failed;
}
