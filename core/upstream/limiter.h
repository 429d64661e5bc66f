/* limiter.h — rate limits of the local store: one process-wide table shared by every
 * worker thread (the design: "rate-limit buckets ... (sharded hash tables)"), reached from
 * Lua as sluice.limit.take / sluice.limit.window (sl_ffi_limit_* in sluice.h).
 *
 * Two algorithms; the plugin chooses (store local defaults to the token bucket):
 *
 * Token bucket (GCRA, as nginx's limit_req, but tokens on a fixed grid). `rate` tokens a
 * second, capacity `burst + 1`. A key's bucket starts full and is refilled lazily from
 * the monotonic time elapsed at each take: no timer per key. The state is one time, the
 * TAT (theoretical arrival time): TAT - now is the time the missing tokens need to come
 * back. A take of `cost` tokens (1 from Lua) is admitted when at least `cost` tokens are
 * there, and then takes them; a refused take takes nothing; cost 0 only reads. So burst
 * 0 is a strict rate: requests spread over 1 s at rate 100 admit 100, not 200.
 * Where this differs from nginx: a full bucket keeps its progress towards the next
 * token, so tokens arrive every 1 / rate s on a grid (anchored at the key's first take)
 * instead of 1 / rate s after the last admission. With
 * nginx's rule a request arriving late wastes the time its token waited, and at burst 0
 * jittered arrivals lose a few per cent: 1,000 requests 1 ms apart with up to 0.1 to 1 ms
 * of jitter, rate 100, get 94 to 96 admitted; on the grid, 100 (limiter_test prints both,
 * and for Poisson arrivals: 89 and 98 in 0.98 s). The bound: over any L seconds a key
 * admits at most burst + 1 + ceil(rate * L) (nginx: floor), as a full bucket's next token
 * may be less than a period away.
 *   remaining    whole tokens left after this call
 *   reset        seconds until the bucket is full again
 *   retry_after  seconds until a take of the same cost would be admitted (0 when admitted)
 *   limit        burst + 1, the most `remaining` can be
 * Times are whole nanoseconds: a token's period is 1e9 / rate ns rounded down, so the
 * long-run rate is high by less than one part in that period (1e-7 at rate 100).
 *
 * Sliding window (two fixed windows weighted by overlap; Cloudflare's, and the Redis
 * store's). `limit` units per `window_s` seconds, windows aligned to multiples of the
 * window on the monotonic clock. The estimate is prev * (window - elapsed) / window +
 * cur, where prev and cur are what the previous and the current window admitted and
 * elapsed is the time since the current window began; a call is admitted when estimate
 * + cost <= limit, and then adds cost to cur. remaining, retry_after and limit as above
 * (remaining = whole units under the limit after this call); reset is the seconds until
 * the current window ends.
 *
 * Keys. A state is found by (key bytes, algorithm): a token bucket and a window under one
 * key string are two states. Parameters are not part of it: a key whose rate, burst,
 * limit or window changed (a reload) goes on from its state under the new ones: a bucket's
 * state is the time its taken tokens need to come back, and that time stays owed (so
 * after a lowered burst a drained key may wait longer than one new bucket). Keys
 * are byte strings of any length; one longer than SL_LIMITER_KEY_MAX bytes is stored
 * as its first SL_LIMITER_KEY_MAX - 8 bytes and a 64-bit hash of all of it (two long
 * keys sharing those bytes and that hash would share a state). The empty key is a key.
 *
 * Memory. SL_LIMITER_SHARDS shards, each a chained hash table behind its own mutex,
 * held for one lookup and a few arithmetic operations. The table holds at most
 * max_keys states (sl_limiter_set_max_keys, default SL_LIMITER_MAX_KEYS), split evenly
 * across the shards (ceil(max_keys / SL_LIMITER_SHARDS) each). A new key in a full
 * shard evicts the shard's least recently used one and reuses its memory; an evicted
 * key simply starts fresh (a full bucket, an empty window) when it comes back. Evicting
 * an idle key (refilled, or windows over) loses nothing; evicting a busy one gives it a
 * fresh allowance, so max_keys should exceed the keys active within a refill time.
 * Steady state allocates nothing: a known key is found and updated in place, and a new
 * key in a full shard takes the evicted key's entry (keys up to 64 bytes all fit any
 * entry). Allocation happens only while the table grows towards max_keys.
 *
 * Threads: every function may be called from any thread at any time.
 */
#ifndef SL_LIMITER_H
#define SL_LIMITER_H

#include <stddef.h>
#include <stdint.h>

#include "sluice.h"

#define SL_LIMITER_SHARDS 64
/** The default bound on the keys held (about 15 MB at most with keys of <= 64 bytes). */
#define SL_LIMITER_MAX_KEYS 100000
/** Keys longer than this are stored as a prefix and a hash (see the top of this file). */
#define SL_LIMITER_KEY_MAX 256
/** The highest rate accepted: a token's period must be at least 1 ns. */
#define SL_LIMITER_RATE_MAX 1e9

/** Bounds the keys held to n (> 0; rounded up to a multiple of SL_LIMITER_SHARDS). Takes
 *  effect at each shard's next new key: a lowered bound evicts down to it then. 0, or
 *  SL_ERROR for n == 0. Config builds call it; any thread. */
int sl_limiter_set_max_keys(size_t n);
size_t sl_limiter_max_keys(void);

/** Token bucket take at the monotonic time now_ns (sl_now_ns(); tests pass their own).
 *  rate: 0 < rate <= SL_LIMITER_RATE_MAX; burst >= 0; 0 <= cost <= burst + 1; all finite.
 *  key is borrowed for the call. 0 with *out filled; SL_ERROR with *err (a static
 *  string) for an invalid argument or when memory for a new key can't be had. */
int sl_limiter_take_at(const char *key, size_t key_len, double rate, double burst, double cost,
                       uint64_t now_ns, sl_limit_result_t *out, const char **err);

/** Sliding window take at now_ns. limit > 0; window_s > 0 and at most ~146 years;
 *  0 <= cost <= limit; all finite. Returns as sl_limiter_take_at. */
int sl_limiter_window_at(const char *key, size_t key_len, double limit, double window_s,
                         double cost, uint64_t now_ns, sl_limit_result_t *out, const char **err);

/** The keys held now, all shards (each shard's count read under its lock). */
size_t sl_limiter_count(void);
/** The shard (0 .. SL_LIMITER_SHARDS - 1) that holds a key: for tests that fill one. */
unsigned sl_limiter_shard(const char *key, size_t key_len);
/** Forgets every key and frees their memory: for tests. */
void sl_limiter_clear(void);

#endif
