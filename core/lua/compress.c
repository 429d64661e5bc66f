/* compress.c — the FFI of the compression plugin (sluice.compress): a request's streaming
 * encoder (proto/compress.h), started in header_filter and fed in body_filter. The encoder
 * hangs on the request (r->compress), so sl__req_free releases it whatever ends the
 * request: the body's end, a failed filter, an upstream error, the client going away. */
#include "http/request.h"
#include "proto/compress.h"
#include "sluice.h"

int sl_ffi_compress_begin(sl_req_t *r, int coding, int level, const char **err) {
    if (r->lua.phase != SL_PHASE_HEADER_FILTER) {
        *err = "an encoder starts in header_filter only";
        return SL_ERROR;
    }
    sl_compress_t *z = sl_compress_new(coding, level, &r->w->blocks, err);
    if (!z) return SL_ERROR;
    sl_compress_free(r->compress); /* a response that replaced one begun for (a 502 after a head) */
    r->compress = z;
    return SL_OK;
}

int sl_ffi_compress_piece(sl_req_t *r, const char *p, size_t len, int eof, const char **out, size_t *out_len,
                          const char **err) {
    if (r->lua.phase != SL_PHASE_BODY_FILTER || !r->compress) {
        *err = r->compress ? "pieces are encoded in body_filter only" : "no encoder was begun for this response";
        return SL_ERROR;
    }
    sl_str_t o;
    if (sl_compress_piece(r->compress, p, len, eof != 0, &o, err) != SL_OK) return SL_ERROR;
    *out = o.p;
    *out_len = o.len;
    return SL_OK;
}

int64_t sl_ffi_resp_body_length(sl_req_t *r) {
    if (r->mode == SL_MODE_PROXY && r->status) {
        if (r->rhead.body_kind == SL_BODY_LENGTH) return (int64_t)r->rhead.content_length;
        return r->rhead.body_kind == SL_BODY_NONE ? 0 : -1;
    }
    if (r->exit.status) return (int64_t)r->exit.body.len; /* a plugin's answer (response.exit) */
    return -1;
}
