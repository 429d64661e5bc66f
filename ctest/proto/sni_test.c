/* sni_test.c — unit tests for core/proto/sni.c: real ClientHellos made by OpenSSL (TLS 1.3
 * and 1.2, with and without SNI) read at every split point and re-fragmented over many TLS
 * records, hand-built ones at the 16 KiB bound, every malformed form refused, the lookup
 * over a hand-built table, and the sni_routes precedence (exact, longest wildcard,
 * default) over configs parsed for real (config.h's sl_sni_route over the table the
 * config builds); the server_name extension's body alone (sl_sni_server_name).
 *
 *   sni_test [name-substring]
 */
#include "proto/sni.h"

#include <openssl/bio.h>
#include <openssl/ssl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "base/common.h"
#include "config/config.h" /* test_route: tables built by the config */

#define CHECK_STRN(a, alen, b)                                                                      \
    do {                                                                                           \
        size_t al_ = (alen), bl_ = strlen(b);                                                      \
        if (al_ == bl_ && memcmp((a), (b), al_) == 0)                                              \
            passed++;                                                                              \
        else {                                                                                     \
            failed++;                                                                              \
            fprintf(stderr, "%s:%d: %s == %s failed: \"%.*s\" != \"%s\"\n", __FILE__, __LINE__,   \
                    #a, #b, (int)al_, (a), (b));                                                   \
        }                                                                                          \
    } while (0)

typedef struct {
    uint8_t p[4 * SL_SNI_MAX_HELLO];
    size_t len;
} bytes_t;

/* The first flight of an OpenSSL client: its ClientHello records, exactly as sent. */
static void openssl_hello(const char *sni, int max_version, bytes_t *out) {
    SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
    if (max_version) SSL_CTX_set_max_proto_version(ctx, max_version);
    SSL *ssl = SSL_new(ctx);
    BIO *rb = BIO_new(BIO_s_mem()), *wb = BIO_new(BIO_s_mem());
    SSL_set_bio(ssl, rb, wb);
    if (sni) SSL_set_tlsext_host_name(ssl, sni);
    SSL_set_connect_state(ssl);
    CHECK_INT(SSL_do_handshake(ssl), -1); /* it waits for the server */
    int n = BIO_read(wb, out->p, (int)sizeof out->p);
    CHECK(n > 0);
    out->len = n > 0 ? (size_t)n : 0;
    SSL_free(ssl);
    SSL_CTX_free(ctx);
}

/* The handshake message of a single-record hello (its record header taken off). */
static void message_of(const bytes_t *rec, bytes_t *msg) {
    size_t rlen = (size_t)rec->p[3] << 8 | rec->p[4];
    CHECK_INT(rec->len, 5 + rlen);
    memcpy(msg->p, rec->p + 5, rlen);
    msg->len = rlen;
}

/* msg cut into TLS handshake records of `frag` bytes (the last one shorter). */
static void records_of(const bytes_t *msg, size_t frag, bytes_t *out) {
    out->len = 0;
    for (size_t at = 0; at < msg->len; at += frag) {
        size_t n = SL_MIN(frag, msg->len - at);
        uint8_t *h = out->p + out->len;
        h[0] = 22, h[1] = 3, h[2] = 1, h[3] = (uint8_t)(n >> 8), h[4] = (uint8_t)n;
        memcpy(h + 5, msg->p + at, n);
        out->len += 5 + n;
    }
}

/* A ClientHello built by hand: server_name `sni` (NULL: none) and a padding extension of
 * `pad` bytes, to reach any size. */
static void built_hello(const char *sni, size_t pad, bytes_t *msg) {
    uint8_t *p = msg->p;
    size_t n = 4;
    p[n++] = 3, p[n++] = 3;               /* legacy_version */
    memset(p + n, 0xab, 32), n += 32;     /* random */
    p[n++] = 0;                           /* session_id */
    p[n++] = 0, p[n++] = 2, p[n++] = 0x13, p[n++] = 0x01; /* one cipher suite */
    p[n++] = 1, p[n++] = 0;               /* compression: null */
    size_t ext_at = n;
    n += 2;
    if (sni) {
        size_t sl = strlen(sni);
        p[n++] = 0, p[n++] = 0;                                    /* server_name */
        p[n++] = (uint8_t)((sl + 5) >> 8), p[n++] = (uint8_t)(sl + 5);
        p[n++] = (uint8_t)((sl + 3) >> 8), p[n++] = (uint8_t)(sl + 3); /* list */
        p[n++] = 0;                                                /* host_name */
        p[n++] = (uint8_t)(sl >> 8), p[n++] = (uint8_t)sl;
        memcpy(p + n, sni, sl), n += sl;
    }
    if (pad) {
        p[n++] = 0, p[n++] = 21; /* padding */
        p[n++] = (uint8_t)(pad >> 8), p[n++] = (uint8_t)pad;
        memset(p + n, 0, pad), n += pad;
    }
    size_t ext = n - ext_at - 2;
    p[ext_at] = (uint8_t)(ext >> 8), p[ext_at + 1] = (uint8_t)ext;
    size_t body = n - 4;
    p[0] = 1, p[1] = (uint8_t)(body >> 16), p[2] = (uint8_t)(body >> 8), p[3] = (uint8_t)body;
    msg->len = n;
}

/* sl_sni_parse of p[0..len): the return code, and the name in name/nlen. */
static char name[SL_SNI_NAME_MAX];
static size_t nlen;
static const char *err;
static int parse(const uint8_t *p, size_t len) { return sl_sni_parse(p, len, name, &nlen, &err); }

/* Every prefix is a valid beginning, the whole is the hello: so every split of it over
 * reads (the parser sees what has come so far) gives the same answer. */
static void check_every_prefix(const bytes_t *b, const char *want) {
    size_t bad = 0;
    for (size_t k = 0; k < b->len; k++)
        if (parse(b->p, k) != SL_EAGAIN) {
            if (!bad++) fprintf(stderr, "prefix %zu of %zu: %s\n", k, b->len, err ? err : "(ok)");
        }
    CHECK_INT(bad, 0);
    CHECK_INT(parse(b->p, b->len), SL_OK);
    CHECK_STRN(name, nlen, want);
}

static void test_openssl_hellos(void) {
    bytes_t b;
    openssl_hello("A.Example.COM", 0, &b);
    CHECK(b.len > 200);
    check_every_prefix(&b, "a.example.com");
    openssl_hello("b.test", TLS1_2_VERSION, &b);
    check_every_prefix(&b, "b.test");
    openssl_hello(NULL, 0, &b);
    check_every_prefix(&b, "");
    /* an absolute name (a trailing dot) is the same host name; two dots are not a name */
    openssl_hello("A.Test.", 0, &b);
    check_every_prefix(&b, "a.test");
    openssl_hello("a.test..", 0, &b);
    CHECK_INT(parse(b.p, b.len), SL_ERROR);
    /* what follows the hello (a client's early data, say) is not looked at */
    openssl_hello("a.test", 0, &b);
    memcpy(b.p + b.len, "\x17\x03\x03\x00\x05hello", 10);
    CHECK_INT(parse(b.p, b.len + 10), SL_OK);
    CHECK_STRN(name, nlen, "a.test");
}

static void test_many_records(void) {
    bytes_t rec, msg, b;
    openssl_hello("many.records.test", 0, &rec);
    message_of(&rec, &msg);
    static const size_t frags[] = {1, 2, 3, 4, 5, 7, 64, 100, 511};
    for (size_t i = 0; i < SL_ARRAY_LEN(frags); i++) {
        records_of(&msg, frags[i], &b);
        if (frags[i] == 1 || frags[i] == 3 || frags[i] == 100)
            check_every_prefix(&b, "many.records.test");
        CHECK_INT(parse(b.p, b.len), SL_OK);
        CHECK_STRN(name, nlen, "many.records.test");
    }
    /* the same bytes with one record more at the end than the message needs: ignored */
    records_of(&msg, 100, &b);
    memcpy(b.p + b.len, "\x16\x03\x01\x00\x01\x0b", 6);
    CHECK_INT(parse(b.p, b.len + 6), SL_OK);
}

static void test_bounds(void) {
    bytes_t msg, b;
    /* the largest hello that fits: 16 KiB of records, two of them */
    size_t base;
    built_hello("big.test", 0, &msg);
    base = msg.len;
    size_t room = SL_SNI_MAX_HELLO - 2 * 5 - base - 4; /* two record headers, the padding ext header */
    built_hello("big.test", room, &msg);
    records_of(&msg, 8192, &b);
    CHECK_INT(b.len, SL_SNI_MAX_HELLO);
    CHECK_INT(parse(b.p, b.len), SL_OK);
    CHECK_STRN(name, nlen, "big.test");
    CHECK_INT(parse(b.p, b.len - 1), SL_EAGAIN);
    /* one byte more: refused, from the record header that says so on */
    built_hello("big.test", room + 1, &msg);
    records_of(&msg, 8192, &b);
    CHECK_INT(parse(b.p, b.len), SL_ERROR);
    CHECK_INT(parse(b.p, 8192 + 5 + 5), SL_ERROR);
    /* a handshake length beyond the bound is refused at once, in small records too */
    built_hello("big.test", 20000, &msg);
    records_of(&msg, 4, &b);
    CHECK_INT(parse(b.p, 9), SL_ERROR);
    /* a stream of small records never completing: refused at the bound, not buffered on */
    records_of(&msg, 1, &b);
    CHECK_INT(parse(b.p, SL_SNI_MAX_HELLO - 1), SL_ERROR); /* the header said too much already */
    /* a hello made of records whose header bytes fill the bound: refused when reached */
    bytes_t small;
    built_hello("x.test", 3000, &small);
    records_of(&small, 1, &b);
    CHECK(b.len > SL_SNI_MAX_HELLO);
    CHECK_INT(parse(b.p, SL_SNI_MAX_HELLO - 1), SL_EAGAIN);
    CHECK_INT(parse(b.p, b.len), SL_ERROR);
    /* the longest host_name, and one longer */
    char longname[300];
    memset(longname, 'a', sizeof longname);
    longname[SL_SNI_NAME_MAX] = 0;
    built_hello(longname, 0, &msg);
    records_of(&msg, 16384, &b);
    CHECK_INT(parse(b.p, b.len), SL_OK);
    CHECK_INT(nlen, SL_SNI_NAME_MAX);
    longname[SL_SNI_NAME_MAX] = 'a';
    longname[SL_SNI_NAME_MAX + 1] = 0;
    built_hello(longname, 0, &msg);
    records_of(&msg, 16384, &b);
    CHECK_INT(parse(b.p, b.len), SL_ERROR);
}

/* A copy of a built hello with byte `at` set to v, parsed whole. */
static int parse_with(const bytes_t *msg, size_t at, uint8_t v) {
    static bytes_t m, b;
    m = *msg;
    m.p[at] = v;
    records_of(&m, 16384, &b);
    return parse(b.p, b.len);
}

static void test_malformed(void) {
    /* not TLS: refused from the first byte that says so */
    CHECK_INT(parse((const uint8_t *)"G", 1), SL_ERROR);
    CHECK_INT(parse((const uint8_t *)"GET / HTTP/1.1\r\n\r\n", 18), SL_ERROR);
    CHECK_INT(parse((const uint8_t *)"\x16", 1), SL_EAGAIN);
    CHECK_INT(parse((const uint8_t *)"\x16\x02", 2), SL_ERROR);   /* SSL 2 / not TLS */
    CHECK_INT(parse((const uint8_t *)"\x80\x2e\x01", 3), SL_ERROR); /* an SSLv2-style hello */
    CHECK_INT(parse((const uint8_t *)"\x15\x03\x01\x00\x02\x02\x28", 7), SL_ERROR); /* an alert */
    CHECK_INT(parse((const uint8_t *)"\x16\x03\x01\x00\x00", 5), SL_ERROR);          /* empty record */
    CHECK_INT(parse((const uint8_t *)"\x16\x03\x01\x40\x01", 5), SL_ERROR);          /* 16385 */
    CHECK_INT(parse((const uint8_t *)"\x16\x03\x01\x00\x04\x02", 6), SL_ERROR);      /* ServerHello */
    CHECK_INT(parse((const uint8_t *)"", 0), SL_EAGAIN);
    CHECK_INT(parse((const uint8_t *)"\x16\x03\x01\x00\x04", 5), SL_EAGAIN);

    bytes_t msg, b;
    built_hello("ok.test", 0, &msg);
    records_of(&msg, 16384, &b);
    CHECK_INT(parse(b.p, b.len), SL_OK);
    /* offsets in built_hello: 4 version, 6 random, 38 session_id length, 39 cipher
     * length (2), 41 suite, 43 compression length, 44 method, 45 extensions length (2),
     * 47 ext type, 49 ext length, 51 list length, 53 name type, 54 name length, 56 name */
    CHECK_INT(parse_with(&msg, 4, 2), SL_ERROR);    /* version 2.x */
    CHECK_INT(parse_with(&msg, 38, 33), SL_ERROR);  /* session_id longer than 32 */
    CHECK_INT(parse_with(&msg, 40, 3), SL_ERROR);   /* odd cipher_suites length */
    CHECK_INT(parse_with(&msg, 40, 0), SL_ERROR);   /* no cipher suite */
    CHECK_INT(parse_with(&msg, 43, 0), SL_ERROR);   /* no compression method */
    CHECK_INT(parse_with(&msg, 46, 0xff), SL_ERROR); /* extensions past the end */
    CHECK_INT(parse_with(&msg, 46, 1), SL_ERROR);   /* extensions short of the end */
    CHECK_INT(parse_with(&msg, 50, 0xff), SL_ERROR); /* extension past its list */
    CHECK_INT(parse_with(&msg, 52, 0), SL_ERROR);   /* empty server name list */
    CHECK_INT(parse_with(&msg, 55, 0), SL_ERROR);   /* empty host_name */
    CHECK_INT(parse_with(&msg, 55, 99), SL_ERROR);  /* host_name past its list */
    CHECK_INT(parse_with(&msg, 56, ' '), SL_ERROR); /* not a host name */
    CHECK_INT(parse_with(&msg, 56, 0), SL_ERROR);
    CHECK_INT(parse_with(&msg, 56, '.'), SL_ERROR); /* an empty first label */
    CHECK_INT(parse_with(&msg, 57, '.'), SL_ERROR); /* "o..test" */
    CHECK_INT(parse_with(&msg, 53, 7), SL_OK);      /* an unknown name type is skipped */
    CHECK_INT(nlen, 0);
    CHECK_INT(parse_with(&msg, 0, 2), SL_ERROR);    /* not a ClientHello */
    CHECK_INT(parse_with(&msg, 1, 1), SL_ERROR);    /* longer than the bound */

    /* two server_name extensions */
    bytes_t two = msg;
    size_t ext = 47, elen = msg.len - ext;
    memcpy(two.p + msg.len, msg.p + ext, elen);
    two.len = msg.len + elen;
    size_t el = (size_t)two.p[45] << 8 | two.p[46];
    el += elen;
    two.p[45] = (uint8_t)(el >> 8), two.p[46] = (uint8_t)el;
    size_t body = two.len - 4;
    two.p[1] = (uint8_t)(body >> 16), two.p[2] = (uint8_t)(body >> 8), two.p[3] = (uint8_t)body;
    records_of(&two, 16384, &b);
    CHECK_INT(parse(b.p, b.len), SL_ERROR);

    /* a record of another type inside the hello's records */
    records_of(&msg, 10, &b);
    b.p[15] = 23;
    CHECK_INT(parse(b.p, b.len), SL_ERROR);
    /* a second handshake message after the hello in the same record */
    bytes_t more = msg;
    memcpy(more.p + more.len, "\x0b\x00\x00\x00", 4);
    more.len += 4;
    records_of(&more, 16384, &b);
    CHECK_INT(parse(b.p, b.len), SL_ERROR);

    /* no extensions at all (a TLS 1.0-era hello): no name, no error */
    bytes_t bare = msg;
    bare.len = 45;
    bare.p[1] = 0, bare.p[2] = 0, bare.p[3] = 41;
    records_of(&bare, 16384, &b);
    CHECK_INT(parse(b.p, b.len), SL_OK);
    CHECK_INT(nlen, 0);
}

/* Every byte of a real hello changed to a few values: any answer but a crash or an
 * overread (this runs under ASan in the sanitizer build), and a name only of host bytes. */
static void test_mutations(void) {
    bytes_t b, m;
    openssl_hello("mut.example.com", 0, &b);
    static const uint8_t vals[] = {0, 1, 0x7f, 0x80, 0xff};
    size_t bad = 0;
    for (size_t i = 0; i < b.len; i++)
        for (size_t k = 0; k < SL_ARRAY_LEN(vals); k++) {
            m = b;
            m.p[i] = vals[k];
            for (size_t cut = m.len; cut + 3 > m.len && cut > 0; cut--) {
                int rc = parse(m.p, cut);
                if (rc == SL_OK)
                    for (size_t j = 0; j < nlen; j++)
                        bad += !(name[j] == '.' || name[j] == '-' || name[j] == '_' ||
                                 (name[j] >= 'a' && name[j] <= 'z') || (name[j] >= '0' && name[j] <= '9'));
                else if (rc == SL_ERROR)
                    bad += err == NULL;
            }
        }
    CHECK_INT(bad, 0);
}

/* The pure lookup, no config: exact names sorted by (length, bytes), then wildcard
 * suffixes longest first, as sni.h asks. */
static void test_lookup(void) {
    static const sl_sni_name_t names[] = {
        {"b.test", 6, 1}, {"a.b.test", 8, 2}, {".deep.b.test", 12, 3}, {".b.test", 7, 4},
    };
    int r = -9;
    CHECK_INT(sl_sni_lookup(names, 2, 2, 0, "b.test", 6, &r), 1);
    CHECK_INT(r, SL_SNI_ROUTE);
    CHECK_INT(sl_sni_lookup(names, 2, 2, 0, "a.b.test", 8, &r), 2); /* exact over wildcard */
    CHECK_INT(sl_sni_lookup(names, 2, 2, 0, "x.deep.b.test", 13, &r), 3); /* longest wildcard */
    CHECK_INT(sl_sni_lookup(names, 2, 2, 0, "x.b.test", 8, &r), 4);
    CHECK_INT(r, SL_SNI_ROUTE);
    CHECK_INT(sl_sni_lookup(names, 2, 2, 0, "c.test", 6, &r), 0);
    CHECK_INT(r, SL_SNI_DEFAULT);
    CHECK_INT(sl_sni_lookup(names, 2, 2, -1, "", 0, &r), -1); /* no SNI, no fallback */
    CHECK_INT(r, SL_SNI_NO_ROUTE);
    CHECK_INT(sl_sni_lookup(NULL, 0, 0, 5, "b.test", 6, &r), 5); /* an empty table */
    CHECK_INT(r, SL_SNI_DEFAULT);
}

static sl_config_t *config(const char *yaml) {
    sl_config_t *cfg = NULL;
    sl_errors_t errs = {0};
    sl_config_parse("t.yaml", yaml, strlen(yaml), &cfg, &errs);
    for (size_t i = 0; i < errs.n; i++) fprintf(stderr, "    %s\n", errs.lines[i]);
    CHECK(cfg != NULL);
    sl_errors_free(&errs);
    return cfg;
}

static int route(const sl_listener_conf_t *l, const char *n, int *result) {
    return sl_sni_route(l, n, strlen(n), result);
}

static void test_route(void) {
    sl_config_t *cfg = config(
        "listeners:\n"
        "  - name: tls\n"
        "    listen: 127.0.0.1:0\n"
        "    protocol: tcp\n"
        "    upstream: dflt\n"
        "    sni_routes:\n"
        "      - { sni: [A.example.com, \"*.example.com\"], upstream: a }\n"
        "      - { sni: [\"*.deep.example.com\", z.example.org, b.example.org], upstream: b }\n"
        "      - { sni: [\"*.example.org\"], upstream: c }\n"
        "  - { name: nodefault, listen: 127.0.0.1:0, protocol: tcp,\n"
        "      sni_routes: [ { sni: [only.test], upstream: a } ] }\n"
        "upstreams:\n"
        "  - { name: dflt, targets: [ { address: 127.0.0.1:1 } ] }\n"
        "  - { name: a, targets: [ { address: 127.0.0.1:2 } ] }\n"
        "  - { name: b, targets: [ { address: 127.0.0.1:3 } ] }\n"
        "  - { name: c, targets: [ { address: 127.0.0.1:4 } ] }\n");
    if (!cfg) return;
    const sl_listener_conf_t *l = &cfg->listeners[0], *nd = &cfg->listeners[1];
    CHECK_INT(l->nsni_exact, 3);
    CHECK_INT(l->nsni_wild, 3);
    int r;
    CHECK_INT(route(l, "a.example.com", &r), 1); /* exact (written in capitals) */
    CHECK_INT(r, SL_SNI_ROUTE);
    CHECK_INT(route(l, "x.example.com", &r), 1); /* wildcard */
    CHECK_INT(route(l, "x.y.example.com", &r), 1); /* any depth */
    CHECK_INT(route(l, "x.deep.example.com", &r), 2); /* the longer wildcard wins */
    CHECK_INT(route(l, "deep.example.com", &r), 1);
    CHECK_INT(route(l, "z.example.org", &r), 2);   /* exact over wildcard */
    CHECK_INT(route(l, "b.example.org", &r), 2);
    CHECK_INT(route(l, "q.example.org", &r), 3);
    CHECK_INT(route(l, "example.org", &r), 0);     /* "*." needs a label before */
    CHECK_INT(r, SL_SNI_DEFAULT);
    CHECK_INT(route(l, "xexample.org", &r), 0);
    CHECK_INT(route(l, "", &r), 0);                /* no SNI */
    CHECK_INT(r, SL_SNI_DEFAULT);
    CHECK_INT(route(nd, "only.test", &r), 1);
    CHECK_INT(r, SL_SNI_ROUTE);
    CHECK_INT(route(nd, "other.test", &r), -1);
    CHECK_INT(r, SL_SNI_NO_ROUTE);
    CHECK_INT(route(nd, "", &r), -1);
    CHECK_INT(r, SL_SNI_NO_ROUTE);
    sl_config_free(cfg);
}

/* sl_sni_server_name: the extension's body as a TLS library hands it over (the
 * ClientHello callback of a TLS listener). */
static void test_server_name_ext(void) {
    char name[SL_SNI_NAME_MAX + 1];
    size_t n = 99;
    const uint8_t ok[] = {0, 9, 0, 0, 6, 'B', '.', 'T', 'e', 's', 't'};
    CHECK_INT(sl_sni_server_name(ok, sizeof ok, name, &n), SL_OK);
    CHECK_STRN(name, n, "b.test");
    const uint8_t other_type[] = {0, 5, 1, 0, 2, 'x', 'y'}; /* no host_name in the list */
    CHECK_INT(sl_sni_server_name(other_type, sizeof other_type, name, &n), SL_OK);
    CHECK_INT(n, 0);
    const uint8_t short_list[] = {0, 9, 0, 0, 6, 'b', '.'};
    CHECK_INT(sl_sni_server_name(short_list, sizeof short_list, name, &n), SL_ERROR);
    const uint8_t space[] = {0, 6, 0, 0, 3, 'a', ' ', 'b'};
    CHECK_INT(sl_sni_server_name(space, sizeof space, name, &n), SL_ERROR);
    CHECK_INT(sl_sni_server_name(ok, 0, name, &n), SL_ERROR);
}

static const check_test_t tests[] = {
    {"openssl_hellos", test_openssl_hellos}, {"many_records", test_many_records},
    {"bounds", test_bounds},                 {"malformed", test_malformed},
    {"mutations", test_mutations},           {"lookup", test_lookup},
    {"route", test_route},                   {"server_name_ext", test_server_name_ext},
};

int main(int argc, char **argv) { return check_main(tests, SL_ARRAY_LEN(tests), argc, argv); }
