/* json.c — JSON read with libyaml (json.h). */
#include "proto/json.h"

#include <stdlib.h>
#include <string.h>

/* RFC 8259's grammar, for a text that must be JSON before libyaml reads it: libyaml reads
 * YAML, so alone it takes `{"a":1} x`, `{"a":1}{"b":2}`, a second document, single
 * quotes, bare words, tags and anchors (and the first object is used, the rest ignored).
 * Each returns the position after what it read, or NULL. Nesting is bounded so no input
 * recurses deep. */
#define JSON_MAX_DEPTH 64

static const char *j_ws(const char *p, const char *e) {
    while (p < e && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')) p++;
    return p;
}

static bool j_digit(const char *p, const char *e) { return p < e && *p >= '0' && *p <= '9'; }

static bool j_hex(char c) {
    return (c >= '0' && c <= '9') || ((c | 0x20) >= 'a' && (c | 0x20) <= 'f');
}

static const char *j_string(const char *p, const char *e) {
    for (p++; p < e; p++) {
        unsigned char c = (unsigned char)*p;
        if (c == '"') return p + 1;
        if (c < 0x20) return NULL;
        if (c != '\\') continue;
        if (++p >= e) return NULL;
        if (*p == 'u') {
            if (e - p < 5 || !j_hex(p[1]) || !j_hex(p[2]) || !j_hex(p[3]) || !j_hex(p[4]))
                return NULL;
            p += 4;
        } else if (!*p || !strchr("\"\\/bfnrt", *p)) {
            return NULL;
        }
    }
    return NULL;
}

static const char *j_number(const char *p, const char *e) {
    if (p < e && *p == '-') p++;
    if (!j_digit(p, e)) return NULL;
    if (*p == '0')
        p++;
    else
        while (j_digit(p, e)) p++;
    if (p < e && *p == '.') {
        if (!j_digit(++p, e)) return NULL;
        while (j_digit(p, e)) p++;
    }
    if (p < e && (*p == 'e' || *p == 'E')) {
        if (++p < e && (*p == '+' || *p == '-')) p++;
        if (!j_digit(p, e)) return NULL;
        while (j_digit(p, e)) p++;
    }
    return p;
}

static const char *j_value(const char *p, const char *e, int depth) {
    p = j_ws(p, e);
    if (p >= e) return NULL;
    if (*p == '"') return j_string(p, e);
    if (*p == '{' || *p == '[') {
        char close = *p == '{' ? '}' : ']';
        if (depth >= JSON_MAX_DEPTH) return NULL;
        p = j_ws(p + 1, e);
        if (p < e && *p == close) return p + 1;
        for (;;) {
            if (close == '}') {
                if (p >= e || *p != '"' || !(p = j_string(p, e))) return NULL;
                p = j_ws(p, e);
                if (p >= e || *p++ != ':') return NULL;
            }
            if (!(p = j_value(p, e, depth + 1))) return NULL;
            p = j_ws(p, e);
            if (p < e && *p == close) return p + 1;
            if (p >= e || *p != ',') return NULL;
            p = j_ws(p + 1, e);
        }
    }
    static const char *const words[] = {"true", "false", "null"};
    for (size_t i = 0; i < sizeof words / sizeof words[0]; i++) {
        size_t n = strlen(words[i]);
        if ((size_t)(e - p) >= n && memcmp(p, words[i], n) == 0) return p + n;
    }
    return j_number(p, e);
}

bool sl_json_valid(const char *s, size_t n) {
    const char *p = j_value(s, s + n, 0);
    return p && j_ws(p, s + n) == s + n;
}

bool sl_json_parse(sl_jdoc_t *d, const char *s, size_t n) {
    yaml_parser_t p;
    if (!yaml_parser_initialize(&p)) return false;
    yaml_parser_set_input_string(&p, (const unsigned char *)s, n);
    bool ok = yaml_parser_load(&p, &d->doc);
    yaml_parser_delete(&p);
    if (!ok) return false;
    d->root = yaml_document_get_root_node(&d->doc);
    if (!d->root) yaml_document_delete(&d->doc);
    return d->root != NULL;
}

yaml_node_t *sl_json_get(sl_jdoc_t *d, const yaml_node_t *map, const char *key) {
    if (!map || map->type != YAML_MAPPING_NODE) return NULL;
    for (yaml_node_pair_t *pr = map->data.mapping.pairs.start; pr < map->data.mapping.pairs.top; pr++) {
        yaml_node_t *k = yaml_document_get_node(&d->doc, pr->key);
        if (k && k->type == YAML_SCALAR_NODE && strcmp((const char *)k->data.scalar.value, key) == 0)
            return yaml_document_get_node(&d->doc, pr->value);
    }
    return NULL;
}

const char *sl_json_str(const yaml_node_t *n) {
    return n && n->type == YAML_SCALAR_NODE ? (const char *)n->data.scalar.value : NULL;
}

long long sl_json_int(const yaml_node_t *n) {
    const char *s = sl_json_str(n);
    return s ? strtoll(s, NULL, 10) : 0;
}

size_t sl_json_len(const yaml_node_t *n) {
    return n && n->type == YAML_SEQUENCE_NODE ? (size_t)(n->data.sequence.items.top - n->data.sequence.items.start) : 0;
}

yaml_node_t *sl_json_at(sl_jdoc_t *d, const yaml_node_t *n, size_t i) {
    return yaml_document_get_node(&d->doc, n->data.sequence.items.start[i]);
}
