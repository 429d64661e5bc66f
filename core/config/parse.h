/* parse.h — what the files of the config parser share (internal to core/config/).
 *
 * config.c holds error lines, sl_config_load and sl_config_free (it needs none of this);
 * root.c sl_config_parse and the top-level mapping; parse.c the walk's toolkit (the
 * context, key tables, typed values); one file per section parses it: listeners.c,
 * upstreams.c, routes.c, plugins.c, consumers.c, tls_conf.c (the `tls:` sections) and
 * root.c (the top-level mapping and the process keys). Every parse function records its
 * errors in the context and never stops the walk.
 */
#ifndef SL_CONFIG_PARSE_H
#define SL_CONFIG_PARSE_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <yaml.h>

#include "base/wbuf.h"
#include "config/config.h"

#define MAX_PLUGIN_JSON (1u << 20)  /* bounds alias expansion ("billion laughs") too */
#define MAX_JSON_DEPTH 32           /* also stops recursive aliases (&a [ *a ]) */
#define MAX_NAME_LEN 64             /* names become metric labels and log fields */
/* The route label of requests no route matched (metrics.c): no route may be named so, or
 * its series and theirs would be one label set twice (a scrape Prometheus refuses). */
#define SL_ROUTE_NONE "none"
#define SL_ROUTE_NONE_MSG                                                                    \
    "route name 'none' is reserved: the metrics label requests that matched no route with " \
    "route=\"none\""
#define MAX_WORKERS 1024
#define AUTO_WORKERS_CAP 64
#define MAX_WEIGHT 1000000 /* keeps the sum of an upstream's weights far from overflow */
#define MAX_KEEPALIVE_IDLE 100000
#define MAX_RETRY_BODY (64ull * 1024 * 1024) /* a replay buffer per request in flight */

typedef struct {
    int line, col;
    size_t seq; /* keeps errors at the same position in the order they were found */
    char *msg;
} sl__cx_err_t;

typedef struct {
    yaml_document_t *doc;
    sl_config_t *cfg;
    sl__cx_err_t *errs;
    size_t nerrs, cap;
    bool oom;
    bool composed; /* the local file with a source's entries appended (sl_config_parse_composed) */
    /* Values whose ${VAR} could not be replaced: their error is said once, so the checks
     * that would trip on the raw text stay quiet (env.c). */
    const yaml_node_t *env_bad[32];
    size_t nenv_bad;
    uint32_t *route_names; /* routes.c's duplicate-name table (route index + 1); freed with cx */
    /* The top level's `routes` sequence and whether `lua_routes` is set, known before the
     * upstreams are parsed: an upstream an http route (may) name is not tcp-only. */
    const yaml_node_t *routes_node;
    bool lua_routes;
    size_t route_names_cap;
} sl__cx_t;

typedef struct {
    const char *name;
    yaml_node_t *key; /* NULL when absent */
    yaml_node_t *val; /* NULL when absent or written as null */
} sl__field_t;

typedef bool (*sl__str_check_fn)(sl__cx_t *cx, const yaml_node_t *v, char *s);


#define PATH_MAX_LEN 512 /* the longest key path in positions_json */

/* ---- root.c ---- */
/* Records the parser's error (a syntax error at its line and column). */
void sl__cfg_yaml_error(sl__cx_t *cx, const yaml_parser_t *p, const char *text, size_t len);
/* qsort order of errors: line, column, then the order found. */
int sl__cfg_cmp_err(const void *a, const void *b);

/* ---- parse.c ---- */
/* Fills out->ss/len from s, or returns -1 with *why set to a static explanation. */
int sl__cfg_parse_addr(const char *s, sl_addr_t *out, const char **why);
uint16_t sl__cfg_addr_port(const sl_addr_t *a);
bool sl__cfg_addr_same(const sl_addr_t *a, const sl_addr_t *b);
void sl__cx_at(sl__cx_t *cx, int line, int col, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
int sl__cfg_line_of(const yaml_node_t *n);
int sl__cfg_col_of(const yaml_node_t *n);
/** Records an error at node n (1:1 when n is NULL). */
void sl__cx_err(sl__cx_t *cx, const yaml_node_t *n, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void *sl__cx_calloc(sl__cx_t *cx, size_t n, size_t size);
char *sl__cx_strdup(sl__cx_t *cx, const char *s);
yaml_node_t *sl__cfg_get_node(sl__cx_t *cx, int index);
const char *sl__cfg_sval(const yaml_node_t *n);
bool sl__cfg_scalar_eq(const yaml_node_t *a, const yaml_node_t *b);
/* Whether scalar n is exactly s (a key "name\0x" is not "name"). */
bool sl__cfg_scalar_is(const yaml_node_t *n, const char *s);
bool sl__cfg_is_plain(const yaml_node_t *n);
/* `key:`, `key: ~` and `key: null` mean "not set"; a quoted "" is an empty string. */
bool sl__cfg_is_null(const yaml_node_t *n);
size_t sl__cfg_seq_len(const yaml_node_t *n);
yaml_node_t *sl__cfg_seq_at(sl__cx_t *cx, const yaml_node_t *n, size_t i);
/* Reports a repeated key in `map` (YAML forbids them; libyaml does not check). */
bool sl__cfg_dup_key(sl__cx_t *cx, const yaml_node_t *map, const yaml_node_pair_t *pair,
                    const yaml_node_t *key);
/**
 * Sorts the pairs of `map` into f[0..n) by the key names in `names`; every other key is an
 * error, worded differently for the keys in `later` (named by the design, not built yet).
 */
void sl__cfg_scan_map(sl__cx_t *cx, const yaml_node_t *map, const char *where,
                      const char *const *names, sl__field_t *f, size_t n, const char *const *later);
/* scan_map for the mapping under `key` of an item, named "'key' of WHERE" in errors. */
void sl__cfg_scan_sub(sl__cx_t *cx, const yaml_node_t *map, const char *key, const char *where,
                      const char *const *names, sl__field_t *f, size_t n);
/* The value of a required field, or NULL after an error at the mapping or the key. */
yaml_node_t *sl__cfg_required(sl__cx_t *cx, const yaml_node_t *map, const sl__field_t *f,
                             const char *where);
/* "listener 'web'" when the item has a usable name, else "listeners[2]". */
void sl__cfg_describe(sl__cx_t *cx, const yaml_node_t *map, const char *kind, const char *list,
                     size_t idx, char *buf, size_t size);
bool sl__cfg_want_type(sl__cx_t *cx, const yaml_node_t *v, yaml_node_type_t type, const char *key);
/* A scalar as a NUL-terminated string; a NUL inside it (from a "\0" escape) is an error. */
const char *sl__cfg_get_text(sl__cx_t *cx, const yaml_node_t *v, const char *key, const char *what);
bool sl__cfg_get_string(sl__cx_t *cx, const yaml_node_t *v, const char *key, char **out);
/* Only true and false: YAML 1.1's yes/no/on/off are exactly the surprises to avoid. */
bool sl__cfg_get_bool(sl__cx_t *cx, const yaml_node_t *v, const char *key, bool *out);
/* A plain decimal integer in [min, max]; quoted "5" is a string, not an integer. */
bool sl__cfg_get_int(sl__cx_t *cx, const yaml_node_t *v, const char *key, int64_t min, int64_t max,
                    int64_t *out);
bool sl__cfg_get_duration(sl__cx_t *cx, const yaml_node_t *v, const char *key, bool allow_zero,
                         uint64_t *out);
bool sl__cfg_get_size(sl__cx_t *cx, const yaml_node_t *v, const char *key, uint64_t min,
                      uint64_t max, uint64_t *out);
/* A plain decimal number in [min, max] ("0.5", "1", "2.25"). */
bool sl__cfg_get_number(sl__cx_t *cx, const yaml_node_t *v, const char *key, double min, double max,
                       double *out);
bool sl__cfg_get_addr(sl__cx_t *cx, const yaml_node_t *v, const char *key, bool target,
                      sl_addr_t *out);
bool sl__cfg_name_char(char c, bool dot);
/* Names become metric labels, log fields and (for plugins) file names: keep them plain. */
bool sl__cfg_get_name(sl__cx_t *cx, const yaml_node_t *v, const char *kind, bool dot, char **out);
/* RFC 9110 token characters, for methods and header names. */
bool sl__cfg_is_token(const char *s);
/* The length of the list in f->val, or false after a type error. */
bool sl__cfg_list_len(sl__cx_t *cx, const sl__field_t *f, size_t *len);
/* Item i of the list in f->val when it is a mapping, else NULL after a type error. */
const yaml_node_t *sl__cfg_list_map(sl__cx_t *cx, const sl__field_t *f, size_t i);
void sl__cfg_get_str_list(sl__cx_t *cx, const sl__field_t *f, sl__str_check_fn check, char ***out,
                          size_t *n);
/* A file named in the config: relative paths are relative to the config file's folder
 * (the embedded default's: the working directory); a relative path that names no file
 * there but does from the working directory is taken from the working directory (so
 * `cert: conf/test.crt` in conf/sluice.yaml works when sluice runs from the project). */
char *sl__cfg_resolve_path(sl__cx_t *cx, const char *rel);

/* ---- plugins.c ---- */
bool sl__cfg_jb_put(sl__cx_t *cx, sl_wbuf_t *b, const void *s, size_t n);
bool sl__cfg_json_node(sl__cx_t *cx, sl_wbuf_t *b, sl_wbuf_t *pos, char *path, size_t plen,
                      const yaml_node_t *n, int depth);
void sl__cfg_parse_plugins(sl__cx_t *cx, const sl__field_t *f, const char *owner,
                           sl_plugin_conf_t **out, size_t *n);

/* ---- tls_conf.c ---- */
/* `owner` names the listener in errors ("listener 'web'"). */
void sl__cfg_parse_tls(sl__cx_t *cx, const yaml_node_t *m, const char *owner, sl_listener_conf_t *l);
/* An error at every mtls-auth plugin when no http listener has tls.client_auth. */
void sl__cfg_check_mtls_users(sl__cx_t *cx);
/* A target's `tls:` (a mapping, or `true` for the defaults). */
void sl__cfg_parse_target_tls(sl__cx_t *cx, const yaml_node_t *v, const char *where,
                              sl_target_conf_t *t);

/* ---- listeners.c ---- */
/* The lookup table of sl_sni_route: exact names sorted for a binary search, then the
 * wildcards' suffixes longest first. After the upstream names were resolved. */
void sl__cfg_build_sni_names(sl__cx_t *cx, sl_listener_conf_t *l);
void sl__cfg_parse_listener(sl__cx_t *cx, const yaml_node_t *m, size_t idx);
bool sl__cfg_check_sni(sl__cx_t *cx, const yaml_node_t *v, char *s);

/* ---- upstreams.c ---- */
void sl__cfg_parse_upstream(sl__cx_t *cx, const yaml_node_t *m, size_t idx);

/* ---- routes.c ---- */
bool sl__cfg_check_host(sl__cx_t *cx, const yaml_node_t *v, char *s);
int sl__cfg_find_upstream(const sl_config_t *cfg, const char *s);
void sl__cfg_parse_route(sl__cx_t *cx, const yaml_node_t *m, size_t idx);

/* ---- consumers.c ---- */
void sl__cfg_parse_consumer(sl__cx_t *cx, const yaml_node_t *m, size_t idx);
/* Two consumers may not share a key-auth key or a basic-auth username: the plugin could
 * not tell them apart. */
void sl__cfg_check_consumer_credentials(sl__cx_t *cx, const yaml_node_t *list);

/* ---- env.c ---- */
/* Replaces ${VAR} and ${VAR:-default} in every scalar but single-quoted ones, in place;
 * an unset variable without a default is an error at its line and column. */
void sl__cfg_expand_env(sl__cx_t *cx, yaml_document_t *doc);

/* ---- root.c ---- */
/* sl_config_parse; SL__PARSE_PARTIAL: with errors, *out is still the tree as far as it
 * parsed; SL__PARSE_COMPOSED: a local file with a config source's entries appended. */
enum { SL__PARSE_PARTIAL = 1, SL__PARSE_COMPOSED = 2 };
int sl__config_parse(const char *path, const char *text, size_t len, sl_config_t **out,
                     sl_errors_t *errs, unsigned flags);
void sl__cfg_parse_root(sl__cx_t *cx, const yaml_node_t *root);

#endif
