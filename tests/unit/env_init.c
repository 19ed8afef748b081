/* coll_comm_init_env, then an all_reduce of the ranks: prints "rc=N sum=S" (env_init_test.sh). */
#include <stdio.h>

#include "coll.h"

int main(void)
{
    coll_comm_t comm = NULL;
    coll_result_t rc = coll_comm_init_env(&comm);
    int rank = -1;
    long long mine = 0, sum = -1;
    if (rc == COLL_SUCCESS)
        rc = coll_comm_user_rank(comm, &rank);
    mine = rank;
    if (rc == COLL_SUCCESS)
        rc = coll_all_reduce(&mine, &sum, 1, COLL_INT64, COLL_SUM, comm, NULL);
    if (rc != COLL_SUCCESS)
        fprintf(stderr, "error: %s\n", coll_get_last_error());
    if (comm != NULL)
        (void)(rc == COLL_SUCCESS ? coll_comm_destroy(comm) : coll_comm_abort(comm));
    printf("rc=%d sum=%lld\n", (int)rc, sum);
    return 0;
}
