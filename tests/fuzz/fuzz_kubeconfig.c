/*
 * A kubeconfig file as coll-agent reads it out of cluster (k8s-agent/kubeconfig.c), which parses
 * it with the agent's YAML-to-JSON loader (k8s-agent/yaml_json.c). The input is the file. The
 * loader must give a tree or an error that says why; accepted credentials must be usable as they
 * are: an https:// server without a trailing slash, terminated strings, decoded blobs whose
 * lengths are what was allocated.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "kube.h"

static void yaml(const uint8_t *data, size_t size)
{
    char err[256] = "";
    json_t *t = agent_yaml_load((const char *)data, size, err, sizeof(err));
    if (t == NULL) {
        if (err[0] == '\0')
            fuzz_fail("agent_yaml_load failed without saying why");
        return;
    }
    char *s = json_dumps(t, JSON_ENCODE_ANY | JSON_COMPACT);
    if (s == NULL)
        fuzz_fail("a loaded YAML tree does not encode as JSON");
    free(s);
    json_decref(t);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    yaml(data, size);
    const char *file_path = fuzz_as_file(data, size);
    agent_kube_creds_t c;
    char err[512] = "";
    memset(&c, 0x5a, sizeof(c));
    if (agent_creds_kubeconfig(file_path, &c, err, sizeof(err)) != 0) {
        if (err[0] == '\0')
            fuzz_fail("kubeconfig rejected without saying why");
        if (c.token || c.ca_data || c.cert_data || c.key_data)
            fuzz_fail("a rejected kubeconfig left credentials allocated");
        return 0;
    }
    size_t n = strnlen(c.server, sizeof(c.server));
    if (n == sizeof(c.server) || strncmp(c.server, "https://", 8) != 0 || c.server[n - 1] == '/')
        fuzz_fail("accepted a server that is not a terminated https:// URL without a slash");
    if (strnlen(c.ca_file, sizeof(c.ca_file)) == sizeof(c.ca_file) ||
        strnlen(c.token_file, sizeof(c.token_file)) == sizeof(c.token_file) ||
        strnlen(c.cert_file, sizeof(c.cert_file)) == sizeof(c.cert_file) ||
        strnlen(c.key_file, sizeof(c.key_file)) == sizeof(c.key_file) ||
        strnlen(c.namespace_, sizeof(c.namespace_)) == sizeof(c.namespace_))
        fuzz_fail("an accepted kubeconfig left an unterminated string");
    /* the decoded blobs are read whole (ASan checks the lengths) */
    volatile unsigned sum = 0;
    for (size_t i = 0; c.ca_data && i < c.ca_len; i++)
        sum += (unsigned char)c.ca_data[i];
    for (size_t i = 0; c.cert_data && i < c.cert_len; i++)
        sum += (unsigned char)c.cert_data[i];
    for (size_t i = 0; c.key_data && i < c.key_len; i++)
        sum += (unsigned char)c.key_data[i];
    (void)sum;
    agent_creds_free(&c);
    return 0;
}
