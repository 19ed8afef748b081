/* One rank of a job started the way NCCL_COMM_ID allows: no id is handed around; every process
 * calls ncclGetUniqueId itself (the same bytes everywhere, from NCCL_COMM_ID and
 * COLL_JOB_SECRET), rank 0 hosts the bootstrap root at that address while it creates its member.
 *   nccl_commid RANK NRANKS
 * An all_reduce of RANK + 1 on host memory; prints "rank R: sum S" (0 exit) or "rank R: FAIL
 * <ncclGetLastError>" (exit 1). commid_test.sh runs it. */
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv)
{
    if (argc != 3)
        return 2;
    const int rank = atoi(argv[1]), n = atoi(argv[2]);
    ncclUniqueId id;
    ncclComm_t comm = NULL;
    float x = (float)(rank + 1), y = 0;
    ncclResult_t rc = ncclGetUniqueId(&id);
    if (rc == ncclSuccess)
        rc = ncclCommInitRank(&comm, n, id, rank);
    if (rc == ncclSuccess)
        rc = ncclAllReduce(&x, &y, 1, ncclFloat32, ncclSum, comm, NULL);
    if (comm != NULL && ncclCommDestroy(comm) != ncclSuccess && rc == ncclSuccess)
        rc = ncclInternalError;
    if (rc != ncclSuccess) {
        printf("rank %d: FAIL %s: %s\n", rank, ncclGetErrorString(rc), ncclGetLastError(NULL));
        return 1;
    }
    printf("rank %d: sum %g\n", rank, y);
    return y == (float)(n * (n + 1) / 2) ? 0 : 1;
}
