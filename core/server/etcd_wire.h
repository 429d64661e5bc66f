/* etcd_wire.h — talking to etcd's HTTP/JSON gateway: bytes, base64, JSON (read by
 * proto/json.h), the set of keys under a prefix, and one exchange on a libuv loop (the core's
 * HTTP client, client/client.h: a unary call, or a watch's endless stream).
 *
 * Internal to the etcd config source (server/etcd.c, the watch; server/etcd_cli.c,
 * push and pull). Every function here runs on the thread that owns the loop it is
 * given (the main thread, or the command line's private loop).
 */
#ifndef SL_ETCD_WIRE_H
#define SL_ETCD_WIRE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <uv.h>
#include <yaml.h>

#include "base/wbuf.h"
#include "client/client.h"
#include "proto/json.h" /* sl_json_*: JSON read with libyaml */

/** One key under the prefix and its value (both owned by the set). */
typedef struct {
    char *key; /* relative to prefix + '/' */
    char *val; /* NUL-terminated */
    size_t vlen;
} sl_ekv_t;

/** Keys sorted by name (relative to PREFIX/). */
typedef struct {
    sl_ekv_t *a;
    size_t n, cap;
} sl_ekvset_t;

typedef struct sl_ec_s sl_ec_t;
/** A unary call ended: err NULL and c->body the answer, or err. c is freed after it. */
typedef void (*sl_ec_done_cb)(sl_ec_t *c, const char *err);
/** A streamed call (watch): one line (one JSON message) of the body. */
typedef void (*sl_ec_line_cb)(sl_ec_t *c, const char *line, size_t n);

/** One exchange: POST, then the answer (whole in `body`, or streamed line by line). */
struct sl_ec_s {
    sl_client_t *call;
    int status;   /* the answer's, once its head came */
    int in_cb;    /* inside a callback of its own: a cancel frees it when that returns */
    bool cancelled;
    sl_wbuf_t body;
    size_t scanned;
    sl_ec_done_cb on_done;
    sl_ec_line_cb on_line;
    void *ud;
    char err[256];
};

/* etcd's texts go on as C strings (request bodies, files, answers): these append to a
 * growing buffer (base/wbuf.h) and keep it NUL-terminated, as sl_wbuf_printf does. */
static inline bool sl__eb_put(sl_wbuf_t *b, const void *s, size_t n) {
    return sl_wbuf_put(b, s, n) && sl_wbuf_cstr(b);
}
static inline bool sl__eb_puts(sl_wbuf_t *b, const char *s) { return sl__eb_put(b, s, strlen(s)); }

/** base64 of p[0..n), malloc'ed and NUL-terminated. */
char *sl__b64_enc(const void *p, size_t n);
/** The bytes of s, malloc'ed (NUL-terminated, *n their length); NULL when malformed. */
char *sl__b64_dec(const char *s, size_t *n);

/** Appends s as a JSON string (sl_wbuf_json_quoted), NUL-terminated. */
static inline void sl__json_quote(sl_wbuf_t *b, const char *s) {
    if (sl_wbuf_json_cstr(b, s)) sl_wbuf_cstr(b);
}

size_t sl__kv_pos(const sl_ekvset_t *s, const char *key, bool *found);
const sl_ekv_t *sl__kv_get(const sl_ekvset_t *s, const char *key);
/** Sets key to val (taken: malloc'ed, NUL-terminated). False when out of memory. */
bool sl__kv_put(sl_ekvset_t *s, const char *key, char *val, size_t vlen);
void sl__kv_del(sl_ekvset_t *s, const char *key);
void sl__kv_clear(sl_ekvset_t *s);
/** The content hash of every key and value. */
uint64_t sl__kv_hash(const sl_ekvset_t *s);
/** Reads a range answer (or a snapshot: the same shape) into s, keys made relative to
 *  prefix; *rev its revision. */
bool sl__kv_from_range(sl_ekvset_t *s, long long *rev, const char *prefix, const char *text, size_t len);
/** A snapshot: the shape of a range answer, full keys. */
void sl__kv_to_json(const sl_ekvset_t *s, const char *prefix, long long rev, sl_wbuf_t *b);

/**
 * POSTs `body` to `path` at `url` ("http://host:port"; a name is resolved by the client
 * on libuv's pool, so the loop never waits for DNS) with `token` as Authorization when set.
 * `line` set: the answer is a stream handed over line by line, and `done` is called when it
 * ends. `timeout_ms` bounds silence (connecting, or between reads). NULL when nothing could
 * start (a malformed url, no memory; no callback then); else `done` follows (a name that
 * does not resolve included), and the exchange is freed after `done` returned, or after
 * sl__ec_cancel.
 */
sl_ec_t *sl__ec_post(uv_loop_t *loop, const char *url, const char *path, const char *body, const char *token,
                     uint64_t timeout_ms, sl_ec_done_cb done, sl_ec_line_cb line, void *ud);
/** Ends an exchange without calling it back (NULL: nothing). */
void sl__ec_cancel(sl_ec_t *c);

/** "upstreams", "routes", "consumers": the list kinds under the prefix, in build order. */
extern const char *const sl__etcd_kinds[3];
/** NAME of a key KIND/NAME a gateway takes: 1-64 of letters, digits, '_', '-', '.'. */
bool sl__etcd_valid_name(const char *s);
/** {"key":PREFIX/,"range_end":PREFIX0[,"count_only":true]}: the whole prefix. */
void sl__etcd_range_body(const char *prefix, bool count_only, sl_wbuf_t *b);
/** A whole file, malloc'ed and NUL-terminated, or NULL. */
char *sl__etcd_read_file(const char *path, size_t *len);
/** Appends a value as an item of a block list (indent 4: "  - " then its lines indented),
 *  or as it is (indent 0). Returns the number of lines written. */
int sl__etcd_put_item(sl_wbuf_t *t, const char *v, size_t vl, int indent);

#endif
