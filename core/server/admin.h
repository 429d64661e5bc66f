/* admin.h — the admin API on the main thread's loop: /health, /ready, /metrics, /status. */
#ifndef SL_ADMIN_H
#define SL_ADMIN_H

#include "server/server.h"

/** Binds and starts the admin listener; fills srv->admin_text with the real address. */
int sl_admin_start(sl_server_t *srv, const char **err);
/** Closes the admin listener (open admin connections finish on their own). */
void sl_admin_stop(sl_server_t *srv);

#endif
