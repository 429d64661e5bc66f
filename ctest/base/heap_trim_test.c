/* heap_trim_test.c — unit tests for core/base/common.c's sl_heap_trim: threads that trim
 * the heap at once, as the reapers of quickly retired generations and the workers' spike
 * timers do, never crash the process. Under AddressSanitizer a glibc malloc_trim there
 * set up glibc's untouched arena racily and read a null bin (a SEGV in mtrim, about one
 * process in four); each case runs in a child of its own, since that setup happens once.
 *
 *   heap_trim_test [name-substring]
 */
#include "base/common.h"

#include <pthread.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"

#define THREADS 8
#define CHILDREN 40

static pthread_barrier_t start;

static void *trim(void *arg) {
    (void)arg;
    pthread_barrier_wait(&start);
    sl_heap_trim();
    return NULL;
}

/* A fresh process whose first trims come from THREADS threads at once: its exit status. */
static int concurrent_first_trims(void) {
    pid_t pid = fork();
    if (pid == 0) {
        pthread_t t[THREADS];
        pthread_barrier_init(&start, NULL, THREADS);
        for (int i = 0; i < THREADS; i++) pthread_create(&t[i], NULL, trim, NULL);
        for (int i = 0; i < THREADS; i++) pthread_join(t[i], NULL);
        _exit(0);
    }
    int st = 0;
    if (pid < 0 || waitpid(pid, &st, 0) != pid) return -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static void test_concurrent_first_trims(void) {
    int bad = 0;
    for (int i = 0; i < CHILDREN; i++) bad += concurrent_first_trims() != 0;
    CHECK_INT(bad, 0);
}

static void test_trim_after_frees(void) {
    void *p[256];
    for (int i = 0; i < 256; i++) p[i] = malloc(64 << 10);
    for (int i = 0; i < 256; i++) free(p[i]);
    sl_heap_trim();
    CHECK(1); /* returns, and the heap serves on */
    void *q = malloc(1 << 20);
    CHECK(q != NULL);
    free(q);
}

static const check_test_t tests[] = {
    {"concurrent_first_trims", test_concurrent_first_trims},
    {"trim_after_frees", test_trim_after_frees},
};

int main(int argc, char **argv) { return check_main(tests, SL_ARRAY_LEN(tests), argc, argv); }
