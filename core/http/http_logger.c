/* http_logger.c — the http-logger plugin's sender: log lines queued per worker and sent
 * in batches (a JSON array per POST) to an HTTP collector, on the worker's loop, through
 * the detached HTTP client (http_client.h). The request's log phase only appends its line
 * to a bounded queue; nothing on the request's path waits for the collector.
 *
 * A logger is one (collector, head, bounds) per worker thread, found again by those bytes
 * (two routes with the same config share it; a reload's new generation runs on new worker
 * threads and gets its own). Per logger:
 *   queue     lines not yet in a batch, at most queue_max (a line past it is dropped and
 *             counted); one malloc'ed buffer of "line\n" records
 *   batch     at most one on its way: the first batch_max queued lines, sent when
 *             batch_max lines are queued or `flush` after the first line queued
 *   retries   a failed batch (no answer, not 2xx) is sent again after 200 ms, 400 ms, ...
 *             (doubling, at most 5 s) up to `retries` times, then dropped and counted
 *   timer     one tick (every min(flush, 100 ms)) while lines wait or a retry is due: it
 *             sends what is due. An idle logger holds no handle. When the worker drains
 *             (a reload, a stop), the next tick sends what waits at once and a failed
 *             batch is not retried, so the worker's loop ends within a tick and one
 *             exchange's `timeout`
 * The loggers of a worker thread are freed when the thread ends (a pthread key's
 * destructor): by then its loop has ended, so no handle of theirs is open.
 */
#include "http/http_logger.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "base/wbuf.h"
#include "ctx/metrics.h"
#include "http/http_client.h"
#include "http/request.h"

#define BACKOFF_FIRST_MS 200
#define BACKOFF_MAX_MS 5000
#define TICK_MS 100

enum { LINES_SENT, LINES_DROPPED, LINES_FAILED, LINES_RESULTS };
static _Atomic uint64_t counts[LINES_RESULTS];


struct sl_httplog_s {
    struct sl_httplog_s *next;
    sl_worker_t *w;
    char *id; /* host, port, head and bounds: what makes two configs one logger */
    size_t id_len;
    char host[256];
    int port;
    char *head; /* "POST /path HTTP/1.1\r\nHost: ...\r\n...fields...\r\n" (no framing) */
    size_t head_len;
    uint32_t batch_max, queue_max, retries;
    uint64_t flush_ms, timeout_ms;
    sl_wbuf_t queue;     /* lines not yet in a batch, each ended by '\n' */
    uint32_t queued;  /* lines in queue */
    sl_wbuf_t batch;     /* the whole request of the batch on its way, kept for a retry */
    uint32_t batched; /* its lines; 0: no batch */
    uint8_t sending;  /* the batch's exchange is on its way */
    uint32_t attempt; /* its failed sends so far */
    uint64_t first_at;/* loop ms when the oldest queued line came */
    uint64_t retry_at;/* loop ms when a failed batch goes again */
    uv_timer_t *timer;/* malloc'ed while lines wait; NULL otherwise */
};
typedef struct sl_httplog_s logger_t;

static pthread_key_t key;
static pthread_once_t key_once = PTHREAD_ONCE_INIT;
static __thread logger_t *loggers;

static void free_all(void *head) {
    for (logger_t *lg = head, *next; lg; lg = next) {
        next = lg->next;
        free(lg->id);
        free(lg->head);
        free(lg->queue.p);
        free(lg->batch.p);
        free(lg);
    }
}

static void make_key(void) { pthread_key_create(&key, free_all); }

static void count(int result, uint64_t n) { atomic_fetch_add_explicit(&counts[result], n, memory_order_relaxed); }

static void send_batch(logger_t *lg);

static void on_timer_closed(uv_handle_t *h) { free(h); }
static void timer_fired(uv_timer_t *t);

/* Arms the one timer for the next tick; false when out of memory. */
static bool arm(logger_t *lg) {
    if (!lg->timer) {
        if (!(lg->timer = malloc(sizeof *lg->timer))) return false;
        uv_timer_init(&lg->w->loop, lg->timer);
        lg->timer->data = lg;
    }
    uv_timer_start(lg->timer, timer_fired, lg->flush_ms < TICK_MS ? lg->flush_ms : TICK_MS, 0);
    return true;
}

/* Nothing waits: the timer goes, so the logger holds no handle. */
static void idle(logger_t *lg) {
    if (!lg->timer) return;
    uv_timer_stop(lg->timer);
    uv_close((uv_handle_t *)lg->timer, on_timer_closed);
    lg->timer = NULL;
}

/* What follows a batch that ended (sent, or given up): the next one, or a flush, or idle. */
static void next(logger_t *lg) {
    lg->batched = 0;
    lg->batch.len = 0;
    lg->attempt = 0;
    if (lg->queued >= lg->batch_max || (lg->queued && lg->w->draining))
        send_batch(lg);
    else if (lg->queued)
        arm(lg);
    else
        idle(lg);
}

/* A tick: a due retry, a due flush, or (draining) everything at once. */
static void timer_fired(uv_timer_t *t) {
    logger_t *lg = t->data;
    uint64_t now = uv_now(&lg->w->loop);
    bool draining = lg->w->draining;
    if (lg->sending) return;
    if (lg->batched) {
        if (draining) { /* no retries while the worker drains */
            count(LINES_FAILED, lg->batched);
            next(lg);
        } else if (now >= lg->retry_at) {
            send_batch(lg);
        } else {
            arm(lg);
        }
        return;
    }
    if (lg->queued && (draining || now - lg->first_at >= lg->flush_ms))
        send_batch(lg);
    else if (lg->queued)
        arm(lg);
    else
        idle(lg);
}

static void on_sent(void *ud, int status, const char *err) {
    logger_t *lg = ud;
    (void)err;
    lg->sending = 0;
    if (status >= 200 && status < 300) {
        count(LINES_SENT, lg->batched);
        next(lg);
        return;
    }
    if (++lg->attempt > lg->retries) {
        count(LINES_FAILED, lg->batched);
        next(lg);
        return;
    }
    uint64_t ms = BACKOFF_FIRST_MS;
    for (uint32_t i = 1; i < lg->attempt && ms < BACKOFF_MAX_MS; i++) ms *= 2;
    lg->retry_at = uv_now(&lg->w->loop) + (ms < BACKOFF_MAX_MS ? ms : BACKOFF_MAX_MS);
    if (!arm(lg)) {
        count(LINES_FAILED, lg->batched);
        next(lg);
    }
}

/* Takes the first batch_max queued lines into a request as a JSON array. */
static bool build_batch(logger_t *lg) {
    uint32_t n = 0;
    size_t cut = 0;
    while (n < lg->batch_max && cut < lg->queue.len) {
        const char *nl = memchr(lg->queue.p + cut, '\n', lg->queue.len - cut);
        cut = (size_t)(nl - lg->queue.p) + 1;
        n++;
    }
    size_t body = 2 + cut - 1; /* "[" lines joined by "," "]": n - 1 commas replace n - 1 '\n' */
    char cl[64];
    int cll = snprintf(cl, sizeof cl, "Content-Length: %zu\r\nConnection: close\r\n\r\n[", body);
    sl_wbuf_t *b = &lg->batch;
    b->len = 0;
    if (!sl_wbuf_put(b, lg->head, lg->head_len) || !sl_wbuf_put(b, cl, (size_t)cll) || !sl_wbuf_put(b, lg->queue.p, cut)) return false;
    for (size_t i = b->len - cut; i < b->len; i++)
        if (b->p[i] == '\n') b->p[i] = ',';
    b->p[b->len - 1] = ']';
    memmove(lg->queue.p, lg->queue.p + cut, lg->queue.len - cut);
    lg->queue.len -= cut;
    lg->queued -= n;
    lg->batched = n;
    return true;
}

/* Sends the batch on its way (a new one from the queue unless a retry is due). */
static void send_batch(logger_t *lg) {
    if (lg->sending) return;
    if (!lg->batched) {
        if (!lg->queued) {
            idle(lg);
            return;
        }
        if (!build_batch(lg)) { /* out of memory: try at the next tick */
            arm(lg);
            return;
        }
        lg->first_at = uv_now(&lg->w->loop); /* what stays waits from now */
    }
    if (lg->timer) uv_timer_stop(lg->timer);
    const char *err;
    lg->sending = 1;
    if (sl_http_send(lg->w, lg->host, strlen(lg->host), lg->port, lg->batch.p, lg->batch.len, lg->timeout_ms, on_sent,
                     lg, &err) != SL_OK) {
        /* failed at once (no socket): as a failed send, its backoff on the timer */
        on_sent(lg, 0, err);
    }
}

sl_httplog_t *sl_ffi_httplog_open(sl_req_t *r, const char *host, size_t hl, int port, const char *head,
                                  size_t head_len, int batch_max, int queue_max, double flush_ms, double timeout_ms,
                                  int retries, const char **err) {
    if (!hl || hl >= 256 || port < 1 || port > 65535 || batch_max < 1 || queue_max < 1 || retries < 0 ||
        !(flush_ms >= 1) || !(timeout_ms >= 1)) {
        *err = "http-logger: bad endpoint or bounds";
        return NULL;
    }
    pthread_once(&key_once, make_key);
    char idb[512];
    int il = snprintf(idb, sizeof idb, "%.*s|%d|%d|%d|%.0f|%.0f|%d|", (int)hl, host, port, batch_max, queue_max,
                      flush_ms, timeout_ms, retries);
    for (logger_t *lg = loggers; lg; lg = lg->next)
        if (lg->w == r->w && lg->id_len == (size_t)il + head_len && memcmp(lg->id, idb, (size_t)il) == 0 &&
            memcmp(lg->id + il, head, head_len) == 0)
            return lg;
    logger_t *lg = calloc(1, sizeof *lg);
    if (lg) lg->id = malloc((size_t)il + head_len + 1);
    if (lg && lg->id) lg->head = malloc(head_len + 1);
    if (!lg || !lg->id || !lg->head) {
        if (lg) free(lg->id);
        free(lg);
        *err = "http-logger: out of memory";
        return NULL;
    }
    memcpy(lg->id, idb, (size_t)il);
    memcpy(lg->id + il, head, head_len);
    lg->id_len = (size_t)il + head_len;
    memcpy(lg->head, head, head_len);
    lg->head_len = head_len;
    memcpy(lg->host, host, hl);
    lg->host[hl] = 0;
    lg->port = port;
    lg->w = r->w;
    lg->batch_max = (uint32_t)batch_max;
    lg->queue_max = (uint32_t)queue_max;
    lg->retries = (uint32_t)retries;
    lg->flush_ms = (uint64_t)flush_ms;
    lg->timeout_ms = (uint64_t)timeout_ms;
    lg->next = loggers;
    loggers = lg;
    pthread_setspecific(key, loggers);
    return lg;
}

int sl_ffi_httplog_push(sl_httplog_t *lg, const char *line, size_t len) {
    if (lg->queued >= lg->queue_max || memchr(line, '\n', len) || !sl_wbuf_put(&lg->queue, line, len) ||
        !sl_wbuf_put(&lg->queue, "\n", 1)) {
        count(LINES_DROPPED, 1);
        return SL_DECLINED;
    }
    if (++lg->queued == 1) lg->first_at = uv_now(&lg->w->loop);
    if (lg->sending || lg->batched) return SL_OK; /* the batch on its way (or its retry) goes first */
    if (lg->queued >= lg->batch_max)
        send_batch(lg);
    else if (!lg->timer || !uv_is_active((uv_handle_t *)lg->timer))
        arm(lg);
    return SL_OK;
}

char *sl_httplog_metrics(void) {
    static const char *const names[LINES_RESULTS] = {"sent", "dropped", "failed"};
    return sl_metrics_result_counters("sluice_http_logger_lines_total",
                                      "http-logger lines by outcome: sent (the collector answered 2xx), dropped (the queue "
                                      "was full), failed (their batch failed every retry).",
                                      names, counts, LINES_RESULTS);
}
