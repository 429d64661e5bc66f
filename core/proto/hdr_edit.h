/* hdr_edit.h — header changes made by plugins, applied when a head is rebuilt.
 *
 * An edit set is what a request's plugins did to one head (the request sent
 * upstream, or the response sent to the client): names removed from the
 * original head, and fields added. `set` = clear + add. Lookups see the edits
 * first. All bytes are copied into the request's arena: plugin strings may be
 * collected as soon as the call returns. Owner: one request.
 */
#ifndef SL_HDR_EDIT_H
#define SL_HDR_EDIT_H

#include "base/block.h"
#include "base/common.h"

typedef struct {
    sl_str_t name, value;
} sl_field_t;

typedef struct {
    sl_field_t *added;
    sl_str_t *removed;
    uint16_t nadded, cap_added, nremoved, cap_removed;
} sl_hdr_edits_t;

/** Adds a field. SL_ERROR with *err for a name that is not a token, a value with CR/LF/NUL,
 *  a framing or hop-by-hop name, or no memory. */
int sl_edits_add(sl_hdr_edits_t *e, sl_arena_t *a, sl_str_t name, sl_str_t value, const char **err);
/** Adds a field without checking or copying it: for fields already checked whose bytes
 *  outlive the request (a cache entry the request holds). SL_ERROR: too many, or no memory. */
int sl_edits_add_borrowed(sl_hdr_edits_t *e, sl_arena_t *a, sl_str_t name, sl_str_t value);
/** Removes every field of that name (original and added). */
int sl_edits_clear(sl_hdr_edits_t *e, sl_arena_t *a, sl_str_t name, const char **err);
/** clear + add. */
int sl_edits_set(sl_hdr_edits_t *e, sl_arena_t *a, sl_str_t name, sl_str_t value, const char **err);
/** True when the original field `name` is hidden by a clear or set. */
bool sl_edits_removed(const sl_hdr_edits_t *e, sl_str_t name);
/** The first added field named `name`, or NULL. */
const sl_field_t *sl_edits_find(const sl_hdr_edits_t *e, sl_str_t name);

#endif
