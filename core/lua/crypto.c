/* crypto.c — sluice.crypto's C side: digests, HMAC, and JWS signature verification
 * (RFC 7518 algorithm names) on OpenSSL 3's libcrypto, which the core links for TLS;
 * a constant-time compare and stored password hashes (libcrypt's crypt(3), PBKDF2).
 *
 * Threads: every function may run on any worker thread at once. Digest and MAC
 * methods are fetched once per process (an implicit fetch by name would search the
 * provider store on every call); a key is read-only once built; each call makes its
 * own contexts.
 *
 * OpenSSL's error queue is per thread, and a worker thread also runs TLS, where
 * SSL_get_error() reports SSL_ERROR_SSL whenever an error is queued. A failed
 * verification queues errors, so every entry point sets a mark on entry and pops back
 * to it on return: the queue is left as it was found.
 */
#include <crypt.h>
#include <limits.h>
#include <pthread.h>
#include <stdlib.h>

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/decoder.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/objects.h>
#include <openssl/param_build.h>
#include <openssl/pem.h>
#include <openssl/rsa.h>
#include <openssl/x509.h>

#include "base/common.h"
#include "sluice.h"

enum { KTY_RSA, KTY_EC, KTY_OKP };
static const char *const kty_names[] = {"RSA", "EC", "OKP"};

typedef struct {
    const char *jwk;  /* the JWK/JWS name: crv member, and what key_info reports */
    const char *ossl; /* OpenSSL's group or key type name */
    int nid;
    int kty;
    size_t size; /* EC: bytes of one coordinate (and of r and s); OKP: the raw public key */
} curve_t;

static const curve_t curves[] = {
    {"P-256", "P-256", NID_X9_62_prime256v1, KTY_EC, 32},
    {"P-384", "P-384", NID_secp384r1, KTY_EC, 48},
    {"P-521", "P-521", NID_secp521r1, KTY_EC, 66},
    {"Ed25519", "ED25519", NID_ED25519, KTY_OKP, 32},
    {"Ed448", "ED448", NID_ED448, KTY_OKP, 57},
};
#define P256 (&curves[0])
#define P384 (&curves[1])
#define P521 (&curves[2])

struct sl_pkey_s {
    EVP_PKEY *pkey;
    int kty;
    const curve_t *curve; /* NULL for RSA */
    int bits;
};

/* md5 is for compatibility only (ngx.md5 in the Kong layer, lua/sluice/kong): never a signature digest. */
enum { MD_SHA1, MD_SHA256, MD_SHA384, MD_SHA512, MD_MD5, MD_COUNT };
static const char *const md_names[MD_COUNT] = {"sha1", "sha256", "sha384", "sha512", "md5"};
static const char *const md_ossl[MD_COUNT] = {"SHA1", "SHA2-256", "SHA2-384", "SHA2-512", "MD5"};

static pthread_once_t fetch_once = PTHREAD_ONCE_INIT;
static EVP_MD *mds[MD_COUNT]; /* NULL when a provider lacks it (SHA-1 under FIPS) */
static EVP_MAC *hmac_mac;

/* Process lifetime: fetched methods are never freed (they are shared by every thread). */
static void fetch_methods(void) {
    for (int i = 0; i < MD_COUNT; i++) mds[i] = EVP_MD_fetch(NULL, md_ossl[i], NULL);
    hmac_mac = EVP_MAC_fetch(NULL, "HMAC", NULL);
    ERR_clear_error();
}

static int md_index(const char *name) {
    for (int i = 0; i < MD_COUNT; i++)
        if (strcmp(name, md_names[i]) == 0) return i;
    return -1;
}

typedef struct {
    const char *name;
    int md; /* -1 for EdDSA, which hashes inside the signature scheme */
    int kty;
    int padding;          /* RSA only */
    const curve_t *curve; /* ES*: the one curve the alg allows */
    const char *needs;    /* the error when the key does not fit */
} alg_t;

static const alg_t algs[] = {
    {"RS256", MD_SHA256, KTY_RSA, RSA_PKCS1_PADDING, NULL, "RS256 needs an RSA key"},
    {"RS384", MD_SHA384, KTY_RSA, RSA_PKCS1_PADDING, NULL, "RS384 needs an RSA key"},
    {"RS512", MD_SHA512, KTY_RSA, RSA_PKCS1_PADDING, NULL, "RS512 needs an RSA key"},
    {"PS256", MD_SHA256, KTY_RSA, RSA_PKCS1_PSS_PADDING, NULL, "PS256 needs an RSA key"},
    {"PS384", MD_SHA384, KTY_RSA, RSA_PKCS1_PSS_PADDING, NULL, "PS384 needs an RSA key"},
    {"PS512", MD_SHA512, KTY_RSA, RSA_PKCS1_PSS_PADDING, NULL, "PS512 needs an RSA key"},
    {"ES256", MD_SHA256, KTY_EC, 0, P256, "ES256 needs an EC P-256 key"},
    {"ES384", MD_SHA384, KTY_EC, 0, P384, "ES384 needs an EC P-384 key"},
    {"ES512", MD_SHA512, KTY_EC, 0, P521, "ES512 needs an EC P-521 key"},
    {"EdDSA", -1, KTY_OKP, 0, NULL, "EdDSA needs an OKP key (Ed25519 or Ed448)"},
};

/* ---------------------------------------------------------------- digests, HMAC */

static int digest(const char *name, const unsigned char *data, size_t len, unsigned char *out,
                  size_t *outlen, const char **err) {
    int i = md_index(name);
    if (i < 0) {
        *err = "unknown digest (sha1, sha256, sha384, sha512, md5)";
        return SL_DECLINED;
    }
    if (!mds[i]) {
        *err = "digest not available from the OpenSSL providers";
        return SL_ERROR;
    }
    if (*outlen < (size_t)EVP_MD_get_size(mds[i])) {
        *err = "output buffer smaller than the digest";
        return SL_ERROR;
    }
    unsigned int n;
    if (EVP_Digest(data, len, out, &n, mds[i], NULL) != 1) {
        *err = "digest failed";
        return SL_ERROR;
    }
    *outlen = n;
    return SL_OK;
}

int sl_ffi_crypto_digest(const char *name, const unsigned char *data, size_t len,
                         unsigned char *out, size_t *outlen, const char **err) {
    pthread_once(&fetch_once, fetch_methods);
    ERR_set_mark();
    int rc = digest(name, data, len, out, outlen, err);
    ERR_pop_to_mark();
    return rc;
}

static int hmac(const char *name, const unsigned char *key, size_t kl, const unsigned char *data,
                size_t dl, unsigned char *out, size_t *outlen, const char **err) {
    int i = md_index(name);
    if (i < 0) {
        *err = "unknown digest (sha1, sha256, sha384, sha512, md5)";
        return SL_DECLINED;
    }
    if (!hmac_mac || !mds[i]) {
        *err = "HMAC not available from the OpenSSL providers";
        return SL_ERROR;
    }
    if (*outlen < (size_t)EVP_MD_get_size(mds[i])) {
        *err = "output buffer smaller than the digest";
        return SL_ERROR;
    }
    OSSL_PARAM params[] = {
        OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, (char *)md_ossl[i], 0),
        OSSL_PARAM_construct_end(),
    };
    /* A NULL key means "keep the previous key" to EVP_MAC_init; an empty key is a key. */
    static const unsigned char empty[1];
    int rc = SL_ERROR;
    EVP_MAC_CTX *ctx = EVP_MAC_CTX_new(hmac_mac);
    if (!ctx || EVP_MAC_init(ctx, kl ? key : empty, kl, params) != 1 ||
        EVP_MAC_update(ctx, data, dl) != 1 || EVP_MAC_final(ctx, out, outlen, *outlen) != 1) {
        *err = "hmac failed";
        goto done;
    }
    rc = SL_OK;
done:
    EVP_MAC_CTX_free(ctx);
    return rc;
}

int sl_ffi_crypto_hmac(const char *name, const unsigned char *key, size_t key_len,
                       const unsigned char *data, size_t len, unsigned char *out, size_t *outlen,
                       const char **err) {
    pthread_once(&fetch_once, fetch_methods);
    ERR_set_mark();
    int rc = hmac(name, key, key_len, data, len, out, outlen, err);
    ERR_pop_to_mark();
    return rc;
}

/* ---------------------------------------------------------------- keys */

/* Wraps pkey (taking it over) once its type is one verification supports. */
static sl_pkey_t *key_wrap(EVP_PKEY *pkey, const char **err) {
    const curve_t *curve = NULL;
    int kty;
    if (EVP_PKEY_is_a(pkey, "RSA")) {
        kty = KTY_RSA;
    } else if (EVP_PKEY_is_a(pkey, "EC")) {
        char group[64];
        if (EVP_PKEY_get_utf8_string_param(pkey, OSSL_PKEY_PARAM_GROUP_NAME, group, sizeof(group),
                                           NULL) != 1)
            goto unsupported;
        int nid = OBJ_txt2nid(group);
        for (size_t i = 0; i < SL_ARRAY_LEN(curves); i++)
            if (curves[i].kty == KTY_EC && curves[i].nid == nid) curve = &curves[i];
        if (!curve) goto unsupported;
        kty = KTY_EC;
    } else {
        for (size_t i = 0; i < SL_ARRAY_LEN(curves); i++)
            if (curves[i].kty == KTY_OKP && EVP_PKEY_is_a(pkey, curves[i].ossl)) curve = &curves[i];
        if (!curve) goto unsupported;
        kty = KTY_OKP;
    }
    sl_pkey_t *k = malloc(sizeof(*k));
    if (!k) {
        *err = "out of memory";
        goto fail;
    }
    *k = (sl_pkey_t){.pkey = pkey, .kty = kty, .curve = curve, .bits = EVP_PKEY_get_bits(pkey)};
    return k;
unsupported:
    /* RSA-PSS-only keys (id-RSASSA-PSS) land here too: JWS PS* keys are plain RSA keys. */
    *err = "unsupported key type (RSA, EC P-256/P-384/P-521, Ed25519, Ed448)";
fail:
    EVP_PKEY_free(pkey);
    return NULL;
}

/* The label of the first "-----BEGIN <label>-----" line, and where that line starts. */
static bool pem_label(const char *pem, size_t len, sl_str_t *label, size_t *start) {
    static const char begin[] = "-----BEGIN ";
    const char *b = memmem(pem, len, begin, sizeof(begin) - 1);
    if (!b) return false;
    const char *l = b + sizeof(begin) - 1;
    const char *e = memmem(l, (size_t)(pem + len - l), "-----", 5);
    if (!e) return false;
    *label = (sl_str_t){l, (size_t)(e - l)};
    *start = (size_t)(b - pem);
    return true;
}

static bool label_is(sl_str_t label, const char *s) {
    return label.len == strlen(s) && memcmp(label.p, s, label.len) == 0;
}

static sl_pkey_t *key_pem(const char *pem, size_t len, const char **err) {
    sl_str_t label;
    size_t start;
    if (!pem_label(pem, len, &label, &start)) {
        *err = "no PEM block (-----BEGIN ...-----) found";
        return NULL;
    }
    bool cert = label_is(label, "CERTIFICATE");
    if (!cert && !label_is(label, "PUBLIC KEY") && !label_is(label, "RSA PUBLIC KEY")) {
        /* Verification never needs a private key; taking one would invite keeping
         * private keys in gateway config. */
        *err = memmem(label.p, label.len, "PRIVATE", 7)
                   ? "a private key: give the PUBLIC KEY (openssl pkey -pubout) or a CERTIFICATE"
                   : "unsupported PEM block (PUBLIC KEY, RSA PUBLIC KEY or CERTIFICATE)";
        return NULL;
    }
    if (len - start > INT_MAX) {
        *err = "PEM too large";
        return NULL;
    }
    EVP_PKEY *pkey = NULL;
    BIO *bio = BIO_new_mem_buf(pem + start, (int)(len - start));
    if (!bio) {
        *err = "out of memory";
        return NULL;
    }
    if (cert) {
        X509 *x = PEM_read_bio_X509(bio, NULL, NULL, NULL);
        if (x) pkey = X509_get_pubkey(x);
        X509_free(x);
    } else {
        /* The decoder reads the structure from the PEM label: SubjectPublicKeyInfo, or
         * PKCS#1 RSAPublicKey whose only non-deprecated reader this is. */
        OSSL_DECODER_CTX *dctx = OSSL_DECODER_CTX_new_for_pkey(&pkey, "PEM", NULL, NULL,
                                                               EVP_PKEY_PUBLIC_KEY, NULL, NULL);
        if (dctx) OSSL_DECODER_from_bio(dctx, bio);
        OSSL_DECODER_CTX_free(dctx);
    }
    BIO_free(bio);
    if (!pkey) {
        *err = cert ? "bad PEM certificate" : "bad PEM public key";
        return NULL;
    }
    return key_wrap(pkey, err);
}

sl_pkey_t *sl_ffi_crypto_key_pem(const char *pem, size_t len, const char **err) {
    ERR_set_mark();
    sl_pkey_t *k = key_pem(pem, len, err);
    ERR_pop_to_mark();
    return k;
}

/* An EVP_PKEY of type `type` from public-key parameters. */
static EVP_PKEY *from_params(const char *type, OSSL_PARAM *params) {
    EVP_PKEY *pkey = NULL;
    EVP_PKEY_CTX *ctx = EVP_PKEY_CTX_new_from_name(NULL, type, NULL);
    if (!ctx || EVP_PKEY_fromdata_init(ctx) != 1 ||
        EVP_PKEY_fromdata(ctx, &pkey, EVP_PKEY_PUBLIC_KEY, params) != 1)
        pkey = NULL;
    EVP_PKEY_CTX_free(ctx);
    return pkey;
}

static sl_pkey_t *key_rsa(const unsigned char *n, size_t nl, const unsigned char *e, size_t el,
                          const char **err) {
    if (nl == 0 || el == 0 || nl > INT_MAX || el > INT_MAX) {
        *err = "RSA key needs n and e";
        return NULL;
    }
    EVP_PKEY *pkey = NULL;
    OSSL_PARAM *params = NULL;
    OSSL_PARAM_BLD *bld = OSSL_PARAM_BLD_new();
    BIGNUM *bn = BN_bin2bn(n, (int)nl, NULL), *be = BN_bin2bn(e, (int)el, NULL);
    if (!bld || !bn || !be || OSSL_PARAM_BLD_push_BN(bld, OSSL_PKEY_PARAM_RSA_N, bn) != 1 ||
        OSSL_PARAM_BLD_push_BN(bld, OSSL_PKEY_PARAM_RSA_E, be) != 1 ||
        !(params = OSSL_PARAM_BLD_to_param(bld))) {
        *err = "out of memory";
        goto done;
    }
    /* A zero or even modulus or exponent is no RSA key; OpenSSL would only fail later, on
     * every verification, with nothing saying why. */
    if (!BN_is_odd(bn) || !BN_is_odd(be) || BN_is_one(be)) {
        *err = "not an RSA public key (n and e must be odd, e greater than 1)";
        goto done;
    }
    pkey = from_params("RSA", params);
    if (!pkey) *err = "bad RSA public key";
done:
    OSSL_PARAM_free(params);
    OSSL_PARAM_BLD_free(bld);
    BN_free(bn);
    BN_free(be);
    return pkey ? key_wrap(pkey, err) : NULL;
}

sl_pkey_t *sl_ffi_crypto_key_rsa(const unsigned char *n, size_t n_len, const unsigned char *e,
                                 size_t e_len, const char **err) {
    ERR_set_mark();
    sl_pkey_t *k = key_rsa(n, n_len, e, e_len, err);
    ERR_pop_to_mark();
    return k;
}

static const curve_t *curve_named(const char *crv, int kty) {
    for (size_t i = 0; i < SL_ARRAY_LEN(curves); i++)
        if (curves[i].kty == kty && strcmp(crv, curves[i].jwk) == 0) return &curves[i];
    return NULL;
}

static sl_pkey_t *key_ec(const char *crv, const unsigned char *x, size_t xl, const unsigned char *y,
                         size_t yl, const char **err) {
    const curve_t *c = curve_named(crv, KTY_EC);
    if (!c) {
        *err = "unsupported EC curve (P-256, P-384, P-521)";
        return NULL;
    }
    /* RFC 7518 section 6.2.1.2: x and y are the full coordinate size, leading zeros kept. */
    if (xl != c->size || yl != c->size) {
        *err = "EC x and y must each be the curve's coordinate size (32, 48 or 66 bytes)";
        return NULL;
    }
    unsigned char point[1 + 2 * 66]; /* uncompressed: 0x04 || x || y */
    point[0] = 0x04;
    memcpy(point + 1, x, xl);
    memcpy(point + 1 + xl, y, yl);
    OSSL_PARAM params[] = {
        OSSL_PARAM_construct_utf8_string(OSSL_PKEY_PARAM_GROUP_NAME, (char *)c->ossl, 0),
        OSSL_PARAM_construct_octet_string(OSSL_PKEY_PARAM_PUB_KEY, point, 1 + xl + yl),
        OSSL_PARAM_construct_end(),
    };
    EVP_PKEY *pkey = from_params("EC", params);
    if (!pkey) {
        *err = "bad EC public key (is the point on the curve?)";
        return NULL;
    }
    return key_wrap(pkey, err);
}

sl_pkey_t *sl_ffi_crypto_key_ec(const char *crv, const unsigned char *x, size_t x_len,
                                const unsigned char *y, size_t y_len, const char **err) {
    ERR_set_mark();
    sl_pkey_t *k = key_ec(crv, x, x_len, y, y_len, err);
    ERR_pop_to_mark();
    return k;
}

static sl_pkey_t *key_okp(const char *crv, const unsigned char *x, size_t xl, const char **err) {
    const curve_t *c = curve_named(crv, KTY_OKP);
    if (!c) {
        /* X25519 and X448 are OKP too, but key agreement curves: they cannot sign. */
        *err = "unsupported OKP curve (Ed25519, Ed448)";
        return NULL;
    }
    if (xl != c->size) {
        *err = "OKP x must be the curve's public key size (32 bytes for Ed25519, 57 for Ed448)";
        return NULL;
    }
    EVP_PKEY *pkey = EVP_PKEY_new_raw_public_key_ex(NULL, c->ossl, NULL, x, xl);
    if (!pkey) {
        *err = "bad OKP public key";
        return NULL;
    }
    return key_wrap(pkey, err);
}

sl_pkey_t *sl_ffi_crypto_key_okp(const char *crv, const unsigned char *x, size_t x_len,
                                 const char **err) {
    ERR_set_mark();
    sl_pkey_t *k = key_okp(crv, x, x_len, err);
    ERR_pop_to_mark();
    return k;
}

void sl_ffi_crypto_key_info(const sl_pkey_t *k, const char **kty, const char **crv, int *bits) {
    *kty = kty_names[k->kty];
    *crv = k->curve ? k->curve->jwk : NULL;
    *bits = k->bits;
}

void sl_ffi_crypto_key_free(sl_pkey_t *k) {
    if (!k) return;
    EVP_PKEY_free(k->pkey);
    free(k);
}

/* ---------------------------------------------------------------- verify */

/* Writes r or s (n big-endian bytes) as a DER INTEGER: leading zeros dropped, one 0x00
 * put back when the top bit is set (INTEGER is signed). n <= 66, so the length fits in
 * one byte. Returns the bytes written. */
static size_t der_integer(unsigned char *out, const unsigned char *p, size_t n) {
    while (n > 1 && p[0] == 0) p++, n--;
    size_t pad = (p[0] & 0x80) ? 1 : 0;
    out[0] = 0x02;
    out[1] = (unsigned char)(n + pad);
    out[2] = 0;
    memcpy(out + 2 + pad, p, n);
    return 2 + pad + n;
}

/* JWS carries ECDSA signatures as r || s (RFC 7518 section 3.4); OpenSSL takes
 * ECDSA-Sig-Value, a DER SEQUENCE of two INTEGERs. Encoded here, on the stack, rather
 * than through ECDSA_SIG and two BIGNUMs: three allocations saved on every ES* token. */
static size_t ecdsa_der(unsigned char *out, const unsigned char *sig, size_t half) {
    unsigned char body[2 * (3 + 66)];
    size_t n = der_integer(body, sig, half);
    n += der_integer(body + n, sig + half, half);
    size_t h = 0;
    out[h++] = 0x30;
    if (n > 127) out[h++] = 0x81; /* P-521: the body can pass 127 bytes */
    out[h++] = (unsigned char)n;
    memcpy(out + h, body, n);
    return h + n;
}

static int verify(const sl_pkey_t *k, const char *name, const unsigned char *data, size_t dl,
                  const unsigned char *sig, size_t sl, const char **err) {
    const alg_t *a = NULL;
    for (size_t i = 0; i < SL_ARRAY_LEN(algs); i++)
        if (strcmp(name, algs[i].name) == 0) a = &algs[i];
    if (!a) {
        *err = "unknown alg (RS256/384/512, PS256/384/512, ES256/384/512, EdDSA)";
        return SL_ERROR;
    }
    /* The key decides what it may verify, never the signed data: an RSA key must not pass
     * for an EC alg, nor a P-384 key for ES256. */
    if (k->kty != a->kty || (a->curve && k->curve != a->curve)) {
        *err = a->needs;
        return SL_ERROR;
    }
    const EVP_MD *md = NULL;
    if (a->md >= 0 && !(md = mds[a->md])) {
        *err = "digest not available from the OpenSSL providers";
        return SL_ERROR;
    }
    unsigned char der[3 + 2 * (3 + 66)];
    if (a->kty == KTY_EC) {
        if (sl != 2 * a->curve->size) {
            *err = "ECDSA signature has the wrong length for the alg";
            return 0;
        }
        sl = ecdsa_der(der, sig, a->curve->size);
        sig = der;
    }

    int rc = SL_ERROR;
    EVP_PKEY_CTX *pctx = NULL; /* owned by mctx */
    EVP_MD_CTX *mctx = EVP_MD_CTX_new();
    if (!mctx || EVP_DigestVerifyInit(mctx, &pctx, md, NULL, k->pkey) != 1) {
        *err = "cannot start verification";
        goto done;
    }
    /* PS*: RFC 7518 section 3.5 fixes MGF1 to the same digest and the salt to the digest's
     * length; RSA_PSS_SALTLEN_DIGEST makes OpenSSL reject any other salt length. */
    if (a->padding == RSA_PKCS1_PSS_PADDING &&
        (EVP_PKEY_CTX_set_rsa_padding(pctx, RSA_PKCS1_PSS_PADDING) != 1 ||
         EVP_PKEY_CTX_set_rsa_mgf1_md(pctx, md) != 1 ||
         EVP_PKEY_CTX_set_rsa_pss_saltlen(pctx, RSA_PSS_SALTLEN_DIGEST) != 1)) {
        *err = "cannot set RSA-PSS parameters";
        goto done;
    }
    int r = EVP_DigestVerify(mctx, sig, sl, data, dl);
    if (r == 1) {
        rc = 1;
    } else if (r == 0) {
        *err = "signature does not match";
        rc = 0;
    } else {
        *err = "verification failed to run";
    }
done:
    EVP_MD_CTX_free(mctx);
    return rc;
}

int sl_ffi_crypto_verify(const sl_pkey_t *k, const char *alg, const unsigned char *data,
                         size_t data_len, const unsigned char *sig, size_t sig_len,
                         const char **err) {
    pthread_once(&fetch_once, fetch_methods);
    ERR_set_mark();
    int rc = verify(k, alg, data, data_len, sig, sig_len, err);
    ERR_pop_to_mark();
    return rc;
}

/* ---------------------------------------------------------------- passwords */

int sl_ffi_crypto_equal(const unsigned char *a, size_t a_len, const unsigned char *b,
                        size_t b_len) {
    return a_len == b_len && CRYPTO_memcmp(a, b, a_len) == 0;
}

/* crypt(3) methods taken: the stored hash is the setting followed by `sum` characters of
 * crypt's base64, after a '$' except for bcrypt, whose 60 characters run salt and sum
 * together. The older methods libcrypt still reads (DES, MD5 "$1$", NT "$3$", ...) are
 * refused: a GPU tries billions of those a second. */
static const struct {
    const char *prefix;
    size_t sum;
    size_t total; /* 0: any length */
} crypt_methods[] = {
    {"$y$", 43, 0}, {"$6$", 86, 0}, {"$5$", 43, 0}, {"$2b$", 31, 60}, {"$2y$", 31, 60},
};

static const struct {
    const char *prefix;
    int md;
} pbkdf2_methods[] = {
    {"$pbkdf2-sha256$", MD_SHA256},
    {"$pbkdf2-sha512$", MD_SHA512},
};

#define PBKDF2_MIN_ROUNDS 1000
#define PBKDF2_MAX_ROUNDS 10000000 /* seconds of a worker per check: more is a typo */
#define PBKDF2_SALT_MAX 256

enum { PW_CRYPT, PW_PBKDF2 };

typedef struct {
    int kind;
    int md; /* PBKDF2 from here on */
    int rounds;
    size_t salt_len, sum_len;
    unsigned char salt[PBKDF2_SALT_MAX];
    unsigned char sum[SL_CRYPTO_MD_MAX];
} pwhash_t;

static bool is_crypt64(unsigned char c) {
    return c == '.' || c == '/' || (c >= '0' && c <= '9') || (c >= 'A' && c <= 'Z') ||
           (c >= 'a' && c <= 'z');
}

/* passlib's "adapted base64": RFC 4648's alphabet with '.' for '+', no padding. */
static int ab64_value(unsigned char c) {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    return c == '.' ? 62 : c == '/' ? 63 : -1;
}

/* Decodes n characters into out; false for another character, a length no byte count
 * gives, or more than cap bytes. */
static bool ab64_decode(const char *s, size_t n, unsigned char *out, size_t cap, size_t *len) {
    if (n % 4 == 1 || n / 4 * 3 + n % 4 * 3 / 4 > cap) return false;
    uint32_t acc = 0;
    int bits = 0;
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        int v = ab64_value((unsigned char)s[i]);
        if (v < 0) return false;
        acc = acc << 6 | (uint32_t)v;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            out[o++] = (unsigned char)(acc >> bits);
        }
    }
    *len = o;
    return true;
}

static bool has_prefix(const char *h, size_t hl, const char *prefix) {
    size_t n = strlen(prefix);
    return hl >= n && memcmp(h, prefix, n) == 0;
}

static int parse_crypt(const char *h, size_t hl, size_t i, const char **err) {
    size_t sum = crypt_methods[i].sum, total = crypt_methods[i].total;
    if (hl >= CRYPT_OUTPUT_SIZE || hl <= strlen(crypt_methods[i].prefix) + sum ||
        (total && hl != total) || (!total && h[hl - sum - 1] != '$')) {
        *err = "malformed crypt(3) hash: wrong length";
        return SL_ERROR;
    }
    for (size_t k = 0; k < hl; k++) {
        unsigned char c = (unsigned char)h[k];
        bool separator = c == '$' || c == '='; /* "$6$rounds=N$salt$sum" */
        if (!is_crypt64(c) && (k >= hl - sum || !separator)) {
            *err = "malformed crypt(3) hash: a character outside ./0-9A-Za-z";
            return SL_ERROR;
        }
    }
    return SL_OK;
}

/* "$pbkdf2-<md>$ROUNDS$SALT$SUM", h past the prefix. */
static int parse_pbkdf2(const char *h, size_t hl, pwhash_t *pw, const char **err) {
    const char *end = h + hl, *salt, *sum;
    long long rounds = 0;
    const char *p = h;
    for (; p < end && *p >= '0' && *p <= '9' && p - h < 9; p++) rounds = rounds * 10 + (*p - '0');
    if (p == h || p == end || *p != '$' || rounds < PBKDF2_MIN_ROUNDS ||
        rounds > PBKDF2_MAX_ROUNDS) {
        *err = "malformed PBKDF2 hash: rounds must be 1000 to 10000000";
        return SL_ERROR;
    }
    salt = p + 1;
    sum = memchr(salt, '$', (size_t)(end - salt));
    if (!sum ||
        !ab64_decode(salt, (size_t)(sum - salt), pw->salt, sizeof pw->salt, &pw->salt_len) ||
        pw->salt_len == 0) {
        *err = "malformed PBKDF2 hash: bad salt";
        return SL_ERROR;
    }
    sum++;
    size_t want = (size_t)EVP_MD_get_size(mds[pw->md]);
    if (!ab64_decode(sum, (size_t)(end - sum), pw->sum, sizeof pw->sum, &pw->sum_len) ||
        pw->sum_len != want) {
        *err = "malformed PBKDF2 hash: the checksum is not one digest long";
        return SL_ERROR;
    }
    pw->rounds = (int)rounds;
    return SL_OK;
}

static int pw_parse(const char *h, size_t hl, pwhash_t *pw, const char **err) {
    for (size_t i = 0; i < SL_ARRAY_LEN(crypt_methods); i++)
        if (has_prefix(h, hl, crypt_methods[i].prefix)) {
            pw->kind = PW_CRYPT;
            return parse_crypt(h, hl, i, err);
        }
    for (size_t i = 0; i < SL_ARRAY_LEN(pbkdf2_methods); i++)
        if (has_prefix(h, hl, pbkdf2_methods[i].prefix)) {
            pw->kind = PW_PBKDF2;
            pw->md = pbkdf2_methods[i].md;
            if (!mds[pw->md]) {
                *err = "digest not available from the OpenSSL providers";
                return SL_ERROR;
            }
            size_t n = strlen(pbkdf2_methods[i].prefix);
            return parse_pbkdf2(h + n, hl - n, pw, err);
        }
    *err = "unsupported password hash (crypt(3) $y$, $6$, $5$, $2b$, $2y$; $pbkdf2-sha256$, "
           "$pbkdf2-sha512$)";
    return SL_ERROR;
}

static int verify_crypt(const char *pw, size_t pl, const char *h, size_t hl, const char **err) {
    if (pl >= CRYPT_MAX_PASSPHRASE_SIZE) {
        *err = "password too long for crypt(3)";
        return 0;
    }
    /* 32 KiB of state: too much for a worker's stack, and nothing next to the hash's own
     * cost. crypt_rn, unlike crypt(3), keeps all state there: any thread, at once. */
    struct crypt_data *d = calloc(1, sizeof(*d));
    if (!d) {
        *err = "out of memory";
        return SL_ERROR;
    }
    memcpy(d->input, pw, pl);
    memcpy(d->setting, h, hl);
    const char *out = crypt_rn(d->input, d->setting, d, (int)sizeof(*d));
    int rc;
    if (!out) {
        *err = "libcrypt refused the hash's settings";
        rc = SL_ERROR;
    } else if (strlen(out) == hl && CRYPTO_memcmp(out, h, hl) == 0) {
        rc = 1;
    } else {
        *err = "password does not match";
        rc = 0;
    }
    OPENSSL_cleanse(d->input, sizeof(d->input));
    free(d);
    return rc;
}

static int verify_pbkdf2(const char *pw, size_t pl, const pwhash_t *ph, const char **err) {
    unsigned char out[SL_CRYPTO_MD_MAX];
    if (pl > INT_MAX) {
        *err = "password too long";
        return 0;
    }
    if (PKCS5_PBKDF2_HMAC(pw, (int)pl, ph->salt, (int)ph->salt_len, ph->rounds, mds[ph->md],
                          (int)ph->sum_len, out) != 1) {
        *err = "PBKDF2 failed";
        return SL_ERROR;
    }
    int rc = CRYPTO_memcmp(out, ph->sum, ph->sum_len) == 0;
    if (!rc) *err = "password does not match";
    OPENSSL_cleanse(out, sizeof(out));
    return rc;
}

int sl_ffi_crypto_password_verify(const char *password, size_t password_len, const char *hash,
                                  size_t hash_len, const char **err) {
    pthread_once(&fetch_once, fetch_methods);
    ERR_set_mark();
    pwhash_t ph;
    int rc = pw_parse(hash, hash_len, &ph, err);
    if (rc != SL_OK) {
        /* the hash's format is the error */
    } else if (memchr(password, 0, password_len)) {
        /* crypt(3) reads a C string, so "a\0b" would pass for "a"; HMAC pads its key with
         * zeros, so PBKDF2 takes "a\0" for "a". No real password holds a NUL. */
        *err = "password with a NUL byte";
        rc = 0;
    } else if (ph.kind == PW_CRYPT) {
        rc = verify_crypt(password, password_len, hash, hash_len, err);
    } else {
        rc = verify_pbkdf2(password, password_len, &ph, err);
    }
    ERR_pop_to_mark();
    return rc;
}

int sl_ffi_crypto_password_check(const char *hash, size_t hash_len, const char **err) {
    pthread_once(&fetch_once, fetch_methods);
    pwhash_t ph;
    return pw_parse(hash, hash_len, &ph, err);
}
