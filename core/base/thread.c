/* thread.c — threads on stacks of their own mapping (thread.h). */
#include "base/thread.h"

#include <sys/mman.h>

#include "base/common.h"

int sl_thread_start(sl_thread_t *t, size_t size, void *(*fn)(void *), void *arg) {
    t->stack = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
    if (t->stack == MAP_FAILED) {
        t->stack = NULL;
        return SL_ERROR;
    }
    t->size = size;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstack(&attr, t->stack, size);
    int rc = pthread_create(&t->id, &attr, fn, arg);
    pthread_attr_destroy(&attr);
    if (rc != 0) {
        munmap(t->stack, size);
        t->stack = NULL;
        return SL_ERROR;
    }
    return SL_OK;
}

static void unmap(sl_thread_t *t) {
    munmap(t->stack, t->size);
    t->stack = NULL;
}

void sl_thread_join(sl_thread_t *t) {
    if (!t->stack) return;
    pthread_join(t->id, NULL);
    unmap(t);
}

bool sl_thread_tryjoin(sl_thread_t *t) {
    if (!t->stack) return true;
    if (pthread_tryjoin_np(t->id, NULL) != 0) return false;
    unmap(t);
    return true;
}
