/* etcd_cli.c — `sluice push` and `sluice pull`: a config file to etcd keys and back.
 *
 * Each runs its etcd calls on a private libuv loop, to the end, on the command line's
 * thread. A push validates the file as `sluice check` does, reads the prefix, and writes
 * the difference in one transaction guarded by the revision it read.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/common.h"
#include "script/plugin.h"
#include "server/etcd.h"
#include "server/etcd_wire.h"

static uint64_t wall_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

typedef struct {
    bool done;
    char *body;
    size_t len;
    char err[300];
} sync_t;

static void sync_done(sl_ec_t *c, const char *err) {
    sync_t *s = c->ud;
    s->done = true;
    if (err)
        snprintf(s->err, sizeof s->err, "%s", err);
    else if ((s->body = malloc(c->body.len + 1)))
        memcpy(s->body, c->body.p ? c->body.p : "", c->body.len), s->body[c->body.len] = 0, s->len = c->body.len;
}

static char *call_sync(const char *url, const char *path, const char *body, sync_t *s);

/* push and pull authenticate as etcdctl does, from ETCDCTL_USER="name:password". */
static const char *cli_token(const char *url) {
    static char token[1024];
    static bool done;
    const char *up = getenv("ETCDCTL_USER");
    if (done || !up || !strchr(up, ':')) return token;
    done = true;
    sl_wbuf_t b = {0};
    char *name = strndup(up, (size_t)(strchr(up, ':') - up));
    sl__eb_puts(&b, "{\"name\":"), sl__json_quote(&b, name ? name : ""), sl__eb_puts(&b, ",\"password\":"),
        sl__json_quote(&b, strchr(up, ':') + 1);
    sl__eb_puts(&b, "}");
    free(name);
    sync_t s;
    char *ans = call_sync(url, "/v3/auth/authenticate", b.p ? b.p : "{}", &s);
    if (b.p) explicit_bzero(b.p, b.len);
    free(b.p);
    sl_jdoc_t d;
    if (ans && sl_json_parse(&d, ans, s.len)) {
        const char *tok = sl_json_str(sl_json_get(&d, d.root, "token"));
        snprintf(token, sizeof token, "%s", tok ? tok : "");
        yaml_document_delete(&d.doc);
    }
    if (!token[0])
        fprintf(stderr, "sluice: etcd %s: authentication as ETCDCTL_USER failed: %s\n", url, ans ? ans : s.err);
    free(ans);
    return token;
}

/* One call, waited for. The answer's body (malloc'ed) or NULL with s->err. */
static char *call_sync(const char *url, const char *path, const char *body, sync_t *s) {
    uv_loop_t loop;
    uv_loop_init(&loop);
    const char *token = strcmp(path, "/v3/auth/authenticate") ? cli_token(url) : NULL;
    *s = (sync_t){0};
    if (!sl__ec_post(&loop, url, path, body, token, 5000, sync_done, NULL, s))
        snprintf(s->err, sizeof s->err, "cannot reach %s", url);
    uv_run(&loop, UV_RUN_DEFAULT);
    uv_loop_close(&loop);
    if (!s->body && !s->err[0]) snprintf(s->err, sizeof s->err, "no answer");
    return s->body;
}

static bool read_prefix(const char *url, const char *prefix, sl_ekvset_t *kvs, long long *rev) {
    sl_wbuf_t b = {0};
    sl__etcd_range_body(prefix, false, &b);
    sync_t s;
    char *body = call_sync(url, "/v3/kv/range", b.p ? b.p : "{}", &s);
    free(b.p);
    if (!body) {
        fprintf(stderr, "sluice: etcd %s: %s\n", url, s.err);
        return false;
    }
    bool ok = sl__kv_from_range(kvs, rev, prefix, body, s.len);
    if (!ok) fprintf(stderr, "sluice: etcd %s: unreadable answer\n", url);
    free(body);
    return ok;
}

/* Where libyaml's marks point in the text: a mark's index counts characters (a UTF-8
 * sequence is one, a byte-order mark none), so it is walked to a byte offset. The marks
 * asked for only grow, so a walk goes on from the last one. */
typedef struct {
    const char *text;
    size_t len, chars, bytes;
} text_pos_t;

static size_t byte_at(text_pos_t *tp, size_t chars) {
    if (chars < tp->chars) tp->chars = 0, tp->bytes = 0;
    if (tp->bytes == 0 && tp->len >= 3 && memcmp(tp->text, "\xEF\xBB\xBF", 3) == 0) tp->bytes = 3;
    while (tp->chars < chars && tp->bytes < tp->len) {
        unsigned char c = (unsigned char)tp->text[tp->bytes];
        tp->bytes += c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 1;
        tp->chars++;
    }
    if (tp->bytes > tp->len) tp->bytes = tp->len;
    return tp->bytes;
}

/* The source text of a block node, its continuation lines moved left by its column. */
static char *node_text(text_pos_t *tp, const yaml_node_t *n) {
    const char *text = tp->text;
    size_t a = byte_at(tp, n->start_mark.index), z = byte_at(tp, n->end_mark.index), col = n->start_mark.column;
    while (z > a && (text[z - 1] == '\n' || text[z - 1] == ' ' || text[z - 1] == '\r')) z--;
    sl_wbuf_t b = {0};
    for (size_t i = a; i < z;) {
        const char *nl = memchr(text + i, '\n', z - i);
        size_t e = nl ? (size_t)(nl - text) : z;
        sl__eb_put(&b, text + i, e - i);
        sl__eb_puts(&b, "\n");
        i = e + 1;
        for (size_t k = 0; k < col && i < z && text[i] == ' '; k++) i++;
    }
    return b.p;
}

/* The keys a config file stands for: its routes, upstreams, consumers, global chain and
 * the source of the user plugins it uses. */
static bool desired(const char *file, const sl_config_t *cfg, sl_ekvset_t *d) {
    size_t len = 0;
    char *text = sl__etcd_read_file(file, &len);
    sl_jdoc_t j;
    if (!text || !sl_json_parse(&j, text, len)) {
        free(text);
        fprintf(stderr, "sluice push: cannot read %s again\n", file);
        return false;
    }
    bool ok = true;
    text_pos_t tp = {text, len, 0, 0};
    for (size_t k = 0; k < 3; k++) {
        yaml_node_t *list = sl_json_get(&j, j.root, sl__etcd_kinds[k]);
        for (size_t i = 0; i < sl_json_len(list); i++) {
            yaml_node_t *m = sl_json_at(&j, list, i);
            const char *name = sl_json_str(sl_json_get(&j, m, "name"));
            char key[128];
            char *v = name ? node_text(&tp, m) : NULL;
            snprintf(key, sizeof key, "%s/%s", sl__etcd_kinds[k], name ? name : "");
            if (v && !sl__kv_put(d, key, v, strlen(v))) ok = false;
        }
    }
    yaml_node_t *g = sl_json_get(&j, j.root, "plugins");
    if (g && sl_json_len(g)) {
        char *seq = node_text(&tp, g);
        sl_wbuf_t b = {0};
        sl__eb_puts(&b, g->data.sequence.style == YAML_FLOW_SEQUENCE_STYLE ? "plugins: " : "plugins:\n");
        for (const char *p = seq; p && *p;) {
            const char *nl = strchr(p, '\n');
            size_t n = nl ? (size_t)(nl - p) : strlen(p);
            if (g->data.sequence.style != YAML_FLOW_SEQUENCE_STYLE) sl__eb_puts(&b, "  ");
            sl__eb_put(&b, p, n);
            sl__eb_puts(&b, "\n");
            p += n + (nl != NULL);
        }
        free(seq);
        if (!b.p || !sl__kv_put(d, "global", b.p, b.len)) ok = false;
    }
    yaml_document_delete(&j.doc);
    free(text);
    /* user plugins: every name the config uses, found in a folder of plugin_paths */
    for (size_t r = 0; r <= cfg->nroutes; r++) {
        const sl_plugin_conf_t *ps = r < cfg->nroutes ? cfg->routes[r].plugins : cfg->plugins;
        size_t np = r < cfg->nroutes ? cfg->routes[r].nplugins : cfg->nplugins;
        for (size_t i = 0; i < np; i++) {
            char key[128];
            snprintf(key, sizeof key, "plugins/%s", ps[i].name);
            if (sl__kv_get(d, key)) continue;
            for (size_t s = 0; s + 1 < cfg->nplugin_search; s++) { /* the last folder: built-ins */
                char f[PATH_MAX + 128];
                size_t vl = 0;
                snprintf(f, sizeof f, "%s/%s.lua", cfg->plugin_search[s], ps[i].name);
                char *v = sl__etcd_read_file(f, &vl);
                if (v) {
                    if (!sl__kv_put(d, key, v, vl)) ok = false;
                    break;
                }
                static const char *const folder[] = {"init.lua", "handler.lua"}; /* sluice's, Kong's */
                for (size_t k = 0; k < sizeof folder / sizeof folder[0]; k++) {
                    snprintf(f, sizeof f, "%s/%s/%s", cfg->plugin_search[s], ps[i].name, folder[k]);
                    if (access(f, R_OK) == 0) {
                        fprintf(stderr,
                                "sluice push: plugin '%s' is a folder (%s): etcd holds single-file plugins "
                                "(plugins/NAME is one Lua source); make it one file to push it\n",
                                ps[i].name, f);
                        return false;
                    }
                }
            }
        }
    }
    return ok;
}

/* prefix/rel in base64; `end`: the key just after it (a range's end that includes it). */
static void put_key(sl_wbuf_t *b, const char *prefix, const char *rel, bool end) {
    size_t pl = strlen(prefix), rl = strlen(rel);
    char *k = malloc(pl + rl + 2);
    if (!k) return;
    memcpy(k, prefix, pl);
    k[pl] = '/';
    memcpy(k + pl + 1, rel, rl + 1);
    char *k64 = sl__b64_enc(k, pl + rl + 1 + end); /* + its NUL */
    if (k64) sl__eb_puts(b, k64);
    free(k64);
    free(k);
}

static bool keep(const sl_ekvset_t *want, const sl_ekv_t *kv) { return kv->key[0] == '_' || sl__kv_get(want, kv->key); }

/* Whether want holds a key strictly between a and b. */
static bool want_between(const sl_ekvset_t *want, const char *a, const char *b) {
    bool f;
    size_t p = sl__kv_pos(want, a, &f);
    if (f) p++;
    return p < want->n && strcmp(want->a[p].key, b) < 0;
}

int sl_etcd_push(const char *file, const char *url, const char *prefix) {
    sl_config_t *cfg = NULL;
    sl_errors_t errs = {0};
    int rc = sl_config_build(file, NULL, 0, &cfg, &errs); /* exactly as `sluice check` */
    if (rc != 0 || cfg->source.enabled) {
        for (size_t i = 0; i < errs.n; i++) fprintf(stderr, "%s\n", errs.lines[i]);
        if (rc == 0) fprintf(stderr, "sluice push: %s has config_source: push an ordinary config file\n", file);
        sl_errors_free(&errs);
        sl_config_free(cfg);
        return 1;
    }
    sl_errors_free(&errs);
    sl_ekvset_t want = {0}, have = {0};
    long long rev = 0;
    bool ok = desired(file, cfg, &want);
    sl_config_free(cfg);
    if (!ok) {
        fprintf(stderr, "sluice push: nothing was written\n");
        sl__kv_clear(&want);
        return 1;
    }
    if (!read_prefix(url, prefix, &have, &rev)) {
        sl__kv_clear(&want);
        return 1;
    }
    sl_wbuf_t ops = {0};
    int puts_n = 0, dels = 0, nops = 1; /* _push */
    for (size_t i = 0; i < want.n; i++) {
        const sl_ekv_t *h = sl__kv_get(&have, want.a[i].key);
        if (h && h->vlen == want.a[i].vlen && !memcmp(h->val, want.a[i].val, h->vlen)) continue;
        char *v64 = sl__b64_enc(want.a[i].val, want.a[i].vlen);
        sl__eb_puts(&ops, ops.len ? ",{\"request_put\":{\"key\":\"" : "{\"request_put\":{\"key\":\"");
        put_key(&ops, prefix, want.a[i].key, false);
        sl_wbuf_printf(&ops, "\",\"value\":\""), sl__eb_puts(&ops, v64 ? v64 : ""), sl__eb_puts(&ops, "\"}}");
        free(v64);
        puts_n++;
        nops++;
    }
    /* Deletes: a run of keys to delete with nothing kept between them is one range delete
     * (etcd caps a transaction's operations, --max-txn-ops, 128 by default). */
    for (size_t i = 0; i < have.n;) {
        if (keep(&want, &have.a[i])) {
            i++;
            continue;
        }
        size_t j = i;
        while (j + 1 < have.n && !keep(&want, &have.a[j + 1]) && !want_between(&want, have.a[j].key, have.a[j + 1].key))
            j++;
        sl__eb_puts(&ops, ops.len ? ",{\"request_delete_range\":{\"key\":\"" : "{\"request_delete_range\":{\"key\":\"");
        put_key(&ops, prefix, have.a[i].key, false);
        if (j > i) sl__eb_puts(&ops, "\",\"range_end\":\""), put_key(&ops, prefix, have.a[j].key, true);
        sl__eb_puts(&ops, "\"}}");
        dels += (int)(j - i + 1);
        nops++;
        i = j + 1;
    }
    sl__kv_clear(&want);
    sl__kv_clear(&have);
    if (!puts_n && !dels) {
        printf("sluice push: %s under %s is already %s (revision %lld): nothing to write\n", url, prefix, file, rev);
        free(ops.p);
        return 0;
    }
    /* The guard: no key under the prefix changed since the read, and _push (written by
     * every push) is part of it, so of two pushes that read the same revision one fails
     * even when the other only deleted. */
    char marker[200];
    snprintf(marker, sizeof marker, "{\"pushed_at\":%llu,\"pid\":%d}", (unsigned long long)wall_ms(), (int)getpid());
    char *m64 = sl__b64_enc(marker, strlen(marker));
    sl_wbuf_t r = {0}, body = {0};
    sl__etcd_range_body(prefix, false, &r);
    if (r.p && r.len > 2) r.p[r.len - 1] = 0;
    sl_wbuf_printf(&body,
                  "{\"compare\":[%s,\"target\":\"MOD\",\"mod_revision\":\"%lld\",\"result\":\"LESS\"}],\"success\":[",
                  r.p ? r.p : "{", rev + 1);
    sl__eb_puts(&body, ops.p);
    sl__eb_puts(&body, ",{\"request_put\":{\"key\":\"");
    put_key(&body, prefix, "_push", false);
    sl__eb_puts(&body, "\",\"value\":\""), sl__eb_puts(&body, m64 ? m64 : ""), sl__eb_puts(&body, "\"}}]}");
    free(m64);
    free(r.p);
    free(ops.p);
    sync_t s;
    char *ans = body.oom ? NULL : call_sync(url, "/v3/kv/txn", body.p, &s);
    free(body.p);
    if (!ans) {
        fprintf(stderr, "sluice push: etcd %s: %s\n", url, body.oom ? "out of memory" : s.err);
        if (strstr(s.err, "too many operations"))
            fprintf(stderr,
                    "sluice push: this change is %d operations in one transaction; etcd allows 128 unless "
                    "started with a larger --max-txn-ops: raise it, or push the change in steps\n",
                    nops);
        return 1;
    }
    sl_jdoc_t d;
    bool won = false;
    long long nrev = 0;
    if (sl_json_parse(&d, ans, s.len)) {
        const char *sc = sl_json_str(sl_json_get(&d, d.root, "succeeded"));
        won = sc && !strcmp(sc, "true");
        nrev = sl_json_int(sl_json_get(&d, sl_json_get(&d, d.root, "header"), "revision"));
        yaml_document_delete(&d.doc);
    }
    free(ans);
    if (!won) {
        fprintf(stderr,
                "sluice push: %s under %s changed after this push read it at revision %lld (another push or a "
                "direct write won the race): nothing was written; run it again to push onto the new state\n",
                url, prefix, rev);
        return 1;
    }
    printf("sluice push: %s -> %s%s: %d put, %d deleted, revision %lld\n", file, url, prefix, puts_n, dels, nrev);
    return 0;
}

static void pull_section(sl_wbuf_t *out, const sl_ekvset_t *s, const char *kind) {
    size_t kl = strlen(kind);
    bool header = false;
    for (size_t i = 0; i < s->n; i++) {
        if (strncmp(s->a[i].key, kind, kl) != 0 || s->a[i].key[kl] != '/') continue;
        if (!header) sl_wbuf_printf(out, "%s:\n", kind), header = true;
        sl__etcd_put_item(out, s->a[i].val, s->a[i].vlen, 4);
    }
}

int sl_etcd_pull(const char *url, const char *prefix, const char *plugins_dir) {
    sl_ekvset_t s = {0};
    long long rev = 0;
    if (!read_prefix(url, prefix, &s, &rev)) return 1;
    sl_wbuf_t out = {0};
    sl_wbuf_printf(&out, "# sluice pull %s %s at revision %lld\n", url, prefix, rev);
    sl__eb_puts(&out, "# The process keys (listeners, admin, workers, redis) stay in each gateway's local file;\n"
                      "# this listener only makes the file one `sluice check` accepts.\n"
                      "listeners:\n  - { name: http, listen: \"127.0.0.1:0\" }\n");
    if (plugins_dir) {
        sl__eb_puts(&out, "plugin_paths: [");
        sl__json_quote(&out, plugins_dir);
        sl__eb_puts(&out, "]\n");
    }
    for (size_t k = 0; k < 3; k++) pull_section(&out, &s, sl__etcd_kinds[k]);
    const sl_ekv_t *g = sl__kv_get(&s, "global");
    if (g) sl__etcd_put_item(&out, g->val, g->vlen, 0);
    int rc = 0;
    for (size_t i = 0; i < s.n; i++) {
        if (strncmp(s.a[i].key, "plugins/", 8) != 0) continue;
        if (!plugins_dir) {
            sl_wbuf_printf(&out, "# %s: %zu bytes of Lua (pull --plugins DIR writes it)\n", s.a[i].key, s.a[i].vlen);
            continue;
        }
        if (!sl__etcd_valid_name(s.a[i].key + 8)) { /* "plugins/../../x" is no file under DIR */
            fprintf(stderr, "sluice pull: %s/%s: not a plugin name (gateways reject the key): not written\n", prefix,
                    s.a[i].key);
            rc = 1;
            continue;
        }
        char f[PATH_MAX + 128];
        snprintf(f, sizeof f, "%s/%s.lua", plugins_dir, s.a[i].key + 8);
        mkdir(plugins_dir, 0755);
        FILE *fp = fopen(f, "wb");
        if (!fp || fwrite(s.a[i].val, 1, s.a[i].vlen, fp) != s.a[i].vlen) {
            fprintf(stderr, "sluice pull: cannot write %s: %s\n", f, strerror(errno));
            rc = 1;
        }
        if (fp) fclose(fp);
    }
    fwrite(out.p, 1, out.len, stdout);
    free(out.p);
    sl__kv_clear(&s);
    return rc;
}
