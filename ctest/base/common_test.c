/* common_test.c — unit tests for core/base/common.c's clocks: the wake clock (sl_wake_ns)
 * reads once between clears on a thread that turned it on, and every time elsewhere.
 *
 *   common_test [name-substring]
 */
#include "base/common.h"

#include <pthread.h>
#include <time.h>

#include "check.h"

static void pause_us(long us) { nanosleep(&(struct timespec){0, us * 1000}, NULL); }

static void test_wake_off_reads_every_time(void) {
    sl_wake_enable(false);
    uint64_t a = sl_wake_ns();
    pause_us(200);
    uint64_t b = sl_wake_ns();
    CHECK(b >= a + 200000);
}

static void test_wake_on_reads_once_until_cleared(void) {
    sl_wake_enable(true);
    uint64_t before = sl_now_ns();
    uint64_t a = sl_wake_ns();
    CHECK(a >= before);
    pause_us(200);
    CHECK(sl_wake_ns() == a); /* the same wakeup: no read */
    CHECK(sl_now_ns() >= a + 200000);
    sl_wake_clear(); /* the loop slept and woke */
    uint64_t b = sl_wake_ns();
    CHECK(b >= a + 200000);
    CHECK(b <= sl_now_ns());
    sl_wake_enable(false);
    pause_us(200);
    CHECK(sl_wake_ns() >= b + 200000); /* off again: fresh */
}

static void *other_thread(void *arg) {
    uint64_t *out = arg;
    out[0] = sl_wake_ns();
    pause_us(200);
    out[1] = sl_wake_ns();
    return NULL;
}

static void test_wake_is_per_thread(void) {
    sl_wake_enable(true);
    (void)sl_wake_ns();
    uint64_t got[2];
    pthread_t t;
    pthread_create(&t, NULL, other_thread, got);
    pthread_join(t, NULL);
    CHECK(got[1] >= got[0] + 200000); /* a thread that never turned it on reads the clock */
    sl_wake_enable(false);
}

static const check_test_t tests[] = {
    {"wake_off_reads_every_time", test_wake_off_reads_every_time},
    {"wake_on_reads_once_until_cleared", test_wake_on_reads_once_until_cleared},
    {"wake_is_per_thread", test_wake_is_per_thread},
};

int main(int argc, char **argv) { return check_main(tests, SL_ARRAY_LEN(tests), argc, argv); }
