/* metrics_test.c — core/ctx/metrics.c: a retired worker's counters folded into its
 * successor's by route name (sl_metrics_fold), statuses found through the blocks a route
 * used (code_bits), nothing lost, nothing added to a route that ended no request. */
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
    return m->req_codes[(size_t)route * SL_METRIC_CODES + (size_t)(status - 100)];
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
    CHECK(from.code_bits[oa] == 1ull << ((200 - 100) / 8));

    sl_metrics_fold(&to, now, &from, old);
    CHECK_INT(code(&to, na, 200), 4);
    CHECK_INT(code(&to, nb, 404), 1);
    CHECK_INT(code(&to, nb, 599), 1);
    CHECK_INT(code(&to, nb, 100), 1);
    CHECK_INT(to.req_dur[nb].count, 3);
    CHECK_INT(to.req_dur[na].count, 4);
    /* the blocks folded in are marked, so the next fold finds them */
    CHECK(to.code_bits[nb] == ((1ull << 0) | (1ull << ((404 - 100) / 8)) | (1ull << ((599 - 100) / 8))));
    /* a route without requests gets nothing; one that is gone takes its counts with it */
    uint64_t sum = 0;
    for (int c = 0; c < SL_METRIC_CODES; c++) sum += to.req_codes[(size_t)nq * SL_METRIC_CODES + (size_t)c];
    CHECK_INT(sum, 0);
    CHECK_INT(to.code_bits[nq], 0);
    CHECK_INT(to.req_dur[nq].count, 0);
    uint64_t all = 0;
    for (size_t i = 0; i < to.nroutes * SL_METRIC_CODES; i++) all += to.req_codes[i];
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

int main(void) {
    test_fold_by_name();
    printf("%d passed, %d failed\n", passed, failed);
    return failed != 0;
}
