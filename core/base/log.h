/* log.h — JSON-lines logging on stderr.
 *
 * Every line is one JSON object: ts, level, msg, and the optional fields a
 * caller passes (request_id, route, plugin, ...). Safe to call from any thread:
 * each line is formatted on the stack and written with one write(2).
 */
#ifndef SL_LOG_H
#define SL_LOG_H

#include "base/common.h"

/* Levels: SL_LOG_DEBUG .. SL_LOG_ERR, in sluice.h (plugins log through the ABI). */

/** Lines below this level are dropped. Set once at start (SLUICE_LOG_LEVEL=debug|info|warn|err). */
extern int sl_log_level;

/**
 * Logs msg (printf format) with extra string fields given as name/value pairs,
 * `nfields` pairs in `fields` (may be NULL). Values are JSON-escaped.
 */
void sl_log_kv(int level, const char *const *fields, size_t nfields, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

#define sl_log(level, ...) sl_log_kv((level), NULL, 0, __VA_ARGS__)
#define sl_log_debug(...) sl_log(SL_LOG_DEBUG, __VA_ARGS__)
#define sl_log_info(...) sl_log(SL_LOG_INFO, __VA_ARGS__)
#define sl_log_warn(...) sl_log(SL_LOG_WARN, __VA_ARGS__)
#define sl_log_err(...) sl_log(SL_LOG_ERR, __VA_ARGS__)

void sl_log_init_from_env(void);

/** Test support: while on, every line is also kept in memory (bounded, oldest dropped). */
void sl_log_capture(int on);
/** Copies the captured lines (newline-separated) into out; returns the bytes copied. */
size_t sl_log_captured(char *out, size_t cap);

#endif
