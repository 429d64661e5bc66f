/* tls_ctx.h — TLS as the config describes it (a listener's and a target's `tls:`) and the
 * contexts built from it when the config is built.
 *
 * A listener's `tls:` builds one sl_tls_server_t (an SSL_CTX per certificate, the names
 * that select each, the default) when the config is built, so `sluice check` and a reload
 * catch an unreadable file or a key that does not match its certificate, and certificates
 * change with the config generation (a connection keeps the context it was accepted
 * with). A target's `tls:` builds one sl_tls_client_t (verification, CA, SNI, and the last
 * session the target gave, for resumption). Both are immutable after the build apart from
 * the client's session slot (a mutex) and are shared by workers. Session-ticket keys are
 * process-wide: every worker and every generation encrypts with the current key, and a key
 * stays valid for decryption for two rotation periods.
 *
 * The sessions that run over these contexts on workers are net/tls.h's. The builders live
 * here, in the config layer, because the config build calls them (docs/DECISIONS.md).
 */
#ifndef SL_TLS_CTX_H
#define SL_TLS_CTX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct sl_tls_server_s sl_tls_server_t;
typedef struct sl_tls_client_s sl_tls_client_t;

/** One `certificates:` entry of a listener's `tls:`. */
typedef struct {
    char *cert, *key;          /**< as written */
    char *cert_path, *key_path;/**< resolved against the config file's folder */
    char **sni; size_t nsni;   /**< names (exact or "*.suffix"); none: the certificate's own */
    bool is_default;           /**< `default: true` (else the first entry is the default) */
    int line, col;
} sl_tls_cert_conf_t;

enum { SL_TLS_V12 = 0, SL_TLS_V13 = 1 };

enum { SL_CLIENT_AUTH_REQUIRED = 0, SL_CLIENT_AUTH_OPTIONAL = 1 };

/** A listener's `tls.client_auth:` (mTLS): which client certificates are asked for and
 *  trusted. Shared by every certificate of the listener, whichever SNI selects. */
typedef struct {
    char *ca, *ca_path;        /**< PEM file of the CAs client certificates must chain to */
    char *crl, *crl_path;      /**< PEM file of CRLs (checked for the leaf); NULL: none */
    int mode;                  /**< SL_CLIENT_AUTH_REQUIRED (default) or _OPTIONAL */
    int depth;                 /**< verification depth (OpenSSL's), default 1 as nginx's */
    int line, col;
} sl_tls_client_auth_conf_t;

/** A listener's `tls:`. */
typedef struct {
    sl_tls_cert_conf_t *certs; size_t ncerts;
    int min_version;           /**< SL_TLS_V12 (default) or SL_TLS_V13 */
    char *ciphers;             /**< TLS 1.2 cipher list; NULL: the built-in AEAD list */
    bool session_tickets;      /**< default true */
    uint64_t handshake_timeout_ms; /**< default 10s */
    sl_tls_client_auth_conf_t *client_auth; /**< mTLS; NULL: no client certificate asked for */
    sl_tls_server_t *rt;       /**< built contexts, owned */
    int line, col;
} sl_tls_listener_conf_t;

/** A target's `tls:`. */
typedef struct {
    bool verify;               /**< default true */
    char *ca, *ca_path;        /**< NULL: the system's trust store */
    char *cert, *cert_path;    /**< client certificate chain offered to the target; NULL: none */
    char *key, *key_path;      /**< its key (set with cert) */
    char *sni; /**< server name sent and verified; NULL: the address's IP is verified */
    sl_tls_client_t *rt;       /**< built context, owned */
    int line, col;
} sl_tls_target_conf_t;

/** Builds a listener's contexts. NULL with a message in err (and *bad set to the index of
 *  the certificates entry at fault, -2 for the cipher list, -3 for client_auth, or -1). */
sl_tls_server_t *sl_tls_server_build(const sl_tls_listener_conf_t *c, char *err, size_t errlen,
                                     int *bad);
void sl_tls_server_free(sl_tls_server_t *s);
/** Whether ALPN offers h2 before http/1.1 (the listener's http2); off when built. */
void sl_tls_server_offer_h2(sl_tls_server_t *s, bool on);
/** Builds a target's client context; `ip` is the target's address text without port. */
sl_tls_client_t *sl_tls_client_build(const sl_tls_target_conf_t *c, const char *ip, char *err,
                                     size_t errlen);
void sl_tls_client_free(sl_tls_client_t *c);
/** ALPN offers h2 alone instead of http/1.1 (an upstream's `protocol: h2`). Before use. */
void sl_tls_client_offer_h2(sl_tls_client_t *c);

/** Frees a listener's `tls:` with the contexts it owns. NULL is fine. */
void sl_tls_listener_conf_free(sl_tls_listener_conf_t *t);
/** Frees a target's `tls:` with the context it owns. NULL is fine. */
void sl_tls_target_conf_free(sl_tls_target_conf_t *c);

/* ---- for net/tls.c only: what a session takes from its context ---- */

struct ssl_ctx_st; /* OpenSSL's SSL_CTX */
struct ssl_st;     /* OpenSSL's SSL */

/** The context a server session starts with (the default certificate's; the ClientHello
 *  callback switches it to the entry the SNI names, before any session is resumed).
 *  Borrowed for the context's life. */
struct ssl_ctx_st *sl__tls_server_ctx(const sl_tls_server_t *s);
/** The client context sessions to the target start from. Borrowed likewise. */
struct ssl_ctx_st *sl__tls_client_ctx(const sl_tls_client_t *c);
/** Sets the target's server name (SNI, verified) or IP to verify on `ssl`, and offers the
 *  last session the target gave (resumption). Any worker thread. */
void sl__tls_client_prepare(sl_tls_client_t *c, struct ssl_st *ssl);

#endif
