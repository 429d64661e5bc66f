/* ffi_session.c — the FFI accessors of a tcp session's preread phase (sluice.h,
 * "tcp sessions"): what sluice.session and sluice.upstream.set reach. The session view
 * (tcp_proxy.h's struct sl_session_s) lives on the worker's stack for one synchronous
 * call; these functions only read it, write its outputs, or send to the client socket. */
#include <arpa/inet.h>
#include <errno.h>
#include <string.h>
#include <sys/socket.h>

#include "base/common.h"
#include "base/log.h"
#include "sluice.h"
#include "l4/tcp_proxy.h"
#include "upstream/upstreams.h"
#include "ctx/worker.h"


int sl_ffi_session_client_ip(sl_session_t *s, const char **p, size_t *len) {
    static __thread char buf[INET6_ADDRSTRLEN];
    const sl_sockaddr_t *a = s->peer;
    const void *ip = a->sa.sa_family == AF_INET6 ? (const void *)&a->in6.sin6_addr : (const void *)&a->in.sin_addr;
    if (!inet_ntop(a->sa.sa_family, ip, buf, sizeof buf)) buf[0] = 0;
    *p = buf;
    *len = strlen(buf);
    return SL_OK;
}

int sl_ffi_session_client_port(sl_session_t *s) {
    return ntohs(s->peer->sa.sa_family == AF_INET6 ? s->peer->in6.sin6_port : s->peer->in.sin_port);
}

int sl_ffi_session_sni(sl_session_t *s, const char **p, size_t *len) {
    if (!s->sni) return SL_DECLINED;
    *p = s->sni;
    *len = s->sni_len;
    return SL_OK;
}

int sl_ffi_session_listener(sl_session_t *s, const char **p, size_t *len) {
    *p = s->w->cfg->listeners[s->lidx].name;
    *len = strlen(*p);
    return SL_OK;
}

int sl_ffi_session_upstream(sl_session_t *s, const char **p, size_t *len) {
    if (s->upstream == SL_TCP_DIRECT)
        *p = s->addr_text;
    else if (s->upstream >= 0)
        *p = s->w->cfg->upstreams[s->upstream].name;
    else
        return SL_DECLINED;
    *len = strlen(*p);
    return SL_OK;
}

int sl_ffi_session_set_upstream(sl_session_t *s, const char *name, size_t len, const char **err) {
    int up;
    struct sockaddr_storage ss;
    char text[SL_ADDR_TEXT_MAX];
    if (sl_upstream_resolve(s->w->cfg, name, len, &up, &ss, text, err) != SL_OK) return SL_ERROR;
    if (up >= 0) {
        s->upstream = up;
        return SL_OK;
    }
    memcpy(&s->addr, &ss, ss.ss_family == AF_INET6 ? sizeof s->addr.in6 : sizeof s->addr.in);
    memcpy(s->addr_text, text, sizeof s->addr_text);
    s->upstream = SL_TCP_DIRECT;
    return SL_OK;
}

void sl_ffi_session_close(sl_session_t *s, const char *msg, size_t len) {
    s->closed = true;
    if (!len) return;
    ssize_t n;
    do n = send(s->cfd, msg, SL_MIN(len, (size_t)64 * 1024), MSG_NOSIGNAL | MSG_DONTWAIT);
    while (n < 0 && errno == EINTR);
    /* The message, then a FIN. Bytes the client sent and nobody read would make the close
     * a reset, which may overtake the message on its way: take them off first (what has
     * arrived; later ones reset, as for any closed socket). */
    shutdown(s->cfd, SHUT_WR);
    char sink[4096];
    for (int i = 0; i < 16; i++) {
        do n = recv(s->cfd, sink, sizeof sink, MSG_DONTWAIT);
        while (n < 0 && errno == EINTR);
        if (n <= 0) break;
    }
}

void sl_ffi_session_log(sl_session_t *s, int level, const char *plugin, const char *msg, size_t len) {
    if (level < SL_LOG_DEBUG || level > SL_LOG_ERR) level = SL_LOG_INFO;
    sl_log_kv(level, (const char *[]){"listener", s->w->cfg->listeners[s->lidx].name, "plugin", plugin}, 2,
              "%.*s", (int)SL_MIN(len, 1800), msg);
}
