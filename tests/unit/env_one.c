/* One rank, one communicator, through the public API only: for tests that look at what the
 * library says about its environment (env_habits_test.sh). Prints "rc=N" (a coll_result_t). */
#include <stdio.h>

#include "coll.h"

int main(void)
{
    coll_unique_id_t id;
    coll_comm_t comm = NULL;
    coll_result_t rc = coll_get_unique_id(&id);
    if (rc == COLL_SUCCESS)
        rc = coll_comm_init_rank(&comm, 1, id, 0);
    if (rc == COLL_SUCCESS)
        rc = coll_comm_destroy(comm);
    printf("rc=%d\n", (int)rc);
    return 0;
}
