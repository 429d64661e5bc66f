/* proxy_test.c — unit tests for core/http/proxy.c and core/http/request.c, with no socket:
 * a fake downstream (the sl_downstream_ops_t table of downstream.h) and a fake exchange
 * (the sl_exchange_ops_t table of exchange.h) stand on either side of a request. The
 * proxy's callbacks (sl__proxy_exchange_cb) are fired as an exchange implementation
 * would, and what each side was asked is recorded.
 *
 * proxy.c: a response head and body pumped through to the client and the exchange
 * finished; backpressure (the exchange pauses while the client's write is in flight, and
 * reads on once it completed); a failure before the head is a gateway 502 and the
 * exchange is cancelled; a failure after the head went out aborts the client (never a
 * second head); the request's body goes up, the end of the request and the read timeout
 * follow; a hedge's readable event with bytes of an answer promotes it.
 * request.c: the object comes back from the worker's freelist; the response state moves
 * forward; an aborted request cancels its exchanges. */
#include "http/request.h"

#include <stdlib.h>
#include <string.h>

#include "check.h"

/* ---- the fake downstream ---- */

typedef struct {
    sl_downstream_t ds;
    int heads, head_status, writes, finishes, aborts, waits;
    int write_rc; /* what write returns: 1 at once, 0 in flight */
    char out[4096];
    size_t out_len;
    const char *body;  /* the request body the client "sent" */
    size_t body_left;
} fake_ds_t;

static fake_ds_t *fds(sl_downstream_t *d) { return SL_CONTAINER_OF(d, fake_ds_t, ds); }

static bool ds_body_buffered(sl_downstream_t *d) { return fds(d)->body_left > 0; }
static int ds_read_body(sl_downstream_t *d, uint32_t room, sl_body_cb cb, void *ud) {
    fake_ds_t *f = fds(d);
    (void)room;
    if (cb(ud, f->body, f->body_left)) return SL_ERROR;
    f->body_left = 0;
    return SL_DONE;
}
static void ds_wait_body(sl_downstream_t *d) { fds(d)->waits++; }
static void ds_pause(sl_downstream_t *d) { (void)d; }
static bool ds_send_continue(sl_downstream_t *d) {
    (void)d;
    return true;
}
static int ds_write_head(sl_downstream_t *d, sl_req_t *r, sl_str_t ctype, int64_t len) {
    (void)ctype;
    (void)len;
    fds(d)->heads++;
    fds(d)->head_status = r->status;
    return SL_OK;
}
static int ds_write(sl_downstream_t *d, sl_outq_t *q) {
    fake_ds_t *f = fds(d);
    f->writes++;
    for (uint16_t i = 0; i < q->niov; i++) {
        memcpy(f->out + f->out_len, q->iov[i].base, q->iov[i].len);
        f->out_len += q->iov[i].len;
    }
    if (f->write_rc == 0) {
        q->writing = 1;
        return 0;
    }
    sl_outq_reset(q);
    return 1;
}
static void ds_arm(sl_downstream_t *d, uint64_t ms) {
    (void)d;
    (void)ms;
}
static void ds_finish(sl_downstream_t *d) {
    fds(d)->finishes++;
    sl__req_free(d->req);
    d->req = NULL;
}
static void ds_abort(sl_downstream_t *d) {
    fds(d)->aborts++;
    sl__req_abort(d->req);
    d->req = NULL;
}

static const sl_downstream_ops_t fake_ds_ops = {ds_body_buffered, ds_read_body, ds_wait_body, ds_pause,
                                                ds_send_continue, ds_write_head, ds_write, ds_arm,
                                                ds_finish, ds_abort};

/* ---- the fake exchange ---- */

typedef struct {
    int starts, writes, ends, heads, bodies, waits, pauses, arms, finishes, cancels;
    uint64_t last_arm;
    int head_status;       /* the head it answers (0: not yet) */
    const char *resp_body; /* handed in one piece, then the end */
    int body_more;         /* after the piece: nothing buffered (EAGAIN) until cleared */
    int write_rc;
} fake_x_t;

static fake_x_t FX; /* one fake exchange implementation per test (reset by fx_open) */

static int fx_start(sl_exchange_t *x) {
    FX.starts++;
    x->state = SL_X_OPEN;
    return 0;
}
static int fx_write(sl_exchange_t *x, sl_outq_t *q) {
    (void)x;
    FX.writes++;
    if (FX.write_rc == 0) q->writing = 1;
    else sl_outq_reset(q);
    return FX.write_rc;
}
static void fx_end(sl_exchange_t *x) {
    CHECK(x->sent);
    FX.ends++;
}
static int fx_head(sl_exchange_t *x, int *kind, const char **why) {
    (void)kind;
    (void)why;
    FX.heads++;
    if (!FX.head_status) return SL_EAGAIN;
    sl_h1_head_clear(&x->r->rhead);
    x->r->rhead.status = FX.head_status;
    x->r->rhead.major = 1;
    x->r->rhead.minor = 1;
    x->r->rhead.body_kind = FX.resp_body ? SL_BODY_LENGTH : SL_BODY_NONE;
    x->r->rhead.content_length = FX.resp_body ? strlen(FX.resp_body) : 0;
    x->state = SL_X_HEAD;
    return SL_OK;
}
static int fx_peek(sl_exchange_t *x, const char **why) {
    (void)x;
    (void)why;
    return FX.head_status ? SL_OK : SL_EAGAIN;
}
static int fx_body(sl_exchange_t *x, uint32_t room, sl_body_cb cb, void *ud, const char **why) {
    (void)x;
    (void)room;
    (void)why;
    FX.bodies++;
    if (!FX.resp_body) return FX.body_more ? SL_EAGAIN : SL_DONE;
    const char *b = FX.resp_body;
    FX.resp_body = NULL;
    return cb(ud, b, strlen(b)) ? SL_ERROR : SL_OK;
}
static int fx_wait(sl_exchange_t *x, const char **why) {
    (void)x;
    (void)why;
    FX.waits++;
    return SL_OK;
}
static void fx_pause(sl_exchange_t *x) {
    (void)x;
    FX.pauses++;
}
static void fx_arm(sl_exchange_t *x, uint64_t ms) {
    (void)x;
    FX.arms++;
    FX.last_arm = ms;
}
static bool fx_stale(const sl_exchange_t *x) {
    (void)x;
    return false;
}
static void fx_finish(sl_exchange_t *x) {
    CHECK_INT(x->state, SL_X_HEAD);
    FX.finishes++;
    x->state = SL_X_FREE;
}
static void fx_cancel(sl_exchange_t *x) {
    FX.cancels++;
    x->state = SL_X_FREE;
}

static const sl_exchange_ops_t fake_x_ops = {
    .name = "fake", .start = fx_start, .write = fx_write, .end_request = fx_end, .head = fx_head,
    .peek = fx_peek, .body = fx_body, .wait = fx_wait, .pause = fx_pause, .arm = fx_arm,
    .stale = fx_stale, .finish = fx_finish, .cancel = fx_cancel,
};

/* ---- the fixture: a worker, a config, a request in its content stage ---- */

typedef struct {
    sl_config_t *cfg;
    sl_worker_t w;
    fake_ds_t ds;
    sl_req_t *r;
} fx_t;

static void fx_open(fx_t *f) {
    static const char yaml[] = "listeners: [ { name: web, listen: 127.0.0.1:8080 } ]\n"
                               "upstreams: [ { name: u, targets: [ { address: 127.0.0.1:9 } ] } ]\n"
                               "routes: [ { name: r, match: { paths: [/] }, upstream: u } ]\n";
    sl_errors_t errs = {0};
    memset(f, 0, sizeof(*f));
    memset(&FX, 0, sizeof FX);
    FX.write_rc = 1;
    CHECK_INT(sl_config_parse("t.yaml", yaml, strlen(yaml), &f->cfg, &errs), 0);
    sl_errors_free(&errs);
    f->w.cfg = f->cfg;
    f->w.blocks.max_free = 8;
    CHECK_INT(sl_metrics_init(&f->w.metrics, f->cfg), 0);
    f->ds.ds.ops = &fake_ds_ops;
    f->ds.ds.lc = &f->cfg->listeners[0];
    f->ds.write_rc = 1;
    strcpy(f->ds.ds.peer, "192.0.2.7");
    f->r = sl__req_new(&f->w, &f->ds.ds);
    f->ds.ds.req = f->r;
    sl_req_t *r = f->r;
    r->head.method_id = HTTP_GET;
    r->head.major = r->head.minor = 1;
    r->body_done = 1;
    r->keep_alive = 1;
    r->start_ns = sl_now_ns();
    /* the content stage with a plugin's address: no balancer, breaker or retry to set up */
    r->addr.set = 1;
    r->mode = SL_MODE_PROXY;
    r->stage = SL_STAGE_RESPONSE;
    sl__exchange_init(&r->at.x[0], r, &fake_x_ops, &sl__proxy_exchange_cb);
    sl__exchange_init(&r->at.x[1], r, &fake_x_ops, &sl__proxy_exchange_cb);
}

static void fx_close(fx_t *f) {
    if (f->ds.ds.req) sl__req_abort(f->ds.ds.req); /* a request still running: its exchanges go */
    while (f->w.free_reqs) {
        sl_req_t *n = f->w.free_reqs->free_next;
        free(f->w.free_reqs);
        f->w.free_reqs = n;
    }
    sl_metrics_free(&f->w.metrics);
    sl_blockpool_destroy(&f->w.blocks);
    sl_config_free(f->cfg);
}

/* the current exchange started, as sl__proxy_connect_target does */
static sl_exchange_t *started(fx_t *f) {
    sl_exchange_t *x = sl__req_x(f->r);
    sl__proxy_connect_target(f->r);
    CHECK_INT(FX.starts, 1);
    return x;
}

/* ---- proxy.c ---- */

static void test_response_pumped_and_exchange_finished(void) {
    fx_t f;
    fx_open(&f);
    sl_exchange_t *x = started(&f);
    CHECK_INT(x->sent, 1); /* no body: the request ended at once */
    CHECK_INT(FX.ends, 1);
    CHECK_INT((int)FX.last_arm, 30000); /* the read timeout of an address's defaults */
    sl__proxy_exchange_cb.on_readable(x); /* nothing yet */
    CHECK_INT(f.ds.heads, 0);
    FX.head_status = 200;
    FX.resp_body = "hello";
    sl__proxy_exchange_cb.on_readable(x);
    CHECK_INT(f.ds.heads, 1);
    CHECK_INT(f.ds.head_status, 200);
    CHECK_INT((int)f.ds.out_len, 5);
    CHECK(memcmp(f.ds.out, "hello", 5) == 0);
    CHECK_INT(FX.finishes, 1);
    CHECK_INT(FX.cancels, 0);
    CHECK_INT(f.ds.finishes, 1);
    CHECK_INT(x->state, SL_X_FREE);
    fx_close(&f);
}

static void test_backpressure_pauses_then_reads_on(void) {
    fx_t f;
    fx_open(&f);
    sl_exchange_t *x = started(&f);
    f.ds.write_rc = 0; /* the client's write stays in flight */
    FX.head_status = 200;
    FX.resp_body = "01234";
    FX.body_more = 1; /* the rest of the body has not arrived */
    sl__proxy_exchange_cb.on_readable(x);
    CHECK_INT(f.ds.writes, 1);
    CHECK_INT(FX.pauses, 1); /* nothing more is read meanwhile */
    CHECK_INT(FX.waits, 0);
    f.ds.write_rc = 1;
    sl__req_on_written(f.r, 0); /* the write completed: everything handed went out */
    CHECK_INT(FX.waits, 1);     /* so the exchange reads on */
    CHECK_INT(f.ds.finishes, 0);
    FX.resp_body = "56789";
    FX.body_more = 0;
    sl__proxy_exchange_cb.on_readable(x); /* the rest, and the body's end */
    CHECK_INT((int)f.ds.out_len, 10);
    CHECK(memcmp(f.ds.out, "0123456789", 10) == 0);
    CHECK_INT(f.ds.finishes, 1);
    CHECK_INT(FX.finishes, 1);
    fx_close(&f);
}

static void test_failure_before_head_is_a_gateway_502(void) {
    fx_t f;
    fx_open(&f);
    sl_exchange_t *x = started(&f);
    sl__proxy_exchange_cb.on_failed(x, 502, SL_FAIL_RESET, "upstream reset the stream");
    CHECK_INT(FX.cancels, 1);
    CHECK_INT(f.ds.heads, 1);
    CHECK_INT(f.ds.head_status, 502);
    CHECK(f.ds.out_len > 0 && strstr(f.ds.out, "bad gateway") != NULL);
    CHECK_INT(f.ds.aborts, 0);
    CHECK_INT(f.ds.finishes, 1);
    fx_close(&f);
}

static void test_failure_after_head_aborts_the_client(void) {
    fx_t f;
    fx_open(&f);
    sl_exchange_t *x = started(&f);
    f.ds.write_rc = 0;
    FX.head_status = 200;
    FX.resp_body = "part";
    sl__proxy_exchange_cb.on_readable(x); /* head and a piece went to the socket */
    CHECK_INT(f.ds.heads, 1);
    sl__proxy_exchange_cb.on_failed(x, 502, SL_FAIL_RESET, "upstream reset mid-body");
    CHECK_INT(f.ds.heads, 1); /* never a second status line */
    CHECK_INT(f.ds.aborts, 1);
    CHECK_INT(FX.cancels, 1);
    fx_close(&f);
}

static void test_request_body_goes_up(void) {
    fx_t f;
    fx_open(&f);
    sl_req_t *r = f.r;
    r->body_done = 0;
    r->head.body_kind = SL_BODY_LENGTH;
    r->head.content_length = 3;
    f.ds.body = "abc";
    f.ds.body_left = 3;
    FX.write_rc = 0; /* the upstream takes it later */
    sl_exchange_t *x = started(&f);
    CHECK_INT(FX.writes, 1);
    CHECK(r->upq.writing);
    CHECK_INT((int)FX.last_arm, 30000); /* the write timeout while the write is blocked */
    CHECK_INT(x->sent, 0);
    CHECK_INT(FX.ends, 0);
    sl__proxy_exchange_cb.on_written(x);
    CHECK_INT(r->body_done, 1);
    CHECK_INT(x->sent, 1);
    CHECK_INT(FX.ends, 1);
    fx_close(&f);
}

static void test_hedge_answering_first_is_promoted(void) {
    fx_t f;
    fx_open(&f);
    sl_req_t *r = f.r;
    sl_exchange_t *first = started(&f);
    sl_exchange_t *hedge = sl__req_hedge_x(r);
    hedge->whole = 1; /* as hedge_fire starts it */
    CHECK_INT(hedge->ops->start(hedge), 0);
    sl__proxy_exchange_cb.on_readable(hedge); /* no answer yet: nothing changes */
    CHECK(sl__req_x(r) == first);
    FX.head_status = 204;
    sl__proxy_exchange_cb.on_readable(hedge);
    CHECK(sl__req_x(r) == hedge); /* promoted: cur flipped, nothing moved */
    CHECK_INT(first->state, SL_X_FREE);
    CHECK_INT(FX.cancels, 1); /* the loser */
    CHECK_INT(f.ds.head_status, 204);
    CHECK_INT(FX.finishes, 1); /* the winner */
    CHECK_INT(f.ds.finishes, 1);
    fx_close(&f);
}

/* ---- request.c ---- */

static void test_request_objects_are_recycled(void) {
    fx_t f;
    fx_open(&f);
    sl_req_t *r = f.r;
    sl__req_free(r);
    f.ds.ds.req = NULL;
    CHECK(f.w.free_reqs == r);
    sl_req_t *again = sl__req_new(&f.w, &f.ds.ds);
    CHECK(again == r); /* no allocation per request in steady state */
    CHECK_INT(again->at.x[0].state, SL_X_FREE);
    CHECK_INT(again->resp.state, SL_RESP_NONE);
    CHECK_INT(again->at.next_target, -1);
    f.ds.ds.req = again;
    fx_close(&f);
}

static void test_response_state_moves_forward(void) {
    fx_t f;
    fx_open(&f);
    sl_req_t *r = f.r;
    CHECK(!sl__req_resp_head(r));
    sl__req_resp_state(r, SL_RESP_HEAD);
    CHECK(sl__req_resp_head(r) && !sl__req_resp_done(r));
    sl__req_resp_state(r, SL_RESP_NONE); /* nothing was written: a clean 502 may follow */
    sl__req_resp_state(r, SL_RESP_DONE);
    CHECK(sl__req_resp_done(r));
    fx_close(&f);
}

static void test_abort_cancels_the_exchanges(void) {
    fx_t f;
    fx_open(&f);
    sl_req_t *r = f.r;
    started(&f);
    sl_exchange_t *hedge = sl__req_hedge_x(r);
    hedge->whole = 1;
    hedge->ops->start(hedge);
    CHECK(sl__req_upstream_busy(r));
    f.ds.ds.ops->abort(&f.ds.ds);
    CHECK_INT(FX.cancels, 2);
    CHECK_INT(f.ds.aborts, 1);
    fx_close(&f);
}

int main(int argc, char **argv) {
    static const check_test_t tests[] = {
        {"response_pumped_and_exchange_finished", test_response_pumped_and_exchange_finished},
        {"backpressure_pauses_then_reads_on", test_backpressure_pauses_then_reads_on},
        {"failure_before_head_is_a_gateway_502", test_failure_before_head_is_a_gateway_502},
        {"failure_after_head_aborts_the_client", test_failure_after_head_aborts_the_client},
        {"request_body_goes_up", test_request_body_goes_up},
        {"hedge_answering_first_is_promoted", test_hedge_answering_first_is_promoted},
        {"request_objects_are_recycled", test_request_objects_are_recycled},
        {"response_state_moves_forward", test_response_state_moves_forward},
        {"abort_cancels_the_exchanges", test_abort_cancels_the_exchanges},
    };
    return check_main(tests, sizeof(tests) / sizeof(tests[0]), argc, argv);
}
