/* etcd.h — the fleet's config from etcd: one watch per process, push and pull.
 *
 * A config with `config_source: { etcd: ... }` keeps its process keys (workers, admin,
 * listeners, redis) in the local file; routes, upstreams, consumers, the global chain
 * and user plugins' Lua source live under the prefix in etcd, one key each
 * (routes/NAME, upstreams/NAME, consumers/NAME, plugins/NAME, global). The main thread
 * owns the source: it reads the prefix, watches it from the read revision + 1 through
 * etcd's HTTP/JSON gateway, and turns each burst of changes (100 ms) into one
 * generation through sl_server_reload, exactly as a file change.
 */
#ifndef SL_ETCD_H
#define SL_ETCD_H

#include "config/config.h"

typedef struct sl_etcd_s sl_etcd_t;
typedef struct sl_server_s sl_server_t;

/**
 * Start: takes the local config (main's) and returns the one to start on: built from
 * the snapshot when there is one (etcd is read once the loop runs), else `local`
 * (the gateway answers /ready 503 until a config arrives). Main thread, before
 * sl_server_run. The returned config belongs to the caller, as `local` did; when it is
 * not `local`, `local` was freed.
 */
sl_config_t *sl_etcd_boot(sl_config_t *local);

/** Starts the watch on the server's loop (after sl_server_start). Main thread. */
void sl_etcd_attach(sl_server_t *srv);
/** Stops every etcd request and timer (drain). Main thread. */
void sl_etcd_close(sl_server_t *srv);

/**
 * For sl_server_reload: builds a config from the local file's text and the source's
 * current keys, plugins checked; errors name the etcd key and its line:col. 0 or -1.
 */
int sl__etcd_build(sl_etcd_t *e, const char *path, const char *text, size_t len, sl_config_t **out, sl_errors_t *errs);
/** The content hash of the source's keys (mixed into the config hash). */
uint64_t sl__etcd_hash(const sl_etcd_t *e);
/** False while no generation from etcd or a snapshot is being served (/ready 503). */
bool sl_etcd_ready(const sl_etcd_t *e);
/** The `,"config_source":{...}` member of /status (malloc'ed), NULL without a source. */
char *sl_etcd_status(const sl_etcd_t *e);
/** sluice_config_source_up and the revision for /metrics (malloc'ed), NULL without a source. */
char *sl_etcd_metrics(const sl_etcd_t *e);

/** `sluice push -c FILE --etcd URL [--prefix P]`: exit code. */
int sl_etcd_push(const char *file, const char *url, const char *prefix);
/** `sluice pull --etcd URL [--prefix P] [--plugins DIR]`: prints one YAML file (plugin
 *  sources written to DIR); exit code. */
int sl_etcd_pull(const char *url, const char *prefix, const char *plugins_dir);

#endif
