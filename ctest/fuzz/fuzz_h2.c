/* fuzz_h2.c — libFuzzer target over the HTTP/2 frame path: a server session made by
 * sl__h2_new (h2.c's own nghttp2 options, callbacks, settings and flood bounds) on a real
 * worker (its blocks, request objects, Lua router and plugins), fed the connection preface
 * and then the input, with the output side driven through a real stream (a socketpair
 * whose far end the fuzzer reads). Streams run the way a listener's would: routes answer
 * from Lua (echo reads the request body; response), go to an upstream that refuses (a 502
 * after the connect fails, or an abort while it is in flight), or find no route (404).
 * Each input is drained (halfway or at its end), then the session's timer fires an hour
 * later and the connection closes, like a client that went away. Every broken invariant
 * is an abort():
 *
 * - the session writes whole frames, the first its SETTINGS, and never a frame on an
 *   even (server-initiated) stream: sluice pushes nothing;
 * - sl__h2_feed says false only once the session asked its owner to close;
 * - after the close, every block is back in the worker's pool, no HTTP/2 stream is
 *   counted open and no upstream connection is left (and ASan/LSan see no leak).
 *
 * Built with clang over the whole core by `scripts/fuzz SECONDS h2` (cmake -DSLUICE_FUZZ=ON);
 * replayed over ctest/fuzz/corpus_h2 by ctest (replay_main.c). The seeds are made by
 * ctest/fuzz/corpus_h2.py. FUZZ_H2_VERBOSE=1 prints the frames each input got back.
 */
#include "http/h2.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/log.h"
#include "script/plugin.h"
#include "upstream/upstreams.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void fail(const char *what) {
    fprintf(stderr, "fuzz_h2: invariant broken: %s\n", what);
    abort();
}
#define ENSURE(cond)                                                                               \
    do {                                                                                           \
        if (!(cond)) fail(#cond);                                                                  \
    } while (0)

/* Small limits, so the bounds are reached by inputs of a few KiB. Port 1 on loopback
 * refuses: an upstream request fails with a 502, or is aborted while it connects. */
static const char yaml[] = "listeners:\n"
                           "  - name: web\n"
                           "    listen: 127.0.0.1:8080\n"
                           "    max_body: 16KiB\n"
                           "    max_header_size: 4KiB\n"
                           "    http2: { enabled: true, max_concurrent_streams: 8 }\n"
                           "upstreams:\n"
                           "  - { name: up, targets: [ { address: 127.0.0.1:1 } ], retry: { attempts: 1 } }\n"
                           "routes:\n"
                           "  - { name: echo, match: { paths: [/e] }, plugins: [ { name: echo } ] }\n"
                           "  - name: resp\n"
                           "    match: { paths: [/r] }\n"
                           "    plugins: [ { name: response, config: { status: 201, body: made } } ]\n"
                           "  - { name: up, match: { paths: [/u] }, upstream: up }\n";

static struct {
    sl_config_t *cfg;
    sl_tregistry_t treg;
    sl_worker_t w;
    sl_downstream_t tmpl;
} G;

/* One connection: the session's owner. */
typedef struct {
    sl_stream_t s;
    sl_h2_t *h;
    int peer;           /* the client's end of the socketpair */
    int nclose;         /* handles still closing */
    uint8_t closed;     /* the owner's close ran */
    uv_shutdown_t sreq;
    uint8_t shut;
    uint8_t *out;       /* what the session wrote, as the client read it */
    size_t olen, ocap;
} fx_t;

/* At exit the worker goes as a real one does: its Lua state closes (and with it what Lua
 * objects held in C memory), so LeakSanitizer's exit check sees a clean process. */
static void fini(void) {
    sl_worker_destroy(&G.w);
    sl_upgen_free(&G.treg, (sl_upgen_t *)G.w.ug);
    sl_config_free(G.cfg);
}

static void init(void) {
    sl_errors_t errs = {0};
    const char *err = NULL;
    sl_log_level = SL_LOG_ERR + 1; /* the requests' errors are the point: nothing printed */
    if (sl_config_parse("fuzz_h2.yaml", yaml, sizeof(yaml) - 1, &G.cfg, &errs) != 0 ||
        sl_plugins_check(G.cfg, &errs) != 0) {
        for (size_t i = 0; i < errs.n; i++) fprintf(stderr, "fuzz_h2: %s\n", errs.lines[i]);
        fail("the config parses");
    }
    sl_errors_free(&errs);
    if (sl_worker_init(&G.w, NULL, G.cfg, 0, &err) != SL_OK) {
        fprintf(stderr, "fuzz_h2: %s\n", err);
        fail("the worker starts");
    }
    G.w.blocks.max_free = UINT32_MAX; /* never freed: the pool's count is the blocks in use */
    ENSURE((G.w.ug = sl_upgen_new(&G.treg, G.cfg)) != NULL);
    atexit(fini);
    G.tmpl.lc = &G.cfg->listeners[0];
    G.tmpl.lidx = 0;
    snprintf(G.tmpl.peer, sizeof G.tmpl.peer, "192.0.2.7");
    sl_downstream_set_port(&G.tmpl, 8080);
}

static void fx_on_close(uv_handle_t *hd) {
    fx_t *f = hd->data;
    f->nclose--;
}

static void owner_arm(void *owner, uint64_t ms) {
    (void)owner;
    ENSURE(ms > 0); /* the timer never fires here: a deadline is only checked for sense */
}

static void owner_close(void *owner) {
    fx_t *f = owner;
    ENSURE(!f->closed);
    f->closed = 1;
    f->nclose = 2;
    sl__h2_close(f->h, fx_on_close);
    uv_close((uv_handle_t *)&f->s.tcp, fx_on_close);
}

static void fx_on_shutdown(uv_shutdown_t *req, int status) { (void)req, (void)status; }

static void owner_linger(void *owner) {
    fx_t *f = owner;
    if (f->shut || f->closed) return;
    f->shut = 1;
    if (sl_stream_shutdown(&f->s, &f->sreq, fx_on_shutdown) != 0) f->shut = 2;
}

static const sl_h2_owner_t owner_ops = {owner_arm, owner_close, owner_linger};

/* Reads what the session wrote; true when there was something. */
static bool fx_drain_peer(fx_t *f) {
    bool got = false;
    for (;;) {
        if (f->ocap - f->olen < 16384) {
            size_t cap = f->ocap ? f->ocap * 2 : 65536;
            uint8_t *p = realloc(f->out, cap);
            ENSURE(p != NULL);
            f->out = p;
            f->ocap = cap;
        }
        ssize_t n = read(f->peer, f->out + f->olen, f->ocap - f->olen);
        if (n <= 0) {
            ENSURE(n == 0 || errno == EAGAIN || errno == EWOULDBLOCK);
            return got;
        }
        f->olen += (size_t)n;
        got = true;
    }
}

/* Runs the loop (idle runs of the session, writes, upstream connects) until it settles. */
static void fx_pump(fx_t *f) {
    for (int i = 0; i < 32; i++) {
        int active = uv_run(&G.w.loop, UV_RUN_NOWAIT);
        bool got = fx_drain_peer(f);
        if (!active && !got) break;
    }
}

static void fx_feed(fx_t *f, const uint8_t *p, size_t n) {
    if (f->closed) return;
    bool ok = sl__h2_feed(f->h, (const char *)p, n);
    ENSURE(ok || f->closed);
    fx_pump(f);
}

/* The frames the client read: whole, SETTINGS first, none on a server-initiated stream.
 * The last may be cut only when the session closed the connection itself mid-write. */
static void fx_check_output(const fx_t *f, bool may_cut) {
    size_t off = 0;
    int nframes = 0;
    while (off + 9 <= f->olen) {
        const uint8_t *hd = f->out + off;
        size_t len = (size_t)hd[0] << 16 | (size_t)hd[1] << 8 | hd[2];
        uint8_t type = hd[3];
        uint32_t sid = ((uint32_t)hd[5] << 24 | (uint32_t)hd[6] << 16 | (uint32_t)hd[7] << 8 | hd[8]) & 0x7fffffffu;
        if (nframes++ == 0) ENSURE(type == 4 && sid == 0);
        ENSURE(type != 5); /* PUSH_PROMISE: never */
        if (type <= 3) ENSURE(sid & 1); /* DATA, HEADERS, PRIORITY, RST_STREAM: a client's stream */
        if (off + 9 + len > f->olen) break;
        off += 9 + len;
    }
    ENSURE(off == f->olen || may_cut);
}

/* FUZZ_H2_VERBOSE=1: each frame the client read, one line each (type, flags, stream, length). */
static void fx_print(const fx_t *f) {
    for (size_t off = 0; off + 9 <= f->olen;) {
        const uint8_t *hd = f->out + off;
        size_t len = (size_t)hd[0] << 16 | (size_t)hd[1] << 8 | hd[2];
        uint32_t sid = ((uint32_t)hd[5] << 24 | (uint32_t)hd[6] << 16 | (uint32_t)hd[7] << 8 | hd[8]) & 0x7fffffffu;
        fprintf(stderr, "  frame type %u flags 0x%02x stream %u length %zu", hd[3], hd[4], sid, len);
        if (hd[3] == 7 && len >= 8 && off + 17 <= f->olen)
            fprintf(stderr, " (GOAWAY code %u)", hd[9 + 7]);
        if (hd[3] == 3 && len == 4 && off + 13 <= f->olen) fprintf(stderr, " (RST code %u)", hd[9 + 3]);
        if (hd[3] == 0 && off + 9 + len <= f->olen) fprintf(stderr, " %.*s", (int)SL_MIN(len, (size_t)60), hd + 9);
        fputc('\n', stderr);
        off += 9 + len;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!G.cfg) init();
    uint64_t blocks_out = G.w.blocks.mallocs - G.w.blocks.nfree;
    int sv[2];
    ENSURE(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv) == 0);
    fx_t *f = calloc(1, sizeof(*f));
    ENSURE(f != NULL);
    f->peer = sv[1];
    ENSURE(uv_tcp_init(&G.w.loop, &f->s.tcp) == 0);
    f->s.tcp.data = f;
    ENSURE(uv_tcp_open(&f->s.tcp, sv[0]) == 0);
    f->h = sl__h2_new(&G.w, &f->s, &G.tmpl, &owner_ops, f);
    ENSURE(f->h != NULL);

    /* The preface, then the input: whole when small, else in pieces of 4 KiB, so
     * nghttp2's frame reassembly across reads runs too. An input whose last byte is odd
     * is drained halfway (what follows arrives after the shutdown notice: a PING ACK
     * there is the drain's final GOAWAY); the others at the end. */
    fx_feed(f, (const uint8_t *)SL_H2_PREFACE, SL_H2_PREFACE_LEN);
    size_t piece = size <= 4096 ? (size ? size : 1) : 4096;
    size_t drain_at = size && (data[size - 1] & 1) ? size / 2 : size;
    for (size_t off = 0; off < size && !f->closed;) {
        if (off == drain_at) {
            sl__h2_drain(f->h);
            fx_pump(f);
            drain_at = SIZE_MAX;
            continue;
        }
        size_t n = SL_MIN(piece, size - off);
        if (off < drain_at && off + n > drain_at) n = drain_at - off;
        fx_feed(f, data + off, n);
        off += n;
    }
    if (!f->closed && drain_at != SIZE_MAX) {
        sl__h2_drain(f->h);
        fx_pump(f);
    }
    if (!f->closed) {
        /* An hour later: every stream's deadline has passed (408 for a head or body
         * still awaited, an abort for a stream its client stopped serving). uv_run
         * reads the clock again, so only the session's timer sees the jump. */
        G.w.loop.time += 3600 * 1000;
        sl__h2_on_timer(f->h);
        fx_pump(f);
    }
    bool self_closed = f->closed;
    if (!f->closed) owner_close(f);
    while (f->nclose) uv_run(&G.w.loop, UV_RUN_ONCE);
    fx_drain_peer(f);
    /* what the aborted requests still had closing (upstream connections) */
    uv_run(&G.w.loop, UV_RUN_DEFAULT);
    sl__h2_free(f->h);
    close(sv[1]);

    if (getenv("FUZZ_H2_VERBOSE")) fx_print(f);
    fx_check_output(f, self_closed);
    ENSURE(G.w.blocks.mallocs - G.w.blocks.nfree == blocks_out);
    ENSURE(G.w.metrics.h2_streams[0] == 0);
    ENSURE(G.w.nupconns == 0);
    free(f->out);
    free(f);
    return 0;
}
