/* Shared by the libFuzzer targets and by fuzz_replay (the corpus replayed without libFuzzer). */
#ifndef COLL_FUZZ_H
#define COLL_FUZZ_H

#include <stddef.h>
#include <stdint.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

/* An invariant of the code under test does not hold: report and crash, so that libFuzzer keeps
 * the input. */
void fuzz_fail(const char *what) __attribute__((noreturn));

#endif
