/* etcd.c — the fleet's config source: etcd's HTTP/JSON gateway, read, watched, applied.
 *
 * The main thread owns it, like the reload path it feeds. The state is the set of keys
 * under the prefix (relative names: routes/a, plugins/p, global) at a revision. A full
 * read (/v3/kv/range) replaces the set; a watch (/v3/watch from that revision + 1)
 * applies puts and deletes to it. Every change starts a 100 ms debounce; when it ends the
 * set is hashed and, unless the hash is the running generation's, sl_server_reload
 * builds a generation from the local file with the set's entries appended
 * (sl__etcd_build) and applies it or rejects it whole.
 *
 * Nothing is missed: a full read is the truth at its revision and the watch starts right
 * after it. A compaction cancels the watch (compact_revision), etcd gone or restarted
 * ends the stream, a revision lower than ours (etcd wiped or restored) shows in the
 * progress check: each of these goes back to a full read, and the content hash keeps a
 * full read of what is already served from rebuilding anything.
 *
 * The wire (HTTP exchanges, JSON, key sets) is etcd_wire.c; push and pull, etcd_cli.c.
 */
#include "server/etcd.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <uv.h>
#include <yaml.h>

#include "base/hash.h"
#include "base/log.h"
#include "script/plugin.h"
#include "server/etcd_wire.h"
#include "server/server.h"

#define DEBOUNCE_MS 100
#define BACKOFF_MIN_MS 100
#define BACKOFF_MAX_MS 5000
#define PROGRESS_MS 2000

/* ---- building a generation from the local file and the keys ---- */

typedef struct {
    int start; /* first line in the composed text */
    int indent;
    const char *key;
} seg_t;

/* Parses one value alone: a YAML (or JSON) mapping whose `name` is the key's last part
 * (global: only `plugins`). Adds "etcd KEY:L:C: ..." errors. */
static bool check_value(const char *prefix, const sl_ekv_t *kv, const char *kind, const char *name, sl_errors_t *errs) {
    char where[600];
    snprintf(where, sizeof where, "etcd %s/%s", prefix, kv->key);
    yaml_parser_t p;
    yaml_document_t d;
    if (!yaml_parser_initialize(&p)) return false;
    yaml_parser_set_input_string(&p, (const unsigned char *)kv->val, kv->vlen);
    if (!yaml_parser_load(&p, &d)) {
        sl_errors_add(errs, where, (int)p.problem_mark.line + 1, (int)p.problem_mark.column + 1, "%s",
                      p.problem ? p.problem : "malformed YAML");
        yaml_parser_delete(&p);
        return false;
    }
    yaml_parser_delete(&p);
    bool ok = true;
    yaml_node_t *root = yaml_document_get_root_node(&d);
    sl_jdoc_t j = {.doc = d, .root = root};
    if (!root || root->type != YAML_MAPPING_NODE) {
        sl_errors_add(errs, where, 1, 1, "expected a mapping (YAML or JSON) with the same keys as in the file");
        ok = false;
    } else if (!kind) {
        for (yaml_node_pair_t *pr = root->data.mapping.pairs.start; pr < root->data.mapping.pairs.top; pr++) {
            yaml_node_t *k = yaml_document_get_node(&d, pr->key);
            if (!sl_json_str(k) || strcmp(sl_json_str(k), "plugins") != 0) {
                sl_errors_add(errs, where, (int)k->start_mark.line + 1, (int)k->start_mark.column + 1,
                              "'global' holds only 'plugins' (the global chain)");
                ok = false;
            }
        }
    } else {
        yaml_node_t *n = sl_json_get(&j, root, "name");
        if (!sl_json_str(n) || strcmp(sl_json_str(n), name) != 0) {
            int l = n ? (int)n->start_mark.line + 1 : 1, c = n ? (int)n->start_mark.column + 1 : 1;
            sl_errors_add(errs, where, l, c, "name '%s' is not the key's last part '%s'",
                          sl_json_str(n) ? sl_json_str(n) : "", name);
            ok = false;
        }
    }
    yaml_document_delete(&d);
    return ok;
}

/* Writes the plugins/NAME values as NAME.lua into a folder named by their hash (written
 * once, renamed into place: a generation's code never changes under it). */
/* `user:` in the local file: what is written before the switch from root (the snapshot's
 * plugins, at start) is handed to that user, who writes the later generations' folders. */
static struct {
    bool on;
    uid_t uid;
    gid_t gid;
} g_owner;

static void own(const char *path) {
    if (g_owner.on && geteuid() == 0 && chown(path, g_owner.uid, g_owner.gid) != 0)
        sl_log_warn("etcd: cannot hand %s to uid %u: %s", path, (unsigned)g_owner.uid, strerror(errno));
}

static int plugin_dir(const char *base, const sl_ekvset_t *s, char *out, size_t outlen) {
    uint64_t h = SL_FNV64_INIT;
    size_t n = 0;
    for (size_t i = 0; i < s->n; i++)
        if (strncmp(s->a[i].key, "plugins/", 8) == 0) {
            h = sl_fnv1a64(sl_fnv1a64(h, s->a[i].key, strlen(s->a[i].key) + 1), s->a[i].val, s->a[i].vlen);
            n++;
        }
    if (!n) return 0;
    if (mkdir(base, 0700) == 0)
        own(base);
    else if (errno != EEXIST)
        return -1; /* its errno (EACCES: a folder `user:` cannot write), not the next mkdir's ENOENT */
    snprintf(out, outlen, "%s/%016llx", base, (unsigned long long)h);
    struct stat st;
    if (stat(out, &st) == 0) return 1;
    char tmp[PATH_MAX];
    snprintf(tmp, sizeof tmp, "%s.tmp%d", out, (int)getpid());
    if (mkdir(tmp, 0700) != 0 && errno != EEXIST) return -1;
    own(tmp);
    for (size_t i = 0; i < s->n; i++) {
        if (strncmp(s->a[i].key, "plugins/", 8) != 0) continue;
        char f[PATH_MAX + 128];
        snprintf(f, sizeof f, "%s/%s.lua", tmp, s->a[i].key + 8);
        FILE *fp = fopen(f, "wb");
        if (!fp || fwrite(s->a[i].val, 1, s->a[i].vlen, fp) != s->a[i].vlen) {
            if (fp) fclose(fp);
            return -1;
        }
        fclose(fp);
        own(f);
    }
    if (rename(tmp, out) != 0 && stat(out, &st) != 0) return -1;
    return 1;
}

/* The plugin folder of the last build (what an applied generation runs), and the pruning
 * of the others: an applied generation's VMs hold their code, a folder is not read again. */
static char g_last_pdir[PATH_MAX];

static void prune_plugin_dirs(const char *base) {
    DIR *d = opendir(base);
    struct dirent *de;
    while (d && (de = readdir(d))) {
        char p[PATH_MAX + 300];
        snprintf(p, sizeof p, "%s/%s", base, de->d_name);
        if (de->d_name[0] == '.' || !strcmp(p, g_last_pdir)) continue;
        DIR *sub = opendir(p);
        struct dirent *f;
        while (sub && (f = readdir(sub))) {
            char q[PATH_MAX + 600];
            snprintf(q, sizeof q, "%s/%s", p, f->d_name);
            if (f->d_name[0] != '.') unlink(q);
        }
        if (sub) closedir(sub);
        rmdir(p);
    }
    if (d) closedir(d);
}

/* Takes line (malloc'ed) into errs. */
static void errs_push(sl_errors_t *errs, char *line) {
    if (!line) return;
    if (errs->n == errs->cap) {
        size_t cap = errs->cap ? errs->cap * 2 : 8;
        char **l = realloc(errs->lines, cap * sizeof *l);
        if (!l) {
            free(line);
            return;
        }
        errs->lines = l, errs->cap = cap;
    }
    errs->lines[errs->n++] = line;
}

static int build(const char *prefix, const char *pbase, const sl_ekvset_t *s, const char *path, const char *text,
                 size_t len, sl_config_t **out, sl_errors_t *errs) {
    *out = NULL;
    sl_wbuf_t t = {0};
    seg_t *segs = calloc(s->n + 1, sizeof *segs);
    size_t nsegs = 0;
    sl_errors_t tmp = {0};
    bool ok = segs != NULL;
    sl__eb_put(&t, text, len);
    if (len && text[len - 1] != '\n') sl__eb_puts(&t, "\n");
    int line = 1;
    for (size_t i = 0; i < t.len; i++) line += t.p[i] == '\n';
    int base_line = line; /* the first line after the local file */
    for (size_t k = 0; k < 3 && ok; k++) {
        size_t kl = strlen(sl__etcd_kinds[k]);
        bool header = false;
        for (size_t i = 0; i < s->n; i++) {
            const sl_ekv_t *kv = &s->a[i];
            if (strncmp(kv->key, sl__etcd_kinds[k], kl) != 0 || kv->key[kl] != '/') continue;
            if (!check_value(prefix, kv, sl__etcd_kinds[k], kv->key + kl + 1, &tmp)) continue;
            if (!header) sl_wbuf_printf(&t, "%s:\n", sl__etcd_kinds[k]), line++, header = true;
            segs[nsegs++] = (seg_t){line, 4, kv->key};
            line += sl__etcd_put_item(&t, kv->val, kv->vlen, 4);
        }
    }
    for (size_t i = 0; i < s->n && ok; i++) {
        const sl_ekv_t *kv = &s->a[i];
        const char *slash = strchr(kv->key, '/');
        size_t kl = slash ? (size_t)(slash - kv->key) : strlen(kv->key);
        bool known = false;
        for (size_t k = 0; k < 3; k++)
            known |= strlen(sl__etcd_kinds[k]) == kl && !strncmp(kv->key, sl__etcd_kinds[k], kl);
        if (kv->key[0] == '_') continue; /* _push: the push's own guard, not config */
        if (!strcmp(kv->key, "global")) {
            if (!check_value(prefix, kv, NULL, NULL, &tmp)) continue;
            segs[nsegs++] = (seg_t){line, 0, kv->key};
            line += sl__etcd_put_item(&t, kv->val, kv->vlen, 0);
            continue;
        }
        if (known && slash && sl__etcd_valid_name(slash + 1)) continue;
        if (slash && kl == 7 && !strncmp(kv->key, "plugins", 7) && sl__etcd_valid_name(slash + 1)) continue;
        char where[600];
        snprintf(where, sizeof where, "etcd %s/%s", prefix, kv->key);
        sl_errors_add(&tmp, where, 1, 1,
                      "unknown key: expected routes/NAME, upstreams/NAME, consumers/NAME, plugins/NAME or global");
    }
    if (t.oom || !ok) sl_errors_add(&tmp, path, 1, 1, "out of memory");
    sl_config_t *cfg = NULL;
    char pdir[PATH_MAX] = "";
    int rc = -1;
    if (tmp.n == 0 && sl_config_parse_composed(path, t.p, t.len, &cfg, &tmp) == 0) {
        int pd = plugin_dir(pbase, s, pdir, sizeof pdir);
        snprintf(g_last_pdir, sizeof g_last_pdir, "%s", pd > 0 ? pdir : "");
        char **pp = pd > 0 ? realloc(cfg->plugin_paths, (cfg->nplugin_paths + 1) * sizeof(char *)) : NULL;
        if (pd < 0 || (pd > 0 && !pp)) {
            sl_errors_add(&tmp, path, 1, 1, "cannot write the plugins from etcd under %s: %s", pbase, strerror(errno));
        } else {
            if (pp) {
                memmove(pp + 1, pp, cfg->nplugin_paths * sizeof(char *));
                pp[0] = strdup(pdir);
                cfg->plugin_paths = pp;
                cfg->nplugin_paths++;
            }
            rc = sl_plugins_check(cfg, &tmp);
        }
    }
    /* Errors: positions in the appended part become the key's own line:col; a file of the
     * plugin folder becomes its plugins/NAME key, and the folder the plugins/ keys. */
    size_t plen = strlen(path);
    const char *hname = strrchr(pdir, '/') ? strrchr(pdir, '/') : ""; /* "/HASH" */
    for (size_t i = 0; i < tmp.n; i++) {
        const char *l = tmp.lines[i];
        int ln = 0, col = 0, used = 0;
        sl_wbuf_t b = {0};
        if (!strncmp(l, path, plen) && sscanf(l + plen, ":%d:%d:%n", &ln, &col, &used) == 2 && used &&
            ln >= base_line && nsegs) {
            size_t k = 0;
            while (k + 1 < nsegs && segs[k + 1].start <= ln) k++;
            int c = col - segs[k].indent;
            sl_wbuf_printf(&b, "etcd %s/%s:%d:%d:", prefix, segs[k].key, ln - segs[k].start + 1, c < 1 ? 1 : c);
            l += plen + used;
        }
        /* the folder is found by its own name: Lua shortens a long chunk name to ".../tail" */
        for (const char *d; *hname && (d = strstr(l, hname));) {
            const char *from = d;
            while (from > l && !strchr(" '\"(", from[-1])) from--;
            sl__eb_put(&b, l, (size_t)(from - l));
            sl_wbuf_printf(&b, "etcd %s/plugins", prefix);
            l = d + strlen(hname);
            size_t n = l[0] == '/' ? strspn(l + 1, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.") : 0;
            if (n > 4 && !strncmp(l + 1 + n - 4, ".lua", 4)) { /* .../NAME.lua: the key plugins/NAME */
                sl__eb_put(&b, l, n + 1 - 4);
                l += n + 1;
            }
        }
        sl__eb_puts(&b, l);
        errs_push(errs, b.p);
    }
    if (rc != 0 && cfg) {
        sl_config_free(cfg);
        cfg = NULL;
    }
    sl_errors_free(&tmp);
    free(segs);
    free(t.p);
    *out = cfg;
    return cfg ? 0 : -1;
}

/* ---- the watcher (main thread) ---- */

struct sl_etcd_s {
    sl_server_t *srv;
    uv_loop_t *loop;
    char **endpoints;
    size_t nendpoints, ep;
    char *prefix, *snapshot, *user, *pass;
    char pbase[PATH_MAX]; /* where plugins/ values become files */
    uint64_t timeout_ms;
    char token[1024];
    sl_ekvset_t kvs;
    long long rev;
    uint64_t built_hash; /* of the keys last built (applied or rejected) */
    bool have_built, ready, up, attached, closing;
    uint64_t since_ms; /* up (or down) since, wall clock */
    long long applied_rev;
    long long asked_rev; /* the revision of the reload asked for last */
    uint64_t applied, rejected, full_reads, compactions;
    char last_error[2048];
    sl_ec_t *call, *watch, *probe;
    uv_timer_t retry, debounce, progress;
    uint64_t backoff_ms;
};

static sl_etcd_t g_etcd; /* one source per process */

static uint64_t wall_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static void start_read(sl_etcd_t *e);

static void set_up(sl_etcd_t *e, bool up, const char *why) {
    if (e->up == up && e->since_ms) return;
    e->up = up;
    e->since_ms = wall_ms();
    if (up)
        sl_log_info("etcd %s: connected", e->endpoints[e->ep]);
    else
        sl_log_warn("etcd %s: unavailable (%s): still serving generation %llu", e->endpoints[e->ep], why,
                    (unsigned long long)(e->srv ? e->srv->generation : 0));
}

static void stop_calls(sl_etcd_t *e) {
    sl__ec_cancel(e->call);
    sl__ec_cancel(e->watch);
    sl__ec_cancel(e->probe);
    e->call = e->watch = e->probe = NULL;
    uv_timer_stop(&e->progress);
}

static void on_retry(uv_timer_t *t) { start_read(t->data); }

static void went_down(sl_etcd_t *e, const char *why) {
    stop_calls(e);
    e->token[0] = 0; /* an expired or revoked token is the likeliest cause: authenticate again */
    set_up(e, false, why);
    e->ep = (e->ep + 1) % e->nendpoints; /* the next endpoint, if there are several */
    e->backoff_ms = e->backoff_ms ? SL_MIN(e->backoff_ms * 2, BACKOFF_MAX_MS) : BACKOFF_MIN_MS;
    if (!e->closing) uv_timer_start(&e->retry, on_retry, e->backoff_ms, 0);
}

static void write_snapshot(sl_etcd_t *e) {
    if (!e->snapshot) return;
    sl_wbuf_t b = {0};
    sl__kv_to_json(&e->kvs, e->prefix, e->rev, &b);
    char tmp[PATH_MAX];
    snprintf(tmp, sizeof tmp, "%s.tmp", e->snapshot);
    int fd = b.oom ? -1 : open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    bool ok = fd >= 0 && write(fd, b.p, b.len) == (ssize_t)b.len && fsync(fd) == 0;
    if (fd >= 0) close(fd);
    if (!ok || rename(tmp, e->snapshot) != 0)
        sl_log_warn("cannot write the etcd snapshot %s: %s", e->snapshot, strerror(errno));
    free(b.p);
}

/* The reload of the keys as they were read answered (reload.c). */
static void applied(sl_server_t *srv, int rc, char *json, void *ud) {
    (void)srv;
    sl_etcd_t *e = ud;
    if (rc == SL_OK) {
        e->applied++;
        e->applied_rev = e->asked_rev;
        e->ready = true;
        e->last_error[0] = 0;
        write_snapshot(e);
        prune_plugin_dirs(e->pbase);
    } else {
        e->rejected++;
        sl_jdoc_t d;
        const char *msg = NULL;
        if (json && sl_json_parse(&d, json, strlen(json))) {
            msg = sl_json_str(sl_json_get(&d, d.root, "error"));
            snprintf(e->last_error, sizeof e->last_error, "%s", msg ? msg : json);
            yaml_document_delete(&d.doc);
        } else {
            snprintf(e->last_error, sizeof e->last_error, "%s", json ? json : "rejected");
        }
    }
    free(json);
}

/* The debounce ended: one generation from the keys as they are now. */
static void apply(sl_etcd_t *e) {
    uint64_t h = sl__kv_hash(&e->kvs);
    if (e->have_built && h == e->built_hash) return; /* what is served already */
    if (e->kvs.n == 0) {
        /* Not even a push's _push key: etcd was wiped, restored empty, or the prefix is
         * wrong. Dropping every route of the fleet is never what that means, and a gateway
         * that has no config yet is not made ready by it. */
        sl_log_warn("etcd: %s holds no keys at revision %lld: generation %llu keeps serving until a push", e->prefix,
                    e->rev, (unsigned long long)e->srv->generation);
        return;
    }
    e->built_hash = h;
    e->have_built = true;
    char why[64];
    snprintf(why, sizeof why, "etcd revision %lld", e->rev);
    e->asked_rev = e->rev;
    sl_server_reload(e->srv, why, false, applied, e);
}

static void on_debounce(uv_timer_t *t) { apply(t->data); }

static void changed(sl_etcd_t *e) {
    if (!uv_is_active((uv_handle_t *)&e->debounce)) uv_timer_start(&e->debounce, on_debounce, DEBOUNCE_MS, 0);
}

static void on_watch_line(sl_ec_t *c, const char *line, size_t n) {
    sl_etcd_t *e = c->ud;
    sl_jdoc_t d;
    if (!sl_json_parse(&d, line, n)) return went_down(e, "unreadable watch message");
    yaml_node_t *res = sl_json_get(&d, d.root, "result");
    if (!res) {
        yaml_document_delete(&d.doc);
        return went_down(e, "watch error");
    }
    yaml_node_t *canceled = sl_json_get(&d, res, "canceled");
    long long compact = sl_json_int(sl_json_get(&d, res, "compact_revision"));
    if (sl_json_str(canceled) && !strcmp(sl_json_str(canceled), "true")) {
        yaml_document_delete(&d.doc);
        if (compact) {
            e->compactions++;
            sl_log_info("etcd: history compacted at revision %lld while watching from %lld: reading %s again", compact,
                        e->rev + 1, e->prefix);
        }
        stop_calls(e);
        return start_read(e); /* the whole prefix again: nothing in the gap is lost */
    }
    long long rev = sl_json_int(sl_json_get(&d, sl_json_get(&d, res, "header"), "revision"));
    yaml_node_t *evs = sl_json_get(&d, res, "events");
    size_t pl = strlen(e->prefix);
    for (size_t i = 0; i < sl_json_len(evs); i++) {
        yaml_node_t *ev = sl_json_at(&d, evs, i), *kv = sl_json_get(&d, ev, "kv");
        const char *type = sl_json_str(sl_json_get(&d, ev, "type"));
        size_t kl = 0, vl = 0;
        char *k = sl__b64_dec(
            sl_json_str(sl_json_get(&d, kv, "key")) ? sl_json_str(sl_json_get(&d, kv, "key")) : "", &kl);
        if (k && kl > pl + 1 && !strncmp(k, e->prefix, pl) && k[pl] == '/') {
            if (type && !strcmp(type, "DELETE")) {
                sl__kv_del(&e->kvs, k + pl + 1);
            } else {
                const char *v64 = sl_json_str(sl_json_get(&d, kv, "value"));
                char *v = sl__b64_dec(v64 ? v64 : "", &vl);
                if (v && !sl__kv_put(&e->kvs, k + pl + 1, v, vl)) free(v);
            }
        }
        free(k);
    }
    if (rev > e->rev) e->rev = rev;
    if (sl_json_len(evs)) changed(e);
    yaml_document_delete(&d.doc);
}

static void on_watch_done(sl_ec_t *c, const char *err) {
    sl_etcd_t *e = c->ud;
    e->watch = NULL;
    went_down(e, err ? err : "the watch ended");
}

static void on_progress_done(sl_ec_t *c, const char *err) {
    sl_etcd_t *e = c->ud;
    e->probe = NULL;
    if (err) return went_down(e, err);
    sl_jdoc_t d;
    if (!sl_json_parse(&d, c->body.p, c->body.len)) return;
    long long rev = sl_json_int(sl_json_get(&d, sl_json_get(&d, d.root, "header"), "revision"));
    yaml_document_delete(&d.doc);
    if (rev && rev < e->rev) {
        sl_log_warn("etcd: revision went backwards (%lld < %lld): etcd was wiped or restored; reading %s again", rev,
                    e->rev, e->prefix);
        stop_calls(e);
        start_read(e);
    }
}

/* The gateway takes one watch request per stream, so an idle watch cannot be asked for
 * progress on the stream: a count-only read every 2 s checks that etcd answers and that
 * its revision did not go backwards. */
static void on_progress(uv_timer_t *t) {
    sl_etcd_t *e = t->data;
    if (e->probe || !e->watch) return;
    sl_wbuf_t b = {0};
    sl__etcd_range_body(e->prefix, true, &b);
    e->probe = sl__ec_post(e->loop, e->endpoints[e->ep], "/v3/kv/range", b.p ? b.p : "{}", e->token, e->timeout_ms,
                           on_progress_done, NULL, e);
    free(b.p);
}

static void start_watch(sl_etcd_t *e) {
    sl_wbuf_t b = {0}, r = {0};
    sl__etcd_range_body(e->prefix, false, &r);
    /* {"key":..,"range_end":..} -> a create_request from rev + 1 */
    if (r.p && r.len > 2) {
        r.p[r.len - 1] = 0;
        sl_wbuf_printf(&b, "{\"create_request\":%s,\"start_revision\":\"%lld\",\"progress_notify\":true}}", r.p,
                      e->rev + 1);
    }
    free(r.p);
    e->watch = sl__ec_post(e->loop, e->endpoints[e->ep], "/v3/watch", b.p ? b.p : "{}", e->token, e->timeout_ms,
                           on_watch_done, on_watch_line, e);
    free(b.p);
    if (!e->watch) return went_down(e, "cannot start the watch");
    uv_timer_start(&e->progress, on_progress, PROGRESS_MS, PROGRESS_MS);
}

static void on_read_done(sl_ec_t *c, const char *err) {
    sl_etcd_t *e = c->ud;
    e->call = NULL;
    if (err) return went_down(e, err);
    sl_ekvset_t s = {0};
    long long rev = 0;
    if (!sl__kv_from_range(&s, &rev, e->prefix, c->body.p, c->body.len)) {
        sl__kv_clear(&s);
        return went_down(e, "unreadable range answer");
    }
    e->full_reads++;
    e->backoff_ms = 0;
    set_up(e, true, NULL);
    sl__kv_clear(&e->kvs);
    e->kvs = s;
    e->rev = rev;
    uv_timer_stop(&e->debounce);
    apply(e); /* a full read is applied at once (unchanged content: nothing happens) */
    if (!e->closing) start_watch(e);
}

static void on_auth_done(sl_ec_t *c, const char *err) {
    sl_etcd_t *e = c->ud;
    e->call = NULL;
    if (err) return went_down(e, err);
    sl_jdoc_t d;
    if (sl_json_parse(&d, c->body.p, c->body.len)) {
        const char *tok = sl_json_str(sl_json_get(&d, d.root, "token"));
        snprintf(e->token, sizeof e->token, "%s", tok ? tok : "");
        yaml_document_delete(&d.doc);
    }
    if (!e->token[0]) return went_down(e, "authentication answered no token");
    start_read(e);
}

static void start_read(sl_etcd_t *e) {
    if (e->closing) return;
    stop_calls(e);
    sl_wbuf_t b = {0};
    if (e->user && !e->token[0]) {
        sl__eb_puts(&b, "{\"name\":"), sl__json_quote(&b, e->user), sl__eb_puts(&b, ",\"password\":"),
            sl__json_quote(&b, e->pass), sl__eb_puts(&b, "}");
        e->call = sl__ec_post(e->loop, e->endpoints[e->ep], "/v3/auth/authenticate", b.p ? b.p : "{}", NULL,
                              e->timeout_ms, on_auth_done, NULL, e);
    } else {
        sl__etcd_range_body(e->prefix, false, &b);
        e->call = sl__ec_post(e->loop, e->endpoints[e->ep], "/v3/kv/range", b.p ? b.p : "{}", e->token, e->timeout_ms,
                              on_read_done, NULL, e);
    }
    if (b.p) explicit_bzero(b.p, b.len);
    free(b.p);
    if (!e->call) went_down(e, "cannot reach the endpoint");
}

/* ---- the server's side ---- */

static void copy_conf(sl_etcd_t *e, const sl_source_conf_t *s) {
    e->nendpoints = s->nendpoints;
    e->endpoints = calloc(s->nendpoints, sizeof(char *));
    for (size_t i = 0; e->endpoints && i < s->nendpoints; i++) e->endpoints[i] = strdup(s->endpoints[i]);
    e->prefix = strdup(s->prefix ? s->prefix : "/sluice");
    e->snapshot = s->snapshot ? strdup(s->snapshot) : NULL;
    e->user = s->username ? strdup(s->username) : NULL;
    e->pass = s->password ? strdup(s->password) : NULL;
    e->timeout_ms = s->timeout_ms;
    if (e->snapshot)
        snprintf(e->pbase, sizeof e->pbase, "%s.plugins", e->snapshot);
    else
        snprintf(e->pbase, sizeof e->pbase, "%s/sluice-etcd-%d", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp",
                 (int)getpid());
}

sl_config_t *sl_etcd_boot(sl_config_t *local) {
    sl_etcd_t *e = &g_etcd;
    copy_conf(e, &local->source);
    g_owner.on = local->run_user != NULL;
    g_owner.uid = local->run_uid;
    g_owner.gid = local->run_gid;
    size_t len = 0, tl = 0;
    char *snap = e->snapshot ? sl__etcd_read_file(e->snapshot, &len) : NULL;
    if (!snap) {
        sl_log_info("etcd: no snapshot%s%s: /ready answers 503 until etcd gives a config", e->snapshot ? " at " : "",
                    e->snapshot ? e->snapshot : "");
        return local;
    }
    char *text = sl__etcd_read_file(local->path, &tl);
    sl_config_t *cfg = NULL;
    sl_errors_t errs = {0};
    if (text && sl__kv_from_range(&e->kvs, &e->rev, e->prefix, snap, len) &&
        build(e->prefix, e->pbase, &e->kvs, local->path, text, tl, &cfg, &errs) == 0) {
        sl_log_info("etcd: serving the snapshot %s (revision %lld) until etcd answers", e->snapshot, e->rev);
        e->ready = true;
        e->have_built = true;
        e->built_hash = sl__kv_hash(&e->kvs);
        sl_config_free(local);
    } else {
        for (size_t i = 0; i < errs.n; i++) sl_log_err("etcd snapshot %s: %s", e->snapshot, errs.lines[i]);
        sl__kv_clear(&e->kvs);
        e->rev = 0;
        cfg = local;
    }
    sl_errors_free(&errs);
    free(text);
    free(snap);
    return cfg;
}

void sl_etcd_attach(sl_server_t *srv) {
    sl_etcd_t *e = &g_etcd;
    if (!e->nendpoints) return;
    e->srv = srv;
    e->loop = srv->loop;
    srv->etcd = e;
    uv_timer_init(e->loop, &e->retry);
    uv_timer_init(e->loop, &e->debounce);
    uv_timer_init(e->loop, &e->progress);
    e->retry.data = e->debounce.data = e->progress.data = e;
    e->attached = true;
    start_read(e);
}

void sl_etcd_close(sl_server_t *srv) {
    sl_etcd_t *e = srv->etcd;
    if (!e || e->closing) return;
    e->closing = true;
    stop_calls(e);
    uv_close((uv_handle_t *)&e->retry, NULL);
    uv_close((uv_handle_t *)&e->debounce, NULL);
    uv_close((uv_handle_t *)&e->progress, NULL);
}

int sl__etcd_build(sl_etcd_t *e, const char *path, const char *text, size_t len, sl_config_t **out, sl_errors_t *errs) {
    return build(e->prefix, e->pbase, &e->kvs, path, text, len, out, errs);
}

uint64_t sl__etcd_hash(const sl_etcd_t *e) { return sl__kv_hash(&e->kvs); }

bool sl_etcd_ready(const sl_etcd_t *e) { return !e || e->ready; }

char *sl_etcd_status(const sl_etcd_t *e) {
    if (!e) return NULL;
    sl_wbuf_t b = {0};
    sl_wbuf_printf(&b, ",\"config_source\":{\"kind\":\"etcd\",\"endpoint\":");
    sl__json_quote(&b, e->endpoints[e->ep]);
    sl__eb_puts(&b, ",\"prefix\":");
    sl__json_quote(&b, e->prefix);
    time_t since = (time_t)(e->since_ms / 1000);
    struct tm tm;
    char ts[40] = "";
    if (e->since_ms) strftime(ts, sizeof ts, "%Y-%m-%dT%H:%M:%SZ", gmtime_r(&since, &tm));
    sl_wbuf_printf(&b,
                  ",\"up\":%s,\"since\":\"%s\",\"revision\":%lld,\"applied_revision\":%lld,\"ready\":%s,"
                  "\"applied\":%llu,\"rejected\":%llu,\"full_reads\":%llu,\"compactions\":%llu,\"last_error\":",
                  e->up ? "true" : "false", ts, e->rev, e->applied_rev, e->ready ? "true" : "false",
                  (unsigned long long)e->applied, (unsigned long long)e->rejected, (unsigned long long)e->full_reads,
                  (unsigned long long)e->compactions);
    if (e->last_error[0]) /* several errors, a line each */
        sl__json_quote(&b, e->last_error);
    else
        sl__eb_puts(&b, "null");
    sl__eb_puts(&b, "}");
    return b.p;
}

char *sl_etcd_metrics(const sl_etcd_t *e) {
    if (!e) return NULL;
    sl_wbuf_t b = {0};
    sl_wbuf_printf(&b,
                  "# HELP sluice_config_source_up 1 while the config source (etcd) answers, else 0.\n"
                  "# TYPE sluice_config_source_up gauge\nsluice_config_source_up %d\n"
                  "# HELP sluice_config_source_revision The etcd revision the gateway has seen.\n"
                  "# TYPE sluice_config_source_revision gauge\nsluice_config_source_revision %lld\n",
                  e->up ? 1 : 0, e->rev);
    return b.p;
}
