/* json.h — JSON read with libyaml (JSON is YAML's flow style), so no JSON library is added:
 * a document, then lookups by key and index. For the core's own small JSON inputs (the
 * admin API's request bodies, etcd's answers); a request's JSON is the plugins' (cjson).
 */
#ifndef SL_PROTO_JSON_H
#define SL_PROTO_JSON_H

#include <stdbool.h>
#include <stddef.h>
#include <yaml.h>

/** A parsed JSON text; root NULL when empty. */
typedef struct {
    yaml_document_t doc;
    yaml_node_t *root;
} sl_jdoc_t;

/** Whether s[0..n) is one JSON text (RFC 8259): a value, whitespace around it, nothing else. */
bool sl_json_valid(const char *s, size_t n);
/** Parses s[0..n) (YAML: any JSON, and more; check sl_json_valid first where only JSON
 * may come); on success the caller deletes d->doc (yaml_document_delete). */
bool sl_json_parse(sl_jdoc_t *d, const char *s, size_t n);
/** The value of `key` in mapping `map`, or NULL. */
yaml_node_t *sl_json_get(sl_jdoc_t *d, const yaml_node_t *map, const char *key);
/** A scalar's text (borrowed from the document), or NULL. */
const char *sl_json_str(const yaml_node_t *n);
/** A scalar as an integer (etcd writes int64 as strings); 0 when absent. */
long long sl_json_int(const yaml_node_t *n);
/** A sequence's length (0 for anything else). */
size_t sl_json_len(const yaml_node_t *n);
/** Item i of sequence n (i below sl_json_len(n)). */
yaml_node_t *sl_json_at(sl_jdoc_t *d, const yaml_node_t *n, size_t i);

#endif
