/* addr.h — socket addresses as text. */
#ifndef SL_ADDR_H
#define SL_ADDR_H

#include <stddef.h>
#include <sys/socket.h>

/** "IP:PORT", or "[IPv6]:PORT", into out (n bytes, NUL-terminated). Any thread. */
void sl__addr_text(const struct sockaddr_storage *ss, char *out, size_t n);

#endif
