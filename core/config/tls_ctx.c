/* tls_ctx.c — TLS contexts built with the config: a listener's certificates chosen by SNI
 * and the client certificates it asks for (mTLS), a target's client context with its
 * session slot, and the process-wide session-ticket keys. See tls_ctx.h for the model;
 * the sessions that use these run on workers (net/tls.c). */
#include "config/tls_ctx.h"

#include <openssl/core_names.h>
#include <openssl/err.h>
#include <openssl/rand.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/common.h"
#include "proto/sni.h"

/* ---- session-ticket keys (process-wide) ----
 *
 * One current key encrypts new tickets; the previous one still decrypts (its tickets are
 * renewed), so a ticket is good for at most two rotation periods. A rotation happens
 * lazily, on the first ticket issued after the period ended. */

#define TICKET_ROTATE_S 3600

typedef struct {
    unsigned char name[16], aes[32], hmac[32];
    time_t born;
    bool set;
} tkey_t;

static pthread_mutex_t tk_mu = PTHREAD_MUTEX_INITIALIZER;
static tkey_t tk_cur, tk_prev;

static bool tkey_new(tkey_t *k) {
    if (RAND_bytes(k->name, sizeof k->name) != 1 || RAND_bytes(k->aes, sizeof k->aes) != 1 ||
        RAND_bytes(k->hmac, sizeof k->hmac) != 1)
        return false;
    k->born = time(NULL);
    k->set = true;
    return true;
}

static int tkey_init(const tkey_t *k, unsigned char *iv, EVP_CIPHER_CTX *cctx, EVP_MAC_CTX *hctx,
                     int enc) {
    OSSL_PARAM params[] = {
        OSSL_PARAM_construct_octet_string(OSSL_MAC_PARAM_KEY, (void *)k->hmac, sizeof k->hmac),
        OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, (char *)"sha256", 0),
        OSSL_PARAM_construct_end(),
    };
    if (EVP_MAC_CTX_set_params(hctx, params) != 1) return -1;
    int ok = enc ? EVP_EncryptInit_ex(cctx, EVP_aes_256_cbc(), NULL, k->aes, iv)
                 : EVP_DecryptInit_ex(cctx, EVP_aes_256_cbc(), NULL, k->aes, iv);
    return ok == 1 ? 0 : -1;
}

static int ticket_cb(SSL *ssl, unsigned char name[16], unsigned char *iv, EVP_CIPHER_CTX *cctx,
                     EVP_MAC_CTX *hctx, int enc) {
    tkey_t k;
    int rc = 1;
    pthread_mutex_lock(&tk_mu);
    if (enc) {
        time_t now = time(NULL);
        if (!tk_cur.set || now - tk_cur.born >= TICKET_ROTATE_S) {
            tkey_t fresh;
            if (tkey_new(&fresh)) {
                tk_prev = tk_cur;
                tk_cur = fresh;
            }
        }
        k = tk_cur;
    } else if (tk_cur.set && memcmp(name, tk_cur.name, 16) == 0) {
        k = tk_cur;
    } else if (tk_prev.set && memcmp(name, tk_prev.name, 16) == 0) {
        k = tk_prev;
        rc = 2; /* good, but issue a ticket under the current key */
    } else {
        k.set = false;
    }
    pthread_mutex_unlock(&tk_mu);
    if (!k.set) return 0; /* unknown key: a full handshake */
    /* TLS 1.3: answer every resumption with a fresh ticket (2), as OpenSSL's own key
     * handling does. With 1, OpenSSL sends none after a resumption, and a client that uses
     * a TLS 1.3 ticket once (OpenSSL's, so wrk's) falls back to a full handshake on every
     * other connection (scripts/bench-tls, "resumed"); RFC 8446 C.4 asks for single use. */
    if (!enc && SSL_version(ssl) == TLS1_3_VERSION) rc = 2;
    if (enc) {
        memcpy(name, k.name, 16);
        if (RAND_bytes(iv, EVP_MAX_IV_LENGTH) != 1) return -1;
    }
    if (tkey_init(&k, iv, cctx, hctx, enc) != 0) return -1;
    OPENSSL_cleanse(&k, sizeof k);
    return rc;
}

/* ---- listener contexts ---- */

typedef struct {
    char *name;     /**< lower-case; a wildcard keeps its suffix with the dot: ".example.com" */
    uint32_t ctx;
    int32_t alt;    /**< the next entry naming the same name with another key type, or -1 */
    bool wild;
} sni_name_t;

/* What a certificate entry's key signs with: a name may have one entry of each, and the
 * handshake takes the one the client can verify (client_takes_ecdsa). */
enum { KEY_OTHER, KEY_RSA, KEY_ECDSA };
static const char *const key_kind_name[] = {"non-RSA, non-ECDSA", "RSA", "ECDSA"};

struct sl_tls_server_s {
    SSL_CTX **ctx;
    unsigned char *kind; /**< per context: its key's KEY_ kind */
    size_t nctx;
    sni_name_t *names;
    size_t nnames;
    uint32_t def;
    bool h2; /**< ALPN: h2 is offered first (the listener's http2) */
    X509_STORE *ca_store; /**< client_auth: the trusted CAs and CRLs, one for every context */
    STACK_OF(X509_NAME) *ca_names; /**< client_auth: the CA names sent in CertificateRequest */
};

/* The built-in TLS 1.2 list: forward-secret AEAD suites only. */
static const char default_ciphers[] =
    "ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-RSA-AES128-GCM-SHA256:"
    "ECDHE-ECDSA-AES256-GCM-SHA384:ECDHE-RSA-AES256-GCM-SHA384:"
    "ECDHE-ECDSA-CHACHA20-POLY1305:ECDHE-RSA-CHACHA20-POLY1305";

/* A file OpenSSL is about to read: its own error for a missing file says only "system lib". */
static bool readable(const char *path, const char *what, const char *name, char *err, size_t n) {
    FILE *f = fopen(path, "r");
    if (f) {
        fclose(f);
        return true;
    }
    snprintf(err, n, "cannot read %s %s: %s", what, name, strerror(errno));
    return false;
}

/* `what` and OpenSSL's reason. The queue's first error is the cause; the last is what the
 * outermost call added on top ("SSL routines::PEM lib" for any file that is not PEM, where
 * the first says "PEM routines::no start line"). */
static void ssl_err_text(char *err, size_t n, const char *what) {
    unsigned long e = ERR_peek_error();
    char buf[160] = "";
    if (e) ERR_error_string_n(e, buf, sizeof buf);
    ERR_clear_error();
    snprintf(err, n, "%s%s%s", what, buf[0] ? ": " : "", buf);
}

/* The passphrase callback of every context: sluice reads no passphrase. OpenSSL's own
 * default prompts on the controlling terminal and waits, which hung `sluice check`, a start
 * from a shell and every reload of such a gateway. Called only for an encrypted key: it
 * notes that (asked) so the error can say so. */
static int no_passphrase(char *buf, int size, int rwflag, void *asked) {
    (void)buf, (void)size, (void)rwflag;
    if (asked) *(bool *)asked = true;
    return -1;
}

/* A certificate chain and its key into ctx (a listener's certificate, a target's client
 * certificate), as written (cert, key) and resolved (the paths). An encrypted key is an
 * error, never a prompt on the terminal. */
static bool load_pair(SSL_CTX *ctx, const char *cert, const char *cert_path, const char *key, const char *key_path,
                      char *err, size_t errlen) {
    if (!readable(cert_path, "certificate", cert, err, errlen) || !readable(key_path, "key", key, err, errlen))
        return false;
    if (SSL_CTX_use_certificate_chain_file(ctx, cert_path) != 1) {
        char what[600];
        snprintf(what, sizeof what, "cannot load certificate %s", cert);
        ssl_err_text(err, errlen, what);
        return false;
    }
    bool encrypted = false;
    SSL_CTX_set_default_passwd_cb(ctx, no_passphrase);
    SSL_CTX_set_default_passwd_cb_userdata(ctx, &encrypted);
    int key_ok = SSL_CTX_use_PrivateKey_file(ctx, key_path, SSL_FILETYPE_PEM);
    SSL_CTX_set_default_passwd_cb_userdata(ctx, NULL);
    if (key_ok != 1 && encrypted) {
        ERR_clear_error();
        snprintf(err, errlen,
                 "key %s is encrypted: sluice reads no passphrase; store the key decrypted "
                 "(openssl pkey -in KEY -out PLAIN.key), readable only by sluice's user",
                 key);
        return false;
    }
    if (key_ok != 1) {
        char what[600];
        snprintf(what, sizeof what, "cannot load key %s", key);
        ssl_err_text(err, errlen, what);
        return false;
    }
    if (SSL_CTX_check_private_key(ctx) != 1) {
        ERR_clear_error();
        snprintf(err, errlen, "key %s does not match certificate %s", key, cert);
        return false;
    }
    return true;
}

/* The client's ALPN list: h2 when the listener speaks HTTP/2 and the client offers it
 * (whatever the client's order: RFC 7301 lets the server choose), else http/1.1. */
static int alpn_select(SSL *ssl, const unsigned char **out, unsigned char *outlen,
                       const unsigned char *in, unsigned int inlen, void *arg) {
    const sl_tls_server_t *s = arg;
    (void)ssl;
    const unsigned char *h1 = NULL;
    for (unsigned i = 0; i < inlen;) {
        unsigned l = in[i];
        if (i + 1 + l > inlen) break;
        if (l == 2 && s->h2 && memcmp(in + i + 1, "h2", 2) == 0) {
            *out = in + i + 1;
            *outlen = 2;
            return SSL_TLSEXT_ERR_OK;
        }
        if (l == 8 && memcmp(in + i + 1, "http/1.1", 8) == 0) h1 = in + i + 1;
        i += 1 + l;
    }
    if (h1) {
        *out = h1;
        *outlen = 8;
        return SSL_TLSEXT_ERR_OK;
    }
    return SSL_TLSEXT_ERR_NOACK; /* no ALPN in the answer: the client decides */
}

void sl_tls_server_offer_h2(sl_tls_server_t *s, bool on) { s->h2 = on; }

/* An ECDSA key's curve as the handshake names it: the SHA-2 byte of its TLS 1.3 scheme
 * (0x0403 is ecdsa_secp256r1_sha256) and its TLS 1.2 supported_groups id; 0 for a curve
 * without a TLS 1.3 scheme (any ECDSA scheme is then taken as enough). */
typedef struct {
    unsigned char hash;
    uint16_t group;
} ec_curve_t;

static ec_curve_t ec_curve(SSL_CTX *ctx) {
    char name[64] = "";
    EVP_PKEY *k = SSL_CTX_get0_privatekey(ctx);
    if (!k || EVP_PKEY_get_group_name(k, name, sizeof name, NULL) != 1) return (ec_curve_t){0, 0};
    if (strcmp(name, "prime256v1") == 0 || strcmp(name, "P-256") == 0) return (ec_curve_t){4, 23};
    if (strcmp(name, "secp384r1") == 0 || strcmp(name, "P-384") == 0) return (ec_curve_t){5, 24};
    if (strcmp(name, "secp521r1") == 0 || strcmp(name, "P-521") == 0) return (ec_curve_t){6, 25};
    return (ec_curve_t){0, 0};
}

/* Whether this client can be answered with the ECDSA certificate of context ctx (curve:
 * its key's). TLS 1.3 (offered): a signature_algorithms scheme for that curve. TLS 1.2: an
 * ECDSA hash/signature pair (none listed: SHA-1 with the suite's algorithm, RFC 5246
 * 7.4.1.4.1), the curve in supported_groups when it lists them (RFC 8422 5.1), and an
 * ECDHE-ECDSA suite the entry's cipher list has. HAProxy picks between a name's ECDSA and
 * RSA certificates much the same way. */
static bool client_takes_ecdsa(SSL *ssl, SSL_CTX *ctx, ec_curve_t curve) {
    const unsigned char *p;
    size_t len;
    bool sig12 = true, sig13 = false, tls13 = false;
    if (SSL_client_hello_get0_ext(ssl, TLSEXT_TYPE_signature_algorithms, &p, &len) == 1) {
        sig12 = false;
        /* ECDSA's schemes are 0x0203 ... 0x0603 (TLS 1.2's hash/signature pairs alike) */
        for (size_t i = 2; i + 1 < len; i += 2)
            if (p[i + 1] == 3 && p[i] >= 2 && p[i] <= 6) {
                sig12 = true;
                sig13 = sig13 || !curve.hash || p[i] == curve.hash;
            }
    }
    if (SSL_client_hello_get0_ext(ssl, TLSEXT_TYPE_supported_versions, &p, &len) == 1)
        for (size_t i = 1; i + 1 < len; i += 2) tls13 = tls13 || (p[i] == 0x03 && p[i + 1] == 0x04);
    if (tls13) return sig13;
    if (!sig12) return false;
    if (curve.group && SSL_client_hello_get0_ext(ssl, TLSEXT_TYPE_supported_groups, &p, &len) == 1) {
        bool has = false;
        for (size_t i = 2; i + 1 < len && !has; i += 2) has = (p[i] << 8 | p[i + 1]) == curve.group;
        if (!has) return false;
    }
    const unsigned char *cs;
    size_t n = SSL_client_hello_get0_ciphers(ssl, &cs);
    STACK_OF(SSL_CIPHER) *ours = SSL_CTX_get_ciphers(ctx);
    for (size_t i = 0; i + 1 < n; i += 2) {
        const SSL_CIPHER *c = SSL_CIPHER_find(ssl, cs + i);
        if (!c || SSL_CIPHER_get_auth_nid(c) != NID_auth_ecdsa) continue;
        for (int k = 0; k < sk_SSL_CIPHER_num(ours); k++)
            if (SSL_CIPHER_get_id(sk_SSL_CIPHER_value(ours, k)) == SSL_CIPHER_get_id(c)) return true;
    }
    return false;
}

/* Of a name's entries (e and its alts, one per key type): ECDSA when the client takes it,
 * else RSA, else the first. */
static const sni_name_t *pick_key(const sl_tls_server_t *s, const sni_name_t *e, SSL *ssl) {
    const sni_name_t *by[3] = {NULL, NULL, NULL};
    for (const sni_name_t *x = e;; x = &s->names[x->alt]) {
        by[s->kind[x->ctx]] = x;
        if (x->alt < 0) break;
    }
    if (by[KEY_ECDSA]) {
        SSL_CTX *ctx = s->ctx[by[KEY_ECDSA]->ctx];
        if (client_takes_ecdsa(ssl, ctx, ec_curve(ctx))) return by[KEY_ECDSA];
    }
    return by[KEY_RSA] ? by[KEY_RSA] : e;
}

static const sni_name_t *sni_find(const sl_tls_server_t *s, const char *name) {
    char low[256];
    size_t n = strlen(name);
    if (n == 0 || n >= sizeof low) return NULL;
    for (size_t i = 0; i <= n; i++)
        low[i] = (char)((name[i] >= 'A' && name[i] <= 'Z') ? name[i] + 32 : name[i]);
    const sni_name_t *best = NULL;
    size_t best_len = 0;
    for (size_t i = 0; i < s->nnames; i++) {
        const sni_name_t *e = &s->names[i];
        if (!e->wild) {
            if (strcmp(e->name, low) == 0) return e;
            continue;
        }
        size_t l = strlen(e->name);
        if (l < n && strcmp(low + n - l, e->name) == 0 && l > best_len) {
            best = e;
            best_len = l;
        }
    }
    return best;
}

/* Switches the handshake to the certificate entry its SNI names (the default without
 * one) from the ClientHello callback, which OpenSSL runs before it looks at a session to
 * resume (TLS 1.2's session ID or ticket, TLS 1.3's PSK): that lookup then compares the
 * session with the chosen entry's session id context (entry_sid), so a session resumes
 * only under the certificate that made it (RFC 6066 3). The servername callback runs after
 * the lookup: switching there let a session made for one name resume under another. */
static int client_hello_cb(SSL *ssl, int *alert, void *arg) {
    (void)alert;
    const sl_tls_server_t *s = arg;
    const unsigned char *ext;
    size_t len, n = 0;
    char name[SL_SNI_NAME_MAX + 1];
    const sni_name_t *e = NULL;
    if (SSL_client_hello_get0_ext(ssl, TLSEXT_TYPE_server_name, &ext, &len) == 1 &&
        sl_sni_server_name(ext, len, name, &n) == SL_OK && n) {
        name[n] = 0;
        e = sni_find(s, name);
        if (e && e->alt >= 0) e = pick_key(s, e, ssl);
    }
    uint32_t i = e ? e->ctx : s->def;
    if (SSL_get_SSL_CTX(ssl) != s->ctx[i]) SSL_set_SSL_CTX(ssl, s->ctx[i]);
    return SSL_CLIENT_HELLO_SUCCESS;
}

/* Acknowledges the SNI (the entry was chosen in client_hello_cb): TLS 1.2 then keeps the
 * name in the session it makes. */
static int servername_cb(SSL *ssl, int *alert, void *arg) {
    (void)ssl, (void)alert, (void)arg;
    return SSL_TLSEXT_ERR_OK;
}

/* A certificate entry's session id context: a SHA-256 of its certificate and, on a
 * client_auth listener, of the verification's settings (auth: client_auth_sid's), so a
 * session resumes only under the same certificate and the same client verification. */
static bool entry_sid(SSL_CTX *ctx, const unsigned char *auth) {
    unsigned char cert[EVP_MAX_MD_SIZE], sid[32];
    unsigned int cn = 0, n = 0;
    X509 *x = SSL_CTX_get0_certificate(ctx);
    if (!x || X509_digest(x, EVP_sha256(), cert, &cn) != 1) return false;
    EVP_MD_CTX *md = EVP_MD_CTX_new();
    bool ok = md && EVP_DigestInit_ex(md, EVP_sha256(), NULL) == 1 &&
              EVP_DigestUpdate(md, "sluice-entry", 12) == 1 && EVP_DigestUpdate(md, cert, cn) == 1 &&
              (!auth || EVP_DigestUpdate(md, auth, 32) == 1) && EVP_DigestFinal_ex(md, sid, &n) == 1;
    EVP_MD_CTX_free(md);
    return ok && n == 32 && SSL_CTX_set_session_id_context(ctx, sid, 32) == 1;
}

static bool add_name(sl_tls_server_t *s, size_t *cap, const char *name, uint32_t ctx) {
    if (!name || !*name) return true;
    if (s->nnames == *cap) {
        size_t nc = *cap ? *cap * 2 : 8;
        sni_name_t *v = realloc(s->names, nc * sizeof *v);
        if (!v) return false;
        s->names = v;
        *cap = nc;
    }
    bool wild = name[0] == '*' && name[1] == '.';
    char *copy = strdup(wild ? name + 1 : name);
    if (!copy) return false;
    for (char *p = copy; *p; p++)
        if (*p >= 'A' && *p <= 'Z') *p = (char)(*p + 32);
    s->names[s->nnames++] = (sni_name_t){copy, ctx, -1, wild};
    return true;
}

static int key_kind(SSL_CTX *ctx) {
    EVP_PKEY *k = SSL_CTX_get0_privatekey(ctx);
    int id = k ? EVP_PKEY_get_base_id(k) : 0;
    return id == EVP_PKEY_EC ? KEY_ECDSA : id == EVP_PKEY_RSA || id == EVP_PKEY_RSA_PSS ? KEY_RSA : KEY_OTHER;
}

/* Links a name that entry `idx` adds (names[from...]) to an earlier entry's copy of it, as an
 * alternative for another key type. With one key type the earlier entry keeps the name: a
 * name the entry's `sni` lists (`listed`) is then an error, as it could never be served; a
 * certificate's own name is left to the earlier entry (certificates' names overlap, and
 * the entry still serves its others). */
static bool link_names(sl_tls_server_t *s, size_t from, uint32_t idx, bool listed, char *err,
                       size_t errlen) {
    for (size_t j = from; j < s->nnames; j++) {
        sni_name_t *n = &s->names[j];
        for (size_t k = 0; k < from; k++) {
            sni_name_t *o = &s->names[k];
            if (o->wild != n->wild || strcmp(o->name, n->name) != 0) continue;
            while (s->kind[o->ctx] != s->kind[idx] && o->alt >= 0) o = &s->names[o->alt];
            if (s->kind[o->ctx] != s->kind[idx]) {
                o->alt = (int32_t)j;
            } else if (listed) {
                snprintf(err, errlen,
                         "'%s%s' already selects certificates[%u], whose key is also %s: a name "
                         "selects one certificate per key type (one RSA, one ECDSA)",
                         n->wild ? "*" : "", n->name, o->ctx, key_kind_name[s->kind[idx]]);
                return false;
            }
            break;
        }
    }
    return true;
}

/* A certificate's own names when its entry lists none: DNS subjectAltNames, else the CN. */
static bool add_cert_names(sl_tls_server_t *s, size_t *cap, SSL_CTX *ctx, uint32_t idx) {
    X509 *x = SSL_CTX_get0_certificate(ctx);
    if (!x) return true;
    GENERAL_NAMES *gens = X509_get_ext_d2i(x, NID_subject_alt_name, NULL, NULL);
    bool any = false, ok = true;
    for (int i = 0; gens && i < sk_GENERAL_NAME_num(gens); i++) {
        const GENERAL_NAME *g = sk_GENERAL_NAME_value(gens, i);
        if (g->type != GEN_DNS) continue;
        const char *dns = (const char *)ASN1_STRING_get0_data(g->d.dNSName);
        ok = ok && add_name(s, cap, dns, idx);
        any = true;
    }
    GENERAL_NAMES_free(gens);
    if (!any) {
        char cn[256];
        if (X509_NAME_get_text_by_NID(X509_get_subject_name(x), NID_commonName, cn, sizeof cn) > 0)
            ok = ok && add_name(s, cap, cn, idx);
    }
    return ok;
}

/* ---- client certificates (mTLS) ---- */

/* `optional`: any certificate (or none) completes the handshake; the verdict stays in
 * SSL_get_verify_result for sluice.tls.get_client_cert. */
static int verify_keep(int ok, X509_STORE_CTX *x) {
    (void)ok;
    (void)x;
    return 1;
}

static bool digest_file(EVP_MD_CTX *md, const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return false;
    char buf[4096];
    size_t n;
    bool ok = true;
    while (ok && (n = fread(buf, 1, sizeof buf, f)) > 0) ok = EVP_DigestUpdate(md, buf, n) == 1;
    ok = ok && !ferror(f);
    fclose(f);
    return ok;
}

/* The session id context of a listener asking for client certificates: a digest of its
 * client_auth settings and files. A session (ticket) carries the client's certificate and
 * verdict from the handshake that made it, and OpenSSL resumes only a session whose
 * context matches: so after a reload with another CA, CRL or mode no client resumes
 * past the new rules (a revoked certificate must do a full handshake, and fails). */
static bool client_auth_sid(const sl_tls_client_auth_conf_t *a, unsigned char sid[32]) {
    EVP_MD_CTX *md = EVP_MD_CTX_new();
    unsigned int n = 0;
    char head[64];
    int hl = snprintf(head, sizeof head, "sluice-mtls %d %d", a->mode, a->depth);
    bool ok = md && EVP_DigestInit_ex(md, EVP_sha256(), NULL) == 1 &&
              EVP_DigestUpdate(md, head, (size_t)hl) == 1 && digest_file(md, a->ca_path) &&
              (!a->crl_path || digest_file(md, a->crl_path)) &&
              EVP_DigestFinal_ex(md, sid, &n) == 1;
    EVP_MD_CTX_free(md);
    return ok && n == 32;
}

/* Loads the CA file (and CRL file) into one store every context of the listener shares. */
static bool client_auth_load(sl_tls_server_t *s, const sl_tls_client_auth_conf_t *a, char *err,
                             size_t errlen) {
    char what[600];
    if (!readable(a->ca_path, "CA file", a->ca, err, errlen) ||
        (a->crl_path && !readable(a->crl_path, "CRL file", a->crl, err, errlen)))
        return false;
    if (!(s->ca_store = X509_STORE_new())) {
        snprintf(err, errlen, "out of memory");
        return false;
    }
    if (X509_STORE_load_file(s->ca_store, a->ca_path) != 1 ||
        sk_X509_OBJECT_num(X509_STORE_get0_objects(s->ca_store)) == 0) {
        snprintf(what, sizeof what, "cannot load CA file %s (PEM certificates)", a->ca);
        ssl_err_text(err, errlen, what);
        return false;
    }
    if (a->crl_path) {
        X509_LOOKUP *lk = X509_STORE_add_lookup(s->ca_store, X509_LOOKUP_file());
        if (!lk || X509_load_crl_file(lk, a->crl_path, X509_FILETYPE_PEM) <= 0) {
            snprintf(what, sizeof what, "cannot load CRL file %s (PEM CRLs)", a->crl);
            ssl_err_text(err, errlen, what);
            return false;
        }
        /* the leaf's issuer must have a CRL in the file; the CAs above it are not checked */
        X509_STORE_set_flags(s->ca_store, X509_V_FLAG_CRL_CHECK);
    }
    if (!(s->ca_names = SSL_load_client_CA_file(a->ca_path))) {
        snprintf(what, sizeof what, "cannot read the CA names of %s", a->ca);
        ssl_err_text(err, errlen, what);
        return false;
    }
    return true;
}

/* Asks for client certificates on one context (every certificate entry's: SNI may switch
 * to any of them mid-handshake, and the store, names and depth must be the same). */
static bool client_auth_apply(sl_tls_server_t *s, const sl_tls_client_auth_conf_t *a, SSL_CTX *ctx) {
    STACK_OF(X509_NAME) *names = SSL_dup_CA_list(s->ca_names);
    if (!names) return false;
    SSL_CTX_set_client_CA_list(ctx, names);
    SSL_CTX_set1_cert_store(ctx, s->ca_store);
    if (a->mode == SL_CLIENT_AUTH_OPTIONAL)
        SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, verify_keep);
    else
        SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, NULL);
    SSL_CTX_set_verify_depth(ctx, a->depth);
    return true;
}

void sl_tls_server_free(sl_tls_server_t *s) {
    if (!s) return;
    X509_STORE_free(s->ca_store);
    sk_X509_NAME_pop_free(s->ca_names, X509_NAME_free);
    for (size_t i = 0; i < s->nctx; i++) SSL_CTX_free(s->ctx[i]);
    for (size_t i = 0; i < s->nnames; i++) free(s->names[i].name);
    free(s->ctx);
    free(s->kind);
    free(s->names);
    free(s);
}

sl_tls_server_t *sl_tls_server_build(const sl_tls_listener_conf_t *c, char *err, size_t errlen,
                                     int *bad) {
    *bad = -1;
    sl_tls_server_t *s = calloc(1, sizeof *s);
    if (!s || !(s->ctx = calloc(c->ncerts, sizeof *s->ctx)) ||
        !(s->kind = calloc(c->ncerts, sizeof *s->kind))) {
        if (s) free(s->ctx);
        free(s);
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    size_t cap = 0;
    unsigned char sid[32];
    ERR_clear_error();
    if (c->client_auth) {
        *bad = -3;
        if (!client_auth_load(s, c->client_auth, err, errlen)) goto fail;
        if (!client_auth_sid(c->client_auth, sid)) {
            snprintf(err, errlen, "cannot read %s or %s", c->client_auth->ca,
                     c->client_auth->crl ? c->client_auth->crl : "(no crl)");
            goto fail;
        }
    }
    for (size_t i = 0; i < c->ncerts; i++) {
        const sl_tls_cert_conf_t *cc = &c->certs[i];
        *bad = (int)i;
        SSL_CTX *ctx = SSL_CTX_new(TLS_server_method());
        if (!ctx) {
            ssl_err_text(err, errlen, "cannot create a TLS context");
            goto fail;
        }
        s->ctx[s->nctx++] = ctx;
        SSL_CTX_set_min_proto_version(ctx, c->min_version == SL_TLS_V13 ? TLS1_3_VERSION
                                                                        : TLS1_2_VERSION);
        SSL_CTX_set_options(ctx, SSL_OP_NO_RENEGOTIATION | SSL_OP_CIPHER_SERVER_PREFERENCE |
                                     SSL_OP_IGNORE_UNEXPECTED_EOF | SSL_OP_NO_COMPRESSION |
                                     (c->session_tickets ? 0 : SSL_OP_NO_TICKET));
        SSL_CTX_set_mode(ctx, SSL_MODE_RELEASE_BUFFERS);
        SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_OFF);
        if (c->session_tickets) SSL_CTX_set_tlsext_ticket_key_evp_cb(ctx, ticket_cb);
        /* Without tickets a TLS 1.3 server still sends two NewSessionTicket messages by
         * default (stateful ones, naming a session in the cache), and with the cache off no
         * client can ever use them: two records, a session copy and random bytes per full
         * handshake for nothing (scripts/bench-tls, "full"). */
        if (!c->session_tickets) SSL_CTX_set_num_tickets(ctx, 0);
        if (SSL_CTX_set_cipher_list(ctx, c->ciphers ? c->ciphers : default_ciphers) != 1) {
            ssl_err_text(err, errlen, "no usable cipher in 'ciphers'");
            *bad = -2;
            goto fail;
        }
        SSL_CTX_set_alpn_select_cb(ctx, alpn_select, s);
        SSL_CTX_set_client_hello_cb(ctx, client_hello_cb, s);
        SSL_CTX_set_tlsext_servername_callback(ctx, servername_cb);
        if (!load_pair(ctx, cc->cert, cc->cert_path, cc->key, cc->key_path, err, errlen)) goto fail;
        s->kind[i] = (unsigned char)key_kind(ctx);
        size_t first_name = s->nnames;
        bool ok = true;
        if (cc->nsni)
            for (size_t j = 0; j < cc->nsni; j++)
                ok = ok && add_name(s, &cap, cc->sni[j], (uint32_t)i);
        else
            ok = add_cert_names(s, &cap, ctx, (uint32_t)i);
        if (!ok) {
            snprintf(err, errlen, "out of memory");
            goto fail;
        }
        if (!link_names(s, first_name, (uint32_t)i, cc->nsni > 0, err, errlen)) goto fail;
        if (cc->is_default) s->def = (uint32_t)i;
        if (c->client_auth && !client_auth_apply(s, c->client_auth, ctx)) {
            *bad = -3;
            ssl_err_text(err, errlen, "cannot set up client certificate verification");
            goto fail;
        }
        if (!entry_sid(ctx, c->client_auth ? sid : NULL)) {
            ssl_err_text(err, errlen, "cannot set the session id context");
            goto fail;
        }
    }
    *bad = -1;
    return s;
fail:
    sl_tls_server_free(s);
    return NULL;
}

/* ---- target contexts ---- */

struct sl_tls_client_s {
    SSL_CTX *ctx;
    char *sni, *ip;
    pthread_mutex_t mu;
    SSL_SESSION *sess; /**< the newest session the target gave, for the next connection */
};

static int client_new_session(SSL *ssl, SSL_SESSION *sess) {
    sl_tls_client_t *c = SSL_CTX_get_app_data(SSL_get_SSL_CTX(ssl));
    if (!c || !SSL_SESSION_is_resumable(sess)) return 0;
    pthread_mutex_lock(&c->mu);
    SSL_SESSION *old = c->sess;
    c->sess = sess;
    pthread_mutex_unlock(&c->mu);
    if (old) SSL_SESSION_free(old);
    return 1; /* we keep the reference */
}

void sl_tls_client_free(sl_tls_client_t *c) {
    if (!c) return;
    SSL_CTX_free(c->ctx);
    if (c->sess) SSL_SESSION_free(c->sess);
    pthread_mutex_destroy(&c->mu);
    free(c->sni);
    free(c->ip);
    free(c);
}

void sl_tls_client_offer_h2(sl_tls_client_t *c) {
    static const unsigned char alpn[] = "\x02h2";
    SSL_CTX_set_alpn_protos(c->ctx, alpn, sizeof alpn - 1);
}

sl_tls_client_t *sl_tls_client_build(const sl_tls_target_conf_t *tc, const char *ip, char *err,
                                     size_t errlen) {
    sl_tls_client_t *c = calloc(1, sizeof *c);
    if (!c) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    pthread_mutex_init(&c->mu, NULL);
    ERR_clear_error();
    if (!(c->ctx = SSL_CTX_new(TLS_client_method()))) {
        ssl_err_text(err, errlen, "cannot create a TLS context");
        goto fail;
    }
    SSL_CTX_set_app_data(c->ctx, c);
    SSL_CTX_set_min_proto_version(c->ctx, TLS1_2_VERSION);
    /* A peer that closes without close_notify (Python's ssl servers, many HTTP/1.0 ones)
     * ends its stream like a FIN, as nginx and curl take it: a close-delimited body ends
     * there; one with a length or chunked that is cut short is still an error. */
    SSL_CTX_set_options(c->ctx, SSL_OP_NO_RENEGOTIATION | SSL_OP_NO_COMPRESSION |
                                    SSL_OP_IGNORE_UNEXPECTED_EOF);
    SSL_CTX_set_mode(c->ctx, SSL_MODE_RELEASE_BUFFERS);
    SSL_CTX_set_session_cache_mode(c->ctx,
                                   SSL_SESS_CACHE_CLIENT | SSL_SESS_CACHE_NO_INTERNAL_STORE);
    SSL_CTX_sess_set_new_cb(c->ctx, client_new_session);
    static const unsigned char alpn[] = "\x08http/1.1";
    SSL_CTX_set_alpn_protos(c->ctx, alpn, sizeof alpn - 1);
    if (tc->verify) {
        SSL_CTX_set_verify(c->ctx, SSL_VERIFY_PEER, NULL);
        if (tc->ca_path && !readable(tc->ca_path, "CA file", tc->ca, err, errlen)) goto fail;
        int ok = tc->ca_path ? SSL_CTX_load_verify_locations(c->ctx, tc->ca_path, NULL)
                             : SSL_CTX_set_default_verify_paths(c->ctx);
        if (ok != 1) {
            char what[600];
            snprintf(what, sizeof what, "cannot load CA file %s", tc->ca ? tc->ca : "(system)");
            ssl_err_text(err, errlen, what);
            goto fail;
        }
    }
    /* a client certificate for upstreams that ask for one (nginx's proxy_ssl_certificate) */
    if (tc->cert_path && !load_pair(c->ctx, tc->cert, tc->cert_path, tc->key, tc->key_path, err, errlen)) goto fail;
    if ((tc->sni && !(c->sni = strdup(tc->sni))) || (ip && !(c->ip = strdup(ip)))) {
        snprintf(err, errlen, "out of memory");
        goto fail;
    }
    return c;
fail:
    sl_tls_client_free(c);
    return NULL;
}

void sl_tls_listener_conf_free(sl_tls_listener_conf_t *t) {
    if (!t) return;
    sl_tls_server_free(t->rt);
    if (t->client_auth) {
        free(t->client_auth->ca);
        free(t->client_auth->ca_path);
        free(t->client_auth->crl);
        free(t->client_auth->crl_path);
        free(t->client_auth);
    }
    for (size_t i = 0; t->certs && i < t->ncerts; i++) {
        sl_tls_cert_conf_t *c = &t->certs[i];
        free(c->cert);
        free(c->key);
        free(c->cert_path);
        free(c->key_path);
        for (size_t j = 0; c->sni && j < c->nsni; j++) free(c->sni[j]);
        free(c->sni);
    }
    free(t->certs);
    free(t->ciphers);
    free(t);
}

void sl_tls_target_conf_free(sl_tls_target_conf_t *c) {
    if (!c) return;
    sl_tls_client_free(c->rt);
    free(c->ca);
    free(c->ca_path);
    free(c->cert);
    free(c->cert_path);
    free(c->key);
    free(c->key_path);
    free(c->sni);
    free(c);
}

/* ---- what a session takes from its context (net/tls.c) ---- */

SSL_CTX *sl__tls_server_ctx(const sl_tls_server_t *s) { return s->ctx[s->def]; }

SSL_CTX *sl__tls_client_ctx(const sl_tls_client_t *c) { return c->ctx; }

void sl__tls_client_prepare(sl_tls_client_t *c, SSL *ssl) {
    if (c->sni) {
        SSL_set_tlsext_host_name(ssl, c->sni);
        SSL_set1_host(ssl, c->sni);
    } else if (c->ip) {
        X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), c->ip);
    }
    pthread_mutex_lock(&c->mu);
    if (c->sess) SSL_set_session(ssl, c->sess);
    pthread_mutex_unlock(&c->mu);
}
