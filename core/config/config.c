/* config.c — YAML text to an immutable sl_config_t, with every error located and collected.
 *
 * libyaml loads the whole document into a node graph first; the walk below then
 * checks each mapping against a fixed key table per section. Nothing stops at the
 * first problem: every error is recorded with the node it concerns, and at the end
 * they are sorted by position and handed to the caller. Any error means no config.
 *
 * Unknown keys are errors, and so are keys DESIGN.md names for features this
 * build does not have yet: a config that asks for a health check must not start
 * without one.
 */
#include "config/config.h"
#include "base/common.h"
#include "sluice.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>
#include <yaml.h>

#define MAX_CONFIG_FILE (16u << 20) /* a config larger than this is a mistake, not a config */
#define MAX_PLUGIN_JSON (1u << 20)  /* bounds alias expansion ("billion laughs") too */
#define MAX_JSON_DEPTH 32           /* also stops recursive aliases (&a [ *a ]) */
#define MAX_NAME_LEN 64             /* names become metric labels and log fields */
#define MAX_WORKERS 1024
#define AUTO_WORKERS_CAP 64
#define MAX_WEIGHT 1000000 /* keeps the sum of an upstream's weights far from overflow */
#define MAX_KEEPALIVE_IDLE 100000
#define MAX_RETRY_BODY (64ull * 1024 * 1024) /* a replay buffer per request in flight */

/* ------------------------------------------------------------------------------------------ */
/* Error lines                                                                                 */

static void errors_vadd(sl_errors_t *errs, const char *path, int line, int col, const char *fmt,
                        va_list ap) {
    char msg[1024];
    vsnprintf(msg, sizeof msg, fmt, ap);
    int n = snprintf(NULL, 0, "%s:%d:%d: %s", path ? path : "<config>", line, col, msg);
    if (n < 0) return;
    if (errs->n == errs->cap) {
        size_t cap = errs->cap ? errs->cap * 2 : 8;
        char **lines = realloc(errs->lines, cap * sizeof *lines);
        if (!lines) return; /* nowhere to report it; the caller still sees the -1 */
        errs->lines = lines;
        errs->cap = cap;
    }
    char *s = malloc((size_t)n + 1);
    if (!s) return;
    snprintf(s, (size_t)n + 1, "%s:%d:%d: %s", path ? path : "<config>", line, col, msg);
    errs->lines[errs->n++] = s;
}

void sl_errors_add(sl_errors_t *errs, const char *path, int line, int col, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    errors_vadd(errs, path, line, col, fmt, ap);
    va_end(ap);
}

void sl_errors_free(sl_errors_t *errs) {
    if (!errs) return;
    for (size_t i = 0; i < errs->n; i++) free(errs->lines[i]);
    free(errs->lines);
    errs->lines = NULL;
    errs->n = errs->cap = 0;
}

/* ------------------------------------------------------------------------------------------ */
/* Scalar value parsers, shared by the public helpers and the walk                             */

enum { PARSE_OK, PARSE_BAD, PARSE_NO_UNIT, PARSE_OVERFLOW, PARSE_DECIMAL_UNIT };

/* Leading decimal digits of s into *v; *end after them. PARSE_BAD when there are none. */
static int parse_digits(const char *s, uint64_t *v, const char **end) {
    uint64_t x = 0;
    const char *p = s;
    bool overflow = false;
    for (; *p >= '0' && *p <= '9'; p++) {
        unsigned d = (unsigned)(*p - '0');
        if (x > (UINT64_MAX - d) / 10)
            overflow = true;
        else
            x = x * 10 + d;
    }
    *end = p;
    if (p == s) return PARSE_BAD;
    *v = x;
    return overflow ? PARSE_OVERFLOW : PARSE_OK;
}

typedef struct {
    const char *suffix;
    uint64_t mul;
} unit_t;

static const unit_t duration_units[] = {
    {"ms", 1}, {"s", 1000}, {"m", 60 * 1000}, {"h", 60 * 60 * 1000}, {NULL, 0}};
/* a bare number of bytes is unambiguous; a bare number of time units is not */
static const unit_t size_units[] = {
    {"", 1}, {"KiB", 1ull << 10}, {"MiB", 1ull << 20}, {"GiB", 1ull << 30}, {NULL, 0}};

/* "<digits><unit>" with the unit from `units` -> value * multiplier. */
static int parse_unit(const char *s, const unit_t *units, uint64_t *out) {
    uint64_t v;
    const char *unit;
    int rc = parse_digits(s, &v, &unit);
    if (rc == PARSE_BAD) return rc;
    for (; units->suffix; units++) {
        if (strcmp(unit, units->suffix) != 0) continue;
        if (rc == PARSE_OVERFLOW || v > UINT64_MAX / units->mul) return PARSE_OVERFLOW;
        *out = v * units->mul;
        return PARSE_OK;
    }
    return PARSE_BAD;
}

static int parse_duration(const char *s, uint64_t *out) {
    int rc = parse_unit(s, duration_units, out);
    const char *end;
    uint64_t ignored;
    /* "30": seconds or milliseconds? refuse to guess */
    if (rc == PARSE_BAD && parse_digits(s, &ignored, &end) != PARSE_BAD && *end == '\0')
        return PARSE_NO_UNIT;
    return rc;
}

static int parse_size(const char *s, uint64_t *out) {
    int rc = parse_unit(s, size_units, out);
    const char *unit;
    uint64_t ignored;
    if (rc != PARSE_BAD || parse_digits(s, &ignored, &unit) == PARSE_BAD) return rc;
    /* "10MB" is ambiguous (10^6 or 2^20?): refuse it with a hint rather than pick one */
    static const char *const decimal[] = {"k",  "kb", "m",  "mb",  "g",   "gb",
                                          "ki", "mi", "gi", "kib", "mib", "gib"};
    for (size_t i = 0; i < sizeof decimal / sizeof decimal[0]; i++)
        if (strcasecmp(unit, decimal[i]) == 0) return PARSE_DECIMAL_UNIT;
    return PARSE_BAD;
}

int sl_parse_duration_ms(const char *s, uint64_t *out) {
    return parse_duration(s, out) == PARSE_OK ? 0 : -1;
}

int sl_parse_size(const char *s, uint64_t *out) { return parse_size(s, out) == PARSE_OK ? 0 : -1; }

/* Fills out->ss/len from s, or returns -1 with *why set to a static explanation. */
static int parse_addr(const char *s, sl_addr_t *out, const char **why) {
    char host[64];
    const char *h, *port;
    size_t hlen;
    bool bracketed = s[0] == '[';

    if (bracketed) {
        const char *close = strchr(s, ']');
        if (!close || close[1] != ':') {
            *why = "expected [IPv6]:PORT";
            return -1;
        }
        h = s + 1;
        hlen = (size_t)(close - h);
        port = close + 2;
    } else {
        const char *colon = strrchr(s, ':');
        if (!colon) {
            *why = "expected HOST:PORT";
            return -1;
        }
        h = s;
        hlen = (size_t)(colon - s);
        port = colon + 1;
        if (memchr(h, ':', hlen)) {
            *why = "an IPv6 address needs brackets, as in [::1]:8080";
            return -1;
        }
    }
    if (hlen == 0) {
        *why = "the host is missing (use *:PORT to listen on every address)";
        return -1;
    }
    if (hlen >= sizeof host) {
        *why = "the host is too long for a numeric address";
        return -1;
    }
    memcpy(host, h, hlen);
    host[hlen] = '\0';

    uint64_t p;
    const char *end;
    if (parse_digits(port, &p, &end) != PARSE_OK || *end != '\0' || end - port > 5 || p > 65535) {
        *why = "the port must be a number from 0 to 65535";
        return -1;
    }

    memset(&out->ss, 0, sizeof out->ss);
    if (bracketed) {
        struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)&out->ss;
        if (inet_pton(AF_INET6, host, &a6->sin6_addr) != 1) {
            *why = "not a numeric IPv6 address";
            return -1;
        }
        a6->sin6_family = AF_INET6;
        a6->sin6_port = htons((uint16_t)p);
        out->len = sizeof *a6;
        return 0;
    }
    struct sockaddr_in *a4 = (struct sockaddr_in *)&out->ss;
    if (strcmp(host, "*") == 0) {
        a4->sin_addr.s_addr = htonl(INADDR_ANY);
    } else if (strcasecmp(host, "localhost") == 0) {
        a4->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    } else if (inet_pton(AF_INET, host, &a4->sin_addr) != 1) {
        *why = "not a numeric IP address (names are not resolved; use an IP or localhost)";
        return -1;
    }
    a4->sin_family = AF_INET;
    a4->sin_port = htons((uint16_t)p);
    out->len = sizeof *a4;
    return 0;
}

int sl_parse_addr(const char *s, sl_addr_t *out) {
    const char *why;
    memset(out, 0, sizeof *out);
    if (parse_addr(s, out, &why) != 0) return -1;
    out->text = strdup(s);
    return out->text ? 0 : -1;
}

static uint16_t addr_port(const sl_addr_t *a) {
    if (a->ss.ss_family == AF_INET6) return ntohs(((const struct sockaddr_in6 *)&a->ss)->sin6_port);
    return ntohs(((const struct sockaddr_in *)&a->ss)->sin_port);
}

static bool addr_is_any(const sl_addr_t *a) {
    if (a->ss.ss_family == AF_INET6)
        return IN6_IS_ADDR_UNSPECIFIED(&((const struct sockaddr_in6 *)&a->ss)->sin6_addr);
    return ((const struct sockaddr_in *)&a->ss)->sin_addr.s_addr == htonl(INADDR_ANY);
}

static bool addr_same(const sl_addr_t *a, const sl_addr_t *b) {
    if (a->ss.ss_family != b->ss.ss_family || a->len == 0) return false;
    if (addr_port(a) != addr_port(b)) return false;
    if (a->ss.ss_family == AF_INET6)
        return memcmp(&((const struct sockaddr_in6 *)&a->ss)->sin6_addr,
                      &((const struct sockaddr_in6 *)&b->ss)->sin6_addr,
                      sizeof(struct in6_addr)) == 0;
    return ((const struct sockaddr_in *)&a->ss)->sin_addr.s_addr ==
           ((const struct sockaddr_in *)&b->ss)->sin_addr.s_addr;
}

/* ------------------------------------------------------------------------------------------ */
/* The walk: context, errors at nodes, allocation                                              */

typedef struct {
    int line, col;
    size_t seq; /* keeps errors at the same position in the order they were found */
    char *msg;
} pending_err_t;

typedef struct {
    yaml_document_t *doc;
    sl_config_t *cfg;
    pending_err_t *errs;
    size_t nerrs, cap;
    bool oom;
} cx_t;

static void cx_vadd(cx_t *cx, int line, int col, const char *fmt, va_list ap) {
    char buf[1024];
    vsnprintf(buf, sizeof buf, fmt, ap);
    /* values from the file appear in messages; keep escapes out of the terminal */
    for (char *p = buf; *p; p++)
        if ((unsigned char)*p < 0x20 || *p == 0x7f) *p = '?';
    if (cx->nerrs == cx->cap) {
        size_t cap = cx->cap ? cx->cap * 2 : 8;
        pending_err_t *e = realloc(cx->errs, cap * sizeof *e);
        if (!e) {
            cx->oom = true;
            return;
        }
        cx->errs = e;
        cx->cap = cap;
    }
    char *msg = strdup(buf);
    if (!msg) {
        cx->oom = true;
        return;
    }
    cx->errs[cx->nerrs] = (pending_err_t){line, col, cx->nerrs, msg};
    cx->nerrs++;
}

static void cx_at(cx_t *cx, int line, int col, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void cx_at(cx_t *cx, int line, int col, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    cx_vadd(cx, line, col, fmt, ap);
    va_end(ap);
}

static int line_of(const yaml_node_t *n) { return n ? (int)n->start_mark.line + 1 : 1; }
static int col_of(const yaml_node_t *n) { return n ? (int)n->start_mark.column + 1 : 1; }

/** Records an error at node n (1:1 when n is NULL). */
static void cx_err(cx_t *cx, const yaml_node_t *n, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void cx_err(cx_t *cx, const yaml_node_t *n, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    cx_vadd(cx, line_of(n), col_of(n), fmt, ap);
    va_end(ap);
}

static void *cx_calloc(cx_t *cx, size_t n, size_t size) {
    void *p = calloc(n ? n : 1, size);
    if (!p) cx->oom = true;
    return p;
}

static char *cx_strdup(cx_t *cx, const char *s) {
    char *p = strdup(s);
    if (!p) cx->oom = true;
    return p;
}

static yaml_node_t *get_node(cx_t *cx, int index) { return yaml_document_get_node(cx->doc, index); }

static const char *sval(const yaml_node_t *n) { return (const char *)n->data.scalar.value; }

static bool scalar_eq(const yaml_node_t *a, const yaml_node_t *b) {
    return a->data.scalar.length == b->data.scalar.length &&
           memcmp(a->data.scalar.value, b->data.scalar.value, a->data.scalar.length) == 0;
}

/* Whether scalar n is exactly s (a key "name\0x" is not "name"). */
static bool scalar_is(const yaml_node_t *n, const char *s) {
    return n->data.scalar.length == strlen(s) && memcmp(n->data.scalar.value, s, strlen(s)) == 0;
}

static bool is_plain(const yaml_node_t *n) {
    return n->type == YAML_SCALAR_NODE && n->data.scalar.style == YAML_PLAIN_SCALAR_STYLE;
}

/* `key:`, `key: ~` and `key: null` mean "not set"; a quoted "" is an empty string. */
static bool is_null(const yaml_node_t *n) {
    if (!is_plain(n)) return false;
    const char *s = sval(n);
    return s[0] == '\0' || strcmp(s, "~") == 0 || strcmp(s, "null") == 0 ||
           strcmp(s, "Null") == 0 || strcmp(s, "NULL") == 0;
}

static size_t seq_len(const yaml_node_t *n) {
    return (size_t)(n->data.sequence.items.top - n->data.sequence.items.start);
}

static yaml_node_t *seq_at(cx_t *cx, const yaml_node_t *n, size_t i) {
    return get_node(cx, n->data.sequence.items.start[i]);
}

/* ------------------------------------------------------------------------------------------ */
/* Mappings checked against a key table                                                        */

typedef struct {
    const char *name;
    yaml_node_t *key; /* NULL when absent */
    yaml_node_t *val; /* NULL when absent or written as null */
} field_t;

static size_t edit_distance(const char *a, const char *b) {
    size_t la = strlen(a), lb = strlen(b), row[33];
    if (la > 32 || lb > 32) return SIZE_MAX;
    for (size_t j = 0; j <= lb; j++) row[j] = j;
    for (size_t i = 1; i <= la; i++) {
        size_t diag = row[0];
        row[0] = i;
        for (size_t j = 1; j <= lb; j++) {
            size_t up = row[j];
            size_t best = diag + (a[i - 1] != b[j - 1]);
            if (up + 1 < best) best = up + 1;
            if (row[j - 1] + 1 < best) best = row[j - 1] + 1;
            row[j] = best;
            diag = up;
        }
    }
    return row[lb];
}

static const char *suggest(const char *key, const char *const *names, size_t n) {
    const char *best = NULL;
    size_t best_d = strlen(key) <= 4 ? 1 : 2;
    for (size_t i = 0; i < n; i++) {
        size_t d = edit_distance(key, names[i]);
        if (d <= best_d) {
            best = names[i];
            best_d = d;
        }
    }
    return best;
}

/* Reports a repeated key in `map` (YAML forbids them; libyaml does not check). */
static bool dup_key(cx_t *cx, const yaml_node_t *map, const yaml_node_pair_t *pair,
                    const yaml_node_t *key) {
    for (const yaml_node_pair_t *q = map->data.mapping.pairs.start; q < pair; q++) {
        const yaml_node_t *k = get_node(cx, q->key);
        if (k && k->type == YAML_SCALAR_NODE && scalar_eq(k, key)) {
            cx_err(cx, key, "duplicate key '%s' (first at line %d)", sval(key), line_of(k));
            return true;
        }
    }
    return false;
}

/**
 * Sorts the pairs of `map` into f[0..n) by the key names in `names`; every other key is an
 * error, worded differently for the keys in `later` (named by DESIGN.md, not built yet).
 */
static void scan_map(cx_t *cx, const yaml_node_t *map, const char *where, const char *const *names,
                     field_t *f, size_t n, const char *const *later) {
    for (size_t i = 0; i < n; i++) f[i] = (field_t){names[i], NULL, NULL};
    for (yaml_node_pair_t *p = map->data.mapping.pairs.start; p < map->data.mapping.pairs.top;
         p++) {
        yaml_node_t *k = get_node(cx, p->key), *v = get_node(cx, p->value);
        if (!k || !v) continue;
        if (k->type != YAML_SCALAR_NODE) {
            cx_err(cx, k, "expected a string key in %s", where);
            continue;
        }
        if (dup_key(cx, map, p, k)) continue;
        size_t i = 0;
        while (i < n && !scalar_is(k, names[i])) i++;
        if (i < n) {
            f[i].key = k;
            f[i].val = is_null(v) ? NULL : v;
            continue;
        }
        bool is_later = false;
        for (size_t j = 0; later && later[j]; j++) is_later |= scalar_is(k, later[j]);
        if (is_later) {
            cx_err(cx, k, "'%s' is not supported by this build yet", sval(k));
            continue;
        }
        const char *hint = suggest(sval(k), names, n);
        if (hint)
            cx_err(cx, k, "unknown key '%s' in %s (did you mean '%s'?)", sval(k), where, hint);
        else
            cx_err(cx, k, "unknown key '%s' in %s", sval(k), where);
    }
}

/* The value of a required field, or NULL after an error at the mapping or the key. */
static yaml_node_t *required(cx_t *cx, const yaml_node_t *map, const field_t *f,
                             const char *where) {
    if (!f->key)
        cx_err(cx, map, "missing required key '%s' in %s", f->name, where);
    else if (!f->val)
        cx_err(cx, f->key, "'%s' needs a value", f->name);
    return f->val;
}

/* "listener 'web'" when the item has a usable name, else "listeners[2]". */
static void describe(cx_t *cx, const yaml_node_t *map, const char *kind, const char *list,
                     size_t idx, char *buf, size_t size) {
    for (yaml_node_pair_t *p = map->data.mapping.pairs.start; p < map->data.mapping.pairs.top;
         p++) {
        yaml_node_t *k = get_node(cx, p->key), *v = get_node(cx, p->value);
        if (k && v && k->type == YAML_SCALAR_NODE && scalar_is(k, "name") &&
            v->type == YAML_SCALAR_NODE && !is_null(v)) {
            snprintf(buf, size, "%s '%.*s'", kind, MAX_NAME_LEN, sval(v));
            return;
        }
    }
    snprintf(buf, size, "%s[%zu]", list, idx);
}

/* ------------------------------------------------------------------------------------------ */
/* Typed values                                                                                */

static bool want_type(cx_t *cx, const yaml_node_t *v, yaml_node_type_t type, const char *key) {
    if (v->type == type) return true;
    cx_err(cx, v, "expected %s for '%s'",
           type == YAML_MAPPING_NODE    ? "a mapping"
           : type == YAML_SEQUENCE_NODE ? "a list"
                                        : "a string",
           key);
    return false;
}

/* A scalar as a NUL-terminated string; a NUL inside it (from a "\0" escape) is an error. */
static const char *get_text(cx_t *cx, const yaml_node_t *v, const char *key, const char *what) {
    if (v->type != YAML_SCALAR_NODE) {
        cx_err(cx, v, "expected %s for '%s'", what, key);
        return NULL;
    }
    if (strlen(sval(v)) != v->data.scalar.length) {
        cx_err(cx, v, "'%s' contains a NUL byte", key);
        return NULL;
    }
    return sval(v);
}

static bool get_string(cx_t *cx, const yaml_node_t *v, const char *key, char **out) {
    const char *s = get_text(cx, v, key, "a string");
    if (!s) return false;
    *out = cx_strdup(cx, s);
    return *out != NULL;
}

/* Only true and false: YAML 1.1's yes/no/on/off are exactly the surprises to avoid. */
static bool get_bool(cx_t *cx, const yaml_node_t *v, const char *key, bool *out) {
    bool t = is_plain(v) && strcmp(sval(v), "true") == 0;
    if (!t && !(is_plain(v) && strcmp(sval(v), "false") == 0)) {
        cx_err(cx, v, "expected a boolean for '%s' (true or false)", key);
        return false;
    }
    *out = t;
    return true;
}

/* A plain decimal integer in [min, max]; quoted "5" is a string, not an integer. */
static bool get_int(cx_t *cx, const yaml_node_t *v, const char *key, int64_t min, int64_t max,
                    int64_t *out) {
    const char *s = is_plain(v) ? sval(v) : "", *end;
    bool neg = s[0] == '-';
    uint64_t u = 0;
    int rc = parse_digits(s + neg, &u, &end);
    if (rc == PARSE_BAD || *end != '\0') {
        cx_err(cx, v, "expected an integer for '%s'", key);
        return false;
    }
    if (rc == PARSE_OVERFLOW || u > (uint64_t)INT64_MAX) u = (uint64_t)INT64_MAX; /* out of range */
    int64_t n = neg ? -(int64_t)u : (int64_t)u;
    if (n < min || n > max) {
        cx_err(cx, v, "'%s' must be between %lld and %lld", key, (long long)min, (long long)max);
        return false;
    }
    *out = n;
    return true;
}

static bool get_duration(cx_t *cx, const yaml_node_t *v, const char *key, bool allow_zero,
                         uint64_t *out) {
    const char *s = get_text(cx, v, key, "a duration");
    if (!s) return false;
    uint64_t ms = 0;
    switch (parse_duration(s, &ms)) {
    case PARSE_OK:
        break;
    case PARSE_NO_UNIT:
        cx_err(cx, v, "duration '%s' for '%s' needs a unit: ms, s, m or h", s, key);
        return false;
    case PARSE_OVERFLOW:
        cx_err(cx, v, "duration '%s' for '%s' is too large", s, key);
        return false;
    default:
        cx_err(cx, v, "invalid duration '%s' for '%s' (expected e.g. 250ms, 10s, 5m, 1h)", s, key);
        return false;
    }
    if (ms == 0 && !allow_zero) {
        cx_err(cx, v, "'%s' must be greater than 0", key);
        return false;
    }
    *out = ms;
    return true;
}

static bool get_size(cx_t *cx, const yaml_node_t *v, const char *key, uint64_t min, uint64_t max,
                     uint64_t *out) {
    const char *s = get_text(cx, v, key, "a size");
    if (!s) return false;
    uint64_t n = 0;
    switch (parse_size(s, &n)) {
    case PARSE_OK:
        break;
    case PARSE_DECIMAL_UNIT:
        cx_err(cx, v, "size '%s' for '%s': use KiB, MiB or GiB (powers of 1024)", s, key);
        return false;
    case PARSE_OVERFLOW:
        cx_err(cx, v, "size '%s' for '%s' is too large", s, key);
        return false;
    default:
        cx_err(cx, v, "invalid size '%s' for '%s' (expected bytes or e.g. 64KiB, 10MiB, 1GiB)", s,
               key);
        return false;
    }
    if (n > max) {
        cx_err(cx, v, "size '%s' for '%s' is too large (at most %llu bytes)", s, key,
               (unsigned long long)max);
        return false;
    }
    if (n < min) {
        cx_err(cx, v, "'%s' must be at least %llu", key, (unsigned long long)min);
        return false;
    }
    *out = n;
    return true;
}

/* A plain decimal number in [min, max] ("0.5", "1", "2.25"). */
static bool get_number(cx_t *cx, const yaml_node_t *v, const char *key, double min, double max,
                       double *out) {
    const char *s = is_plain(v) ? sval(v) : "";
    char *end = NULL;
    double d = *s && (isdigit((unsigned char)*s) || *s == '.') ? strtod(s, &end) : NAN;
    if (!end || *end != '\0' || !isfinite(d)) {
        cx_err(cx, v, "expected a number for '%s'", key);
        return false;
    }
    if (d < min || d > max) {
        cx_err(cx, v, "'%s' must be between %g and %g", key, min, max);
        return false;
    }
    *out = d;
    return true;
}

static bool get_addr(cx_t *cx, const yaml_node_t *v, const char *key, bool target, sl_addr_t *out) {
    const char *s = get_text(cx, v, key, "an address");
    if (!s) return false;
    const char *why;
    sl_addr_t a = {0};
    if (parse_addr(s, &a, &why) != 0) {
        cx_err(cx, v, "invalid address '%s' for '%s': %s", s, key, why);
        return false;
    }
    if (target && addr_is_any(&a)) {
        cx_err(cx, v, "target address '%s' must name a host, not every address", s);
        return false;
    }
    if (target && addr_port(&a) == 0) {
        cx_err(cx, v, "target address '%s' needs a port other than 0", s);
        return false;
    }
    a.text = cx_strdup(cx, s);
    if (!a.text) return false;
    free(out->text);
    *out = a;
    return true;
}

static bool name_char(char c, bool dot) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
           c == '_' || (dot && c == '.');
}

/* Names become metric labels, log fields and (for plugins) file names: keep them plain. */
static bool get_name(cx_t *cx, const yaml_node_t *v, const char *kind, bool dot, char **out) {
    const char *s = get_text(cx, v, "name", "a string");
    if (!s) return false;
    size_t n = strlen(s), i = 0;
    while (i < n && name_char(s[i], dot)) i++;
    if (n == 0 || n > MAX_NAME_LEN || i < n) {
        cx_err(cx, v, "invalid %s name '%s': use 1 to %d letters, digits, %s'-' or '_'", kind, s,
               MAX_NAME_LEN, dot ? "'.', " : "");
        return false;
    }
    *out = cx_strdup(cx, s);
    return *out != NULL;
}

/* RFC 9110 token characters, for methods and header names. */
static bool is_token(const char *s) {
    if (!*s) return false;
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              (c && strchr("!#$%&'*+-.^_`|~", c))))
            return false;
    }
    return true;
}

/* The length of the list in f->val, or false after a type error. */
static bool list_len(cx_t *cx, const field_t *f, size_t *len) {
    if (!want_type(cx, f->val, YAML_SEQUENCE_NODE, f->name)) return false;
    *len = seq_len(f->val);
    return true;
}

/* Item i of the list in f->val when it is a mapping, else NULL after a type error. */
static const yaml_node_t *list_map(cx_t *cx, const field_t *f, size_t i) {
    const yaml_node_t *m = seq_at(cx, f->val, i);
    char key[48];
    snprintf(key, sizeof key, "%s[%zu]", f->name, i);
    return m && want_type(cx, m, YAML_MAPPING_NODE, key) ? m : NULL;
}

/* A list of strings, each checked (and possibly rewritten in place) by `check`. */
typedef bool (*str_check_fn)(cx_t *cx, const yaml_node_t *v, char *s);

static void get_str_list(cx_t *cx, const field_t *f, str_check_fn check, char ***out, size_t *n) {
    size_t len;
    char **v;
    if (!list_len(cx, f, &len) || !(v = cx_calloc(cx, len, sizeof *v))) return;
    *out = v;
    *n = len;
    for (size_t i = 0; i < len; i++) {
        yaml_node_t *item = seq_at(cx, f->val, i);
        char key[64];
        snprintf(key, sizeof key, "%s[%zu]", f->name, i);
        if (!item || !get_string(cx, item, key, &v[i])) continue;
        if (check && !check(cx, item, v[i])) {
            free(v[i]);
            v[i] = NULL;
        }
    }
}

/* ------------------------------------------------------------------------------------------ */
/* Plugin configs as JSON text                                                                 */

typedef struct {
    char *p;
    size_t n, cap;
    bool too_big;
} jbuf_t;

#define PATH_MAX_LEN 512

static bool jb_put(cx_t *cx, jbuf_t *b, const void *s, size_t n) {
    if (b->too_big) return false;
    if (b->n + n + 1 > MAX_PLUGIN_JSON) {
        b->too_big = true;
        return false;
    }
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n + 1) cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) {
            cx->oom = true;
            b->too_big = true; /* stops the walk; the oom flag carries the error */
            return false;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = '\0';
    return true;
}

static bool jb_str(cx_t *cx, jbuf_t *b, const unsigned char *s, size_t n) {
    static const char hex[] = "0123456789abcdef";
    if (!jb_put(cx, b, "\"", 1)) return false;
    size_t run = 0; /* bytes that need no escape, flushed in one put */
    for (size_t i = 0; i < n; i++) {
        unsigned char c = s[i];
        char esc[6] = {'\\', (char)c};
        size_t elen = 2;
        switch (c) {
        case '"':
        case '\\':
            break;
        case '\n':
            esc[1] = 'n';
            break;
        case '\t':
            esc[1] = 't';
            break;
        case '\r':
            esc[1] = 'r';
            break;
        default:
            if (c >= 0x20 && c != 0x7f) {
                run++;
                continue;
            }
            memcpy(esc, "\\u00", 4);
            esc[4] = hex[c >> 4];
            esc[5] = hex[c & 15];
            elen = 6;
        }
        if (!jb_put(cx, b, s + i - run, run) || !jb_put(cx, b, esc, elen)) return false;
        run = 0;
    }
    return jb_put(cx, b, s + n - run, run) && jb_put(cx, b, "\"", 1);
}

/* JSON's number grammar exactly: YAML-isms such as 007, +1, .5 or 0x1f stay strings. */
static bool is_json_number(const char *s) {
    if (*s == '-') s++;
    if (*s == '0')
        s++;
    else if (*s >= '1' && *s <= '9')
        while (*s >= '0' && *s <= '9') s++;
    else
        return false;
    if (*s == '.') {
        s++;
        if (!(*s >= '0' && *s <= '9')) return false;
        while (*s >= '0' && *s <= '9') s++;
    }
    if (*s == 'e' || *s == 'E') {
        s++;
        if (*s == '+' || *s == '-') s++;
        if (!(*s >= '0' && *s <= '9')) return false;
        while (*s >= '0' && *s <= '9') s++;
    }
    return *s == '\0';
}

/* Records where each key and value of a plugin config stands, as JSON
 * {"a.b":[key_line,key_col,value_line,value_col], "a.2":[...]} (list items 1-based, as in
 * Lua), so schema errors found later in Lua can name FILE:LINE:COL. */
static bool pos_put(cx_t *cx, jbuf_t *pos, const char *path, const yaml_node_t *k,
                    const yaml_node_t *v) {
    char tmp[64];
    if (pos->n > 1 && !jb_put(cx, pos, ",", 1)) return false;
    if (!jb_str(cx, pos, (const unsigned char *)path, strlen(path))) return false;
    int n = snprintf(tmp, sizeof tmp, ":[%d,%d,%d,%d]", line_of(k), col_of(k), line_of(v), col_of(v));
    return jb_put(cx, pos, tmp, (size_t)n);
}

static bool json_node(cx_t *cx, jbuf_t *b, jbuf_t *pos, char *path, size_t plen,
                      const yaml_node_t *n, int depth) {
    if (depth > MAX_JSON_DEPTH) {
        cx_err(cx, n, "plugin config is nested more than %d levels deep", MAX_JSON_DEPTH);
        return false;
    }
    switch (n->type) {
    case YAML_SCALAR_NODE: {
        const char *s = sval(n);
        if (is_null(n)) return jb_put(cx, b, "null", 4);
        if (is_plain(n) && (strcmp(s, "true") == 0 || strcmp(s, "false") == 0 || is_json_number(s)))
            return jb_put(cx, b, s, n->data.scalar.length);
        return jb_str(cx, b, n->data.scalar.value, n->data.scalar.length);
    }
    case YAML_SEQUENCE_NODE: {
        if (!jb_put(cx, b, "[", 1)) return false;
        for (size_t i = 0; i < seq_len(n); i++) {
            const yaml_node_t *item = seq_at(cx, n, i);
            if ((i && !jb_put(cx, b, ",", 1)) || !item) return false;
            int w = snprintf(path + plen, PATH_MAX_LEN - plen, "%s%zu", plen ? "." : "", i + 1);
            size_t np = SL_MIN(plen + (size_t)w, PATH_MAX_LEN - 1);
            if (!pos_put(cx, pos, path, item, item) || !json_node(cx, b, pos, path, np, item, depth + 1))
                return false;
            path[plen] = '\0';
        }
        return jb_put(cx, b, "]", 1);
    }
    case YAML_MAPPING_NODE: {
        if (!jb_put(cx, b, "{", 1)) return false;
        bool first = true;
        for (yaml_node_pair_t *p = n->data.mapping.pairs.start; p < n->data.mapping.pairs.top;
             p++) {
            yaml_node_t *k = get_node(cx, p->key), *v = get_node(cx, p->value);
            if (!k || !v) return false;
            if (k->type != YAML_SCALAR_NODE) {
                cx_err(cx, k, "expected a string key in plugin config");
                return false;
            }
            if (dup_key(cx, n, p, k)) return false;
            int w = snprintf(path + plen, PATH_MAX_LEN - plen, "%s%s", plen ? "." : "", sval(k));
            size_t np = SL_MIN(plen + (size_t)w, PATH_MAX_LEN - 1);
            if ((!first && !jb_put(cx, b, ",", 1)) ||
                !jb_str(cx, b, k->data.scalar.value, k->data.scalar.length) ||
                !jb_put(cx, b, ":", 1) || !pos_put(cx, pos, path, k, v) ||
                !json_node(cx, b, pos, path, np, v, depth + 1))
                return false;
            path[plen] = '\0';
            first = false;
        }
        return jb_put(cx, b, "}", 1);
    }
    default:
        return false;
    }
}

/* ------------------------------------------------------------------------------------------ */
/* Sections                                                                                    */

enum { P_NAME, P_CONFIG, P_N };
static const char *const plugin_keys[P_N] = {"name", "config"};

static void parse_plugin(cx_t *cx, const yaml_node_t *m, const char *owner, size_t idx,
                         sl_plugin_conf_t *pc) {
    char what[128], where[288];
    describe(cx, m, "plugin", "plugins", idx, what, sizeof what);
    snprintf(where, sizeof where, "%s of %s", what, owner);
    field_t f[P_N];
    scan_map(cx, m, where, plugin_keys, f, P_N, NULL);
    pc->line = line_of(m);
    pc->col = col_of(m);

    const yaml_node_t *v = required(cx, m, &f[P_NAME], where);
    if (v) get_name(cx, v, "plugin", false, &pc->name);
    pc->name_line = line_of(v);
    pc->name_col = col_of(v);

    if (!f[P_CONFIG].val) {
        pc->config_json = cx_strdup(cx, "{}");
        pc->positions_json = cx_strdup(cx, "{}");
        pc->config_line = pc->line;
        pc->config_col = pc->col;
        return;
    }
    if (!want_type(cx, f[P_CONFIG].val, YAML_MAPPING_NODE, "config")) return;
    pc->config_line = line_of(f[P_CONFIG].val);
    pc->config_col = col_of(f[P_CONFIG].val);
    jbuf_t b = {0}, pos = {0};
    char path[PATH_MAX_LEN] = "";
    if (jb_put(cx, &pos, "{", 1) && json_node(cx, &b, &pos, path, 0, f[P_CONFIG].val, 0) &&
        jb_put(cx, &pos, "}", 1)) {
        pc->config_json = b.p;
        pc->positions_json = pos.p;
        return;
    }
    free(pos.p);
    if ((b.too_big || pos.too_big) && !cx->oom)
        cx_err(cx, f[P_CONFIG].val, "plugin config is larger than %u bytes as JSON",
               MAX_PLUGIN_JSON);
    free(b.p);
}

static void parse_plugins(cx_t *cx, const field_t *f, const char *owner, sl_plugin_conf_t **out,
                          size_t *n) {
    size_t len;
    if (!f->val || !list_len(cx, f, &len) || !(*out = cx_calloc(cx, len, sizeof **out))) return;
    *n = len;
    for (size_t i = 0; i < len; i++) {
        const yaml_node_t *m = list_map(cx, f, i);
        if (m) parse_plugin(cx, m, owner, i, &(*out)[i]);
    }
}

enum {
    L_NAME,
    L_LISTEN,
    L_PROTOCOL,
    L_MAX_BODY,
    L_MAX_HEADER,
    L_MAX_LINE,
    L_HEADER_TO,
    L_IDLE_TO,
    L_UPSTREAM,
    L_SPLICE,
    L_PROXY_SEND,
    L_PROXY_ACCEPT,
    L_TLS,
    L_SNI_ROUTES,
    L_PLUGINS,
    L_N
};
static const char *const listener_keys[L_N] = {
    [L_NAME] = "name",
    [L_LISTEN] = "listen",
    [L_PROTOCOL] = "protocol",
    [L_MAX_BODY] = "max_body",
    [L_MAX_HEADER] = "max_header_size",
    [L_MAX_LINE] = "max_request_line",
    [L_HEADER_TO] = "header_timeout",
    [L_IDLE_TO] = "idle_timeout",
    [L_UPSTREAM] = "upstream",
    [L_SPLICE] = "splice",
    [L_PROXY_SEND] = "proxy_protocol",
    [L_PROXY_ACCEPT] = "accept_proxy_protocol",
    [L_TLS] = "tls",
    [L_SNI_ROUTES] = "sni_routes",
    [L_PLUGINS] = "plugins",
};

/* "10.0.0.0/8", "::1", "192.168.1.7" -> an sl_cidr_t; false with an error. */
static bool get_cidr(cx_t *cx, const yaml_node_t *v, sl_cidr_t *out) {
    const char *s = get_text(cx, v, "from", "an address or CIDR");
    if (!s) return false;
    char host[64];
    const char *slash = strchr(s, '/');
    size_t hl = slash ? (size_t)(slash - s) : strlen(s);
    if (hl == 0 || hl >= sizeof host) goto bad;
    memcpy(host, s, hl);
    host[hl] = 0;
    bool v6 = strchr(host, ':') != NULL;
    memset(out, 0, sizeof *out);
    if (v6) {
        if (inet_pton(AF_INET6, host, out->ip) != 1) goto bad;
    } else {
        out->ip[10] = out->ip[11] = 0xff;
        if (inet_pton(AF_INET, host, out->ip + 12) != 1) goto bad;
    }
    long bits = v6 ? 128 : 32;
    if (slash) {
        char *end;
        bits = strtol(slash + 1, &end, 10);
        if (*end || end == slash + 1 || bits < 0 || bits > (v6 ? 128 : 32)) goto bad;
    }
    out->bits = (uint8_t)(v6 ? bits : bits + 96);
    return true;
bad:
    cx_err(cx, v, "'%s' is not an address or CIDR", s);
    return false;
}

/* A file named in the config: relative paths are relative to the config file's folder
 * (the embedded default's: the working directory); a relative path that names no file
 * there but does from the working directory is taken from the working directory (so
 * `cert: conf/test.crt` in conf/sluice.yaml works when sluice runs from the project). */
static char *resolve_path(cx_t *cx, const char *rel) {
    const char *cp = cx->cfg->path;
    if (rel[0] == '/' || !cp || cp[0] == '<' || !strchr(cp, '/')) return cx_strdup(cx, rel);
    size_t dl = (size_t)(strrchr(cp, '/') - cp);
    size_t n = dl + 1 + strlen(rel) + 1;
    char *p = cx_calloc(cx, n, 1);
    if (p) snprintf(p, n, "%.*s/%s", (int)dl, cp, rel);
    if (p && access(p, F_OK) != 0 && access(rel, F_OK) == 0) {
        free(p);
        return cx_strdup(cx, rel);
    }
    return p;
}

enum { TC_CERT, TC_KEY, TC_SNI, TC_DEFAULT, TC_N };
static const char *const tls_cert_keys[TC_N] = {"cert", "key", "sni", "default"};
enum { TL_CERTS, TL_MIN_VERSION, TL_CIPHERS, TL_TICKETS, TL_HS_TIMEOUT, TL_N };
static const char *const tls_keys[TL_N] = {"certificates", "min_version", "ciphers", "session_tickets",
                                           "handshake_timeout"};

static bool check_sni_name(cx_t *cx, const yaml_node_t *v, char *s) {
    const char *p = s[0] == '*' && s[1] == '.' ? s + 2 : s;
    bool ok = *p != 0;
    for (char *q = s; *q; q++) *q = (char)((*q >= 'A' && *q <= 'Z') ? *q + 32 : *q);
    for (; *p && ok; p++) ok = (*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || *p == '-' || *p == '.';
    if (!ok) cx_err(cx, v, "'%s' is not a server name (a DNS name, or *.suffix)", s);
    return ok;
}

static void parse_tls_cert(cx_t *cx, const yaml_node_t *m, size_t idx, sl_tls_cert_conf_t *c) {
    char where[64];
    snprintf(where, sizeof where, "certificates[%zu]", idx);
    field_t f[TC_N];
    scan_map(cx, m, where, tls_cert_keys, f, TC_N, NULL);
    c->line = line_of(m);
    c->col = col_of(m);
    const yaml_node_t *v;
    if ((v = required(cx, m, &f[TC_CERT], where)) && get_string(cx, v, "cert", &c->cert))
        c->cert_path = resolve_path(cx, c->cert);
    if ((v = required(cx, m, &f[TC_KEY], where)) && get_string(cx, v, "key", &c->key))
        c->key_path = resolve_path(cx, c->key);
    if (f[TC_SNI].val) get_str_list(cx, &f[TC_SNI], check_sni_name, &c->sni, &c->nsni);
    if ((v = f[TC_DEFAULT].val)) get_bool(cx, v, "default", &c->is_default);
}

static void parse_tls(cx_t *cx, const yaml_node_t *m, sl_listener_conf_t *l) {
    sl_tls_listener_conf_t *t = cx_calloc(cx, 1, sizeof *t);
    if (!t) return;
    l->tls = t;
    t->line = line_of(m);
    t->col = col_of(m);
    t->session_tickets = true;
    t->handshake_timeout_ms = 10 * 1000;
    int errs_before = (int)cx->nerrs;
    field_t f[TL_N];
    scan_map(cx, m, "'tls'", tls_keys, f, TL_N, NULL);
    const yaml_node_t *v;
    size_t n = 0;
    if ((v = required(cx, m, &f[TL_CERTS], "'tls'")) && list_len(cx, &f[TL_CERTS], &n)) {
        if (n == 0) cx_err(cx, v, "'certificates' needs at least one entry");
        if (n && (t->certs = cx_calloc(cx, n, sizeof *t->certs))) {
            t->ncerts = n;
            size_t ndef = 0;
            for (size_t i = 0; i < n; i++) {
                const yaml_node_t *cm = list_map(cx, &f[TL_CERTS], i);
                if (!cm) continue;
                parse_tls_cert(cx, cm, i, &t->certs[i]);
                if (t->certs[i].is_default && ++ndef > 1)
                    cx_err(cx, cm, "only one certificate may be the default");
            }
        }
    }
    if ((v = f[TL_MIN_VERSION].val)) {
        const char *s = get_text(cx, v, "min_version", "a string");
        if (s && (strcmp(s, "1.3") == 0 || strcmp(s, "TLSv1.3") == 0))
            t->min_version = SL_TLS_V13;
        else if (s && strcmp(s, "1.2") != 0 && strcmp(s, "TLSv1.2") != 0)
            cx_err(cx, v, "min_version '%s' is not allowed (1.2 or 1.3; never below 1.2)", s);
    }
    if ((v = f[TL_CIPHERS].val)) get_string(cx, v, "ciphers", &t->ciphers);
    if ((v = f[TL_TICKETS].val)) get_bool(cx, v, "session_tickets", &t->session_tickets);
    if ((v = f[TL_HS_TIMEOUT].val)) get_duration(cx, v, "handshake_timeout", false, &t->handshake_timeout_ms);
    if ((int)cx->nerrs != errs_before || cx->oom) return;
    char err[512];
    int bad = -1;
    t->rt = sl_tls_server_build(t, err, sizeof err, &bad);
    if (!t->rt) {
        if (bad >= 0)
            cx_at(cx, t->certs[bad].line, t->certs[bad].col, "%s", err);
        else if (bad == -2 && f[TL_CIPHERS].val)
            cx_err(cx, f[TL_CIPHERS].val, "%s", err);
        else
            cx_at(cx, t->line, t->col, "%s", err);
    }
}

static void tls_listener_free(sl_tls_listener_conf_t *t) {
    if (!t) return;
    sl_tls_server_free(t->rt);
    for (size_t i = 0; t->certs && i < t->ncerts; i++) {
        sl_tls_cert_conf_t *c = &t->certs[i];
        free(c->cert);
        free(c->key);
        free(c->cert_path);
        free(c->key_path);
        for (size_t j = 0; c->sni && j < c->nsni; j++) free(c->sni[j]);
        free(c->sni);
    }
    free(t->certs);
    free(t->ciphers);
    free(t);
}

enum { PP_SEND, PP_N };
static const char *const proxy_send_keys[PP_N] = {"send"};
enum { PA_FROM, PA_N };
static const char *const proxy_accept_keys[PA_N] = {"from"};

static bool check_host(cx_t *cx, const yaml_node_t *v, char *s);

enum { SR_SNI, SR_UPSTREAM, SR_N };
static const char *const sni_route_keys[SR_N] = {"sni", "upstream"};

/* A TLS server name to route on: a host name or a "*." wildcard, as a route's hosts (and
 * lower-cased like them), but never an IP literal: RFC 6066 forbids those in SNI. */
static bool check_sni(cx_t *cx, const yaml_node_t *v, char *s) {
    if (!check_host(cx, v, s)) return false;
    struct in_addr a4;
    if (s[0] == '[' || inet_pton(AF_INET, s, &a4) == 1) {
        cx_err(cx, v, "sni '%s': an IP address is never a TLS server name (RFC 6066)", s);
        return false;
    }
    return true;
}

/* `sni_routes:` of a tcp listener: each entry's names and upstream name (resolved with
 * the listener's own upstream, once the upstreams are parsed). */
static void parse_sni_routes(cx_t *cx, const field_t *f, const char *where, sl_listener_conf_t *l) {
    size_t len;
    if (!list_len(cx, f, &len)) return;
    if (len == 0) {
        cx_err(cx, f->val, "'sni_routes' of %s needs at least one entry", where);
        return;
    }
    if (!(l->sni_routes = cx_calloc(cx, len, sizeof *l->sni_routes))) return;
    l->nsni_routes = len;
    for (size_t i = 0; i < len; i++) {
        sl_sni_route_conf_t *r = &l->sni_routes[i];
        r->upstream = -1;
        const yaml_node_t *m = list_map(cx, f, i);
        if (!m) continue;
        char sub[192];
        snprintf(sub, sizeof sub, "sni_routes[%zu] of %s", i, where);
        field_t rf[SR_N];
        scan_map(cx, m, sub, sni_route_keys, rf, SR_N, NULL);
        r->line = line_of(m);
        r->col = col_of(m);
        const yaml_node_t *v = required(cx, m, &rf[SR_SNI], sub);
        if (v) {
            get_str_list(cx, &rf[SR_SNI], check_sni, &r->names, &r->nnames);
            if (v->type == YAML_SEQUENCE_NODE && r->nnames == 0) cx_err(cx, v, "'sni' of %s needs at least one name", sub);
        }
        /* a name listed twice (in this entry or an earlier one) is an error at the second */
        for (size_t k = 0; k < r->nnames; k++) {
            if (!r->names[k]) continue;
            bool dup = false;
            for (size_t j = 0; j <= i && !dup; j++) {
                const sl_sni_route_conf_t *o = &l->sni_routes[j];
                for (size_t q = 0; q < (j == i ? k : o->nnames) && !dup; q++)
                    dup = o->names[q] && strcmp(o->names[q], r->names[k]) == 0;
            }
            if (dup) cx_err(cx, seq_at(cx, v, k), "sni '%s' is listed twice in %s", r->names[k], where);
        }
        if ((v = required(cx, m, &rf[SR_UPSTREAM], sub)) && get_string(cx, v, "upstream", &r->upstream_name)) {
            r->upstream_line = line_of(v);
            r->upstream_col = col_of(v);
        }
    }
}

static int cmp_sni_exact(const void *a, const void *b) {
    const sl_sni_name_t *x = a, *y = b;
    if (x->len != y->len) return x->len < y->len ? -1 : 1;
    return memcmp(x->name, y->name, x->len);
}

static int cmp_sni_wild(const void *a, const void *b) {
    const sl_sni_name_t *x = a, *y = b;
    return x->len == y->len ? 0 : x->len > y->len ? -1 : 1;
}

/* The lookup table of sl_sni_route: exact names sorted for a binary search, then the
 * wildcards' suffixes longest first. After the upstream names were resolved. */
static void build_sni_names(cx_t *cx, sl_listener_conf_t *l) {
    size_t n = 0;
    for (size_t i = 0; i < l->nsni_routes; i++) n += l->sni_routes[i].nnames;
    if (!n || !(l->sni_names = cx_calloc(cx, n, sizeof *l->sni_names))) return;
    size_t ne = 0, nw = 0;
    for (int pass = 0; pass < 2; pass++) {
        for (size_t i = 0; i < l->nsni_routes; i++) {
            const sl_sni_route_conf_t *r = &l->sni_routes[i];
            for (size_t k = 0; k < r->nnames; k++) {
                const char *s = r->names[k];
                if (!s || (s[0] == '*') != (pass == 1)) continue;
                sl_sni_name_t *e = &l->sni_names[pass ? ne + nw++ : ne++];
                e->name = pass ? s + 1 : s;
                e->len = (uint32_t)strlen(e->name);
                e->upstream = r->upstream;
            }
        }
    }
    qsort(l->sni_names, ne, sizeof *l->sni_names, cmp_sni_exact);
    qsort(l->sni_names + ne, nw, sizeof *l->sni_names, cmp_sni_wild);
    l->nsni_exact = ne;
    l->nsni_wild = nw;
}

static void parse_listener(cx_t *cx, const yaml_node_t *m, size_t idx) {
    sl_listener_conf_t *l = &cx->cfg->listeners[idx];
    char where[128];
    describe(cx, m, "listener", "listeners", idx, where, sizeof where);
    field_t f[L_N];
    scan_map(cx, m, where, listener_keys, f, L_N, NULL);
    l->line = line_of(m);
    l->col = col_of(m);
    l->protocol = SL_PROTO_HTTP;
    l->max_body = 0;
    l->max_header_size = 32 * 1024;
    l->max_request_line = 8 * 1024;
    l->header_timeout_ms = 10 * 1000;
    l->idle_timeout_ms = 60 * 1000;

    const yaml_node_t *v = required(cx, m, &f[L_NAME], where);
    if (v && get_name(cx, v, "listener", true, &l->name)) {
        for (size_t i = 0; i < idx; i++)
            if (cx->cfg->listeners[i].name && strcmp(cx->cfg->listeners[i].name, l->name) == 0)
                cx_err(cx, v, "duplicate listener name '%s' (first defined at line %d)", l->name,
                       cx->cfg->listeners[i].line);
    }
    if ((v = required(cx, m, &f[L_LISTEN], where)) &&
        get_addr(cx, v, "listen", false, &l->listen)) {
        for (size_t i = 0; i < idx; i++)
            if (addr_same(&cx->cfg->listeners[i].listen, &l->listen) && addr_port(&l->listen))
                cx_err(cx, v, "address %s is already used by the listener at line %d",
                       l->listen.text, cx->cfg->listeners[i].line);
    }
    l->upstream = -1;
    if ((v = f[L_PROTOCOL].val)) {
        const char *s = get_text(cx, v, "protocol", "a string");
        if (s && strcmp(s, "tcp") == 0)
            l->protocol = SL_PROTO_TCP;
        else if (s && strcmp(s, "http") != 0)
            cx_err(cx, v, "unknown protocol '%s' (expected http or tcp)", s);
    }
    bool tcp = l->protocol == SL_PROTO_TCP;
    if (tcp) l->idle_timeout_ms = 300 * 1000;
    if ((v = f[L_UPSTREAM].val)) {
        if (!tcp)
            cx_err(cx, f[L_UPSTREAM].key, "'upstream' belongs to protocol: tcp listeners (http routes name theirs)");
        else if (get_string(cx, v, "upstream", &l->upstream_name)) {
            l->upstream_line = line_of(v);
            l->upstream_col = col_of(v);
        }
    } else if (tcp && !f[L_SNI_ROUTES].val && !f[L_PLUGINS].val) {
        cx_err(cx, m, "missing required key 'upstream' in %s (protocol: tcp, no sni_routes or plugins)", where);
    }
    /* the connect timeout of a session sent to an address (a preread plugin's choice); the
     * listener's upstream, when it has one, sets it below */
    l->connect_timeout_ms = 2 * 1000;
    if (f[L_PLUGINS].val) {
        if (!tcp)
            cx_err(cx, f[L_PLUGINS].key, "'plugins' belongs to protocol: tcp listeners (the preread phase; "
                                         "http routes list their own plugins)");
        else
            parse_plugins(cx, &f[L_PLUGINS], where, &l->plugins, &l->nplugins);
    }
    if (f[L_SNI_ROUTES].val) {
        if (!tcp)
            cx_err(cx, f[L_SNI_ROUTES].key, "'sni_routes' belongs to protocol: tcp listeners (http routes match hosts)");
        else
            parse_sni_routes(cx, &f[L_SNI_ROUTES], where, l);
    }
    if ((v = f[L_SPLICE].val)) {
        const char *s = get_text(cx, v, "splice", "a string");
        if (!tcp)
            cx_err(cx, f[L_SPLICE].key, "'splice' belongs to protocol: tcp listeners");
        else if (s && strcmp(s, "off") == 0)
            l->splice = SL_SPLICE_OFF;
        else if (s && strcmp(s, "auto") != 0)
            cx_err(cx, v, "unknown splice '%s' (expected auto or off)", s);
    }
    if ((v = f[L_PROXY_SEND].val) && want_type(cx, v, YAML_MAPPING_NODE, "proxy_protocol")) {
        field_t pf[PP_N];
        scan_map(cx, v, "'proxy_protocol'", proxy_send_keys, pf, PP_N, NULL);
        const yaml_node_t *sv = required(cx, v, &pf[PP_SEND], "'proxy_protocol'");
        const char *s = sv ? get_text(cx, sv, "send", "a string") : NULL;
        if (!tcp)
            cx_err(cx, f[L_PROXY_SEND].key, "'proxy_protocol' belongs to protocol: tcp listeners");
        else if (s && strcmp(s, "v1") == 0)
            l->proxy_send = SL_PROXY_V1;
        else if (s && strcmp(s, "v2") == 0)
            l->proxy_send = SL_PROXY_V2;
        else if (s)
            cx_err(cx, sv, "unknown PROXY protocol version '%s' (expected v1 or v2)", s);
    }
    if ((v = f[L_PROXY_ACCEPT].val) && want_type(cx, v, YAML_MAPPING_NODE, "accept_proxy_protocol")) {
        field_t pf[PA_N];
        scan_map(cx, v, "'accept_proxy_protocol'", proxy_accept_keys, pf, PA_N, NULL);
        size_t n;
        const yaml_node_t *fv = required(cx, v, &pf[PA_FROM], "'accept_proxy_protocol'");
        if (fv && list_len(cx, &pf[PA_FROM], &n)) {
            if (n == 0) cx_err(cx, fv, "'from' needs at least one address or CIDR (the trusted senders)");
            if (n && (l->proxy_from = cx_calloc(cx, n, sizeof *l->proxy_from))) {
                l->nproxy_from = n;
                for (size_t i = 0; i < n; i++) {
                    const yaml_node_t *it = seq_at(cx, fv, i);
                    if (it) get_cidr(cx, it, &l->proxy_from[i]);
                }
            }
        }
        l->accept_proxy = true;
    }
    if ((v = f[L_TLS].val) && want_type(cx, v, YAML_MAPPING_NODE, "tls")) {
        if (tcp)
            cx_err(cx, f[L_TLS].key, "'tls' (termination) belongs to protocol: http listeners; a tcp listener "
                                     "passes TLS through untouched");
        else
            parse_tls(cx, v, l);
    }
    uint64_t n;
    if ((v = f[L_MAX_BODY].val)) get_size(cx, v, "max_body", 0, UINT64_MAX, &l->max_body);
    if ((v = f[L_MAX_HEADER].val) && get_size(cx, v, "max_header_size", 1, UINT32_MAX, &n))
        l->max_header_size = (uint32_t)n;
    if ((v = f[L_MAX_LINE].val) && get_size(cx, v, "max_request_line", 1, UINT32_MAX, &n))
        l->max_request_line = (uint32_t)n;
    if ((v = f[L_HEADER_TO].val))
        get_duration(cx, v, "header_timeout", false, &l->header_timeout_ms);
    if ((v = f[L_IDLE_TO].val)) get_duration(cx, v, "idle_timeout", false, &l->idle_timeout_ms);
}

enum { T_ADDRESS, T_WEIGHT, T_TLS, T_N };
static const char *const target_keys[T_N] = {"address", "weight", "tls"};
enum { TT_VERIFY, TT_CA, TT_SNI, TT_N };
static const char *const target_tls_keys[TT_N] = {"verify", "ca", "sni"};

/* A target's `tls:` (a mapping, or `true` for the defaults). */
static void parse_target_tls(cx_t *cx, const yaml_node_t *v, sl_target_conf_t *t) {
    bool on = true;
    if (v->type == YAML_SCALAR_NODE) {
        if (!get_bool(cx, v, "tls", &on) || !on) return;
    } else if (!want_type(cx, v, YAML_MAPPING_NODE, "tls")) {
        return;
    }
    sl_tls_target_conf_t *c = cx_calloc(cx, 1, sizeof *c);
    if (!c) return;
    t->tls = c;
    c->verify = true;
    c->line = line_of(v);
    c->col = col_of(v);
    int errs_before = (int)cx->nerrs;
    if (v->type == YAML_MAPPING_NODE) {
        field_t f[TT_N];
        scan_map(cx, v, "'tls'", target_tls_keys, f, TT_N, NULL);
        const yaml_node_t *x;
        if ((x = f[TT_VERIFY].val)) get_bool(cx, x, "verify", &c->verify);
        if ((x = f[TT_CA].val) && get_string(cx, x, "ca", &c->ca)) c->ca_path = resolve_path(cx, c->ca);
        if ((x = f[TT_SNI].val) && get_string(cx, x, "sni", &c->sni)) check_sni_name(cx, x, c->sni);
        if (f[TT_CA].val && !c->verify) cx_err(cx, f[TT_CA].key, "'ca' has no use with verify: false");
    }
    if ((int)cx->nerrs != errs_before || cx->oom || !t->addr.text) return;
    /* the address's host part: what is verified when no sni is given */
    char ip[64];
    const char *a = t->addr.text, *colon = strrchr(a, ':');
    size_t hl = colon ? (size_t)(colon - a) : strlen(a);
    if (a[0] == '[' && hl >= 2) {
        a++;
        hl -= 2;
    }
    snprintf(ip, sizeof ip, "%.*s", (int)SL_MIN(hl, sizeof ip - 1), a);
    if (strcmp(ip, "localhost") == 0) snprintf(ip, sizeof ip, "127.0.0.1");
    char err[512];
    if (!(c->rt = sl_tls_client_build(c, ip, err, sizeof err))) cx_at(cx, c->line, c->col, "%s", err);
}

static void tls_target_free(sl_tls_target_conf_t *c) {
    if (!c) return;
    sl_tls_client_free(c->rt);
    free(c->ca);
    free(c->ca_path);
    free(c->sni);
    free(c);
}

static void parse_target(cx_t *cx, const yaml_node_t *m, const char *upstream, size_t idx,
                         sl_upstream_conf_t *u) {
    sl_target_conf_t *t = &u->targets[idx];
    char where[192];
    snprintf(where, sizeof where, "targets[%zu] of %s", idx, upstream);
    field_t f[T_N];
    scan_map(cx, m, where, target_keys, f, T_N, NULL);
    t->weight = 1;
    const yaml_node_t *v = required(cx, m, &f[T_ADDRESS], where);
    if (v && get_addr(cx, v, "address", true, &t->addr)) {
        for (size_t i = 0; i < idx; i++)
            if (addr_same(&u->targets[i].addr, &t->addr))
                cx_err(cx, v, "target %s is listed twice in %s", t->addr.text, upstream);
    }
    int64_t w;
    if ((v = f[T_WEIGHT].val) && get_int(cx, v, "weight", 1, MAX_WEIGHT, &w)) {
        t->weight = (uint32_t)w;
        /* round-robin, least-conn and p2c-ewma give no share by weight: a weight there
         * would silently do nothing. */
        if (w != 1 && u->balancer != SL_LB_WEIGHTED_ROUND_ROBIN && u->balancer != SL_LB_CONSISTENT_HASH)
            cx_err(cx, v, "weight %lld needs balancer weighted-round-robin or consistent-hash",
                   (long long)w);
    }
    if ((v = f[T_TLS].val)) parse_target_tls(cx, v, t);
}

static const char *const balancer_names[] = {
    [SL_LB_ROUND_ROBIN] = "round-robin",         [SL_LB_WEIGHTED_ROUND_ROBIN] = "weighted-round-robin",
    [SL_LB_LEAST_CONN] = "least-conn",           [SL_LB_P2C_EWMA] = "p2c-ewma",
    [SL_LB_CONSISTENT_HASH] = "consistent-hash",
};

/* "ip", "path", "header:NAME", "cookie:NAME" (consistent-hash keys). */
static bool get_hash_on(cx_t *cx, const yaml_node_t *v, const char *key, int *kind, char **name) {
    const char *s = get_text(cx, v, key, "a string");
    if (!s) return false;
    const char *arg = NULL;
    if (strcmp(s, "ip") == 0) {
        *kind = SL_HASH_IP;
    } else if (strcmp(s, "path") == 0) {
        *kind = SL_HASH_PATH;
    } else if (strncmp(s, "header:", 7) == 0) {
        *kind = SL_HASH_HEADER;
        arg = s + 7;
    } else if (strncmp(s, "cookie:", 7) == 0) {
        *kind = SL_HASH_COOKIE;
        arg = s + 7;
    } else {
        cx_err(cx, v, "unknown %s '%s' (expected ip, path, header:NAME or cookie:NAME)", key, s);
        return false;
    }
    if (arg && !is_token(arg)) {
        cx_err(cx, v, "%s '%s' needs a header or cookie name after the colon", key, s);
        return false;
    }
    if (arg && !(*name = cx_strdup(cx, arg))) return false;
    return true;
}

enum { HA_TYPE, HA_PATH, HA_EXPECT, HA_INTERVAL, HA_TIMEOUT, HA_HEALTHY, HA_UNHEALTHY, HA_N };
static const char *const active_keys[HA_N] = {"type",    "path",    "expect_status",   "interval",
                                              "timeout", "healthy_threshold", "unhealthy_threshold"};
enum { HP_MAX_FAILURES, HP_WINDOW, HP_N };
static const char *const passive_keys[HP_N] = {"max_failures", "window"};
enum { H_ACTIVE, H_PASSIVE, H_N };
static const char *const health_keys[H_N] = {"active", "passive"};

static void parse_health(cx_t *cx, const yaml_node_t *m, const char *where, sl_health_conf_t *h) {
    char sub[256];
    field_t f[H_N];
    snprintf(sub, sizeof sub, "'health' of %s", where);
    scan_map(cx, m, sub, health_keys, f, H_N, NULL);
    const yaml_node_t *v;
    int64_t n;
    if ((v = f[H_ACTIVE].val) && want_type(cx, v, YAML_MAPPING_NODE, "active")) {
        field_t a[HA_N];
        snprintf(sub, sizeof sub, "'health.active' of %s", where);
        scan_map(cx, v, sub, active_keys, a, HA_N, NULL);
        h->active_type = SL_PROBE_HTTP;
        if (a[HA_TYPE].val) {
            const char *t = get_text(cx, a[HA_TYPE].val, "type", "a string");
            if (t && strcmp(t, "tcp") == 0)
                h->active_type = SL_PROBE_TCP;
            else if (t && strcmp(t, "http") != 0)
                cx_err(cx, a[HA_TYPE].val, "unknown probe type '%s' (expected http or tcp)", t);
        }
        if ((v = a[HA_PATH].val)) {
            free(h->path);
            h->path = NULL;
            if (get_string(cx, v, "path", &h->path) && (h->path[0] != '/' || strpbrk(h->path, " \r\n\t")))
                cx_err(cx, v, "probe path '%s' must start with '/' and contain no spaces", h->path);
            if (h->active_type == SL_PROBE_TCP) cx_err(cx, v, "a tcp probe has no path");
        }
        if ((v = a[HA_EXPECT].val) && get_int(cx, v, "expect_status", 100, 599, &n)) h->expect_status = (int)n;
        if ((v = a[HA_INTERVAL].val)) get_duration(cx, v, "interval", false, &h->interval_ms);
        if ((v = a[HA_TIMEOUT].val)) get_duration(cx, v, "timeout", false, &h->timeout_ms);
        if ((v = a[HA_HEALTHY].val) && get_int(cx, v, "healthy_threshold", 1, 100, &n))
            h->healthy_threshold = (uint32_t)n;
        if ((v = a[HA_UNHEALTHY].val) && get_int(cx, v, "unhealthy_threshold", 1, 100, &n))
            h->unhealthy_threshold = (uint32_t)n;
    }
    if ((v = f[H_PASSIVE].val) && want_type(cx, v, YAML_MAPPING_NODE, "passive")) {
        field_t p[HP_N];
        snprintf(sub, sizeof sub, "'health.passive' of %s", where);
        scan_map(cx, v, sub, passive_keys, p, HP_N, NULL);
        h->passive = true;
        if ((v = p[HP_MAX_FAILURES].val) && get_int(cx, v, "max_failures", 1, 1000000, &n))
            h->max_failures = (uint32_t)n;
        if ((v = p[HP_WINDOW].val)) get_duration(cx, v, "window", false, &h->window_ms);
    }
}

enum { CB_RATIO, CB_MIN, CB_WINDOW, CB_OPEN, CB_MAX_OPEN, CB_HALF, CB_SUCCESS, CB_N };
static const char *const breaker_keys[CB_N] = {"failure_ratio", "min_requests",       "window",
                                               "open_timeout",  "max_open_timeout",   "half_open_requests",
                                               "success_threshold"};

static void parse_breaker(cx_t *cx, const yaml_node_t *m, const char *where, sl_breaker_conf_t *b) {
    char sub[256];
    field_t f[CB_N];
    snprintf(sub, sizeof sub, "'circuit_breaker' of %s", where);
    scan_map(cx, m, sub, breaker_keys, f, CB_N, NULL);
    b->enabled = true;
    const yaml_node_t *v;
    int64_t n;
    if ((v = f[CB_RATIO].val)) get_number(cx, v, "failure_ratio", 0.01, 1.0, &b->failure_ratio);
    if ((v = f[CB_MIN].val) && get_int(cx, v, "min_requests", 1, 1000000, &n)) b->min_requests = (uint32_t)n;
    if ((v = f[CB_WINDOW].val)) get_duration(cx, v, "window", false, &b->window_ms);
    if ((v = f[CB_OPEN].val)) get_duration(cx, v, "open_timeout", false, &b->open_timeout_ms);
    if ((v = f[CB_MAX_OPEN].val)) get_duration(cx, v, "max_open_timeout", false, &b->max_open_timeout_ms);
    if ((v = f[CB_HALF].val) && get_int(cx, v, "half_open_requests", 1, 10000, &n))
        b->half_open_requests = (uint32_t)n;
    if ((v = f[CB_SUCCESS].val) && get_int(cx, v, "success_threshold", 1, 10000, &n))
        b->success_threshold = (uint32_t)n;
    if (b->max_open_timeout_ms < b->open_timeout_ms)
        cx_err(cx, f[CB_MAX_OPEN].val ? f[CB_MAX_OPEN].val : m,
               "max_open_timeout must be at least open_timeout");
}

enum { RT_ATTEMPTS, RT_ON, RT_BACKOFF, RT_MAX_BACKOFF, RT_MAX_BODY, RT_HEDGE, RT_N };
static const char *const retry_keys[RT_N] = {"attempts", "on", "backoff", "max_backoff", "max_body",
                                             "hedge_after"};

static void parse_retry(cx_t *cx, const yaml_node_t *m, const char *where, sl_retry_conf_t *r) {
    char sub[256];
    field_t f[RT_N];
    snprintf(sub, sizeof sub, "'retry' of %s", where);
    scan_map(cx, m, sub, retry_keys, f, RT_N, NULL);
    const yaml_node_t *v;
    int64_t n;
    if ((v = f[RT_ATTEMPTS].val) && get_int(cx, v, "attempts", 1, 10, &n)) r->attempts = (uint32_t)n;
    size_t len;
    if (f[RT_ON].val && list_len(cx, &f[RT_ON], &len)) {
        r->on_flags = 0;
        r->nstatuses = 0;
        for (size_t i = 0; i < len; i++) {
            const yaml_node_t *it = seq_at(cx, f[RT_ON].val, i);
            if (!it) continue;
            if (is_plain(it) && strcmp(sval(it), "connect_error") == 0) {
                r->on_flags |= SL_RETRY_ON_CONNECT_ERROR;
            } else if (is_plain(it) && strcmp(sval(it), "timeout") == 0) {
                r->on_flags |= SL_RETRY_ON_TIMEOUT;
            } else if (is_plain(it) && isdigit((unsigned char)sval(it)[0])) {
                if (get_int(cx, it, "on", 500, 599, &n)) {
                    if (r->nstatuses == SL_MAX_RETRY_STATUSES)
                        cx_err(cx, it, "at most %d statuses in 'on'", SL_MAX_RETRY_STATUSES);
                    else
                        r->statuses[r->nstatuses++] = (uint16_t)n;
                }
            } else {
                cx_err(cx, it, "unknown retry condition '%s' (expected a 5xx status, connect_error or timeout)",
                       it->type == YAML_SCALAR_NODE ? sval(it) : "?");
            }
        }
    }
    if ((v = f[RT_BACKOFF].val)) get_duration(cx, v, "backoff", true, &r->backoff_ms);
    if ((v = f[RT_MAX_BACKOFF].val)) get_duration(cx, v, "max_backoff", true, &r->max_backoff_ms);
    if ((v = f[RT_MAX_BODY].val)) get_size(cx, v, "max_body", 0, MAX_RETRY_BODY, &r->max_body);
    if ((v = f[RT_HEDGE].val)) get_duration(cx, v, "hedge_after", true, &r->hedge_after_ms);
    if (r->max_backoff_ms < r->backoff_ms)
        cx_err(cx, f[RT_MAX_BACKOFF].val ? f[RT_MAX_BACKOFF].val : m, "max_backoff must be at least backoff");
}

enum { K_MAX_IDLE, K_IDLE_TO, K_N };
static const char *const keepalive_keys[K_N] = {"max_idle", "idle_timeout"};
enum { TO_CONNECT, TO_READ, TO_WRITE, TO_N };
static const char *const timeout_keys[TO_N] = {"connect", "read", "write"};

enum { U_NAME, U_BALANCER, U_HASH_ON, U_HASH_EPS, U_TARGETS, U_KEEPALIVE, U_TIMEOUTS, U_HEALTH,
       U_BREAKER, U_RETRY, U_N };
static const char *const upstream_keys[U_N] = {"name",     "balancer",  "hash_on", "hash_epsilon",
                                               "targets",  "keepalive", "timeouts", "health",
                                               "circuit_breaker", "retry"};

static void parse_upstream(cx_t *cx, const yaml_node_t *m, size_t idx) {
    sl_upstream_conf_t *u = &cx->cfg->upstreams[idx];
    char where[128], sub[192];
    describe(cx, m, "upstream", "upstreams", idx, where, sizeof where);
    field_t f[U_N];
    scan_map(cx, m, where, upstream_keys, f, U_N, NULL);
    u->line = line_of(m);
    u->col = col_of(m);
    u->balancer = SL_LB_ROUND_ROBIN;
    u->hash_on = SL_HASH_IP;
    u->hash_epsilon = 0.25;
    u->health = (sl_health_conf_t){.interval_ms = 2000, .timeout_ms = 1000, .healthy_threshold = 2,
                                   .unhealthy_threshold = 3, .max_failures = 5, .window_ms = 10000};
    u->breaker = (sl_breaker_conf_t){.failure_ratio = 0.5, .min_requests = 20, .window_ms = 30000,
                                     .open_timeout_ms = 1000, .max_open_timeout_ms = 60000,
                                     .half_open_requests = 2, .success_threshold = 2};
    u->retry = (sl_retry_conf_t){.attempts = 1, .on_flags = SL_RETRY_ON_CONNECT_ERROR | SL_RETRY_ON_TIMEOUT,
                                 .statuses = {502, 503, 504}, .nstatuses = 3, .backoff_ms = 25,
                                 .max_backoff_ms = 250, .max_body = 1024 * 1024};
    u->keepalive_max_idle = 64;
    u->keepalive_idle_timeout_ms = 60 * 1000;
    u->connect_timeout_ms = 2 * 1000;
    u->read_timeout_ms = 30 * 1000;
    u->write_timeout_ms = 30 * 1000;

    const yaml_node_t *v = required(cx, m, &f[U_NAME], where);
    if (v && get_name(cx, v, "upstream", true, &u->name)) {
        for (size_t i = 0; i < idx; i++)
            if (cx->cfg->upstreams[i].name && strcmp(cx->cfg->upstreams[i].name, u->name) == 0)
                cx_err(cx, v, "duplicate upstream name '%s' (first defined at line %d)", u->name,
                       cx->cfg->upstreams[i].line);
    }
    if ((v = f[U_BALANCER].val)) {
        const char *s = get_text(cx, v, "balancer", "a string");
        size_t i = 0;
        while (s && i < SL_ARRAY_LEN(balancer_names) && strcmp(s, balancer_names[i]) != 0) i++;
        if (s && i < SL_ARRAY_LEN(balancer_names))
            u->balancer = (int)i;
        else if (s)
            cx_err(cx, v,
                   "unknown balancer '%s' (expected round-robin, weighted-round-robin, "
                   "least-conn, p2c-ewma or consistent-hash)",
                   s);
    }
    if ((v = f[U_HASH_ON].val) && get_hash_on(cx, v, "hash_on", &u->hash_on, &u->hash_name) &&
        u->balancer != SL_LB_CONSISTENT_HASH)
        cx_err(cx, v, "hash_on needs balancer consistent-hash");
    if ((v = f[U_HASH_EPS].val) && get_number(cx, v, "hash_epsilon", 0.0, 100.0, &u->hash_epsilon) &&
        u->balancer != SL_LB_CONSISTENT_HASH)
        cx_err(cx, v, "hash_epsilon needs balancer consistent-hash");
    size_t len;
    if ((v = required(cx, m, &f[U_TARGETS], where)) && list_len(cx, &f[U_TARGETS], &len)) {
        if (len == 0) cx_err(cx, v, "%s needs at least one target", where);
        if ((u->targets = cx_calloc(cx, len, sizeof *u->targets))) {
            u->ntargets = len;
            for (size_t i = 0; i < len; i++) {
                const yaml_node_t *t = list_map(cx, &f[U_TARGETS], i);
                if (t) parse_target(cx, t, where, i, u);
            }
        }
    }
    if ((v = f[U_KEEPALIVE].val) && want_type(cx, v, YAML_MAPPING_NODE, "keepalive")) {
        field_t k[K_N];
        snprintf(sub, sizeof sub, "'keepalive' of %s", where);
        scan_map(cx, v, sub, keepalive_keys, k, K_N, NULL);
        int64_t n;
        if (k[K_MAX_IDLE].val &&
            get_int(cx, k[K_MAX_IDLE].val, "max_idle", 0, MAX_KEEPALIVE_IDLE, &n))
            u->keepalive_max_idle = (uint32_t)n;
        if (k[K_IDLE_TO].val)
            get_duration(cx, k[K_IDLE_TO].val, "idle_timeout", false,
                         &u->keepalive_idle_timeout_ms);
    }
    if ((v = f[U_TIMEOUTS].val) && want_type(cx, v, YAML_MAPPING_NODE, "timeouts")) {
        field_t t[TO_N];
        snprintf(sub, sizeof sub, "'timeouts' of %s", where);
        scan_map(cx, v, sub, timeout_keys, t, TO_N, NULL);
        if (t[TO_CONNECT].val)
            get_duration(cx, t[TO_CONNECT].val, "connect", false, &u->connect_timeout_ms);
        if (t[TO_READ].val) get_duration(cx, t[TO_READ].val, "read", false, &u->read_timeout_ms);
        if (t[TO_WRITE].val)
            get_duration(cx, t[TO_WRITE].val, "write", false, &u->write_timeout_ms);
    }
    if ((v = f[U_HEALTH].val) && want_type(cx, v, YAML_MAPPING_NODE, "health")) parse_health(cx, v, where, &u->health);
    if ((v = f[U_BREAKER].val) && want_type(cx, v, YAML_MAPPING_NODE, "circuit_breaker"))
        parse_breaker(cx, v, where, &u->breaker);
    if ((v = f[U_RETRY].val) && want_type(cx, v, YAML_MAPPING_NODE, "retry")) parse_retry(cx, v, where, &u->retry);
    if (u->health.active_type == SL_PROBE_HTTP && !u->health.path) u->health.path = cx_strdup(cx, "/health");
}

static bool check_host(cx_t *cx, const yaml_node_t *v, char *s) {
    for (char *p = s; *p; p++)
        if (*p >= 'A' && *p <= 'Z') *p = (char)(*p | 0x20);
    const char *name = strncmp(s, "*.", 2) == 0 ? s + 2 : s;
    if (strchr(name, '*') || strcmp(s, "*.") == 0) {
        cx_err(cx, v, "host '%s': '*' is only allowed as a whole first label, as in *.example.com",
               s);
        return false;
    }
    if (name[0] == '[') {
        struct in6_addr a6;
        char buf[64];
        size_t n = strlen(name);
        if (n >= 3 && n - 2 < sizeof buf && name[n - 1] == ']' && name == s) {
            memcpy(buf, name + 1, n - 2);
            buf[n - 2] = '\0';
            if (inet_pton(AF_INET6, buf, &a6) == 1) return true;
        }
        cx_err(cx, v, "host '%s' is not a valid bracketed IPv6 address", s);
        return false;
    }
    if (strchr(name, ':')) {
        cx_err(cx, v, "host '%s': hosts match without the port", s);
        return false;
    }
    for (const char *p = name; *p; p++) {
        if (!name_char(*p, true)) {
            cx_err(cx, v, "host '%s' is not a valid host name", s);
            return false;
        }
    }
    if (!*name) {
        cx_err(cx, v, "host must not be empty");
        return false;
    }
    return true;
}

static bool check_path(cx_t *cx, const yaml_node_t *v, char *s) {
    if (s[0] != '/') {
        cx_err(cx, v, "path '%s' must start with '/'", s);
        return false;
    }
    for (const char *p = s; *p; p++) {
        if ((unsigned char)*p <= 0x20 || *p == 0x7f || *p == '?' || *p == '#') {
            cx_err(cx, v, "path '%s' must not contain spaces, control characters, '?' or '#'", s);
            return false;
        }
    }
    return true;
}

static bool check_method(cx_t *cx, const yaml_node_t *v, char *s) {
    if (!is_token(s)) {
        cx_err(cx, v, "method '%s' is not a valid HTTP method token", s);
        return false;
    }
    for (char *p = s; *p; p++)
        if (*p >= 'a' && *p <= 'z') *p = (char)(*p - 'a' + 'A');
    return true;
}

static void parse_match_headers(cx_t *cx, const yaml_node_t *m, sl_route_conf_t *r) {
    size_t len = (size_t)(m->data.mapping.pairs.top - m->data.mapping.pairs.start);
    if (!(r->headers = cx_calloc(cx, len, sizeof *r->headers))) return;
    for (yaml_node_pair_t *p = m->data.mapping.pairs.start; p < m->data.mapping.pairs.top; p++) {
        yaml_node_t *k = get_node(cx, p->key), *v = get_node(cx, p->value);
        if (!k || !v) continue;
        const char *name = get_text(cx, k, "headers", "a string key");
        if (!name) continue;
        if (!is_token(name)) {
            cx_err(cx, k, "header name '%s' is not a valid token", name);
            continue;
        }
        bool dup = false;
        for (size_t i = 0; i < r->nheaders && !dup; i++) {
            if (strcasecmp(r->headers[i].name, name) == 0) {
                cx_err(cx, k, "header '%s' is matched twice (header names ignore case)", name);
                dup = true;
            }
        }
        if (dup) continue;
        const char *val = is_null(v) ? NULL : get_text(cx, v, name, "a string");
        if (!val) {
            if (is_null(v)) cx_err(cx, k, "header '%s' needs a value to match", name);
            continue;
        }
        for (const char *c = val; *c; c++) {
            if (((unsigned char)*c < 0x20 && *c != '\t') || *c == 0x7f) {
                cx_err(cx, v, "header value for '%s' contains a control character", name);
                val = NULL;
                break;
            }
        }
        if (!val) continue;
        sl_kv_t *kv = &r->headers[r->nheaders];
        kv->name = cx_strdup(cx, name);
        kv->value = cx_strdup(cx, val);
        r->nheaders++; /* counted even when a strdup failed, so the free loop sees both */
    }
}

enum { M_HOSTS, M_PATHS, M_METHODS, M_HEADERS, M_N };
static const char *const match_keys[M_N] = {"hosts", "paths", "methods", "headers"};

enum { R_NAME, R_MATCH, R_UPSTREAM, R_SPLIT, R_STRIP, R_UPGRADE, R_PLUGINS, R_N };
static const char *const route_keys[R_N] = {"name",         "match",   "upstream", "split",
                                            "strip_prefix", "upgrade", "plugins"};

/* An `upgrade:` entry: "*", or a protocol (RFC 9110 7.8: token ["/" token]), lower-cased.
 * h2c is refused here: an upstream that switched to HTTP/2 on a connection sluice proxies
 * as HTTP/1.1 would get bytes sluice cannot police, so it is never forwarded at all. */
static bool check_upgrade(cx_t *cx, const yaml_node_t *v, char *s) {
    for (char *p = s; *p; p++)
        if (*p >= 'A' && *p <= 'Z') *p = (char)(*p - 'A' + 'a');
    if (strcmp(s, "*") == 0) return true;
    char *slash = strchr(s, '/');
    if (slash) *slash = '\0';
    bool ok = is_token(s) && (!slash || is_token(slash + 1));
    bool h2c = strcmp(s, "h2c") == 0;
    if (slash) *slash = '/';
    if (!ok) {
        cx_err(cx, v, "upgrade protocol '%s' is not a token (NAME or NAME/VERSION)", s);
        return false;
    }
    if (h2c) {
        cx_err(cx, v, "upgrade: h2c is never forwarded (sluice speaks HTTP/1.1 to upstreams)");
        return false;
    }
    return true;
}

static int find_upstream(const sl_config_t *cfg, const char *s) {
    for (size_t i = 0; s && i < cfg->nupstreams; i++)
        if (cfg->upstreams[i].name && strcmp(cfg->upstreams[i].name, s) == 0) return (int)i;
    return -1;
}

enum { SP_UPSTREAM, SP_WEIGHT, SP_MATCH, SP_N };
static const char *const split_keys[SP_N] = {"upstream", "weight", "match"};
enum { SM_HEADERS, SM_COOKIES, SM_N };
static const char *const split_match_keys[SM_N] = {"headers", "cookies"};

/* One `NAME: VALUE` pair of a split arm's match (headers or cookies). */
static void parse_split_pair(cx_t *cx, const yaml_node_t *m, const char *key, char **name, char **value) {
    if (!want_type(cx, m, YAML_MAPPING_NODE, key)) return;
    size_t n = (size_t)(m->data.mapping.pairs.top - m->data.mapping.pairs.start);
    if (n != 1) {
        cx_err(cx, m, "'%s' of a split arm takes exactly one NAME: VALUE", key);
        return;
    }
    const yaml_node_pair_t *p = m->data.mapping.pairs.start;
    const yaml_node_t *k = get_node(cx, p->key), *v = get_node(cx, p->value);
    if (!k || !v || !get_string(cx, k, key, name)) return;
    if (!is_token(*name)) cx_err(cx, k, "'%s' is not a valid %s name", *name, key);
    get_string(cx, v, key, value);
}

static void parse_split(cx_t *cx, const field_t *fs, const char *where, sl_route_conf_t *r) {
    size_t len;
    if (!list_len(cx, fs, &len)) return;
    if (len == 0) {
        cx_err(cx, fs->val, "split needs at least one arm");
        return;
    }
    if (!(r->split = cx_calloc(cx, len, sizeof *r->split))) return;
    r->nsplit = len;
    uint64_t total = 0;
    bool incomplete = false;
    for (size_t i = 0; i < len; i++) {
        const yaml_node_t *m = list_map(cx, fs, i);
        if (!m) continue;
        sl_split_conf_t *a = &r->split[i];
        char sub[256];
        snprintf(sub, sizeof sub, "split[%zu] of %s", i, where);
        field_t f[SP_N];
        scan_map(cx, m, sub, split_keys, f, SP_N, NULL);
        a->line = line_of(m);
        a->col = col_of(m);
        a->upstream = -1;
        const yaml_node_t *v = required(cx, m, &f[SP_UPSTREAM], sub);
        const char *s = v ? get_text(cx, v, "upstream", "a string") : NULL;
        if (s && (a->upstream = find_upstream(cx->cfg, s)) < 0) cx_err(cx, v, "%s names unknown upstream '%s'", sub, s);
        int64_t w;
        if ((v = f[SP_WEIGHT].val) && get_int(cx, v, "weight", 0, 1000000, &w)) a->weight = (uint32_t)w;
        if ((v = f[SP_MATCH].val) && want_type(cx, v, YAML_MAPPING_NODE, "match")) {
            field_t mf[SM_N];
            scan_map(cx, v, sub, split_match_keys, mf, SM_N, NULL);
            if (mf[SM_HEADERS].val) parse_split_pair(cx, mf[SM_HEADERS].val, "headers", &a->header, &a->header_value);
            if (mf[SM_COOKIES].val) parse_split_pair(cx, mf[SM_COOKIES].val, "cookies", &a->cookie, &a->cookie_value);
            if (!mf[SM_HEADERS].val && !mf[SM_COOKIES].val) cx_err(cx, v, "a split match needs headers or cookies");
        } else if (!f[SP_WEIGHT].val) {
            cx_err(cx, m, "%s needs a weight or a match", sub);
            incomplete = true;
        }
        if (f[SP_MATCH].val && f[SP_WEIGHT].val) {
            cx_err(cx, f[SP_WEIGHT].key, "%s takes a weight or a match, not both", sub);
            incomplete = true;
        }
        if (!f[SP_MATCH].val) total += a->weight;
    }
    if (total == 0 && !incomplete) cx_err(cx, fs->val, "split needs an arm without match whose weight is above 0");
}

static void parse_route(cx_t *cx, const yaml_node_t *m, size_t idx) {
    sl_config_t *cfg = cx->cfg;
    sl_route_conf_t *r = &cfg->routes[idx];
    char where[128], sub[192];
    describe(cx, m, "route", "routes", idx, where, sizeof where);
    field_t f[R_N];
    scan_map(cx, m, where, route_keys, f, R_N, NULL);
    r->line = line_of(m);
    r->col = col_of(m);
    r->upstream = -1;
    r->lua_file = -1;

    const yaml_node_t *v = required(cx, m, &f[R_NAME], where);
    if (v && get_name(cx, v, "route", true, &r->name)) {
        for (size_t i = 0; i < idx; i++)
            if (cfg->routes[i].name && strcmp(cfg->routes[i].name, r->name) == 0)
                cx_err(cx, v, "duplicate route name '%s' (first defined at line %d)", r->name,
                       cfg->routes[i].line);
    }
    if ((v = f[R_MATCH].val) && want_type(cx, v, YAML_MAPPING_NODE, "match")) {
        field_t mf[M_N];
        snprintf(sub, sizeof sub, "'match' of %s", where);
        scan_map(cx, v, sub, match_keys, mf, M_N, NULL);
        if (mf[M_HOSTS].val) get_str_list(cx, &mf[M_HOSTS], check_host, &r->hosts, &r->nhosts);
        if (mf[M_PATHS].val) get_str_list(cx, &mf[M_PATHS], check_path, &r->paths, &r->npaths);
        if (mf[M_METHODS].val)
            get_str_list(cx, &mf[M_METHODS], check_method, &r->methods, &r->nmethods);
        if (mf[M_HEADERS].val && want_type(cx, mf[M_HEADERS].val, YAML_MAPPING_NODE, "headers"))
            parse_match_headers(cx, mf[M_HEADERS].val, r);
    }
    bool has_upstream = false;
    if ((v = f[R_UPSTREAM].val)) {
        has_upstream = true;
        const char *s = get_text(cx, v, "upstream", "a string");
        r->upstream = find_upstream(cfg, s);
        if (s && r->upstream < 0) cx_err(cx, v, "%s names unknown upstream '%s'", where, s);
    }
    if (f[R_SPLIT].val) {
        if (has_upstream) cx_err(cx, f[R_SPLIT].key, "%s has both upstream and split: keep one", where);
        has_upstream = true;
        parse_split(cx, &f[R_SPLIT], where, r);
    }
    if ((v = f[R_STRIP].val) && get_bool(cx, v, "strip_prefix", &r->strip_prefix) &&
        r->strip_prefix && r->npaths == 0)
        cx_err(cx, v, "strip_prefix needs match.paths to know what to strip");
    if (f[R_UPGRADE].val) get_str_list(cx, &f[R_UPGRADE], check_upgrade, &r->upgrade, &r->nupgrade);
    parse_plugins(cx, &f[R_PLUGINS], where, &r->plugins, &r->nplugins);
    /* a `plugins:` of the wrong type has its own error already */
    bool bad_plugins = f[R_PLUGINS].val && f[R_PLUGINS].val->type != YAML_SEQUENCE_NODE;
    if (!has_upstream && r->nplugins == 0 && !bad_plugins)
        cx_err(cx, m, "%s needs an upstream or at least one plugin", where);
}

/* The credentials each built-in auth plugin reads: checked here, where the YAML positions
 * are known. Other kinds (a user's own auth plugin) pass through as they are. */
static void check_credential(cx_t *cx, const yaml_node_t *kind, const yaml_node_t *v, const char *where) {
    static const struct {
        const char *kind;
        const char *keys[3];
    } known[] = {{"key-auth", {"key", NULL}}, {"basic-auth", {"username", "password_hash", NULL}}};
    for (size_t i = 0; i < SL_ARRAY_LEN(known); i++) {
        if (!scalar_is(kind, known[i].kind)) continue;
        if (!want_type(cx, v, YAML_MAPPING_NODE, known[i].kind)) return;
        size_t n = 0;
        while (known[i].keys[n]) n++;
        field_t f[3];
        char sub[256];
        snprintf(sub, sizeof sub, "'%s' credentials of %s", known[i].kind, where);
        scan_map(cx, v, sub, known[i].keys, f, n, NULL);
        for (size_t k = 0; k < n; k++) {
            const yaml_node_t *x = required(cx, v, &f[k], sub);
            const char *s = x ? get_text(cx, x, known[i].keys[k], "a string") : NULL;
            const char *why;
            if (s && !*s)
                cx_err(cx, x, "'%s' must not be empty", known[i].keys[k]);
            else if (s && strcmp(known[i].keys[k], "password_hash") == 0 &&
                     sl_ffi_crypto_password_check(s, strlen(s), &why) != SL_OK)
                cx_err(cx, x, "password_hash: %s", why);
        }
        return;
    }
}

enum { CO_NAME, CO_CREDENTIALS, CO_N };
static const char *const consumer_keys[CO_N] = {"name", "credentials"};

static void parse_consumer(cx_t *cx, const yaml_node_t *m, size_t idx) {
    sl_consumer_conf_t *c = &cx->cfg->consumers[idx];
    char where[128];
    describe(cx, m, "consumer", "consumers", idx, where, sizeof where);
    field_t f[CO_N];
    scan_map(cx, m, where, consumer_keys, f, CO_N, NULL);
    c->line = line_of(m);
    c->col = col_of(m);
    const yaml_node_t *v = required(cx, m, &f[CO_NAME], where);
    if (v && get_name(cx, v, "consumer", true, &c->name))
        for (size_t i = 0; i < idx; i++)
            if (cx->cfg->consumers[i].name && strcmp(cx->cfg->consumers[i].name, c->name) == 0)
                cx_err(cx, v, "duplicate consumer name '%s' (first defined at line %d)", c->name,
                       cx->cfg->consumers[i].line);
    if (!(v = f[CO_CREDENTIALS].val)) {
        c->credentials_json = cx_strdup(cx, "{}");
        return;
    }
    if (!want_type(cx, v, YAML_MAPPING_NODE, "credentials")) return;
    for (yaml_node_pair_t *p = v->data.mapping.pairs.start; p < v->data.mapping.pairs.top; p++) {
        yaml_node_t *k = get_node(cx, p->key), *cv = get_node(cx, p->value);
        if (k && cv && k->type == YAML_SCALAR_NODE) check_credential(cx, k, cv, where);
    }
    jbuf_t b = {0}, pos = {0};
    char path[PATH_MAX_LEN] = "";
    if (jb_put(cx, &pos, "{", 1) && json_node(cx, &b, &pos, path, 0, v, 0))
        c->credentials_json = b.p;
    else
        free(b.p);
    free(pos.p);
}

/* Two consumers may not share a key-auth key or a basic-auth username: the plugin could
 * not tell them apart. */
static void check_consumer_credentials(cx_t *cx, const yaml_node_t *list) {
    static const char *const unique[][2] = {{"key-auth", "key"}, {"basic-auth", "username"}};
    size_t n = seq_len(list);
    for (size_t u = 0; u < SL_ARRAY_LEN(unique); u++)
        for (size_t i = 0; i < n; i++)
            for (size_t j = 0; j < i; j++) {
                const yaml_node_t *a = NULL, *b = NULL;
                for (int side = 0; side < 2; side++) {
                    const yaml_node_t *m = seq_at(cx, list, side ? j : i), *found = NULL;
                    for (int depth = 0; m && m->type == YAML_MAPPING_NODE && depth < 3; depth++) {
                        const char *want = depth == 0 ? "credentials" : depth == 1 ? unique[u][0] : unique[u][1];
                        const yaml_node_t *next = NULL;
                        for (yaml_node_pair_t *p = m->data.mapping.pairs.start; p < m->data.mapping.pairs.top; p++) {
                            yaml_node_t *k = get_node(cx, p->key);
                            if (k && k->type == YAML_SCALAR_NODE && scalar_is(k, want)) next = get_node(cx, p->value);
                        }
                        m = next;
                        if (depth == 2) found = next;
                    }
                    if (side) b = found; else a = found;
                }
                if (a && b && a->type == YAML_SCALAR_NODE && b->type == YAML_SCALAR_NODE && scalar_eq(a, b))
                    cx_err(cx, a, "%s %s '%s' is used by another consumer too (line %d)", unique[u][0],
                           unique[u][1], sval(a), line_of(b));
            }
}

static int auto_workers(void) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    if (n < 1) n = 1;
    return n > AUTO_WORKERS_CAP ? AUTO_WORKERS_CAP : (int)n;
}

enum {
    G_WORKERS,
    G_WATCH,
    G_SHUTDOWN,
    G_PLUGIN_PATHS,
    G_ADMIN,
    G_PLUGINS,
    G_LISTENERS,
    G_UPSTREAMS,
    G_ROUTES,
    G_LUA_ROUTES,
    G_CONSUMERS,
    G_CONSUMER_HEADER,
    G_REDIS,
    G_N
};
static const char *const top_keys[G_N] = {
    [G_WORKERS] = "workers",
    [G_WATCH] = "watch",
    [G_SHUTDOWN] = "shutdown_timeout",
    [G_PLUGIN_PATHS] = "plugin_paths",
    [G_ADMIN] = "admin",
    [G_PLUGINS] = "plugins",
    [G_LISTENERS] = "listeners",
    [G_UPSTREAMS] = "upstreams",
    [G_ROUTES] = "routes",
    [G_LUA_ROUTES] = "lua_routes",
    [G_CONSUMERS] = "consumers",
    [G_CONSUMER_HEADER] = "consumer_header",
    [G_REDIS] = "redis",
};
static const char *const top_later[] = {NULL};
enum { RD_ADDRESS, RD_TIMEOUT, RD_N };
static const char *const redis_keys[RD_N] = {"address", "timeout"};
static const char *const admin_keys[] = {"listen"};

static void parse_root(cx_t *cx, const yaml_node_t *root) {
    sl_config_t *cfg = cx->cfg;
    const char *where = "the top level";
    if (root->type != YAML_MAPPING_NODE) {
        cx_err(cx, root, "expected a mapping at the top level of the configuration");
        return;
    }
    field_t f[G_N];
    scan_map(cx, root, where, top_keys, f, G_N, top_later);
    const yaml_node_t *v;

    cfg->workers = auto_workers();
    if ((v = f[G_WORKERS].val) && !(v->type == YAML_SCALAR_NODE && strcmp(sval(v), "auto") == 0)) {
        int64_t n;
        const char *s = v->type == YAML_SCALAR_NODE ? sval(v) : "";
        if (!is_plain(v) || !(s[0] == '-' || (s[0] >= '0' && s[0] <= '9')))
            cx_err(cx, v, "expected an integer for 'workers' (or auto)");
        else if (get_int(cx, v, "workers", 1, MAX_WORKERS, &n))
            cfg->workers = (int)n;
    }
    cfg->watch = true;
    if ((v = f[G_WATCH].val)) get_bool(cx, v, "watch", &cfg->watch);
    cfg->shutdown_timeout_ms = 30 * 1000;
    if (!cfg->consumer_header) cfg->consumer_header = cx_strdup(cx, "X-Consumer");
    if ((v = f[G_SHUTDOWN].val))
        get_duration(cx, v, "shutdown_timeout", true, &cfg->shutdown_timeout_ms);

    if (f[G_PLUGIN_PATHS].val) {
        get_str_list(cx, &f[G_PLUGIN_PATHS], NULL, &cfg->plugin_paths, &cfg->nplugin_paths);
    } else if ((cfg->plugin_paths = cx_calloc(cx, 1, sizeof *cfg->plugin_paths))) {
        cfg->nplugin_paths = 1;
        cfg->plugin_paths[0] = cx_strdup(cx, "plugins");
    }

    cfg->admin_enabled = true;
    const yaml_node_t *admin_at = NULL;
    if ((v = f[G_ADMIN].val) && want_type(cx, v, YAML_MAPPING_NODE, "admin")) {
        field_t a[1];
        scan_map(cx, v, "'admin'", admin_keys, a, 1, NULL);
        if ((admin_at = a[0].val)) {
            if (admin_at->type == YAML_SCALAR_NODE && strcmp(sval(admin_at), "off") == 0)
                cfg->admin_enabled = false;
            else
                get_addr(cx, admin_at, "listen", false, &cfg->admin_listen);
        }
    }
    if (cfg->admin_enabled && !cfg->admin_listen.text) {
        const char *why;
        if (parse_addr("127.0.0.1:9090", &cfg->admin_listen, &why) == 0)
            cfg->admin_listen.text = cx_strdup(cx, "127.0.0.1:9090");
    }

    parse_plugins(cx, &f[G_PLUGINS], "the global chain", &cfg->plugins, &cfg->nplugins);
    if ((v = f[G_CONSUMER_HEADER].val)) {
        const char *h = get_text(cx, v, "consumer_header", "a header name");
        if (h && !is_token(h))
            cx_err(cx, v, "consumer_header '%s' is not a valid header name", h);
        else if (h && (strcasecmp(h, "host") == 0 || strcasecmp(h, "content-length") == 0 ||
                       strcasecmp(h, "transfer-encoding") == 0 || strcasecmp(h, "connection") == 0))
            cx_err(cx, v, "consumer_header '%s' would overwrite a header the proxy owns", h);
        else if (h) {
            free(cfg->consumer_header);
            cfg->consumer_header = cx_strdup(cx, h);
        }
    }
    cfg->redis_timeout_ms = 50;
    if ((v = f[G_REDIS].val) && want_type(cx, v, YAML_MAPPING_NODE, "redis")) {
        field_t rf[RD_N];
        scan_map(cx, v, "'redis'", redis_keys, rf, RD_N, NULL);
        cfg->redis_enabled = true;
        if (rf[RD_ADDRESS].val)
            get_addr(cx, rf[RD_ADDRESS].val, "address", true, &cfg->redis_address);
        else if (parse_addr("127.0.0.1:6379", &cfg->redis_address, &(const char *){NULL}) == 0)
            cfg->redis_address.text = cx_strdup(cx, "127.0.0.1:6379");
        if (rf[RD_TIMEOUT].val) get_duration(cx, rf[RD_TIMEOUT].val, "timeout", false, &cfg->redis_timeout_ms);
    }
    if (f[G_CONSUMERS].val) {
        size_t n;
        if (list_len(cx, &f[G_CONSUMERS], &n) && n && (cfg->consumers = cx_calloc(cx, n, sizeof *cfg->consumers))) {
            cfg->nconsumers = n;
            for (size_t i = 0; i < n; i++) {
                const yaml_node_t *m = list_map(cx, &f[G_CONSUMERS], i);
                if (m) parse_consumer(cx, m, i);
            }
            check_consumer_credentials(cx, f[G_CONSUMERS].val);
        }
    }
    if ((v = f[G_LUA_ROUTES].val)) {
        get_str_list(cx, &f[G_LUA_ROUTES], NULL, &cfg->lua_routes, &cfg->nlua_routes);
        cfg->lua_routes_line = line_of(v);
        cfg->lua_routes_col = col_of(v);
    }

    size_t len;
    if ((v = required(cx, root, &f[G_LISTENERS], where)) && list_len(cx, &f[G_LISTENERS], &len)) {
        if (len == 0) cx_err(cx, v, "at least one listener is required");
        if ((cfg->listeners = cx_calloc(cx, len, sizeof *cfg->listeners))) {
            cfg->nlisteners = len;
            for (size_t i = 0; i < len; i++) {
                const yaml_node_t *m = list_map(cx, &f[G_LISTENERS], i);
                if (m) parse_listener(cx, m, i);
            }
        }
    }
    for (size_t i = 0; cfg->admin_enabled && addr_port(&cfg->admin_listen) && i < cfg->nlisteners;
         i++) {
        const sl_listener_conf_t *l = &cfg->listeners[i];
        if (!addr_same(&l->listen, &cfg->admin_listen)) continue;
        if (admin_at)
            cx_err(cx, admin_at, "address %s is already used by the listener at line %d",
                   cfg->admin_listen.text, l->line);
        else
            cx_at(cx, l->line, l->col,
                  "address %s is the default admin address (move the admin "
                  "listener with admin: { listen: ... })",
                  l->listen.text);
    }
    /* upstreams before routes whatever the file order: routes refer to them by name */
    if (f[G_UPSTREAMS].val && list_len(cx, &f[G_UPSTREAMS], &len) &&
        (cfg->upstreams = cx_calloc(cx, len, sizeof *cfg->upstreams))) {
        cfg->nupstreams = len;
        for (size_t i = 0; i < len; i++) {
            const yaml_node_t *m = list_map(cx, &f[G_UPSTREAMS], i);
            if (m) parse_upstream(cx, m, i);
        }
    }
    for (size_t i = 0; i < cfg->nlisteners; i++) {
        sl_listener_conf_t *l = &cfg->listeners[i];
        for (size_t k = 0; k < l->nsni_routes; k++) {
            sl_sni_route_conf_t *r = &l->sni_routes[k];
            if (r->upstream_name && (r->upstream = find_upstream(cfg, r->upstream_name)) < 0)
                cx_at(cx, r->upstream_line, r->upstream_col, "sni_routes[%zu] of listener '%s' names unknown upstream '%s'",
                      k, l->name ? l->name : "?", r->upstream_name);
        }
        build_sni_names(cx, l);
        if (!l->upstream_name) continue;
        l->upstream = find_upstream(cfg, l->upstream_name);
        if (l->upstream < 0)
            cx_at(cx, l->upstream_line, l->upstream_col, "listener '%s' names unknown upstream '%s'",
                  l->name ? l->name : "?", l->upstream_name);
        else
            l->connect_timeout_ms = cfg->upstreams[l->upstream].connect_timeout_ms;
    }
    if (f[G_ROUTES].val && list_len(cx, &f[G_ROUTES], &len) &&
        (cfg->routes = cx_calloc(cx, len, sizeof *cfg->routes))) {
        cfg->nroutes = len;
        for (size_t i = 0; i < len; i++) {
            const yaml_node_t *m = list_map(cx, &f[G_ROUTES], i);
            if (m) parse_route(cx, m, i);
        }
    }
}

/* ------------------------------------------------------------------------------------------ */
/* Entry points                                                                                */

static void yaml_error(cx_t *cx, const yaml_parser_t *p, const char *text, size_t len) {
    if (p->error == YAML_MEMORY_ERROR) {
        cx->oom = true;
        return;
    }
    if (p->error == YAML_READER_ERROR) {
        /* the reader knows only a byte offset (bad UTF-8, control characters) */
        int line = 1, col = 1;
        for (size_t i = 0; i < p->problem_offset && i < len; i++) {
            col++;
            if (text[i] == '\n') {
                line++;
                col = 1;
            }
        }
        cx_at(cx, line, col, "invalid input: %s", p->problem ? p->problem : "unreadable text");
        return;
    }
    int line = (int)p->problem_mark.line + 1, col = (int)p->problem_mark.column + 1;
    if (p->context)
        cx_at(cx, line, col, "YAML syntax error: %s (%s at line %d, column %d)",
              p->problem ? p->problem : "invalid YAML", p->context, (int)p->context_mark.line + 1,
              (int)p->context_mark.column + 1);
    else
        cx_at(cx, line, col, "YAML syntax error: %s", p->problem ? p->problem : "invalid YAML");
}

static int cmp_err(const void *a, const void *b) {
    const pending_err_t *x = a, *y = b;
    if (x->line != y->line) return x->line < y->line ? -1 : 1;
    if (x->col != y->col) return x->col < y->col ? -1 : 1;
    return x->seq < y->seq ? -1 : x->seq > y->seq;
}

int sl_config_parse(const char *path, const char *text, size_t len, sl_config_t **out,
                    sl_errors_t *errs) {
    yaml_parser_t parser;
    yaml_document_t doc;
    bool have_doc = false;
    cx_t cx = {0};
    int rc = -1;

    *out = NULL;
    if (!yaml_parser_initialize(&parser)) {
        sl_errors_add(errs, path, 1, 1, "out of memory");
        return -1;
    }
    yaml_parser_set_input_string(&parser, (const unsigned char *)text, len);
    if (!(cx.cfg = cx_calloc(&cx, 1, sizeof *cx.cfg)) ||
        !(cx.cfg->path = cx_strdup(&cx, path ? path : "<config>")))
        goto done;
    if (!yaml_parser_load(&parser, &doc)) {
        yaml_error(&cx, &parser, text, len);
        goto done;
    }
    have_doc = true;
    cx.doc = &doc;

    yaml_node_t *root = yaml_document_get_root_node(&doc);
    if (!root)
        cx_at(&cx, 1, 1, "the configuration is empty: 'listeners' is required");
    else
        parse_root(&cx, root);

    yaml_document_t extra;
    if (!yaml_parser_load(&parser, &extra)) {
        yaml_error(&cx, &parser, text, len);
    } else {
        yaml_node_t *r2 = yaml_document_get_root_node(&extra);
        if (r2) cx_err(&cx, r2, "only one YAML document is allowed in a configuration");
        yaml_document_delete(&extra);
    }

done:
    if (cx.nerrs == 0 && !cx.oom) {
        *out = cx.cfg;
        rc = 0;
    } else {
        qsort(cx.errs, cx.nerrs, sizeof *cx.errs, cmp_err);
        for (size_t i = 0; i < cx.nerrs; i++)
            sl_errors_add(errs, path, cx.errs[i].line, cx.errs[i].col, "%s", cx.errs[i].msg);
        if (cx.oom) sl_errors_add(errs, path, 1, 1, "out of memory");
        sl_config_free(cx.cfg);
    }
    for (size_t i = 0; i < cx.nerrs; i++) free(cx.errs[i].msg);
    free(cx.errs);
    if (have_doc) yaml_document_delete(&doc);
    yaml_parser_delete(&parser);
    return rc;
}

int sl_config_load(const char *path, sl_config_t **out, sl_errors_t *errs) {
    *out = NULL;
    FILE *f = fopen(path, "rb");
    char *buf = NULL;
    size_t len = 0, cap = 0;
    int rc = -1;
    if (!f) {
        sl_errors_add(errs, path, 1, 1, "cannot open: %s", strerror(errno));
        return -1;
    }
    for (;;) {
        if (len == cap) {
            if (cap >= MAX_CONFIG_FILE) {
                sl_errors_add(errs, path, 1, 1, "file is larger than %u bytes", MAX_CONFIG_FILE);
                goto fail;
            }
            cap = cap ? cap * 2 : 16384;
            char *p = realloc(buf, cap);
            if (!p) {
                sl_errors_add(errs, path, 1, 1, "out of memory");
                goto fail;
            }
            buf = p;
        }
        size_t n = fread(buf + len, 1, cap - len, f);
        len += n;
        if (n == 0) break;
    }
    if (ferror(f)) {
        sl_errors_add(errs, path, 1, 1, "cannot read: %s", strerror(errno));
        goto fail;
    }
    rc = sl_config_parse(path, buf, len, out, errs);
fail:
    free(buf);
    fclose(f);
    return rc;
}

static void addr_free(sl_addr_t *a) { free(a->text); }

static void strs_free(char **v, size_t n) {
    for (size_t i = 0; v && i < n; i++) free(v[i]);
    free(v);
}

static void plugins_free(sl_plugin_conf_t *p, size_t n) {
    for (size_t i = 0; p && i < n; i++) {
        free(p[i].name);
        free(p[i].config_json);
        free(p[i].positions_json);
    }
    free(p);
}

void sl_config_free(sl_config_t *cfg) {
    if (!cfg) return;
    free(cfg->path);
    free(cfg->consumer_header);
    addr_free(&cfg->redis_address);
    for (size_t i = 0; cfg->consumers && i < cfg->nconsumers; i++) {
        free(cfg->consumers[i].name);
        free(cfg->consumers[i].credentials_json);
    }
    free(cfg->consumers);
    addr_free(&cfg->admin_listen);
    strs_free(cfg->plugin_paths, cfg->nplugin_paths);
    strs_free(cfg->plugin_search, cfg->nplugin_search);
    strs_free(cfg->lua_routes, cfg->nlua_routes);
    strs_free(cfg->lua_route_files, cfg->nlua_route_files);
    plugins_free(cfg->plugins, cfg->nplugins);
    for (size_t i = 0; cfg->listeners && i < cfg->nlisteners; i++) {
        free(cfg->listeners[i].name);
        free(cfg->listeners[i].upstream_name);
        free(cfg->listeners[i].proxy_from);
        tls_listener_free(cfg->listeners[i].tls);
        for (size_t k = 0; k < cfg->listeners[i].nsni_routes; k++) {
            strs_free(cfg->listeners[i].sni_routes[k].names, cfg->listeners[i].sni_routes[k].nnames);
            free(cfg->listeners[i].sni_routes[k].upstream_name);
        }
        free(cfg->listeners[i].sni_routes);
        free(cfg->listeners[i].sni_names);
        plugins_free(cfg->listeners[i].plugins, cfg->listeners[i].nplugins);
        addr_free(&cfg->listeners[i].listen);
    }
    free(cfg->listeners);
    for (size_t i = 0; cfg->upstreams && i < cfg->nupstreams; i++) {
        sl_upstream_conf_t *u = &cfg->upstreams[i];
        free(u->name);
        free(u->hash_name);
        free(u->health.path);
        for (size_t j = 0; u->targets && j < u->ntargets; j++) {
            addr_free(&u->targets[j].addr);
            tls_target_free(u->targets[j].tls);
        }
        free(u->targets);
    }
    free(cfg->upstreams);
    for (size_t i = 0; cfg->routes && i < cfg->nroutes; i++) {
        sl_route_conf_t *r = &cfg->routes[i];
        free(r->name);
        strs_free(r->hosts, r->nhosts);
        strs_free(r->paths, r->npaths);
        strs_free(r->methods, r->nmethods);
        strs_free(r->upgrade, r->nupgrade);
        for (size_t j = 0; r->headers && j < r->nheaders; j++) {
            free(r->headers[j].name);
            free(r->headers[j].value);
        }
        free(r->headers);
        for (size_t j = 0; r->split && j < r->nsplit; j++) {
            free(r->split[j].header);
            free(r->split[j].header_value);
            free(r->split[j].cookie);
            free(r->split[j].cookie_value);
        }
        free(r->split);
        plugins_free(r->plugins, r->nplugins);
    }
    free(cfg->routes);
    free(cfg);
}
