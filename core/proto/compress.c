/* compress.c — the streaming gzip/br encoder (compress.h). */
#include "proto/compress.h"

#include <brotli/encode.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

/* Blocks an encoder may hold for its codec (zlib takes four, brotli at the levels one
 * would stream at a few); further large allocations go to malloc. */
#define SL_COMPRESS_MAX_BLOCKS 12

struct sl_compress_s {
    int coding;
    bool finished; /* the last piece was encoded */
    bool zinit;    /* deflateInit2 succeeded: deflateEnd is owed */
    z_stream zs;
    BrotliEncoderState *br;
    sl_blockpool_t *bp;
    char *blocks[SL_COMPRESS_MAX_BLOCKS]; /* the codec's allocations that are blocks */
    uint8_t nblocks;
    char *obuf;      /* the output: a block (obuf_block) or, after a spill, malloc'ed */
    size_t ocap;
    bool obuf_block;
};

/* ---- the codecs' allocator: a block when the allocation is worth one ---- */

static void *codec_alloc(sl_compress_t *z, size_t n) {
    if (z->bp && n > SL_BLOCK_SIZE / 2 && n <= SL_BLOCK_SIZE && z->nblocks < SL_COMPRESS_MAX_BLOCKS) {
        char *b = sl_block_get(z->bp);
        if (b) z->blocks[z->nblocks++] = b;
        return b;
    }
    return malloc(n);
}

static void codec_free(sl_compress_t *z, void *p) {
    if (!p) return;
    for (uint8_t i = 0; i < z->nblocks; i++) {
        if (z->blocks[i] == p) {
            sl_block_put(z->bp, p);
            z->blocks[i] = z->blocks[--z->nblocks];
            return;
        }
    }
    free(p);
}

static voidpf zlib_alloc(voidpf ud, uInt items, uInt size) {
    if (size && items > SIZE_MAX / size) return Z_NULL;
    return codec_alloc(ud, (size_t)items * size);
}
static void zlib_free(voidpf ud, voidpf p) { codec_free(ud, p); }
static void *br_alloc(void *ud, size_t n) { return codec_alloc(ud, n); }
static void br_free(void *ud, void *p) { codec_free(ud, p); }

/* ---- the output buffer ---- */

/* Makes room for at least `want` more bytes after the first `used`. */
static bool out_room(sl_compress_t *z, size_t used, size_t want) {
    if (z->obuf && z->ocap - used >= want) return true;
    if (!z->obuf && z->bp && want <= SL_BLOCK_SIZE) {
        z->obuf = sl_block_get(z->bp);
        if (!z->obuf) return false;
        z->ocap = SL_BLOCK_SIZE;
        z->obuf_block = true;
        return true;
    }
    size_t cap = SL_MAX(SL_MAX(z->ocap * 2, used + want), (size_t)SL_BLOCK_SIZE);
    char *nb = malloc(cap);
    if (!nb) return false;
    if (used) memcpy(nb, z->obuf, used);
    if (z->obuf_block) sl_block_put(z->bp, z->obuf);
    else free(z->obuf);
    z->obuf = nb;
    z->ocap = cap;
    z->obuf_block = false;
    return true;
}

/* ---- the encoder ---- */

sl_compress_t *sl_compress_new(int coding, int level, sl_blockpool_t *bp, const char **err) {
    if (coding == SL_COMPRESS_GZIP && (level < 1 || level > 9)) {
        *err = "gzip level must be 1 to 9";
        return NULL;
    }
    if (coding == SL_COMPRESS_BR && (level < 0 || level > 11)) {
        *err = "brotli level must be 0 to 11";
        return NULL;
    }
    if (coding != SL_COMPRESS_GZIP && coding != SL_COMPRESS_BR) {
        *err = "unknown content coding";
        return NULL;
    }
    sl_compress_t *z = calloc(1, sizeof(*z));
    if (!z) goto nomem;
    z->coding = coding;
    z->bp = bp;
    if (coding == SL_COMPRESS_GZIP) {
        z->zs.zalloc = zlib_alloc;
        z->zs.zfree = zlib_free;
        z->zs.opaque = z;
        /* windowBits 15 + 16: the gzip wrapper (header and CRC-32 trailer), not zlib's */
        if (deflateInit2(&z->zs, level, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK) goto nomem;
        z->zinit = true;
    } else {
        z->br = BrotliEncoderCreateInstance(br_alloc, br_free, z);
        if (!z->br) goto nomem;
        BrotliEncoderSetParameter(z->br, BROTLI_PARAM_QUALITY, (uint32_t)level);
        BrotliEncoderSetParameter(z->br, BROTLI_PARAM_LGWIN, SL_COMPRESS_BR_LGWIN);
    }
    return z;
nomem:
    sl_compress_free(z);
    *err = "out of memory for an encoder";
    return NULL;
}

static int piece_gzip(sl_compress_t *z, const char *p, size_t n, bool eof, size_t *used) {
    z->zs.next_in = (Bytef *)p;
    int flush = eof ? Z_FINISH : Z_NO_FLUSH;
    /* zlib's avail_in is 32 bits: a larger piece goes in slices. */
    size_t left = n;
    for (;;) {
        uInt slice = (uInt)SL_MIN(left, (size_t)UINT32_MAX);
        z->zs.avail_in = slice;
        left -= slice;
        int f = left ? Z_NO_FLUSH : flush;
        for (;;) {
            /* any room will do: deflate stops when it is full, and the next round grows it */
            if (!out_room(z, *used, 1)) return SL_ERROR;
            z->zs.next_out = (Bytef *)z->obuf + *used;
            z->zs.avail_out = (uInt)SL_MIN(z->ocap - *used, (size_t)UINT32_MAX);
            uInt room = z->zs.avail_out;
            int rc = deflate(&z->zs, f);
            *used += room - z->zs.avail_out;
            if (rc == Z_STREAM_ERROR) return SL_ERROR;
            if (rc == Z_STREAM_END) return SL_OK;
            /* Z_OK or Z_BUF_ERROR (no progress possible): done with this slice once the
             * input is consumed and deflate stopped with room to spare. */
            if (z->zs.avail_in == 0 && z->zs.avail_out != 0 && f != Z_FINISH) break;
        }
        if (!left) return SL_OK;
    }
}

static int piece_br(sl_compress_t *z, const char *p, size_t n, bool eof, size_t *used) {
    const uint8_t *next_in = (const uint8_t *)p;
    size_t avail_in = n;
    BrotliEncoderOperation op = eof ? BROTLI_OPERATION_FINISH : BROTLI_OPERATION_PROCESS;
    for (;;) {
        if (!out_room(z, *used, 1)) return SL_ERROR;
        uint8_t *next_out = (uint8_t *)z->obuf + *used;
        size_t avail_out = z->ocap - *used;
        if (!BrotliEncoderCompressStream(z->br, op, &avail_in, &next_in, &avail_out, &next_out, NULL)) return SL_ERROR;
        *used = z->ocap - avail_out;
        if (avail_out == 0) continue; /* more may be waiting in the encoder */
        if (eof ? BrotliEncoderIsFinished(z->br) : avail_in == 0 && !BrotliEncoderHasMoreOutput(z->br)) return SL_OK;
    }
}

int sl_compress_piece(sl_compress_t *z, const char *p, size_t n, bool eof, sl_str_t *out, const char **err) {
    if (z->finished) {
        *err = "the encoder's stream is already finished";
        return SL_ERROR;
    }
    size_t used = 0;
    int rc = z->coding == SL_COMPRESS_GZIP ? piece_gzip(z, p, n, eof, &used) : piece_br(z, p, n, eof, &used);
    if (rc != SL_OK) {
        *err = "the encoder failed (a codec error or no memory)";
        z->finished = true;
        return SL_ERROR;
    }
    z->finished = eof;
    *out = (sl_str_t){used ? z->obuf : "", used};
    return SL_OK;
}

void sl_compress_free(sl_compress_t *z) {
    if (!z) return;
    if (z->zinit) deflateEnd(&z->zs);
    if (z->br) BrotliEncoderDestroyInstance(z->br);
    if (z->obuf_block) sl_block_put(z->bp, z->obuf);
    else free(z->obuf);
    /* every codec allocation was freed by its End/Destroy: nothing is left in blocks[] */
    free(z);
}
