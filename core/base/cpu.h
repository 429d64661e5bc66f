/* cpu.h — which CPUs threads run on: the process's own set, a worker pinned to one CPU, the
 * other threads kept off the workers' CPUs (`worker_cpus`, docs/config.md).
 *
 * The process's set is the affinity it started with (taskset, a container's cpuset),
 * recorded once by sl_cpus_init before any thread is placed; a placed thread's own
 * affinity no longer says it.
 */
#ifndef SL_CPU_H
#define SL_CPU_H

#include <sched.h>
#include <stdbool.h>

/** Records the calling thread's affinity as the process's set (main, first thing). */
void sl_cpus_init(void);
/** The process's set: as recorded, or (never recorded: tests, tools) the caller's. */
void sl_cpus_allowed(cpu_set_t *out);
/** Whether CPU `cpu` is in the process's set. */
bool sl_cpus_has(int cpu);
/** The n-th CPU of the process's set, counting round (n ≥ 0). */
int sl_cpus_nth(int n);
/** Places the calling thread on `set` (0), or leaves it as it was (-1: errno). */
int sl_cpus_place_self(const cpu_set_t *set);
/** "0-3,6" of a set (into buf of len bytes). */
void sl_cpus_text(const cpu_set_t *set, char *buf, size_t len);

#endif
