/* attempt_test.c — unit tests for core/upstream/attempt.c: the pick never returns a target
 * the request tried, for any number of targets (100 here: the old 64-bit mask aliased
 * targets 64 apart); a refused breaker answers with Retry-After; outcomes reach the
 * breaker once; in-flight is counted from begin to release; the tries' words come from
 * the arena or malloc. */
#include "upstream/attempt.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

/* An upstream of n targets 10.0.x.y:80 with `extra` upstream keys, parsed by the real
 * config parser and given a runtime (balancer, target states) as a generation would. */
typedef struct {
    sl_config_t *cfg;
    sl_tregistry_t reg;
    sl_upgen_t *ug;
    sl_attempts_of_t of;
} fx_t;

static void fx_open(fx_t *f, int n, const char *balancer, const char *extra) {
    size_t cap = 256 + (size_t)n * 40 + strlen(extra);
    char *y = malloc(cap);
    int len = snprintf(y, cap,
                       "listeners: [ { name: web, listen: 127.0.0.1:8080 } ]\n"
                       "upstreams:\n  - name: u\n    balancer: %s\n%s    targets:\n",
                       balancer, extra);
    for (int i = 0; i < n; i++)
        len += snprintf(y + len, cap - (size_t)len, "      - { address: 10.0.%d.%d:80 }\n", i / 250, i % 250 + 1);
    len += snprintf(y + len, cap - (size_t)len, "routes: [ { name: r, match: { paths: [/] }, upstream: u } ]\n");
    sl_errors_t errs = {0};
    memset(f, 0, sizeof(*f));
    int rc = sl_config_parse("t.yaml", y, (size_t)len, &f->cfg, &errs);
    if (rc != 0)
        for (size_t i = 0; i < errs.n; i++) fprintf(stderr, "config: %s\n", errs.lines[i]);
    CHECK_INT(rc, 0);
    sl_errors_free(&errs);
    free(y);
    f->ug = sl_upgen_new(&f->reg, f->cfg);
    CHECK(f->ug != NULL);
    f->of = (sl_attempts_of_t){&f->cfg->upstreams[0], &f->ug->ups[0], SL_LAYER_HTTP};
}

static void fx_close(fx_t *f) {
    sl_upgen_free(&f->reg, f->ug);
    sl_config_free(f->cfg);
}

/* Every one of 100 targets is picked exactly once before the pick runs out: none is
 * returned twice, none is hidden behind another (round-robin and random balancers). */
static void each_target_once(const char *balancer) {
    fx_t f;
    fx_open(&f, 100, balancer, "");
    sl_tries_t tr;
    CHECK_INT(sl_tries_init(&tr, 100, NULL), SL_OK);
    CHECK_INT(tr.words, 2);
    int seen[100] = {0}, picks = 0;
    for (;;) {
        uint8_t admit = 0;
        uint64_t ra = 0;
        int t = sl_attempt_pick(&f.of, &tr, "", 0, &admit, &ra, sl_now_ms());
        if (t < 0) break;
        CHECK(t < 100);
        seen[t]++;
        picks++;
        sl_attempt_t a = {.target = -1};
        sl_attempt_begin(&f.of, &tr, &a, t, admit, sl_now_ns());
        sl_attempt_outcome(&f.of, &a, SL_OUT_FAILURE, sl_now_ms());
        sl_attempt_release(&f.of, &a);
        if (picks > 200) break;
    }
    CHECK_INT(picks, 100);
    int twice = 0, never = 0;
    for (int i = 0; i < 100; i++) twice += seen[i] > 1, never += seen[i] == 0;
    CHECK_INT(twice, 0);
    CHECK_INT(never, 0);
    CHECK_INT(tr.attempts, 100);
    sl_tries_free(&tr);
    fx_close(&f);
}

static void test_hundred_targets_round_robin(void) { each_target_once("round-robin"); }
static void test_hundred_targets_least_conn(void) { each_target_once("least-conn"); }
static void test_hundred_targets_p2c(void) { each_target_once("p2c-ewma"); }

/* Target 64 tried does not make target 0 look tried, nor the other way round. */
static void test_no_aliasing(void) {
    fx_t f;
    fx_open(&f, 100, "round-robin", "");
    sl_tries_t tr;
    sl_tries_init(&tr, 100, NULL);
    sl_attempt_t a = {.target = -1};
    sl_attempt_begin(&f.of, &tr, &a, 64, SL_ADMIT_CLOSED, sl_now_ns());
    CHECK(sl_tries_has(tr.tried, 64));
    CHECK(!sl_tries_has(tr.tried, 0));
    uint8_t admit;
    CHECK(sl_attempt_take(&f.of, &tr, 0, &admit, sl_now_ms()));
    CHECK(!sl_attempt_take(&f.of, &tr, 64, &admit, sl_now_ms()));
    CHECK(!sl_attempt_take(&f.of, &tr, 100, &admit, sl_now_ms())); /* out of range */
    sl_attempt_release(&f.of, &a);
    sl_tries_free(&tr);
    fx_close(&f);
}

/* The tries take their words from a request's arena when given one (no malloc). */
static void test_tries_from_arena(void) {
    sl_blockpool_t blocks = {.max_free = 4};
    sl_arena_t arena;
    sl_arena_init(&arena, &blocks);
    sl_tries_t tr;
    CHECK_INT(sl_tries_init(&tr, 1000, &arena), SL_OK);
    CHECK_INT(tr.words, 16);
    for (uint32_t t = 0; t < 1000; t++) CHECK(!sl_tries_has(tr.tried, t) && !sl_tries_has(tr.skip, t));
    sl_tries_free(&tr); /* nothing to free: the arena owns them */
    sl_tries_t small;
    CHECK_INT(sl_tries_init(&small, 3, &arena), SL_OK);
    CHECK(small.tried == &small.inl[0]);
    sl_arena_reset(&arena);
    sl_blockpool_destroy(&blocks);
}

/* A breaker that opens after one failure: the only target's second pick is refused with a
 * Retry-After, and a success on a half-open probe is recorded once. */
static void test_open_breaker_answers_retry_after(void) {
    fx_t f;
    fx_open(&f, 1, "round-robin",
            "    circuit_breaker: { failure_ratio: 0.5, min_requests: 1, open_timeout: 5s }\n");
    sl_tries_t tr;
    sl_tries_init(&tr, 1, NULL);
    uint8_t admit = 0;
    uint64_t ra = 0;
    int t = sl_attempt_pick(&f.of, &tr, "", 0, &admit, &ra, sl_now_ms());
    CHECK_INT(t, 0);
    sl_attempt_t a = {.target = -1};
    sl_attempt_begin(&f.of, &tr, &a, t, admit, sl_now_ns());
    sl_attempt_outcome(&f.of, &a, SL_OUT_FAILURE, sl_now_ms());
    sl_attempt_outcome(&f.of, &a, SL_OUT_SUCCESS, sl_now_ms()); /* once only: this one is ignored */
    sl_attempt_release(&f.of, &a);
    sl_tries_t fresh;
    sl_tries_init(&fresh, 1, NULL);
    t = sl_attempt_pick(&f.of, &fresh, "", 0, &admit, &ra, sl_now_ms());
    CHECK_INT(t, -1);
    CHECK(ra > 0 && ra <= 5000);
    sl_tries_free(&tr);
    sl_tries_free(&fresh);
    fx_close(&f);
}

/* When every breaker is open, Retry-After is the time until the first half-opens (docs), not
 * the configured open_timeout: 3 s into a 5 s open time, 2 s are left; with two targets, the
 * one opened later does not hide the one that half-opens first. */
static void test_retry_after_is_time_left(void) {
    fx_t f;
    fx_open(&f, 2, "round-robin",
            "    circuit_breaker: { failure_ratio: 0.5, min_requests: 1, open_timeout: 5s }\n");
    uint64_t t0 = sl_now_ms();
    for (int k = 0; k < 2; k++) { /* target 0 opens at t0, target 1 at t0 + 1 s */
        sl_tries_t tr;
        sl_tries_init(&tr, 2, NULL);
        uint8_t admit = 0;
        uint64_t ra = 0;
        int t = sl_attempt_pick(&f.of, &tr, "", 0, &admit, &ra, t0 + 1000u * (uint64_t)k);
        CHECK_INT(t, k);
        sl_attempt_t a = {.target = -1};
        sl_attempt_begin(&f.of, &tr, &a, t, admit, sl_now_ns());
        sl_attempt_outcome(&f.of, &a, SL_OUT_FAILURE, t0 + 1000u * (uint64_t)k);
        sl_attempt_release(&f.of, &a);
        sl_tries_free(&tr);
    }
    sl_tries_t tr;
    sl_tries_init(&tr, 2, NULL);
    uint8_t admit = 0;
    uint64_t ra = 0;
    CHECK_INT(sl_attempt_pick(&f.of, &tr, "", 0, &admit, &ra, t0 + 3000), -1);
    CHECK_INT(ra, 2000);
    sl_tries_free(&tr);
    fx_close(&f);
}

/* In-flight is what least-conn reads: begin counts, release uncounts, twice is once. */
static void test_in_flight(void) {
    fx_t f;
    fx_open(&f, 2, "least-conn", "");
    sl_tries_t tr;
    sl_tries_init(&tr, 2, NULL);
    sl_attempt_t a = {.target = -1};
    sl_attempt_begin(&f.of, &tr, &a, 1, SL_ADMIT_CLOSED, sl_now_ns());
    CHECK_INT(f.of.rt->live[1]->in_flight, 1);
    sl_attempt_release(&f.of, &a);
    sl_attempt_release(&f.of, &a);
    CHECK_INT(f.of.rt->live[1]->in_flight, 0);
    sl_tries_free(&tr);
    fx_close(&f);
}

int main(int argc, char **argv) {
    static const check_test_t tests[] = {
        {"hundred_targets_round_robin", test_hundred_targets_round_robin},
        {"hundred_targets_least_conn", test_hundred_targets_least_conn},
        {"hundred_targets_p2c", test_hundred_targets_p2c},
        {"no_aliasing", test_no_aliasing},
        {"tries_from_arena", test_tries_from_arena},
        {"open_breaker_answers_retry_after", test_open_breaker_answers_retry_after},
        {"retry_after_is_time_left", test_retry_after_is_time_left},
        {"in_flight", test_in_flight},
    };
    return check_main(tests, sizeof(tests) / sizeof(tests[0]), argc, argv);
}
