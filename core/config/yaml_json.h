/* yaml_json.h — a YAML document as JSON, with positions, for files that are not
 * configs (the spec files of `sluice test`). */
#ifndef SL_CONFIG_YAML_JSON_H
#define SL_CONFIG_YAML_JSON_H

#include <stddef.h>

#include "config/config.h"

/**
 * Converts YAML text (one document) to JSON in *json and, in *pos, a JSON
 * object
 * {"a.b": [key_line, key_col, value_line, value_col], "a.2": [...]} naming
 * where each key and value stands (list items 1-based). Scalars keep YAML's
 * plain true/false/null and JSON-shaped numbers; everything else is a string.
 * Both malloc'd, owned by the caller. Returns 0, or -1 with "path:LINE:COL:
 * message" lines appended to errs.
 */
int sl_config_yaml_json(const char *path, const char *text, size_t len, char **json, char **pos,
                        sl_errors_t *errs);

/** Writes the error lines into out (cap bytes, NUL-terminated), one per line,
 * as many as fit: for callers that hand errors across the FFI. */
void sl_errors_write(const sl_errors_t *errs, char *out, size_t cap);

#endif
