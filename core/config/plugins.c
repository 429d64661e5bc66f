/* plugins.c — `plugins:` entries (global, per route, per tcp listener): each one's
 * `config:` mapping becomes JSON text with the position of every key and value. */

#include "config/parse.h"
#include "base/common.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------------------------------ */
/* Plugin configs as JSON text                                                                 */

/* Config JSON is handed on NUL-terminated: a growing sl_wbuf_t whose max is MAX_PLUGIN_JSON
 * (`full` past it); a failed growth is the parse's out-of-memory error. */
bool sl__cfg_jb_put(sl__cx_t *cx, sl_wbuf_t *b, const void *s, size_t n) {
    if (sl_wbuf_put(b, s, n) && sl_wbuf_cstr(b)) return true;
    if (b->oom) cx->oom = true;
    return false;
}

static bool jb_str(sl__cx_t *cx, sl_wbuf_t *b, const unsigned char *s, size_t n) {
    bool ok = sl_wbuf_json_quoted(b, (sl_str_t){(const char *)s, n});
    return sl__cfg_jb_put(cx, b, "", 0) && ok;
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
static bool pos_put(sl__cx_t *cx, sl_wbuf_t *pos, const char *path, const yaml_node_t *k,
                    const yaml_node_t *v) {
    char tmp[64];
    if (pos->len > 1 && !sl__cfg_jb_put(cx, pos, ",", 1)) return false;
    if (!jb_str(cx, pos, (const unsigned char *)path, strlen(path))) return false;
    int n = snprintf(tmp, sizeof tmp, ":[%d,%d,%d,%d]", sl__cfg_line_of(k), sl__cfg_col_of(k),
                     sl__cfg_line_of(v), sl__cfg_col_of(v));
    return sl__cfg_jb_put(cx, pos, tmp, (size_t)n);
}

bool sl__cfg_json_node(sl__cx_t *cx, sl_wbuf_t *b, sl_wbuf_t *pos, char *path, size_t plen,
                      const yaml_node_t *n, int depth) {
    if (depth > MAX_JSON_DEPTH) {
        sl__cx_err(cx, n, "plugin config is nested more than %d levels deep", MAX_JSON_DEPTH);
        return false;
    }
    switch (n->type) {
    case YAML_SCALAR_NODE: {
        const char *s = sl__cfg_sval(n);
        if (sl__cfg_is_null(n)) return sl__cfg_jb_put(cx, b, "null", 4);
        if (sl__cfg_is_plain(n) &&
            (strcmp(s, "true") == 0 || strcmp(s, "false") == 0 || is_json_number(s)))
            return sl__cfg_jb_put(cx, b, s, n->data.scalar.length);
        return jb_str(cx, b, n->data.scalar.value, n->data.scalar.length);
    }
    case YAML_SEQUENCE_NODE: {
        if (!sl__cfg_jb_put(cx, b, "[", 1)) return false;
        for (size_t i = 0; i < sl__cfg_seq_len(n); i++) {
            const yaml_node_t *item = sl__cfg_seq_at(cx, n, i);
            if ((i && !sl__cfg_jb_put(cx, b, ",", 1)) || !item) return false;
            int w = snprintf(path + plen, PATH_MAX_LEN - plen, "%s%zu", plen ? "." : "", i + 1);
            size_t np = SL_MIN(plen + (size_t)w, PATH_MAX_LEN - 1);
            if (!pos_put(cx, pos, path, item, item) ||
                !sl__cfg_json_node(cx, b, pos, path, np, item, depth + 1))
                return false;
            path[plen] = '\0';
        }
        return sl__cfg_jb_put(cx, b, "]", 1);
    }
    case YAML_MAPPING_NODE: {
        if (!sl__cfg_jb_put(cx, b, "{", 1)) return false;
        bool first = true;
        for (yaml_node_pair_t *p = n->data.mapping.pairs.start; p < n->data.mapping.pairs.top;
             p++) {
            yaml_node_t *k = sl__cfg_get_node(cx, p->key), *v = sl__cfg_get_node(cx, p->value);
            if (!k || !v) return false;
            if (k->type != YAML_SCALAR_NODE) {
                sl__cx_err(cx, k, "expected a string key in plugin config");
                return false;
            }
            if (sl__cfg_dup_key(cx, n, p, k)) return false;
            int w = snprintf(path + plen, PATH_MAX_LEN - plen, "%s%s", plen ? "." : "",
                             sl__cfg_sval(k));
            size_t np = SL_MIN(plen + (size_t)w, PATH_MAX_LEN - 1);
            if ((!first && !sl__cfg_jb_put(cx, b, ",", 1)) ||
                !jb_str(cx, b, k->data.scalar.value, k->data.scalar.length) ||
                !sl__cfg_jb_put(cx, b, ":", 1) || !pos_put(cx, pos, path, k, v) ||
                !sl__cfg_json_node(cx, b, pos, path, np, v, depth + 1))
                return false;
            path[plen] = '\0';
            first = false;
        }
        return sl__cfg_jb_put(cx, b, "}", 1);
    }
    default:
        return false;
    }
}

/* ------------------------------------------------------------------------------------------ */
/* Sections                                                                                    */

enum { P_NAME, P_CONFIG, P_N };
static const char *const plugin_keys[P_N] = {"name", "config"};

static void parse_plugin(sl__cx_t *cx, const yaml_node_t *m, const char *owner, size_t idx,
                         sl_plugin_conf_t *pc) {
    char what[128], where[288];
    sl__cfg_describe(cx, m, "plugin", "plugins", idx, what, sizeof what);
    snprintf(where, sizeof where, "%s of %s", what, owner);
    sl__field_t f[P_N];
    sl__cfg_scan_map(cx, m, where, plugin_keys, f, P_N, NULL);
    pc->line = sl__cfg_line_of(m);
    pc->col = sl__cfg_col_of(m);

    const yaml_node_t *v = sl__cfg_required(cx, m, &f[P_NAME], where);
    if (v) sl__cfg_get_name(cx, v, "plugin", false, &pc->name);
    pc->name_line = sl__cfg_line_of(v);
    pc->name_col = sl__cfg_col_of(v);

    if (!f[P_CONFIG].val) {
        pc->config_json = sl__cx_strdup(cx, "{}");
        pc->positions_json = sl__cx_strdup(cx, "{}");
        pc->config_line = pc->line;
        pc->config_col = pc->col;
        return;
    }
    /* named as the plugin config errors found in Lua are: "route 'r', plugin 'p': ..." */
    if (f[P_CONFIG].val->type != YAML_MAPPING_NODE) {
        sl__cx_err(cx, f[P_CONFIG].val, "%s, %s: config: expected a mapping", owner, what);
        return;
    }
    pc->config_line = sl__cfg_line_of(f[P_CONFIG].val);
    pc->config_col = sl__cfg_col_of(f[P_CONFIG].val);
    sl_wbuf_t b = SL_WBUF_GROWING(MAX_PLUGIN_JSON), pos = SL_WBUF_GROWING(MAX_PLUGIN_JSON);
    char path[PATH_MAX_LEN] = "";
    if (sl__cfg_jb_put(cx, &pos, "{", 1) &&
        sl__cfg_json_node(cx, &b, &pos, path, 0, f[P_CONFIG].val, 0) &&
        sl__cfg_jb_put(cx, &pos, "}", 1)) {
        pc->config_json = b.p;
        pc->positions_json = pos.p;
        return;
    }
    free(pos.p);
    if ((b.full || pos.full) && !cx->oom)
        sl__cx_err(cx, f[P_CONFIG].val, "%s, %s: config is larger than %u bytes as JSON", owner,
                   what, MAX_PLUGIN_JSON);
    free(b.p);
}

void sl__cfg_parse_plugins(sl__cx_t *cx, const sl__field_t *f, const char *owner,
                           sl_plugin_conf_t **out, size_t *n) {
    size_t len;
    if (!f->val || !sl__cfg_list_len(cx, f, &len) || !(*out = sl__cx_calloc(cx, len, sizeof **out)))
        return;
    *n = len;
    for (size_t i = 0; i < len; i++) {
        const yaml_node_t *m = sl__cfg_list_map(cx, f, i);
        if (m) parse_plugin(cx, m, owner, i, &(*out)[i]);
    }
}
