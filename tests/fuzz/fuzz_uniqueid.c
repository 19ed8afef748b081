/*
 * coll_unique_id_from_string: the printable unique id arrives through the environment of every
 * rank (COLL_UNIQUE_ID), so any byte string must be either rejected with
 * COLL_ERR_INVALID_ARGUMENT or accepted as an id that prints back to a string that parses to the
 * same id ("kcoll1r:", an id of coll_unique_id_from_address, keeps its flag). The same bytes as
 * NCCL_COMM_ID go through colli_split_host_port, coll_unique_id_from_address's parser.
 */
#define _GNU_SOURCE
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "bootstrap/bootstrap.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *s = malloc(size + 1);
    if (s == NULL)
        return 0;
    memcpy(s, data, size);
    s[size] = '\0';
    /* the same bytes as NCCL_COMM_ID: split into a terminated host and a port in range, or
     * refused (resolving the host is getaddrinfo's) */
    char host[64];
    long port = 0;
    if (colli_split_host_port(s, host, sizeof(host), &port) &&
        (strnlen(host, sizeof(host)) >= sizeof(host) || port < 1 || port > 65535 ||
         strlen(host) >= size))
        fuzz_fail("colli_split_host_port: a host not terminated or longer than the input, or a "
                  "port out of range");
    coll_unique_id_t id;
    memset(&id, 0, sizeof(id));
    coll_result_t rc = coll_unique_id_from_string(&id, s);
    if (rc != COLL_SUCCESS) {
        if (rc != COLL_ERR_INVALID_ARGUMENT)
            fuzz_fail("a malformed id string is not COLL_ERR_INVALID_ARGUMENT");
        free(s);
        return 0;
    }
    const bool at_init = strncmp(s, "kcoll1r:", 8) == 0;
    if (strncmp(s, "kcoll1:", 7) != 0 && !at_init)
        fuzz_fail("accepted an id string without the kcoll1: (or kcoll1r:) prefix");
    if (((colli_uid_flags(&id) & COLLI_UID_ROOT_AT_INIT) != 0) != at_init)
        fuzz_fail("the kcoll1r: prefix and the id's root-at-init flag disagree");
    struct sockaddr_storage root;
    uint8_t secret[16];
    if (colli_uid_decode(&id, &root, secret) != COLL_SUCCESS)
        fuzz_fail("a parsed id does not decode");
    char out[COLL_UNIQUE_ID_STRLEN];
    if (coll_unique_id_to_string(&id, out, sizeof(out)) != COLL_SUCCESS)
        fuzz_fail("a parsed id does not print");
    if (strnlen(out, sizeof(out)) >= sizeof(out))
        fuzz_fail("printed id is not terminated");
    coll_unique_id_t again;
    memset(&again, 0, sizeof(again));
    if (coll_unique_id_from_string(&again, out) != COLL_SUCCESS)
        fuzz_fail("a printed id does not parse");
    if (memcmp(&again, &id, sizeof(id)) != 0)
        fuzz_fail("parse(print(id)) != id");
    /* too small buffers are refused, never overrun */
    char small[24];
    coll_result_t r2 = coll_unique_id_to_string(&id, small, sizeof(small));
    if (r2 == COLL_SUCCESS && strlen(out) >= sizeof(small))
        fuzz_fail("to_string claims success into a too small buffer");
    free(s);
    return 0;
}
