/* mock_upstream.c — the mock upstreams of `sluice test` specs (lua/sluice/smoke.lua).
 *
 * A mock listens on 127.0.0.1:0 (and on more ports for an upstream's further targets) and
 * answers every HTTP/1.1 request the way it is set (sl_mock_set; a spec may change it
 * between cases): a fixed answer, an echo of the request as JSON, or a fault (reset, hang,
 * close, close mid-body), each after an optional delay, for all requests or the next N
 * (sl_mock_times). A raw mode answers every read of a TCP connection with fixed bytes (a
 * Redis stand-in behind a tcp listener); a websocket mode answers an Upgrade with 101 and
 * then echoes the bytes it gets. It records the last request (head and de-chunked body)
 * and counts requests, for the `upstream:` expectations of a case.
 *
 * One accept thread and one thread per connection, blocking I/O; every wait also polls a
 * pipe that sl_mock_stop writes to, so a stop ends them all at once. A test tool, never on
 * a gateway's path: it runs in the process of `sluice test`, beside the in-process
 * gateway's own threads, from libsluice_test.so (never in the binary: see testapi.c).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/evp.h>
#include <openssl/sha.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/common.h"
#include "base/wbuf.h"
#include "server/testapi.h"

enum { M_RESPOND, M_ECHO, M_RESET, M_HANG, M_CLOSE, M_CLOSE_MID_BODY, M_WEBSOCKET, M_RAW };

#define HEAD_MAX (64 * 1024)
#define BODY_MAX (8 * 1024 * 1024)
#define MAX_PORTS 16

typedef struct {
    int fd; /* the first listening socket */
    int fds[MAX_PORTS];
    int nfds; /* guarded by mu */
    pthread_t accept_thread;
    int wake[2]; /* a pipe, readable once sl_mock_stop wrote to it: wakes every thread */
    atomic_int stop;
    atomic_int conns; /* connection threads still running */
    pthread_mutex_t mu;
    /* the answer, guarded by mu */
    int mode, status, delay_ms;
    int times, after_mode; /* mode applies to `times` more requests (-1: all), then after_mode */
    char *head;            /* extra header lines, each ending in CRLF */
    size_t headlen;
    char *body;
    size_t bodylen;
    /* what it saw, guarded by mu */
    uint64_t count;
    char *last;
    size_t lastlen;
} sl_mock_t;

typedef struct {
    sl_mock_t *m;
    int fd;
} conn_arg_t;

/* Waits for fd to be readable; 1 ready, 0 stopping, -1 error. */
static int wait_readable(sl_mock_t *m, int fd) {
    for (;;) {
        struct pollfd p[2] = {{.fd = fd, .events = POLLIN}, {.fd = m->wake[0], .events = POLLIN}};
        int rc = poll(p, 2, -1);
        if (rc < 0 && errno == EINTR) continue;
        if (rc < 0) return -1;
        return p[1].revents ? 0 : 1;
    }
}

/* Sleeps ms, or less when the mock is stopping. */
static void sleep_ms(sl_mock_t *m, int ms) {
    struct pollfd p = {.fd = m->wake[0], .events = POLLIN};
    if (ms > 0) poll(&p, 1, ms);
}

/* The value of header `name` in head[0..n), or NULL; *vlen its length. */
static const char *header(const char *head, size_t n, const char *name, size_t *vlen) {
    size_t nl = strlen(name);
    const char *end = head + n;
    for (const char *l = memchr(head, '\n', n); l && l + 1 < end;
         l = memchr(l + 1, '\n', (size_t)(end - l - 1))) {
        const char *s = l + 1;
        if ((size_t)(end - s) > nl && strncasecmp(s, name, nl) == 0 && s[nl] == ':') {
            const char *v = s + nl + 1, *e = memchr(v, '\r', (size_t)(end - v));
            if (!e) e = end;
            while (v < e && (*v == ' ' || *v == '\t'))
                v++;
            *vlen = (size_t)(e - v);
            return v;
        }
    }
    return NULL;
}

/* Decodes a chunked body in place from buf[0..n): its length, -1 incomplete, -2
 * bad; *used the bytes consumed. */
static long dechunk(char *buf, size_t n, size_t *used) {
    size_t in = 0, out = 0;
    for (;;) {
        char *crlf = memmem(buf + in, n - in, "\r\n", 2);
        if (!crlf) return -1;
        char *endp;
        unsigned long size = strtoul(buf + in, &endp, 16);
        if (endp == buf + in) return -2;
        in = (size_t)(crlf - buf) + 2;
        if (size == 0) {
            /* trailers end at an empty line */
            char *fin = in + 2 <= n && memcmp(buf + in, "\r\n", 2) == 0
                            ? buf + in
                            : memmem(buf + in, n - in, "\r\n\r\n", 4);
            if (!fin) return -1;
            *used = (size_t)(fin - buf) + (fin == buf + in ? 2 : 4);
            return (long)out;
        }
        if (n - in < size + 2) return -1;
        memmove(buf + out, buf + in, size);
        out += size;
        in += size + 2;
    }
}

/* {"method","path","query","headers":{lower-case name: value},"body"}, as the
 * echo plugin. */
static char *echo_json(const char *head, size_t hlen, const char *body, size_t blen,
                       size_t *outlen) {
    sl_wbuf_t b = {0}, *w = &b;
    const char *sp = memchr(head, ' ', hlen);
    const char *eol = memchr(head, '\r', hlen);
    const char *sp2 = sp ? memchr(sp + 1, ' ', (size_t)(eol - sp - 1)) : NULL;
    if (!sp || !eol || !sp2) sp = sp2 = head;
    const char *target = sp + 1, *q = memchr(target, '?', (size_t)(sp2 - target));
    sl_wbuf_cat(w, "{\"method\":");
    sl_wbuf_json_quoted(w, (sl_str_t){head, (size_t)(sp - head)});
    sl_wbuf_cat(w, ",\"path\":");
    sl_wbuf_json_quoted(w, (sl_str_t){target, (size_t)((q ? q : sp2) - target)});
    sl_wbuf_cat(w, ",\"query\":");
    sl_wbuf_json_quoted(w, (sl_str_t){q ? q + 1 : "", q ? (size_t)(sp2 - q - 1) : 0});
    sl_wbuf_cat(w, ",\"headers\":{");
    const char *end = head + hlen;
    bool first = true;
    for (const char *l = eol; l && l + 2 < end; l = memchr(l + 2, '\r', (size_t)(end - l - 2))) {
        const char *s = l + 2, *e = memchr(s, '\r', (size_t)(end - s)), *c;
        if (!e) e = end;
        if (e == s || !(c = memchr(s, ':', (size_t)(e - s)))) continue;
        char name[256];
        size_t nl = SL_MIN((size_t)(c - s), sizeof(name));
        for (size_t i = 0; i < nl; i++)
            name[i] = (char)(s[i] >= 'A' && s[i] <= 'Z' ? s[i] + 32 : s[i]);
        const char *v = c + 1;
        while (v < e && *v == ' ')
            v++;
        if (!first) SL_WBUF_LIT(w, ",");
        first = false;
        sl_wbuf_json_quoted(w, (sl_str_t){name, nl});
        SL_WBUF_LIT(w, ":");
        sl_wbuf_json_quoted(w, (sl_str_t){v, (size_t)(e - v)});
    }
    sl_wbuf_cat(w, "},\"body\":");
    sl_wbuf_json_quoted(w, (sl_str_t){body, blen});
    sl_wbuf_cat(w, "}\n");
    *outlen = sl_wbuf_failed(&b) ? 0 : b.len;
    return sl_wbuf_take(&b);
}

static void record(sl_mock_t *m, const char *head, size_t hlen, const char *body, size_t blen) {
    char *copy = malloc(hlen + blen + 1);
    pthread_mutex_lock(&m->mu);
    m->count++;
    if (copy) {
        memcpy(copy, head, hlen);
        memcpy(copy + hlen, body, blen);
        free(m->last);
        m->last = copy;
        m->lastlen = hlen + blen;
    }
    pthread_mutex_unlock(&m->mu);
}

/* The websocket accept key of RFC 6455 for the client's key. */
static void ws_accept(const char *key, size_t klen, char out[64]) {
    static const char guid[] = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";
    char buf[256];
    unsigned char md[SHA_DIGEST_LENGTH];
    klen = SL_MIN(klen, sizeof(buf) - sizeof(guid));
    memcpy(buf, key, klen);
    memcpy(buf + klen, guid, sizeof(guid) - 1);
    SHA1((unsigned char *)buf, klen + sizeof(guid) - 1, md);
    EVP_EncodeBlock((unsigned char *)out, md, SHA_DIGEST_LENGTH);
}

static void answer_raw(sl_mock_t *m, int fd) {
    char buf[16384];
    while (wait_readable(m, fd) == 1) {
        ssize_t r = recv(fd, buf, sizeof(buf), 0);
        if (r <= 0) return;
        record(m, buf, (size_t)r, "", 0);
        pthread_mutex_lock(&m->mu);
        int delay = m->delay_ms;
        size_t rlen = m->bodylen;
        char *reply = rlen ? malloc(rlen) : NULL; /* bytes: they may hold NULs */
        if (reply) memcpy(reply, m->body, rlen);
        pthread_mutex_unlock(&m->mu);
        sleep_ms(m, delay);
        int rc = reply ? sl_test_send(fd, reply, rlen) : 0;
        free(reply);
        if (rc) return;
    }
}

static void *conn_main(void *arg) {
    conn_arg_t *ca = arg;
    sl_mock_t *m = ca->m;
    int fd = ca->fd;
    free(ca);
    char *buf = malloc(HEAD_MAX + BODY_MAX);
    size_t n = 0;
    pthread_mutex_lock(&m->mu);
    int raw = m->mode == M_RAW;
    pthread_mutex_unlock(&m->mu);
    if (raw) {
        answer_raw(m, fd);
        goto out;
    }
    while (buf) {
        /* one request: its head, then its body */
        char *eoh;
        while (!(eoh = memmem(buf, n, "\r\n\r\n", 4))) {
            if (n >= HEAD_MAX || wait_readable(m, fd) != 1) goto out;
            ssize_t r = recv(fd, buf + n, HEAD_MAX + BODY_MAX - n, 0);
            if (r <= 0) goto out;
            n += (size_t)r;
        }
        size_t hlen = (size_t)(eoh - buf) + 4, vlen, used = hlen;
        long blen = 0;
        const char *v;
        for (;;) {
            if ((v = header(buf, hlen, "transfer-encoding", &vlen)) && vlen >= 7 &&
                strncasecmp(v + vlen - 7, "chunked", 7) == 0) {
                char *tmp = malloc(n - hlen + 1);
                if (!tmp) goto out;
                memcpy(tmp, buf + hlen, n - hlen);
                size_t cu = 0;
                blen = dechunk(tmp, n - hlen, &cu);
                if (blen >= 0) {
                    /* body decoded into tmp; put it after the head, keep what follows */
                    size_t rest = n - hlen - cu;
                    memmove(buf + hlen + (size_t)blen, buf + hlen + cu, rest);
                    memcpy(buf + hlen, tmp, (size_t)blen);
                    n = hlen + (size_t)blen + rest;
                }
                free(tmp);
                if (blen == -2) goto out;
            } else if ((v = header(buf, hlen, "content-length", &vlen))) {
                blen = strtol(v, NULL, 10);
                if (blen < 0 || blen > BODY_MAX) goto out;
                if (n - hlen < (size_t)blen) blen = -1;
            }
            if (blen >= 0) break;
            if (n >= HEAD_MAX + BODY_MAX || wait_readable(m, fd) != 1) goto out;
            ssize_t r = recv(fd, buf + n, HEAD_MAX + BODY_MAX - n, 0);
            if (r <= 0) goto out;
            n += (size_t)r;
        }
        used = hlen + (size_t)blen;
        record(m, buf, hlen, buf + hlen, (size_t)blen);

        pthread_mutex_lock(&m->mu);
        int mode = m->mode, status = m->status, delay = m->delay_ms;
        if (m->times == 0) mode = m->after_mode;
        if (m->times > 0) m->times--;
        char *xhead = m->headlen ? strndup(m->head, m->headlen) : strdup("");
        char *body = malloc(m->bodylen + 1);
        size_t bodylen = m->bodylen;
        if (body) memcpy(body, m->body ? m->body : "", bodylen);
        pthread_mutex_unlock(&m->mu);
        if (!xhead || !body) {
            free(xhead);
            free(body);
            goto out;
        }
        v = header(buf, hlen, "connection", &vlen);
        bool close_after = v && vlen == 5 && strncasecmp(v, "close", 5) == 0;
        if (mode == M_HANG) {
            free(xhead);
            free(body);
            char sink[4096];
            while (wait_readable(m, fd) == 1 && recv(fd, sink, sizeof(sink), 0) > 0) {
            }
            goto out;
        }
        sleep_ms(m, delay);
        if (mode == M_RESET || mode == M_CLOSE) {
            free(xhead);
            free(body);
            if (mode == M_RESET) {
                struct linger lg = {.l_onoff = 1, .l_linger = 0};
                setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
            }
            goto out;
        }
        /* a websocket mock answers requests without an Upgrade as a fixed answer */
        if (mode == M_WEBSOCKET && !header(buf, hlen, "upgrade", &vlen)) mode = M_RESPOND;
        if (mode == M_WEBSOCKET) {
            const char *key = header(buf, hlen, "sec-websocket-key", &vlen);
            char acc[64] = "";
            if (key) ws_accept(key, vlen, acc);
            char h[512];
            int hn = snprintf(h, sizeof(h),
                              "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
                              "Connection: Upgrade\r\nSec-WebSocket-Accept: %s\r\n%s\r\n",
                              acc, xhead);
            free(xhead);
            free(body);
            if (sl_test_send(fd, h, (size_t)SL_MIN(hn, (int)sizeof(h) - 1)) != 0) goto out;
            /* bytes that came with the head, then everything after, go back as they
             * came */
            if (n > used && sl_test_send(fd, buf + used, n - used) != 0) goto out;
            while (wait_readable(m, fd) == 1) {
                ssize_t r = recv(fd, buf, HEAD_MAX, 0);
                if (r <= 0 || sl_test_send(fd, buf, (size_t)r) != 0) break;
            }
            goto out;
        }
        size_t outlen = bodylen;
        char *payload = body;
        if (mode == M_ECHO) {
            payload = echo_json(buf, hlen, buf + hlen, (size_t)blen, &outlen);
            free(body);
            body = payload;
            if (!payload) {
                free(xhead);
                goto out;
            }
        }
        char *resp = NULL;
        size_t rlen = 0;
        FILE *f = open_memstream(&resp, &rlen);
        if (!f) {
            free(xhead);
            free(body);
            goto out;
        }
        fprintf(f, "HTTP/1.1 %d %s\r\n%s", status, status < 400 ? "OK" : "Mock Status", xhead);
        if (mode == M_ECHO && !strcasestr(xhead, "content-type:"))
            fputs("Content-Type: application/json\r\n", f);
        if (status != 204 && status != 304 && !(status >= 100 && status < 200))
            fprintf(f, "Content-Length: %zu\r\n", outlen);
        if (close_after) fputs("Connection: close\r\n", f);
        fputs("\r\n", f);
        fclose(f);
        free(xhead);
        int rc = sl_test_send(fd, resp, rlen);
        free(resp);
        size_t part = mode == M_CLOSE_MID_BODY ? outlen / 2 : outlen;
        if (rc == 0 && strncmp(buf, "HEAD ", 5) != 0) rc = sl_test_send(fd, payload, part);
        free(body);
        if (rc != 0 || mode == M_CLOSE_MID_BODY || close_after) goto out;
        memmove(buf, buf + used, n - used);
        n -= used;
    }
out:
    free(buf);
    close(fd);
    atomic_fetch_sub(&m->conns, 1);
    return NULL;
}

/* Accepts on any of the mock's sockets; the fd, or -1 when stopping. */
static int accept_any(sl_mock_t *m) {
    while (!atomic_load(&m->stop)) {
        struct pollfd p[MAX_PORTS + 1];
        pthread_mutex_lock(&m->mu);
        int n = m->nfds;
        for (int i = 0; i < n; i++)
            p[i] = (struct pollfd){.fd = m->fds[i], .events = POLLIN};
        pthread_mutex_unlock(&m->mu);
        p[n] = (struct pollfd){.fd = m->wake[0], .events = POLLIN};
        if (poll(p, (nfds_t)n + 1, -1) <= 0) continue;
        if (p[n].revents) break;
        for (int i = 0; i < n; i++)
            if (p[i].revents & POLLIN) {
                int c = accept4(p[i].fd, NULL, NULL, SOCK_CLOEXEC);
                /* head and body leave in two writes: without NODELAY the body waits for
                 * the peer's delayed ACK (40 ms) */
                int one = 1;
                if (c >= 0) setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
                if (c >= 0) return c;
            }
    }
    return -1;
}

static int listen_loopback(void) {
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd >= 0 && (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0 || listen(fd, 128) != 0)) {
        close(fd);
        fd = -1;
    }
    return fd;
}

static int fd_port(int fd) {
    struct sockaddr_in sa;
    socklen_t len = sizeof(sa);
    if (getsockname(fd, (struct sockaddr *)&sa, &len) != 0) return -1;
    return ntohs(sa.sin_port);
}

static void *accept_main(void *arg) {
    sl_mock_t *m = arg;
    for (;;) {
        int c = accept_any(m);
        if (c < 0) break;
        conn_arg_t *ca = malloc(sizeof(*ca));
        pthread_t t;
        if (!ca) {
            close(c);
            continue;
        }
        *ca = (conn_arg_t){m, c};
        atomic_fetch_add(&m->conns, 1);
        if (pthread_create(&t, NULL, conn_main, ca) != 0) {
            atomic_fetch_sub(&m->conns, 1);
            close(c);
            free(ca);
            continue;
        }
        pthread_detach(t);
    }
    return NULL;
}

/** Starts a mock on 127.0.0.1:0 answering 200 with an empty body; NULL on
 * failure. */
sl_mock_t *sl_mock_start(void);
sl_mock_t *sl_mock_start(void) {
    sl_mock_t *m = calloc(1, sizeof(*m));
    if (!m) return NULL;
    m->wake[0] = m->wake[1] = -1;
    if ((m->fd = listen_loopback()) < 0 || pipe2(m->wake, O_CLOEXEC) != 0) goto fail;
    m->fds[m->nfds++] = m->fd;
    pthread_mutex_init(&m->mu, NULL);
    m->status = 200;
    m->times = -1;
    if (pthread_create(&m->accept_thread, NULL, accept_main, m) != 0) goto fail;
    return m;
fail:
    if (m->fd >= 0) close(m->fd);
    if (m->wake[0] >= 0) close(m->wake[0]);
    if (m->wake[1] >= 0) close(m->wake[1]);
    free(m);
    return NULL;
}

/** The port the mock listens on. */
int sl_mock_port(sl_mock_t *m);
int sl_mock_port(sl_mock_t *m) { return fd_port(m->fd); }

/** Listens on one more port of 127.0.0.1 (for an upstream's second target, say: an
 *  address may not repeat in one upstream); the port, or -1. */
int sl_mock_add_port(sl_mock_t *m);
int sl_mock_add_port(sl_mock_t *m) {
    pthread_mutex_lock(&m->mu);
    int fd = m->nfds < MAX_PORTS ? listen_loopback() : -1;
    if (fd >= 0) m->fds[m->nfds++] = fd;
    pthread_mutex_unlock(&m->mu);
    return fd >= 0 ? fd_port(fd) : -1;
}

/** Sets how the mock answers from now on: a mode (see the enum at the top), a
 * status, a delay, extra header lines ("Name: value\r\n"...) and a body
 * (copied). */
void sl_mock_set(sl_mock_t *m, int mode, int status, int delay_ms, const char *head, size_t headlen,
                 const char *body, size_t bodylen);
void sl_mock_set(sl_mock_t *m, int mode, int status, int delay_ms, const char *head, size_t headlen,
                 const char *body, size_t bodylen) {
    char *h = malloc(headlen + 1), *b = malloc(bodylen + 1);
    if (!h || !b) {
        free(h);
        free(b);
        return;
    }
    memcpy(h, head, headlen);
    memcpy(b, body, bodylen);
    pthread_mutex_lock(&m->mu);
    m->mode = mode;
    m->times = -1;
    m->status = status;
    m->delay_ms = delay_ms;
    free(m->head);
    free(m->body);
    m->head = h;
    m->headlen = headlen;
    m->body = b;
    m->bodylen = bodylen;
    pthread_mutex_unlock(&m->mu);
}

/** The mode set last applies to the next n requests only (n >= 0), then `after_mode`:
 *  a target that fails twice and then recovers. */
void sl_mock_times(sl_mock_t *m, int n, int after_mode);
void sl_mock_times(sl_mock_t *m, int n, int after_mode) {
    pthread_mutex_lock(&m->mu);
    m->times = n;
    m->after_mode = after_mode;
    pthread_mutex_unlock(&m->mu);
}

/** Requests received so far (raw mode: reads). */
uint64_t sl_mock_count(sl_mock_t *m);
uint64_t sl_mock_count(sl_mock_t *m) {
    pthread_mutex_lock(&m->mu);
    uint64_t c = m->count;
    pthread_mutex_unlock(&m->mu);
    return c;
}

/** Copies the last request (head, then the de-chunked body) into out; its full
 * length. */
size_t sl_mock_last(sl_mock_t *m, char *out, size_t cap);
size_t sl_mock_last(sl_mock_t *m, char *out, size_t cap) {
    pthread_mutex_lock(&m->mu);
    size_t n = m->lastlen;
    if (m->last) memcpy(out, m->last, SL_MIN(n, cap));
    pthread_mutex_unlock(&m->mu);
    return n;
}

/** Stops the mock: closes its socket and waits for its threads; frees it. */
void sl_mock_stop(sl_mock_t *m);
void sl_mock_stop(sl_mock_t *m) {
    atomic_store(&m->stop, 1);
    ssize_t w = write(m->wake[1], "x", 1); /* never read: it stays readable */
    (void)w;
    pthread_join(m->accept_thread, NULL);
    while (atomic_load(&m->conns) > 0)
        usleep(1000);
    for (int i = 0; i < m->nfds; i++)
        close(m->fds[i]);
    close(m->wake[0]);
    close(m->wake[1]);
    pthread_mutex_destroy(&m->mu);
    free(m->head);
    free(m->body);
    free(m->last);
    free(m);
}
