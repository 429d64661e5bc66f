/* proxy_protocol_test.c — unit tests for core/proxy_protocol.c: v1 and v2 headers parsed
 * whole and byte by byte, every malformed form refused (with the reason), headers encoded
 * and read back, the examples of HAProxy's proxy-protocol.txt, and CIDR trust.
 *
 *   proxy_protocol_test [name-substring]
 */
#include "proto/proxy_protocol.h"

#include <arpa/inet.h>
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "base/common.h"

static const uint8_t sig[12] = {0x0D, 0x0A, 0x0D, 0x0A, 0x00, 0x0D, 0x0A, 0x51, 0x55, 0x49, 0x54, 0x0A};

/* "1.2.3.4:5" / "[::1]:5" of an address, for comparisons. */
static const char *text(const sl_sockaddr_t *a) {
    static char bufs[4][64];
    static int k;
    char *out = bufs[k++ & 3], ip[INET6_ADDRSTRLEN];
    if (a->sa.sa_family == AF_INET) {
        inet_ntop(AF_INET, &a->in.sin_addr, ip, sizeof ip);
        snprintf(out, 64, "%s:%u", ip, ntohs(a->in.sin_port));
    } else if (a->sa.sa_family == AF_INET6) {
        inet_ntop(AF_INET6, &a->in6.sin6_addr, ip, sizeof ip);
        snprintf(out, 64, "[%s]:%u", ip, ntohs(a->in6.sin6_port));
    } else {
        snprintf(out, 64, "family %d", a->sa.sa_family);
    }
    return out;
}

static sl_sockaddr_t addr(const char *ip, uint16_t port) {
    sl_sockaddr_t a;
    memset(&a, 0, sizeof a);
    if (strchr(ip, ':')) {
        a.in6.sin6_family = AF_INET6;
        inet_pton(AF_INET6, ip, &a.in6.sin6_addr);
        a.in6.sin6_port = htons(port);
    } else {
        a.in.sin_family = AF_INET;
        inet_pton(AF_INET, ip, &a.in.sin_addr);
        a.in.sin_port = htons(port);
    }
    return a;
}

/* Parses h[0..n), and checks every prefix fed as bytes arrive: a prefix of a header asks
 * for more (SL_EAGAIN), so a header split across reads is never refused or cut short. */
static int parse_all(const uint8_t *h, size_t n, sl_pp_info_t *info, size_t *used, const char **err) {
    int whole = sl_pp_parse(h, n, info, used, err);
    size_t upto = whole == SL_OK ? *used : n;
    for (size_t k = 0; k < upto; k++) {
        sl_pp_info_t tmp;
        size_t u;
        const char *e = NULL;
        int rc = sl_pp_parse(h, k, &tmp, &u, &e);
        if (rc == SL_OK || (whole == SL_OK && rc != SL_EAGAIN)) {
            fprintf(stderr, "prefix of %zu bytes: %d (%s)\n", k, rc, e ? e : "");
            return SL_ERROR - 10;
        }
    }
    return whole;
}

static void test_v1_tcp4(void) {
    const char *h = "PROXY TCP4 192.168.0.1 192.168.0.11 56324 443\r\nGET / HTTP/1.1\r\n";
    sl_pp_info_t in;
    size_t used = 0;
    const char *err = NULL;
    CHECK_INT(parse_all((const uint8_t *)h, strlen(h), &in, &used, &err), SL_OK);
    CHECK_INT(used, strlen("PROXY TCP4 192.168.0.1 192.168.0.11 56324 443\r\n"));
    CHECK_INT(in.version, 1);
    CHECK(in.has_addr);
    CHECK_STR(text(&in.src), "192.168.0.1:56324");
    CHECK_STR(text(&in.dst), "192.168.0.11:443");
}

static void test_v1_tcp6_and_unknown(void) {
    const char *h = "PROXY TCP6 2001:db8::1 ::1 65535 0\r\n";
    sl_pp_info_t in;
    size_t used = 0;
    const char *err = NULL;
    CHECK_INT(parse_all((const uint8_t *)h, strlen(h), &in, &used, &err), SL_OK);
    CHECK_INT(used, strlen(h));
    CHECK_STR(text(&in.src), "[2001:db8::1]:65535");
    CHECK_STR(text(&in.dst), "[::1]:0");
    h = "PROXY UNKNOWN\r\n";
    CHECK_INT(parse_all((const uint8_t *)h, strlen(h), &in, &used, &err), SL_OK);
    CHECK_INT(used, strlen(h));
    CHECK(!in.has_addr);
    /* UNKNOWN: the receiver ignores whatever follows on the line */
    h = "PROXY UNKNOWN ffff:f...f:ffff ffff:f...f:ffff 65535 65535\r\n";
    CHECK_INT(parse_all((const uint8_t *)h, strlen(h), &in, &used, &err), SL_OK);
    CHECK(!in.has_addr);
    h = "PROXY TCP6 ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff "
        "65535 65535\r\n";
    CHECK_INT(parse_all((const uint8_t *)h, strlen(h), &in, &used, &err), SL_OK);
    CHECK_INT(used, 104);
    /* the spec's worst case is exactly 107 bytes; one more is refused */
    char longest[128] = "PROXY UNKNOWN ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff "
                        "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff 65535 65535\r\n";
    CHECK_INT(strlen(longest), SL_PP_V1_MAX);
    CHECK_INT(parse_all((const uint8_t *)longest, strlen(longest), &in, &used, &err), SL_OK);
    CHECK_INT(used, SL_PP_V1_MAX);
    memmove(longest + 95, longest + 94, strlen(longest + 94) + 1); /* one byte more */
    CHECK_INT(strlen(longest), SL_PP_V1_MAX + 1);
    CHECK_INT(sl_pp_parse((const uint8_t *)longest, strlen(longest), &in, &used, &err), SL_ERROR);
    CHECK_STR(err, "PROXY v1 header longer than 107 bytes");
}

static void test_v1_malformed(void) {
    static const struct {
        const char *h, *why;
    } bad[] = {
        {"PROXY TCP4 1.2.3.4 5.6.7.8 1 2\n", "malformed PROXY v1 header"},      /* LF only */
        {"PROXY TCP4 1.2.3.4 5.6.7.8 1 2\rX", "malformed PROXY v1 header"},     /* CR alone */
        {"PROXY TCP4  1.2.3.4 5.6.7.8 1 2\r\n", "malformed PROXY v1 header"},   /* two spaces */
        {"PROXY TCP4 1.2.3.4 5.6.7.8 1\r\n", "malformed PROXY v1 header"},      /* a field short */
        {"PROXY TCP4 1.2.3.4 5.6.7.8 1 2 3\r\n", "malformed PROXY v1 header"},  /* one too many */
        {"PROXY TCP4 1.2.3.4 5.6.7.8 1 2 \r\n", "malformed PROXY v1 header"},   /* trailing space */
        {"PROXY TCP5 1.2.3.4 5.6.7.8 1 2\r\n", "PROXY v1 header with an unknown protocol"},
        {"PROXY tcp4 1.2.3.4 5.6.7.8 1 2\r\n", "PROXY v1 header with an unknown protocol"},
        {"PROXY TCP4 1.2.3.256 5.6.7.8 1 2\r\n", "PROXY v1 header with a malformed address"},
        {"PROXY TCP4 01.2.3.4 5.6.7.8 1 2\r\n", "PROXY v1 header with a malformed address"},
        {"PROXY TCP4 ::1 5.6.7.8 1 2\r\n", "PROXY v1 header with a malformed address"},
        {"PROXY TCP6 1.2.3.4 ::1 1 2\r\n", "PROXY v1 header with a malformed address"},
        {"PROXY TCP4 1.2.3.4 5.6.7.8 65536 2\r\n", "PROXY v1 header with a malformed port"},
        {"PROXY TCP4 1.2.3.4 5.6.7.8 01 2\r\n", "PROXY v1 header with a malformed port"},
        {"PROXY TCP4 1.2.3.4 5.6.7.8 -1 2\r\n", "PROXY v1 header with a malformed port"},
        {"PROXY TCP4 1.2.3.4 5.6.7.8 1 +2\r\n", "PROXY v1 header with a malformed port"},
        {"PROXY TCP4 1.2.3.4 5.6.7.8 1 \r\n", "PROXY v1 header with a malformed port"},
        {"GET / HTTP/1.1\r\n", "no PROXY protocol header"},
        {"proxy TCP4 1.2.3.4 5.6.7.8 1 2\r\n", "no PROXY protocol header"},
    };
    for (size_t i = 0; i < SL_ARRAY_LEN(bad); i++) {
        sl_pp_info_t in;
        size_t used;
        const char *err = NULL;
        int rc = parse_all((const uint8_t *)bad[i].h, strlen(bad[i].h), &in, &used, &err);
        if (rc != SL_ERROR) fprintf(stderr, "accepted: %s\n", bad[i].h);
        CHECK_INT(rc, SL_ERROR);
        CHECK_STR(err, bad[i].why);
    }
    /* no CRLF within 107 bytes */
    char big[200];
    memcpy(big, "PROXY TCP4 ", 11);
    memset(big + 11, '1', sizeof big - 11);
    sl_pp_info_t in;
    size_t used;
    const char *err = NULL;
    CHECK_INT(sl_pp_parse((const uint8_t *)big, 105, &in, &used, &err), SL_EAGAIN);
    CHECK_INT(sl_pp_parse((const uint8_t *)big, 106, &in, &used, &err), SL_ERROR); /* no room for CRLF */
    CHECK_INT(sl_pp_parse((const uint8_t *)big, sizeof big, &in, &used, &err), SL_ERROR);
    CHECK_STR(err, "PROXY v1 header longer than 107 bytes");
}

/* A v2 header: command, family byte, address block, then `tlv` bytes. */
static size_t v2(uint8_t *out, uint8_t cmd, uint8_t fam, const uint8_t *addrs, size_t alen,
                 const uint8_t *tlv, size_t tlen) {
    memcpy(out, sig, 12);
    out[12] = cmd;
    out[13] = fam;
    out[14] = (uint8_t)((alen + tlen) >> 8);
    out[15] = (uint8_t)(alen + tlen);
    if (alen) memcpy(out + 16, addrs, alen);
    if (tlen) memcpy(out + 16 + alen, tlv, tlen);
    return 16 + alen + tlen;
}

static void test_v2(void) {
    uint8_t h[512];
    const uint8_t a4[12] = {10, 0, 0, 1, 10, 0, 0, 2, 0x1F, 0x90, 0x01, 0xBB};
    size_t n = v2(h, 0x21, 0x11, a4, sizeof a4, NULL, 0);
    memcpy(h + n, "rest", 4);
    sl_pp_info_t in;
    size_t used = 0;
    const char *err = NULL;
    CHECK_INT(parse_all(h, n + 4, &in, &used, &err), SL_OK);
    CHECK_INT(used, 28);
    CHECK_INT(in.version, 2);
    CHECK(in.has_addr);
    CHECK_STR(text(&in.src), "10.0.0.1:8080");
    CHECK_STR(text(&in.dst), "10.0.0.2:443");

    uint8_t a6[36] = {0};
    a6[15] = 1;                         /* ::1 */
    a6[16] = 0x20, a6[17] = 0x01;       /* 2001:: */
    a6[32] = 0x00, a6[33] = 0x50;       /* 80 */
    a6[34] = 0xFF, a6[35] = 0xFF;       /* 65535 */
    /* TLVs: a CRC32C (4 bytes) and an empty NOOP */
    const uint8_t tlv[] = {0x03, 0x00, 0x04, 1, 2, 3, 4, 0x04, 0x00, 0x00};
    n = v2(h, 0x21, 0x21, a6, sizeof a6, tlv, sizeof tlv);
    CHECK_INT(parse_all(h, n, &in, &used, &err), SL_OK);
    CHECK_INT(used, n);
    CHECK_STR(text(&in.src), "[::1]:80");
    CHECK_STR(text(&in.dst), "[2001::]:65535");

    /* LOCAL: the addresses (if any) are ignored */
    n = v2(h, 0x20, 0x11, a4, sizeof a4, NULL, 0);
    CHECK_INT(parse_all(h, n, &in, &used, &err), SL_OK);
    CHECK(!in.has_addr);
    n = v2(h, 0x20, 0x00, NULL, 0, NULL, 0);
    CHECK_INT(parse_all(h, n, &in, &used, &err), SL_OK);
    CHECK_INT(used, 16);
    CHECK(!in.has_addr);
    /* PROXY over UNSPEC, UNIX or DGRAM: parsed, no TCP address */
    n = v2(h, 0x21, 0x00, NULL, 0, NULL, 0);
    CHECK_INT(parse_all(h, n, &in, &used, &err), SL_OK);
    CHECK(!in.has_addr);
    uint8_t ux[216] = {0};
    n = v2(h, 0x21, 0x31, ux, sizeof ux, NULL, 0);
    CHECK_INT(parse_all(h, n, &in, &used, &err), SL_OK);
    CHECK(!in.has_addr);
    n = v2(h, 0x21, 0x12, a4, sizeof a4, NULL, 0);
    CHECK_INT(parse_all(h, n, &in, &used, &err), SL_OK);
    CHECK(!in.has_addr);
}

static void test_v2_malformed(void) {
    uint8_t h[8192];
    const uint8_t a4[12] = {10, 0, 0, 1, 10, 0, 0, 2, 0x1F, 0x90, 0x01, 0xBB};
    static const struct {
        uint8_t cmd, fam;
        size_t alen;
        const char *why;
    } bad[] = {
        {0x11, 0x11, 12, "PROXY v2 header with an unknown version"},
        {0x31, 0x11, 12, "PROXY v2 header with an unknown version"},
        {0x22, 0x11, 12, "PROXY v2 header with an unknown command"},
        {0x2F, 0x11, 12, "PROXY v2 header with an unknown command"},
        {0x21, 0x41, 12, "PROXY v2 header with an unknown address family"},
        {0x21, 0x13, 12, "PROXY v2 header with an unknown address family"},
        {0x21, 0x11, 11, "PROXY v2 header shorter than its addresses"},
        {0x21, 0x21, 12, "PROXY v2 header shorter than its addresses"},
    };
    for (size_t i = 0; i < SL_ARRAY_LEN(bad); i++) {
        size_t n = v2(h, bad[i].cmd, bad[i].fam, a4, bad[i].alen, NULL, 0);
        sl_pp_info_t in;
        size_t used;
        const char *err = NULL;
        CHECK_INT(parse_all(h, n, &in, &used, &err), SL_ERROR);
        CHECK_STR(err, bad[i].why);
    }
    sl_pp_info_t in;
    size_t used;
    const char *err = NULL;
    /* a TLV running past the end, and a TLV header cut short */
    const uint8_t t1[] = {0x03, 0x00, 0x05, 1, 2, 3, 4};
    size_t n = v2(h, 0x21, 0x11, a4, sizeof a4, t1, sizeof t1);
    CHECK_INT(parse_all(h, n, &in, &used, &err), SL_ERROR);
    CHECK_STR(err, "PROXY v2 header with a malformed TLV");
    const uint8_t t2[] = {0x03, 0x00};
    n = v2(h, 0x21, 0x11, a4, sizeof a4, t2, sizeof t2);
    CHECK_INT(parse_all(h, n, &in, &used, &err), SL_ERROR);
    CHECK_STR(err, "PROXY v2 header with a malformed TLV");
    /* longer than SL_PP_PARSE_MAX: refused from the length field, before the bytes arrive */
    uint8_t big[4200] = {0};
    big[0] = 0x04;
    big[1] = (4200 - 3) >> 8;
    big[2] = (uint8_t)(4200 - 3);
    n = v2(h, 0x21, 0x11, a4, sizeof a4, big, sizeof big);
    CHECK_INT(sl_pp_parse(h, 16, &in, &used, &err), SL_ERROR);
    CHECK_STR(err, "PROXY v2 header longer than 4096 bytes");
    /* a near-miss of the signature is no header at all */
    memcpy(h, sig, 12);
    h[11] = 0x0B;
    CHECK_INT(sl_pp_detect(h, 12), SL_PP_NONE);
    CHECK_INT(sl_pp_parse(h, 16, &in, &used, &err), SL_ERROR);
    CHECK_STR(err, "no PROXY protocol header");
}

static void test_detect(void) {
    CHECK_INT(sl_pp_detect((const uint8_t *)"", 0), SL_EAGAIN);
    CHECK_INT(sl_pp_detect((const uint8_t *)"PRO", 3), SL_EAGAIN);
    CHECK_INT(sl_pp_detect((const uint8_t *)"PROXY", 5), SL_EAGAIN);
    CHECK_INT(sl_pp_detect((const uint8_t *)"PROXY ", 6), SL_PP_V1);
    CHECK_INT(sl_pp_detect((const uint8_t *)"PROXZ", 5), SL_PP_NONE);
    CHECK_INT(sl_pp_detect((const uint8_t *)"*1\r\n$4\r\nPING\r\n", 14), SL_PP_NONE);
    CHECK_INT(sl_pp_detect(sig, 5), SL_EAGAIN);
    CHECK_INT(sl_pp_detect(sig, 12), SL_PP_V2);
    /* "\r\n\r\n" alone could begin either a v2 signature or nothing: more is needed */
    CHECK_INT(sl_pp_detect((const uint8_t *)"\r\n\r\nX", 5), SL_PP_NONE);
}

static void roundtrip(int version, const char *sip, uint16_t sp, const char *dip, uint16_t dport,
                      const char *want_src, const char *want_dst, const char *want_text) {
    sl_sockaddr_t s = addr(sip, sp), d = addr(dip, dport);
    uint8_t out[SL_PP_ENCODE_MAX + 1];
    memset(out, 0xAA, sizeof out);
    size_t n = sl_pp_encode(version, &s, &d, out);
    CHECK(n > 0 && n <= SL_PP_ENCODE_MAX);
    CHECK_INT(out[SL_PP_ENCODE_MAX], 0xAA);
    if (want_text) {
        char t[128];
        memcpy(t, out, n);
        t[n] = 0;
        CHECK_STR(t, want_text);
    }
    sl_pp_info_t in;
    size_t used = 0;
    const char *err = NULL;
    CHECK_INT(sl_pp_parse(out, n, &in, &used, &err), SL_OK);
    CHECK_INT(used, n);
    CHECK_INT(in.version, version);
    CHECK(in.has_addr);
    CHECK_STR(text(&in.src), want_src);
    CHECK_STR(text(&in.dst), want_dst);
}

static void test_encode(void) {
    roundtrip(1, "127.0.0.1", 40000, "127.0.0.2", 6379, "127.0.0.1:40000", "127.0.0.2:6379",
              "PROXY TCP4 127.0.0.1 127.0.0.2 40000 6379\r\n");
    roundtrip(2, "127.0.0.1", 40000, "127.0.0.2", 6379, "127.0.0.1:40000", "127.0.0.2:6379", NULL);
    roundtrip(1, "2001:db8::7", 1, "::1", 0, "[2001:db8::7]:1", "[::1]:0",
              "PROXY TCP6 2001:db8::7 ::1 1 0\r\n");
    roundtrip(2, "2001:db8::7", 65535, "::1", 80, "[2001:db8::7]:65535", "[::1]:80", NULL);
    /* mixed families: the IPv4 end goes IPv4-mapped */
    roundtrip(1, "10.1.2.3", 5, "::1", 6, "[::ffff:10.1.2.3]:5", "[::1]:6",
              "PROXY TCP6 ::ffff:10.1.2.3 ::1 5 6\r\n");
    roundtrip(2, "::1", 5, "10.1.2.3", 6, "[::1]:5", "[::ffff:10.1.2.3]:6", NULL);
    /* the longest v1 line fits */
    roundtrip(1, "ffff:ffff:ffff:ffff:ffff:ffff:ffff:fffe", 65535, "ffff:ffff:ffff:ffff:ffff:ffff:ffff:fffd",
              65535, "[ffff:ffff:ffff:ffff:ffff:ffff:ffff:fffe]:65535",
              "[ffff:ffff:ffff:ffff:ffff:ffff:ffff:fffd]:65535", NULL);
}

static sl_cidr_t cidr(const char *ip, int bits) {
    sl_cidr_t c;
    memset(&c, 0, sizeof c);
    if (strchr(ip, ':')) {
        inet_pton(AF_INET6, ip, c.ip);
        c.bits = (uint8_t)bits;
    } else {
        c.ip[10] = c.ip[11] = 0xff;
        inet_pton(AF_INET, ip, c.ip + 12);
        c.bits = (uint8_t)(bits + 96);
    }
    return c;
}

static void test_trusted(void) {
    sl_cidr_t from[] = {cidr("10.0.0.0", 8), cidr("192.168.1.7", 32), cidr("2001:db8::", 33)};
    struct {
        const char *ip;
        bool want;
    } cases[] = {
        {"10.0.0.1", true},    {"10.255.255.255", true}, {"11.0.0.1", false},
        {"192.168.1.7", true}, {"192.168.1.6", false},   {"2001:db8::1", true},
        {"2001:db8:7fff::1", true}, {"2001:db8:8000::1", false}, {"::ffff:10.9.9.9", true},
        {"::1", false},        {"127.0.0.1", false},
    };
    for (size_t i = 0; i < SL_ARRAY_LEN(cases); i++) {
        sl_sockaddr_t a = addr(cases[i].ip, 1);
        bool got = sl_pp_trusted(from, SL_ARRAY_LEN(from), &a.sa);
        if (got != cases[i].want) fprintf(stderr, "trusted(%s)\n", cases[i].ip);
        CHECK_INT(got, cases[i].want);
    }
    sl_cidr_t any4 = cidr("0.0.0.0", 0), any = cidr("::", 0);
    sl_sockaddr_t a = addr("8.8.8.8", 1), b = addr("2001::1", 1);
    CHECK(sl_pp_trusted(&any4, 1, &a.sa));
    CHECK(!sl_pp_trusted(&any4, 1, &b.sa));
    CHECK(sl_pp_trusted(&any, 1, &a.sa) && sl_pp_trusted(&any, 1, &b.sa));
    CHECK(!sl_pp_trusted(from, 0, &a.sa));
}

static const check_test_t tests[] = {
    {"v1_tcp4", test_v1_tcp4},       {"v1_tcp6_and_unknown", test_v1_tcp6_and_unknown},
    {"v1_malformed", test_v1_malformed}, {"v2", test_v2},
    {"v2_malformed", test_v2_malformed}, {"detect", test_detect},
    {"encode", test_encode},         {"trusted", test_trusted},
};

int main(int argc, char **argv) { return check_main(tests, SL_ARRAY_LEN(tests), argc, argv); }
