/* plugin.h — the plugin half of a config build: find every plugin a config names
 * and validate its config against the plugin's schema (and its check()).
 */
#ifndef SL_PLUGIN_H
#define SL_PLUGIN_H

#include "config/config.h"

/**
 * Resolves cfg->plugin_search (plugin_paths relative to the config file's folder, then
 * the built-in plugins) and validates every plugin use of the global chain and the
 * routes in a scratch Lua VM. Errors are appended as "FILE:LINE:COL: route 'r', plugin
 * 'p': message". Returns 0, or -1 when any error was found. Main thread.
 */
int sl_plugins_check(sl_config_t *cfg, sl_errors_t *errs);

/**
 * A whole config build, as `sluice run`, `check` and a reload do it: the YAML
 * (sl_config_parse_partial: from `text`, or read from `path` when text is NULL), then
 * sl_plugins_check over whatever parsed, so a YAML-level error does not hide the plugin
 * errors behind it; the errors of both sorted in file order (sl_errors_sort). `path`
 * names the config in errors. Returns 0 and *out, or -1 (*out NULL) with the errors in
 * errs. Main thread.
 */
int sl_config_build(const char *path, const char *text, size_t len, sl_config_t **out, sl_errors_t *errs);

/** Prints each route's chain per phase (all routes, or `route`) to stdout: 0, or -1 with a
 *  message on stderr (an unknown route). Main thread, after a successful sl_plugins_check. */
int sl_plugins_explain(const sl_config_t *cfg, const char *route);

#endif
