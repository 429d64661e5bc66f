/* sni.c — the ClientHello's server_name and the sni_routes choice (contract in sni.h).
 *
 * The ClientHello is one handshake message; TLS may split it over several records
 * (RFC 8446 5.1: handshake messages may be fragmented across records, and some clients,
 * and anyone probing a proxy, do). So the records are walked first, header by header,
 * only to learn whether the whole message is there yet: a client trickling its hello a
 * byte at a time costs a walk over a few record headers per read, not a copy. Once it is
 * complete, the fragments are joined in a buffer on the stack (bounded by
 * SL_SNI_MAX_HELLO) and the message is parsed there.
 */
#include "proto/sni.h"

#include <string.h>

#include "base/common.h"

#define REC_HDR 5
#define REC_MAX 16384  /* RFC 8446 5.1: a plaintext record's fragment is at most 2^14 */
#define HS_CLIENT_HELLO 1
#define EXT_SERVER_NAME 0
#define NAME_HOST 0

const char *const sl_sni_result_label[SL_SNI_RESULTS] = {
    [SL_SNI_ROUTE] = "route",     [SL_SNI_DEFAULT] = "default", [SL_SNI_NO_ROUTE] = "no_route",
    [SL_SNI_NOT_TLS] = "not_tls", [SL_SNI_TIMEOUT] = "timeout",
};

/* A cursor over the joined handshake message; every read is bounds-checked. */
typedef struct {
    const uint8_t *p, *end;
} rd_t;

static bool rd_skip(rd_t *r, size_t n) {
    if ((size_t)(r->end - r->p) < n) return false;
    r->p += n;
    return true;
}

static bool rd_u8(rd_t *r, size_t *v) {
    if (r->p >= r->end) return false;
    *v = *r->p++;
    return true;
}

static bool rd_u16(rd_t *r, size_t *v) {
    if (r->end - r->p < 2) return false;
    *v = (size_t)r->p[0] << 8 | r->p[1];
    r->p += 2;
    return true;
}

/* A sub-cursor over the next n bytes (a length-prefixed vector), which r then skips. */
static bool rd_sub(rd_t *r, size_t n, rd_t *sub) {
    if ((size_t)(r->end - r->p) < n) return false;
    *sub = (rd_t){r->p, r->p + n};
    r->p += n;
    return true;
}

/* A host_name as DNS allows it: letters, digits, '-', '_' and '.', no empty label at
 * either end. An IP literal is not a host_name (RFC 6066 3) but is left to not match. */
static bool host_ok(const uint8_t *s, size_t n) {
    if (n == 0 || n > SL_SNI_NAME_MAX || s[0] == '.' || s[n - 1] == '.') return false;
    for (size_t i = 0; i < n; i++) {
        uint8_t c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
              c == '_' || c == '.'))
            return false;
        if (c == '.' && s[i + 1] == '.') return false; /* s[n - 1] is not '.', so i + 1 < n */
    }
    return true;
}

/* The server_name extension's first host_name, lower-cased into name. */
static int server_name(rd_t *ext, char *name, size_t *nlen, const char **err) {
    size_t list, type, n;
    rd_t l;
    if (!rd_u16(ext, &list) || !rd_sub(ext, list, &l) || ext->p != ext->end || list == 0) goto bad;
    while (l.p < l.end) {
        rd_t h;
        if (!rd_u8(&l, &type) || !rd_u16(&l, &n) || !rd_sub(&l, n, &h)) goto bad;
        if (type != NAME_HOST) continue; /* no other type is defined; skip rather than fail */
        /* an absolute name ("a.test.") names the same host as "a.test": RFC 6066 says a
         * client sends none, but some do (openssl s_client -servername a.test.), and
         * nginx drops it as well; refusing the hello cut a working client off */
        if (n > 1 && h.p[n - 1] == '.') n--;
        if (!host_ok(h.p, n)) {
            *err = "the ClientHello's server_name is not a host name";
            return SL_ERROR;
        }
        for (size_t i = 0; i < n; i++) name[i] = (char)(h.p[i] | (h.p[i] >= 'A' && h.p[i] <= 'Z' ? 0x20 : 0));
        *nlen = n;
        return SL_OK;
    }
    return SL_OK;
bad:
    *err = "malformed server_name extension in the ClientHello";
    return SL_ERROR;
}

int sl_sni_server_name(const uint8_t *p, size_t len, char *name, size_t *nlen) {
    const char *err;
    rd_t ext = {p, p + len};
    *nlen = 0;
    return server_name(&ext, name, nlen, &err);
}

/* The ClientHello body (after the 4-byte handshake header). SL_ERROR sets *err only when
 * it has more to say than "malformed". */
static int client_hello(rd_t *r, char *name, size_t *nlen, const char **err) {
    size_t n, version;
    rd_t exts;
    if (!rd_u16(r, &version) || version >> 8 != 3) return SL_ERROR;
    if (!rd_skip(r, 32)) return SL_ERROR;                                 /* random */
    if (!rd_u8(r, &n) || n > 32 || !rd_skip(r, n)) return SL_ERROR;       /* session_id */
    if (!rd_u16(r, &n) || n < 2 || n & 1 || !rd_skip(r, n)) return SL_ERROR; /* cipher_suites */
    if (!rd_u8(r, &n) || n < 1 || !rd_skip(r, n)) return SL_ERROR;       /* compression_methods */
    if (r->p == r->end) return SL_OK;                                     /* no extensions (TLS 1.0 era) */
    if (!rd_u16(r, &n) || !rd_sub(r, n, &exts) || r->p != r->end) return SL_ERROR;
    bool seen = false;
    while (exts.p < exts.end) {
        size_t type;
        rd_t e;
        if (!rd_u16(&exts, &type) || !rd_u16(&exts, &n) || !rd_sub(&exts, n, &e)) return SL_ERROR;
        if (type != EXT_SERVER_NAME) continue;
        if (seen) {
            *err = "two server_name extensions in the ClientHello";
            return SL_ERROR;
        }
        seen = true;
        if (server_name(&e, name, nlen, err) != SL_OK) return SL_ERROR;
    }
    return SL_OK;
}

int sl_sni_parse(const uint8_t *p, size_t len, char *name, size_t *nlen, const char **err) {
    *nlen = 0;
    *err = NULL;
    /* Pass 1: the record headers, and the handshake header from the first payload bytes. */
    uint8_t hh[4];
    size_t off = 0, have = 0, need = SIZE_MAX;
    while (have < need) {
        const uint8_t *h = p + off;
        /* judged on the bytes there are: "GET / HTTP/1.1" is refused at its first byte */
        if ((len > off && h[0] != 22) || (len > off + 1 && h[1] != 3)) {
            *err = off ? "a record other than a handshake inside the ClientHello" : "not a TLS handshake";
            return SL_ERROR;
        }
        if (off + REC_HDR > len) goto more;
        size_t rlen = (size_t)h[3] << 8 | h[4];
        if (rlen == 0 || rlen > REC_MAX) {
            *err = "a TLS record of a length not allowed in a ClientHello";
            return SL_ERROR;
        }
        if (off + REC_HDR + rlen > SL_SNI_MAX_HELLO) goto too_big;
        size_t got = SL_MIN(rlen, len - off - REC_HDR);
        if (have == 0 && got && h[REC_HDR] != HS_CLIENT_HELLO) {
            *err = "the first TLS handshake message is not a ClientHello";
            return SL_ERROR;
        }
        for (size_t i = 0; have + i < 4 && i < got; i++) hh[have + i] = h[REC_HDR + i];
        if (have < 4 && have + got >= 4) {
            need = 4 + ((size_t)hh[1] << 16 | (size_t)hh[2] << 8 | hh[3]);
            if (need > SL_SNI_MAX_HELLO) goto too_big;
        }
        have += got;
        if (got < rlen) goto more; /* the record is not all here */
        off += REC_HDR + rlen;
    }
    if (have != need) {
        /* the message must end with its last record: a second handshake message in the
         * same flight is not a ClientHello's business */
        *err = "bytes after the ClientHello in its last record";
        return SL_ERROR;
    }

    /* Pass 2: join the fragments and parse. */
    uint8_t msg[SL_SNI_MAX_HELLO];
    size_t at = 0;
    for (off = 0; at < need;) {
        size_t rlen = (size_t)p[off + 3] << 8 | p[off + 4];
        memcpy(msg + at, p + off + REC_HDR, rlen);
        at += rlen;
        off += REC_HDR + rlen;
    }
    rd_t r = {msg + 4, msg + need};
    if (client_hello(&r, name, nlen, err) == SL_OK) return SL_OK;
    if (!*err) *err = "malformed ClientHello";
    *nlen = 0;
    return SL_ERROR;
more:
    if (len >= SL_SNI_MAX_HELLO) goto too_big;
    return SL_EAGAIN;
too_big:
    *err = "the ClientHello is longer than 16 KiB";
    return SL_ERROR;
}

/* ---- sni_routes ---- */

/* Exact names are sorted by (length, bytes); see config/listeners.c's build of sni_names. */
static int cmp_name(const char *a, size_t alen, const sl_sni_name_t *b) {
    if (alen != b->len) return alen < b->len ? -1 : 1;
    return memcmp(a, b->name, alen);
}

int sl_sni_lookup(const sl_sni_name_t *names, size_t nexact, size_t nwild, int fallback,
                  const char *name, size_t nlen, int *result) {
    if (nlen) {
        size_t lo = 0, hi = nexact;
        while (lo < hi) {
            size_t mid = lo + (hi - lo) / 2;
            int c = cmp_name(name, nlen, &names[mid]);
            if (c == 0) {
                *result = SL_SNI_ROUTE;
                return names[mid].upstream;
            }
            if (c < 0)
                hi = mid;
            else
                lo = mid + 1;
        }
        /* wildcards, longest suffix first: the first that matches is the longest */
        for (size_t i = nexact; i < nexact + nwild; i++) {
            const sl_sni_name_t *w = &names[i];
            if (nlen > w->len && memcmp(name + nlen - w->len, w->name, w->len) == 0) {
                *result = SL_SNI_ROUTE;
                return w->upstream;
            }
        }
    }
    *result = fallback >= 0 ? SL_SNI_DEFAULT : SL_SNI_NO_ROUTE;
    return fallback;
}
