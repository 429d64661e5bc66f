/* consumers.c — `consumers:`: the auth plugins' credentials, checked for the built-in
 * kinds and unique across consumers, kept as JSON text; and each consumer's groups. */

#include "config/parse.h"
#include "base/common.h"
#include "sluice.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A built-in credential is text, however YAML would read it unquoted: `key: 1.50` is the
 * key "1.50", not the number 1.5 (which would also match another consumer's `1.5` or the
 * client's "1.5"), and `key: 12345678901234567890` keeps its digits. Marked quoted here,
 * the scalar goes into the credentials JSON as the string written. */
static void keep_as_text(const yaml_node_t *v) {
    if (v->type == YAML_SCALAR_NODE && v->data.scalar.style == YAML_PLAIN_SCALAR_STYLE)
        ((yaml_node_t *)v)->data.scalar.style = YAML_SINGLE_QUOTED_SCALAR_STYLE;
}

/* mtls-auth's: `subject`, `san` or both (each a certificate's field that names the
 * consumer), at least one. */
static void check_mtls_credential(sl__cx_t *cx, const yaml_node_t *v, const char *where) {
    static const char *const keys[2] = {"subject", "san"};
    if (!sl__cfg_want_type(cx, v, YAML_MAPPING_NODE, "mtls-auth")) return;
    char sub[256];
    snprintf(sub, sizeof sub, "'mtls-auth' credentials of %s", where);
    sl__field_t f[2];
    sl__cfg_scan_map(cx, v, sub, keys, f, 2, NULL);
    if (!f[0].val && !f[1].val) sl__cx_err(cx, v, "%s need 'subject' or 'san'", sub);
    for (int k = 0; k < 2; k++) {
        const char *s = f[k].val ? sl__cfg_get_text(cx, f[k].val, keys[k], "a string") : NULL;
        if (s && !*s) sl__cx_err(cx, f[k].val, "'%s' must not be empty", keys[k]);
        if (s) keep_as_text(f[k].val);
    }
}

/* The credentials each built-in auth plugin reads: checked here, where the YAML positions
 * are known. Other kinds (a user's own auth plugin) pass through as they are. */
static void check_credential(sl__cx_t *cx, const yaml_node_t *kind, const yaml_node_t *v,
                             const char *where) {
    if (sl__cfg_scalar_is(kind, "mtls-auth")) {
        check_mtls_credential(cx, v, where);
        return;
    }
    static const struct {
        const char *kind;
        const char *keys[3];
    } known[] = {{"key-auth", {"key", NULL}}, {"basic-auth", {"username", "password_hash", NULL}}};
    for (size_t i = 0; i < SL_ARRAY_LEN(known); i++) {
        if (!sl__cfg_scalar_is(kind, known[i].kind)) continue;
        if (!sl__cfg_want_type(cx, v, YAML_MAPPING_NODE, known[i].kind)) return;
        size_t n = 0;
        while (known[i].keys[n]) n++;
        sl__field_t f[3];
        char sub[256];
        snprintf(sub, sizeof sub, "'%s' credentials of %s", known[i].kind, where);
        sl__cfg_scan_map(cx, v, sub, known[i].keys, f, n, NULL);
        for (size_t k = 0; k < n; k++) {
            const yaml_node_t *x = sl__cfg_required(cx, v, &f[k], sub);
            const char *s = x ? sl__cfg_get_text(cx, x, known[i].keys[k], "a string") : NULL;
            const char *why;
            if (s) keep_as_text(x);
            if (s && !*s)
                sl__cx_err(cx, x, "'%s' must not be empty", known[i].keys[k]);
            else if (s && strcmp(known[i].keys[k], "username") == 0 && strchr(s, ':'))
                /* RFC 7617: the user-id ends at the first colon, so it could never log in */
                sl__cx_err(cx, x, "basic-auth username '%s' cannot hold ':' (Basic credentials end "
                                  "the username at the first colon)", s);
            else if (s && strcmp(known[i].keys[k], "password_hash") == 0 &&
                     sl_ffi_crypto_password_check(s, strlen(s), &why) != SL_OK)
                sl__cx_err(cx, x, "password_hash: %s", why);
        }
        return;
    }
}

enum { CO_NAME, CO_CREDENTIALS, CO_GROUPS, CO_N };
static const char *const consumer_keys[CO_N] = {"name", "credentials", "groups"};

/* A group name is matched by the acl plugin's allow/deny lists: plain like other names. */
static bool check_group(sl__cx_t *cx, const yaml_node_t *v, char *s) {
    bool ok = *s != 0;
    for (const char *c = s; ok && *c; c++) ok = sl__cfg_name_char(*c, true);
    if (!ok) sl__cx_err(cx, v, "group '%s' must be letters, digits, '-', '_' or '.'", s);
    return ok;
}

void sl__cfg_parse_consumer(sl__cx_t *cx, const yaml_node_t *m, size_t idx) {
    sl_consumer_conf_t *c = &cx->cfg->consumers[idx];
    char where[128];
    sl__cfg_describe(cx, m, "consumer", "consumers", idx, where, sizeof where);
    sl__field_t f[CO_N];
    sl__cfg_scan_map(cx, m, where, consumer_keys, f, CO_N, NULL);
    c->line = sl__cfg_line_of(m);
    c->col = sl__cfg_col_of(m);
    const yaml_node_t *v = sl__cfg_required(cx, m, &f[CO_NAME], where);
    if (v && sl__cfg_get_name(cx, v, "consumer", true, &c->name))
        for (size_t i = 0; i < idx; i++)
            if (cx->cfg->consumers[i].name && strcmp(cx->cfg->consumers[i].name, c->name) == 0)
                sl__cx_err(cx, v, "duplicate consumer name '%s' (first defined at line %d)",
                           c->name, cx->cfg->consumers[i].line);
    if (f[CO_GROUPS].val) sl__cfg_get_str_list(cx, &f[CO_GROUPS], check_group, &c->groups, &c->ngroups);
    if (!(v = f[CO_CREDENTIALS].val)) {
        c->credentials_json = sl__cx_strdup(cx, "{}");
        return;
    }
    if (!sl__cfg_want_type(cx, v, YAML_MAPPING_NODE, "credentials")) return;
    for (yaml_node_pair_t *p = v->data.mapping.pairs.start; p < v->data.mapping.pairs.top; p++) {
        yaml_node_t *k = sl__cfg_get_node(cx, p->key), *cv = sl__cfg_get_node(cx, p->value);
        if (k && cv && k->type == YAML_SCALAR_NODE) check_credential(cx, k, cv, where);
    }
    sl_wbuf_t b = SL_WBUF_GROWING(MAX_PLUGIN_JSON), pos = SL_WBUF_GROWING(MAX_PLUGIN_JSON);
    char path[PATH_MAX_LEN] = "";
    if (sl__cfg_jb_put(cx, &pos, "{", 1) && sl__cfg_json_node(cx, &b, &pos, path, 0, v, 0))
        c->credentials_json = b.p;
    else
        free(b.p);
    free(pos.p);
}

/* Two consumers may not share a key-auth key, a basic-auth username or an mtls-auth
 * subject or SAN: the plugin could not tell them apart. */
void sl__cfg_check_consumer_credentials(sl__cx_t *cx, const yaml_node_t *list) {
    static const char *const unique[][2] = {{"key-auth", "key"},
                                            {"basic-auth", "username"},
                                            {"mtls-auth", "subject"},
                                            {"mtls-auth", "san"}};
    size_t n = sl__cfg_seq_len(list);
    for (size_t u = 0; u < SL_ARRAY_LEN(unique); u++)
        for (size_t i = 0; i < n; i++)
            for (size_t j = 0; j < i; j++) {
                const yaml_node_t *a = NULL, *b = NULL;
                for (int side = 0; side < 2; side++) {
                    const yaml_node_t *m = sl__cfg_seq_at(cx, list, side ? j : i), *found = NULL;
                    for (int depth = 0; m && m->type == YAML_MAPPING_NODE && depth < 3; depth++) {
                        const char *want = depth == 0   ? "credentials"
                                           : depth == 1 ? unique[u][0]
                                                        : unique[u][1];
                        const yaml_node_t *next = NULL;
                        for (yaml_node_pair_t *p = m->data.mapping.pairs.start;
                             p < m->data.mapping.pairs.top; p++) {
                            yaml_node_t *k = sl__cfg_get_node(cx, p->key);
                            if (k && k->type == YAML_SCALAR_NODE && sl__cfg_scalar_is(k, want))
                                next = sl__cfg_get_node(cx, p->value);
                        }
                        m = next;
                        if (depth == 2) found = next;
                    }
                    if (side) b = found; else a = found;
                }
                if (!(a && b && a->type == YAML_SCALAR_NODE && b->type == YAML_SCALAR_NODE &&
                      sl__cfg_scalar_eq(a, b)))
                    continue;
                /* an API key is a secret: errors reach logs, /status and CI output */
                if (strcmp(unique[u][1], "key") == 0)
                    sl__cx_err(cx, a, "key-auth key is used by another consumer too: '%s' (line %d)",
                               cx->cfg->consumers[j].name ? cx->cfg->consumers[j].name : "?",
                               sl__cfg_line_of(b));
                else
                    sl__cx_err(cx, a, "%s %s '%s' is used by another consumer too (line %d)",
                               unique[u][0], unique[u][1], sl__cfg_sval(a), sl__cfg_line_of(b));
            }
}
