/* Topology-aware ring order (colli_comm_ring_order): ranks are placed by (topology group, host,
 * rank), groups and hosts in the order of their lowest rank; a job already in that order keeps
 * the rank order (no arrays), and the two arrays are inverse permutations. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/comm.h"
#include "base/error.h"

static int failures;

#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                                   \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fprintf(stderr, "\n");                                                                 \
            failures++;                                                                            \
        }                                                                                          \
    } while (0)

/* hosts[r] and groups[r] name rank r's host and group; want is the expected ring (NULL: the
 * rank order, with no arrays). */
static void expect(const char *name, int n, const char *const *hosts, const char *const *groups,
                   const int *want)
{
    struct coll_comm comm;
    memset(&comm, 0, sizeof(comm));
    comm.nranks = n;
    comm.rank = n - 1;
    comm.members = calloc((size_t)n, sizeof(colli_member_t));
    if (comm.members == NULL) {
        failures++;
        return;
    }
    for (int r = 0; r < n; r++) {
        snprintf(comm.members[r].host_id, sizeof(comm.members[r].host_id), "%s", hosts[r]);
        snprintf(comm.members[r].group, sizeof(comm.members[r].group), "%s",
                 groups ? groups[r] : "");
    }
    coll_result_t st = colli_comm_ring_order(&comm);
    CHECK(st == COLL_SUCCESS, "%s: colli_comm_ring_order returned %d", name, (int)st);
    if (want == NULL) {
        CHECK(comm.ring_rank == NULL && comm.ring_posof == NULL,
              "%s: the rank order should be kept without arrays", name);
    } else if (comm.ring_rank == NULL || comm.ring_posof == NULL) {
        CHECK(0, "%s: expected a reordered ring, got the rank order", name);
    } else {
        for (int p = 0; p < n; p++) {
            CHECK(comm.ring_rank[p] == want[p], "%s: position %d holds rank %d, expected %d", name,
                  p, comm.ring_rank[p], want[p]);
            CHECK(comm.ring_posof[comm.ring_rank[p]] == p, "%s: ring_posof is not the inverse",
                  name);
            CHECK(colli_ring_rank(&comm, colli_ring_pos(&comm, p)) == p,
                  "%s: colli_ring_rank(colli_ring_pos(%d)) != %d", name, p, p);
        }
    }
    free(comm.ring_rank);
    free(comm.ring_posof);
    free(comm.members);
}

int main(void)
{
    /* one host, no groups: rank order */
    const char *one[] = {"h", "h", "h", "h"};
    expect("one host", 4, one, NULL, NULL);
    /* hosts already contiguous: rank order */
    const char *contig[] = {"b", "b", "a", "a"};
    expect("contiguous hosts", 4, contig, NULL, NULL);
    /* interleaved hosts: the ranks of a host become adjacent, hosts by lowest rank */
    const char *inter[] = {"a", "b", "a", "c", "b", "a", "c"};
    const int inter_want[] = {0, 2, 5, 1, 4, 3, 6};
    expect("interleaved hosts", 7, inter, NULL, inter_want);
    /* groups (racks) first, then hosts inside a group */
    const char *h8[] = {"n0", "n1", "n2", "n3", "n0", "n1", "n2", "n3"};
    const char *g8[] = {"r0", "r1", "r0", "r1", "r0", "r1", "r0", "r1"};
    const int g8_want[] = {0, 4, 2, 6, 1, 5, 3, 7};
    expect("racks then hosts", 8, h8, g8, g8_want);
    /* groups that agree with the rank order: kept */
    const char *h4[] = {"n0", "n1", "n2", "n3"};
    const char *g4[] = {"r0", "r0", "r1", "r1"};
    expect("ordered racks", 4, h4, g4, NULL);
    /* ranks without a group form their own group ("") */
    const char *g5[] = {"", "r1", "", "r1", ""};
    const char *h5[] = {"a", "b", "c", "d", "e"};
    const int g5_want[] = {0, 2, 4, 1, 3};
    expect("some ungrouped", 5, h5, g5, g5_want);
    if (failures) {
        fprintf(stderr, "%d check(s) failed\n", failures);
        return 1;
    }
    printf("ring order: all cases passed\n");
    return 0;
}
