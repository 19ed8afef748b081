/* The agent's C unit tests: EXPECT counts a failed expectation and goes on. */
#ifndef AGENT_TEST_EXPECT_H
#define AGENT_TEST_EXPECT_H

#include <stdio.h>

static int failures;

#define EXPECT(cond)                                                                               \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: expected %s\n", __FILE__, __LINE__, #cond);                    \
            failures++;                                                                            \
        }                                                                                          \
    } while (0)

#endif /* AGENT_TEST_EXPECT_H */
