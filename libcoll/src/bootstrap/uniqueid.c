/* Unique ids: root address + 128-bit secret, with a printable form for environment variables. */
#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/sockutil.h"
#include "base/util.h"
#include "bootstrap/agent_client.h"
#include "bootstrap/bootstrap.h"
#include "base/netif.h"
#include "hex.h" /* proto/ */

coll_result_t colli_uid_decode(const coll_unique_id_t *id, struct sockaddr_storage *root,
                               uint8_t secret[16])
{
    colli_uid_t u;
    memcpy(&u, id->internal, sizeof(u));
    if (u.magic != COLLI_UID_MAGIC)
        return COLLI_ERR(BOOT, COLL_ERR_INVALID_ARGUMENT,
                         "the unique id is not a kcoll id (bad magic 0x%08x): pass every rank the "
                         "id produced by coll_get_unique_id",
                         u.magic);
    if ((u.family != AF_INET && u.family != AF_INET6) || u.port == 0)
        return COLLI_ERR(BOOT, COLL_ERR_INVALID_ARGUMENT,
                         "the unique id is corrupt (address family %u, port %u)", u.family, u.port);
    memset(root, 0, sizeof(*root));
    if (u.family == AF_INET) {
        struct sockaddr_in *in = (struct sockaddr_in *)root;
        in->sin_family = AF_INET;
        in->sin_port = htons(u.port);
        memcpy(&in->sin_addr, u.addr, 4);
    } else {
        struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)root;
        in6->sin6_family = AF_INET6;
        in6->sin6_port = htons(u.port);
        memcpy(&in6->sin6_addr, u.addr, 16);
    }
    memcpy(secret, u.secret, 16);
    return COLL_SUCCESS;
}

unsigned colli_uid_flags(const coll_unique_id_t *id)
{
    colli_uid_t u;
    memcpy(&u, id->internal, sizeof(u));
    return u.flags;
}

static void uid_encode(coll_unique_id_t *id, const struct sockaddr_storage *root,
                       const uint8_t secret[16], unsigned flags)
{
    colli_uid_t u;
    memset(&u, 0, sizeof(u));
    memset(id, 0, sizeof(*id));
    u.magic = COLLI_UID_MAGIC;
    u.flags = (uint8_t)flags;
    u.family = root->ss_family;
    if (root->ss_family == AF_INET) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)root;
        u.port = ntohs(in->sin_port);
        memcpy(u.addr, &in->sin_addr, 4);
    } else {
        const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)root;
        u.port = ntohs(in6->sin6_port);
        memcpy(u.addr, &in6->sin6_addr, 16);
    }
    memcpy(u.secret, secret, 16);
    memcpy(id->internal, &u, sizeof(u));
}

/* In a pod with the kcoll agent: the interface it pins (exact name), so that the root a framework
 * creates with ncclGetUniqueId is on the job's network, not on whatever interface comes first.
 * Without the agent, or when it does not answer (a warning), NULL: the environment decides. */
static const char *agent_ifname(const colli_config_t *cfg, char *buf, size_t len)
{
    const char *path = secure_getenv(COLL_ENV_AGENT_SOCKET);
    if (path == NULL || *path == '\0')
        return NULL;
    colli_proto_facts_t f;
    double t = cfg->bootstrap_timeout < 10.0 ? cfg->bootstrap_timeout : 10.0;
    if (colli_agent_hello(path, (int)(t * 1000.0), &f) != COLL_SUCCESS) {
        coll_warn(BOOT,
                  "the kcoll agent at %s did not answer (%s): the bootstrap root's interface is "
                  "chosen from the environment instead of the pod's pin",
                  path, colli_agent_last_error());
        return NULL;
    }
    if (f.ifname[0] == '\0')
        return NULL;
    snprintf(buf, len, "=%s", f.ifname);
    coll_info(BOOT, "bootstrap root on %s, the interface the kcoll agent pins", f.ifname);
    return buf;
}

/* A new id and its root; limit: the caller's bound on the root's wait (0: none). */
static coll_result_t new_unique_id(coll_unique_id_t *id, const char *ifname_spec, double limit)
{
    coll_result_t status;
    if (id == NULL)
        return COLLI_ERR(INIT, COLL_ERR_INVALID_ARGUMENT,
                         "coll_get_unique_id: id is NULL (pass a coll_unique_id_t to fill)");
    colli_config_t cfg;
    COLL_CHECK_GOTO(colli_config_load(&cfg), out);
    colli_config_bound_bootstrap(&cfg, limit);
    colli_netif_t nif;
    char pinned[80];
    if (ifname_spec == NULL)
        ifname_spec = agent_ifname(&cfg, pinned, sizeof(pinned));
    COLL_CHECK_GOTO(
        colli_netif_select(ifname_spec ? ifname_spec : cfg.socket_ifname, cfg.socket_family, &nif),
        out);
    uint8_t secret[16];
    COLL_CHECK_GOTO(colli_random_bytes(secret, sizeof(secret)), out);
    struct sockaddr_storage bound;
    COLL_CHECK_GOTO(colli_root_start(&nif.addr, secret, cfg.bootstrap_timeout, &bound, NULL), out);
    uid_encode(id, &bound, secret, 0);
    char a[80];
    colli_sockaddr_str(&bound, a, sizeof(a));
    coll_info(BOOT, "bootstrap root listening on %s (%s)", a, nif.name);
out:
    return status;
}

coll_result_t coll_get_unique_id_ifname(coll_unique_id_t *id, const char *ifname_spec)
{
    return new_unique_id(id, ifname_spec, 0);
}

coll_result_t coll_get_unique_id(coll_unique_id_t *id)
{
    return new_unique_id(id, NULL, 0);
}

coll_result_t coll_get_unique_id_timeout(coll_unique_id_t *id, double seconds)
{
    coll_result_t status = colli_config_check_bound("coll_get_unique_id_timeout", seconds);
    return status != COLL_SUCCESS ? status : new_unique_id(id, NULL, seconds);
}

coll_result_t coll_unique_id_to_string(const coll_unique_id_t *id, char *buf, size_t len)
{
    if (id == NULL || buf == NULL)
        return COLLI_ERR(INIT, COLL_ERR_INVALID_ARGUMENT, "coll_unique_id_to_string: %s is NULL",
                         id == NULL ? "id" : "buf");
    struct sockaddr_storage root;
    uint8_t secret[16];
    coll_result_t status = colli_uid_decode(id, &root, secret);
    if (status != COLL_SUCCESS)
        return status;
    char hex[33];
    colli_proto_hex_encode(secret, sizeof(secret), hex);
    char a[80];
    colli_sockaddr_str(&root, a, sizeof(a));
    /* "kcoll1r": rank 0 hosts the root at creation (coll_unique_id_from_address) */
    int n = snprintf(buf, len, "kcoll1%s:%s:%s",
                     colli_uid_flags(id) & COLLI_UID_ROOT_AT_INIT ? "r" : "", a, hex);
    if (n < 0 || (size_t)n >= len)
        return COLLI_ERR(INIT, COLL_ERR_INVALID_ARGUMENT,
                         "coll_unique_id_to_string: buffer of %zu bytes is too small (use "
                         "COLL_UNIQUE_ID_STRLEN)",
                         len);
    return COLL_SUCCESS;
}

/* "<IPv4>:<port>" or "[<IPv6>]:<port>", numeric, into *root; false when malformed. */
static bool parse_numeric(char *hostport, struct sockaddr_storage *root)
{
    char *pc = strrchr(hostport, ':');
    long port;
    if (pc == NULL || !colli_parse_long(pc + 1, 1, 65535, &port))
        return false;
    *pc = '\0';
    memset(root, 0, sizeof(*root));
    char *host = hostport;
    if (host[0] == '[') {
        size_t l = strlen(host);
        if (l < 3 || host[l - 1] != ']')
            return false;
        host[l - 1] = '\0';
        host++;
        struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)root;
        in6->sin6_family = AF_INET6;
        in6->sin6_port = htons((uint16_t)port);
        return inet_pton(AF_INET6, host, &in6->sin6_addr) == 1;
    }
    struct sockaddr_in *in = (struct sockaddr_in *)root;
    in->sin_family = AF_INET;
    in->sin_port = htons((uint16_t)port);
    return inet_pton(AF_INET, host, &in->sin_addr) == 1;
}

coll_result_t coll_unique_id_from_string(coll_unique_id_t *id, const char *str)
{
    if (id == NULL || str == NULL)
        return COLLI_ERR(INIT, COLL_ERR_INVALID_ARGUMENT, "coll_unique_id_from_string: %s is NULL",
                         id == NULL ? "id" : "str");
    const char *bad = "expected kcoll1:<address>:<port>:<32 hex digits>";
    size_t slen = strnlen(str, COLL_UNIQUE_ID_STRLEN + 1);
    unsigned flags = strncmp(str, "kcoll1r:", 8) == 0 ? COLLI_UID_ROOT_AT_INIT : 0;
    if (slen > COLL_UNIQUE_ID_STRLEN || (strncmp(str, "kcoll1:", 7) != 0 && flags == 0))
        goto malformed;
    const char *p = str + (flags ? 8 : 7);
    const char *last = strrchr(p, ':');
    if (last == NULL || strlen(last + 1) != 32)
        goto malformed;
    uint8_t secret[16];
    if (colli_proto_hex_decode(last + 1, secret, sizeof(secret)) != 0)
        goto malformed;
    /* p .. last is "<addr>:<port>" or "[<v6>]:<port>" */
    char hostport[80];
    size_t hl = (size_t)(last - p);
    if (hl == 0 || hl >= sizeof(hostport))
        goto malformed;
    memcpy(hostport, p, hl);
    hostport[hl] = '\0';
    struct sockaddr_storage root;
    if (!parse_numeric(hostport, &root))
        goto malformed;
    uid_encode(id, &root, secret, flags);
    return COLL_SUCCESS;
malformed:
    return COLLI_ERR(INIT, COLL_ERR_INVALID_ARGUMENT, "malformed unique id string \"%.*s\": %s",
                     (int)(slen > 100 ? 100 : slen), str, bad);
}

bool colli_split_host_port(const char *in, char *host, size_t hostlen, long *port)
{
    const char *colon = strrchr(in, ':');
    if (colon == NULL || colon == in || (size_t)(colon - in) >= hostlen ||
        !colli_parse_long(colon + 1, 1, 65535, port))
        return false;
    size_t hl = (size_t)(colon - in);
    if (in[0] == '[' && hl > 2 && in[hl - 1] == ']') { /* [v6] */
        in++;
        hl -= 2;
    }
    memcpy(host, in, hl);
    host[hl] = '\0';
    return true;
}

/* The job's secret from the pod's kcoll agent (every agent of the job holds the same). */
static coll_result_t agent_secret(uint8_t secret[16], const char *fn)
{
    const char *path = secure_getenv(COLL_ENV_AGENT_SOCKET);
    if (path == NULL || *path == '\0')
        return COLLI_ERR(INIT, COLL_ERR_INVALID_USAGE,
                         "%s: no secret given and %s is not set: give the job's secret (32 hex "
                         "digits, the same on every rank), or run under the kcoll agent, which "
                         "holds it",
                         fn, COLL_ENV_AGENT_SOCKET);
    colli_config_t cfg;
    coll_result_t status = colli_config_load(&cfg);
    if (status != COLL_SUCCESS)
        return status;
    colli_proto_facts_t f;
    status = colli_agent_hello(path, (int)(cfg.bootstrap_timeout * 1000.0), &f);
    if (status != COLL_SUCCESS)
        return COLLI_ERR(AGENT, status,
                         "%s: the job's secret comes from the kcoll agent (%s is set), which "
                         "did not give it: %s",
                         fn, COLL_ENV_AGENT_SOCKET, colli_agent_last_error());
    memcpy(secret, f.secret, 16);
    coll_info(INIT, "%s: the job's secret from the kcoll agent of pod %s", fn,
              f.pod[0] ? f.pod : "(unnamed)");
    return COLL_SUCCESS;
}

coll_result_t coll_unique_id_from_address(coll_unique_id_t *id, const char *host_port,
                                          const char *secret_hex)
{
    static const char fn[] = "coll_unique_id_from_address";
    if (id == NULL || host_port == NULL)
        return COLLI_ERR(INIT, COLL_ERR_INVALID_ARGUMENT, "%s: %s is NULL", fn,
                         id == NULL ? "id" : "host_port");
    uint8_t secret[16];
    if (secret_hex == NULL) {
        coll_result_t st = agent_secret(secret, fn);
        if (st != COLL_SUCCESS)
            return st;
    } else if (strlen(secret_hex) != 32 || colli_proto_hex_decode(secret_hex, secret, 16) != 0)
        return COLLI_ERR(INIT, COLL_ERR_INVALID_USAGE,
                         "%s: the secret must be 32 hex digits, the same on every rank (e.g. "
                         "from `openssl rand -hex 16`); it is %zu characters long",
                         fn, strlen(secret_hex));
    char hp[300];
    long port;
    if (!colli_split_host_port(host_port, hp, sizeof(hp), &port))
        return COLLI_ERR(INIT, COLL_ERR_INVALID_ARGUMENT,
                         "%s: \"%.100s\" is not <host>:<port> (a name or address, and a port "
                         "from 1 to 65535; an IPv6 address in brackets)",
                         fn, host_port);
    struct sockaddr_storage root;
    coll_result_t status = colli_sock_resolve(hp, (int)port, &root, fn, "");
    if (status != COLL_SUCCESS)
        return status;
    uid_encode(id, &root, secret, COLLI_UID_ROOT_AT_INIT);
    return COLL_SUCCESS;
}
