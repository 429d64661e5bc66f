/* hash.h — the core's hash functions, all of them; none of them is for secrets.
 *
 *  - sl_fnv1a64: FNV-1a, byte at a time and incremental (pass the last result back in),
 *    for content hashes built from many pieces: a config's items, etcd's keys, files.
 *  - sl_hash64: a word at a time, for hash tables and the consistent-hash ring: each 8
 *    bytes (little-endian on every host) go through sl_hash_mix64. A table seeds it with
 *    sl_rand64 so clients cannot choose a chain; the balancer's ring uses seed 0, and its
 *    values must not change (a key would move to another target: ctest/base/hash_test.c
 *    pins some).
 *  - sl_hash_mix64: splitmix64's finaliser (Stafford's "Mix13"), a bijection in which every
 *    input bit flips each output bit with probability close to 1/2.
 */
#ifndef SL_HASH_H
#define SL_HASH_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define SL_FNV64_INIT 0xcbf29ce484222325ull  /**< FNV-1a's offset basis: the first h */
#define SL_FNV64_PRIME 0x100000001b3ull
#define SL_HASH_GOLDEN 0x9e3779b97f4a7c15ull /**< 2^64 / phi: splitmix64's increment */

/** FNV-1a of p[0..n) continued from h (SL_FNV64_INIT to start). */
static inline uint64_t sl_fnv1a64(uint64_t h, const void *p, size_t n) {
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * SL_FNV64_PRIME;
    return h;
}

static inline uint64_t sl_hash_mix64(uint64_t x) {
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    x ^= x >> 31;
    return x;
}

/* n (4 or 8) bytes at p as a little-endian number. */
static inline uint64_t sl__load_le(const unsigned char *p, size_t n) {
    uint64_t v = 0;
    memcpy(&v, p, n);
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    v = __builtin_bswap64(v); /* p[0] was the top byte: now the bottom one */
#endif
    return v;
}

/* The last n (0..7) bytes as a little-endian word padded with zeros, without a byte-wise
 * copy into memory that a word load would then wait on (a failed store forwarding: most
 * of a short key's hash time). Two loads that overlap put the same bytes in the same
 * places, so OR-ing them is exact. */
static inline uint64_t sl__tail_le64(const unsigned char *p, size_t n) {
    if (n >= 4) return sl__load_le(p, 4) | sl__load_le(p + n - 4, 4) << (8 * (n - 4));
    if (n == 0) return 0;
    return p[0] | (uint64_t)p[n >> 1] << (8 * (n >> 1)) | (uint64_t)p[n - 1] << (8 * (n - 1));
}

/** A 64-bit hash of p[0..n) under `seed`, the same on every host. */
static inline uint64_t sl_hash64(const void *data, size_t n, uint64_t seed) {
    const unsigned char *p = data;
    uint64_t h = seed ^ SL_HASH_GOLDEN * (n + 1);
    for (; n >= 8; p += 8, n -= 8) h = sl_hash_mix64(h ^ sl__load_le(p, 8));
    return sl_hash_mix64(h ^ sl__tail_le64(p, n));
}

#endif
