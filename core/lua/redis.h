/* redis.h — sluice.redis: a worker's connection to the Redis server of `redis:` (hiredis on the worker's
 * loop), for sluice.redis and the Redis store of sluice.limit (redis.c). */
#ifndef SL_REDIS_H
#define SL_REDIS_H

#include "ctx/worker.h"

typedef struct sl_redis_s sl_redis_t;

/** Prepares the worker's client (it connects on first use). SL_OK or SL_ERROR. */
int sl__redis_init(sl_worker_t *w);
/** Drain: closes the worker's Redis connection. */
void sl__redis_close(sl_worker_t *w);
void sl__redis_free(sl_worker_t *w);

#endif
