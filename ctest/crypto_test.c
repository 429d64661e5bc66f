/* crypto_test.c — unit tests for core/crypto.c: the r||s to DER conversion over enough
 * OpenSSL-made ECDSA signatures to meet the edge cases (r or s with leading zero bytes,
 * with the top bit set, P-521's long-form SEQUENCE), that OpenSSL's error queue is left
 * as found, and one key shared by verifying threads. Keys and signatures come from
 * OpenSSL directly, the Lua spec covers the rest against the openssl CLI. */
#include "sluice.h"

#include <openssl/bn.h>
#include <openssl/ec.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

static const unsigned char MSG[] = "eyJhbGciOiJFUzI1NiJ9.eyJzdWIiOiJ0ZXN0In0";

/* The public half of pkey as a sluice key, through PEM as a config would give it. */
static sl_pkey_t *public_of(EVP_PKEY *pkey) {
    BIO *b = BIO_new(BIO_s_mem());
    PEM_write_bio_PUBKEY(b, pkey);
    char *pem;
    long n = BIO_get_mem_data(b, &pem);
    const char *err = NULL;
    sl_pkey_t *k = sl_ffi_crypto_key_pem(pem, (size_t)n, &err);
    if (!k) fprintf(stderr, "key_pem: %s\n", err);
    BIO_free(b);
    return k;
}

/* OpenSSL's signature of MSG (md NULL for EdDSA); returns its length. */
static size_t sign(EVP_PKEY *pkey, const char *md, unsigned char *sig, size_t cap) {
    EVP_MD_CTX *m = EVP_MD_CTX_new();
    CHECK(EVP_DigestSignInit_ex(m, NULL, md, NULL, NULL, pkey, NULL) == 1);
    CHECK(EVP_DigestSign(m, sig, &cap, MSG, sizeof(MSG) - 1) == 1);
    EVP_MD_CTX_free(m);
    return cap;
}

/* Signs MSG; writes the JWS form r || s (each `half` bytes) into raw. */
static void sign_raw(EVP_PKEY *pkey, const char *md, unsigned char *raw, size_t half) {
    unsigned char der[160];
    size_t dl = sign(pkey, md, der, sizeof(der));
    const unsigned char *p = der;
    ECDSA_SIG *s = d2i_ECDSA_SIG(NULL, &p, (long)dl);
    CHECK(s != NULL);
    BN_bn2binpad(ECDSA_SIG_get0_r(s), raw, (int)half);
    BN_bn2binpad(ECDSA_SIG_get0_s(s), raw + half, (int)half);
    ECDSA_SIG_free(s);
}

/* Whether the big-endian integer's first non-zero byte has its top bit set: DER then
 * puts a 0x00 in front (INTEGER is signed). */
static int needs_pad(const unsigned char *p, size_t n) {
    while (n > 1 && *p == 0) p++, n--;
    return (*p & 0x80) != 0;
}

/* Signatures until `want` of them had r or s starting with a zero byte (those lose bytes
 * in DER) and `want` had r or s that gain a 0x00 in DER: every one must verify, and each
 * with one bit flipped must not. */
static void test_ecdsa_der(const char *curve, const char *alg, const char *md, size_t half) {
    EVP_PKEY *pkey = EVP_PKEY_Q_keygen(NULL, NULL, "EC", curve);
    sl_pkey_t *k = public_of(pkey);
    CHECK(k != NULL);
    if (!k) return;
    int zeros = 0, highs = 0, n = 0, want = 4;
    const char *err = NULL;
    for (; n < 20000 && (zeros < want || highs < want); n++) {
        unsigned char raw[132];
        sign_raw(pkey, md, raw, half);
        zeros += raw[0] == 0 || raw[half] == 0;
        highs += needs_pad(raw, half) || needs_pad(raw + half, half);
        int rc = sl_ffi_crypto_verify(k, alg, MSG, sizeof(MSG) - 1, raw, 2 * half, &err);
        CHECK_INT(rc, 1);
        if (rc != 1) fprintf(stderr, "%s: %s\n", alg, err);
        raw[n % (2 * half)] ^= (unsigned char)(1u << (n % 8));
        CHECK_INT(sl_ffi_crypto_verify(k, alg, MSG, sizeof(MSG) - 1, raw, 2 * half, &err), 0);
    }
    CHECK(zeros >= want);
    CHECK(highs >= want);
    printf("%s: %d signatures, %d with a leading zero byte, %d padded with 0x00 in DER\n", alg, n,
           zeros, highs);
    sl_ffi_crypto_key_free(k);
    EVP_PKEY_free(pkey);
}

/* A worker's TLS reads the same per-thread error queue: a failed verification must leave
 * it exactly as it was, whatever was queued before. */
static void test_error_queue(void) {
    EVP_PKEY *pkey = EVP_PKEY_Q_keygen(NULL, NULL, "EC", "P-256");
    sl_pkey_t *k = public_of(pkey);
    unsigned char raw[64] = {1};
    const char *err = NULL;
    ERR_clear_error();
    CHECK_INT(sl_ffi_crypto_verify(k, "ES256", MSG, 3, raw, sizeof(raw), &err), 0);
    CHECK_INT(ERR_peek_error(), 0);
    const char *bad = "-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n";
    CHECK(sl_ffi_crypto_key_pem(bad, strlen(bad), &err) == NULL);
    CHECK_INT(ERR_peek_error(), 0);

    ERR_raise(ERR_LIB_USER, 42);
    unsigned long before = ERR_peek_last_error();
    CHECK_INT(sl_ffi_crypto_verify(k, "ES256", MSG, 3, raw, sizeof(raw), &err), 0);
    CHECK_INT(ERR_peek_last_error(), before);
    CHECK_INT(ERR_get_error(), before);
    CHECK_INT(ERR_get_error(), 0);
    sl_ffi_crypto_key_free(k);
    EVP_PKEY_free(pkey);
}

typedef struct {
    sl_pkey_t *k;
    const unsigned char *sig;
    int ok;
} verifier_t;

static void *verify_loop(void *arg) {
    verifier_t *v = arg;
    const char *err;
    for (int i = 0; i < 300; i++)
        v->ok += sl_ffi_crypto_verify(v->k, "EdDSA", MSG, sizeof(MSG) - 1, v->sig, 64, &err) == 1;
    return NULL;
}

/* Workers are threads, and a key built once may be handed to all of them. */
static void test_threads_share_a_key(void) {
    EVP_PKEY *pkey = EVP_PKEY_Q_keygen(NULL, NULL, "ED25519");
    unsigned char sig[64];
    CHECK_INT(sign(pkey, NULL, sig, sizeof(sig)), 64);
    sl_pkey_t *k = public_of(pkey);
    pthread_t t[4];
    verifier_t v[4];
    for (int i = 0; i < 4; i++) {
        v[i] = (verifier_t){k, sig, 0};
        pthread_create(&t[i], NULL, verify_loop, &v[i]);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(t[i], NULL);
        CHECK_INT(v[i].ok, 300);
    }
    sl_ffi_crypto_key_free(k);
    EVP_PKEY_free(pkey);
}

int main(void) {
    test_ecdsa_der("P-256", "ES256", "SHA256", 32);
    test_ecdsa_der("P-384", "ES384", "SHA384", 48);
    test_ecdsa_der("P-521", "ES512", "SHA512", 66);
    test_error_queue();
    test_threads_share_a_key();
    printf("%d passed, %d failed\n", passed, failed);
    return failed != 0;
}
