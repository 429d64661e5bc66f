/* compress.h — a streaming content-coding encoder (gzip through zlib, br through brotli),
 * one per compressed response: pieces of the body go in as they arrive, the encoded bytes
 * come out, and nothing holds the whole body. Pure: no libuv, no config; the compression
 * plugin drives it through sl_ffi_compress_* (lua/compress.c), and ctest/proto/compress_test.c
 * round-trips it through zlib's and brotli's decoders.
 *
 * Memory. The codec's own tables (zlib at memLevel 8: four 64 KiB arrays; brotli's ring
 * buffer and hashes) and the output buffer come from the worker's block freelist when an
 * allocation is worth a block (more than half of one), else from malloc, so a steady stream of
 * compressed responses allocates nothing. The output buffer is one block, spilling into a
 * malloc'ed buffer only when one piece encodes to more than a block (Redis's reply buffer).
 * Owner: one worker thread (the blockpool's); never shared.
 */
#ifndef SL_COMPRESS_H
#define SL_COMPRESS_H

#include "base/block.h"
#include "base/common.h"

/** The codings (also in sluice.h: SL_CODING_GZIP, SL_CODING_BR). */
enum { SL_COMPRESS_GZIP = 1, SL_COMPRESS_BR = 2 };

/** Brotli's window: 2^18 bytes (256 KiB) instead of the library's 4 MiB: at level 4 an
 *  encoder then peaks near 2 MiB for a 100 KB body and 4 MiB for a large one (13 MiB with
 *  the default window), for the same output on web-sized text (docs/DECISIONS.md). */
#define SL_COMPRESS_BR_LGWIN 18

typedef struct sl_compress_s sl_compress_t;

/** A new encoder for `coding` at `level` (gzip 1-9, br 0-11). bp: the worker's blocks, or
 *  NULL (malloc only). NULL with *err (static) for a bad argument or no memory. (No size
 *  hint reaches brotli: given one above 1 MiB it picks larger tables, +3 MiB.) */
sl_compress_t *sl_compress_new(int coding, int level, sl_blockpool_t *bp, const char **err);

/** Encodes the next n bytes of the body; eof: they are the last (the stream is finished).
 *  *out is what to send now (possibly empty), owned by z and valid until the next call or
 *  sl_compress_free. SL_OK, or SL_ERROR with *err (static): a call after the last, a
 *  codec error, no memory. */
int sl_compress_piece(sl_compress_t *z, const char *p, size_t n, bool eof, sl_str_t *out, const char **err);

/** Frees z and everything it holds (blocks go back to their pool). NULL is a no-op. */
void sl_compress_free(sl_compress_t *z);

#endif
