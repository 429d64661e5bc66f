/* cpu.c — the process's CPU set and thread placement (cpu.h). */
#include "base/cpu.h"

#include <pthread.h>
#include <stdio.h>

static cpu_set_t process_set;
static bool recorded;

void sl_cpus_init(void) {
    if (sched_getaffinity(0, sizeof process_set, &process_set) == 0) recorded = true;
}

void sl_cpus_allowed(cpu_set_t *out) {
    if (recorded) {
        *out = process_set;
        return;
    }
    CPU_ZERO(out);
    if (sched_getaffinity(0, sizeof *out, out) != 0) CPU_SET(0, out);
}

bool sl_cpus_has(int cpu) {
    cpu_set_t s;
    sl_cpus_allowed(&s);
    return cpu >= 0 && cpu < CPU_SETSIZE && CPU_ISSET(cpu, &s);
}

int sl_cpus_nth(int n) {
    cpu_set_t s;
    sl_cpus_allowed(&s);
    int count = CPU_COUNT(&s);
    if (count <= 0) return 0;
    n %= count;
    for (int c = 0; c < CPU_SETSIZE; c++)
        if (CPU_ISSET(c, &s) && n-- == 0) return c;
    return 0;
}

int sl_cpus_place_self(const cpu_set_t *set) {
    return pthread_setaffinity_np(pthread_self(), sizeof *set, set) == 0 ? 0 : -1;
}

void sl_cpus_text(const cpu_set_t *set, char *buf, size_t len) {
    size_t off = 0;
    if (len) buf[0] = 0;
    for (int c = 0; c < CPU_SETSIZE && off < len; c++) {
        if (!CPU_ISSET(c, set)) continue;
        int e = c;
        while (e + 1 < CPU_SETSIZE && CPU_ISSET(e + 1, set)) e++;
        int n = e > c ? snprintf(buf + off, len - off, "%s%d-%d", off ? "," : "", c, e)
                      : snprintf(buf + off, len - off, "%s%d", off ? "," : "", c);
        if (n < 0) break;
        off += (size_t)n;
        c = e;
    }
}
