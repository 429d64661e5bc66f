/* notify.c — one datagram per state change to $NOTIFY_SOCKET (see notify.h). */
#include "server/notify.h"

#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

int sl_notify(const char *state) {
    const char *path = getenv("NOTIFY_SOCKET");
    if (!path || !*path) return 0;
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    size_t len = strlen(path);
    if ((path[0] != '/' && path[0] != '@') || len >= sizeof(sa.sun_path)) return -1;
    memcpy(sa.sun_path, path, len);
    if (path[0] == '@') sa.sun_path[0] = 0; /* abstract: no NUL terminator, length counts */
    socklen_t salen = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + len + (path[0] == '/'));
    /* A socket per message: a handful per process lifetime, and none kept open across
     * fork/exec or privilege changes. */
    int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    ssize_t n;
    do n = sendto(fd, state, strlen(state), MSG_NOSIGNAL, (struct sockaddr *)&sa, salen);
    while (n < 0 && errno == EINTR);
    close(fd);
    return n == (ssize_t)strlen(state) ? 0 : -1;
}

int sl_notify_reloading(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    char msg[80];
    snprintf(msg, sizeof(msg), "RELOADING=1\nMONOTONIC_USEC=%llu",
             (unsigned long long)ts.tv_sec * 1000000ull + (unsigned long long)ts.tv_nsec / 1000);
    return sl_notify(msg);
}
