/* redis_uv.h — a hiredis asynchronous context driven by a worker's libuv loop. */
#ifndef SL_REDIS_UV_H
#define SL_REDIS_UV_H

#include <hiredis/async.h>
#include <uv.h>

/** Drives ac from loop (one uv_poll on its socket): REDIS_OK or REDIS_ERR (out of memory,
 *  or already attached). The poll goes when hiredis frees the context. */
int sl_redis_uv_attach(redisAsyncContext *ac, uv_loop_t *loop);

/** The connection no longer keeps its loop alive (a draining worker's loop ends with its
 *  last request, the connection still open). */
void sl_redis_uv_unref(redisAsyncContext *ac);

#endif
