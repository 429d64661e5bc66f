/* http_logger.h — the http-logger plugin's batches (http_logger.c; the FFI side is
 * sl_ffi_httplog_* in sluice.h). */
#ifndef SL_HTTP_LOGGER_H
#define SL_HTTP_LOGGER_H

#include "sluice.h"

/** sluice_http_logger_lines_total{result} as Prometheus text (malloc'ed; NULL when no
 *  line was ever queued, or out of memory). Any thread. */
char *sl_httplog_metrics(void);

#endif
