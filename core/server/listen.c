/* listen.c — one opener for every listening socket, so a listener bound by a reload is the
 * same as one bound at start (they once differed: reload forgot TCP_NODELAY). */
#include "server/listen.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/common.h"

/* One socket bound to *ss; -1 with errno set on failure. */
static int open_one(const struct sockaddr_storage *ss, socklen_t sl) {
    int fd = socket(ss->ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one));
    /* Linux copies a listener's Nagle setting into each socket it accepts: set here, it
     * holds for every connection, HTTP and TCP alike (the TCP proxy never sets it itself). */
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    if (ss->ss_family == AF_INET6) setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));
    if (bind(fd, (const struct sockaddr *)ss, sl) != 0 || listen(fd, 4096) != 0) {
        int e = errno;
        close(fd);
        errno = e;
        return -1;
    }
    return fd;
}

int sl__listen_open(const sl_listener_conf_t *lc, int n, int *fds, char *text, size_t textlen,
                    char *err, size_t errlen) {
    struct sockaddr_storage ss = lc->listen.ss;
    socklen_t sl = lc->listen.len;
    for (int k = 0; k < n; k++) fds[k] = -1;
    for (int k = 0; k < n; k++) {
        fds[k] = open_one(&ss, sl);
        if (fds[k] < 0) {
            snprintf(err, errlen, "listener %s: cannot listen on %s: %s", lc->name, lc->listen.text,
                     strerror(errno));
            for (int q = 0; q < k; q++) {
                close(fds[q]);
                fds[q] = -1;
            }
            return SL_ERROR;
        }
        if (k == 0) {
            socklen_t len = sizeof(ss);
            getsockname(fds[0], (struct sockaddr *)&ss, &len);
            sl = len;
            sl__addr_text(&ss, text, textlen);
        }
    }
    return SL_OK;
}
