/* privileges.h — `user:`/`group:`: leave root once the listening sockets are bound. */
#ifndef SL_PRIVILEGES_H
#define SL_PRIVILEGES_H

#include "config/config.h"

/**
 * Switches the process to cfg->run_uid/run_gid when cfg->run_user is set: setgroups (to
 * the one group), setgid, setuid, in that order, then checks that root cannot be regained.
 * Every thread of the process changes with it (glibc applies set*id to all threads).
 * Nothing to do without `user:`, or when already running as that user and group. Returns 0,
 * or -1 with *err (static text) when any step fails: the caller must not serve then.
 * Main thread, before the workers start.
 */
int sl_privileges_drop(const sl_config_t *cfg, const char **err);

#endif
