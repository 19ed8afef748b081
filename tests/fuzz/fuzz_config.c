/*
 * User-supplied configuration text: interface specs (COLL_SOCKET_IFNAME, NCCL syntax plus CIDR)
 * through colli_netif_match, HCA specs (COLL_IB_HCA) through colli_ib_hca_match, and every
 * COLL_* parameter's parser through colli_config_pin. Input: a selector byte, then text; for the
 * matchers the text is "spec\0name" followed by address bytes.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <stdlib.h>
#include <string.h>

#include "base/config.h"
#include "base/netif.h"
#include "base/spec.h"
#include "fuzz.h"

static const char *params[] = {
    "COLL_SOCKET_IFNAME",   "COLL_SOCKET_FAMILY", "COLL_SOCKET_NSTREAMS",       "COLL_CHUNK_SIZE",
    "COLL_SMALL_THRESHOLD", "COLL_TIMEOUT",       "COLL_BOOTSTRAP_TIMEOUT",     "COLL_SPIN_US",
    "COLL_TRANSPORT",       "COLL_IB_HCA",        "COLL_SOCKET_MAX_CONNECTING",
};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    uint8_t sel = data[0];
    char *text = malloc(size);
    if (text == NULL)
        return 0;
    memcpy(text, data + 1, size - 1);
    text[size - 1] = '\0';
    if ((sel & 1) == 0) {
        /* spec \0 name \0 address bytes; text[tl] is the terminating NUL */
        const size_t tl = size - 1;
        const char *spec = text;
        size_t off = strlen(spec) + 1;
        if (off > tl)
            off = tl;
        const char *name = text + off;
        size_t aoff = off + strlen(name) + 1;
        const uint8_t *ab = (const uint8_t *)text + (aoff < tl ? aoff : tl);
        size_t an = aoff < tl ? tl - aoff : 0;
        struct sockaddr_storage ss;
        memset(&ss, 0, sizeof(ss));
        if (sel & 2) {
            struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&ss;
            in6->sin6_family = AF_INET6;
            memcpy(&in6->sin6_addr, ab, an < 16 ? an : 16);
        } else {
            struct sockaddr_in *in = (struct sockaddr_in *)&ss;
            in->sin_family = AF_INET;
            memcpy(&in->sin_addr, ab, an < 4 ? an : 4);
        }
        (void)colli_netif_match(spec, name, (const struct sockaddr *)&ss);
        (void)colli_ib_hca_match(spec, name, (sel >> 2) & 3);
    } else {
        colli_config_t cfg;
        if (colli_config_load(&cfg) != COLL_SUCCESS)
            fuzz_fail("the built-in defaults do not load");
        const char *p = params[(sel >> 1) % (sizeof(params) / sizeof(params[0]))];
        coll_result_t rc = colli_config_pin(&cfg, p, text, COLLI_SRC_AGENT);
        if (rc != COLL_SUCCESS && rc != COLL_ERR_INVALID_ARGUMENT)
            fuzz_fail("a bad parameter value is not COLL_ERR_INVALID_ARGUMENT");
        if (rc == COLL_SUCCESS) {
            if (cfg.nstreams < 1 || cfg.nstreams > 16 || cfg.chunk_size < 4096 ||
                cfg.chunk_size > (64u << 20) || !(cfg.timeout > 0) ||
                !(cfg.bootstrap_timeout > 0) || cfg.max_connecting < 1 || cfg.spin_us < 0)
                fuzz_fail("an accepted value is out of its documented range");
            if (strnlen(cfg.socket_ifname, sizeof(cfg.socket_ifname)) >=
                    sizeof(cfg.socket_ifname) ||
                strnlen(cfg.ib_hca, sizeof(cfg.ib_hca)) >= sizeof(cfg.ib_hca))
                fuzz_fail("an accepted string is not terminated");
        }
    }
    free(text);
    return 0;
}
