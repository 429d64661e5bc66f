/* notify.h — the service manager's readiness protocol (sd_notify(3)), without libsystemd.
 *
 * systemd (Type=notify) passes a unix datagram socket in $NOTIFY_SOCKET: a path, or an
 * abstract name written with a leading '@'. sluice sends READY=1 once its listeners are
 * bound, RELOADING=1 (with MONOTONIC_USEC) then READY=1 around a reload, and STOPPING=1
 * when it starts draining. Without the variable every call does nothing.
 */
#ifndef SL_NOTIFY_H
#define SL_NOTIFY_H

/** Sends `state` (e.g. "READY=1\nSTATUS=serving") to $NOTIFY_SOCKET. 0 sent or not asked
 *  for; -1 when the socket is named but the datagram could not be sent. Any thread. */
int sl_notify(const char *state);

/** "RELOADING=1\nMONOTONIC_USEC=<CLOCK_MONOTONIC now>": systemd >= 253 wants the timestamp
 *  to tell this reload from an earlier one. Same return as sl_notify. */
int sl_notify_reloading(void);

#endif
