/* env.c — `${VAR}` and `${VAR:-default}` in config values, replaced from the environment.
 *
 * The substitution runs on the parsed YAML document, value by value, never on the text:
 * a variable's value can never add keys, items or documents (a value holding ": " or a
 * newline stays one string), and every node keeps its position, so errors after the
 * substitution still name the line and column the user wrote. A plain scalar stays
 * plain: `port: ${PORT}` with PORT=8080 is the integer 8080, as if written so.
 * Single-quoted scalars are literal (as in a shell); `$${` writes a literal `${`.
 */

#include "config/parse.h"

#include <stdlib.h>
#include <string.h>

static bool name_start(char c) { return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '_'; }
static bool name_char(char c) { return name_start(c) || (c >= '0' && c <= '9'); }

/* The column of byte `off` of scalar n, when the scalar's bytes are the source's (a plain
 * scalar on one line); else the scalar's own column. */
static int col_at(const yaml_node_t *n, size_t off) {
    bool same = n->data.scalar.style == YAML_PLAIN_SCALAR_STYLE && n->start_mark.line == n->end_mark.line;
    return sl__cfg_col_of(n) + (same ? (int)off : 0);
}

/* Expands one scalar. Returns the new value (malloc'd, NUL-terminated, *out_len bytes),
 * NULL when it holds no `${` (unchanged), or NULL with an error recorded. */
static char *expand(sl__cx_t *cx, const yaml_node_t *n, size_t *out_len, bool *failed) {
    const char *s = (const char *)n->data.scalar.value;
    size_t len = n->data.scalar.length;
    if (!memchr(s, '$', len) || !strstr(s, "${")) return NULL;
    size_t cap = len + 64, o = 0;
    char *out = malloc(cap);
    if (!out) {
        cx->oom = *failed = true;
        return NULL;
    }
    for (size_t i = 0; i < len;) {
        const char *add = s + i;
        size_t alen = 1, next = i + 1;
        if (s[i] == '$' && i + 2 < len && s[i + 1] == '$' && s[i + 2] == '{') {
            add = "${", alen = 2, next = i + 3; /* $${ is a literal ${ */
        } else if (s[i] == '$' && i + 1 < len && s[i + 1] == '{') {
            size_t p = i + 2, name = p;
            while (p < len && name_char(s[p])) p++;
            size_t nlen = p - name;
            const char *def = NULL;
            size_t dlen = 0;
            if (p + 1 < len && s[p] == ':' && s[p + 1] == '-') {
                def = s + p + 2;
                const char *close = memchr(def, '}', len - (p + 2));
                if (close) {
                    dlen = (size_t)(close - def);
                    p = (size_t)(close - s);
                } else {
                    p = len;
                }
            }
            if (nlen == 0 || !name_start(s[name]) || p >= len || s[p] != '}') {
                sl__cx_at(cx, sl__cfg_line_of(n), col_at(n, i),
                          "malformed '${' in '%s': write ${NAME} or ${NAME:-default} (NAME is letters, "
                          "digits and '_'), or $${ for a literal '${'", s);
                *failed = true;
                free(out);
                return NULL;
            }
            char var[256];
            if (nlen >= sizeof var) nlen = sizeof var - 1;
            memcpy(var, s + name, nlen);
            var[nlen] = '\0';
            const char *val = getenv(var);
            if (val && *val) {
                add = val, alen = strlen(val);
            } else if (def) {
                add = def, alen = dlen; /* unset or empty, as a shell's :- */
            } else {
                sl__cx_at(cx, sl__cfg_line_of(n), col_at(n, i),
                          "environment variable '%s' is %s (write ${%s:-default} to give a default)", var,
                          val ? "empty" : "not set", var);
                *failed = true;
                free(out);
                return NULL;
            }
            next = p + 1;
        }
        if (o + alen + 1 > cap) {
            while (o + alen + 1 > cap) cap *= 2;
            char *q = realloc(out, cap);
            if (!q) {
                free(out);
                cx->oom = *failed = true;
                return NULL;
            }
            out = q;
        }
        memcpy(out + o, add, alen);
        o += alen;
        i = next;
    }
    out[o] = '\0';
    *out_len = o;
    return out;
}

void sl__cfg_expand_env(sl__cx_t *cx, yaml_document_t *doc) {
    for (yaml_node_t *n = doc->nodes.start; n < doc->nodes.top; n++) {
        if (n->type != YAML_SCALAR_NODE || n->data.scalar.style == YAML_SINGLE_QUOTED_SCALAR_STYLE) continue;
        size_t len = 0;
        bool failed = false;
        char *v = expand(cx, n, &len, &failed);
        if (failed && cx->nenv_bad < sizeof cx->env_bad / sizeof cx->env_bad[0])
            cx->env_bad[cx->nenv_bad++] = n;
        if (!v) continue;
        /* libyaml frees scalar values with free(): the node now owns v. */
        free(n->data.scalar.value);
        n->data.scalar.value = (yaml_char_t *)v;
        n->data.scalar.length = len;
    }
}
