/* testapi.h — the blocking loopback client of the in-process test harness
 * (testapi.c), shared with the mock upstreams of `sluice test`
 * (mock_upstream.c). */
#ifndef SL_SERVER_TESTAPI_H
#define SL_SERVER_TESTAPI_H

#include <stddef.h>

/** Connects to host:port (IPv4); the fd, or -1. */
int sl_test_connect(const char *host, int port);

/** Sends all of buf (EINTR retried, no SIGPIPE); 0, or -1. */
int sl_test_send(int fd, const char *buf, size_t len);

#endif
