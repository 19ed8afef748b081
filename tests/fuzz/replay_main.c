/*
 * Replays a fuzz corpus through a target's LLVMFuzzerTestOneInput without libFuzzer, so that the
 * normal build (and its sanitizers) exercises every seed and every crash reproducer kept in
 * tests/fuzz/corpus/<target>/.
 *   fuzz_replay_<target> <file or directory>...
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fuzz.h"

static long passed, failed;

static void run_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        printf("FAIL: cannot open %s\n", path);
        failed++;
        return;
    }
    size_t cap = 1 << 16, n = 0;
    unsigned char *buf = malloc(cap);
    size_t got;
    while (buf && (got = fread(buf + n, 1, cap - n, f)) > 0) {
        n += got;
        if (n == cap) {
            cap *= 2;
            buf = realloc(buf, cap);
        }
    }
    fclose(f);
    if (buf == NULL) {
        failed++;
        return;
    }
    /* an exact-size copy, so that the sanitizers see reads past the input */
    unsigned char *in = malloc(n ? n : 1);
    memcpy(in, buf, n);
    free(buf);
    LLVMFuzzerTestOneInput(in, n);
    free(in);
    passed++;
}

static void run_path(const char *path)
{
    struct stat st;
    if (stat(path, &st) != 0) {
        printf("FAIL: %s does not exist\n", path);
        failed++;
        return;
    }
    if (!S_ISDIR(st.st_mode)) {
        run_file(path);
        return;
    }
    struct dirent **list = NULL;
    int k = scandir(path, &list, NULL, alphasort);
    for (int i = 0; i < k; i++) {
        if (list[i]->d_name[0] != '.') {
            char p[4096];
            snprintf(p, sizeof(p), "%s/%s", path, list[i]->d_name);
            run_file(p);
        }
        free(list[i]);
    }
    free(list);
}

int main(int argc, char **argv)
{
    LLVMFuzzerInitialize(&argc, &argv);
    for (int i = 1; i < argc; i++)
        run_path(argv[i]);
    if (passed == 0) {
        printf("FAIL: no corpus inputs found\n");
        failed++;
    }
    printf("%ld passed, %ld failed\n", passed, failed);
    return failed ? 1 : 0;
}
