/* The root's version check: what must match across ranks, and what only deserves a word.
 *
 * Must match rank 0 (the job's pin): the kcoll version and the wire protocol. Must hold on each
 * rank: its NVIDIA driver is of a CUDA major version at least that of the runtime kcoll was
 * built with (an older major cannot run it at all). Worth a notice only: ranks on other driver
 * versions (clusters run mixed drivers; kcoll does not care), a driver older than the runtime
 * within one major (CUDA's minor-version compatibility runs it), a kcoll of the same version
 * built with another CUDA toolkit (the wire format is the same). */
#include <stdio.h>
#include <string.h>

#include "bootstrap/bootstrap.h"

/* "kcoll 0.1.0 (wire protocol 3)", plus ", CUDA runtime 12.4, driver 12.6" for a CUDA build
 * (a protocol 1 record has no CUDA fields: shown without them) */
static void describe_build(const colli_wire_member_t *m, char *buf, size_t len)
{
    int n = snprintf(buf, len, "kcoll %s (wire protocol %u)", m->version, m->proto);
    if (m->proto >= 2 && (m->cuda_runtime || m->cuda_driver) && n > 0 && (size_t)n < len)
        snprintf(buf + n, len - (size_t)n, ", CUDA runtime %u.%u, driver %u.%u",
                 m->cuda_runtime / 1000, m->cuda_runtime % 1000 / 10, m->cuda_driver / 1000,
                 m->cuda_driver % 1000 / 10);
}

/* Append "; " (after the first) and a formatted entry, bounded by len. */
#define APPEND(buf, len, used, first, ...)                                                         \
    do {                                                                                           \
        if ((used) < (len)) {                                                                      \
            int n_ = snprintf((buf) + (used), (len) - (used), "%s", (first) ? "" : "; ");          \
            (used) += n_ > 0 ? (size_t)n_ : 0;                                                     \
        }                                                                                          \
        if ((used) < (len)) {                                                                      \
            int n_ = snprintf((buf) + (used), (len) - (used), __VA_ARGS__);                        \
            (used) += n_ > 0 ? (size_t)n_ : 0;                                                     \
        }                                                                                          \
    } while (0)

static coll_result_t build_mismatch(const colli_wire_member_t *const *recs, int n, char *msg,
                                    size_t len)
{
    const colli_wire_member_t *ref = recs[0];
    char build[160];
    size_t used = (size_t)snprintf(msg, len, "version mismatch: ");
    int bad = 0;
    for (int i = 1; i < n; i++) {
        const colli_wire_member_t *m = recs[i];
        if (strcmp(m->version, ref->version) == 0 && m->proto == ref->proto)
            continue;
        if (bad++ < 8) {
            describe_build(m, build, sizeof(build));
            APPEND(msg, len, used, bad == 1, "rank %d (pid %d on %s) has %s", i, m->pid,
                   m->hostname, build);
        }
    }
    if (bad == 0)
        return COLL_SUCCESS;
    describe_build(ref, build, sizeof(build));
    if (used < len)
        snprintf(msg + used, len - used,
                 "%s, but rank 0 (pid %d on %s) has %s, which the job pins. Run one library build "
                 "on every node.",
                 bad > 8 ? " and more" : "", ref->pid, ref->hostname, build);
    return COLL_ERR_VERSION;
}

static coll_result_t driver_too_old(const colli_wire_member_t *const *recs, int n, char *msg,
                                    size_t len)
{
    size_t used = (size_t)snprintf(msg, len, "CUDA driver too old: ");
    int bad = 0;
    for (int i = 0; i < n; i++) {
        const colli_wire_member_t *m = recs[i];
        if (m->proto < 2 || m->cuda_runtime == 0 || m->cuda_driver == 0 ||
            m->cuda_driver / 1000 >= m->cuda_runtime / 1000)
            continue;
        if (bad++ < 8)
            APPEND(msg, len, used, bad == 1,
                   "rank %d (pid %d on %s) has driver %u.%u for CUDA runtime %u.%u", i, m->pid,
                   m->hostname, m->cuda_driver / 1000, m->cuda_driver % 1000 / 10,
                   m->cuda_runtime / 1000, m->cuda_runtime % 1000 / 10);
    }
    if (bad == 0)
        return COLL_SUCCESS;
    if (used < len)
        snprintf(msg + used, len - used,
                 "%s. A driver of an older CUDA major version cannot run this build: update the "
                 "NVIDIA driver on %s, or run a kcoll built for that CUDA version.",
                 bad > 8 ? " and more" : "", bad > 1 ? "those nodes" : "that node");
    return COLL_ERR_VERSION;
}

/* Differences that do not stop the job, in one line (empty when there are none). */
static void notices(const colli_wire_member_t *const *recs, int n, char *out, size_t len)
{
    const colli_wire_member_t *ref = recs[0];
    size_t used = 0;
    int drv = 0, rt = 0, compat = 0;
    out[0] = '\0';
    for (int i = 1; i < n; i++) {
        const colli_wire_member_t *m = recs[i];
        if (m->proto < 2)
            continue;
        if (m->cuda_driver != ref->cuda_driver && drv++ < 4)
            APPEND(out, len, used, used == 0, "rank %d (%s) runs CUDA driver %u.%u", i, m->hostname,
                   m->cuda_driver / 1000, m->cuda_driver % 1000 / 10);
        if (m->cuda_runtime != ref->cuda_runtime && rt++ < 4)
            APPEND(out, len, used, used == 0, "rank %d (%s) has kcoll built for CUDA %u.%u", i,
                   m->hostname, m->cuda_runtime / 1000, m->cuda_runtime % 1000 / 10);
    }
    for (int i = 0; i < n; i++) {
        const colli_wire_member_t *m = recs[i];
        if (m->proto >= 2 && m->cuda_runtime && m->cuda_driver &&
            m->cuda_driver < m->cuda_runtime && compat++ < 4)
            APPEND(out, len, used, used == 0,
                   "rank %d (%s) runs CUDA runtime %u.%u on the older driver %u.%u through "
                   "CUDA's minor-version compatibility",
                   i, m->hostname, m->cuda_runtime / 1000, m->cuda_runtime % 1000 / 10,
                   m->cuda_driver / 1000, m->cuda_driver % 1000 / 10);
    }
    if (used == 0)
        return;
    if (drv + rt > 0 && used < len)
        snprintf(out + used, len - used, " (rank 0 (%s): driver %u.%u, CUDA %u.%u)", ref->hostname,
                 ref->cuda_driver / 1000, ref->cuda_driver % 1000 / 10, ref->cuda_runtime / 1000,
                 ref->cuda_runtime % 1000 / 10);
}

coll_result_t colli_versions_check(const colli_wire_member_t *const *recs, int n, char *msg,
                                   size_t len, char *notice, size_t nlen)
{
    notice[0] = '\0';
    coll_result_t st = build_mismatch(recs, n, msg, len);
    if (st == COLL_SUCCESS)
        st = driver_too_old(recs, n, msg, len);
    if (st == COLL_SUCCESS)
        notices(recs, n, notice, nlen);
    return st;
}
