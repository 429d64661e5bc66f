/* redis_uv.c — hiredis' asynchronous API on a libuv loop: one uv_poll per connection,
 * started for the directions hiredis asks for.
 *
 * sluice's own rather than the libuv adapter hiredis ships: Debian's hiredis 0.14.1
 * adapter returns from its poll callback on any poll error without telling hiredis, and
 * a refused connect shows up exactly as such an error (EPOLLERR on the connecting
 * socket). hiredis then never learns that the connect failed: the connect callback never
 * runs, every command waits for its timeout, the worker never reconnects, and the poll
 * is never stopped, so a retiring worker's loop cannot end. Here an error is handed to
 * hiredis as the events it was waiting for; its read or write then fails and it reports
 * the connection as failed or lost through the callbacks sluice set.
 */
#include "net/redis_uv.h"

#include <stdlib.h>

typedef struct {
    redisAsyncContext *ac; /* NULL once hiredis cleaned up */
    uv_poll_t poll;
    int events;
} redis_uv_t;

static void on_poll(uv_poll_t *h, int status, int events) {
    redis_uv_t *p = h->data;
    int ev = status < 0 ? p->events : events;
    if (p->ac && (ev & UV_READABLE)) redisAsyncHandleRead(p->ac);
    if (p->ac && (ev & UV_WRITABLE)) redisAsyncHandleWrite(p->ac);
}

static void set_events(redis_uv_t *p, int events) {
    if (events == p->events) return;
    p->events = events;
    if (events)
        uv_poll_start(&p->poll, events, on_poll);
    else
        uv_poll_stop(&p->poll);
}

static void add_read(void *d) { set_events(d, ((redis_uv_t *)d)->events | UV_READABLE); }
static void del_read(void *d) { set_events(d, ((redis_uv_t *)d)->events & ~UV_READABLE); }
static void add_write(void *d) { set_events(d, ((redis_uv_t *)d)->events | UV_WRITABLE); }
static void del_write(void *d) { set_events(d, ((redis_uv_t *)d)->events & ~UV_WRITABLE); }

static void on_closed(uv_handle_t *h) { free(h->data); }

static void cleanup(void *d) {
    redis_uv_t *p = d;
    p->ac = NULL;
    uv_close((uv_handle_t *)&p->poll, on_closed);
}

int sl_redis_uv_attach(redisAsyncContext *ac, uv_loop_t *loop) {
    if (ac->ev.data) return REDIS_ERR;
    redis_uv_t *p = calloc(1, sizeof(*p));
    if (!p) return REDIS_ERR;
    if (uv_poll_init_socket(loop, &p->poll, ac->c.fd) != 0) {
        free(p);
        return REDIS_ERR;
    }
    p->ac = ac;
    p->poll.data = p;
    ac->ev.data = p;
    ac->ev.addRead = add_read;
    ac->ev.delRead = del_read;
    ac->ev.addWrite = add_write;
    ac->ev.delWrite = del_write;
    ac->ev.cleanup = cleanup;
    return REDIS_OK;
}

void sl_redis_uv_unref(redisAsyncContext *ac) {
    redis_uv_t *p = ac->ev.data;
    if (p) uv_unref((uv_handle_t *)&p->poll);
}
