/* compress_test.c — the streaming encoder (core/proto/compress.c): every output decodes
 * with zlib's and brotli's own decoders to the exact input, whatever the pieces' sizes
 * (down to one byte each), and every block the encoder took goes back to its pool. */
#include <brotli/decode.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "check.h"
#include "proto/compress.h"

/* A growable byte buffer for the encoded stream. */
typedef struct {
    char *p;
    size_t len, cap;
} buf_t;

static void buf_add(buf_t *b, const char *p, size_t n) {
    if (b->len + n > b->cap) {
        b->cap = SL_MAX(b->cap * 2, b->len + n);
        b->p = realloc(b->p, b->cap);
    }
    if (n) memcpy(b->p + b->len, p, n);
    b->len += n;
}

static uint32_t rng = 12345;
static uint8_t rnd(void) {
    rng = rng * 1103515245u + 12345u;
    return (uint8_t)(rng >> 16);
}

/* Text-like input: words from a small vocabulary (compresses well); or random bytes. */
static char *make_input(size_t n, bool text) {
    static const char *words[] = {"sluice ", "gateway ", "upstream ", "response ", "{\"id\": ", "42, ", "\n"};
    char *p = malloc(n ? n : 1);
    size_t i = 0;
    while (i < n) {
        if (!text) {
            p[i++] = (char)rnd();
            continue;
        }
        const char *w = words[rnd() % SL_ARRAY_LEN(words)];
        for (size_t k = 0; w[k] && i < n; k++) p[i++] = w[k];
    }
    return p;
}

static bool decode(int coding, const buf_t *enc, const char *want, size_t n) {
    char *got = malloc(n + 1);
    size_t got_len = n + 1; /* room for one byte too many: a longer output fails */
    bool ok;
    if (coding == SL_COMPRESS_GZIP) {
        z_stream zs = {0};
        inflateInit2(&zs, 15 + 16);
        zs.next_in = (Bytef *)enc->p;
        zs.avail_in = (uInt)enc->len;
        zs.next_out = (Bytef *)got;
        zs.avail_out = (uInt)got_len;
        int rc = inflate(&zs, Z_FINISH);
        ok = rc == Z_STREAM_END && zs.total_out == n && zs.avail_in == 0;
        inflateEnd(&zs);
    } else {
        ok = BrotliDecoderDecompress(enc->len, (const uint8_t *)enc->p, &got_len, (uint8_t *)got) ==
                 BROTLI_DECODER_RESULT_SUCCESS &&
             got_len == n;
    }
    ok = ok && memcmp(got, want, n) == 0;
    free(got);
    return ok;
}

/* Encodes `in` in pieces of `step` bytes (the last call with eof carries the rest, or
 * nothing when last_empty), and checks the round trip. */
static bool round_trip(int coding, int level, const char *in, size_t n, size_t step, bool last_empty,
                       sl_blockpool_t *bp, size_t *enc_len) {
    const char *err = NULL;
    sl_compress_t *z = sl_compress_new(coding, level, bp, &err);
    if (!z) return false;
    buf_t enc = {0};
    sl_str_t o;
    size_t off = 0;
    bool ok = true;
    while (ok && off < n) {
        size_t k = SL_MIN(step, n - off);
        bool eof = !last_empty && off + k == n;
        ok = sl_compress_piece(z, in + off, k, eof, &o, &err) == SL_OK;
        if (ok) buf_add(&enc, o.p, o.len);
        off += k;
        if (eof) break;
    }
    if (ok && (last_empty || n == 0)) {
        ok = sl_compress_piece(z, "", 0, true, &o, &err) == SL_OK;
        if (ok) buf_add(&enc, o.p, o.len);
    }
    /* a piece after the last is refused */
    if (ok) ok = sl_compress_piece(z, "x", 1, false, &o, &err) == SL_ERROR;
    sl_compress_free(z);
    if (ok) ok = decode(coding, &enc, in, n);
    if (enc_len) *enc_len = enc.len;
    free(enc.p);
    return ok;
}

static void test_round_trip_sizes(void) {
    static const size_t sizes[] = {0, 1, 859, 860, 65536, 1 << 20, 10 << 20};
    sl_blockpool_t bp = {.max_free = 64};
    for (int coding = SL_COMPRESS_GZIP; coding <= SL_COMPRESS_BR; coding++) {
        for (size_t i = 0; i < SL_ARRAY_LEN(sizes); i++) {
            for (int text = 0; text <= 1; text++) {
                char *in = make_input(sizes[i], text);
                size_t enc_len = 0;
                int level = coding == SL_COMPRESS_GZIP ? 5 : 4;
                bool ok = round_trip(coding, level, in, sizes[i], 16384, i % 2, &bp, &enc_len);
                if (!ok) fprintf(stderr, "coding %d size %zu text %d\n", coding, sizes[i], text);
                CHECK(ok);
                /* text shrinks; random bytes grow by little (stored blocks) */
                if (text && sizes[i] >= 65536) CHECK(enc_len < sizes[i] / 3);
                if (!text && sizes[i] >= 65536) CHECK(enc_len < sizes[i] + sizes[i] / 100 + 64);
                free(in);
            }
        }
    }
    sl_blockpool_destroy(&bp);
}

/* Pieces of one byte: the encoder's boundaries are nowhere near the input's. */
static void test_one_byte_pieces(void) {
    for (int coding = SL_COMPRESS_GZIP; coding <= SL_COMPRESS_BR; coding++) {
        for (int text = 0; text <= 1; text++) {
            char *in = make_input(70000, text);
            CHECK(round_trip(coding, coding == SL_COMPRESS_GZIP ? 5 : 4, in, 70000, 1, false, NULL, NULL));
            CHECK(round_trip(coding, coding == SL_COMPRESS_GZIP ? 1 : 0, in, 70000, 1, true, NULL, NULL));
            free(in);
        }
    }
}

/* One piece larger than the output block: the output spills, then still decodes. */
static void test_spill(void) {
    sl_blockpool_t bp = {.max_free = 64};
    char *in = make_input(3 << 20, false);
    CHECK(round_trip(SL_COMPRESS_GZIP, 9, in, 3 << 20, 3 << 20, false, &bp, NULL));
    CHECK(round_trip(SL_COMPRESS_BR, 11, in, 3 << 20, 3 << 20, false, &bp, NULL));
    free(in);
    sl_blockpool_destroy(&bp);
}

/* Every block an encoder took is back in the pool once it is freed, finished or not
 * (a response cut off midway frees an unfinished encoder), and a second encoder takes
 * them again without a new malloc. */
static void test_blocks_returned(void) {
    for (int coding = SL_COMPRESS_GZIP; coding <= SL_COMPRESS_BR; coding++) {
        sl_blockpool_t bp = {.max_free = 64};
        const char *err;
        char *in = make_input(200000, true);
        sl_compress_t *z = sl_compress_new(coding, coding == SL_COMPRESS_GZIP ? 5 : 4, &bp, &err);
        sl_str_t o;
        CHECK_INT(sl_compress_piece(z, in, 200000, false, &o, &err), SL_OK);
        uint64_t taken = bp.mallocs;
        CHECK(taken >= 1); /* the output buffer at least */
        if (coding == SL_COMPRESS_GZIP) CHECK(taken >= 5); /* window, prev, head, pending, output */
        sl_compress_free(z); /* unfinished: the client went away */
        CHECK_INT(bp.nfree, taken);
        for (int round = 0; round < 2; round++) {
            z = sl_compress_new(coding, coding == SL_COMPRESS_GZIP ? 5 : 4, &bp, &err);
            CHECK_INT(sl_compress_piece(z, in, 200000, true, &o, &err), SL_OK);
            sl_compress_free(z);
            if (round == 0) taken = bp.mallocs;
            CHECK_INT(bp.mallocs, taken); /* the second encoder takes no new block */
            CHECK_INT(bp.nfree, taken);
        }
        free(in);
        sl_blockpool_destroy(&bp);
    }
}

static void test_bad_arguments(void) {
    const char *err = NULL;
    CHECK(sl_compress_new(SL_COMPRESS_GZIP, 0, NULL, &err) == NULL);
    CHECK_STR(err, "gzip level must be 1 to 9");
    CHECK(sl_compress_new(SL_COMPRESS_GZIP, 10, NULL, &err) == NULL);
    CHECK(sl_compress_new(SL_COMPRESS_BR, 12, NULL, &err) == NULL);
    CHECK_STR(err, "brotli level must be 0 to 11");
    CHECK(sl_compress_new(7, 5, NULL, &err) == NULL);
    CHECK_STR(err, "unknown content coding");
    sl_compress_free(NULL);
    /* the ABI's constants are the encoder's */
    CHECK_INT(SL_CODING_GZIP, SL_COMPRESS_GZIP);
    CHECK_INT(SL_CODING_BR, SL_COMPRESS_BR);
}

static const check_test_t tests[] = {
    {"round_trip_sizes", test_round_trip_sizes}, {"one_byte_pieces", test_one_byte_pieces},
    {"spill", test_spill},                       {"blocks_returned", test_blocks_returned},
    {"bad_arguments", test_bad_arguments},
};

int main(int argc, char **argv) { return check_main(tests, SL_ARRAY_LEN(tests), argc, argv); }
