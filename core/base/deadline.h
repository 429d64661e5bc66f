/* deadline.h — a one-shot deadline on a uv timer that is cheap to move.
 *
 * Connections re-arm their timeouts several times per request (idle, header,
 * read after every read, pool idle). Each uv_timer_start/stop is a heap
 * operation; here a later deadline is only recorded (the timer, when it fires
 * early, re-arms itself for the rest) and clearing is only recorded too. Only a
 * deadline earlier than the one scheduled restarts the timer. Times are the
 * loop's (uv_now). Owner: the connection that embeds it; worker thread only.
 */
#ifndef SL_DEADLINE_H
#define SL_DEADLINE_H

#include <uv.h>

#include "base/common.h"

typedef struct {
    uv_timer_t timer;    /**< timer.data is the owner, as fire() expects */
    uint64_t deadline;   /**< loop ms; 0 = none */
    uint64_t scheduled;  /**< when the uv timer fires; 0 = not running */
    uv_timer_cb fire;    /**< called once the deadline is reached */
} sl_deadline_t;

void sl__deadline_cb(uv_timer_t *t);

static inline void sl_deadline_init(uv_loop_t *loop, sl_deadline_t *d, void *owner, uv_timer_cb fire) {
    uv_timer_init(loop, &d->timer);
    d->timer.data = owner;
    d->deadline = d->scheduled = 0;
    d->fire = fire;
}

static inline void sl_deadline_set(sl_deadline_t *d, uint64_t ms) {
    uint64_t now = uv_now(d->timer.loop);
    d->deadline = now + (ms ? ms : 1);
    if (!d->scheduled || d->deadline < d->scheduled) {
        d->scheduled = d->deadline;
        uv_timer_start(&d->timer, sl__deadline_cb, d->deadline - now, 0);
    }
}

static inline void sl_deadline_clear(sl_deadline_t *d) { d->deadline = 0; }

#endif
