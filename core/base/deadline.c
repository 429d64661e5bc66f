/* deadline.c — the timer callback behind sl_deadline_t. */
#include "base/deadline.h"

void sl__deadline_cb(uv_timer_t *t) {
    sl_deadline_t *d = SL_CONTAINER_OF(t, sl_deadline_t, timer);
    d->scheduled = 0;
    if (!d->deadline) return; /* cleared since it was scheduled */
    uint64_t now = uv_now(t->loop);
    if (now < d->deadline) { /* moved later since it was scheduled: sleep for the rest */
        d->scheduled = d->deadline;
        uv_timer_start(t, sl__deadline_cb, d->deadline - now, 0);
        return;
    }
    d->deadline = 0;
    d->fire(t);
}
