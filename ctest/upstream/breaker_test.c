/* breaker_test.c — unit tests for core/breaker.c: every transition on an injected clock,
 * the window sliding, late outcomes, one test per exit path of a probe (each named for the
 * call the proxy maps it to), the half-open stampede (64 threads, 1,000 trials) and a
 * mixed admit/record/cancel run checking the slot bound. Built plain, with ASan+UBSan
 * (SLUICE_SANITIZE) and with TSan (SLUICE_TSAN: ctest/CMakeLists.txt).
 *
 *   breaker_test [name-substring]
 */
#include "upstream/breaker.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "base/common.h"
#include "stampede.h"

/* Far from 0 and on a bucket boundary of every window below. */
#define T0 UINT64_C(1000000)

/* Small numbers so every transition is a few calls away. */
static sl_breaker_conf_t conf(void) {
    return (sl_breaker_conf_t){.enabled = true,
                               .failure_ratio = 0.5,
                               .min_requests = 4,
                               .window_ms = 10000,
                               .open_timeout_ms = 1000,
                               .max_open_timeout_ms = 5000,
                               .half_open_requests = 1,
                               .success_threshold = 2};
}

static uint32_t probes(sl_breaker_t *b) { return atomic_load(&b->probes); }

/* n attempts admitted and recorded at `now`; all must be admitted. */
static void outcomes(sl_breaker_t *b, const sl_breaker_conf_t *c, uint64_t now, int n, bool ok) {
    for (int i = 0; i < n; i++) {
        sl_admit_t a = sl_breaker_admit(b, c, now, NULL);
        CHECK(a != SL_ADMIT_REFUSED);
        sl_breaker_record(b, c, a, ok, now);
    }
}

/* A fresh breaker tripped at `now` by min_requests failures: open until now + open_timeout. */
static void tripped(sl_breaker_t *b, const sl_breaker_conf_t *c, uint64_t now) {
    sl_breaker_init(b);
    outcomes(b, c, now, (int)c->min_requests, false);
    CHECK_INT(sl_breaker_state(b, c, now), SL_BREAKER_OPEN);
}

/* Refused at `now`, with this Retry-After. */
static void refuses(sl_breaker_t *b, const sl_breaker_conf_t *c, uint64_t now, uint64_t retry) {
    uint64_t ra = 0;
    CHECK_INT(sl_breaker_admit(b, c, now, &ra), SL_ADMIT_REFUSED);
    CHECK_INT(ra, retry);
}

static void test_closed_trips_on_ratio(void) {
    sl_breaker_conf_t c = conf();
    sl_breaker_t b;
    sl_breaker_init(&b);
    CHECK_INT(sl_breaker_state(&b, &c, T0), SL_BREAKER_CLOSED);
    /* 10 ok then failures: 9/19 stays closed, 10/20 reaches the ratio and opens */
    outcomes(&b, &c, T0, 10, true);
    outcomes(&b, &c, T0, 9, false);
    CHECK_INT(sl_breaker_state(&b, &c, T0), SL_BREAKER_CLOSED);
    outcomes(&b, &c, T0, 1, false);
    CHECK_INT(sl_breaker_state(&b, &c, T0), SL_BREAKER_OPEN);

    /* min_requests: 3 failures out of 3 are a ratio of 1, but too few */
    sl_breaker_init(&b);
    outcomes(&b, &c, T0, 3, false);
    CHECK_INT(sl_breaker_state(&b, &c, T0), SL_BREAKER_CLOSED);
    outcomes(&b, &c, T0, 1, false);
    CHECK_INT(sl_breaker_state(&b, &c, T0), SL_BREAKER_OPEN);

    /* only a failure decides: a success completing min_requests defers to the next failure */
    sl_breaker_init(&b);
    outcomes(&b, &c, T0, 3, false);
    outcomes(&b, &c, T0, 1, true);
    CHECK_INT(sl_breaker_state(&b, &c, T0), SL_BREAKER_CLOSED);
    outcomes(&b, &c, T0, 1, false);
    CHECK_INT(sl_breaker_state(&b, &c, T0), SL_BREAKER_OPEN);
}

static void test_open_refuses_with_retry_after(void) {
    sl_breaker_conf_t c = conf();
    sl_breaker_t b;
    tripped(&b, &c, T0);
    refuses(&b, &c, T0, 1000);
    refuses(&b, &c, T0 + 1, 999);
    refuses(&b, &c, T0 + 999, 1);
    CHECK_INT(sl_breaker_admit(&b, &c, T0 + 500, NULL), SL_ADMIT_REFUSED);
    /* refusals changed nothing: still open, same deadline */
    CHECK_INT(sl_breaker_state(&b, &c, T0 + 999), SL_BREAKER_OPEN);
    refuses(&b, &c, T0 + 10, 990);
    CHECK_INT(probes(&b), 0);
}

static void test_open_to_half_open_after_timeout(void) {
    sl_breaker_conf_t c = conf();
    sl_breaker_t b;
    tripped(&b, &c, T0);
    /* the gauge reads half-open once the time is over, before anyone asked to pass */
    CHECK_INT(sl_breaker_state(&b, &c, T0 + 999), SL_BREAKER_OPEN);
    CHECK_INT(sl_breaker_state(&b, &c, T0 + 1000), SL_BREAKER_HALF_OPEN);
    CHECK_INT(sl_breaker_admit(&b, &c, T0 + 1000, NULL), SL_ADMIT_PROBE);
    CHECK_INT(probes(&b), 1);
    /* half_open_requests 1: the next one waits, Retry-After 1 ms (the least) */
    refuses(&b, &c, T0 + 1000, 1);
    CHECK_INT(sl_breaker_state(&b, &c, T0 + 1000), SL_BREAKER_HALF_OPEN);
    sl_breaker_cancel(&b, SL_ADMIT_PROBE);
    CHECK_INT(probes(&b), 0);
}

/* The probe admitted at `now` fails: re-opened, and the Retry-After is the expected time. */
static void probe_fails(sl_breaker_t *b, const sl_breaker_conf_t *c, uint64_t now, uint64_t open) {
    sl_admit_t a = sl_breaker_admit(b, c, now, NULL);
    CHECK_INT(a, SL_ADMIT_PROBE);
    sl_breaker_record(b, c, a, false, now);
    CHECK_INT(sl_breaker_state(b, c, now), SL_BREAKER_OPEN);
    refuses(b, c, now, open);
    CHECK_INT(sl_breaker_state(b, c, now + open), SL_BREAKER_HALF_OPEN);
}

static void test_retrip_doubles_up_to_cap(void) {
    sl_breaker_conf_t c = conf();
    sl_breaker_t b;
    tripped(&b, &c, T0);
    uint64_t now = T0 + 1000;
    static const uint64_t expect[] = {2000, 4000, 5000, 5000, 5000};
    for (size_t i = 0; i < SL_ARRAY_LEN(expect); i++) {
        probe_fails(&b, &c, now, expect[i]);
        now += expect[i];
    }
    /* the trip count saturates: the cap holds after any number of re-trips */
    for (int i = 0; i < 100; i++) {
        sl_admit_t a = sl_breaker_admit(&b, &c, now, NULL);
        CHECK_INT(a, SL_ADMIT_PROBE);
        sl_breaker_record(&b, &c, a, false, now);
        now += 5000;
    }
    refuses(&b, &c, now - 5000, 5000);
    CHECK_INT(probes(&b), 0);
}

static void test_half_open_closes_and_resets(void) {
    sl_breaker_conf_t c = conf();
    c.half_open_requests = 2;
    sl_breaker_t b;
    tripped(&b, &c, T0);
    probe_fails(&b, &c, T0 + 1000, 2000); /* two trips: open time doubled */
    uint64_t now = T0 + 3000;
    sl_admit_t p1 = sl_breaker_admit(&b, &c, now, NULL);
    sl_admit_t p2 = sl_breaker_admit(&b, &c, now, NULL);
    CHECK_INT(p1, SL_ADMIT_PROBE);
    CHECK_INT(p2, SL_ADMIT_PROBE);
    refuses(&b, &c, now, 1);
    sl_breaker_record(&b, &c, p1, true, now);
    CHECK_INT(sl_breaker_state(&b, &c, now), SL_BREAKER_HALF_OPEN);
    sl_breaker_record(&b, &c, p2, true, now);
    CHECK_INT(sl_breaker_state(&b, &c, now), SL_BREAKER_CLOSED);
    CHECK_INT(probes(&b), 0);
    CHECK_INT(sl_breaker_admit(&b, &c, now, NULL), SL_ADMIT_CLOSED);
    /* the window was reset: the 4 failures of the trip, still inside it, are gone */
    outcomes(&b, &c, now, 3, false);
    CHECK_INT(sl_breaker_state(&b, &c, now), SL_BREAKER_CLOSED);
    /* and the doubling: the next trip opens for the base time again */
    outcomes(&b, &c, now, 1, false);
    refuses(&b, &c, now, 1000);
}

static void test_half_open_failure_reopens(void) {
    sl_breaker_conf_t c = conf();
    c.half_open_requests = 2;
    sl_breaker_t b;
    tripped(&b, &c, T0);
    uint64_t now = T0 + 1000;
    sl_admit_t p1 = sl_breaker_admit(&b, &c, now, NULL);
    sl_admit_t p2 = sl_breaker_admit(&b, &c, now, NULL);
    sl_breaker_record(&b, &c, p1, true, now);
    sl_breaker_record(&b, &c, p2, false, now + 5);
    refuses(&b, &c, now + 5, 2000);
    /* the success of the failed period does not carry over: two more are needed */
    now += 5 + 2000;
    outcomes(&b, &c, now, 1, true);
    CHECK_INT(sl_breaker_state(&b, &c, now), SL_BREAKER_HALF_OPEN);
    outcomes(&b, &c, now, 1, true);
    CHECK_INT(sl_breaker_state(&b, &c, now), SL_BREAKER_CLOSED);
}

static void test_window_slides(void) {
    sl_breaker_conf_t c = conf(); /* window 10 s: buckets of 1 s */
    sl_breaker_t b;
    /* 3 failures in the first bucket still count 9.999 s later ... */
    sl_breaker_init(&b);
    outcomes(&b, &c, T0, 3, false);
    outcomes(&b, &c, T0 + 9999, 1, false);
    CHECK_INT(sl_breaker_state(&b, &c, T0 + 9999), SL_BREAKER_OPEN);
    /* ... and have aged out at 10 s */
    sl_breaker_init(&b);
    outcomes(&b, &c, T0, 3, false);
    outcomes(&b, &c, T0 + 10000, 1, false);
    CHECK_INT(sl_breaker_state(&b, &c, T0 + 10000), SL_BREAKER_CLOSED);
    /* a bucket reused a window later starts from zero: 3 more make 4 in the window */
    outcomes(&b, &c, T0 + 10000, 2, false);
    CHECK_INT(sl_breaker_state(&b, &c, T0 + 10000), SL_BREAKER_CLOSED);
    outcomes(&b, &c, T0 + 10500, 1, false);
    CHECK_INT(sl_breaker_state(&b, &c, T0 + 10500), SL_BREAKER_OPEN);
    /* old successes age out too, leaving the failures' ratio */
    sl_breaker_init(&b);
    outcomes(&b, &c, T0, 20, true);
    outcomes(&b, &c, T0 + 5000, 4, false);
    CHECK_INT(sl_breaker_state(&b, &c, T0 + 5000), SL_BREAKER_CLOSED);
    outcomes(&b, &c, T0 + 10000, 1, false);
    CHECK_INT(sl_breaker_state(&b, &c, T0 + 10000), SL_BREAKER_OPEN);
    /* an outcome a whole window older than its bucket is dropped, not counted as new */
    sl_breaker_init(&b);
    outcomes(&b, &c, T0 + 10000, 1, true);
    outcomes(&b, &c, T0, 4, false);
    CHECK_INT(sl_breaker_state(&b, &c, T0 + 10000), SL_BREAKER_CLOSED);
}

static void test_disabled_admits_always(void) {
    sl_breaker_conf_t c = conf();
    sl_breaker_t b;
    tripped(&b, &c, T0);
    sl_admit_t p = sl_breaker_admit(&b, &c, T0 + 1000, NULL);
    CHECK_INT(p, SL_ADMIT_PROBE);
    c.enabled = false; /* a reload turned it off, the breaker survived */
    CHECK_INT(sl_breaker_state(&b, &c, T0), SL_BREAKER_CLOSED);
    for (int i = 0; i < 100; i++) {
        sl_admit_t a = sl_breaker_admit(&b, &c, T0 + 1000, NULL);
        CHECK_INT(a, SL_ADMIT_CLOSED);
        sl_breaker_record(&b, &c, a, false, T0 + 1000);
    }
    /* the probe taken before still gets its slot back */
    sl_breaker_record(&b, &c, p, false, T0 + 1000);
    CHECK_INT(probes(&b), 0);
    /* nothing was recorded while off: enabled again, still half-open with its free slot */
    c.enabled = true;
    CHECK_INT(sl_breaker_state(&b, &c, T0 + 1000), SL_BREAKER_HALF_OPEN);
    CHECK_INT(sl_breaker_admit(&b, &c, T0 + 1000, NULL), SL_ADMIT_PROBE);
}

/* Outcomes of attempts admitted before the state they are recorded in (breaker.h). */
static void test_late_outcomes(void) {
    sl_breaker_conf_t c = conf();
    sl_breaker_t b;
    sl_breaker_init(&b);
    sl_admit_t old[4];
    for (int i = 0; i < 4; i++) old[i] = sl_breaker_admit(&b, &c, T0, NULL);
    outcomes(&b, &c, T0, 4, false);
    /* open: a late failure neither extends nor doubles the open time */
    sl_breaker_record(&b, &c, old[0], false, T0 + 500);
    refuses(&b, &c, T0 + 500, 500);
    /* half-open: a late success does not count towards closing ... */
    uint64_t now = T0 + 1000;
    sl_admit_t p = sl_breaker_admit(&b, &c, now, NULL);
    CHECK_INT(p, SL_ADMIT_PROBE);
    sl_breaker_record(&b, &c, old[1], true, now);
    sl_breaker_record(&b, &c, old[2], true, now);
    sl_breaker_record(&b, &c, p, true, now);
    CHECK_INT(sl_breaker_state(&b, &c, now), SL_BREAKER_HALF_OPEN);
    CHECK_INT(probes(&b), 0);
    /* ... and a late failure re-opens, doubled, like a probe's */
    sl_breaker_record(&b, &c, old[3], false, now);
    refuses(&b, &c, now, 2000);
    CHECK_INT(probes(&b), 0);

    /* a probe ending after another probe re-opened the breaker: no second re-trip */
    c.half_open_requests = 2;
    now += 2000;
    sl_admit_t p1 = sl_breaker_admit(&b, &c, now, NULL);
    sl_admit_t p2 = sl_breaker_admit(&b, &c, now, NULL);
    sl_breaker_record(&b, &c, p1, false, now);
    sl_breaker_record(&b, &c, p2, false, now);
    refuses(&b, &c, now, 4000);
    CHECK_INT(probes(&b), 0);

    /* a probe still running into the next half-open period keeps its slot there */
    c.half_open_requests = 1;
    now += 4000;
    sl_admit_t q1 = sl_breaker_admit(&b, &c, now, NULL);
    sl_admit_t q2 = sl_breaker_admit(&b, &c, now, NULL);
    CHECK_INT(q1, SL_ADMIT_PROBE);
    CHECK_INT(q2, SL_ADMIT_REFUSED);
    c.half_open_requests = 2;
    q2 = sl_breaker_admit(&b, &c, now, NULL);
    CHECK_INT(q2, SL_ADMIT_PROBE);
    sl_breaker_record(&b, &c, q2, false, now); /* re-opens: 5000 (the cap) */
    c.half_open_requests = 1;
    now += 5000;
    refuses(&b, &c, now, 1);
    sl_breaker_record(&b, &c, q1, true, now); /* its success counts in this period */
    CHECK_INT(sl_breaker_state(&b, &c, now), SL_BREAKER_HALF_OPEN);
    outcomes(&b, &c, now, 1, true);
    CHECK_INT(sl_breaker_state(&b, &c, now), SL_BREAKER_CLOSED);

    /* a probe ending after the breaker closed counts in the window like any outcome */
    c.half_open_requests = 2;
    tripped(&b, &c, T0);
    now = T0 + 1000;
    p1 = sl_breaker_admit(&b, &c, now, NULL);
    p2 = sl_breaker_admit(&b, &c, now, NULL);
    sl_breaker_cancel(&b, p2);
    outcomes(&b, &c, now, 2, true);
    CHECK_INT(sl_breaker_state(&b, &c, now), SL_BREAKER_CLOSED);
    outcomes(&b, &c, now, 3, false);
    sl_breaker_record(&b, &c, p1, false, now);
    CHECK_INT(sl_breaker_state(&b, &c, now), SL_BREAKER_OPEN);
    CHECK_INT(probes(&b), 0);
}

/* How the proxy ends a probe: record(success), record(failure) or cancel. */
typedef enum { END_RECORD_OK, END_RECORD_FAIL, END_CANCEL } end_t;

/* A probe ends by `end`; its slot (the only one) comes back, and the next admission gets it. */
static void exit_path(end_t end) {
    sl_breaker_conf_t c = conf();
    sl_breaker_t b;
    tripped(&b, &c, T0);
    uint64_t now = T0 + 1000;
    outcomes(&b, &c, now, 1, true); /* one success of two: a cancel must change nothing */
    sl_admit_t a = sl_breaker_admit(&b, &c, now, NULL);
    CHECK_INT(a, SL_ADMIT_PROBE);
    refuses(&b, &c, now, 1);
    switch (end) {
    case END_RECORD_OK:
        sl_breaker_record(&b, &c, a, true, now);
        CHECK_INT(sl_breaker_state(&b, &c, now), SL_BREAKER_CLOSED);
        break;
    case END_RECORD_FAIL:
        sl_breaker_record(&b, &c, a, false, now);
        refuses(&b, &c, now, 2000);
        now += 2000;
        break;
    case END_CANCEL:
        sl_breaker_cancel(&b, a);
        /* neither a failure (it would re-open) nor a success (it would close) */
        CHECK_INT(sl_breaker_state(&b, &c, now), SL_BREAKER_HALF_OPEN);
        break;
    }
    CHECK_INT(probes(&b), 0);
    sl_admit_t next = sl_breaker_admit(&b, &c, now, NULL);
    CHECK_INT(next, end == END_RECORD_OK ? SL_ADMIT_CLOSED : SL_ADMIT_PROBE);
    sl_breaker_cancel(&b, next);
    CHECK_INT(probes(&b), 0);
}

static void test_exit_upstream_answered_is_record_ok(void) { exit_path(END_RECORD_OK); }
static void test_exit_upstream_error_is_record_fail(void) { exit_path(END_RECORD_FAIL); }
static void test_exit_timeout_is_record_fail(void) { exit_path(END_RECORD_FAIL); }
static void test_exit_client_abort_is_cancel(void) { exit_path(END_CANCEL); }
static void test_exit_plugin_error_is_cancel(void) { exit_path(END_CANCEL); }
static void test_exit_retry_cancelled_is_cancel(void) { exit_path(END_CANCEL); }
static void test_exit_hedge_cancelled_is_cancel(void) { exit_path(END_CANCEL); }

/* The stampede: STAMPEDE_THREADS threads released by one barrier against a breaker whose
 * open time just ended, so they race the lazy half-open CAS and the slot CAS at once. */
#define STAMPEDE_THREADS 64
#define STAMPEDE_TRIALS 1000

static struct {
    sl_breaker_t b;
    sl_breaker_conf_t c;
    uint64_t now;
    sl_admit_t got[STAMPEDE_THREADS];
} st;

static void stampede_call(size_t i) { st.got[i] = sl_breaker_admit(&st.b, &st.c, st.now, NULL); }

static void test_stampede(void) {
    st.c = conf();
    stampede_t s;
    stampede_start(&s, STAMPEDE_THREADS, stampede_call);
    /* the default half_open_requests (2) for the 1,000 trials, then other bounds */
    static const struct {
        uint32_t half_open;
        int trials;
    } runs[] = {{2, STAMPEDE_TRIALS}, {1, 100}, {7, 100}, {63, 50}, {64, 50}};
    for (size_t r = 0; r < SL_ARRAY_LEN(runs); r++) {
        st.c.half_open_requests = runs[r].half_open;
        int hist[STAMPEDE_THREADS + 1] = {0}, violations = 0;
        for (int t = 0; t < runs[r].trials; t++) {
            tripped(&st.b, &st.c, T0);
            st.now = T0 + st.c.open_timeout_ms + (uint64_t)(t % 3); /* just over, or on the dot */
            stampede_trial(&s);
            int probe = 0, closed = 0;
            for (size_t i = 0; i < STAMPEDE_THREADS; i++) {
                probe += st.got[i] == SL_ADMIT_PROBE;
                closed += st.got[i] == SL_ADMIT_CLOSED;
            }
            hist[probe]++;
            if (probe != (int)runs[r].half_open || closed != 0 ||
                probes(&st.b) != runs[r].half_open)
                violations++;
            for (size_t i = 0; i < STAMPEDE_THREADS; i++) sl_breaker_cancel(&st.b, st.got[i]);
            CHECK_INT(probes(&st.b), 0);
        }
        CHECK_INT(violations, 0);
        printf("stampede: %d threads, half_open_requests %u, %d trials; admitted:",
               STAMPEDE_THREADS, runs[r].half_open, runs[r].trials);
        stampede_print_hist(hist, STAMPEDE_THREADS);
    }
    stampede_stop(&s);
}

/* Mixed: threads admit on a shared clock that runs fast enough to cycle the breaker through
 * every state, each holding up to MIX_HELD attempts that end (ok, failure, cancel) in
 * random order. The slot bound is checked after every probe admission; at the end every
 * slot is back. */
#define MIX_THREADS 8
#define MIX_ITERS 40000
#define MIX_HELD 3

static struct {
    sl_breaker_t b;
    sl_breaker_conf_t c;
    _Atomic uint64_t clock;
    _Atomic uint32_t max_probes;
    _Atomic uint64_t admitted[3], opened_seen;
} mx;

static uint64_t xorshift(uint64_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static void mix_end(sl_admit_t a, uint64_t r) {
    uint64_t now = atomic_load(&mx.clock);
    if (r % 20 < 9)
        sl_breaker_record(&mx.b, &mx.c, a, true, now);
    else if (r % 20 < 16)
        sl_breaker_record(&mx.b, &mx.c, a, false, now);
    else
        sl_breaker_cancel(&mx.b, a);
}

static void *mix_thread(void *arg) {
    uint64_t s = 0x9E3779B97F4A7C15ull * ((uintptr_t)arg + 1);
    sl_admit_t held[MIX_HELD];
    int nheld = 0;
    for (int i = 0; i < MIX_ITERS; i++) {
        uint64_t r = xorshift(&s);
        uint64_t now = atomic_fetch_add(&mx.clock, r % 3 == 0);
        if (nheld == MIX_HELD || (nheld > 0 && r % 7 < 3)) {
            int k = (int)((r >> 32) % (uint64_t)nheld);
            mix_end(held[k], r >> 8);
            held[k] = held[--nheld];
            continue;
        }
        sl_admit_t a = sl_breaker_admit(&mx.b, &mx.c, now, NULL);
        atomic_fetch_add(&mx.admitted[a], 1);
        if (a == SL_ADMIT_REFUSED) {
            atomic_fetch_add(&mx.opened_seen, 1);
            continue;
        }
        if (a == SL_ADMIT_PROBE) {
            uint32_t p = probes(&mx.b), m = atomic_load(&mx.max_probes);
            while (p > m && !atomic_compare_exchange_weak(&mx.max_probes, &m, p)) {
            }
        }
        held[nheld++] = a;
    }
    while (nheld > 0) mix_end(held[--nheld], xorshift(&s));
    return NULL;
}

static void test_mixed_concurrency(void) {
    mx.c = conf();
    mx.c.half_open_requests = 3;
    mx.c.failure_ratio = 0.4; /* about the failure share mix_end draws: it trips and recovers */
    mx.c.min_requests = 10;
    mx.c.window_ms = 200;
    mx.c.open_timeout_ms = 5;
    mx.c.max_open_timeout_ms = 40;
    sl_breaker_init(&mx.b);
    atomic_init(&mx.clock, T0);
    pthread_t th[MIX_THREADS];
    for (size_t i = 0; i < MIX_THREADS; i++)
        CHECK_INT(pthread_create(&th[i], NULL, mix_thread, (void *)i), 0);
    for (size_t i = 0; i < MIX_THREADS; i++) pthread_join(th[i], NULL);
    CHECK(atomic_load(&mx.max_probes) <= mx.c.half_open_requests);
    CHECK_INT(probes(&mx.b), 0);
    /* the run went through every state: ordinary and probe admissions, refusals */
    CHECK(atomic_load(&mx.admitted[SL_ADMIT_CLOSED]) > 0);
    CHECK(atomic_load(&mx.admitted[SL_ADMIT_PROBE]) > 0);
    CHECK(atomic_load(&mx.admitted[SL_ADMIT_REFUSED]) > 0);
    printf("mixed: %d threads x %d ops: %llu closed, %llu probe, %llu refused admissions; "
           "most probes at once %u (bound %u)\n",
           MIX_THREADS, MIX_ITERS, (unsigned long long)atomic_load(&mx.admitted[SL_ADMIT_CLOSED]),
           (unsigned long long)atomic_load(&mx.admitted[SL_ADMIT_PROBE]),
           (unsigned long long)atomic_load(&mx.admitted[SL_ADMIT_REFUSED]),
           atomic_load(&mx.max_probes), mx.c.half_open_requests);
}

static const check_test_t tests[] = {
#define T(f) {#f, f}
    T(test_closed_trips_on_ratio),
    T(test_open_refuses_with_retry_after),
    T(test_open_to_half_open_after_timeout),
    T(test_retrip_doubles_up_to_cap),
    T(test_half_open_closes_and_resets),
    T(test_half_open_failure_reopens),
    T(test_window_slides),
    T(test_disabled_admits_always),
    T(test_late_outcomes),
    T(test_exit_upstream_answered_is_record_ok),
    T(test_exit_upstream_error_is_record_fail),
    T(test_exit_timeout_is_record_fail),
    T(test_exit_client_abort_is_cancel),
    T(test_exit_plugin_error_is_cancel),
    T(test_exit_retry_cancelled_is_cancel),
    T(test_exit_hedge_cancelled_is_cancel),
    T(test_stampede),
    T(test_mixed_concurrency),
#undef T
};

int main(int argc, char **argv) { return check_main(tests, SL_ARRAY_LEN(tests), argc, argv); }
