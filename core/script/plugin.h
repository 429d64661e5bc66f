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

/** Prints each route's chain per phase (all routes, or `route`) to stdout: 0, or -1 with a
 *  message on stderr (an unknown route). Main thread, after a successful sl_plugins_check. */
int sl_plugins_explain(const sl_config_t *cfg, const char *route);

#endif
