/*
 * Bootstrap root for the network-namespace test: creates a unique id on the interface spec given
 * (COLL_SOCKET_IFNAME syntax), prints "ID <printable id>" and stays alive (the root is a thread
 * of this process) for the given number of seconds or until killed.
 *   netns_root <ifname spec> <seconds>
 */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "coll.h"

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: netns_root <ifname spec> <seconds>\n");
        return 2;
    }
    coll_unique_id_t id;
    coll_result_t rc = coll_get_unique_id_ifname(&id, argv[1]);
    char s[COLL_UNIQUE_ID_STRLEN];
    if (rc == COLL_SUCCESS)
        rc = coll_unique_id_to_string(&id, s, sizeof(s));
    if (rc != COLL_SUCCESS) {
        printf("ERROR %s: %s\n", coll_get_error_string(rc), coll_get_last_error());
        return 1;
    }
    printf("ID %s\n", s);
    fflush(stdout);
    sleep((unsigned)atoi(argv[2]));
    return 0;
}
