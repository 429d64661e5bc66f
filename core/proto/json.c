/* json.c — JSON read with libyaml (json.h). */
#include "proto/json.h"

#include <stdlib.h>
#include <string.h>

bool sl_json_parse(sl_jdoc_t *d, const char *s, size_t n) {
    yaml_parser_t p;
    if (!yaml_parser_initialize(&p)) return false;
    yaml_parser_set_input_string(&p, (const unsigned char *)s, n);
    bool ok = yaml_parser_load(&p, &d->doc);
    yaml_parser_delete(&p);
    if (!ok) return false;
    d->root = yaml_document_get_root_node(&d->doc);
    if (!d->root) yaml_document_delete(&d->doc);
    return d->root != NULL;
}

yaml_node_t *sl_json_get(sl_jdoc_t *d, const yaml_node_t *map, const char *key) {
    if (!map || map->type != YAML_MAPPING_NODE) return NULL;
    for (yaml_node_pair_t *pr = map->data.mapping.pairs.start; pr < map->data.mapping.pairs.top; pr++) {
        yaml_node_t *k = yaml_document_get_node(&d->doc, pr->key);
        if (k && k->type == YAML_SCALAR_NODE && strcmp((const char *)k->data.scalar.value, key) == 0)
            return yaml_document_get_node(&d->doc, pr->value);
    }
    return NULL;
}

const char *sl_json_str(const yaml_node_t *n) {
    return n && n->type == YAML_SCALAR_NODE ? (const char *)n->data.scalar.value : NULL;
}

long long sl_json_int(const yaml_node_t *n) {
    const char *s = sl_json_str(n);
    return s ? strtoll(s, NULL, 10) : 0;
}

size_t sl_json_len(const yaml_node_t *n) {
    return n && n->type == YAML_SEQUENCE_NODE ? (size_t)(n->data.sequence.items.top - n->data.sequence.items.start) : 0;
}

yaml_node_t *sl_json_at(sl_jdoc_t *d, const yaml_node_t *n, size_t i) {
    return yaml_document_get_node(&d->doc, n->data.sequence.items.start[i]);
}
