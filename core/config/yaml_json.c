/* yaml_json.c — any YAML document as JSON plus where each key and value stands.
 *
 * `sluice test` reads its spec files with the parser the config uses, so a bad
 * spec is reported at FILE:LINE:COL the way a bad config is: the walk is the
 * one plugin configs go through (sl__cfg_json_node), applied to the whole
 * document.
 */
#include "config/yaml_json.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/parse.h"

int sl_config_yaml_json(const char *path, const char *text, size_t len, char **json, char **pos,
                        sl_errors_t *errs) {
    yaml_parser_t parser;
    yaml_document_t doc;
    bool have_doc = false;
    sl__cx_t cx = {0};
    sl_wbuf_t b = SL_WBUF_GROWING(MAX_PLUGIN_JSON), p = SL_WBUF_GROWING(MAX_PLUGIN_JSON);
    char kpath[PATH_MAX_LEN] = "";

    *json = *pos = NULL;
    if (!yaml_parser_initialize(&parser)) {
        sl_errors_add(errs, path, 1, 1, "out of memory");
        return -1;
    }
    yaml_parser_set_input_string(&parser, (const unsigned char *)text, len);
    if (!yaml_parser_load(&parser, &doc)) {
        sl__cfg_yaml_error(&cx, &parser, text, len);
        goto done;
    }
    have_doc = true;
    cx.doc = &doc;
    yaml_node_t *root = yaml_document_get_root_node(&doc);
    if (!root) {
        sl__cx_at(&cx, 1, 1, "the file is empty");
        goto done;
    }
    if (!sl__cfg_jb_put(&cx, &p, "{", 1) || !sl__cfg_json_node(&cx, &b, &p, kpath, 0, root, 0) ||
        !sl__cfg_jb_put(&cx, &p, "}", 1)) {
        if ((b.full || p.full) && !cx.oom)
            sl__cx_err(&cx, root, "the document is larger than %u bytes as JSON", MAX_PLUGIN_JSON);
        else if (cx.nerrs == 0 && !cx.oom)
            sl__cx_err(&cx, root, "cannot convert the document to JSON");
    }

done:
    if (cx.nerrs == 0 && !cx.oom) {
        *json = b.p;
        *pos = p.p;
    } else {
        qsort(cx.errs, cx.nerrs, sizeof *cx.errs, sl__cfg_cmp_err);
        for (size_t i = 0; i < cx.nerrs; i++)
            sl_errors_add(errs, path, cx.errs[i].line, cx.errs[i].col, "%s", cx.errs[i].msg);
        if (cx.oom) sl_errors_add(errs, path, 1, 1, "out of memory");
        free(b.p);
        free(p.p);
    }
    for (size_t i = 0; i < cx.nerrs; i++)
        free(cx.errs[i].msg);
    free(cx.errs);
    if (have_doc) yaml_document_delete(&doc);
    yaml_parser_delete(&parser);
    return *json ? 0 : -1;
}

void sl_errors_write(const sl_errors_t *errs, char *out, size_t cap) {
    size_t off = 0;
    out[0] = '\0';
    for (size_t i = 0; i < errs->n && off + 1 < cap; i++) {
        int n = snprintf(out + off, cap - off, "%s\n", errs->lines[i]);
        if (n < 0) break;
        off += (size_t)n;
    }
}

/** For lua/sluice/smoke.lua: the JSON of YAML text (malloc'd; free it), *pos
 * its positions (malloc'd), or NULL with the error lines, newline-separated, in
 * err. */
char *sl_ffi_yaml_decode(const char *path, const char *text, size_t len, char **pos, char *err,
                         size_t errlen);
char *sl_ffi_yaml_decode(const char *path, const char *text, size_t len, char **pos, char *err,
                         size_t errlen) {
    sl_errors_t errs = {0};
    char *json = NULL;
    err[0] = 0;
    if (sl_config_yaml_json(path, text, len, &json, pos, &errs) != 0) {
        size_t off = 0;
        for (size_t i = 0; i < errs.n && off + 1 < errlen; i++) {
            int n = snprintf(err + off, errlen - off, "%s\n", errs.lines[i]);
            if (n < 0) break;
            off += (size_t)n;
        }
    }
    sl_errors_free(&errs);
    return json;
}
