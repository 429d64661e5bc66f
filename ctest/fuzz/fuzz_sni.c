/* fuzz_sni.c — libFuzzer target over the ClientHello reader (core/proto/sni.c). Every broken
 * invariant is an abort():
 *
 * - the answer is SL_OK, SL_EAGAIN or SL_ERROR, and SL_ERROR always says why;
 * - a name is only returned with SL_OK, at most SL_SNI_NAME_MAX bytes, lower-case host
 *   characters only;
 * - SL_EAGAIN only below SL_SNI_MAX_HELLO bytes (the bound holds);
 * - the reader is a function of the bytes so far: no prefix of an input read whole (SL_OK)
 *   fails, and an input that failed fails with any bytes added.
 *
 * Built with clang by `scripts/fuzz SECONDS sni`; replayed over ctest/fuzz/corpus_sni by
 * ctest (replay_main.c).
 */
#include "proto/sni.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void fail(const char *what) {
    fprintf(stderr, "fuzz_sni: invariant broken: %s\n", what);
    abort();
}
#define ENSURE(cond)                                                                               \
    do {                                                                                           \
        if (!(cond)) fail(#cond);                                                                  \
    } while (0)

static int parse_checked(const uint8_t *p, size_t n) {
    char name[SL_SNI_NAME_MAX];
    size_t nlen = 99999;
    const char *err = NULL;
    int rc = sl_sni_parse(p, n, name, &nlen, &err);
    ENSURE(rc == SL_OK || rc == SL_EAGAIN || rc == SL_ERROR);
    ENSURE((rc == SL_ERROR) == (err != NULL));
    ENSURE(rc == SL_OK || nlen == 0);
    ENSURE(nlen <= SL_SNI_NAME_MAX);
    ENSURE(rc != SL_EAGAIN || n < SL_SNI_MAX_HELLO);
    for (size_t i = 0; i < nlen; i++) {
        char c = name[i];
        ENSURE((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_' || c == '.');
    }
    return rc;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    /* an exact-size copy, so reading past the input is an overread ASan sees */
    uint8_t *p = malloc(size ? size : 1);
    if (!p) return 0;
    memcpy(p, data, size);
    int rc = parse_checked(p, size);
    if (rc == SL_OK) {
        /* every prefix was a valid beginning (or, past the hello's end, the hello): check a
         * spread of cut points */
        size_t step = size / 64 + 1;
        for (size_t k = 0; k < size; k += step) ENSURE(parse_checked(p, k) != SL_ERROR);
    } else if (rc == SL_ERROR && size < 4096) {
        uint8_t *q = malloc(size + 16);
        if (q) {
            memcpy(q, p, size);
            memset(q + size, 0x16, 16);
            ENSURE(parse_checked(q, size + 16) == SL_ERROR);
            free(q);
        }
    }
    free(p);
    return 0;
}
