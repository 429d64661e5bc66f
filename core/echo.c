/* echo.c — the built-in echo answer: the request as JSON.
 *
 * Shape (DESIGN.md, `echo`): {"method","path","query","headers":{lower-case
 * name: value},"body"}. Repeated headers are joined with ", ". It is a test and
 * demo responder, not a hot path: the answer is built in a malloc'ed buffer.
 */
#include <stdlib.h>

#include "http_conn.h"

static bool put_lower_json(sl_wbuf_t *b, sl_str_t s) {
    char tmp[256];
    while (s.len) {
        size_t n = SL_MIN(s.len, sizeof(tmp));
        for (size_t i = 0; i < n; i++) tmp[i] = sl_lower(s.p[i]);
        if (!sl_wbuf_json_str(b, (sl_str_t){tmp, n})) return false;
        s.p += n, s.len -= n;
    }
    return true;
}

int sl__echo_build(sl_req_t *r, sl_str_t *out) {
    const sl_h1_head_t *h = &r->head;
    size_t need = 128 + r->heap_len * 6 + h->target.len * 6;
    for (uint16_t i = 0; i < h->nheaders; i++) need += (h->headers[i].name.len + h->headers[i].value.len) * 6 + 8;
    char *p = malloc(need + r->heap_len);
    if (!p) return SL_ERROR;
    /* The body collected so far sits in r->heap; keep it at the end of the new buffer. */
    char *body = p + need;
    if (r->heap_len) memcpy(body, r->heap, r->heap_len);
    sl_wbuf_t b = {p, 0, need};
    bool ok = SL_WBUF_LIT(&b, "{\"method\":\"") && sl_wbuf_json_str(&b, h->method) &&
              SL_WBUF_LIT(&b, "\",\"path\":\"") && sl_wbuf_json_str(&b, h->path) &&
              SL_WBUF_LIT(&b, "\",\"query\":\"") && sl_wbuf_json_str(&b, h->query) &&
              SL_WBUF_LIT(&b, "\",\"headers\":{");
    bool first = true;
    for (uint16_t i = 0; i < h->nheaders && ok; i++) {
        const sl_h1_header_t *x = &h->headers[i];
        bool seen = false;
        for (uint16_t j = 0; j < i && !seen; j++) seen = sl_str_ieq2(h->headers[j].name, x->name);
        if (seen) continue;
        ok = (first || SL_WBUF_LIT(&b, ",")) && SL_WBUF_LIT(&b, "\"") && put_lower_json(&b, x->name) &&
             SL_WBUF_LIT(&b, "\":\"") && sl_wbuf_json_str(&b, x->value);
        for (uint16_t j = i + 1; j < h->nheaders && ok; j++)
            if (sl_str_ieq2(h->headers[j].name, x->name))
                ok = SL_WBUF_LIT(&b, ", ") && sl_wbuf_json_str(&b, h->headers[j].value);
        ok = ok && SL_WBUF_LIT(&b, "\"");
        first = false;
    }
    ok = ok && SL_WBUF_LIT(&b, "},\"body\":\"") && sl_wbuf_json_str(&b, (sl_str_t){body, r->heap_len}) &&
         SL_WBUF_LIT(&b, "\"}\n");
    if (!ok) {
        free(p);
        return SL_ERROR;
    }
    free(r->heap);
    r->heap = p;
    r->heap_len = b.len;
    r->heap_cap = need + r->heap_len;
    *out = (sl_str_t){p, b.len};
    return SL_OK;
}
