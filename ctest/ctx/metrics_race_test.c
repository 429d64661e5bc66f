/* metrics_race_test.c — core/ctx/metrics.c under concurrency, on a config built by hand (so
 * that the ThreadSanitizer build needs metrics.c alone, not the config parser): a worker
 * counting statuses on its table while the main thread folds a retired worker's counts into
 * that same table and renders /metrics from it. Both give status columns; over many trials
 * released at once, no count is lost, no status gets two columns, and (under TSan,
 * tsan.metrics_race_test) no access races. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "ctx/metrics.h"

typedef struct {
    sl_wmetrics_t *to;
    pthread_barrier_t *go;
} worker_t;

static void *worker(void *arg) {
    worker_t *a = arg;
    pthread_barrier_wait(a->go);
    for (int s = 100; s <= 599; s++) {
        sl_metrics_request(a->to, 0, s, 1000);
        sl_metrics_request(a->to, 1, 599 - s + 100, 1000);
    }
    return NULL;
}

int main(void) {
    sl_route_conf_t routes[2];
    memset(routes, 0, sizeof routes);
    routes[0].name = (char *)"a";
    routes[1].name = (char *)"b";
    sl_config_t cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.routes = routes;
    cfg.nroutes = 2;
    int lost = 0, doubled = 0, unrendered = 0;
    for (int trial = 0; trial < 100; trial++) {
        sl_wmetrics_t to, from;
        CHECK_INT(sl_metrics_init(&to, &cfg), 0);
        CHECK_INT(sl_metrics_init(&from, &cfg), 0);
        for (int s = 599; s >= 100; s--) sl_metrics_request(&from, 0, s, 1000);
        pthread_barrier_t go;
        pthread_barrier_init(&go, NULL, 2);
        worker_t a = {&to, &go};
        pthread_t t;
        pthread_create(&t, NULL, worker, &a);
        pthread_barrier_wait(&go);
        sl_metrics_fold(&to, &cfg, &from, &cfg);
        sl_wmetrics_t *ms[] = {&to};
        char *page = NULL;
        size_t len = 0;
        CHECK_INT(sl_metrics_render(&cfg, ms, 1, NULL, &page, &len), 0);
        pthread_join(t, NULL);
        unrendered += !page || !strstr(page, "sluice_requests_total{route=\"a\",code=\"");
        free(page);
        for (int s = 100; s <= 599; s++) {
            lost += sl_codes_get(to.req_codes, 0, s) != 2;
            lost += sl_codes_get(to.req_codes, 1, s) != 1;
        }
        bool seen[SL_METRIC_CODES] = {0};
        for (uint32_t c = 0; c < to.req_codes->ncols; c++) {
            int s = to.req_codes->code[c];
            doubled += seen[s] || to.req_codes->col[s] != c + 1;
            seen[s] = true;
        }
        doubled += to.req_codes->ncols != SL_METRIC_CODES;
        pthread_barrier_destroy(&go);
        sl_metrics_free(&to);
        sl_metrics_free(&from);
    }
    CHECK_INT(lost, 0);
    CHECK_INT(doubled, 0);
    CHECK_INT(unrendered, 0);
    printf("%d passed, %d failed\n", passed, failed);
    return failed != 0;
}
