/* cache.h — the proxy-cache store: responses kept for the proxy-cache plugin, one store
 * shared by every worker thread (top-level `cache: { size }`), reached from Lua through
 * sl_ffi_cache_* (sluice.h) and from the request through http/cache_req.c.
 *
 * Entries. An entry is one response: its status, its header fields (the upstream's, minus
 * hop-by-hop and framing), its body, its key, the route that stored it, when it stops
 * being fresh and when it stops being usable as stale (stale_if_error). It is immutable
 * once inserted. A key whose response named `Vary` holds a *vary node* instead (the
 * Vary value): the response itself is stored under the key extended with the request's
 * values of those headers (sl_cache_vary_key), so a lookup goes through the node.
 *
 * Memory. `size` bounds the bytes of the entries in the table (structure, key, fields,
 * body): an insert evicts least recently used entries until the new one fits, and an
 * entry larger than size is refused. An entry evicted or purged while a request still
 * sends its body is out of the table (and of sl_cache_bytes) and freed when the last such
 * request releases it: a HIT never copies the body, it holds the entry.
 *
 * Locks (collapsed misses). A lookup that finds no fresh entry takes the key's lock when
 * nobody holds it (SL_CACHE_MISS with *locked): its request goes upstream, and concurrent
 * lookups of the key answer SL_CACHE_WAIT until the lock is released or `lock_ns` passed.
 * An insert releases it (waiters then HIT); sl_cache_unlock releases it without an entry
 * and leaves a *pass* mark for lock_ns: lookups then go upstream at once, without the
 * lock, so a key whose response is not cacheable is not fetched one request at a time.
 * A lock is a token (the caller's, any unique number): only its owner releases it. Its
 * release rings the registered doorbells when someone waited (below), so waiters on any
 * worker look again at once instead of at their next poll.
 *
 * Times are the caller's monotonic nanoseconds (sl_now_ns), passed in: tests inject them.
 * Threads: every function may be called from any thread (one mutex, held for a lookup,
 * an insert or an eviction; a purge walks the table under it).
 */
#ifndef SL_CACHE_H
#define SL_CACHE_H

#include <stdbool.h>
#include <stdint.h>

#include "base/common.h"
#include "base/list.h"

/** Default store size (`cache.size`) and the lock records kept at most. */
#define SL_CACHE_DEFAULT_SIZE (64u << 20)
#define SL_CACHE_MAX_LOCKS 65536

/** A header field of an entry (name and value point into the entry). */
typedef struct {
    sl_str_t name, value;
} sl_cache_field_t;

/** A stored response. Read-only for holders; valid until sl_cache_release. */
typedef struct sl_cache_entry_s {
    struct sl_cache_entry_s *hnext;       /* hash chain (store-internal) */
    sl_list_t lru;                        /* LRU, most recent first (store-internal) */
    uint64_t hash;
    uint32_t refs;     /* holders, plus 1 while in the table (store-internal) */
    uint8_t in_table;  /* store-internal */
    uint8_t vary_node; /**< a vary node: `vary` holds the Vary value, no response */
    int status;
    uint64_t fresh_until, stale_until; /**< monotonic ns */
    uint64_t stored_at;                /**< monotonic ns (Age) */
    uint64_t age0_ns;                  /**< its age when stored: the upstream's Age (Age adds it) */
    size_t size;                       /**< bytes counted against the store's size */
    sl_str_t key, route, vary;
    sl_cache_field_t *fields;
    uint16_t nfields;
    sl_str_t body; /**< malloc'ed, owned by the entry */
} sl_cache_entry_t;

/** What a lookup found (also the X-Cache-Status values and the metric's labels: the
 *  SL_CACHE_* of sluice.h). */

/** Sets the store's size in bytes (evicting down to it). Any thread. */
void sl_cache_set_size(uint64_t size);
uint64_t sl_cache_size(void);
/** Bytes and entries (vary nodes included) in the table now. */
uint64_t sl_cache_bytes(void);
uint64_t sl_cache_count(void);

/** Request header values for a vary key: the value of `name` (case-insensitive), "" when
 *  absent. */
typedef sl_str_t (*sl_cache_header_fn)(void *ud, sl_str_t name);

/** key + "\n" + name ":" value for each name of the Vary list, into buf[0..cap) (names
 *  lower-cased, values as sent). The length, or 0 when it needs more than cap bytes. */
size_t sl_cache_vary_key(sl_str_t key, sl_str_t vary, sl_cache_header_fn hdr, void *ud, char *buf,
                         size_t cap);

/** Looks `key` up at `now`:
 *  SL_CACHE_HIT: *hit is a fresh entry, held (release it).
 *  SL_CACHE_MISS / SL_CACHE_EXPIRED (an expired entry is there): go upstream; *stale is
 *    an expired entry still within its stale_until, held, or NULL; *locked says whether
 *    the caller took the key's lock with `token` (lock_ns: how long others wait for it).
 *  SL_CACHE_WAIT (only when may_wait): another request holds the lock; ask again later.
 *  hdr/ud give request headers for a key whose entry is a vary node. */
int sl_cache_lookup(sl_str_t key, sl_cache_header_fn hdr, void *ud, uint64_t now, uint64_t lock_ns,
                    uint64_t token, bool may_wait, sl_cache_entry_t **hit, sl_cache_entry_t **stale,
                    bool *locked);
/** Drops a holder's reference (frees an entry no longer in the table). NULL is fine. */
void sl_cache_release(sl_cache_entry_t *e);

/** A response to insert: fields and body are copied (body_owned: the body is a malloc'ed
 *  buffer the store takes instead). */
typedef struct {
    sl_str_t key, route, vary; /**< vary: the response's Vary value ("" none) */
    int status;
    const sl_cache_field_t *fields;
    uint16_t nfields;
    sl_str_t body;
    bool body_owned;
    uint64_t fresh_until, stale_until, stored_at, age0_ns;
} sl_cache_put_t;
/** Inserts (replacing the key's entry), evicting LRU entries to fit, and releases the
 *  key's lock when `token` holds it. hdr/ud: the request's headers (for a Vary key).
 *  SL_OK; SL_DECLINED when the entry cannot fit (larger than the size; the lock is then
 *  released as by sl_cache_unlock); SL_ERROR out of memory (idem). The body is freed by
 *  the store in every case when body_owned. */
int sl_cache_insert(const sl_cache_put_t *put, sl_cache_header_fn hdr, void *ud, uint64_t now,
                    uint64_t lock_ns, uint64_t token);
/** Releases the key's lock held by `token` without an entry (no-op when another token
 *  holds it). pass_ns > 0 leaves a pass mark until now + pass_ns (the response was not
 *  cacheable: lookups go upstream unlocked meanwhile); 0 removes it (the fetch was
 *  abandoned: the next lookup takes the lock). */
void sl_cache_unlock(sl_str_t key, uint64_t token, uint64_t now, uint64_t pass_ns);

/** Doorbells: a worker that has requests waiting for a key's lock registers ring(ud) once;
 *  the release of a lock that had waiters (an insert, sl_cache_unlock) calls every
 *  registered ring, under the store's lock, from whatever thread released it (ring must be
 *  thread-safe and quick: uv_async_send). After sl_cache_bell_remove returns, ud is never
 *  rung again. At most SL_CACHE_MAX_BELLS; SL_ERROR past that. */
#define SL_CACHE_MAX_BELLS 256
int sl_cache_bell_add(void (*ring)(void *ud), void *ud);
void sl_cache_bell_remove(void *ud);

/** Purges: the entry of `key` (and every variant of it); every entry a route stored; all.
 *  Returns the entries removed. */
size_t sl_cache_purge_key(sl_str_t key);
size_t sl_cache_purge_route(sl_str_t route);
size_t sl_cache_purge_all(void);

#endif
