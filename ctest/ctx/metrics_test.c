/* metrics_test.c — core/ctx/metrics.c: a retired worker's counters folded into its
 * successor's by route name (sl_metrics_fold), statuses counted in the columns a table
 * gave them (sl_codes_t), nothing lost, nothing added to a route that ended no request;
 * the worker and a fold giving columns in one table at once. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "config/config.h"
#include "ctx/metrics.h"

#define BASE "listeners: [ { name: web, listen: 127.0.0.1:8080 } ]\n" \
             "upstreams: [ { name: u, targets: [ { address: 127.0.0.1:9 } ] } ]\n"

static sl_config_t *parse(const char *yaml) {
    sl_config_t *cfg = NULL;
    sl_errors_t errs = {0};
    int rc = sl_config_parse("t.yaml", yaml, strlen(yaml), &cfg, &errs);
    CHECK_INT(rc, 0);
    sl_errors_free(&errs);
    return cfg;
}

static int route_of(const sl_config_t *c, const char *name) {
    for (size_t i = 0; i < c->nroutes; i++)
        if (strcmp(c->routes[i].name, name) == 0) return (int)i;
    return -1;
}

static uint64_t code(const sl_wmetrics_t *m, int route, int status) {
    return sl_codes_get(m->req_codes, (size_t)route, status);
}

/* Every column names one status, and that status names it back. */
static bool columns_agree(const sl_codes_t *k) {
    bool seen[SL_METRIC_CODES] = {0};
    for (uint32_t c = 0; c < k->ncols; c++) {
        if (seen[k->code[c]] || k->col[k->code[c]] != c + 1) return false;
        seen[k->code[c]] = true;
    }
    for (int s = 0; s < SL_METRIC_CODES; s++)
        if (k->col[s] && !seen[s]) return false;
    return true;
}

static void test_fold_by_name(void) {
    sl_config_t *old = parse(BASE "routes:\n"
                                  "  - { name: a, match: { paths: [/a] }, upstream: u }\n"
                                  "  - { name: b, match: { paths: [/b] }, upstream: u }\n"
                                  "  - { name: quiet, match: { paths: [/q] }, upstream: u }\n"
                                  "  - { name: gone, match: { paths: [/g] }, upstream: u }\n");
    /* the successor lists its routes in another order, without `gone`, with a new one */
    sl_config_t *now = parse(BASE "routes:\n"
                                  "  - { name: new, match: { paths: [/n] }, upstream: u }\n"
                                  "  - { name: quiet, match: { paths: [/q] }, upstream: u }\n"
                                  "  - { name: b, match: { paths: [/b] }, upstream: u }\n"
                                  "  - { name: a, match: { paths: [/a] }, upstream: u }\n");
    if (!old || !now) return;
    sl_wmetrics_t from, to;
    CHECK_INT(sl_metrics_init(&from, old), 0);
    CHECK_INT(sl_metrics_init(&to, now), 0);
    int oa = route_of(old, "a"), ob = route_of(old, "b"), og = route_of(old, "gone");
    int na = route_of(now, "a"), nb = route_of(now, "b"), nq = route_of(now, "quiet");
    for (int i = 0; i < 3; i++) sl_metrics_request(&from, oa, 200, 1000);
    sl_metrics_request(&from, ob, 404, 1000);
    sl_metrics_request(&from, ob, 599, 1000); /* the last slot: the last, short block of 8 */
    sl_metrics_request(&from, ob, 100, 1000); /* the first */
    sl_metrics_request(&from, og, 500, 1000);
    sl_metrics_request(&to, na, 200, 1000); /* the successor counted one already */
    CHECK_INT(from.req_codes->ncols, 5); /* 200, 404, 599, 100, 500: one column each */
    CHECK_INT(code(&from, oa, 404), 0);

    sl_metrics_fold(&to, now, &from, old);
    CHECK_INT(code(&to, na, 200), 4);
    CHECK_INT(code(&to, nb, 404), 1);
    CHECK_INT(code(&to, nb, 599), 1);
    CHECK_INT(code(&to, nb, 100), 1);
    CHECK_INT(to.req_dur[nb].count, 3);
    CHECK_INT(to.req_dur[na].count, 4);
    /* the successor gave the carried statuses columns, not the 500 of a route that is gone */
    CHECK_INT(to.req_codes->ncols, 4);
    CHECK(columns_agree(to.req_codes));
    /* a route without requests gets nothing; one that is gone takes its counts with it */
    uint64_t sum = 0;
    for (int c = 100; c <= 599; c++) sum += code(&to, nq, c);
    CHECK_INT(sum, 0);
    CHECK_INT(to.req_dur[nq].count, 0);
    uint64_t all = 0;
    for (size_t r = 0; r < to.nroutes; r++)
        for (int c = 100; c <= 599; c++) all += code(&to, (int)r, c);
    CHECK_INT(all, 7); /* 4 + 3: the 500 of `gone` is not carried */

    /* folded again into a third generation: what the second carried goes on */
    sl_wmetrics_t next;
    CHECK_INT(sl_metrics_init(&next, now), 0);
    sl_metrics_fold(&next, now, &to, now);
    CHECK_INT(code(&next, nb, 599), 1);
    CHECK_INT(code(&next, na, 200), 4);
    sl_metrics_free(&next);
    sl_metrics_free(&to);
    sl_metrics_free(&from);
    sl_config_free(old);
    sl_config_free(now);
}

/* Every status 100..599 on every route: columns past the first block of 8 are given (and
 * their blocks allocated), all counts land where they belong. */
static void test_every_status(void) {
    sl_config_t *cfg = parse(BASE "routes:\n"
                                  "  - { name: a, match: { paths: [/a] }, upstream: u }\n"
                                  "  - { name: b, match: { paths: [/b] }, upstream: u }\n");
    if (!cfg) return;
    sl_wmetrics_t m, next;
    CHECK_INT(sl_metrics_init(&m, cfg), 0);
    CHECK_INT(sl_metrics_init(&next, cfg), 0);
    for (int s = 599; s >= 100; s--) { /* the last status gets the first column */
        sl_metrics_request(&m, 0, s, 1000);
        for (int i = 0; i < s % 3; i++) sl_metrics_request(&m, 1, s, 1000);
        sl_metrics_upstream(&m, 0, 0, s, 1000);
    }
    sl_metrics_request(&m, 0, 600, 1000); /* not a status: the histogram only */
    CHECK_INT(m.req_codes->ncols, 500);
    CHECK(columns_agree(m.req_codes));
    sl_metrics_fold(&next, cfg, &m, cfg);
    int bad = 0;
    for (int s = 100; s <= 599; s++) {
        bad += code(&m, 0, s) != 1 || code(&m, 1, s) != (uint64_t)(s % 3);
        bad += code(&next, 0, s) != 1 || code(&next, 1, s) != (uint64_t)(s % 3);
        bad += sl_codes_get(next.up_codes, 0, s) != 1;
    }
    CHECK_INT(bad, 0);
    CHECK_INT(next.req_dur[0].count, 501);
    /* the dashboard's totals: requests, and 5xx among them */
    sl_wmetrics_t *ms[] = {&next};
    uint64_t reqs, errs;
    sl_hist_t h;
    sl_metrics_route_totals(ms, 1, 0, &reqs, &errs, &h);
    CHECK_INT(reqs, 500);
    CHECK_INT(errs, 100);
    sl_metrics_free(&next);
    sl_metrics_free(&m);
    sl_config_free(cfg);
}

/* The worker counting and the main thread folding a retired worker into the same table,
 * released at once: both give columns. Over many trials, no count is lost and no status
 * gets two columns. */
typedef struct {
    sl_wmetrics_t *to, *from;
    const sl_config_t *cfg;
    pthread_barrier_t *go;
} race_t;

static void *race_worker(void *arg) {
    race_t *a = arg;
    pthread_barrier_wait(a->go);
    for (int s = 100; s <= 599; s++) sl_metrics_request(a->to, 0, s, 1000);
    return NULL;
}

static void test_fold_races_worker(void) {
    sl_config_t *cfg = parse(BASE "routes:\n"
                                  "  - { name: a, match: { paths: [/a] }, upstream: u }\n");
    if (!cfg) return;
    int lost = 0, doubled = 0;
    for (int trial = 0; trial < 200; trial++) {
        sl_wmetrics_t to, from;
        CHECK_INT(sl_metrics_init(&to, cfg), 0);
        CHECK_INT(sl_metrics_init(&from, cfg), 0);
        for (int s = 599; s >= 100; s--) sl_metrics_request(&from, 0, s, 1000);
        pthread_barrier_t go;
        pthread_barrier_init(&go, NULL, 2);
        race_t a = {&to, &from, cfg, &go};
        pthread_t t;
        pthread_create(&t, NULL, race_worker, &a);
        pthread_barrier_wait(&go);
        sl_metrics_fold(&to, cfg, &from, cfg);
        pthread_join(t, NULL);
        pthread_barrier_destroy(&go);
        for (int s = 100; s <= 599; s++) lost += code(&to, 0, s) != 2;
        doubled += !columns_agree(to.req_codes) || to.req_codes->ncols != 500;
        sl_metrics_free(&to);
        sl_metrics_free(&from);
    }
    CHECK_INT(lost, 0);
    CHECK_INT(doubled, 0);
    sl_config_free(cfg);
}

int main(void) {
    test_fold_by_name();
    test_every_status();
    test_fold_races_worker();
    printf("%d passed, %d failed\n", passed, failed);
    return failed != 0;
}
