/* thread.h — a thread on a stack of its own mapping, unmapped once the thread is joined.
 *
 * glibc caches the stacks of joined threads (up to 40 MiB) and their touched pages stay in
 * RSS; a gateway that starts and ends threads on every reload (workers, the build, the
 * freeing of a retired generation) grew by those pages. A stack mapped here goes back to
 * the kernel at the join. Owner: whoever started the thread joins it, once.
 */
#ifndef SL_THREAD_H
#define SL_THREAD_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>

typedef struct {
    pthread_t id;
    void *stack; /* NULL: not running (never started, or joined) */
    size_t size;
} sl_thread_t;

/** Starts fn(arg) on a stack of `size` bytes: SL_OK, or SL_ERROR (nothing started). */
int sl_thread_start(sl_thread_t *t, size_t size, void *(*fn)(void *), void *arg);
/** Waits for the thread and unmaps its stack; a thread not running is left alone. */
void sl_thread_join(sl_thread_t *t);
/** Joins the thread when it has ended already: true (then as sl_thread_join), else false. */
bool sl_thread_tryjoin(sl_thread_t *t);

#endif
