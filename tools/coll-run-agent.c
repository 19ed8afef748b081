/*
 * coll-run --agent: finding coll-agent, writing the standalone topology (interface and address,
 * a free root port, a fresh secret, the pinned version and timeouts) into a private temporary
 * directory, the agents' command lines, and removing the directory at the end.
 */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <ifaddrs.h>
#include <limits.h>
#include <math.h>
#include <net/if.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "coll_run.h"

/* --agent: true once every agent's socket exists. */
bool run_agent_sockets_ready(struct run *run)
{
    for (int i = run->nranks; i < run->nprocs; i++) {
        struct stat st;

        if (stat(run->ranks[i].sock_path, &st) != 0 || !S_ISSOCK(st.st_mode))
            return false;
    }
    return true;
}

/* coll-agent: --agent=PATH as given (PATH lookup without a slash), else next to coll-run, else
 * the build tree's k8s-agent/, else PATH. NULL (with the places tried in tried) if none. */
char *run_find_agent(const char *given, char *tried, size_t tried_len)
{
    char self[PATH_MAX], *slash, *cand;
    ssize_t n;

    if (given != NULL)
        return run_resolve_program(given);
    n = readlink("/proc/self/exe", self, sizeof(self) - 1);
    if (n > 0) {
        self[n] = '\0';
        slash = strrchr(self, '/');
        if (slash != NULL) {
            *slash = '\0';
            cand = run_xasprintf("%s/%s", self, AGENT_NAME);
            if (access(cand, X_OK) == 0)
                return cand;
            free(cand);
            cand = run_xasprintf("%s/../k8s-agent/%s", self, AGENT_NAME);
            if (access(cand, X_OK) == 0)
                return cand;
            free(cand);
            snprintf(tried, tried_len, "%s/%s, %s/../k8s-agent/%s and PATH", self, AGENT_NAME, self,
                     AGENT_NAME);
        }
    }
    cand = run_resolve_program(AGENT_NAME);
    if (cand == NULL && tried[0] == '\0')
        snprintf(tried, tried_len, "PATH");
    return cand;
}

static int cidr_match4(const char *tok, const struct sockaddr *sa)
{
    char buf[64], *slash;
    struct in_addr net;
    long bits;
    uint32_t mask, a;

    snprintf(buf, sizeof(buf), "%s", tok);
    slash = strchr(buf, '/');
    if (slash == NULL)
        return -1; /* not a CIDR */
    *slash = '\0';
    if (inet_pton(AF_INET, buf, &net) != 1)
        return -1;
    bits = strtol(slash + 1, NULL, 10);
    if (bits < 0 || bits > 32)
        return -1;
    if (sa->sa_family != AF_INET)
        return 0;
    mask = bits == 0 ? 0 : htonl(~(uint32_t)0 << (32 - bits));
    a = ((const struct sockaddr_in *)sa)->sin_addr.s_addr;
    return (a & mask) == (net.s_addr & mask);
}

/* COLL_SOCKET_IFNAME syntax: a list of name prefixes, "=" for exact names, "^" to exclude,
 * IPv4 CIDR blocks. */
static bool ifname_match(const char *spec, const char *name, const struct sockaddr *sa)
{
    bool exclude = false, exact = false, hit = false;
    char buf[256], *save = NULL;

    if (*spec == '^')
        exclude = true, spec++;
    if (*spec == '=')
        exact = true, spec++;
    snprintf(buf, sizeof(buf), "%s", spec);
    for (char *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        int c = cidr_match4(tok, sa);
        char *colon;

        if (c >= 0) {
            hit = hit || c == 1;
            continue;
        }
        colon = strchr(tok, ':');
        if (colon != NULL)
            *colon = '\0';
        if (exact ? strcmp(name, tok) == 0 : strncmp(name, tok, strlen(tok)) == 0)
            hit = true;
    }
    return exclude ? !hit : hit;
}

/* The interface the spec selects and its address (IPv4 first, else a global IPv6 one), the way
 * the library would pick it; exits with a message listing the interfaces when none matches. */
static void pick_interface(const char *spec, char *name, size_t name_len, char *addr,
                           size_t addr_len, int *family)
{
    struct ifaddrs *list = NULL;
    char have[1024] = "";
    size_t used = 0;

    if (getifaddrs(&list) != 0) {
        run_msg("getifaddrs failed: %s", strerror(errno));
        exit(EXIT_FAILURE);
    }
    for (int fam = 0; fam < 2; fam++) {
        int want = fam == 0 ? AF_INET : AF_INET6;

        for (const struct ifaddrs *ifa = list; ifa != NULL; ifa = ifa->ifa_next) {
            const void *src;

            if (ifa->ifa_addr == NULL || ifa->ifa_addr->sa_family != want ||
                !(ifa->ifa_flags & IFF_UP))
                continue;
            if (want == AF_INET6 &&
                IN6_IS_ADDR_LINKLOCAL(&((const struct sockaddr_in6 *)ifa->ifa_addr)->sin6_addr))
                continue;
            if (!ifname_match(spec, ifa->ifa_name, ifa->ifa_addr))
                continue;
            src = want == AF_INET
                      ? (const void *)&((const struct sockaddr_in *)ifa->ifa_addr)->sin_addr
                      : (const void *)&((const struct sockaddr_in6 *)ifa->ifa_addr)->sin6_addr;
            if (inet_ntop(want, src, addr, (socklen_t)addr_len) == NULL)
                continue;
            snprintf(name, name_len, "%s", ifa->ifa_name);
            *family = want;
            freeifaddrs(list);
            return;
        }
    }
    for (const struct ifaddrs *ifa = list; ifa != NULL; ifa = ifa->ifa_next) {
        char a[INET6_ADDRSTRLEN] = "?";
        int f = ifa->ifa_addr != NULL ? ifa->ifa_addr->sa_family : AF_UNSPEC;
        int w;

        if (f != AF_INET && f != AF_INET6)
            continue;
        inet_ntop(f,
                  f == AF_INET
                      ? (const void *)&((const struct sockaddr_in *)ifa->ifa_addr)->sin_addr
                      : (const void *)&((const struct sockaddr_in6 *)ifa->ifa_addr)->sin6_addr,
                  a, sizeof(a));
        w = snprintf(have + used, sizeof(have) - used, "%s%s %s%s", used ? ", " : "", ifa->ifa_name,
                     a, (ifa->ifa_flags & IFF_UP) ? "" : " (down)");
        if (w < 0 || (size_t)w >= sizeof(have) - used)
            break;
        used += (size_t)w;
    }
    freeifaddrs(list);
    run_msg("--agent: no interface that is up matches the interface spec '%s'; this host has: %s",
            spec, have[0] ? have : "no interfaces with an address");
    exit(EXIT_FAILURE);
}

/* A port that is free on addr now; rank 0 binds the bootstrap root there. */
static int free_port(const char *addr, int family)
{
    struct sockaddr_storage ss;
    socklen_t len;
    int fd, port = -1;

    memset(&ss, 0, sizeof(ss));
    if (family == AF_INET) {
        struct sockaddr_in *in = (struct sockaddr_in *)&ss;

        in->sin_family = AF_INET;
        inet_pton(AF_INET, addr, &in->sin_addr);
        len = sizeof(*in);
    } else {
        struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&ss;

        in6->sin6_family = AF_INET6;
        inet_pton(AF_INET6, addr, &in6->sin6_addr);
        len = sizeof(*in6);
    }
    fd = socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        run_msg("socket() failed: %s", strerror(errno));
        exit(EXIT_FAILURE);
    }
    if (bind(fd, (struct sockaddr *)&ss, len) != 0 ||
        getsockname(fd, (struct sockaddr *)&ss, &len) != 0) {
        run_msg("cannot find a free port on %s: %s", addr, strerror(errno));
        run_close_fd(fd);
        exit(EXIT_FAILURE);
    }
    port = ntohs(family == AF_INET ? ((struct sockaddr_in *)&ss)->sin_port
                                   : ((struct sockaddr_in6 *)&ss)->sin6_port);
    run_close_fd(fd);
    return port;
}

static void random_secret_hex(char out[33])
{
    unsigned char b[16];
    size_t got = 0;

    while (got < sizeof(b)) {
        ssize_t n = getrandom(b + got, sizeof(b) - got, 0);

        if (n < 0) {
            if (errno == EINTR)
                continue;
            run_msg("getrandom failed: %s; cannot make the job's secret", strerror(errno));
            exit(EXIT_FAILURE);
        }
        got += (size_t)n;
    }
    for (size_t i = 0; i < sizeof(b); i++)
        snprintf(out + 2 * i, 3, "%02x", b[i]);
}

static void json_str(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s != '\0'; s++) {
        unsigned char c = (unsigned char)*s;

        if (c == '"' || c == '\\')
            fprintf(f, "\\%c", c);
        else if (c < 0x20)
            fprintf(f, "\\u%04x", c);
        else
            fputc(c, f);
    }
    fputc('"', f);
}

/* Seconds from a COLL_* timeout variable, rounded up; def when unset or not a positive number. */
static int env_seconds(const char *name, int def)
{
    const char *v = getenv(name);
    char *end;
    double d;

    if (v == NULL || *v == '\0')
        return def;
    errno = 0;
    d = strtod(v, &end);
    if (errno != 0 || end == v || *end != '\0' || !isfinite(d) || d <= 0 || d > INT_MAX)
        return def;
    return (int)ceil(d);
}

/* Remove the temporary directory and what the agents left in it (sockets, the topology). */
void run_remove_tmp_dir(struct run *run)
{
    DIR *d;
    struct dirent *e;

    if (run->tmp_dir == NULL)
        return;
    d = opendir(run->tmp_dir);
    if (d != NULL) {
        int dfd = dirfd(d);

        while ((e = readdir(d)) != NULL) {
            if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
                continue;
            if (unlinkat(dfd, e->d_name, 0) != 0 && errno != ENOENT)
                run_msg("cannot remove %s/%s: %s", run->tmp_dir, e->d_name, strerror(errno));
        }
        closedir(d);
    }
    if (rmdir(run->tmp_dir) != 0 && errno != ENOENT)
        run_msg("cannot remove %s: %s", run->tmp_dir, strerror(errno));
    free(run->tmp_dir);
    run->tmp_dir = NULL;
}

/*
 * The standalone topology every agent reads: this host's ranks on one interface, a free root
 * port on rank 0's address, a fresh secret, transport Socket, the pinned library version, and
 * the bootstrap and operation timeouts the user's environment asks for (the agent pins them).
 */
void run_write_topology(struct run *run, const char *spec, const char *pin_version)
{
    const char *tmp = getenv("TMPDIR");
    char ifname[IF_NAMESIZE + 1], addr[INET6_ADDRSTRLEN], host[256] = "localhost", secret[33];
    struct sockaddr_un probe;
    int family = AF_INET, port;
    FILE *f;

    pick_interface(spec, ifname, sizeof(ifname), addr, sizeof(addr), &family);
    port = free_port(addr, family);
    random_secret_hex(secret);
    if (gethostname(host, sizeof(host) - 1) != 0)
        snprintf(host, sizeof(host), "localhost");
    /* The sockets must fit sun_path: fall back to /tmp when $TMPDIR is too long. */
    if (tmp == NULL || *tmp == '\0' ||
        strlen(tmp) + sizeof("/coll-run.XXXXXX/agent4096.sock") > sizeof(probe.sun_path))
        tmp = "/tmp";
    run->tmp_dir = run_xasprintf("%s/coll-run.XXXXXX", tmp);
    if (mkdtemp(run->tmp_dir) == NULL) {
        run_msg("cannot create a temporary directory %s: %s", run->tmp_dir, strerror(errno));
        exit(EXIT_FAILURE);
    }
    run->topo_path = run_xasprintf("%s/topology.json", run->tmp_dir);
    f = fopen(run->topo_path, "we");
    if (f == NULL) {
        run_msg("cannot write %s: %s", run->topo_path, strerror(errno));
        run_remove_tmp_dir(run);
        exit(EXIT_FAILURE);
    }
    fprintf(f, "{\n  \"job\": \"coll-run-%d\",\n  \"port\": %d,\n  \"secret\": \"%s\",\n",
            (int)getpid(), port, secret);
    fprintf(f, "  \"transport\": \"Socket\",\n");
    if (pin_version[0] != '\0') {
        fprintf(f, "  \"libraryVersion\": ");
        json_str(f, pin_version);
        fprintf(f, ",\n");
    }
    fprintf(f, "  \"bootstrapTimeoutSeconds\": %d,\n  \"timeoutSeconds\": %d,\n",
            env_seconds(ENV_BOOT_TIMEOUT, DEFAULT_BOOT_S),
            env_seconds(ENV_TIMEOUT, DEFAULT_TIMEOUT_S));
    if (run->gpus_per_pod > 0) /* local rank r binds GPU r of them */
        fprintf(f, "  \"gpusPerPod\": %d,\n", run->gpus_per_pod);
    if (run->local_env) /* --pods/--ranks-per-pod: one entry per pod */
        fprintf(f, "  \"ranksPerPod\": %d,\n  \"pods\": [\n", run->ranks_per_pod);
    else
        fprintf(f, "  \"nranks\": %d,\n  \"ranks\": [\n", run->nranks);
    for (int r = 0; r < run->npods; r++) {
        fprintf(f, "    {\"%s\": %d, \"address\": \"%s\", \"interface\": ",
                run->local_env ? "podRank" : "rank", r, addr);
        json_str(f, ifname);
        fprintf(f, ", \"node\": ");
        json_str(f, host);
        fprintf(f, ", \"pod\": \"coll-run-%s-%d\"}%s\n", run->local_env ? "pod" : "rank", r,
                r + 1 < run->npods ? "," : "");
    }
    fprintf(f, "  ]\n}\n");
    if (ferror(f) != 0 || fclose(f) != 0) {
        run_msg("cannot write %s: %s", run->topo_path, strerror(errno));
        run_remove_tmp_dir(run);
        exit(EXIT_FAILURE);
    }
}

/* One coll-agent per pod (per rank without --pods), each with its own socket. */
void run_prepare_agents(struct run *run)
{
    for (int r = 0; r < run->npods; r++) {
        struct rank *a = &run->ranks[run->nranks + r];
        char **argv = run_xcalloc(10, sizeof(*argv));

        a->rank = r;
        a->is_agent = true;
        a->out.fd = -1;
        a->err.fd = -1;
        a->sock_path = run_xasprintf("%s/agent%d.sock", run->tmp_dir, r);
        argv[0] = run->agent_path;
        argv[1] = "--topology";
        argv[2] = run->topo_path;
        argv[3] = "--rank";
        argv[4] = run_xasprintf("%d", r);
        argv[5] = "--socket";
        argv[6] = a->sock_path;
        argv[7] = "--health-port";
        argv[8] = "0";
        argv[9] = NULL;
        a->argv = argv;
        a->envp = run_build_agent_env();
    }
}
