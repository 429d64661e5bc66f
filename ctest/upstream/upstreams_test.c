/* upstreams_test.c — unit tests for core/upstream/upstreams.c's dynamic slots
 * (sl_upgen_fill): an address that stays keeps its slot and its state, a gone one's slot
 * is emptied and never picked, a returning address takes its old slot (and state) back, a
 * slot is refilled with another address only after the quiet time, and a generation built
 * on the same registry shares the states. */
#include "upstream/attempt.h"

#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

typedef struct {
    sl_config_t *cfg;
    sl_tregistry_t reg;
    sl_upgen_t *ug;
} fx_t;

static void fx_open(fx_t *f) {
    static const char y[] = "listeners: [ { name: web, listen: 127.0.0.1:8080 } ]\n"
                            "upstreams:\n  - name: u\n    keepalive: { idle_timeout: 1s }\n"
                            "    timeouts: { read: 1s }\n"
                            "    targets: [ { address: 10.9.9.9:80 }, { address: \"api.test:80\" } ]\n"
                            "routes: [ { name: r, match: { paths: [/] }, upstream: u } ]\n";
    sl_errors_t errs = {0};
    memset(f, 0, sizeof(*f));
    CHECK_INT(sl_config_parse("t.yaml", y, sizeof y - 1, &f->cfg, &errs), 0);
    sl_errors_free(&errs);
    f->ug = sl_upgen_new(&f->reg, f->cfg);
    CHECK(f->ug != NULL);
}

static void fx_close(fx_t *f) {
    sl_upgen_free(&f->reg, f->ug);
    sl_config_free(f->cfg);
    CHECK(f->reg.head == NULL); /* every state freed with the last generation */
}

static sl_slot_addr_t addr(const char *ip) {
    sl_slot_addr_t a = {.len = sizeof(struct sockaddr_in), .weight = 1};
    struct sockaddr_in *in = (struct sockaddr_in *)&a.ss;
    in->sin_family = AF_INET;
    in->sin_port = htons(80);
    inet_pton(AF_INET, ip, &in->sin_addr);
    return a;
}

/* The slot (index into targets) holding text, or -1. */
static int slot_of(const fx_t *f, const char *text) {
    const sl_upstream_conf_t *uc = &f->cfg->upstreams[0];
    for (size_t i = 0; i < uc->ntargets; i++)
        if (sl_slot_up(uc, i) && strcmp(uc->targets[i].addr.text, text) == 0) return (int)i;
    return -1;
}

static int fill(fx_t *f, const sl_slot_addr_t *a, size_t n, uint64_t now) {
    const sl_dns_name_conf_t *nc = &f->cfg->upstreams[0].names[0];
    return sl_upgen_fill(&f->reg, f->ug, 0, nc->first, SL_DNS_SLOTS, a, n, now);
}

static void test_empty_until_filled(void) {
    fx_t f;
    fx_open(&f);
    const sl_upstream_conf_t *uc = &f.cfg->upstreams[0];
    CHECK_INT(uc->ntargets, 1 + SL_DNS_SLOTS);
    CHECK(!sl_upstream_empty(uc)); /* the static one */
    sl_attempts_of_t of = {uc, &f.ug->ups[0], SL_LAYER_HTTP};
    sl_tries_t tr;
    CHECK_INT(sl_tries_init(&tr, (uint32_t)uc->ntargets, NULL), SL_OK);
    uint8_t admit;
    uint64_t ra;
    for (int i = 0; i < 20; i++) CHECK_INT(sl_attempt_pick(&of, &tr, "", 0, &admit, &ra, sl_now_ms()), 0); /* never an empty slot */
    sl_tries_free(&tr);
    fx_close(&f);
}

static void test_stay_go_return(void) {
    fx_t f;
    fx_open(&f);
    sl_slot_addr_t ab[] = {addr("10.0.0.1"), addr("10.0.0.2")};
    CHECK_INT(fill(&f, ab, 2, 1000), 2);
    int sa = slot_of(&f, "10.0.0.1:80"), sb = slot_of(&f, "10.0.0.2:80");
    CHECK(sa > 0 && sb > 0 && sa != sb);
    sl_tstate_t *ta = f.ug->ups[0].ts[sa];
    atomic_store(&ta->live.ewma_ns, 5e6); /* state that must survive */

    sl_slot_addr_t ac[] = {addr("10.0.0.1"), addr("10.0.0.3")};
    CHECK_INT(fill(&f, ac, 2, 2000), 2);
    CHECK_INT(slot_of(&f, "10.0.0.1:80"), sa);             /* stays: same slot */
    CHECK(f.ug->ups[0].ts[sa] == ta);                      /* and the same state */
    CHECK_INT(slot_of(&f, "10.0.0.2:80"), -1);             /* gone: emptied */
    int sc = slot_of(&f, "10.0.0.3:80");
    CHECK(sc > 0 && sc != sb);                             /* a never-used slot, not b's */

    CHECK_INT(fill(&f, ab, 2, 3000), 2);                   /* b comes back */
    CHECK_INT(slot_of(&f, "10.0.0.2:80"), sb);             /* to its own slot */
    CHECK((double)atomic_load(&f.ug->ups[0].ts[sa]->live.ewma_ns) == 5e6);
    fx_close(&f);
}

static void test_reuse_waits_for_quiet(void) {
    fx_t f;
    fx_open(&f);
    /* fill every slot, then replace them all: only never-used slots exist for none, so the
     * new addresses wait until the old slots were quiet for idle_timeout + read + 1s (3s) */
    sl_slot_addr_t a[SL_DNS_SLOTS], b[SL_DNS_SLOTS];
    char ip[32];
    for (int i = 0; i < SL_DNS_SLOTS; i++) {
        snprintf(ip, sizeof ip, "10.1.0.%d", i + 1);
        a[i] = addr(ip);
        snprintf(ip, sizeof ip, "10.2.0.%d", i + 1);
        b[i] = addr(ip);
    }
    CHECK_INT(fill(&f, a, SL_DNS_SLOTS, 1000), SL_DNS_SLOTS);
    CHECK_INT(fill(&f, b, SL_DNS_SLOTS, 2000), 0);          /* a's slots just emptied */
    CHECK(sl_upstream_empty(&f.cfg->upstreams[0]) == false);
    CHECK_INT(fill(&f, b, SL_DNS_SLOTS, 2000 + 3001), SL_DNS_SLOTS); /* quiet long enough */
    CHECK_INT(slot_of(&f, "10.1.0.1:80"), -1);
    CHECK(slot_of(&f, "10.2.0.16:80") > 0);
    sl_upgen_sweep(f.ug, UINT64_MAX, 0);
    fx_close(&f);
}

static void test_reload_shares_states(void) {
    fx_t f;
    fx_open(&f);
    sl_slot_addr_t a[] = {addr("10.0.0.1")};
    CHECK_INT(fill(&f, a, 1, 1000), 1);
    int s = slot_of(&f, "10.0.0.1:80");
    sl_tstate_t *t = f.ug->ups[0].ts[s];
    sl_upgen_t *g2 = sl_upgen_new(&f.reg, f.cfg); /* a reload fills its slots the same way */
    CHECK(g2 != NULL);
    sl_upgen_t *g1 = f.ug;
    f.ug = g2;
    const sl_dns_name_conf_t *nc = &f.cfg->upstreams[0].names[0];
    /* the slots live in the config: a new config would start empty; this one is shared */
    CHECK_INT(sl_upgen_fill(&f.reg, g2, 0, nc->first, SL_DNS_SLOTS, a, 1, 2000), 1);
    sl_tstate_t *t2 = g2->ups[0].ts[slot_of(&f, "10.0.0.1:80")];
    CHECK(t2 == t || strcmp(t2->address, t->address) == 0);
    sl_upgen_free(&f.reg, g1);
    fx_close(&f);
}

/* passive: { window } ejects a failing target for the window (no active probes): a window
 * near the top of the duration range (the config takes up to 2^64-1 ms) wrapped now +
 * window around to the past, so the target was never ejected at all. */
static void test_passive_window_saturates(void) {
    sl_tstate_t *t = calloc(1, sizeof *t);
    sl_health_conf_t h = {.passive = true, .max_failures = 1, .window_ms = UINT64_MAX};
    uint64_t now = 1000000;
    sl_tstate_passive_failure(t, &h, now);
    CHECK(!sl_tstate_healthy(t, now + 1));
    CHECK(!sl_tstate_healthy(t, now + 365ull * 24 * 3600 * 1000));
    memset(t, 0, sizeof *t);
    h.window_ms = 10000; /* an ordinary window ends */
    sl_tstate_passive_failure(t, &h, now);
    CHECK(!sl_tstate_healthy(t, now + 9999));
    CHECK(sl_tstate_healthy(t, now + 10000));
    free(t);
}

int main(int argc, char **argv) {
    static const check_test_t tests[] = {
        {"passive_window_saturates", test_passive_window_saturates},
        {"empty_until_filled", test_empty_until_filled},
        {"stay_go_return", test_stay_go_return},
        {"reuse_waits_for_quiet", test_reuse_waits_for_quiet},
        {"reload_shares_states", test_reload_shares_states},
    };
    return check_main(tests, sizeof(tests) / sizeof(tests[0]), argc, argv);
}
