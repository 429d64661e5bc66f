/* alloc_shim.c — an LD_PRELOAD library that counts heap allocations, for the test that
 * proves the proxy path allocates nothing per request in steady state.
 *
 * Every malloc/calloc/realloc/aligned allocation in the process increments one
 * counter. On SIGUSR2 the count is written (async-signal-safely) to the file
 * named by $SL_ALLOC_COUNT_FILE. glibc's __libc_* entry points are used, so no
 * dlsym bootstrap is needed.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void *__libc_memalign(size_t, size_t);

static uint64_t count;
static const char *out_path;

#define BUMP() __atomic_fetch_add(&count, 1, __ATOMIC_RELAXED)

void *malloc(size_t n) { BUMP(); return __libc_malloc(n); }
void *calloc(size_t a, size_t b) { BUMP(); return __libc_calloc(a, b); }
void *realloc(void *p, size_t n) { BUMP(); return __libc_realloc(p, n); }
void *memalign(size_t al, size_t n) { BUMP(); return __libc_memalign(al, n); }
void *aligned_alloc(size_t al, size_t n) { BUMP(); return __libc_memalign(al, n); }
int posix_memalign(void **p, size_t al, size_t n) {
    BUMP();
    *p = __libc_memalign(al, n);
    return *p ? 0 : 12;
}

static void on_usr2(int sig) {
    (void)sig;
    char buf[32];
    uint64_t v = __atomic_load_n(&count, __ATOMIC_RELAXED);
    int i = (int)sizeof(buf);
    buf[--i] = '\n';
    do {
        buf[--i] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    int fd = open(out_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
        ssize_t w = write(fd, buf + i, sizeof(buf) - (size_t)i);
        (void)w;
        close(fd);
    }
}

__attribute__((constructor)) static void shim_init(void) {
    out_path = getenv("SL_ALLOC_COUNT_FILE");
    if (!out_path) return;
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_usr2;
    sa.sa_flags = SA_RESTART;
    sigaction(SIGUSR2, &sa, NULL);
}
