#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <stdio.h>
#include <stdlib.h>

#include "fuzz.h"

void fuzz_fail(const char *what)
{
    fprintf(stderr, "fuzz invariant violated: %s\n", what);
    abort();
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    /* every rejected input would log a WARN line: keep the fuzzer fast and quiet */
    setenv("COLL_DEBUG", "NONE", 1);
    return 0;
}
