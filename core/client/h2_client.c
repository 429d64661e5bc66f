/* h2_client.c — the HTTP/2 client driver (h2_client.h): nghttp2's client session and its
 * callbacks, turned into the few events a user of a response needs.
 *
 * nghttp2 calls back with the session's user data, the driver (sl_h2c_t); a stream's user
 * data is the user's embedded sl_h2c_stream_t, so an event reaches the user's stream
 * without a lookup of the driver's own. The state a response's reading needs (a 1xx being
 * received, the head seen, the end, the close) lives in that embedded struct, written only
 * here.
 */
#include "client/h2_client.h"

#include <stdlib.h>

#include "base/common.h"

static sl_h2c_stream_t *stream_of(nghttp2_session *ss, int32_t id) {
    return id > 0 ? nghttp2_session_get_stream_user_data(ss, id) : NULL;
}

static ssize_t on_send(nghttp2_session *ss, const uint8_t *data, size_t len, int flags, void *ud) {
    sl_h2c_t *c = ud;
    (void)ss;
    (void)flags;
    long n = c->ops->send(c->ud, data, len);
    if (SL_LIKELY(n >= 0)) return (ssize_t)n;
    return n == SL_EAGAIN ? NGHTTP2_ERR_WOULDBLOCK : NGHTTP2_ERR_CALLBACK_FAILURE;
}

/* A header block begins: its stream is looked up here, once, for every field of the block
 * (HTTP/2 never interleaves two blocks). */
static int on_begin_headers(nghttp2_session *ss, const nghttp2_frame *frame, void *ud) {
    sl_h2c_t *c = ud;
    c->cur = frame->hd.type == NGHTTP2_HEADERS ? stream_of(ss, frame->hd.stream_id) : NULL;
    c->cur_id = c->cur ? frame->hd.stream_id : 0;
    if (c->cur) c->cur->head_bytes = 0; /* each block has the limit: trailers are not the head's */
    return 0;
}

/* An op's answer goes back to nghttp2 as it is (0 or SL_H2C_RESET): a tail call. */
static int on_header(nghttp2_session *ss, const nghttp2_frame *frame, const uint8_t *name, size_t nl,
                     const uint8_t *value, size_t vl, uint8_t flags, void *ud) {
    sl_h2c_t *c = ud;
    sl_h2c_stream_t *st = c->cur;
    (void)ss;
    (void)flags;
    if (frame->hd.stream_id != c->cur_id) return 0;
    st->head_bytes += (uint32_t)(nl + vl + 32);
    if (c->max_head_bytes && st->head_bytes > c->max_head_bytes) {
        st->head_too_big = 1;
        return SL_H2C_RESET;
    }
    int rc = 0;
    if (st->head_done) {
        rc = c->ops->on_trailer ? c->ops->on_trailer(c->ud, st, name, nl, value, vl) : 0;
        st->field_refused |= rc != 0;
        return rc;
    }
    if (nl == 7 && memcmp(name, ":status", 7) == 0) {
        int status = 0;
        for (size_t i = 0; i < vl; i++) status = status * 10 + (value[i] - '0'); /* nghttp2 checked it */
        st->interim = status < 200;
        return st->interim || !c->ops->on_status ? 0 : c->ops->on_status(c->ud, st, status);
    }
    if (st->interim || (nl && name[0] == ':')) return 0;
    rc = c->ops->on_field ? c->ops->on_field(c->ud, st, name, nl, value, vl) : 0;
    st->field_refused |= rc != 0;
    return rc;
}

static int on_frame_recv(nghttp2_session *ss, const nghttp2_frame *frame, void *ud) {
    sl_h2c_t *c = ud;
    switch (frame->hd.type) {
    case NGHTTP2_SETTINGS:
        if (!(frame->hd.flags & NGHTTP2_FLAG_ACK) && c->ops->on_settings) {
            uint32_t max = nghttp2_session_get_remote_settings(ss, NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS);
            c->ops->on_settings(c->ud, max);
        }
        return 0;
    case NGHTTP2_GOAWAY:
        c->last_id = frame->goaway.last_stream_id;
        if (c->ops->on_goaway) c->ops->on_goaway(c->ud, c->last_id, frame->goaway.error_code);
        return 0;
    case NGHTTP2_HEADERS:
    case NGHTTP2_DATA: break;
    default: return 0;
    }
    sl_h2c_stream_t *st = stream_of(ss, frame->hd.stream_id);
    if (!st) return 0;
    bool end = frame->hd.flags & NGHTTP2_FLAG_END_STREAM;
    if (frame->hd.type == NGHTTP2_HEADERS && !st->head_done) {
        if (st->interim) {
            st->interim = 0; /* a 1xx head ends here */
            return 0;
        }
        st->head_done = 1;
        if (c->ops->on_head) c->ops->on_head(c->ud, st, end);
    }
    if (end) {
        st->remote_done = 1;
        if (c->ops->on_end) c->ops->on_end(c->ud, st);
    }
    return 0;
}

static int on_data_chunk(nghttp2_session *ss, uint8_t flags, int32_t id, const uint8_t *data, size_t len,
                         void *ud) {
    sl_h2c_t *c = ud;
    (void)flags;
    if (c->manual_window) nghttp2_session_consume_connection(ss, len);
    sl_h2c_stream_t *st = stream_of(ss, id);
    if (!st) return 0;
    int rc = c->ops->on_data ? c->ops->on_data(c->ud, st, data, len) : 1;
    if (rc < 0) return SL_H2C_RESET;
    if (rc > 0 && c->manual_window) nghttp2_session_consume_stream(ss, id, len);
    return 0;
}

static int on_stream_close(nghttp2_session *ss, int32_t id, uint32_t code, void *ud) {
    sl_h2c_t *c = ud;
    sl_h2c_stream_t *st = stream_of(ss, id);
    if (!st) return 0;
    if (c->cur == st) c->cur = NULL, c->cur_id = 0;
    st->closed = 1;
    st->close_code = code;
    if (code == NGHTTP2_REFUSED_STREAM) st->refused = 1;
    if (c->ops->on_close) c->ops->on_close(c->ud, st);
    return 0;
}

/* A request HEADERS that never left (the session is going away): never processed. */
static int on_frame_not_send(nghttp2_session *ss, const nghttp2_frame *frame, int err, void *ud) {
    (void)ud;
    (void)err;
    sl_h2c_stream_t *st = frame->hd.type == NGHTTP2_HEADERS ? stream_of(ss, frame->hd.stream_id) : NULL;
    if (st) st->refused = 1;
    return 0;
}

/* The data provider of every request with a body: its user's read_body. */
static ssize_t on_read_body(nghttp2_session *ss, int32_t id, uint8_t *buf, size_t len, uint32_t *flags,
                            nghttp2_data_source *src, void *ud) {
    sl_h2c_t *c = ud;
    sl_h2c_stream_t *st = src->ptr;
    (void)ss;
    (void)id;
    bool eof = false;
    long n = c->ops->read_body(c->ud, st, buf, len, &eof);
    if (n < 0) return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
    if (eof) {
        *flags |= NGHTTP2_DATA_FLAG_EOF;
        return (ssize_t)n;
    }
    if (!n) {
        st->deferred = 1;
        return NGHTTP2_ERR_DEFERRED;
    }
    return (ssize_t)n;
}

int sl_h2c_init(sl_h2c_t *c, const sl_h2c_opts_t *o, const sl_h2c_ops_t *ops, void *ud) {
    nghttp2_session_callbacks *cb = NULL;
    nghttp2_option *opt = NULL;
    *c = (sl_h2c_t){.ops = ops, .ud = ud, .last_id = INT32_MAX, .max_head_bytes = o->max_head_bytes,
                    .manual_window = o->manual_window};
    if (nghttp2_session_callbacks_new(&cb) != 0 || nghttp2_option_new(&opt) != 0) goto fail;
    nghttp2_session_callbacks_set_send_callback(cb, on_send);
    nghttp2_session_callbacks_set_on_begin_headers_callback(cb, on_begin_headers);
    nghttp2_session_callbacks_set_on_header_callback(cb, on_header);
    nghttp2_session_callbacks_set_on_frame_recv_callback(cb, on_frame_recv);
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cb, on_data_chunk);
    nghttp2_session_callbacks_set_on_stream_close_callback(cb, on_stream_close);
    nghttp2_session_callbacks_set_on_frame_not_send_callback(cb, on_frame_not_send);
    if (o->manual_window) nghttp2_option_set_no_auto_window_update(opt, 1);
    if (o->assume_max_streams) nghttp2_option_set_peer_max_concurrent_streams(opt, o->assume_max_streams);
    if (nghttp2_session_client_new3(&c->ss, cb, c, opt, o->mem) != 0) goto fail;
    nghttp2_option_del(opt);
    nghttp2_session_callbacks_del(cb);
    opt = NULL;
    cb = NULL;
    nghttp2_settings_entry iv[2] = {{NGHTTP2_SETTINGS_ENABLE_PUSH, 0}};
    size_t niv = 1;
    if (o->stream_window)
        iv[niv++] = (nghttp2_settings_entry){NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, o->stream_window};
    if (nghttp2_submit_settings(c->ss, NGHTTP2_FLAG_NONE, iv, niv) != 0) goto fail;
    if (o->conn_window &&
        nghttp2_session_set_local_window_size(c->ss, NGHTTP2_FLAG_NONE, 0, (int32_t)o->conn_window) != 0)
        goto fail;
    return SL_OK;
fail:
    if (opt) nghttp2_option_del(opt);
    if (cb) nghttp2_session_callbacks_del(cb);
    sl_h2c_fini(c);
    return SL_ERROR;
}

void sl_h2c_fini(sl_h2c_t *c) {
    if (c->ss) nghttp2_session_del(c->ss);
    c->ss = NULL;
}

int32_t sl_h2c_submit(sl_h2c_t *c, sl_h2c_stream_t *st, const nghttp2_nv *nva, size_t n, bool body) {
    nghttp2_data_provider prd = {.source = {.ptr = st}, .read_callback = on_read_body};
    int32_t id = nghttp2_submit_request(c->ss, NULL, nva, n, body ? &prd : NULL, st);
    if (id < 0) return SL_ERROR;
    st->id = id;
    return id;
}
