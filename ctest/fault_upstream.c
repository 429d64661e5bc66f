/* fault_upstream.c — a fault-injecting HTTP/1.1 upstream for the resilience tests and the
 * benchmarks (issue 4).
 *
 * One thread, one libuv loop: keep-alive and pipelining (answers leave in request order; a
 * delayed answer holds back the ones behind it on its own connection only), Content-Length
 * and chunked request bodies hashed as they arrive, never buffered whole.
 *
 * Command line
 *   fault_upstream [--listen ADDR] [--control ADDR] [--name NAME] [--ready-file PATH]
 *                  [--delay-ms MS] [--status N] [--size N] [--fault NAME]
 *   ADDR is HOST:PORT or [V6]:PORT; port 0 picks a free one. --listen defaults to 127.0.0.1:0,
 *   --control to port 0 on the --listen host. Once both are bound it prints
 *   "listening HOST:PORT" and "control HOST:PORT" on stdout and writes
 *   {"address":"HOST:PORT","control":"HOST:PORT","name":NAME,"pid":N} to the ready file
 *   (renamed into place: a reader never sees half of it). The other flags set the defaults
 *   every request gets. SIGTERM/SIGINT close everything and exit 0.
 *
 * Per-request directives; later sources win: defaults, path, query, headers.
 *   path     leading segments /status/N /delay/MS /size/N /fault/NAME /hang, repeatable
 *            (/delay/50/status/503/api/x); the first other segment ends them.
 *   query    status=N delay=MS size=N fault=NAME only=NAMES
 *   headers  X-Fault-Status: N  X-Fault-Delay: MS  X-Fault-Size: N  X-Fault: NAME
 *            X-Fault-Only: NAMES
 *   status N   answer N (200..599); 204 and 304 carry no body.
 *   delay MS   answer MS ms after the request's last byte (a timer: the loop goes on).
 *   size N     the body is N bytes of the 64-byte pattern a-z0-9A-Z-_ repeated, instead of
 *              the JSON description.
 *   only NAMES a comma list of server names: any other server ignores the request's
 *              directives, so one request hedged or retried across two of these can hit one.
 * Faults (NAME); a delay applies before all but hang:
 *   none            the normal answer.
 *   hang            never answer; input is read and dropped until the peer closes.
 *   reset           RST (SO_LINGER 0, then close) without answering.
 *   close           FIN without answering.
 *   close-mid-body  the head with the full Content-Length, half the body, FIN.
 *   bad-framing     Content-Length: L and Transfer-Encoding: chunked, the body as one chunk
 *                   ("<hex L>\r\n" BODY "\r\n0\r\n\r\n"), then FIN.
 *   bad-chunk       Transfer-Encoding: chunked, "zz\r\n" BODY "\r\n0\r\n\r\n", then FIN.
 *
 * The normal answer carries X-Upstream-Name: NAME and the JSON body
 *   {"name":NAME,"method":M,"path":P,"target":T,"status":S,"n":N,"body_len":L,"body_sum":H}
 * n counts the requests served since start (or the last stats reset), from 1; body_len and
 * body_sum are the request body's length and SHA-256 (hex). HTTP/1.0 without keep-alive and
 * "Connection: close" close after the answer. A bad request (no end of head within 64 KiB,
 * a bad request line, Content-Length with Transfer-Encoding, a bad chunk) gets 400 or 431 and
 * the connection is closed.
 *
 * Control: /_fault/... on either port, never delayed nor faulted nor counted. The control
 * port exists so that "up" can be sent while the listen port is down.
 *   GET    /_fault/stats  {"name","address","control","mode":"up"|"down","requests",
 *                          "connections" (accepted on the listen port),"open",
 *                          "defaults":{"fault","status","delay_ms","size"},
 *                          "paths":{PATH:N},"paths_overflow"}
 *   DELETE /_fault/stats  zeroes requests, connections and paths; answers the stats.
 *   POST   /_fault/mode   words separated by spaces or commas, applied in order:
 *     normal       the command-line defaults, and up.
 *     down[:MS]    close the listen socket (connects are refused) and every connection
 *                  accepted on it, as if the process died; back up after MS if given.
 *     up           listen again on the same port (SO_REUSEADDR; fails with 500 only if some
 *                  other socket took the port meanwhile).
 *     delay:MS slow:MS status:N size:N fault:NAME   change the defaults.
 *   answers the stats; 400 {"error"} and nothing applied for an unknown word.
 */
#define _GNU_SOURCE /* memmem */
#include <arpa/inet.h>
#include <ctype.h>
#include <inttypes.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include <openssl/evp.h>
#include <uv.h>

#define HEAD_MAX (64 * 1024)      /* a longer head is answered 431 */
#define IN_CHUNK (16 * 1024)      /* a read gets at least this much room */
#define IN_MAX (1024 * 1024)      /* stop reading while this much input waits */
#define OUT_MAX (8 * 1024 * 1024) /* stop reading while this much output is queued */
#define COPY_MAX (64 * 1024)      /* ?size bodies up to this are copied into the batch */
#define PAT_SIZE (256 * 1024)     /* larger ones are written as views of one static pattern */
#define SIZE_LIMIT ((int64_t)1 << 34)
#define DELAY_LIMIT ((int64_t)24 * 3600 * 1000)
#define TARGET_MAX 1024 /* longer targets are reported cut */
#define CTL_MAX 256     /* the bytes of a request body kept for /_fault/mode */
#define PATHS_MAX 4096  /* distinct paths counted; more count as paths_overflow */
#define PATH_BUCKETS 1024
#define LINGER_MS 1000 /* after our FIN, drop what the peer still sends for this long */

static const char EMPTY_SHA256[] =
    "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

typedef struct {
    char *p;
    size_t len, cap;
} buf_t;

enum { F_NONE, F_HANG, F_RESET, F_CLOSE, F_CLOSE_MID_BODY, F_BAD_FRAMING, F_BAD_CHUNK, F_COUNT };
static const char *const fault_names[F_COUNT] = {
    "none", "hang", "reset", "close", "close-mid-body", "bad-framing", "bad-chunk"};

/* What one request gets: the defaults with its directives applied. */
typedef struct {
    int kind;
    int status;
    int64_t delay_ms;
    int64_t size; /* -1: the JSON description */
} fault_t;

enum state {
    ST_HEAD,       /* between requests, or inside a head */
    ST_BODY,       /* Content-Length body: req.left to go */
    ST_CHUNK_SIZE, /* a chunk-size line */
    ST_CHUNK_DATA, /* chunk data: req.left to go */
    ST_CHUNK_END,  /* the CRLF after chunk data */
    ST_TRAILER,    /* trailer lines up to the empty one */
    ST_WAIT,       /* a complete request waits for its delay timer */
    ST_HANG,       /* never answering: input is dropped */
    ST_CLOSING,    /* FIN sent or on its way: input is dropped until EOF or LINGER_MS */
};

typedef struct {
    char method[16], target[TARGET_MAX];
    size_t method_len, target_len, path_len;
    bool keepalive, http10, head, expect, chunked, hashing;
    uint64_t left, body_len, n;
    char sum[65];
    char ctl[CTL_MAX];
    size_t ctl_len;
    fault_t f;
} req_t;

/* One accepted connection; owns its handles, buffers and the request being read. */
typedef struct {
    uv_tcp_t tcp;     /* .data of both handles is the conn */
    uv_timer_t timer; /* the delay of ST_WAIT, the linger of ST_CLOSING */
    uv_shutdown_t shut;
    EVP_MD_CTX *md;
    char *in; /* unparsed input is in[in_off, in_len) */
    size_t in_off, in_len, in_cap;
    buf_t out; /* answers batched until the end of the current wakeup */
    req_t req;
    enum state state;
    int refs; /* handles not yet closed: freed at 0 */
    bool control, counted, reading, eof, shut_done, closing;
} conn_t;

typedef struct {
    uv_write_t w;
    char data[];
} wreq_t;

typedef struct path_count {
    struct path_count *next;
    uint64_t n;
    size_t len;
    char path[];
} path_count_t;

static struct {
    uv_loop_t *loop;
    const char *name;
    size_t name_len;
    fault_t start, dflt; /* the command line's defaults; the current ones */
    struct sockaddr_storage addr, control_addr;
    char addr_text[80], control_text[80];
    uv_tcp_t *listener; /* NULL while down */
    uv_tcp_t control;
    uv_timer_t up_timer;
    uv_signal_t sigterm, sigint;
    uint64_t requests, accepted, open, overflow;
    size_t npaths;
    path_count_t *paths[PATH_BUCKETS];
    buf_t scratch; /* bodies are built here before their head (single thread) */
} g;

static char pattern[PAT_SIZE];

static void conn_process(conn_t *c);
static void conn_close(conn_t *c, bool rst);
static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf);
static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf);
static void on_shutdown(uv_shutdown_t *s, int status);
static void on_accept(uv_stream_t *server, int status);

/* ------------------------------------------------------------------ buffers */

static void *xrealloc(void *p, size_t n) {
    if (!(p = realloc(p, n))) {
        fputs("fault_upstream: out of memory\n", stderr);
        abort();
    }
    return p;
}

static void buf_reserve(buf_t *b, size_t more) {
    if (b->cap - b->len >= more) return;
    size_t cap = b->cap ? b->cap : 1024;
    while (cap - b->len < more) cap *= 2;
    b->p = xrealloc(b->p, cap);
    b->cap = cap;
}

static void buf_put(buf_t *b, const void *p, size_t n) {
    buf_reserve(b, n);
    memcpy(b->p + b->len, p, n);
    b->len += n;
}

#define buf_lit(b, s) buf_put((b), (s), sizeof(s) - 1)

__attribute__((format(printf, 2, 3))) static void buf_fmt(buf_t *b, const char *fmt, ...) {
    va_list ap;
    buf_reserve(b, 128);
    va_start(ap, fmt);
    int n = vsnprintf(b->p + b->len, b->cap - b->len, fmt, ap);
    va_end(ap);
    if (n < 0) abort();
    if ((size_t)n >= b->cap - b->len) {
        buf_reserve(b, (size_t)n + 1);
        va_start(ap, fmt);
        vsnprintf(b->p + b->len, b->cap - b->len, fmt, ap);
        va_end(ap);
    }
    b->len += (size_t)n;
}

/* A JSON string; bytes outside printable ASCII become \u00XX so any target stays valid JSON. */
static void json_str(buf_t *b, const char *p, size_t n) {
    static const char hex[] = "0123456789abcdef";
    buf_reserve(b, n * 6 + 2);
    char *o = b->p + b->len;
    *o++ = '"';
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)p[i];
        if (ch == '"' || ch == '\\') {
            *o++ = '\\';
            *o++ = (char)ch;
        } else if (ch < 0x20 || ch >= 0x7f) {
            memcpy(o, "\\u00", 4);
            o[4] = hex[ch >> 4];
            o[5] = hex[ch & 15];
            o += 6;
        } else {
            *o++ = (char)ch;
        }
    }
    *o++ = '"';
    b->len = (size_t)(o - b->p);
}

/* ------------------------------------------------------------------ parsing */

static bool eq(const char *p, size_t n, const char *lit) {
    return n == strlen(lit) && memcmp(p, lit, n) == 0;
}

static bool caseeq(const char *p, size_t n, const char *lit) {
    return n == strlen(lit) && strncasecmp(p, lit, n) == 0;
}

static void trim(const char **p, size_t *n) {
    while (*n && (**p == ' ' || **p == '\t')) (*p)++, (*n)--;
    while (*n && ((*p)[*n - 1] == ' ' || (*p)[*n - 1] == '\t')) (*n)--;
}

/* A decimal number in [0, max], or -1. */
static int64_t parse_dec(const char *p, size_t n, int64_t max) {
    if (n == 0 || n > 18) return -1;
    int64_t v = 0;
    for (size_t i = 0; i < n; i++) {
        if (p[i] < '0' || p[i] > '9') return -1;
        v = v * 10 + (p[i] - '0');
    }
    return v <= max ? v : -1;
}

/* A chunk-size line (extensions ignored), or -1. */
static int64_t parse_chunk_size(const char *p, size_t n) {
    const char *semi = memchr(p, ';', n);
    if (semi) n = (size_t)(semi - p);
    while (n && (p[n - 1] == ' ' || p[n - 1] == '\t')) n--;
    if (n == 0 || n > 15) return -1;
    int64_t v = 0;
    for (size_t i = 0; i < n; i++) {
        int ch = p[i], d = ch >= '0' && ch <= '9'   ? ch - '0'
                           : ch >= 'a' && ch <= 'f' ? ch - 'a' + 10
                           : ch >= 'A' && ch <= 'F' ? ch - 'A' + 10
                                                    : -1;
        if (d < 0) return -1;
        v = v * 16 + d;
    }
    return v;
}

/* Calls fn on each element of a comma list, trimmed; true as soon as fn does. */
static bool list_any(const char *p, size_t n, bool (*fn)(const char *, size_t, const char *),
                     const char *arg) {
    while (n) {
        const char *comma = memchr(p, ',', n);
        size_t len = comma ? (size_t)(comma - p) : n;
        const char *e = p;
        size_t en = len;
        trim(&e, &en);
        if (fn(e, en, arg)) return true;
        p += len + (comma != NULL);
        n -= len + (comma != NULL);
    }
    return false;
}

/* One directive KEY VALUE applied to f: 1 applied, 0 not a directive, -1 a bad value. */
static int directive(fault_t *f, const char *k, size_t kn, const char *v, size_t vn) {
    int64_t x;
    if (eq(k, kn, "status")) {
        if ((x = parse_dec(v, vn, 599)) < 200) return -1;
        f->status = (int)x;
    } else if (eq(k, kn, "delay") || eq(k, kn, "slow")) {
        if ((x = parse_dec(v, vn, DELAY_LIMIT)) < 0) return -1;
        f->delay_ms = x;
    } else if (eq(k, kn, "size")) {
        if ((x = parse_dec(v, vn, SIZE_LIMIT)) < 0) return -1;
        f->size = x;
    } else if (eq(k, kn, "fault")) {
        for (x = 0; x < F_COUNT && !eq(v, vn, fault_names[x]); x++) continue;
        if (x == F_COUNT) return -1;
        f->kind = (int)x;
    } else {
        return 0;
    }
    return 1;
}

/* Leading /KEY/VALUE (and /hang) segments of a path; -1 on a bad value. */
static int path_directives(fault_t *f, const char *p, size_t n) {
    while (n > 1 && *p == '/') {
        const char *k = p + 1, *slash = memchr(k, '/', n - 1);
        size_t kn = slash ? (size_t)(slash - k) : n - 1;
        if (eq(k, kn, "hang")) {
            f->kind = F_HANG;
            p += 1 + kn, n -= 1 + kn;
            continue;
        }
        if (!slash) break;
        const char *v = slash + 1, *end = p + n, *vend = memchr(v, '/', (size_t)(end - v));
        size_t vn = (size_t)((vend ? vend : end) - v);
        int rc = directive(f, k, kn, v, vn);
        if (rc <= 0) return rc;
        n -= (size_t)(v + vn - p), p = v + vn;
    }
    return 0;
}

static int query_directives(fault_t *f, const char *q, size_t n, const char **only,
                            size_t *only_n) {
    while (n) {
        const char *amp = memchr(q, '&', n), *eqs;
        size_t pn = amp ? (size_t)(amp - q) : n;
        if ((eqs = memchr(q, '=', pn))) {
            size_t kn = (size_t)(eqs - q);
            if (eq(q, kn, "only"))
                *only = eqs + 1, *only_n = pn - kn - 1;
            else if (directive(f, q, kn, eqs + 1, pn - kn - 1) < 0)
                return -1;
        }
        q += pn + (amp != NULL);
        n -= pn + (amp != NULL);
    }
    return 0;
}

static bool is_our_name(const char *p, size_t n, const char *unused) {
    return n == g.name_len && memcmp(p, g.name, n) == 0;
}

static bool is_token(const char *p, size_t n, const char *tok) { return caseeq(p, n, tok); }

/* Parses the head [p, p+n) (ending in CRLF CRLF) into c->req: 0, or a status to reject with. */
static int parse_head(conn_t *c, const char *p, size_t n, const char **why) {
    req_t *r = &c->req;
    const char *end = p + n - 2, *eol = memmem(p, n, "\r\n", 2);
    memset(r, 0, sizeof *r);
    *why = "bad request line";
    const char *sp1 = memchr(p, ' ', (size_t)(eol - p));
    if (!sp1 || sp1 == p || (size_t)(sp1 - p) >= sizeof r->method) return 400;
    const char *t = sp1 + 1, *sp2 = memchr(t, ' ', (size_t)(eol - t));
    if (!sp2 || *t != '/') return 400;
    size_t tn = (size_t)(sp2 - t), vn = (size_t)(eol - sp2 - 1);
    if (eq(sp2 + 1, vn, "HTTP/1.1"))
        r->keepalive = true;
    else if (eq(sp2 + 1, vn, "HTTP/1.0"))
        r->http10 = true;
    else
        return 400;
    r->method_len = (size_t)(sp1 - p);
    memcpy(r->method, p, r->method_len);
    r->head = eq(p, r->method_len, "HEAD");
    const char *qm = memchr(t, '?', tn);
    size_t pn = qm ? (size_t)(qm - t) : tn;
    r->target_len = tn < TARGET_MAX ? tn : TARGET_MAX;
    r->path_len = pn < r->target_len ? pn : r->target_len;
    memcpy(r->target, t, r->target_len);

    fault_t f = g.dflt;
    const char *only = NULL;
    size_t only_n = 0;
    *why = "bad fault directive";
    if (path_directives(&f, t, pn) < 0) return 400;
    if (qm && query_directives(&f, qm + 1, tn - pn - 1, &only, &only_n) < 0) return 400;

    bool has_cl = false;
    for (const char *line = eol + 2; line < end; line = eol + 2) {
        eol = memmem(line, (size_t)(end + 2 - line), "\r\n", 2);
        const char *colon = memchr(line, ':', (size_t)(eol - line)), *v;
        *why = "bad header line";
        if (!colon || colon == line) return 400;
        size_t nn = (size_t)(colon - line), vl = (size_t)(eol - colon - 1);
        v = colon + 1;
        trim(&v, &vl);
        int rc = 1;
        if (caseeq(line, nn, "content-length")) {
            int64_t cl = parse_dec(v, vl, INT64_MAX);
            *why = "bad Content-Length";
            if (cl < 0 || (has_cl && r->left != (uint64_t)cl)) return 400;
            has_cl = true;
            r->left = (uint64_t)cl;
        } else if (caseeq(line, nn, "transfer-encoding")) {
            *why = "unsupported Transfer-Encoding";
            if (!caseeq(v, vl, "chunked")) return 400;
            r->chunked = true;
        } else if (caseeq(line, nn, "connection")) {
            if (list_any(v, vl, is_token, "close")) r->keepalive = false;
            if (list_any(v, vl, is_token, "keep-alive") && r->http10) r->keepalive = true;
        } else if (caseeq(line, nn, "expect")) {
            r->expect = caseeq(v, vl, "100-continue");
        } else if (caseeq(line, nn, "x-fault")) {
            rc = directive(&f, "fault", 5, v, vl);
        } else if (nn > 8 && nn < 16 && caseeq(line, 8, "x-fault-")) {
            char key[8]; /* X-Fault-KEY: the directive KEY, lowercased */
            size_t kn = nn - 8;
            for (size_t i = 0; i < kn; i++) key[i] = (char)tolower((unsigned char)line[8 + i]);
            if (eq(key, kn, "only"))
                only = v, only_n = vl;
            else
                rc = directive(&f, key, kn, v, vl);
        }
        *why = "bad fault directive";
        if (rc < 0) return 400;
    }
    *why = "Content-Length with Transfer-Encoding";
    if (has_cl && r->chunked) return 400;
    r->f = only && !list_any(only, only_n, is_our_name, NULL) ? g.dflt : f;
    return 0;
}

/* ------------------------------------------------------------------ output */

static void on_write(uv_write_t *w, int status) {
    conn_t *c = w->handle->data;
    free(w);
    if (status < 0)
        conn_close(c, false);
    else
        conn_process(c); /* reading may resume once the queue drained */
}

/* Sends the batch: straight to the socket when nothing is queued, the rest copied and queued. */
static void out_flush(conn_t *c) {
    buf_t *o = &c->out;
    size_t off = 0;
    if (!o->len || c->closing) goto done;
    uv_buf_t b = uv_buf_init(o->p, (unsigned)o->len);
    int n = uv_try_write((uv_stream_t *)&c->tcp, &b, 1);
    if (n > 0) off = (size_t)n;
    if (off < o->len) {
        wreq_t *w = xrealloc(NULL, sizeof *w + o->len - off);
        memcpy(w->data, o->p + off, o->len - off);
        b = uv_buf_init(w->data, (unsigned)(o->len - off));
        if (uv_write(&w->w, (uv_stream_t *)&c->tcp, &b, 1, on_write) != 0) {
            free(w);
            conn_close(c, false);
        }
    }
done:
    o->len = 0;
    if (o->cap > OUT_MAX) { /* one huge answer need not keep its buffer */
        free(o->p);
        *o = (buf_t){0};
    }
}

/* A large ?size body: views of the static pattern, queued behind the flushed batch. */
static void write_pattern(conn_t *c, uint64_t n) {
    size_t nbufs = (size_t)((n + PAT_SIZE - 1) / PAT_SIZE);
    uv_buf_t *bufs = xrealloc(NULL, nbufs * sizeof *bufs);
    for (size_t i = 0; i < nbufs; i++)
        bufs[i] = uv_buf_init(pattern, (unsigned)(i + 1 < nbufs ? PAT_SIZE : n - i * PAT_SIZE));
    out_flush(c);
    wreq_t *w = xrealloc(NULL, sizeof *w);
    /* uv_write copies the array of buffers (not their bytes): it can go right away */
    if (c->closing || uv_write(&w->w, (uv_stream_t *)&c->tcp, bufs, (unsigned)nbufs, on_write)) {
        free(w);
        conn_close(c, false);
    }
    free(bufs);
}

static const char *reason(int status) {
    switch (status) {
    case 200: return "OK";
    case 201: return "Created";
    case 204: return "No Content";
    case 304: return "Not Modified";
    case 400: return "Bad Request";
    case 404: return "Not Found";
    case 429: return "Too Many Requests";
    case 431: return "Request Header Fields Too Large";
    case 500: return "Internal Server Error";
    case 502: return "Bad Gateway";
    case 503: return "Service Unavailable";
    case 504: return "Gateway Timeout";
    default: return "Fault";
    }
}

static void head_start(buf_t *o, int status, const char *ctype) {
    buf_fmt(o, "HTTP/1.1 %d %s\r\nServer: fault_upstream\r\nX-Upstream-Name: ", status,
            reason(status));
    buf_put(o, g.name, g.name_len);
    buf_fmt(o, "\r\nContent-Type: %s\r\n", ctype);
}

static void head_end(buf_t *o, const req_t *r, bool close) {
    if (close)
        buf_lit(o, "Connection: close\r\n");
    else if (r->http10)
        buf_lit(o, "Connection: keep-alive\r\n");
    buf_lit(o, "\r\n");
}

/* Sends the FIN once the queued answers are out, then drops input until EOF or LINGER_MS:
 * closing with unread input would turn the FIN into an RST that can destroy those answers. */
static void conn_finish(conn_t *c) {
    if (c->closing || c->state == ST_CLOSING) return;
    out_flush(c);
    c->state = ST_CLOSING;
    c->in_off = c->in_len = 0;
    if (!c->closing && uv_shutdown(&c->shut, (uv_stream_t *)&c->tcp, on_shutdown) != 0)
        conn_close(c, false);
}

/* g.scratch as a JSON answer. */
static void send_json(conn_t *c, int status, bool close) {
    buf_t *o = &c->out;
    head_start(o, status, "application/json");
    buf_fmt(o, "Content-Length: %zu\r\n", g.scratch.len);
    head_end(o, &c->req, close);
    if (!c->req.head) buf_put(o, g.scratch.p, g.scratch.len);
    if (close) conn_finish(c);
}

static void error_json(buf_t *b, int status, const char *why) {
    b->len = 0;
    buf_lit(b, "{\"name\":");
    json_str(b, g.name, g.name_len);
    buf_fmt(b, ",\"status\":%d,\"error\":", status);
    json_str(b, why, strlen(why));
    buf_lit(b, "}");
}

static void reject(conn_t *c, int status, const char *why) {
    c->req.head = false;
    error_json(&g.scratch, status, why);
    send_json(c, status, true);
}

/* ------------------------------------------------------------------ answers */

static void describe(buf_t *b, const req_t *r) {
    b->len = 0;
    buf_lit(b, "{\"name\":");
    json_str(b, g.name, g.name_len);
    buf_lit(b, ",\"method\":");
    json_str(b, r->method, r->method_len);
    buf_lit(b, ",\"path\":");
    json_str(b, r->target, r->path_len);
    buf_lit(b, ",\"target\":");
    json_str(b, r->target, r->target_len);
    buf_fmt(b, ",\"status\":%d,\"n\":%" PRIu64 ",\"body_len\":%" PRIu64 ",\"body_sum\":\"%s\"}",
            r->f.status, r->n, r->body_len, r->sum);
}

/* Answers c->req as its fault says. */
static void respond(conn_t *c) {
    req_t *r = &c->req;
    buf_t *o = &c->out;
    int kind = r->f.kind, status = r->f.status;
    c->state = ST_HEAD;
    if (kind == F_RESET) {
        out_flush(c); /* answers to earlier pipelined requests go first */
        conn_close(c, true);
        return;
    }
    if (kind == F_CLOSE) {
        conn_finish(c);
        return;
    }
    bool pattern_body = r->f.size >= 0, bodiless = status == 204 || status == 304;
    bool close = !r->keepalive || kind >= F_CLOSE_MID_BODY, chunked = kind >= F_BAD_FRAMING;
    uint64_t len = pattern_body ? (uint64_t)r->f.size : 0;
    if (!pattern_body) {
        describe(&g.scratch, r);
        len = g.scratch.len;
    }
    head_start(o, status, pattern_body ? "application/octet-stream" : "application/json");
    if (kind != F_BAD_CHUNK && !bodiless) buf_fmt(o, "Content-Length: %" PRIu64 "\r\n", len);
    if (chunked) buf_lit(o, "Transfer-Encoding: chunked\r\n");
    head_end(o, r, close);
    if (!bodiless && !r->head) {
        if (kind == F_BAD_FRAMING) buf_fmt(o, "%" PRIx64 "\r\n", len);
        if (kind == F_BAD_CHUNK) buf_lit(o, "zz\r\n");
        uint64_t n = kind == F_CLOSE_MID_BODY ? len / 2 : len;
        if (!pattern_body)
            buf_put(o, g.scratch.p, (size_t)n);
        else if (n <= COPY_MAX)
            buf_put(o, pattern, (size_t)n);
        else
            write_pattern(c, n);
        if (chunked) buf_lit(o, "\r\n0\r\n\r\n");
    }
    if (close) conn_finish(c);
}

/* ------------------------------------------------------------------ stats and control */

static void count_path(const char *p, size_t n) {
    uint64_t h = 1469598103934665603u; /* FNV-1a */
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)p[i]) * 1099511628211u;
    path_count_t **slot = &g.paths[h % PATH_BUCKETS], *pc;
    for (pc = *slot; pc; pc = pc->next)
        if (pc->len == n && memcmp(pc->path, p, n) == 0) {
            pc->n++;
            return;
        }
    if (g.npaths == PATHS_MAX) {
        g.overflow++;
        return;
    }
    pc = xrealloc(NULL, sizeof *pc + n);
    *pc = (path_count_t){.next = *slot, .n = 1, .len = n};
    memcpy(pc->path, p, n);
    *slot = pc;
    g.npaths++;
}

static void stats_reset(void) {
    for (size_t i = 0; i < PATH_BUCKETS; i++)
        for (path_count_t *pc = g.paths[i], *next; pc; pc = next) {
            next = pc->next;
            free(pc);
        }
    memset(g.paths, 0, sizeof g.paths);
    g.requests = g.accepted = g.overflow = 0;
    g.npaths = 0;
}

static void stats_json(buf_t *b) {
    b->len = 0;
    buf_lit(b, "{\"name\":");
    json_str(b, g.name, g.name_len);
    buf_fmt(b,
            ",\"address\":\"%s\",\"control\":\"%s\",\"mode\":\"%s\",\"requests\":%" PRIu64
            ",\"connections\":%" PRIu64 ",\"open\":%" PRIu64,
            g.addr_text, g.control_text, g.listener ? "up" : "down", g.requests, g.accepted,
            g.open);
    buf_fmt(b,
            ",\"defaults\":{\"fault\":\"%s\",\"status\":%d,\"delay_ms\":%" PRId64
            ",\"size\":%" PRId64 "},\"paths\":{",
            fault_names[g.dflt.kind], g.dflt.status, g.dflt.delay_ms, g.dflt.size);
    const char *sep = "";
    for (size_t i = 0; i < PATH_BUCKETS; i++)
        for (path_count_t *pc = g.paths[i]; pc; pc = pc->next) {
            buf_put(b, sep, strlen(sep));
            json_str(b, pc->path, pc->len);
            buf_fmt(b, ":%" PRIu64, pc->n);
            sep = ",";
        }
    buf_fmt(b, "},\"paths_overflow\":%" PRIu64 "}", g.overflow);
}

static void free_handle(uv_handle_t *h) { free(h); }

static int listener_up(void) {
    if (g.listener) return 0;
    uv_tcp_t *l = xrealloc(NULL, sizeof *l);
    int rc = uv_tcp_init(g.loop, l);
    if (rc) {
        free(l);
        return rc;
    }
    l->data = NULL;
    /* libuv binds TCP with SO_REUSEADDR: our port's TIME_WAIT connections do not block it */
    if (!(rc = uv_tcp_bind(l, (const struct sockaddr *)&g.addr, 0)))
        rc = uv_listen((uv_stream_t *)l, 1024, on_accept);
    if (rc) {
        uv_close((uv_handle_t *)l, free_handle);
        return rc;
    }
    g.listener = l;
    return 0;
}

static void drop_conn(uv_handle_t *h, void *except) {
    conn_t *c = h->data;
    if (h->type == UV_TCP && c && c != except && !c->control) conn_close(c, false);
}

/* Like a killed process: connects are refused, the listen port's connections closed. */
static void listener_down(conn_t *except) {
    if (g.listener) uv_close((uv_handle_t *)g.listener, free_handle);
    g.listener = NULL;
    uv_walk(g.loop, drop_conn, except);
}

static void on_up_timer(uv_timer_t *t) {
    int rc = listener_up();
    if (rc) fprintf(stderr, "fault_upstream: cannot listen again: %s\n", uv_strerror(rc));
}

/* Applies a /_fault/mode body: 0, or the status to answer with *err saying why (400: nothing
 * was applied; 500: the port could not be bound again). */
static int set_mode(const char *p, size_t n, conn_t *self, const char **err) {
    static char text[128];
    fault_t f = g.dflt;
    int updown = 0;
    int64_t up_after = 0;
    while (n) {
        size_t skip = strspn(p, " ,\t\r\n"), wl;
        if (skip >= n) break;
        p += skip, n -= skip;
        for (wl = 0; wl < n && !strchr(" ,\t\r\n", p[wl]); wl++) continue;
        const char *colon = memchr(p, ':', wl);
        size_t kn = colon ? (size_t)(colon - p) : wl;
        if (eq(p, wl, "normal")) {
            f = g.start, updown = 1;
        } else if (eq(p, wl, "up")) {
            updown = 1;
        } else if (eq(p, kn, "down")) {
            updown = -1, up_after = 0;
            if (colon && (up_after = parse_dec(colon + 1, wl - kn - 1, DELAY_LIMIT)) <= 0) {
                *err = "down:MS wants MS > 0";
                return 400;
            }
        } else if (!colon || directive(&f, p, kn, colon + 1, wl - kn - 1) <= 0) {
            snprintf(text, sizeof text, "bad mode word '%.*s'", (int)(wl < 64 ? wl : 64), p);
            *err = text;
            return 400;
        }
        p += wl, n -= wl;
    }
    g.dflt = f;
    uv_timer_stop(&g.up_timer);
    if (updown < 0) {
        listener_down(self);
        if (up_after) uv_timer_start(&g.up_timer, on_up_timer, (uint64_t)up_after, 0);
    } else if (updown > 0) {
        int rc = listener_up();
        if (rc) {
            snprintf(text, sizeof text, "cannot listen again: %s", uv_strerror(rc));
            *err = text;
            return 500;
        }
    }
    return 0;
}

static void control(conn_t *c) {
    req_t *r = &c->req;
    bool stats = eq(r->target, r->path_len, "/_fault/stats"), close = !r->keepalive;
    int status = 200;
    const char *err = NULL;
    if (stats && (eq(r->method, r->method_len, "GET") || r->head)) {
        stats_json(&g.scratch);
    } else if (stats && eq(r->method, r->method_len, "DELETE")) {
        stats_reset();
        stats_json(&g.scratch);
    } else if (eq(r->target, r->path_len, "/_fault/mode") && eq(r->method, r->method_len, "POST")) {
        if (r->body_len > CTL_MAX)
            status = 400, err = "mode body too long";
        else if (!(status = set_mode(r->ctl, r->ctl_len, c, &err)))
            status = 200;
        if (!err) stats_json(&g.scratch);
        close = close || (!g.listener && !c->control); /* its port is down */
    } else {
        status = 404;
        err = "unknown control request";
    }
    if (err) error_json(&g.scratch, status, err);
    send_json(c, status, close);
}

/* ------------------------------------------------------------------ connections */

static void on_conn_closed(uv_handle_t *h) {
    conn_t *c = h->data;
    if (--c->refs) return;
    if (c->counted) g.open--;
    EVP_MD_CTX_free(c->md);
    free(c->in);
    free(c->out.p);
    free(c);
}

static void conn_close(conn_t *c, bool rst) {
    if (c->closing) return;
    c->closing = true;
    c->state = ST_CLOSING;
    uv_close((uv_handle_t *)&c->timer, on_conn_closed);
    /* close_reset refuses a handle with a shutdown in progress: then a FIN it is */
    if (!rst || uv_tcp_close_reset(&c->tcp, on_conn_closed) != 0)
        uv_close((uv_handle_t *)&c->tcp, on_conn_closed);
}

static void on_timer(uv_timer_t *t) {
    conn_t *c = t->data;
    if (c->state == ST_CLOSING) {
        conn_close(c, false); /* the linger is over */
    } else if (c->state == ST_WAIT) {
        respond(c);
        conn_process(c);
    }
}

static void on_shutdown(uv_shutdown_t *s, int status) {
    conn_t *c = s->handle->data;
    c->shut_done = true;
    if (status < 0 || c->eof)
        conn_close(c, false);
    else
        uv_timer_start(&c->timer, on_timer, LINGER_MS, 0);
}

static void body_feed(conn_t *c, const char *p, size_t n) {
    req_t *r = &c->req;
    if (!r->hashing) {
        if (!c->md && !(c->md = EVP_MD_CTX_new())) abort();
        if (!EVP_DigestInit_ex(c->md, EVP_sha256(), NULL)) abort();
        r->hashing = true;
    }
    EVP_DigestUpdate(c->md, p, n);
    size_t keep = n < CTL_MAX - r->ctl_len ? n : CTL_MAX - r->ctl_len;
    memcpy(r->ctl + r->ctl_len, p, keep);
    r->ctl_len += keep;
    r->body_len += n;
}

static void request_done(conn_t *c) {
    static const char hex[] = "0123456789abcdef";
    req_t *r = &c->req;
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int mdlen = 0;
    memcpy(r->sum, EMPTY_SHA256, sizeof r->sum);
    if (r->hashing && EVP_DigestFinal_ex(c->md, md, &mdlen))
        for (unsigned int i = 0; i < mdlen && i < 32; i++)
            r->sum[2 * i] = hex[md[i] >> 4], r->sum[2 * i + 1] = hex[md[i] & 15];
    c->state = ST_HEAD;
    if (r->path_len >= 8 && memcmp(r->target, "/_fault/", 8) == 0) {
        control(c);
        return;
    }
    r->n = ++g.requests;
    count_path(r->target, r->path_len);
    if (r->f.kind == F_HANG) {
        c->state = ST_HANG;
        c->in_off = c->in_len; /* requests behind a hung one are never answered */
    } else if (r->f.delay_ms > 0) {
        c->state = ST_WAIT;
        uv_timer_start(&c->timer, on_timer, (uint64_t)r->f.delay_ms, 0);
    } else {
        respond(c);
    }
}

static void conn_update_reading(conn_t *c) {
    bool want = !c->closing && !c->eof && c->in_len - c->in_off < IN_MAX &&
                uv_stream_get_write_queue_size((uv_stream_t *)&c->tcp) < OUT_MAX;
    if (want == c->reading || c->closing) return;
    c->reading = want;
    if (!want)
        uv_read_stop((uv_stream_t *)&c->tcp);
    else if (uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read) != 0)
        conn_close(c, false);
}

/* Parses and answers what input allows, flushes the batch, then decides about reading. */
static void conn_process(conn_t *c) {
    req_t *r = &c->req;
    while (!c->closing && c->in) {
        const char *p = c->in + c->in_off, *eol;
        size_t n = c->in_len - c->in_off;
        if (c->state == ST_HEAD) {
            if (n == 0) break;
            const char *end = memmem(p, n < HEAD_MAX ? n : HEAD_MAX, "\r\n\r\n", 4), *why;
            if (!end) {
                if (n >= HEAD_MAX) reject(c, 431, "request head too large");
                break;
            }
            size_t hn = (size_t)(end - p) + 4;
            int st = parse_head(c, p, hn, &why);
            c->in_off += hn;
            if (st) {
                reject(c, st, why);
                break;
            }
            if (r->chunked)
                c->state = ST_CHUNK_SIZE;
            else if (r->left)
                c->state = ST_BODY;
            else
                request_done(c);
            if (c->state != ST_HEAD && r->expect && r->f.kind != F_HANG)
                buf_lit(&c->out, "HTTP/1.1 100 Continue\r\n\r\n");
        } else if (c->state == ST_BODY || c->state == ST_CHUNK_DATA) {
            size_t take = n < r->left ? n : (size_t)r->left;
            if (take) body_feed(c, p, take);
            c->in_off += take;
            r->left -= take;
            if (r->left) break;
            if (c->state == ST_BODY)
                request_done(c);
            else
                c->state = ST_CHUNK_END;
        } else if (c->state <= ST_TRAILER) { /* a line: chunk size, chunk end, trailer */
            if (!(eol = memmem(p, n, "\r\n", 2))) {
                if (n > HEAD_MAX) reject(c, 400, "chunk line too long");
                break;
            }
            size_t ln = (size_t)(eol - p);
            int64_t size;
            c->in_off += ln + 2;
            if (c->state == ST_CHUNK_END) {
                if (ln) {
                    reject(c, 400, "chunk data longer than its size");
                    break;
                }
                c->state = ST_CHUNK_SIZE;
            } else if (c->state == ST_CHUNK_SIZE) {
                if ((size = parse_chunk_size(p, ln)) < 0) {
                    reject(c, 400, "bad chunk size");
                    break;
                }
                r->left = (uint64_t)size;
                c->state = size ? ST_CHUNK_DATA : ST_TRAILER;
            } else if (ln == 0) {
                request_done(c);
            }
        } else {
            break; /* ST_WAIT, ST_HANG, ST_CLOSING: nothing to parse now */
        }
    }
    out_flush(c);
    if (c->closing) return;
    if (c->eof && c->state == ST_HANG)
        conn_close(c, false);
    else if (c->eof && c->state != ST_WAIT)
        conn_finish(c); /* answers given; a request cut by the EOF never will be */
    else
        conn_update_reading(c);
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf) {
    conn_t *c = h->data;
    if (c->in_off == c->in_len) {
        c->in_off = c->in_len = 0;
        if (c->in_cap > 4 * IN_CHUNK) { /* a burst is over: back to a small buffer */
            free(c->in);
            c->in = NULL;
            c->in_cap = 0;
        }
    } else if (c->in_off && c->in_cap - c->in_len < IN_CHUNK) {
        memmove(c->in, c->in + c->in_off, c->in_len - c->in_off);
        c->in_len -= c->in_off;
        c->in_off = 0;
    }
    if (c->in_cap - c->in_len < IN_CHUNK) {
        c->in_cap = c->in_cap ? 2 * c->in_cap : IN_CHUNK;
        c->in = xrealloc(c->in, c->in_cap);
    }
    *buf = uv_buf_init(c->in + c->in_len, (unsigned)(c->in_cap - c->in_len));
}

static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf) {
    conn_t *c = s->data;
    if (nread == 0) return;
    if (nread < 0 && nread != UV_EOF) {
        conn_close(c, false);
        return;
    }
    if (nread < 0) {
        c->eof = true;
        c->reading = false; /* libuv stops reading at EOF */
    } else if (c->state == ST_HANG || c->state == ST_CLOSING) {
        c->in_off = c->in_len = 0; /* dropped */
    } else {
        c->in_len += (size_t)nread;
    }
    if (c->state == ST_CLOSING) {
        if (c->eof && c->shut_done) conn_close(c, false);
        return;
    }
    conn_process(c);
}

static void on_accept(uv_stream_t *server, int status) {
    if (status < 0) return;
    conn_t *c = xrealloc(NULL, sizeof *c);
    memset(c, 0, sizeof *c);
    uv_tcp_init(g.loop, &c->tcp);
    uv_timer_init(g.loop, &c->timer);
    c->tcp.data = c->timer.data = c;
    c->refs = 2;
    c->control = server == (uv_stream_t *)&g.control;
    if (uv_accept(server, (uv_stream_t *)&c->tcp) != 0) {
        conn_close(c, false);
        return;
    }
    if (!c->control) {
        c->counted = true;
        g.accepted++;
        g.open++;
    }
    uv_tcp_nodelay(&c->tcp, 1);
    conn_update_reading(c);
}

/* ------------------------------------------------------------------ process */

static void close_any(uv_handle_t *h, void *unused) {
    if (uv_is_closing(h)) return;
    if (h->data && h->type == UV_TCP)
        conn_close(h->data, false);
    else if (!h->data) /* listeners, signals, the up timer; a conn's timer goes with it */
        uv_close(h, h == (uv_handle_t *)g.listener ? free_handle : NULL);
}

/* SIGTERM/SIGINT: every handle closed, the loop runs dry, main returns 0. */
static void on_signal(uv_signal_t *s, int signum) {
    uv_walk(g.loop, close_any, NULL);
    g.listener = NULL;
}

/* HOST:PORT or [V6]:PORT into ss; 0 or -1. */
static int parse_addr(const char *s, struct sockaddr_storage *ss) {
    const char *colon = strrchr(s, ':');
    char host[64];
    if (!colon) return -1;
    int64_t port = parse_dec(colon + 1, strlen(colon + 1), 65535);
    size_t hn = (size_t)(colon - s);
    bool v6 = hn >= 2 && s[0] == '[' && s[hn - 1] == ']';
    if (v6) s++, hn -= 2;
    if (port < 0 || hn >= sizeof host) return -1;
    memcpy(host, s, hn);
    host[hn] = 0;
    memset(ss, 0, sizeof *ss);
    return (v6 ? uv_ip6_addr(host, (int)port, (struct sockaddr_in6 *)ss)
               : uv_ip4_addr(host, (int)port, (struct sockaddr_in *)ss)) == 0
               ? 0
               : -1;
}

/* The bound address of t into ss (so "up" rebinds the same port) and as text. */
static void bound(uv_tcp_t *t, struct sockaddr_storage *ss, char *text, size_t size) {
    int len = sizeof *ss;
    char ip[64];
    uv_tcp_getsockname(t, (struct sockaddr *)ss, &len);
    if (ss->ss_family == AF_INET6) {
        uv_ip6_name((struct sockaddr_in6 *)ss, ip, sizeof ip);
        snprintf(text, size, "[%s]:%d", ip, ntohs(((struct sockaddr_in6 *)ss)->sin6_port));
    } else {
        uv_ip4_name((struct sockaddr_in *)ss, ip, sizeof ip);
        snprintf(text, size, "%s:%d", ip, ntohs(((struct sockaddr_in *)ss)->sin_port));
    }
}

static int write_ready(const char *path) {
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (!f) return -1;
    fprintf(f, "{\"address\":\"%s\",\"control\":\"%s\",\"name\":\"%s\",\"pid\":%d}\n", g.addr_text,
            g.control_text, g.name, (int)getpid());
    if (fclose(f) != 0) return -1;
    return rename(tmp, path);
}

static int usage(FILE *f, int rc) {
    fputs("usage: fault_upstream [--listen HOST:PORT] [--control HOST:PORT] [--name NAME]\n"
          "                      [--ready-file PATH] [--delay-ms MS] [--status N] [--size N]\n"
          "                      [--fault none|hang|reset|close|close-mid-body|bad-framing|"
          "bad-chunk]\n"
          "the request grammar is at the top of ctest/fault_upstream.c\n",
          f);
    return rc;
}

int main(int argc, char **argv) {
    static const char *const flags[][2] = {
        {"--delay-ms", "delay"}, {"--status", "status"}, {"--size", "size"}, {"--fault", "fault"}};
    const char *listen_at = "127.0.0.1:0", *control_at = NULL, *ready = NULL;
    int rc;
    g.name = "fault_upstream";
    g.start = (fault_t){.kind = F_NONE, .status = 200, .delay_ms = 0, .size = -1};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = argv[i + 1];
        size_t k;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) return usage(stdout, 0);
        if (!v) return usage(stderr, 2);
        i++;
        for (k = 0; k < 4 && strcmp(a, flags[k][0]); k++) continue;
        if (!strcmp(a, "--listen"))
            listen_at = v;
        else if (!strcmp(a, "--control"))
            control_at = v;
        else if (!strcmp(a, "--name"))
            g.name = v;
        else if (!strcmp(a, "--ready-file"))
            ready = v;
        else if (k == 4 || directive(&g.start, flags[k][1], strlen(flags[k][1]), v, strlen(v)) < 1)
            return usage(stderr, 2);
    }
    g.name_len = strlen(g.name);
    /* the name goes into a header and the ready file unescaped */
    if (!g.name_len || g.name_len > 64 ||
        strspn(g.name, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") !=
            g.name_len) {
        fputs("fault_upstream: --name wants 1-64 of [A-Za-z0-9._-]\n", stderr);
        return 2;
    }
    g.dflt = g.start;
    if (parse_addr(listen_at, &g.addr) != 0 ||
        parse_addr(control_at ? control_at : listen_at, &g.control_addr) != 0) {
        fputs("fault_upstream: an address is HOST:PORT or [V6]:PORT\n", stderr);
        return 2;
    }
    if (!control_at) /* port 0 on the listen host; sin_port and sin6_port share their place */
        ((struct sockaddr_in *)&g.control_addr)->sin_port = 0;
    for (size_t i = 0; i < PAT_SIZE; i++)
        pattern[i] = "abcdefghijklmnopqrstuvwxyz0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ-_"[i % 64];
    signal(SIGPIPE, SIG_IGN);

    g.loop = uv_default_loop();
    uv_tcp_init(g.loop, &g.control);
    uv_timer_init(g.loop, &g.up_timer);
    uv_signal_init(g.loop, &g.sigterm);
    uv_signal_init(g.loop, &g.sigint);
    uv_signal_start(&g.sigterm, on_signal, SIGTERM);
    uv_signal_start(&g.sigint, on_signal, SIGINT);
    if ((rc = listener_up()) != 0 ||
        (rc = uv_tcp_bind(&g.control, (const struct sockaddr *)&g.control_addr, 0)) != 0 ||
        (rc = uv_listen((uv_stream_t *)&g.control, 128, on_accept)) != 0) {
        fprintf(stderr, "fault_upstream: cannot listen: %s\n", uv_strerror(rc));
        return 1;
    }
    bound(g.listener, &g.addr, g.addr_text, sizeof g.addr_text);
    bound(&g.control, &g.control_addr, g.control_text, sizeof g.control_text);
    printf("listening %s\ncontrol %s\n", g.addr_text, g.control_text);
    fflush(stdout);
    if (ready && write_ready(ready) != 0) {
        perror("fault_upstream: ready file");
        return 1;
    }

    uv_run(g.loop, UV_RUN_DEFAULT);
    uv_loop_close(g.loop);
    stats_reset();
    free(g.scratch.p);
    return 0;
}
