/* check.h — the assertion macros of the C unit tests: each failure prints its place and
 * both operands; a test file with a table of named tests ends with check_main(). */
#ifndef SL_CHECK_H
#define SL_CHECK_H

#include <stdio.h>
#include <string.h>

static int passed, failed;

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (cond)                                                                                  \
            passed++;                                                                              \
        else {                                                                                     \
            failed++;                                                                              \
            fprintf(stderr, "%s:%d: CHECK(%s) failed\n", __FILE__, __LINE__, #cond);               \
        }                                                                                          \
    } while (0)

#define CHECK_INT(a, b)                                                                            \
    do {                                                                                           \
        long long a_ = (long long)(a), b_ = (long long)(b);                                        \
        if (a_ == b_)                                                                              \
            passed++;                                                                              \
        else {                                                                                     \
            failed++;                                                                              \
            fprintf(stderr, "%s:%d: %s == %s failed: %lld != %lld\n", __FILE__, __LINE__, #a, #b,  \
                    a_, b_);                                                                       \
        }                                                                                          \
    } while (0)

#define CHECK_STR(a, b)                                                                            \
    do {                                                                                           \
        const char *a_ = (a), *b_ = (b);                                                           \
        if (a_ && b_ && strcmp(a_, b_) == 0)                                                       \
            passed++;                                                                              \
        else {                                                                                     \
            failed++;                                                                              \
            fprintf(stderr, "%s:%d: %s == %s failed:\n    \"%s\"\n != \"%s\"\n", __FILE__,         \
                    __LINE__, #a, #b, a_ ? a_ : "(null)", b_ ? b_ : "(null)");                     \
        }                                                                                          \
    } while (0)

/** A named test of a table given to check_main(). */
typedef struct {
    const char *name;
    void (*fn)(void);
} check_test_t;

/** Runs the tests (only those whose name contains argv[1], when given), says which failed
 *  and prints "N passed, M failed"; the exit code is 1 when a check failed. */
static inline int check_main(const check_test_t *tests, size_t n, int argc, char **argv) {
    const char *only = argc > 1 ? argv[1] : NULL;
    for (size_t i = 0; i < n; i++) {
        if (only && !strstr(tests[i].name, only)) continue;
        int f0 = failed;
        tests[i].fn();
        if (failed != f0) fprintf(stderr, "-- %s: %d failed\n", tests[i].name, failed - f0);
    }
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}

#endif
