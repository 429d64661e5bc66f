#include "ctx/metrics.h"
#include <stdio.h>
#include <stdlib.h>
/* the C side of one timed plugin call: a tick read, the conversion, the histogram */
int main(void) {
    sl_ticks_calibrate();
    sl_wmetrics_t m = {0};
    m.nroutes = 2; size_t base[2] = {0, 0}; uint8_t len[2] = {4, 0};
    m.plugin_base = base; m.plugin_len = len; m.plugin_dur = calloc(4 * SL_METRIC_PHASES, sizeof(sl_hist_t));
    uint64_t mark = sl_ticks();
    const int N = 20000000;
    uint64_t t0 = sl_now_ns();
    for (int i = 0; i < N; i++) {
        uint64_t now = sl_ticks(), ns = sl_ticks_ns(now - mark);
        mark = now;
        sl_metrics_plugin_time(&m, 0, i & 3, 1, ns);
    }
    uint64_t t1 = sl_now_ns();
    printf("tsc=%d %.1f ns per timed plugin call (C side)\n", sl__ticks_tsc, (double)(t1 - t0) / N);
    return 0;
}
