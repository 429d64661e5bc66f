/* router_test.c — the route matcher (core/config/router.c): precedence between host
 * classes, prefixes, conditions and file order; methods beyond one bitset word; header
 * conditions against the first header of a name; Lua candidates and the cursor that
 * carries on after them; 10,000 routes. spec/sluice/router_diff_spec.lua compares it with
 * the Lua reference on random tables. */
#include "config/router.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/common.h"
#include "check.h"

#define L(...) ((const char *const[]){__VA_ARGS__})
#define N(...) (uint32_t)(sizeof((const char *const[]){__VA_ARGS__}) / sizeof(const char *))
#define HOSTS(...) .hosts = L(__VA_ARGS__), .nhosts = N(__VA_ARGS__)
#define PATHS(...) .paths = L(__VA_ARGS__), .npaths = N(__VA_ARGS__)
#define METHODS(...) .methods = L(__VA_ARGS__), .nmethods = N(__VA_ARGS__)
#define HEADERS(...) .headers = L(__VA_ARGS__), .nheaders = N(__VA_ARGS__) / 2

/* A request's header as the core's parsed head holds it: the router's fields, then more. */
typedef struct {
    sl_route_header_t h;
    uint64_t more;
} wide_header_t;

typedef struct {
    const char *host, *method, *path;
    wide_header_t headers[4];
    uint32_t nheaders;
} req_t;

/* The route (-1: none), with *strip; a Lua candidate says yes when `lua_yes` is true. */
static int match_lua(const sl_router_t *rt, const req_t *r, bool lua_yes, uint32_t *strip, int *asked) {
    sl_route_query_t q = {.host = r->host, .host_len = strlen(r->host), .method = r->method,
                          .method_len = strlen(r->method), .path = r->path, .path_len = strlen(r->path),
                          .headers = &r->headers[0].h, .nheaders = r->nheaders,
                          .header_stride = sizeof(wide_header_t)};
    sl_route_cursor_t c = {0};
    int idx;
    while ((idx = sl_router_next(rt, &q, &c)) >= 0 && c.lua) {
        if (asked) (*asked)++;
        if (lua_yes) break;
    }
    if (strip) *strip = idx >= 0 ? c.strip : 0;
    return idx;
}

static int match(const sl_router_t *rt, const char *host, const char *method, const char *path) {
    req_t r = {.host = host, .method = method, .path = path};
    return match_lua(rt, &r, false, NULL, NULL);
}

static sl_router_t *build(const sl_route_def_t *defs, size_t n) {
    const char *err = NULL;
    sl_router_t *rt = sl_router_build(defs, n, &err);
    CHECK(rt != NULL);
    if (!rt) fprintf(stderr, "    %s\n", err);
    return rt;
}

static void test_host_classes(void) {
    sl_route_def_t d[] = {
        {PATHS("/")},                                         /* 0: no host */
        {HOSTS("*.example.com"), PATHS("/")},                 /* 1 */
        {HOSTS("*.api.example.com"), PATHS("/deep")},         /* 2 */
        {HOSTS("api.example.com"), PATHS("/")},               /* 3 */
        {PATHS("/long/path")},                                /* 4 */
        {HOSTS("other.org", "127.0.0.1"), PATHS("/only")},    /* 5 */
    };
    sl_router_t *rt = build(d, SL_ARRAY_LEN(d));
    if (!rt) return;
    CHECK_INT(match(rt, "api.example.com", "GET", "/x"), 3);
    CHECK_INT(match(rt, "www.example.com", "GET", "/x"), 1);
    CHECK_INT(match(rt, "example.org", "GET", "/x"), 0);
    /* the host decides before the path's length */
    CHECK_INT(match(rt, "api.example.com", "GET", "/long/path/x"), 3);
    CHECK_INT(match(rt, "elsewhere", "GET", "/long/path/x"), 4);
    /* a class whose routes do not match falls through to the next */
    CHECK_INT(match(rt, "other.org", "GET", "/elsewhere"), 0);
    CHECK_INT(match(rt, "127.0.0.1", "GET", "/only/x"), 5);
    CHECK_INT(match(rt, "a.api.example.com", "GET", "/deep/x"), 2);
    CHECK_INT(match(rt, "a.api.example.com", "GET", "/shallow"), 1);
    /* any depth of subdomain, never the bare domain or a longer name ending alike */
    CHECK_INT(match(rt, "a.b.c.example.com", "GET", "/x"), 1);
    CHECK_INT(match(rt, "example.com", "GET", "/x"), 0);
    CHECK_INT(match(rt, "badexample.com", "GET", "/x"), 0);
    CHECK_INT(match(rt, ".example.com", "GET", "/x"), 0); /* the suffix alone is no subdomain */
    CHECK_INT(match(rt, "", "GET", "/x"), 0);
    sl_router_free(rt);
}

static void test_prefix_conditions_order(void) {
    sl_route_def_t d[] = {
        {PATHS("/api")},                                           /* 0 */
        {PATHS("/api/v2")},                                        /* 1 */
        {PATHS("/api/v2/users/")},                                 /* 2 */
        {PATHS("/c")},                                             /* 3 */
        {PATHS("/c"), METHODS("GET")},                             /* 4 */
        {PATHS("/c"), METHODS("GET"), HEADERS("X-Canary", "1")},   /* 5 */
        {PATHS("/same")},                                          /* 6 */
        {PATHS("/same")},                                          /* 7 */
        {PATHS("/p"), METHODS("GET"), HEADERS("X-A", "1")},        /* 8 */
        {PATHS("/p/q")},                                           /* 9 */
        {PATHS("/m1", "/m2/deeper")},                              /* 10 */
    };
    sl_router_t *rt = build(d, SL_ARRAY_LEN(d));
    if (!rt) return;
    CHECK_INT(match(rt, "h", "GET", "/api"), 0);
    CHECK_INT(match(rt, "h", "GET", "/apiary"), 0); /* a prefix of bytes, not of segments */
    CHECK_INT(match(rt, "h", "GET", "/api/v2"), 1);
    CHECK_INT(match(rt, "h", "GET", "/api/v2/users"), 1);
    CHECK_INT(match(rt, "h", "GET", "/api/v2/users/7"), 2);
    CHECK_INT(match(rt, "h", "GET", "/ap"), -1);
    CHECK_INT(match(rt, "h", "GET", "/c"), 4);
    CHECK_INT(match(rt, "h", "POST", "/c"), 3);
    CHECK_INT(match(rt, "h", "GET", "/same/x"), 6);
    /* a longer prefix beats more conditions */
    req_t r = {.host = "h", .method = "GET", .path = "/p/q/r", .nheaders = 1};
    r.headers[0].h = (sl_route_header_t){"X-A", 3, "1", 1};
    CHECK_INT(match_lua(rt, &r, false, NULL, NULL), 9);
    r.path = "/p/x";
    CHECK_INT(match_lua(rt, &r, false, NULL, NULL), 8);
    r.path = "/c";
    r.headers[0].h = (sl_route_header_t){"x-canary", 8, "1", 1};
    CHECK_INT(match_lua(rt, &r, false, NULL, NULL), 5);
    CHECK_INT(match(rt, "h", "GET", "/m2/deeper/x"), 10);
    CHECK_INT(match(rt, "h", "GET", "/m2"), -1);
    CHECK_INT(match(rt, "h", "GET", "*"), -1);
    sl_router_free(rt);
}

static void test_headers(void) {
    sl_route_def_t d[] = {
        {PATHS("/h"), HEADERS("X-Env", "canary", "X-Team", "a")}, /* 0 */
        {PATHS("/e"), HEADERS("X-Empty", "")},                    /* 1 */
    };
    sl_router_t *rt = build(d, SL_ARRAY_LEN(d));
    if (!rt) return;
    req_t r = {.host = "h", .method = "GET", .path = "/h", .nheaders = 3};
    r.headers[0].h = (sl_route_header_t){"x-team", 6, "a", 1};
    r.headers[1].h = (sl_route_header_t){"X-ENV", 5, "canary", 6};
    r.headers[2].h = (sl_route_header_t){"X-Env", 5, "prod", 4};
    CHECK_INT(match_lua(rt, &r, false, NULL, NULL), 0);
    /* the first header of a name is the one compared */
    r.headers[1].h.value = "prod", r.headers[1].h.value_len = 4;
    r.headers[2].h.value = "canary", r.headers[2].h.value_len = 6;
    CHECK_INT(match_lua(rt, &r, false, NULL, NULL), -1);
    r.headers[1].h.value = "canary", r.headers[1].h.value_len = 5; /* "canar" */
    CHECK_INT(match_lua(rt, &r, false, NULL, NULL), -1);
    req_t e = {.host = "h", .method = "GET", .path = "/e", .nheaders = 1};
    e.headers[0].h = (sl_route_header_t){"X-Empty", 7, "", 0};
    CHECK_INT(match_lua(rt, &e, false, NULL, NULL), 1);
    e.nheaders = 0; /* an empty value is not an absent header */
    CHECK_INT(match_lua(rt, &e, false, NULL, NULL), -1);
    sl_router_free(rt);
}

/* 70 distinct methods: the bitsets take two words. */
static void test_many_methods(void) {
    static char names[70][8];
    const char *all[70];
    for (int i = 0; i < 70; i++) {
        snprintf(names[i], sizeof names[i], "M%d", i);
        all[i] = names[i];
    }
    sl_route_def_t d[] = {
        {PATHS("/"), .methods = all, .nmethods = 64}, /* 0: M0..M63 */
        {PATHS("/"), .methods = all + 64, .nmethods = 6}, /* 1: M64..M69 */
        {PATHS("/")},                                 /* 2 */
    };
    sl_router_t *rt = build(d, SL_ARRAY_LEN(d));
    if (!rt) return;
    CHECK_INT(match(rt, "h", "M0", "/"), 0);
    CHECK_INT(match(rt, "h", "M63", "/"), 0);
    CHECK_INT(match(rt, "h", "M64", "/"), 1);
    CHECK_INT(match(rt, "h", "M69", "/"), 1);
    CHECK_INT(match(rt, "h", "M70", "/"), 2);
    CHECK_INT(match(rt, "h", "m0", "/"), 2); /* methods are case-sensitive */
    sl_router_free(rt);
}

static void test_lua_and_strip(void) {
    sl_route_def_t d[] = {
        {PATHS("/x"), .match_fn = 1},             /* 0 */
        {.match_fn = 1},                          /* 1: ranks like "/" plus a condition */
        {PATHS("/")},                             /* 2 */
        {PATHS("/svc/"), .strip_prefix = 1},      /* 3 */
        {},                                       /* 4: catch-all */
    };
    sl_router_t *rt = build(d, SL_ARRAY_LEN(d));
    if (!rt) return;
    uint32_t strip = 99;
    int asked = 0;
    req_t r = {.host = "h", .method = "GET", .path = "/x/y"};
    CHECK_INT(match_lua(rt, &r, true, &strip, &asked), 0);
    CHECK_INT(asked, 1);
    asked = 0;
    CHECK_INT(match_lua(rt, &r, false, &strip, &asked), 2); /* no from 0 and 1: then "/" */
    CHECK_INT(asked, 2);
    r.path = "/svc/a";
    asked = 0;
    CHECK_INT(match_lua(rt, &r, false, &strip, &asked), 3);
    CHECK_INT(strip, 5);
    CHECK_INT(asked, 0);
    r.path = "*";
    CHECK_INT(match_lua(rt, &r, true, &strip, NULL), 4); /* "/" routes do not match "*" */
    CHECK_INT(strip, 0);
    sl_router_free(rt);
}

/* 10,000 routes under shared stems (/r1/, /r10/, /r100/, ...) and hosts: each found by its
 * own path, the nearest shorter prefix for the paths between them. */
static void test_ten_thousand(void) {
    enum { N = 10000 };
    sl_route_def_t *d = calloc(N, sizeof *d);
    char (*paths)[16] = calloc(N, 16), (*hosts)[24] = calloc(N, 24);
    const char **pp = calloc(N, sizeof *pp), **hp = calloc(N, sizeof *hp);
    if (!d || !paths || !hosts || !pp || !hp) {
        CHECK(!"out of memory");
        goto out;
    }
    for (int i = 0; i < N; i++) {
        snprintf(paths[i], 16, "/r%d/", i);
        snprintf(hosts[i], 24, "%sh%d.test", i % 3 == 0 ? "*." : "", i);
        pp[i] = paths[i];
        hp[i] = hosts[i];
        d[i] = (sl_route_def_t){.paths = pp + i, .npaths = 1};
        if (i % 2) d[i].hosts = hp + i, d[i].nhosts = 1;
    }
    sl_router_t *rt = build(d, N);
    if (!rt) goto out;
    int wrong = 0;
    for (int i = 0; i < N; i++) {
        char path[32], host[32];
        snprintf(path, sizeof path, "/r%d/x", i);
        snprintf(host, sizeof host, i % 3 == 0 ? "a.h%d.test" : "h%d.test", i);
        wrong += match(rt, i % 2 ? host : "none", "GET", path) != i;
    }
    CHECK_INT(wrong, 0);
    CHECK_INT(match(rt, "none", "GET", "/r12"), -1);
    CHECK_INT(match(rt, "h1.test", "GET", "/r2/"), 2);  /* h1.test's own route is /r1/ only */
    CHECK_INT(match(rt, "h3.test", "GET", "/r3/"), -1); /* *.h3.test, not h3.test itself */
    sl_router_free(rt);
out:
    free(d), free(paths), free(hosts), free(pp), free(hp);
}

int main(int argc, char **argv) {
    static const check_test_t tests[] = {
        {"host_classes", test_host_classes},   {"prefix_conditions_order", test_prefix_conditions_order},
        {"headers", test_headers},             {"many_methods", test_many_methods},
        {"lua_and_strip", test_lua_and_strip}, {"ten_thousand", test_ten_thousand},
    };
    return check_main(tests, SL_ARRAY_LEN(tests), argc, argv);
}
