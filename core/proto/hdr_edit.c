/* hdr_edit.c — plugin header edits kept in the request arena. */
#include "proto/hdr_edit.h"

static int check_name(sl_str_t n, const char **err) {
    if (n.len == 0 || n.len > 256) {
        *err = "header name must be 1 to 256 characters";
        return SL_ERROR;
    }
    if (!sl_is_token(n)) {
        *err = "header name must be a token";
        return SL_ERROR;
    }
    /* Framing and connection management stay the gateway's: a plugin cannot smuggle. */
    if (SL_IEQ(n, "content-length") || SL_IEQ(n, "transfer-encoding") || SL_IEQ(n, "connection") ||
        SL_IEQ(n, "keep-alive") || SL_IEQ(n, "te") || SL_IEQ(n, "trailer") || SL_IEQ(n, "upgrade")) {
        *err = "framing and hop-by-hop headers are the gateway's to set";
        return SL_ERROR;
    }
    return SL_OK;
}

/* Eight bytes at a time: a word with no byte below 0x20 and none equal to 0x7f is fine as it
 * is (bytes of 0x80 and up, obs-text, are allowed); only a word with a suspect byte (a tab is
 * one) is looked at byte by byte. Request ids are 32 bytes: 4 words instead of 32 bytes. */
static bool word_clean(uint64_t x) {
    const uint64_t ones = 0x0101010101010101ull, highs = 0x8080808080808080ull;
    uint64_t below = (x - ones * 0x20) & ~x & highs; /* a byte < 0x20 */
    uint64_t y = x ^ (ones * 0x7f);
    uint64_t del = (y - ones) & ~y & highs; /* a byte == 0x7f */
    return (below | del) == 0;
}

static int check_value(sl_str_t v, const char **err) {
    size_t i = 0;
    for (; i + 8 <= v.len; i += 8) {
        uint64_t x;
        memcpy(&x, v.p + i, 8);
        if (!word_clean(x)) break;
    }
    for (; i < v.len; i++) {
        unsigned char c = (unsigned char)v.p[i];
        if ((c < 0x20 && c != '\t') || c == 0x7f) {
            *err = "header value must not contain CR, LF, NUL or other controls";
            return SL_ERROR;
        }
    }
    return SL_OK;
}

static bool copy_str(sl_arena_t *a, sl_str_t in, sl_str_t *out) {
    char *p = sl_arena_alloc(a, in.len ? in.len : 1);
    if (!p) return false;
    memcpy(p, in.p, in.len);
    *out = (sl_str_t){p, in.len};
    return true;
}

/* Grows an arena array by doubling (the old copy stays in the arena until the request ends). */
static void *grow(sl_arena_t *a, void *old, uint16_t n, uint16_t *cap, size_t elem) {
    if (n < *cap) return old;
    uint16_t nc = *cap ? (uint16_t)(*cap * 2) : 8;
    void *p = sl_arena_alloc(a, nc * elem);
    if (!p) return NULL;
    if (old) memcpy(p, old, n * elem);
    *cap = nc;
    return p;
}

/* Appends name: value to the added fields. name is copied unless `owned` (already a copy in
 * the arena: set's, made for its removed entry); value is always copied. Checked by the caller. */
static int add(sl_hdr_edits_t *e, sl_arena_t *a, sl_str_t name, bool owned, sl_str_t value, const char **err) {
    if (e->nadded >= 512) {
        *err = "too many header edits";
        return SL_ERROR;
    }
    sl_field_t *arr = grow(a, e->added, e->nadded, &e->cap_added, sizeof(sl_field_t));
    if (!arr) goto oom;
    e->added = arr;
    sl_field_t *f = &e->added[e->nadded];
    if (owned)
        f->name = name;
    else if (!copy_str(a, name, &f->name))
        goto oom;
    if (!copy_str(a, value, &f->value)) goto oom;
    e->nadded++;
    return SL_OK;
oom:
    *err = "out of memory";
    return SL_ERROR;
}

int sl_edits_add_borrowed(sl_hdr_edits_t *e, sl_arena_t *a, sl_str_t name, sl_str_t value) {
    if (e->nadded >= 512) return SL_ERROR;
    sl_field_t *arr = grow(a, e->added, e->nadded, &e->cap_added, sizeof(sl_field_t));
    if (!arr) return SL_ERROR;
    e->added = arr;
    e->added[e->nadded++] = (sl_field_t){name, value};
    return SL_OK;
}

/* Drops the added fields named name and hides the original ones. *copy: the arena copy of
 * name made for the removed list, or {NULL, 0} when name was hidden already. Checked by the
 * caller. */
static int clear(sl_hdr_edits_t *e, sl_arena_t *a, sl_str_t name, sl_str_t *copy, const char **err) {
    *copy = (sl_str_t){NULL, 0};
    uint16_t k = 0;
    for (uint16_t i = 0; i < e->nadded; i++)
        if (!sl_str_ieq2(e->added[i].name, name)) e->added[k++] = e->added[i];
    e->nadded = k;
    if (sl_edits_removed(e, name)) return SL_OK;
    if (e->nremoved >= 512) {
        *err = "too many header edits";
        return SL_ERROR;
    }
    sl_str_t *arr = grow(a, e->removed, e->nremoved, &e->cap_removed, sizeof(sl_str_t));
    if (!arr || !copy_str(a, name, &arr[e->nremoved])) {
        *err = "out of memory";
        return SL_ERROR;
    }
    e->removed = arr;
    *copy = arr[e->nremoved++];
    return SL_OK;
}

int sl_edits_add(sl_hdr_edits_t *e, sl_arena_t *a, sl_str_t name, sl_str_t value, const char **err) {
    if (check_name(name, err) || check_value(value, err)) return SL_ERROR;
    return add(e, a, name, false, value, err);
}

int sl_edits_clear(sl_hdr_edits_t *e, sl_arena_t *a, sl_str_t name, const char **err) {
    sl_str_t copy;
    if (check_name(name, err)) return SL_ERROR;
    return clear(e, a, name, &copy, err);
}

/* clear + add with one check of each argument and one copy of the name (the removed entry's,
 * made by this call, so in this call's case): a plugin's set_header was about 900
 * instructions, half of them checking and copying the same name and value twice. */
int sl_edits_set(sl_hdr_edits_t *e, sl_arena_t *a, sl_str_t name, sl_str_t value, const char **err) {
    sl_str_t copy;
    if (check_name(name, err) || check_value(value, err)) return SL_ERROR;
    if (clear(e, a, name, &copy, err)) return SL_ERROR;
    return copy.p ? add(e, a, copy, true, value, err) : add(e, a, name, false, value, err);
}

bool sl_edits_removed(const sl_hdr_edits_t *e, sl_str_t name) {
    for (uint16_t i = 0; i < e->nremoved; i++)
        if (sl_str_ieq2(e->removed[i], name)) return true;
    return false;
}

const sl_field_t *sl_edits_find(const sl_hdr_edits_t *e, sl_str_t name) {
    for (uint16_t i = 0; i < e->nadded; i++)
        if (sl_str_ieq2(e->added[i].name, name)) return &e->added[i];
    return NULL;
}
