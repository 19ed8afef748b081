/* Pass/fail counting for single-file tests (the kernel tests, test_cuda_plan): check() counts
 * every assertion and prints the first MAX_FAIL_MSGS failures, each after check_tag. Header-only:
 * each test is one file. */
#ifndef KCOLL_TESTS_CHECK_H
#define KCOLL_TESTS_CHECK_H

#include <stdarg.h>
#include <stdio.h>

#ifndef MAX_FAIL_MSGS
#define MAX_FAIL_MSGS 40
#endif

static unsigned long long n_passed, n_failed;
static const char *check_tag = ""; /* printed after FAIL, e.g. "[avx2] " */

static void check(int ok, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void check(int ok, const char *fmt, ...)
{
    if (ok) {
        n_passed++;
        return;
    }
    if (n_failed++ < MAX_FAIL_MSGS) {
        va_list ap;
        va_start(ap, fmt);
        printf("FAIL %s", check_tag);
        vprintf(fmt, ap);
        printf("\n");
        va_end(ap);
    }
}

#endif
