/* req_debug.c — request debugging: a request whose X-Sluice-Debug header holds the token
 * of admin.debug_token_env gets X-Sluice-Debug-Output, a JSON account of where its time
 * went (route, config generation, each attempt, each plugin call before the response
 * head). The header never reaches the upstream, right token or not.
 *
 * Nothing here runs for a request without the header: the record is allocated from the
 * request's arena when the token matches, and every hook tests r->debug first. */
#include <stdio.h>
#include <string.h>

#include "http/request.h"
#include "base/wbuf.h"

/* The calls and attempts kept; more are counted in "truncated". */
#define DEBUG_CALLS 48
#define DEBUG_ATTEMPTS 8

struct sl_req_debug_s {
    struct {
        const char *target; /* config's or the request's address text */
        int status;         /* 0: no response */
        uint64_t ns;
    } att[DEBUG_ATTEMPTS];
    struct {
        uint8_t pos, phase;
        uint64_t ns;
    } call[DEBUG_CALLS];
    uint8_t natt, ncall;
    uint32_t truncated;
};

static const sl_str_t debug_header = {"X-Sluice-Debug", sizeof("X-Sluice-Debug") - 1};

void sl__req_debug_begin(sl_req_t *r) {
    const sl_config_t *cfg = r->w->cfg;
    r->debug = NULL;
    if (!cfg->debug_token_len) return;
    for (uint16_t i = 0; i < r->head.nheaders; i++) {
        if (!sl_str_ieq2(r->head.headers[i].name, debug_header)) continue;
        sl_str_t v = r->head.headers[i].value;
        const char *err;
        /* whatever it holds, the upstream does not see it (a token is a secret) */
        if (sl_edits_clear(&r->req_edits, &r->arena, debug_header, &err) != SL_OK) return;
        if (!r->debug && sl_secret_equal(cfg->debug_token, cfg->debug_token_len, v.p, v.len)) {
            r->debug = sl_arena_alloc(&r->arena, sizeof(*r->debug));
            if (r->debug) memset(r->debug, 0, sizeof(*r->debug));
        }
    }
}

void sl__req_debug_plugin(sl_req_t *r, int pos, int phase, uint64_t ns) {
    sl_req_debug_t *d = r->debug;
    if (d->ncall == DEBUG_CALLS) {
        d->truncated++;
        return;
    }
    d->call[d->ncall].pos = (uint8_t)pos;
    d->call[d->ncall].phase = (uint8_t)phase;
    d->call[d->ncall++].ns = ns;
}

void sl__req_debug_attempt(sl_req_t *r, int status, uint64_t ns) {
    sl_req_debug_t *d = r->debug;
    if (d->natt == DEBUG_ATTEMPTS) {
        d->truncated++;
        return;
    }
    const char *target = sl__req_attempt_target(r);
    d->att[d->natt].target = target ? target : "?";
    d->att[d->natt].status = status;
    d->att[d->natt++].ns = ns;
}

static bool put_ms(sl_wbuf_t *b, uint64_t ns) {
    char num[32];
    int n = snprintf(num, sizeof num, "%.3f", (double)ns / 1e6);
    return sl_wbuf_put(b, num, (size_t)n);
}

void sl__req_debug_emit(sl_req_t *r) {
    sl_req_debug_t *d = r->debug;
    const sl_config_t *cfg = r->w->cfg;
    const sl_route_conf_t *rc = sl__req_route_conf(r);
    /* The attempt answering is still running: it is shown up to its response head. */
    const sl_exchange_t *x = sl__req_x(r);
    if (x->state != SL_X_FREE && r->mode == SL_MODE_PROXY && r->rhead.status)
        sl__req_debug_attempt(r, r->rhead.status, sl_now_ns() - x->att.start_ns);
    size_t cap = 160 + (size_t)d->natt * 120 + (size_t)d->ncall * 100;
    char *p = sl_arena_alloc(&r->arena, cap);
    if (!p) return;
    sl_wbuf_t b = SL_WBUF_BOUNDED(p, cap);
    bool ok = SL_WBUF_LIT(&b, "{\"route\":") &&
              (rc ? sl_wbuf_json_quoted(&b, (sl_str_t){rc->name, strlen(rc->name)}) : SL_WBUF_LIT(&b, "null")) &&
              SL_WBUF_LIT(&b, ",\"generation\":") && sl_wbuf_u64(&b, r->w->generation) &&
              SL_WBUF_LIT(&b, ",\"request_id\":") && sl_wbuf_json_quoted(&b, (sl_str_t){r->rid, r->rid_len}) &&
              SL_WBUF_LIT(&b, ",\"attempts\":[");
    for (uint8_t i = 0; i < d->natt && ok; i++)
        ok = (i == 0 || SL_WBUF_LIT(&b, ",")) && SL_WBUF_LIT(&b, "{\"target\":") &&
             sl_wbuf_json_quoted(&b, (sl_str_t){d->att[i].target, strlen(d->att[i].target)}) &&
             SL_WBUF_LIT(&b, ",\"status\":") && sl_wbuf_u64(&b, (uint64_t)d->att[i].status) &&
             SL_WBUF_LIT(&b, ",\"ms\":") && put_ms(&b, d->att[i].ns) && SL_WBUF_LIT(&b, "}");
    ok = ok && SL_WBUF_LIT(&b, "],\"plugins\":[");
    for (uint8_t i = 0; i < d->ncall && ok; i++) {
        const char *name = sl_config_chain_name(cfg, rc, d->call[i].pos);
        const char *phase = sl_metrics_phase_name(d->call[i].phase);
        ok = (i == 0 || SL_WBUF_LIT(&b, ",")) && SL_WBUF_LIT(&b, "{\"plugin\":") &&
             sl_wbuf_json_quoted(&b, (sl_str_t){name, strlen(name)}) && SL_WBUF_LIT(&b, ",\"phase\":") &&
             sl_wbuf_json_quoted(&b, (sl_str_t){phase, strlen(phase)}) && SL_WBUF_LIT(&b, ",\"ms\":") &&
             put_ms(&b, d->call[i].ns) && SL_WBUF_LIT(&b, "}");
    }
    ok = ok && SL_WBUF_LIT(&b, "],\"truncated\":") && sl_wbuf_u64(&b, d->truncated) && SL_WBUF_LIT(&b, "}");
    const char *err;
    if (ok) sl_edits_set(&r->resp_edits, &r->arena, SL_LIT("X-Sluice-Debug-Output"), (sl_str_t){p, b.len}, &err);
}
