/* Test seams (see testhook.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "base/testhook.h"
#include "base/util.h"

#ifdef COLL_TEST_HOOKS
static void read_str(const char *name, char *dst, size_t len)
{
    const char *v = secure_getenv(name);
    if (v == NULL)
        return;
    if (strlen(v) >= len) {
        coll_warn(CONFIG, "%s (tests only) is longer than %zu characters; ignored", name, len - 1);
        return;
    }
    snprintf(dst, len, "%s", v);
}

/* A count from 0 to 1000000 (0 when unset or malformed, with a WARN). */
static int read_count(const char *name)
{
    const char *v = secure_getenv(name);
    long n = 0;
    if (v != NULL && *v != '\0' && !colli_parse_long(v, 0, 1000000, &n)) {
        coll_warn(CONFIG, "%s=\"%s\" (tests only) is not a number from 0 to 1000000; ignored", name,
                  v);
        n = 0;
    }
    return (int)n;
}
#endif

void colli_testhook_load(colli_testhook_t *t)
{
    memset(t, 0, sizeof(*t));
#ifdef COLL_TEST_HOOKS
    read_str("COLL_TEST_HOST_ID_SUFFIX", t->host_id_suffix, sizeof(t->host_id_suffix));
    read_str("COLL_TEST_CUDA_VERSIONS", t->cuda_versions, sizeof(t->cuda_versions));
    read_str("COLL_TEST_IB_VERBS_LIB", t->ib_verbs_lib, sizeof(t->ib_verbs_lib));
    read_str("COLL_TEST_IB_QP_ERROR", t->ib_qp_error, sizeof(t->ib_qp_error));
    read_str("COLL_TEST_FAIL_READY", t->fail_ready, sizeof(t->fail_ready));
    read_str("COLL_TEST_BOOT_ID", t->boot_id, sizeof(t->boot_id));
    t->dev_fail_copy = read_count("COLL_TEST_DEV_FAIL_COPY");
    t->frame_replay = read_count("COLL_TEST_FRAME_REPLAY");
    t->dev_ipc_fallback = read_count("COLL_TEST_DEV_IPC_FALLBACK");
#endif
}

const char *colli_testhook_rank_entry(const char *list, int rank, size_t *len)
{
    if (list == NULL || list[0] == '\0')
        return NULL;
    const char *p = list;
    if (strchr(list, ',') != NULL)
        for (int r = 0; r < rank && p != NULL; r++) {
            p = strchr(p, ',');
            p = p ? p + 1 : NULL;
        }
    if (p != NULL)
        *len = strcspn(p, ",");
    return p;
}
