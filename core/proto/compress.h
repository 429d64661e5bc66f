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

/** Brotli's window: 2^19 bytes (512 KiB), ngx_brotli's default, instead of the library's
 *  4 MiB, so that an encoder's memory stays near zlib's. */
#define SL_COMPRESS_BR_LGWIN 19

typedef struct sl_compress_s sl_compress_t;

/** A new encoder for `coding` at `level` (gzip 1-9, br 0-11). size_hint: the body's
 *  length when known (brotli sizes its tables by it), else 0. bp: the worker's blocks, or
 *  NULL (malloc only). NULL with *err (static) for a bad argument or no memory. */
sl_compress_t *sl_compress_new(int coding, int level, uint64_t size_hint, sl_blockpool_t *bp, const char **err);

/** Encodes the next n bytes of the body; eof: they are the last (the stream is finished).
 *  *out is what to send now (possibly empty), owned by z and valid until the next call or
 *  sl_compress_free. SL_OK, or SL_ERROR with *err (static): a call after the last, a
 *  codec error, no memory. */
int sl_compress_piece(sl_compress_t *z, const char *p, size_t n, bool eof, sl_str_t *out, const char **err);

/** Frees z and everything it holds (blocks go back to their pool). NULL is a no-op. */
void sl_compress_free(sl_compress_t *z);

#endif
