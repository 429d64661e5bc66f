/* health.h — active health probes of upstream targets (main thread). */
#ifndef SL_HEALTH_H
#define SL_HEALTH_H

#include <uv.h>

#include "net/tls.h"
#include "upstream/upstreams.h"

typedef struct {
    uv_loop_t *loop;
    sl_tregistry_t *reg;
    struct sl_prober_s *probers;
    sl_blockpool_t blocks;      /**< buffers of probes to TLS targets */
    sl_tls_pump_t pump;
    bool pump_ready;
} sl_health_t;

/** Starts probing every target of g's upstreams that configure health.active. */
void sl_health_start(sl_health_t *hc, uv_loop_t *loop, sl_tregistry_t *reg, const sl_upgen_t *g);
/** Stops every prober; each frees itself once its handles are closed. */
void sl_health_stop(sl_health_t *hc);
/** The server is stopping for good: after sl_health_stop, releases what probes shared. */
void sl_health_close(sl_health_t *hc);

#endif
