/* http1.c — HTTP/1.1 heads and bodies: a byte scanner, llhttp, and the checks llhttp misses. */
#include "proto/http1.h"

#include <stdlib.h>

/* ---- llhttp callbacks: collect slices of the head into h->head ---- */

static sl_h1_t *parser_of(llhttp_t *ll) { return (sl_h1_t *)ll->data; }

/* Slices arrive in pieces when llhttp is fed in pieces; the head is always one
 * contiguous range of the caller's buffer, so a continuation extends the slice. */
static void extend(sl_str_t *s, const char *at, size_t len) {
    if (s->p == NULL)
        s->p = at, s->len = len;
    else
        s->len = (size_t)(at + len - s->p);
}

static int on_method(llhttp_t *ll, const char *at, size_t len) {
    sl_h1_t *h = parser_of(ll);
    if (h->head) extend(&h->head->method, at, len);
    return 0;
}

static int on_url(llhttp_t *ll, const char *at, size_t len) {
    sl_h1_t *h = parser_of(ll);
    if (h->head) extend(&h->head->target, at, len);
    return 0;
}

static int on_status(llhttp_t *ll, const char *at, size_t len) {
    sl_h1_t *h = parser_of(ll);
    if (h->head) extend(&h->head->reason, at, len);
    return 0;
}

static int on_header_field(llhttp_t *ll, const char *at, size_t len) {
    sl_h1_t *h = parser_of(ll);
    sl_h1_head_t *hd = h->head;
    if (!hd) return 0; /* trailers of a chunked body: parsed by llhttp, dropped by us */
    if (h->last_was_value || hd->nheaders == 0) {
        sl_h1_header_t *x = sl_h1_push(hd);
        if (!x) {
            /* over the limit, or no spill room: an upstream's fault is 502 */
            h->status_err = h->type == HTTP_REQUEST ? 431 : 502;
            return -1;
        }
        x->name = (sl_str_t){at, len};
        x->value = (sl_str_t){NULL, 0};
        x->hop = 0;
        h->last_was_value = 0;
    } else {
        extend(&hd->headers[hd->nheaders - 1].name, at, len);
    }
    return 0;
}

static int on_header_value(llhttp_t *ll, const char *at, size_t len) {
    sl_h1_t *h = parser_of(ll);
    sl_h1_head_t *hd = h->head;
    if (!hd || hd->nheaders == 0) return 0;
    extend(&hd->headers[hd->nheaders - 1].value, at, len);
    h->last_was_value = 1;
    return 0;
}

static int on_headers_complete(llhttp_t *ll) {
    sl_h1_t *h = parser_of(ll);
    /* A reply to HEAD carries no body whatever its headers say. */
    if (h->type == HTTP_RESPONSE && h->req_was_head) return 1;
    return 0;
}

static int on_message_complete(llhttp_t *ll) {
    sl_h1_t *h = parser_of(ll);
    h->done = 1;
    return HPE_PAUSED; /* one message per call: the caller decides when the next begins */
}

static const llhttp_settings_t settings = {
    .on_method = on_method,
    .on_url = on_url,
    .on_status = on_status,
    .on_header_field = on_header_field,
    .on_header_value = on_header_value,
    .on_headers_complete = on_headers_complete,
    .on_message_complete = on_message_complete,
};

void sl_h1_init(sl_h1_t *h, int type, const sl_h1_limits_t *limits) {
    memset(h, 0, sizeof(*h));
    llhttp_init(&h->ll, (llhttp_type_t)type, &settings);
    h->ll.data = h;
    h->type = (uint8_t)type;
    h->limits = limits;
}

/* ---- the byte scanner: find the head's end and reject what llhttp lets through ---- */

/* Bytes that are plain in a head line: at least 0x20 and not DEL (a tab is checked byte by
 * byte). SWAR (Hacker's Delight 6-1): a byte below 0x20 sets its top bit in
 * (x - 0x20..) & ~x, and DEL is a zero byte of x ^ 0x7f..; both tests are exact for whether
 * any byte of the word qualifies, and for which is the first. With `no_sp`, SP (0x20) is not
 * plain either: it is the request line's separator. */
#define SL_ONES 0x0101010101010101ull
#define SL_HIGH 0x8080808080808080ull

static inline uint64_t word_special(uint64_t x, bool no_sp) {
    uint64_t low = (x - 0x20 * SL_ONES) & ~x;
    uint64_t d = x ^ (0x7f * SL_ONES);
    uint64_t del = (d - SL_ONES) & ~d;
    uint64_t sp = 0;
    if (no_sp) {
        uint64_t e = x ^ (0x20 * SL_ONES);
        sp = (e - SL_ONES) & ~e;
    }
    return (low | del | sp) & SL_HIGH;
}

/* The first index in [i, lim) whose byte is not plain (see word_special), or lim. */
static inline size_t skip_plain(const char *p, size_t i, size_t lim, bool no_sp) {
    while (i + 8 <= lim) {
        uint64_t x;
        memcpy(&x, p + i, 8);
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
        uint64_t m = word_special(x, no_sp);
        /* A borrow can only flag bytes above a true one: the lowest flag is exact. */
        if (m) return i + (size_t)(__builtin_ctzll(m) >> 3);
#else
        if (word_special(x, no_sp)) break;
#endif
        i += 8;
    }
    for (; i < lim; i++) {
        unsigned char c = (unsigned char)p[i];
        if (c < 0x20 || c == 0x7f || (no_sp && c == ' ')) break;
    }
    return i;
}

/* The field lines of a head that begins at s, from i (just after the first line's LF) to
 * the blank line: the checks of scan_head's byte loop, made a line at a time. A line starts
 * with a byte that is neither SP, HTAB nor a control (obs-fold and bare LF are errors);
 * runs of plain bytes and HTABs follow; CRLF ends it. No byte at or past s + max_header_size
 * is taken. Same returns as scan_head. */
static int scan_fields(const sl_h1_t *h, const char *p, size_t n, size_t s, size_t i, size_t *start,
                       size_t *end, int *status) {
    size_t max_head = h->limits->max_header_size;
    size_t head_lim = SL_MIN(n, s + max_head);
    bool request = h->type == HTTP_REQUEST;
    for (;;) {
        if (i == n) return SL_EAGAIN;
        if (i - s >= max_head) goto too_big;
        unsigned char c = (unsigned char)p[i];
        if (c == '\r') { /* the blank line */
            if (i + 1 == n) return SL_EAGAIN;
            if (p[i + 1] != '\n') goto bad;
            if (i + 1 - s >= max_head) goto too_big;
            *start = s;
            *end = i + 2;
            return SL_OK;
        }
        if (c == ' ' || c < 0x20 || c == 0x7f) goto bad; /* obs-fold, bare LF, controls */
        for (i++;; i++) {
            i = skip_plain(p, i, head_lim, false);
            if (i == n) return SL_EAGAIN;
            if (i - s >= max_head) goto too_big;
            if (p[i] != '\t') break;
        }
        /* CRLF, or a bare LF, another control or DEL */
        if (p[i] != '\r') goto bad;
        if (i + 1 == n) return SL_EAGAIN;
        if (p[i + 1] != '\n') goto bad;
        if (i + 1 - s >= max_head) goto too_big;
        i += 2;
    }
too_big:
    *status = request ? 431 : 502;
    return SL_ERROR;
bad:
    *status = request ? 400 : 502;
    return SL_ERROR;
}

/* Returns SL_OK with *start (after leading empty lines) and *end (after the blank
 * line), SL_EAGAIN when the head is incomplete, SL_ERROR with *status. */
static int scan_head(const sl_h1_t *h, const char *p, size_t n, size_t *start, size_t *end,
                     int *status) {
    size_t i = 0;
    /* RFC 9112 2.2: a server SHOULD ignore at least one empty line before a request. */
    if (h->type == HTTP_REQUEST) {
        while (i + 1 < n && p[i] == '\r' && p[i + 1] == '\n' && i < 64) i += 2;
        if (i < n && (p[i] == '\r' || p[i] == '\n') && i + 1 >= n) return SL_EAGAIN;
    }
    size_t s = i, line_start = i, first_line_end = 0;
    int spaces = 0;
    uint32_t max_head = h->limits->max_header_size;
    uint32_t max_line = h->limits->max_request_line;
    int too_big = h->type == HTTP_REQUEST ? 431 : 502;

    bool request = h->type == HTTP_REQUEST;
    size_t head_lim = SL_MIN(n, s + max_head);
    for (; i < n; i++) {
        /* Inside a line, a run of bytes that need none of the checks below is skipped whole:
         * in a header line any byte but CR, LF and the controls other than HTAB; in the
         * request line those but SP and HTAB too, and only up to its length limit (the byte
         * loop reports 414 there). The head limit ends every run. Most of a head is such
         * runs: the skip takes them 8 bytes at a time. */
        if (i > line_start) {
            if (first_line_end || !request) {
                i = skip_plain(p, i, head_lim, false);
            } else {
                i = skip_plain(p, i, SL_MIN(head_lim, line_start + max_line), true);
            }
            if (i == n) break;
        }
        unsigned char c = (unsigned char)p[i];
        if (i - s >= max_head) {
            *status = first_line_end == 0 && h->type == HTTP_REQUEST ? 414 : too_big;
            return SL_ERROR;
        }
        if (c == '\r') {
            if (i + 1 == n) break; /* need the next byte */
            if (p[i + 1] != '\n') goto bad; /* bare CR */
            continue;
        }
        if (c == '\n') {
            if (i == s || p[i - 1] != '\r') goto bad; /* bare LF */
            size_t line_len = i - 1 - line_start;
            if (first_line_end == 0) {
                if (h->type == HTTP_REQUEST && line_len > max_line) {
                    *status = 414;
                    return SL_ERROR;
                }
                if (line_len == 0) goto bad;
                if (h->type == HTTP_REQUEST && (spaces != 2 || p[i - 2] == ' ')) goto bad;
                first_line_end = i + 1;
                return scan_fields(h, p, n, s, i + 1, start, end, status);
            } else if (line_len == 0) {
                *start = s;
                *end = i + 1;
                return SL_OK;
            }
            line_start = i + 1;
            continue;
        }
        if (i == line_start && (c == ' ' || c == '\t')) goto bad; /* obs-fold, or a line led by space */
        if (first_line_end == 0 && h->type == HTTP_REQUEST) {
            /* request-line = method SP request-target SP HTTP-version: one space each, no
             * tabs. llhttp skips repeated spaces even in strict mode. */
            if (c == '\t' || (c == ' ' && p[i - 1] == ' ')) goto bad;
            if (c == ' ' && ++spaces > 2) goto bad;
        }
        if ((c < 0x20 && c != '\t') || c == 0x7f) goto bad;        /* NUL and other controls */
        if (first_line_end == 0 && h->type == HTTP_REQUEST && i - line_start >= max_line) {
            *status = 414;
            return SL_ERROR;
        }
    }
    return SL_EAGAIN;
bad:
    *status = h->type == HTTP_REQUEST ? 400 : 502;
    return SL_ERROR;
}

/* ---- semantic checks on the parsed fields ---- */

static bool is_digits(sl_str_t v) {
    if (v.len == 0 || v.len > 18) return false; /* 18 digits cannot overflow uint64 */
    for (size_t i = 0; i < v.len; i++)
        if (v.p[i] < '0' || v.p[i] > '9') return false;
    return true;
}

static uint64_t to_u64(sl_str_t v) {
    uint64_t x = 0;
    for (size_t i = 0; i < v.len; i++) x = x * 10 + (uint64_t)(v.p[i] - '0');
    return x;
}

static sl_str_t trim(sl_str_t v) {
    while (v.len && (v.p[0] == ' ' || v.p[0] == '\t')) v.p++, v.len--;
    while (v.len && (v.p[v.len - 1] == ' ' || v.p[v.len - 1] == '\t')) v.len--;
    return v;
}

/* Iterates comma-separated list elements: returns false when none is left. */
static bool next_token(sl_str_t *list, sl_str_t *tok) {
    while (list->len) {
        const char *comma = memchr(list->p, ',', list->len);
        size_t n = comma ? (size_t)(comma - list->p) : list->len;
        *tok = trim((sl_str_t){list->p, n});
        list->p += comma ? n + 1 : n;
        list->len -= comma ? n + 1 : n;
        if (tok->len) return true;
    }
    return false;
}

static int hexval(unsigned char c) {
    if (c >= '0' && c <= '9') return c - '0';
    c |= 0x20;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
}

/* The bytes a Host may hold: a reg-name's or an IP literal's, a port's, pct-encoding
 * (letters, digits, "-._~:[]%"); a table, as the header check runs on every request. */
static const uint8_t host_chars[256] = {
    ['%'] = 1, ['-'] = 1, ['.'] = 1, [':'] = 1, ['['] = 1, [']'] = 1, ['_'] = 1, ['~'] = 1,
    ['0'] = 1, ['1'] = 1, ['2'] = 1, ['3'] = 1, ['4'] = 1, ['5'] = 1, ['6'] = 1, ['7'] = 1, ['8'] = 1, ['9'] = 1,
    ['A'] = 1, ['B'] = 1, ['C'] = 1, ['D'] = 1, ['E'] = 1, ['F'] = 1, ['G'] = 1, ['H'] = 1, ['I'] = 1,
    ['J'] = 1, ['K'] = 1, ['L'] = 1, ['M'] = 1, ['N'] = 1, ['O'] = 1, ['P'] = 1, ['Q'] = 1, ['R'] = 1,
    ['S'] = 1, ['T'] = 1, ['U'] = 1, ['V'] = 1, ['W'] = 1, ['X'] = 1, ['Y'] = 1, ['Z'] = 1,
    ['a'] = 1, ['b'] = 1, ['c'] = 1, ['d'] = 1, ['e'] = 1, ['f'] = 1, ['g'] = 1, ['h'] = 1, ['i'] = 1,
    ['j'] = 1, ['k'] = 1, ['l'] = 1, ['m'] = 1, ['n'] = 1, ['o'] = 1, ['p'] = 1, ['q'] = 1, ['r'] = 1,
    ['s'] = 1, ['t'] = 1, ['u'] = 1, ['v'] = 1, ['w'] = 1, ['x'] = 1, ['y'] = 1, ['z'] = 1,
};

static bool valid_host(sl_str_t v) {
    for (size_t i = 0; i < v.len; i++)
        if (!host_chars[(unsigned char)v.p[i]]) return false;
    return true;
}

/* An absolute-form target's authority with a port that says nothing dropped: the scheme's
 * default or an empty one (RFC 3986 6.2.3), so "http://a:80/" and "http://a/" name one
 * host, as they do to nginx. */
static sl_str_t authority_without_default_port(sl_str_t a, bool https) {
    size_t i = a.len;
    while (i > 0 && a.p[i - 1] >= '0' && a.p[i - 1] <= '9') i--;
    if (i == 0 || a.p[i - 1] != ':') return a;
    /* the port's colon follows the host: an IP literal's closing ']', or a name without colons */
    if (a.p[0] == '[' ? a.p[i - 2] != ']' : memchr(a.p, ':', i - 1) != NULL) return a;
    sl_str_t port = {a.p + i, a.len - i};
    if (port.len == 0 || (https ? SL_IEQ(port, "443") : SL_IEQ(port, "80"))) a.len = i - 1;
    return a;
}

/* Both found by scripts/difffuzz; llhttp passes them.
 * - A fragment is never part of a request-target (RFC 9112 3.2): "/admin#x" would route as
 *   a path of its own while an upstream that drops the fragment serves /admin (HAProxy
 *   refuses it too).
 * - A '%' must start a pct-encoded octet (RFC 3986 2.1): "/%", "/%zz" and "/%u0061" are
 *   decoded differently by different upstreams, or not at all (nginx refuses them). */
static bool valid_target_bytes(sl_str_t t) {
    for (size_t i = 0; i < t.len; i++) {
        if (t.p[i] == '#') return false;
        if (t.p[i] == '%' &&
            (i + 2 >= t.len || hexval((unsigned char)t.p[i + 1]) < 0 ||
             hexval((unsigned char)t.p[i + 2]) < 0))
            return false;
    }
    return true;
}

/* Marks hop-by-hop headers, including every header that Connection names. */
static bool hop_name(sl_str_t nm) {
    switch (nm.len) { /* the names by length: one or two compares instead of eight */
    case 2: return SL_IEQ(nm, "te");
    case 7: return SL_IEQ(nm, "trailer") || SL_IEQ(nm, "upgrade");
    case 10: return SL_IEQ(nm, "connection") || SL_IEQ(nm, "keep-alive");
    case 14: return SL_IEQ(nm, "content-length") || SL_IEQ(nm, "http2-settings");
    case 17: return SL_IEQ(nm, "transfer-encoding");
    default: return false;
    }
}

static bool hop_header(sl_str_t nm) {
    return hop_name(nm) || (nm.len >= 6 && sl_str_ieq((sl_str_t){nm.p, 6}, "proxy-", 6));
}

static void mark_hop(sl_h1_head_t *hd) {
    bool connection = false;
    for (uint16_t i = 0; i < hd->nheaders; i++) {
        sl_h1_header_t *x = &hd->headers[i];
        sl_str_t nm = x->name;
        if (hop_header(nm)) x->hop = 1;
        if (nm.len == 10 && SL_IEQ(nm, "connection")) connection = true;
    }
    for (uint16_t i = 0; connection && i < hd->nheaders; i++) {
        if (!SL_IEQ(hd->headers[i].name, "connection")) continue;
        sl_str_t list = hd->headers[i].value, tok;
        while (next_token(&list, &tok)) {
            if (SL_IEQ(tok, "close"))
                hd->flags |= SL_H1_CONN_CLOSE;
            else if (SL_IEQ(tok, "keep-alive"))
                hd->flags |= SL_H1_CONN_KEEPALIVE;
            else if (SL_IEQ(tok, "upgrade"))
                hd->flags |= SL_H1_CONN_UPGRADE;
            /* Connection can name extension fields, never Host: a request without Host
             * would reach the upstream (RFC 9110 7.6.1 lists what may be named). */
            if (SL_IEQ(tok, "host")) continue;
            for (uint16_t j = 0; j < hd->nheaders; j++)
                if (sl_str_ieq2(hd->headers[j].name, tok)) hd->headers[j].hop = 1;
        }
    }
}

/* Content-Length and Transfer-Encoding: one framing, stated once. Returns 0 or a status. */
static int check_framing(sl_h1_head_t *hd, bool request, bool *chunked, bool *has_cl) {
    const sl_h1_header_t *cl = NULL, *te = NULL;
    for (uint16_t i = 0; i < hd->nheaders; i++) {
        sl_h1_header_t *x = &hd->headers[i];
        if (SL_IEQ(x->name, "content-length")) {
            if (cl) return 400; /* duplicates, equal or not */
            cl = x;
        } else if (SL_IEQ(x->name, "transfer-encoding")) {
            if (te) return 400;
            te = x;
        }
    }
    *chunked = false;
    *has_cl = false;
    if (te) {
        if (cl) return 400;
        if (request && hd->minor == 0) return 400;
        sl_str_t list = te->value, tok;
        int n = 0, unknown = 0;
        bool last_chunked = false;
        while (next_token(&list, &tok)) {
            n++;
            last_chunked = SL_IEQ(tok, "chunked");
            if (!last_chunked && !SL_IEQ(tok, "gzip") && !SL_IEQ(tok, "deflate") &&
                !SL_IEQ(tok, "compress") && !SL_IEQ(tok, "x-gzip") && !SL_IEQ(tok, "identity"))
                unknown++;
        }
        if (unknown) return 501;
        /* Only a lone "chunked" is accepted: "identity, chunked", "chunked, chunked" and
         * codings sluice would have to decode are all ways to disagree with a peer. */
        if (n != 1 || !last_chunked) return request ? 400 : 501;
        *chunked = true;
    }
    if (cl) {
        if (!is_digits(cl->value)) return 400;
        hd->content_length = to_u64(cl->value);
        hd->flags |= SL_H1_HAS_CL;
        *has_cl = true;
    }
    return 0;
}

/* `tokens`: every field name is known to be a token already (the fast path read them so). */
static int check_request(sl_h1_head_t *hd, bool tokens) {
    if (hd->major != 1 || hd->minor > 1) return 400;
    sl_h1_header_t *host = NULL;
    for (uint16_t i = 0; i < hd->nheaders; i++) {
        sl_h1_header_t *x = &hd->headers[i];
        /* RFC 9110 5.1: field-name = token. Without llhttp's strict build "X Y: v" passes,
         * and "Host : v" beside a real Host, which a peer may read as Host. */
        if (!tokens && !sl_is_token(x->name)) return 400;
        if (SL_IEQ(x->name, "host")) {
            if (host) return 400;
            host = x;
        } else if (SL_IEQ(x->name, "expect")) {
            if (!SL_IEQ(x->value, "100-continue")) return 417;
            if (hd->minor == 1) hd->flags |= SL_H1_EXPECT_CONTINUE;
            x->hop = 1; /* the gateway answers it itself */
        }
    }
    if (host) {
        if (!valid_host(host->value)) return 400;
        hd->host = host->value;
    } else if (hd->minor == 1) {
        return 400;
    }

    sl_str_t t = hd->target;
    if (hd->method_id == HTTP_CONNECT) return 405;
    if (!valid_target_bytes(t)) return 400;
    if (t.len && t.p[0] == '/') {
        /* origin-form */
    } else if (t.len == 1 && t.p[0] == '*') {
        if (hd->method_id != HTTP_OPTIONS) return 400;
    } else if (t.len > 7 && (sl_str_ieq((sl_str_t){t.p, 7}, "http://", 7) ||
                             (t.len > 8 && sl_str_ieq((sl_str_t){t.p, 8}, "https://", 8)))) {
        size_t skip = (t.p[4] == ':') ? 7 : 8;
        const char *a = t.p + skip, *e = t.p + t.len;
        const char *slash = memchr(a, '/', (size_t)(e - a));
        const char *q = memchr(a, '?', (size_t)(e - a));
        const char *stop = slash ? slash : e;
        if (q && q < stop) stop = q;
        hd->authority = (sl_str_t){a, (size_t)(stop - a)};
        if (hd->authority.len == 0 || !valid_host(hd->authority)) return 400;
        hd->authority = authority_without_default_port(hd->authority, skip == 8);
        if (hd->authority.len == 0) return 400; /* "http://:80/" */
        /* RFC 9112 3.2.2: the target's authority is the request's host. A Host naming
         * another host is still refused (which would routing believe, and which a peer
         * behind?); one that differs only by the scheme's default port or by case names
         * the same host. Only HTTP/1.0 may have none. The Host field takes the authority's
         * value, so that routing, plugins and the upstream all read one host. */
        if (host && !sl_str_ieq2(hd->authority, authority_without_default_port(host->value, skip == 8)))
            return 400;
        hd->host = hd->authority;
        if (host) host->value = hd->authority;
        hd->flags |= SL_H1_ABSOLUTE_FORM;
        t = (sl_str_t){stop, (size_t)(e - stop)};
    } else {
        return 400;
    }
    const char *qm = memchr(t.p, '?', t.len);
    if (qm) {
        hd->path = (sl_str_t){t.p, (size_t)(qm - t.p)};
        hd->query = (sl_str_t){qm + 1, (size_t)(t.p + t.len - qm - 1)};
    } else {
        hd->path = t;
        hd->query = (sl_str_t){t.p + t.len, 0};
    }
    if (hd->path.len == 0) hd->path = SL_LIT("/");

    bool chunked, has_cl;
    int st = check_framing(hd, true, &chunked, &has_cl);
    if (st) return st;
    hd->body_kind = chunked ? SL_BODY_CHUNKED
                            : (has_cl && hd->content_length > 0 ? SL_BODY_LENGTH : SL_BODY_NONE);
    return 0;
}

static int check_response(sl_h1_t *h, sl_h1_head_t *hd, bool tokens) {
    if (hd->major != 1 || hd->minor > 1) return 502;
    if (hd->status < 100 || hd->status > 599) return 502;
    for (uint16_t i = 0; !tokens && i < hd->nheaders; i++)
        if (!sl_is_token(hd->headers[i].name)) return 502;
    bool chunked, has_cl;
    if (check_framing(hd, false, &chunked, &has_cl)) return 502;
    if (h->req_was_head || hd->status < 200 || hd->status == 204 || hd->status == 304)
        hd->body_kind = SL_BODY_NONE;
    else if (chunked)
        hd->body_kind = SL_BODY_CHUNKED;
    else if (has_cl)
        hd->body_kind = hd->content_length ? SL_BODY_LENGTH : SL_BODY_NONE;
    else
        hd->body_kind = SL_BODY_EOF;
    return 0;
}

/* ---- the common head, read without llhttp ----
 * Nearly every head is in a few plain shapes: a request line with a common method, an
 * origin-form target of visible ASCII and HTTP/1.0 or 1.1; a status line "HTTP/1.x DDD reason";
 * fields "token: value" with at most one Content-Length of digits and no Transfer-Encoding.
 * The scanner has already checked the line ends, the controls and the request line's spaces,
 * and llhttp accepts every head of these shapes and reads it into the same slices; the
 * checks below are the same either way. llhttp cost about as much as the rest of the proxy's
 * head work together (~900 instructions a head), so heads of these shapes skip it; any other
 * head, including every one llhttp could refuse, still goes through it. fuzz_head parses each
 * input both ways and requires the same outcome. */

/* llhttp's id for a method the fast path reads, or -1. */
static int fast_method(const char *p, size_t n) {
    switch (n) {
    case 3:
        if (memcmp(p, "GET", 3) == 0) return HTTP_GET;
        if (memcmp(p, "PUT", 3) == 0) return HTTP_PUT;
        return -1;
    case 4:
        if (memcmp(p, "POST", 4) == 0) return HTTP_POST;
        if (memcmp(p, "HEAD", 4) == 0) return HTTP_HEAD;
        return -1;
    case 5: return memcmp(p, "PATCH", 5) == 0 ? HTTP_PATCH : -1;
    case 6: return memcmp(p, "DELETE", 6) == 0 ? HTTP_DELETE : -1;
    case 7: return memcmp(p, "OPTIONS", 7) == 0 ? HTTP_OPTIONS : -1;
    default: return -1;
    }
}

/* "HTTP/1.0" or "HTTP/1.1" at p: the minor version, or -1. */
static int fast_version(const char *p) {
    if (memcmp(p, "HTTP/1.", 7) != 0 || (p[7] != '0' && p[7] != '1')) return -1;
    return p[7] - '0';
}

/* A target of visible ASCII without a fragment: what the fast path reads itself (llhttp
 * takes more, but sluice refuses most of the rest). */
static bool fast_visible(const char *p, size_t n) {
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)p[i];
        if (c < 0x21 || c > 0x7e || c == '#') return false;
    }
    return true;
}

enum { FAST_NO = -1 };

/* Reads the head p[0..n) (from the scanner: it ends in CRLF CRLF) into hd when it is in the
 * shapes above. Returns 0, a status (431 or 502: no room for another field, as llhttp's
 * callback would report it), or FAST_NO: llhttp reads it, from a cleared head. */
static int fast_head(sl_h1_t *h, const char *p, size_t n, sl_h1_head_t *hd) {
    const char *e = p + n, *cr = memchr(p, '\r', n);
    if (h->type == HTTP_REQUEST) {
        /* the scanner allows exactly two single spaces in the request line */
        const char *sp1 = memchr(p, ' ', (size_t)(cr - p));
        const char *sp2 = memchr(sp1 + 1, ' ', (size_t)(cr - sp1 - 1));
        int m = fast_method(p, (size_t)(sp1 - p));
        if (m < 0 || cr - sp2 - 1 != 8) return FAST_NO;
        int minor = fast_version(sp2 + 1);
        sl_str_t t = {sp1 + 1, (size_t)(sp2 - sp1 - 1)};
        if (minor < 0 || t.p[0] != '/' || !fast_visible(t.p, t.len)) return FAST_NO;
        hd->method = (sl_str_t){p, (size_t)(sp1 - p)};
        hd->target = t;
        hd->method_id = (uint8_t)m;
        hd->minor = (uint8_t)minor;
    } else {
        /* "HTTP/1.x DDD reason": a reason, even an empty one, after a space */
        if (cr - p < 13 || p[8] != ' ' || p[12] != ' ') return FAST_NO;
        int minor = fast_version(p);
        if (minor < 0) return FAST_NO;
        int st = 0;
        for (int i = 9; i < 12; i++) {
            if (p[i] < '0' || p[i] > '9') return FAST_NO;
            st = st * 10 + (p[i] - '0');
        }
        /* llhttp takes any reason byte but LF, and the scanner let none but HTAB through */
        sl_str_t reason = {p + 13, (size_t)(cr - p - 13)};
        if (reason.len == 0) return FAST_NO;
        hd->reason = reason;
        hd->status = st;
        hd->minor = (uint8_t)minor;
    }
    hd->major = 1;
    bool cl = false;
    for (const char *l = cr + 2; l < e - 2; l = cr + 2) {
        cr = memchr(l, '\r', (size_t)(e - l));
        const char *v = l;
        while (v < cr && sl_tchar((unsigned char)*v)) v++;
        if (v == l || v == cr || *v != ':') return FAST_NO;
        sl_str_t name = {l, (size_t)(v - l)};
        /* any value: the scanner let no control but HTAB through, and llhttp takes the rest */
        sl_str_t value = trim((sl_str_t){v + 1, (size_t)(cr - v - 1)});
        if (name.len == 17 && SL_IEQ(name, "transfer-encoding")) return FAST_NO;
        if (name.len == 14 && SL_IEQ(name, "content-length")) {
            if (cl || !is_digits(value)) return FAST_NO;
            /* llhttp refuses a tab after the digits */
            for (const char *t = value.p + value.len; t < cr; t++)
                if (*t == '\t') return FAST_NO;
            cl = true;
        }
        sl_h1_header_t *x = sl_h1_push(hd);
        if (!x) return h->type == HTTP_REQUEST ? 431 : 502;
        x->name = name;
        x->value = value;
        x->hop = 0;
    }
    return 0;
}

/* The body framer starts on the message whose head hd is. */
static void body_begins(sl_h1_t *h, const sl_h1_head_t *hd) {
    h->done = 0;
    h->body_kind = hd->body_kind;
    h->cstate = 0;
    h->cdigits = 0;
    h->cline = 0;
    h->remaining = hd->body_kind == SL_BODY_LENGTH ? hd->content_length : 0;
}

int sl_h1_head(sl_h1_t *h, const char *p, size_t n, sl_h1_head_t *hd, size_t *used,
               int *status) {
    size_t start, end;
    *used = 0;
    int rc = scan_head(h, p, n, &start, &end, status);
    if (rc != SL_OK) return rc;

    sl_h1_head_clear(hd);
    int fast = h->llhttp_only ? FAST_NO : fast_head(h, p + start, end - start, hd);
    if (fast != FAST_NO) {
        int st = fast                        ? fast
                 : h->type == HTTP_REQUEST ? check_request(hd, true)
                                           : check_response(h, hd, true);
        if (st) {
            *status = st;
            return SL_ERROR;
        }
        mark_hop(hd);
        body_begins(h, hd);
        *used = end;
        return SL_OK;
    }

    sl_h1_head_clear(hd);
    h->head = hd;
    h->last_was_value = 0;
    h->status_err = 0;
    h->done = 0;
    llhttp_reset(&h->ll);

    llhttp_errno_t err = llhttp_execute(&h->ll, p + start, end - start);
    int bad = h->type == HTTP_REQUEST ? 400 : 502;
    hd->major = llhttp_get_http_major(&h->ll);
    hd->minor = llhttp_get_http_minor(&h->ll);
    hd->method_id = llhttp_get_method(&h->ll);
    hd->status = llhttp_get_status_code(&h->ll);
    for (uint16_t i = 0; i < hd->nheaders; i++) hd->headers[i].value = trim(hd->headers[i].value);

    int st;
    if (err != HPE_OK && err != HPE_PAUSED) {
        /* llhttp refused the head; the field checks may still name a more precise status
         * (501 for an unknown transfer coding, 431 for too many fields). */
        st = h->status_err ? h->status_err : bad;
        if (!h->status_err) {
            int mine = h->type == HTTP_REQUEST ? check_request(hd, false) : check_response(h, hd, false);
            if (mine == 501 || mine == 417) st = mine;
        }
        h->head = NULL;
        *status = st;
        return SL_ERROR;
    }
    st = h->type == HTTP_REQUEST ? check_request(hd, false) : check_response(h, hd, false);
    h->head = NULL;
    if (st) {
        *status = st;
        return SL_ERROR;
    }
    mark_hop(hd);
    if (hd->body_kind == SL_BODY_CHUNKED) {
        /* llhttp must be in its chunk-size state now; anything else is a disagreement (for a
         * response llhttp reads "Transfer-Encoding: chunked," as a body until close). */
        if (h->done || !(h->ll.flags & F_CHUNKED)) {
            *status = bad;
            return SL_ERROR;
        }
    }
    if (err == HPE_PAUSED) llhttp_resume(&h->ll);
    body_begins(h, hd);
    *used = end;
    return SL_OK;
}

/* ---- chunked transfer coding ----
 * sluice's own decoder, not llhttp's: llhttp 8.1.0 accepts a bare LF ending the
 * trailer section, obs-fold and empty names in trailers, and 17-digit sizes with
 * leading zeros. Here every line ends in CRLF, a size has 1..16 hex digits, an
 * extension holds no controls, and trailer fields are checked like header fields
 * (then dropped: the message leaves with fresh chunks and no trailers). */

enum {
    CS_SIZE = 0, CS_EXT, CS_SIZE_LF, CS_DATA, CS_DATA_CR, CS_DATA_LF,
    CS_TRAILER, CS_TRAILER_NAME, CS_TRAILER_VALUE, CS_TRAILER_LF, CS_END_LF
};

#define SL_CHUNK_LINE_MAX 4096     /* a size line with its extensions */
#define SL_TRAILERS_MAX (8 * 1024) /* the whole trailer section */

static int chunked(sl_h1_t *h, const char *p, size_t n, size_t *used) {
    size_t i = 0;
    while (i < n) {
        unsigned char c = (unsigned char)p[i];
        switch (h->cstate) {
        case CS_SIZE: {
            int v = hexval(c);
            if (v >= 0) {
                if (++h->cdigits > 16) return SL_ERROR; /* "oversized chunk size", zeros or not */
                h->remaining = (h->remaining << 4) | (uint64_t)v;
                h->cline++;
                i++;
                continue;
            }
            if (h->cdigits == 0) return SL_ERROR;
            if (c == ';') h->cstate = CS_EXT;
            else if (c == '\r') h->cstate = CS_SIZE_LF;
            else return SL_ERROR;
            i++;
            continue;
        }
        case CS_EXT:
            if (c == '\r') h->cstate = CS_SIZE_LF;
            else if ((c < 0x20 && c != '\t') || c == 0x7f) return SL_ERROR;
            if (++h->cline > SL_CHUNK_LINE_MAX) return SL_ERROR;
            i++;
            continue;
        case CS_SIZE_LF:
            if (c != '\n') return SL_ERROR;
            i++;
            h->cline = 0;
            h->cstate = h->remaining ? CS_DATA : CS_TRAILER;
            continue;
        case CS_DATA: {
            if (h->spans_left == 0) {
                *used = i;
                return SL_OK; /* the caller's queue is full: resume here */
            }
            size_t take = (size_t)SL_MIN((uint64_t)(n - i), h->remaining);
            if (h->on_data(h->ud, p + i, take)) return SL_ERROR;
            h->spans_left--;
            h->remaining -= take;
            i += take;
            if (!h->remaining) h->cstate = CS_DATA_CR;
            continue;
        }
        case CS_DATA_CR:
            if (c != '\r') return SL_ERROR;
            h->cstate = CS_DATA_LF;
            i++;
            continue;
        case CS_DATA_LF:
            if (c != '\n') return SL_ERROR;
            h->cstate = CS_SIZE;
            h->cdigits = 0;
            h->remaining = 0;
            i++;
            continue;
        case CS_TRAILER:
            /* At the start of a line: the blank line ends the message, else a field. */
            if (c == '\r') h->cstate = CS_END_LF;
            else if (sl_tchar(c)) h->cstate = CS_TRAILER_NAME;
            else return SL_ERROR; /* obs-fold, empty name, bare LF */
            break;
        case CS_TRAILER_NAME:
            if (c == ':') h->cstate = CS_TRAILER_VALUE;
            else if (!sl_tchar(c)) return SL_ERROR;
            break;
        case CS_TRAILER_VALUE:
            if (c == '\r') h->cstate = CS_TRAILER_LF;
            else if ((c < 0x20 && c != '\t') || c == 0x7f) return SL_ERROR;
            break;
        case CS_TRAILER_LF:
            if (c != '\n') return SL_ERROR;
            h->cstate = CS_TRAILER;
            break;
        case CS_END_LF:
            if (c != '\n') return SL_ERROR;
            *used = i + 1;
            h->done = 1;
            return SL_DONE;
        }
        /* trailer bytes */
        if (++h->cline > SL_TRAILERS_MAX) return SL_ERROR;
        i++;
    }
    *used = n;
    return SL_OK;
}

int sl_h1_body(sl_h1_t *h, const char *p, size_t n, size_t *used) {
    *used = 0;
    switch (h->body_kind) {
    case SL_BODY_NONE:
        return SL_DONE;
    case SL_BODY_LENGTH: {
        size_t take = (size_t)SL_MIN((uint64_t)n, h->remaining);
        if (take && h->on_data(h->ud, p, take)) return SL_ERROR;
        h->remaining -= take;
        *used = take;
        return h->remaining ? SL_OK : SL_DONE;
    }
    case SL_BODY_EOF:
        if (n && h->on_data(h->ud, p, n)) return SL_ERROR;
        *used = n;
        return SL_OK;
    case SL_BODY_CHUNKED:
        return chunked(h, p, n, used);
    }
    return SL_ERROR;
}

void sl_h1_head_clear(sl_h1_head_t *hd) {
    hd->method = hd->target = hd->path = hd->query = hd->authority = hd->reason = hd->host =
        (sl_str_t){NULL, 0};
    hd->status = 0;
    hd->major = hd->minor = hd->method_id = 0;
    hd->nheaders = 0;
    hd->flags = 0;
    hd->content_length = 0;
    hd->body_kind = SL_BODY_NONE;
    hd->headers = hd->inline_headers;
    hd->cap = SL_H1_INLINE_HEADERS;
}

sl_h1_header_t *sl_h1_push(sl_h1_head_t *hd) {
    if (hd->nheaders == hd->cap) {
        if (hd->cap == SL_H1_MAX_HEADERS || !hd->spill) return NULL;
        sl_h1_header_t *room = hd->spill(hd->spill_ud);
        if (!room) return NULL;
        memcpy(room, hd->headers, hd->nheaders * sizeof(*room));
        hd->headers = room;
        hd->cap = SL_H1_MAX_HEADERS;
    }
    return &hd->headers[hd->nheaders++];
}

sl_h1_header_t *sl_h1_spill_array(void *ud) { return ud; }

bool sl_h1_next_token(sl_str_t *list, sl_str_t *tok) { return next_token(list, tok); }

bool sl_h1_valid_host(sl_str_t host) { return valid_host(host); }

bool sl_h1_valid_target(sl_str_t target) { return valid_target_bytes(target); }

bool sl_h1_hop_header(sl_str_t name) { return hop_header(name); }

const sl_h1_header_t *sl_h1_find(const sl_h1_head_t *hd, const char *lower, size_t n) {
    for (uint16_t i = 0; i < hd->nheaders; i++)
        if (sl_str_ieq(hd->headers[i].name, lower, n)) return &hd->headers[i];
    return NULL;
}

sl_str_t sl_h1_reason(int status) {
    switch (status) {
    case 100: return SL_LIT("Continue");
    case 101: return SL_LIT("Switching Protocols");
    case 200: return SL_LIT("OK");
    case 201: return SL_LIT("Created");
    case 202: return SL_LIT("Accepted");
    case 206: return SL_LIT("Partial Content");
    case 303: return SL_LIT("See Other");
    case 307: return SL_LIT("Temporary Redirect");
    case 308: return SL_LIT("Permanent Redirect");
    case 409: return SL_LIT("Conflict");
    case 410: return SL_LIT("Gone");
    case 412: return SL_LIT("Precondition Failed");
    case 415: return SL_LIT("Unsupported Media Type");
    case 418: return SL_LIT("I'm a teapot");
    case 422: return SL_LIT("Unprocessable Content");
    case 204: return SL_LIT("No Content");
    case 301: return SL_LIT("Moved Permanently");
    case 302: return SL_LIT("Found");
    case 304: return SL_LIT("Not Modified");
    case 400: return SL_LIT("Bad Request");
    case 401: return SL_LIT("Unauthorized");
    case 403: return SL_LIT("Forbidden");
    case 404: return SL_LIT("Not Found");
    case 405: return SL_LIT("Method Not Allowed");
    case 408: return SL_LIT("Request Timeout");
    case 413: return SL_LIT("Content Too Large");
    case 414: return SL_LIT("URI Too Long");
    case 417: return SL_LIT("Expectation Failed");
    case 429: return SL_LIT("Too Many Requests");
    case 431: return SL_LIT("Request Header Fields Too Large");
    case 500: return SL_LIT("Internal Server Error");
    case 501: return SL_LIT("Not Implemented");
    case 502: return SL_LIT("Bad Gateway");
    case 503: return SL_LIT("Service Unavailable");
    case 504: return SL_LIT("Gateway Timeout");
    case 505: return SL_LIT("HTTP Version Not Supported");
    default: return SL_LIT("Unknown");
    }
}
