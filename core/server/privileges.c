/* privileges.c — the switch from root to `user:` (see privileges.h).
 *
 * The order is the one that works: setgroups and setgid need root, so they come before
 * setuid; after setuid the process can regain nothing. Supplementary groups are dropped
 * to the configured group alone rather than taken from the user's memberships
 * (initgroups): what sluice may open is what its one group and user may. No capability is
 * kept: a uid change from 0 clears the permitted, effective and ambient sets, so a reload
 * after the switch binds ports below 1024 only if the kernel lets anyone do so
 * (net.ipv4.ip_unprivileged_port_start); listeners a reload keeps keep their sockets. */
#include "server/privileges.h"

#include <errno.h>
#include <grp.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

int sl_privileges_drop(const sl_config_t *cfg, const char **err) {
    static char msg[256];
    if (!cfg->run_user) return 0;
    if (getuid() == cfg->run_uid && geteuid() == cfg->run_uid && getgid() == cfg->run_gid &&
        getegid() == cfg->run_gid)
        return 0;
    const char *step = NULL;
    /* A reload's build starts at nice 19 and is raised back to 0 when it runs long
     * (reload.c); after the switch that needs RLIMIT_NICE of 20 (nice down to 0, never
     * below), which only root can grant. */
    struct rlimit nl;
    if (getrlimit(RLIMIT_NICE, &nl) == 0 && nl.rlim_max < 20) {
        nl.rlim_cur = nl.rlim_max = 20;
        setrlimit(RLIMIT_NICE, &nl);
    } else if (nl.rlim_cur < 20) {
        nl.rlim_cur = 20;
        setrlimit(RLIMIT_NICE, &nl);
    }
    if (setgroups(1, &cfg->run_gid) != 0) step = "setgroups";
    else if (setgid(cfg->run_gid) != 0) step = "setgid";
    else if (setuid(cfg->run_uid) != 0) step = "setuid";
    if (step) {
        snprintf(msg, sizeof(msg), "cannot switch to user %s (uid %u, gid %u): %s: %s%s", cfg->run_user,
                 (unsigned)cfg->run_uid, (unsigned)cfg->run_gid, step, strerror(errno),
                 geteuid() != 0 ? " (only root can switch users: start sluice as root, or leave 'user' out)"
                                : "");
        *err = msg;
        return -1;
    }
    /* A process that could set its uid back to 0 did not really leave root. */
    if (setuid(0) == 0 || geteuid() != cfg->run_uid || getegid() != cfg->run_gid) {
        snprintf(msg, sizeof(msg), "switched to user %s but root could be regained", cfg->run_user);
        *err = msg;
        return -1;
    }
    return 0;
}
