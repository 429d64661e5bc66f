/* attempt.c — target choice, breaker admission, outcomes and in-flight accounting of one
 * attempt, for HTTP and TCP alike (attempt.h). */
#include "upstream/attempt.h"

#include <stdlib.h>
#include <string.h>

#include "base/common.h"

int sl_tries_init(sl_tries_t *t, uint32_t ntargets, sl_arena_t *arena) {
    uint32_t words = ntargets > 64 ? (ntargets + 63) / 64 : 1;
    memset(t, 0, sizeof(*t));
    t->words = words;
    if (words == 1) {
        t->tried = &t->inl[0];
        t->skip = &t->inl[1];
        return SL_OK;
    }
    size_t n = 2 * (size_t)words * sizeof(uint64_t);
    uint64_t *p = arena ? sl_arena_alloc(arena, n) : malloc(n);
    if (!p) {
        t->words = 0;
        return SL_ERROR;
    }
    memset(p, 0, n);
    t->tried = p;
    t->skip = p + words;
    t->inl[0] = arena ? 0 : 1; /* 1: malloc'ed, sl_tries_free frees it */
    return SL_OK;
}

void sl_tries_free(sl_tries_t *t) {
    if (t->words > 1 && t->inl[0] == 1) free(t->tried);
    t->words = 0;
    t->tried = t->skip = NULL;
}

static void set_bit(uint64_t *set, uint32_t t) { set[t >> 6] |= 1ull << (t & 63); }

static sl_breaker_t *breaker_of(const sl_attempts_of_t *of, uint32_t t) {
    return &of->rt->ts[t]->breaker[of->layer];
}

typedef struct {
    const sl_attempts_of_t *of;
    const sl_tries_t *tr;
    uint64_t now_ms;
    bool ignore_health;
} pick_ctx_t;

static bool eligible(void *ud, uint32_t t) {
    pick_ctx_t *pc = ud;
    if (sl_tries_has(pc->tr->tried, t) || sl_tries_has(pc->tr->skip, t)) return false;
    if (!sl_slot_up(pc->of->uc, t)) return false; /* an empty DNS or registry slot */
    if (!pc->ignore_health && !sl_tstate_healthy(pc->of->rt->ts[t], pc->now_ms)) return false;
    const sl_breaker_conf_t *bc = &pc->of->uc->breaker;
    return !bc->enabled || sl_breaker_state(breaker_of(pc->of, t), bc, pc->now_ms) != SL_BREAKER_OPEN;
}

/* Target t's breaker admission into *admit; false (and *ra, ms until it half-opens) when
 * the breaker refuses. */
static bool admit_target(const sl_attempts_of_t *of, uint32_t t, uint64_t now_ms, uint8_t *admit, uint64_t *ra) {
    const sl_breaker_conf_t *bc = &of->uc->breaker;
    sl_admit_t a = bc->enabled ? sl_breaker_admit(breaker_of(of, t), bc, now_ms, ra) : SL_ADMIT_CLOSED;
    if (a == SL_ADMIT_REFUSED) return false;
    *admit = (uint8_t)a;
    return true;
}

static void clear_skip(sl_tries_t *tr) { memset(tr->skip, 0, tr->words * sizeof(uint64_t)); }

bool sl_attempt_take(const sl_attempts_of_t *of, sl_tries_t *tr, int t, uint8_t *admit, uint64_t now_ms) {
    if (t < 0 || (size_t)t >= of->uc->ntargets) return false;
    pick_ctx_t pc = {of, tr, now_ms, false};
    clear_skip(tr);
    uint64_t ra = 0;
    return eligible(&pc, (uint32_t)t) && admit_target(of, (uint32_t)t, pc.now_ms, admit, &ra);
}

int sl_attempt_pick(const sl_attempts_of_t *of, sl_tries_t *tr, const char *key, size_t key_len, uint8_t *admit,
                    uint64_t *retry_after_ms, uint64_t now_ms) {
    const sl_upstream_conf_t *uc = of->uc;
    pick_ctx_t pc = {of, tr, now_ms, false};
    *retry_after_ms = 0;
    for (int pass = 0; pass < 2; pass++, pc.ignore_health = true) {
        clear_skip(tr);
        for (size_t n = 0; n <= uc->ntargets; n++) {
            int t = sl_balancer_pick(of->rt->bal, eligible, &pc, key, key_len, sl_rand64(), now_ms * 1000000u);
            if (t < 0) break;
            uint64_t ra = 0;
            if (admit_target(of, (uint32_t)t, pc.now_ms, admit, &ra)) return t;
            set_bit(tr->skip, (uint32_t)t); /* half-open with every probe slot taken, or just opened */
            if (!*retry_after_ms || ra < *retry_after_ms) *retry_after_ms = ra;
        }
        /* open breakers are an answer (503), not a reason to ignore health */
        if (*retry_after_ms) return -1;
        /* the time until the first of them half-opens (each may be open longer than
         * open_timeout, doubled by re-trips, or be part-way through) */
        uint64_t first = 0;
        for (size_t t = 0; uc->breaker.enabled && t < uc->ntargets; t++) {
            if (sl_tries_has(tr->tried, (uint32_t)t) || !sl_slot_up(uc, t)) continue;
            uint64_t left = sl_breaker_open_left(breaker_of(of, (uint32_t)t), &uc->breaker, pc.now_ms);
            if (left && (!first || left < first)) first = left;
        }
        if (first) {
            *retry_after_ms = first;
            return -1;
        }
    }
    return -1;
}

void sl_attempt_begin(const sl_attempts_of_t *of, sl_tries_t *tr, sl_attempt_t *a, int t, uint8_t admit,
                      uint64_t now_ns) {
    a->start_ns = now_ns;
    a->target = t;
    a->admit = admit;
    a->outcome_due = 1;
    a->in_flight = 1;
    set_bit(tr->tried, (uint32_t)t);
    tr->attempts++;
    sl_balancer_begin(of->rt->bal, (uint32_t)t);
}

void sl_attempt_outcome(const sl_attempts_of_t *of, sl_attempt_t *a, int outcome, uint64_t now) {
    if (!a->outcome_due) return;
    a->outcome_due = 0;
    const sl_upstream_conf_t *uc = of->uc;
    sl_tstate_t *ts = of->rt->ts[a->target];
    if (uc->breaker.enabled) {
        if (outcome == SL_OUT_CANCEL)
            sl_breaker_cancel(&ts->breaker[of->layer], (sl_admit_t)a->admit);
        else
            sl_breaker_record(&ts->breaker[of->layer], &uc->breaker, (sl_admit_t)a->admit,
                              outcome == SL_OUT_SUCCESS, now);
    }
    if (outcome == SL_OUT_FAILURE) {
        sl_tstate_passive_failure(ts, &uc->health, now);
        uint64_t now_ns = sl_wake_ns(); /* the clock observe and start_ns read, not now's ms */
        sl_target_observe_failure(&ts->live, now_ns > a->start_ns ? now_ns - a->start_ns : 0, now_ns);
    }
}

void sl_attempt_observe(const sl_attempts_of_t *of, const sl_attempt_t *a, uint64_t now_ns) {
    sl_target_observe(&of->rt->ts[a->target]->live, now_ns - a->start_ns, now_ns);
}

void sl_attempt_release(const sl_attempts_of_t *of, sl_attempt_t *a) {
    if (!a->in_flight) return;
    a->in_flight = 0;
    sl_balancer_end(of->rt->bal, (uint32_t)a->target);
}

void sl_attempt_cancel_admission(const sl_attempts_of_t *of, int t, uint8_t admit) {
    if (of->uc->breaker.enabled) sl_breaker_cancel(breaker_of(of, (uint32_t)t), (sl_admit_t)admit);
}
