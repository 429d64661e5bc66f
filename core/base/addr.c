/* addr.c — socket addresses as text (addr.h). */
#include "base/addr.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>

void sl__addr_text(const struct sockaddr_storage *ss, char *out, size_t n) {
    char ip[INET6_ADDRSTRLEN];
    if (ss->ss_family == AF_INET6) {
        inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)ss)->sin6_addr, ip, sizeof(ip));
        snprintf(out, n, "[%s]:%u", ip, ntohs(((const struct sockaddr_in6 *)ss)->sin6_port));
    } else {
        inet_ntop(AF_INET, &((const struct sockaddr_in *)ss)->sin_addr, ip, sizeof(ip));
        snprintf(out, n, "%s:%u", ip, ntohs(((const struct sockaddr_in *)ss)->sin_port));
    }
}
