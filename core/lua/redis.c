/* redis.c — each worker's Redis connection (hiredis on the worker's libuv loop).
 *
 * A plugin's command (sluice.redis.command, the redis store of sluice.limit) yields the
 * request's coroutine; the reply, an error or the `redis.timeout` timer wakes it. The
 * connection opens on first use and, after a failure, at most once a second; while it
 * is down a command fails at once ("redis unavailable") so callers can fail open without
 * waiting. Replies are kept flat: a scalar, or an array of scalars (what the limiter's
 * script and the simple commands return).
 *
 * Lifetime: a command is malloc'ed (hiredis' callback can outlive the request) and freed
 * when both sides are done with it: the reply (or the connection's end) and the request
 * (its Lua read the result, or it ended first).
 */
#include <hiredis/async.h>
#include <hiredis/hiredis.h>
#include <stdlib.h>

#include "lua/redis.h"
#include "net/redis_uv.h"
#include "http/request.h"
#include "base/log.h"
#include "script/lua_host.h"
#include "sluice.h"

#define REDIS_MAX_ITEMS 16   /* array elements kept from a reply */
#define REDIS_RETRY_MS 1000  /* a failed connection is tried again after this */
#define REDIS_LOG_EVERY_MS 10000

typedef struct {
    int type;          /* SL_REDIS_* */
    long long integer;
    char *str;
    size_t len;
} redis_item_t;

typedef struct sl_redis_cmd_s {
    sl_wait_t base;
    sl_worker_t *w;
    redisAsyncContext *ac;   /* the connection it was sent on (alive until it settles) */
    uv_timer_t timer;
    uint8_t replied, settled, timer_open, held;
    const char *err;         /* static text, or errbuf */
    char errbuf[128];
    redis_item_t top;        /* the reply; SL_REDIS_ARRAY: items[0..nitems) */
    redis_item_t items[REDIS_MAX_ITEMS];
    int nitems;
} sl_redis_cmd_t;

struct sl_redis_s {
    redisAsyncContext *ac;
    int connected;
    uint64_t retry_at_ms;     /* no new connection before this after a failure */
    uint64_t logged_at_ms;    /* the last "unavailable" log line */
    uint32_t pending;
};

static void cmd_free_items(sl_redis_cmd_t *c) {
    free(c->top.str);
    for (int i = 0; i < c->nitems; i++) free(c->items[i].str);
}

static void cmd_maybe_free(sl_redis_cmd_t *c) {
    if (!c->replied || c->timer_open || c->held) return;
    cmd_free_items(c);
    free(c);
}

static void cmd_timer_closed(uv_handle_t *h) {
    sl_redis_cmd_t *c = h->data;
    c->timer_open = 0;
    cmd_maybe_free(c);
}

/* The outcome is known (reply, error or timeout): it is final, and the waiting request
 * (if it is still there) is woken once. */
static void cmd_settle(sl_redis_cmd_t *c, const char *err) {
    if (c->settled) return;
    c->settled = 1;
    c->err = err;
    if (c->timer_open && !uv_is_closing((uv_handle_t *)&c->timer)) {
        uv_timer_stop(&c->timer);
        uv_close((uv_handle_t *)&c->timer, cmd_timer_closed);
    }
    if (c->base.r) sl__req_wakeup(c->base.r);
}

static void log_unavailable(sl_worker_t *w, const char *why) {
    sl_redis_t *rd = w->redis;
    uint64_t now = sl_now_ms();
    if (now - rd->logged_at_ms < REDIS_LOG_EVERY_MS && rd->logged_at_ms) return;
    rd->logged_at_ms = now;
    sl_log_kv(SL_LOG_WARN, (const char *[]){"redis", w->cfg->redis_address.text}, 1,
              "redis unavailable: %s (callers fail open; logged once per %ds)", why, REDIS_LOG_EVERY_MS / 1000);
}

static void on_connect(const redisAsyncContext *ac, int status) {
    sl_worker_t *w = ac->data;
    sl_redis_t *rd = w->redis;
    if (status != REDIS_OK) {
        log_unavailable(w, ac->errstr);
        rd->ac = NULL; /* hiredis frees the context after this callback */
        rd->connected = 0;
        rd->retry_at_ms = sl_now_ms() + REDIS_RETRY_MS;
        return;
    }
    rd->connected = 1;
}

static void on_disconnect(const redisAsyncContext *ac, int status) {
    sl_worker_t *w = ac->data;
    sl_redis_t *rd = w->redis;
    if (status != REDIS_OK) {
        log_unavailable(w, ac->errstr);
        rd->retry_at_ms = sl_now_ms() + REDIS_RETRY_MS;
    }
    rd->ac = NULL;
    rd->connected = 0;
}

static int keep_item(redis_item_t *it, const redisReply *rp) {
    it->type = rp->type == REDIS_REPLY_INTEGER ? SL_REDIS_INTEGER
               : rp->type == REDIS_REPLY_STRING || rp->type == REDIS_REPLY_STATUS ? SL_REDIS_STRING
               : rp->type == REDIS_REPLY_ERROR ? SL_REDIS_ERROR
               : rp->type == REDIS_REPLY_ARRAY ? SL_REDIS_ARRAY
                                               : SL_REDIS_NIL;
    it->integer = rp->integer;
    if (it->type == SL_REDIS_STRING || it->type == SL_REDIS_ERROR) {
        it->str = malloc(rp->len + 1);
        if (!it->str) return -1;
        memcpy(it->str, rp->str, rp->len);
        it->str[rp->len] = 0;
        it->len = rp->len;
    }
    return 0;
}

/* hiredis calls this with the reply, or with NULL when the connection went away. */
static void on_reply(redisAsyncContext *ac, void *reply, void *privdata) {
    sl_redis_cmd_t *c = privdata;
    sl_worker_t *w = ac->data;
    if (w->redis->pending) w->redis->pending--;
    const redisReply *rp = reply;
    const char *err = NULL;
    c->replied = 1;
    if (!c->settled) { /* a reply after the timeout is dropped */
        if (!rp) {
            err = "redis connection lost";
        } else if (keep_item(&c->top, rp) != 0) {
            err = "out of memory";
        } else if (rp->type == REDIS_REPLY_ARRAY) {
            for (size_t i = 0; i < rp->elements && i < REDIS_MAX_ITEMS; i++)
                if (keep_item(&c->items[c->nitems++], rp->element[i]) != 0) err = "out of memory";
        }
        cmd_settle(c, err);
    }
    cmd_maybe_free(c);
}

/* A command outlived redis.timeout: it fails (its caller fails open), and the connection
 * it waits on is closed, as lua-resty-redis closes a socket that timed out. Kept, a hung
 * Redis would make every later command wait the whole timeout and stay queued (with its
 * arguments) until Redis answered, if ever. Closing it answers every other command on it
 * ("redis connection lost": they fail open at once), and the worker reconnects at most
 * once a second as after any failure. Every command of a connection settles when it
 * ends, so a timer that fires has its connection still open: the worker's, or the one
 * a drain is closing. */
static void on_timeout(uv_timer_t *t) {
    sl_redis_cmd_t *c = t->data;
    sl_worker_t *w = c->w;
    sl_redis_t *rd = w->redis;
    redisAsyncContext *ac = c->ac;
    log_unavailable(w, "timeout");
    if (ac && rd->ac == ac) {
        /* first: a command its waking callers send finds the connection down */
        rd->ac = NULL;
        rd->connected = 0;
        rd->retry_at_ms = sl_now_ms() + REDIS_RETRY_MS;
    }
    cmd_settle(c, "redis timeout");
    /* Also a draining worker's connection (sl__redis_close let go of it): its disconnect
     * waits for the replies, which a hung Redis never sends, and the loop cannot end
     * with it. Freeing answers each pending command with NULL, then on_disconnect. */
    if (ac) redisAsyncFree(ac);
}

static void cmd_cancel(sl_wait_t *wt) {
    sl_redis_cmd_t *c = SL_CONTAINER_OF(wt, sl_redis_cmd_t, base);
    c->base.r = NULL;
    c->held = 0;
    if (c->timer_open && !uv_is_closing((uv_handle_t *)&c->timer)) {
        uv_timer_stop(&c->timer);
        uv_close((uv_handle_t *)&c->timer, cmd_timer_closed);
    }
    cmd_maybe_free(c);
}

static sl_redis_cmd_t *cmd_of(sl_req_t *r) {
    return r->wait && r->wait->kind == SL_WAIT_REDIS ? SL_CONTAINER_OF(r->wait, sl_redis_cmd_t, base) : NULL;
}

/* The answer to AUTH or SELECT: an error is logged (as Redis down is, at most once per
 * REDIS_LOG_EVERY_MS). The connection stays: the commands behind it get Redis' own error
 * (NOAUTH, ...), which their callers see and the limiter logs, until a reload with the
 * right settings makes new workers and connections. */
static void on_setup_reply(redisAsyncContext *ac, void *reply, void *privdata) {
    const redisReply *rp = reply;
    if (!rp || rp->type != REDIS_REPLY_ERROR) return;
    char why[160];
    snprintf(why, sizeof why, "%s refused: %.*s", (const char *)privdata, (int)SL_MIN(rp->len, 120), rp->str);
    log_unavailable(ac->data, why);
}

/* AUTH and SELECT as the first commands of a new connection (config `redis:` password_env,
 * username_env, database): hiredis sends commands in order once connected, so every
 * command after them runs authenticated, in that database. */
static void setup_connection(sl_worker_t *w, redisAsyncContext *ac) {
    const sl_config_t *cfg = w->cfg;
    if (cfg->redis_password) {
        const char *argv[3] = {"AUTH", cfg->redis_username, cfg->redis_password};
        size_t len[3] = {4, cfg->redis_username ? strlen(cfg->redis_username) : 0, strlen(cfg->redis_password)};
        if (cfg->redis_username)
            redisAsyncCommandArgv(ac, on_setup_reply, "AUTH", 3, argv, len);
        else
            redisAsyncCommandArgv(ac, on_setup_reply, "AUTH", 2, (const char *[]){"AUTH", argv[2]},
                                  (size_t[]){4, len[2]});
    }
    if (cfg->redis_database > 0) {
        char db[16];
        int n = snprintf(db, sizeof db, "%d", cfg->redis_database);
        redisAsyncCommandArgv(ac, on_setup_reply, "SELECT", 2, (const char *[]){"SELECT", db},
                              (size_t[]){6, (size_t)n});
    }
}

/* The worker's connection, opened when needed; NULL while it is down. */
static redisAsyncContext *connection(sl_worker_t *w, const char **err) {
    sl_redis_t *rd = w->redis;
    if (rd->ac) return rd->ac;
    if (sl_now_ms() < rd->retry_at_ms) {
        *err = "redis unavailable";
        return NULL;
    }
    char ip[64];
    const struct sockaddr_storage *ss = &w->cfg->redis_address.ss;
    int port;
    if (ss->ss_family == AF_INET6) {
        uv_ip6_name((const struct sockaddr_in6 *)ss, ip, sizeof ip);
        port = ntohs(((const struct sockaddr_in6 *)ss)->sin6_port);
    } else {
        uv_ip4_name((const struct sockaddr_in *)ss, ip, sizeof ip);
        port = ntohs(((const struct sockaddr_in *)ss)->sin_port);
    }
    redisAsyncContext *ac = redisAsyncConnect(ip, port);
    if (!ac || ac->err) {
        log_unavailable(w, ac ? ac->errstr : "out of memory");
        if (ac) redisAsyncFree(ac);
        rd->retry_at_ms = sl_now_ms() + REDIS_RETRY_MS;
        *err = "redis unavailable";
        return NULL;
    }
    ac->data = w;
    if (sl_redis_uv_attach(ac, &w->loop) != REDIS_OK) {
        redisAsyncFree(ac);
        *err = "redis unavailable";
        return NULL;
    }
    redisAsyncSetConnectCallback(ac, on_connect);
    redisAsyncSetDisconnectCallback(ac, on_disconnect);
    if (w->draining) sl_redis_uv_unref(ac); /* as at the drain (sl__redis_close) */
    rd->ac = ac;
    setup_connection(w, ac);
    return ac;
}

int sl_ffi_redis_command(sl_req_t *r, int argc, const char **argv, const size_t *argvlen, const char **err) {
    sl_worker_t *w = r->w;
    if (r->lua.phase != SL_PHASE_REWRITE && r->lua.phase != SL_PHASE_ACCESS) {
        *err = "redis works in rewrite and access only";
        return SL_ERROR;
    }
    if (r->wait) {
        *err = "already waiting";
        return SL_ERROR;
    }
    if (!w->redis) {
        *err = "no redis in the config (redis: { address: ... })";
        return SL_ERROR;
    }
    if (argc < 1) {
        *err = "a command needs at least its name";
        return SL_ERROR;
    }
    redisAsyncContext *ac = connection(w, err);
    if (!ac) return SL_DECLINED; /* down: the caller decides (fail open) without waiting */
    sl_redis_cmd_t *c = calloc(1, sizeof(*c));
    if (!c) {
        *err = "out of memory";
        return SL_ERROR;
    }
    c->w = w;
    c->ac = ac;
    c->base = (sl_wait_t){.r = r, .kind = SL_WAIT_REDIS, .cancel = cmd_cancel};
    c->held = 1;
    if (redisAsyncCommandArgv(ac, on_reply, c, argc, argv, argvlen) != REDIS_OK) {
        free(c);
        *err = "redis unavailable";
        return SL_DECLINED;
    }
    w->redis->pending++;
    uv_timer_init(&w->loop, &c->timer);
    c->timer.data = c;
    c->timer_open = 1;
    uv_update_time(&w->loop);
    uv_timer_start(&c->timer, on_timeout, w->cfg->redis_timeout_ms ? w->cfg->redis_timeout_ms : 1, 0);
    r->wait = &c->base;
    return SL_OK;
}

int sl_ffi_redis_reply(sl_req_t *r, int i, int *type, long long *integer, const char **str, size_t *len,
                       int *n, const char **err) {
    sl_redis_cmd_t *c = cmd_of(r);
    if (!c || !c->settled) {
        *err = "no redis reply";
        return SL_ERROR;
    }
    if (c->err) {
        *err = c->err;
        return SL_ERROR;
    }
    const redis_item_t *it = i < 0 ? &c->top : (i < c->nitems ? &c->items[i] : NULL);
    if (!it) {
        *err = "no such reply element";
        return SL_ERROR;
    }
    *type = it->type;
    *integer = it->integer;
    *str = it->str ? it->str : "";
    *len = it->len;
    *n = c->nitems;
    return SL_OK;
}

void sl_ffi_redis_done(sl_req_t *r) {
    sl_redis_cmd_t *c = cmd_of(r);
    if (!c) return;
    r->wait = NULL;
    c->base.r = NULL;
    c->held = 0;
    cmd_maybe_free(c);
}

int sl__redis_init(sl_worker_t *w) {
    if (!w->cfg->redis_enabled) return SL_OK;
    w->redis = calloc(1, sizeof(*w->redis));
    return w->redis ? SL_OK : SL_ERROR;
}

/* Drain: the requests the worker still serves (a reload's last ones on keep-alive and
 * HTTP/2 connections, those in flight) use the connection as before; it just no longer
 * keeps the loop alive, which ends with the last of them (a command waiting holds it by
 * its timer). Closed by sl__redis_free. */
void sl__redis_close(sl_worker_t *w) {
    if (w->redis && w->redis->ac) sl_redis_uv_unref(w->redis->ac);
}

/* After the worker's loop ended (sl_worker_destroy runs it once more for the closes): a
 * connection still open is freed (its poll closed), with no command waiting on it. */
void sl__redis_free(sl_worker_t *w) {
    if (w->redis && w->redis->ac) redisAsyncFree(w->redis->ac); /* on_disconnect clears ac */
    free(w->redis);
    w->redis = NULL;
}
