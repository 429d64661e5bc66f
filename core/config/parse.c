/* parse.c — the walk's toolkit, shared by every section: scalar values (durations, sizes,
 * addresses), the walk context and its errors, mappings checked against a key table, and
 * typed values read from nodes. */

#include "config/parse.h"
#include "base/common.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <math.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

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
int sl__cfg_parse_addr(const char *s, sl_addr_t *out, const char **why) {
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
    if (sl__cfg_parse_addr(s, out, &why) != 0) return -1;
    out->text = strdup(s);
    return out->text ? 0 : -1;
}

uint16_t sl__cfg_addr_port(const sl_addr_t *a) {
    if (a->ss.ss_family == AF_INET6) return ntohs(((const struct sockaddr_in6 *)&a->ss)->sin6_port);
    return ntohs(((const struct sockaddr_in *)&a->ss)->sin_port);
}

static bool addr_is_any(const sl_addr_t *a) {
    if (a->ss.ss_family == AF_INET6)
        return IN6_IS_ADDR_UNSPECIFIED(&((const struct sockaddr_in6 *)&a->ss)->sin6_addr);
    return ((const struct sockaddr_in *)&a->ss)->sin_addr.s_addr == htonl(INADDR_ANY);
}

bool sl__cfg_addr_same(const sl_addr_t *a, const sl_addr_t *b) {
    if (a->ss.ss_family != b->ss.ss_family || a->len == 0) return false;
    if (sl__cfg_addr_port(a) != sl__cfg_addr_port(b)) return false;
    if (a->ss.ss_family == AF_INET6)
        return memcmp(&((const struct sockaddr_in6 *)&a->ss)->sin6_addr,
                      &((const struct sockaddr_in6 *)&b->ss)->sin6_addr,
                      sizeof(struct in6_addr)) == 0;
    return ((const struct sockaddr_in *)&a->ss)->sin_addr.s_addr ==
           ((const struct sockaddr_in *)&b->ss)->sin_addr.s_addr;
}

/* ------------------------------------------------------------------------------------------ */
/* The walk: context, errors at nodes, allocation                                              */

static void cx_vadd(sl__cx_t *cx, int line, int col, const char *fmt, va_list ap) {
    char buf[1024];
    vsnprintf(buf, sizeof buf, fmt, ap);
    /* values from the file appear in messages; keep escapes out of the terminal */
    for (char *p = buf; *p; p++)
        if ((unsigned char)*p < 0x20 || *p == 0x7f) *p = '?';
    if (cx->nerrs == cx->cap) {
        size_t cap = cx->cap ? cx->cap * 2 : 8;
        sl__cx_err_t *e = realloc(cx->errs, cap * sizeof *e);
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
    cx->errs[cx->nerrs] = (sl__cx_err_t){line, col, cx->nerrs, msg};
    cx->nerrs++;
}

void sl__cx_at(sl__cx_t *cx, int line, int col, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    cx_vadd(cx, line, col, fmt, ap);
    va_end(ap);
}

int sl__cfg_line_of(const yaml_node_t *n) { return n ? (int)n->start_mark.line + 1 : 1; }
int sl__cfg_col_of(const yaml_node_t *n) { return n ? (int)n->start_mark.column + 1 : 1; }

/** Records an error at node n (1:1 when n is NULL). */
void sl__cx_err(sl__cx_t *cx, const yaml_node_t *n, const char *fmt, ...) {
    for (size_t i = 0; n && i < cx->nenv_bad; i++)
        if (cx->env_bad[i] == n) return;
    va_list ap;
    va_start(ap, fmt);
    cx_vadd(cx, sl__cfg_line_of(n), sl__cfg_col_of(n), fmt, ap);
    va_end(ap);
}

void *sl__cx_calloc(sl__cx_t *cx, size_t n, size_t size) {
    void *p = calloc(n ? n : 1, size);
    if (!p) cx->oom = true;
    return p;
}

char *sl__cx_strdup(sl__cx_t *cx, const char *s) {
    char *p = strdup(s);
    if (!p) cx->oom = true;
    return p;
}

yaml_node_t *sl__cfg_get_node(sl__cx_t *cx, int index) {
    return yaml_document_get_node(cx->doc, index);
}

const char *sl__cfg_sval(const yaml_node_t *n) { return (const char *)n->data.scalar.value; }

bool sl__cfg_scalar_eq(const yaml_node_t *a, const yaml_node_t *b) {
    return a->data.scalar.length == b->data.scalar.length &&
           memcmp(a->data.scalar.value, b->data.scalar.value, a->data.scalar.length) == 0;
}

/* Whether scalar n is exactly s (a key "name\0x" is not "name"). */
bool sl__cfg_scalar_is(const yaml_node_t *n, const char *s) {
    return n->data.scalar.length == strlen(s) && memcmp(n->data.scalar.value, s, strlen(s)) == 0;
}

bool sl__cfg_is_plain(const yaml_node_t *n) {
    return n->type == YAML_SCALAR_NODE && n->data.scalar.style == YAML_PLAIN_SCALAR_STYLE;
}

/* `key:`, `key: ~` and `key: null` mean "not set"; a quoted "" is an empty string. */
bool sl__cfg_is_null(const yaml_node_t *n) {
    if (!sl__cfg_is_plain(n)) return false;
    const char *s = sl__cfg_sval(n);
    return s[0] == '\0' || strcmp(s, "~") == 0 || strcmp(s, "null") == 0 ||
           strcmp(s, "Null") == 0 || strcmp(s, "NULL") == 0;
}

size_t sl__cfg_seq_len(const yaml_node_t *n) {
    return (size_t)(n->data.sequence.items.top - n->data.sequence.items.start);
}

yaml_node_t *sl__cfg_seq_at(sl__cx_t *cx, const yaml_node_t *n, size_t i) {
    return sl__cfg_get_node(cx, n->data.sequence.items.start[i]);
}

/* ------------------------------------------------------------------------------------------ */
/* Mappings checked against a key table                                                        */

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
bool sl__cfg_dup_key(sl__cx_t *cx, const yaml_node_t *map, const yaml_node_pair_t *pair,
                    const yaml_node_t *key) {
    for (const yaml_node_pair_t *q = map->data.mapping.pairs.start; q < pair; q++) {
        const yaml_node_t *k = sl__cfg_get_node(cx, q->key);
        if (k && k->type == YAML_SCALAR_NODE && sl__cfg_scalar_eq(k, key)) {
            sl__cx_err(cx, key, "duplicate key '%s' (first at line %d)", sl__cfg_sval(key),
                       sl__cfg_line_of(k));
            return true;
        }
    }
    return false;
}

/**
 * Sorts the pairs of `map` into f[0..n) by the key names in `names`; every other key is an
 * error, worded differently for the keys in `later` (named by the design, not built yet).
 */
void sl__cfg_scan_map(sl__cx_t *cx, const yaml_node_t *map, const char *where,
                      const char *const *names, sl__field_t *f, size_t n,
                      const char *const *later) {
    for (size_t i = 0; i < n; i++) f[i] = (sl__field_t){names[i], NULL, NULL};
    for (yaml_node_pair_t *p = map->data.mapping.pairs.start; p < map->data.mapping.pairs.top;
         p++) {
        yaml_node_t *k = sl__cfg_get_node(cx, p->key), *v = sl__cfg_get_node(cx, p->value);
        if (!k || !v) continue;
        if (k->type != YAML_SCALAR_NODE) {
            sl__cx_err(cx, k, "expected a string key in %s", where);
            continue;
        }
        if (sl__cfg_dup_key(cx, map, p, k)) continue;
        size_t i = 0;
        while (i < n && !sl__cfg_scalar_is(k, names[i])) i++;
        if (i < n) {
            f[i].key = k;
            f[i].val = sl__cfg_is_null(v) ? NULL : v;
            continue;
        }
        bool is_later = false;
        for (size_t j = 0; later && later[j]; j++) is_later |= sl__cfg_scalar_is(k, later[j]);
        if (is_later) {
            sl__cx_err(cx, k, "'%s' is not supported by this build yet", sl__cfg_sval(k));
            continue;
        }
        const char *hint = suggest(sl__cfg_sval(k), names, n);
        if (hint)
            sl__cx_err(cx, k, "unknown key '%s' in %s (did you mean '%s'?)", sl__cfg_sval(k), where,
                       hint);
        else
            sl__cx_err(cx, k, "unknown key '%s' in %s", sl__cfg_sval(k), where);
    }
}

/* scan_map for the mapping under `key` of an item, named "'key' of WHERE" in errors. */
void sl__cfg_scan_sub(sl__cx_t *cx, const yaml_node_t *map, const char *key, const char *where,
                      const char *const *names, sl__field_t *f, size_t n) {
    char sub[256];
    snprintf(sub, sizeof sub, "'%s' of %s", key, where);
    sl__cfg_scan_map(cx, map, sub, names, f, n, NULL);
}

/* The value of a required field, or NULL after an error at the mapping or the key. */
yaml_node_t *sl__cfg_required(sl__cx_t *cx, const yaml_node_t *map, const sl__field_t *f,
                             const char *where) {
    if (!f->key)
        sl__cx_err(cx, map, "missing required key '%s' in %s", f->name, where);
    else if (!f->val)
        sl__cx_err(cx, f->key, "'%s' needs a value", f->name);
    return f->val;
}

/* "listener 'web'" when the item has a usable name, else "listeners[2]". */
void sl__cfg_describe(sl__cx_t *cx, const yaml_node_t *map, const char *kind, const char *list,
                     size_t idx, char *buf, size_t size) {
    for (yaml_node_pair_t *p = map->data.mapping.pairs.start; p < map->data.mapping.pairs.top;
         p++) {
        yaml_node_t *k = sl__cfg_get_node(cx, p->key), *v = sl__cfg_get_node(cx, p->value);
        if (k && v && k->type == YAML_SCALAR_NODE && sl__cfg_scalar_is(k, "name") &&
            v->type == YAML_SCALAR_NODE && !sl__cfg_is_null(v)) {
            snprintf(buf, size, "%s '%.*s'", kind, MAX_NAME_LEN, sl__cfg_sval(v));
            return;
        }
    }
    snprintf(buf, size, "%s[%zu]", list, idx);
}

/* ------------------------------------------------------------------------------------------ */
/* Typed values                                                                                */

bool sl__cfg_want_type(sl__cx_t *cx, const yaml_node_t *v, yaml_node_type_t type, const char *key) {
    if (v->type == type) return true;
    sl__cx_err(cx, v, "expected %s for '%s'",
           type == YAML_MAPPING_NODE    ? "a mapping"
           : type == YAML_SEQUENCE_NODE ? "a list"
                                        : "a string",
           key);
    return false;
}

/* A scalar as a NUL-terminated string; a NUL inside it (from a "\0" escape) is an error. */
const char *sl__cfg_get_text(sl__cx_t *cx, const yaml_node_t *v, const char *key,
                             const char *what) {
    if (v->type != YAML_SCALAR_NODE) {
        sl__cx_err(cx, v, "expected %s for '%s'", what, key);
        return NULL;
    }
    if (strlen(sl__cfg_sval(v)) != v->data.scalar.length) {
        sl__cx_err(cx, v, "'%s' contains a NUL byte", key);
        return NULL;
    }
    return sl__cfg_sval(v);
}

bool sl__cfg_get_string(sl__cx_t *cx, const yaml_node_t *v, const char *key, char **out) {
    const char *s = sl__cfg_get_text(cx, v, key, "a string");
    if (!s) return false;
    *out = sl__cx_strdup(cx, s);
    return *out != NULL;
}

/* Only true and false: YAML 1.1's yes/no/on/off are exactly the surprises to avoid. */
bool sl__cfg_get_bool(sl__cx_t *cx, const yaml_node_t *v, const char *key, bool *out) {
    bool t = sl__cfg_is_plain(v) && strcmp(sl__cfg_sval(v), "true") == 0;
    if (!t && !(sl__cfg_is_plain(v) && strcmp(sl__cfg_sval(v), "false") == 0)) {
        sl__cx_err(cx, v, "expected a boolean for '%s' (true or false)", key);
        return false;
    }
    *out = t;
    return true;
}

/* A plain decimal integer in [min, max]; quoted "5" is a string, not an integer. */
bool sl__cfg_get_int(sl__cx_t *cx, const yaml_node_t *v, const char *key, int64_t min, int64_t max,
                    int64_t *out) {
    const char *s = sl__cfg_is_plain(v) ? sl__cfg_sval(v) : "", *end;
    bool neg = s[0] == '-';
    uint64_t u = 0;
    int rc = parse_digits(s + neg, &u, &end);
    if (rc == PARSE_BAD || *end != '\0') {
        sl__cx_err(cx, v, "expected an integer for '%s'", key);
        return false;
    }
    if (rc == PARSE_OVERFLOW || u > (uint64_t)INT64_MAX) u = (uint64_t)INT64_MAX; /* out of range */
    int64_t n = neg ? -(int64_t)u : (int64_t)u;
    if (n < min || n > max) {
        sl__cx_err(cx, v, "'%s' must be between %lld and %lld", key, (long long)min,
                   (long long)max);
        return false;
    }
    *out = n;
    return true;
}

bool sl__cfg_get_duration(sl__cx_t *cx, const yaml_node_t *v, const char *key, bool allow_zero,
                         uint64_t *out) {
    const char *s = sl__cfg_get_text(cx, v, key, "a duration");
    if (!s) return false;
    uint64_t ms = 0;
    switch (parse_duration(s, &ms)) {
    case PARSE_OK:
        break;
    case PARSE_NO_UNIT:
        sl__cx_err(cx, v, "duration '%s' for '%s' needs a unit: ms, s, m or h", s, key);
        return false;
    case PARSE_OVERFLOW:
        sl__cx_err(cx, v, "duration '%s' for '%s' is too large", s, key);
        return false;
    default:
        sl__cx_err(cx, v, "invalid duration '%s' for '%s' (expected e.g. 250ms, 10s, 5m, 1h)", s,
                   key);
        return false;
    }
    if (ms == 0 && !allow_zero) {
        sl__cx_err(cx, v, "'%s' must be greater than 0", key);
        return false;
    }
    *out = ms;
    return true;
}

bool sl__cfg_get_size(sl__cx_t *cx, const yaml_node_t *v, const char *key, uint64_t min,
                      uint64_t max, uint64_t *out) {
    const char *s = sl__cfg_get_text(cx, v, key, "a size");
    if (!s) return false;
    uint64_t n = 0;
    switch (parse_size(s, &n)) {
    case PARSE_OK:
        break;
    case PARSE_DECIMAL_UNIT:
        sl__cx_err(cx, v, "size '%s' for '%s': use KiB, MiB or GiB (powers of 1024)", s, key);
        return false;
    case PARSE_OVERFLOW:
        sl__cx_err(cx, v, "size '%s' for '%s' is too large", s, key);
        return false;
    default:
        sl__cx_err(cx, v, "invalid size '%s' for '%s' (expected bytes or e.g. 64KiB, 10MiB, 1GiB)",
                   s, key);
        return false;
    }
    if (n > max) {
        sl__cx_err(cx, v, "size '%s' for '%s' is too large (at most %llu bytes)", s, key,
               (unsigned long long)max);
        return false;
    }
    if (n < min) {
        sl__cx_err(cx, v, "'%s' must be at least %llu", key, (unsigned long long)min);
        return false;
    }
    *out = n;
    return true;
}

/* A plain decimal number in [min, max] ("0.5", "1", "2.25"). */
bool sl__cfg_get_number(sl__cx_t *cx, const yaml_node_t *v, const char *key, double min, double max,
                       double *out) {
    const char *s = sl__cfg_is_plain(v) ? sl__cfg_sval(v) : "";
    char *end = NULL;
    double d = *s && (isdigit((unsigned char)*s) || *s == '.') ? strtod(s, &end) : NAN;
    if (!end || *end != '\0' || !isfinite(d)) {
        sl__cx_err(cx, v, "expected a number for '%s'", key);
        return false;
    }
    if (d < min || d > max) {
        sl__cx_err(cx, v, "'%s' must be between %g and %g", key, min, max);
        return false;
    }
    *out = d;
    return true;
}

bool sl__cfg_get_addr(sl__cx_t *cx, const yaml_node_t *v, const char *key, bool target,
                      sl_addr_t *out) {
    const char *s = sl__cfg_get_text(cx, v, key, "an address");
    if (!s) return false;
    const char *why;
    sl_addr_t a = {0};
    if (sl__cfg_parse_addr(s, &a, &why) != 0) {
        sl__cx_err(cx, v, "invalid address '%s' for '%s': %s", s, key, why);
        return false;
    }
    if (target && addr_is_any(&a)) {
        sl__cx_err(cx, v, "target address '%s' must name a host, not every address", s);
        return false;
    }
    if (target && sl__cfg_addr_port(&a) == 0) {
        sl__cx_err(cx, v, "target address '%s' needs a port other than 0", s);
        return false;
    }
    a.text = sl__cx_strdup(cx, s);
    if (!a.text) return false;
    free(out->text);
    *out = a;
    return true;
}

bool sl__cfg_name_char(char c, bool dot) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
           c == '_' || (dot && c == '.');
}

/* Names become metric labels, log fields and (for plugins) file names: keep them plain. */
bool sl__cfg_get_name(sl__cx_t *cx, const yaml_node_t *v, const char *kind, bool dot, char **out) {
    const char *s = sl__cfg_get_text(cx, v, "name", "a string");
    if (!s) return false;
    size_t n = strlen(s), i = 0;
    while (i < n && sl__cfg_name_char(s[i], dot)) i++;
    if (n == 0 || n > MAX_NAME_LEN || i < n) {
        sl__cx_err(cx, v, "invalid %s name '%s': use 1 to %d letters, digits, %s'-' or '_'", kind,
                   s, MAX_NAME_LEN, dot ? "'.', " : "");
        return false;
    }
    *out = sl__cx_strdup(cx, s);
    return *out != NULL;
}

/* RFC 9110 token characters, for methods and header names. */
bool sl__cfg_is_token(const char *s) {
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
bool sl__cfg_list_len(sl__cx_t *cx, const sl__field_t *f, size_t *len) {
    if (!sl__cfg_want_type(cx, f->val, YAML_SEQUENCE_NODE, f->name)) return false;
    *len = sl__cfg_seq_len(f->val);
    return true;
}

/* Item i of the list in f->val when it is a mapping, else NULL after a type error. */
const yaml_node_t *sl__cfg_list_map(sl__cx_t *cx, const sl__field_t *f, size_t i) {
    const yaml_node_t *m = sl__cfg_seq_at(cx, f->val, i);
    char key[48];
    snprintf(key, sizeof key, "%s[%zu]", f->name, i);
    return m && sl__cfg_want_type(cx, m, YAML_MAPPING_NODE, key) ? m : NULL;
}

/* A list of strings, each checked (and possibly rewritten in place) by `check`. */

void sl__cfg_get_str_list(sl__cx_t *cx, const sl__field_t *f, sl__str_check_fn check, char ***out,
                          size_t *n) {
    size_t len;
    char **v;
    if (!sl__cfg_list_len(cx, f, &len) || !(v = sl__cx_calloc(cx, len, sizeof *v))) return;
    *out = v;
    *n = len;
    for (size_t i = 0; i < len; i++) {
        yaml_node_t *item = sl__cfg_seq_at(cx, f->val, i);
        char key[64];
        snprintf(key, sizeof key, "%s[%zu]", f->name, i);
        if (!item || !sl__cfg_get_string(cx, item, key, &v[i])) continue;
        if (check && !check(cx, item, v[i])) {
            free(v[i]);
            v[i] = NULL;
        }
    }
}

/* A file named in the config: relative paths are relative to the config file's folder
 * (the embedded default's: the working directory); a relative path that names no file
 * there but does from the working directory is taken from the working directory (so
 * `cert: conf/test.crt` in conf/sluice.yaml works when sluice runs from the project). */
char *sl__cfg_resolve_path(sl__cx_t *cx, const char *rel) {
    const char *cp = cx->cfg->path;
    if (rel[0] == '/' || !cp || cp[0] == '<' || !strchr(cp, '/')) return sl__cx_strdup(cx, rel);
    size_t dl = (size_t)(strrchr(cp, '/') - cp);
    size_t n = dl + 1 + strlen(rel) + 1;
    char *p = sl__cx_calloc(cx, n, 1);
    if (p) snprintf(p, n, "%.*s/%s", (int)dl, cp, rel);
    if (p && access(p, F_OK) != 0 && access(rel, F_OK) == 0) {
        free(p);
        return sl__cx_strdup(cx, rel);
    }
    return p;
}
