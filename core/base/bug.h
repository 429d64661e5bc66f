/* bug.h — SL_BUG_ON: a state that must never happen, checked next to the state (HAProxy's
 * BUG_ON). Kept in release builds: a wrong state in the upstream machinery corrupts a
 * response or a pool, and failing loudly at the transition beats serving the wrong bytes.
 */
#ifndef SL_BUG_H
#define SL_BUG_H

/** Logs "BUG at file:line: cond" to stderr and aborts. Any thread. */
__attribute__((noreturn, cold)) void sl_bug(const char *file, int line, const char *cond);

/** Aborts (with file:line and the condition) when cond holds; on in every build. */
#define SL_BUG_ON(cond)                                                     \
    do {                                                                    \
        if (__builtin_expect(!!(cond), 0)) sl_bug(__FILE__, __LINE__, #cond); \
    } while (0)

#endif
