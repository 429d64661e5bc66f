/* proxy_protocol.c — PROXY protocol v1/v2: detect, parse, encode, trust (contract in
 * proxy_protocol.h).
 *
 * Parsing is strict where the spec is: a v1 line is at most 107 bytes, fields are
 * separated by exactly one space, addresses are in their canonical text forms (no
 * leading zeros in IPv4, which inet_pton refuses too), ports are 0..65535 without
 * leading zeros, and the line ends with CRLF. A v2 header's TLVs must tile its
 * address block exactly. Anything else is an error: a header that reaches us from
 * a trusted peer malformed is a broken or hostile peer, not something to guess at.
 */
#include "proto/proxy_protocol.h"

#include <arpa/inet.h>
#include <string.h>

#include "base/common.h"
#include "base/wbuf.h"

static const uint8_t v2_sig[12] = {0x0D, 0x0A, 0x0D, 0x0A, 0x00, 0x0D, 0x0A, 0x51, 0x55, 0x49, 0x54, 0x0A};
static const uint8_t v1_sig[6] = {'P', 'R', 'O', 'X', 'Y', ' '};

int sl_pp_detect(const uint8_t *p, size_t len) {
    size_t n1 = SL_MIN(len, sizeof v1_sig), n2 = SL_MIN(len, sizeof v2_sig);
    if (memcmp(p, v1_sig, n1) == 0) return n1 == sizeof v1_sig ? SL_PP_V1 : SL_EAGAIN;
    if (memcmp(p, v2_sig, n2) == 0) return n2 == sizeof v2_sig ? SL_PP_V2 : SL_EAGAIN;
    return SL_PP_NONE;
}

/* ---- version 1 ---- */

/* "0".."65535", no sign, no leading zero; false otherwise. */
static bool parse_port(const uint8_t *p, size_t n, uint16_t *out) {
    if (n == 0 || n > 5 || (n > 1 && p[0] == '0')) return false;
    uint32_t v = 0;
    for (size_t i = 0; i < n; i++) {
        if (p[i] < '0' || p[i] > '9') return false;
        v = v * 10 + (uint32_t)(p[i] - '0');
    }
    if (v > 65535) return false;
    *out = htons((uint16_t)v);
    return true;
}

static bool parse_ip(int family, const uint8_t *p, size_t n, sl_sockaddr_t *out) {
    char text[INET6_ADDRSTRLEN];
    if (n == 0 || n >= sizeof text) return false;
    memcpy(text, p, n);
    text[n] = 0;
    memset(out, 0, sizeof *out);
    out->sa.sa_family = (sa_family_t)family;
    void *dst = family == AF_INET ? (void *)&out->in.sin_addr : (void *)&out->in6.sin6_addr;
    return inet_pton(family, text, dst) == 1;
}

static int parse_v1(const uint8_t *p, size_t len, sl_pp_info_t *out, size_t *used, const char **err) {
    /* the CR of a 107-byte line is its 106th byte */
    const uint8_t *cr = memchr(p, '\r', SL_MIN(len, (size_t)SL_PP_V1_MAX - 1));
    if (!cr && len >= SL_PP_V1_MAX - 1) {
        *err = "PROXY v1 header longer than 107 bytes";
        return SL_ERROR;
    }
    if (!cr || (size_t)(cr - p) + 1 == len) {
        if (memchr(p, '\n', len)) goto bad;
        return SL_EAGAIN;
    }
    if (cr[1] != '\n' || memchr(p, '\n', (size_t)(cr - p))) goto bad;
    /* fields: PROXY, protocol, source, destination, source port, destination port */
    const uint8_t *f[6];
    size_t fl[6], nf = 0;
    const uint8_t *s = p;
    while (s <= cr && nf < 6) {
        const uint8_t *sp = memchr(s, ' ', (size_t)(cr - s));
        const uint8_t *e = sp ? sp : cr;
        f[nf] = s;
        fl[nf++] = (size_t)(e - s);
        s = e + 1;
        if (!sp) break;
    }
    if (nf >= 2 && fl[1] == 7 && memcmp(f[1], "UNKNOWN", 7) == 0) {
        /* The rest of the line is to be ignored. */
        memset(out, 0, sizeof *out);
        out->version = 1;
        *used = (size_t)(cr - p) + 2;
        return SL_OK;
    }
    if (nf != 6 || s <= cr) goto bad;
    int family;
    if (fl[1] == 4 && memcmp(f[1], "TCP4", 4) == 0)
        family = AF_INET;
    else if (fl[1] == 4 && memcmp(f[1], "TCP6", 4) == 0)
        family = AF_INET6;
    else {
        *err = "PROXY v1 header with an unknown protocol";
        return SL_ERROR;
    }
    uint16_t sport, dport;
    if (!parse_ip(family, f[2], fl[2], &out->src) || !parse_ip(family, f[3], fl[3], &out->dst)) {
        *err = "PROXY v1 header with a malformed address";
        return SL_ERROR;
    }
    if (!parse_port(f[4], fl[4], &sport) || !parse_port(f[5], fl[5], &dport)) {
        *err = "PROXY v1 header with a malformed port";
        return SL_ERROR;
    }
    if (family == AF_INET) {
        out->src.in.sin_port = sport;
        out->dst.in.sin_port = dport;
    } else {
        out->src.in6.sin6_port = sport;
        out->dst.in6.sin6_port = dport;
    }
    out->has_addr = true;
    out->version = 1;
    *used = (size_t)(cr - p) + 2;
    return SL_OK;
bad:
    *err = "malformed PROXY v1 header";
    return SL_ERROR;
}

/* ---- version 2 ---- */

static int parse_v2(const uint8_t *p, size_t len, sl_pp_info_t *out, size_t *used, const char **err) {
    if (len < 16) return SL_EAGAIN;
    size_t body = (size_t)p[14] << 8 | p[15];
    if (16 + body > SL_PP_PARSE_MAX) {
        *err = "PROXY v2 header longer than 4096 bytes";
        return SL_ERROR;
    }
    if ((p[12] & 0xF0) != 0x20) {
        *err = "PROXY v2 header with an unknown version";
        return SL_ERROR;
    }
    int cmd = p[12] & 0x0F;
    if (cmd > 1) {
        *err = "PROXY v2 header with an unknown command";
        return SL_ERROR;
    }
    if (len < 16 + body) return SL_EAGAIN;
    const uint8_t *a = p + 16;
    int fam = p[13] >> 4, proto = p[13] & 0x0F;
    if (fam > 3 || proto > 2) {
        *err = "PROXY v2 header with an unknown address family";
        return SL_ERROR;
    }
    size_t alen = fam == 1 ? 12 : fam == 2 ? 36 : fam == 3 ? 216 : 0;
    if (body < alen) {
        *err = "PROXY v2 header shorter than its addresses";
        return SL_ERROR;
    }
    /* TLVs (type, 16-bit length, value) must tile the rest exactly. */
    for (size_t i = alen; i < body;) {
        if (body - i < 3 || body - i - 3 < ((size_t)a[i + 1] << 8 | a[i + 2])) {
            *err = "PROXY v2 header with a malformed TLV";
            return SL_ERROR;
        }
        i += 3 + ((size_t)a[i + 1] << 8 | a[i + 2]);
    }
    memset(out, 0, sizeof *out);
    out->version = 2;
    *used = 16 + body;
    /* LOCAL (a health check of the sender's own), or an address that is not TCP over IP:
     * the connection's endpoints stand. */
    if (cmd == 0 || proto != 1 || (fam != 1 && fam != 2)) return SL_OK;
    if (fam == 1) {
        out->src.in.sin_family = out->dst.in.sin_family = AF_INET;
        memcpy(&out->src.in.sin_addr, a, 4);
        memcpy(&out->dst.in.sin_addr, a + 4, 4);
        memcpy(&out->src.in.sin_port, a + 8, 2);
        memcpy(&out->dst.in.sin_port, a + 10, 2);
    } else {
        out->src.in6.sin6_family = out->dst.in6.sin6_family = AF_INET6;
        memcpy(&out->src.in6.sin6_addr, a, 16);
        memcpy(&out->dst.in6.sin6_addr, a + 16, 16);
        memcpy(&out->src.in6.sin6_port, a + 32, 2);
        memcpy(&out->dst.in6.sin6_port, a + 34, 2);
    }
    out->has_addr = true;
    return SL_OK;
}

int sl_pp_parse(const uint8_t *p, size_t len, sl_pp_info_t *out, size_t *used, const char **err) {
    switch (sl_pp_detect(p, len)) {
    case SL_PP_V1: return parse_v1(p, len, out, used, err);
    case SL_PP_V2: return parse_v2(p, len, out, used, err);
    case SL_EAGAIN: return SL_EAGAIN;
    default: *err = "no PROXY protocol header"; return SL_ERROR;
    }
}

/* ---- encoding ---- */

/* a as IPv6 (IPv4 mapped into ::ffff:0:0/96), with its port. */
static void as_v6(const sl_sockaddr_t *a, sl_sockaddr_t *out) {
    if (a->sa.sa_family == AF_INET6) {
        *out = *a;
        return;
    }
    memset(out, 0, sizeof *out);
    out->in6.sin6_family = AF_INET6;
    out->in6.sin6_port = a->in.sin_port;
    out->in6.sin6_addr.s6_addr[10] = out->in6.sin6_addr.s6_addr[11] = 0xff;
    memcpy(&out->in6.sin6_addr.s6_addr[12], &a->in.sin_addr, 4);
}

static bool put_port(sl_wbuf_t *b, uint16_t net) { return sl_wbuf_u64(b, ntohs(net)); }

size_t sl_pp_encode(int version, const sl_sockaddr_t *src, const sl_sockaddr_t *dst, uint8_t *out) {
    sl_sockaddr_t s6, d6;
    bool v4 = src->sa.sa_family == AF_INET && dst->sa.sa_family == AF_INET;
    if (!v4) {
        as_v6(src, &s6);
        as_v6(dst, &d6);
        src = &s6;
        dst = &d6;
    }
    if (version == 2) {
        memcpy(out, v2_sig, sizeof v2_sig);
        out[12] = 0x21; /* version 2, PROXY */
        out[13] = v4 ? 0x11 : 0x21; /* TCP over IPv4 / IPv6 */
        out[14] = 0;
        out[15] = v4 ? 12 : 36;
        uint8_t *a = out + 16;
        if (v4) {
            memcpy(a, &src->in.sin_addr, 4);
            memcpy(a + 4, &dst->in.sin_addr, 4);
            memcpy(a + 8, &src->in.sin_port, 2);
            memcpy(a + 10, &dst->in.sin_port, 2);
            return 16 + 12;
        }
        memcpy(a, &src->in6.sin6_addr, 16);
        memcpy(a + 16, &dst->in6.sin6_addr, 16);
        memcpy(a + 32, &src->in6.sin6_port, 2);
        memcpy(a + 34, &dst->in6.sin6_port, 2);
        return 16 + 36;
    }
    char ip[INET6_ADDRSTRLEN];
    sl_wbuf_t b = SL_WBUF_BOUNDED((char *)out, SL_PP_ENCODE_MAX);
    if (v4)
        SL_WBUF_LIT(&b, "PROXY TCP4 ");
    else
        SL_WBUF_LIT(&b, "PROXY TCP6 ");
    inet_ntop(v4 ? AF_INET : AF_INET6, v4 ? (const void *)&src->in.sin_addr : (const void *)&src->in6.sin6_addr,
              ip, sizeof ip);
    sl_wbuf_put(&b, ip, strlen(ip));
    SL_WBUF_LIT(&b, " ");
    inet_ntop(v4 ? AF_INET : AF_INET6, v4 ? (const void *)&dst->in.sin_addr : (const void *)&dst->in6.sin6_addr,
              ip, sizeof ip);
    sl_wbuf_put(&b, ip, strlen(ip));
    SL_WBUF_LIT(&b, " ");
    put_port(&b, v4 ? src->in.sin_port : src->in6.sin6_port);
    SL_WBUF_LIT(&b, " ");
    put_port(&b, v4 ? dst->in.sin_port : dst->in6.sin6_port);
    SL_WBUF_LIT(&b, "\r\n");
    return b.len;
}

bool sl_pp_trusted(const sl_cidr_t *from, size_t n, const struct sockaddr *sa) {
    uint8_t ip[16] = {0};
    if (sa->sa_family == AF_INET) {
        ip[10] = ip[11] = 0xff;
        memcpy(ip + 12, &((const struct sockaddr_in *)sa)->sin_addr, 4);
    } else if (sa->sa_family == AF_INET6) {
        memcpy(ip, &((const struct sockaddr_in6 *)sa)->sin6_addr, 16);
    } else {
        return false;
    }
    for (size_t i = 0; i < n; i++) {
        unsigned bits = from[i].bits, whole = bits / 8, rest = bits % 8;
        if (memcmp(ip, from[i].ip, whole) != 0) continue;
        if (rest && ((ip[whole] ^ from[i].ip[whole]) & (uint8_t)(0xFF << (8 - rest)))) continue;
        return true;
    }
    return false;
}
