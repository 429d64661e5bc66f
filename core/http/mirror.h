/* mirror.h — the mirror plugin's copies of requests (mirror.c; the FFI side is
 * sl_ffi_mirror_* in sluice.h). */
#ifndef SL_MIRROR_H
#define SL_MIRROR_H

#include "sluice.h"

/** Outcomes counted: SL_MIRROR_SENT .. SL_MIRROR_TOO_LARGE. */
#define SL_MIRROR_RESULTS (SL_MIRROR_TOO_LARGE + 1)

/** sluice_mirror_requests_total{result} as Prometheus text (malloc'ed; NULL when nothing
 *  was ever mirrored, or out of memory). Any thread. */
char *sl_mirror_metrics(void);

#endif
