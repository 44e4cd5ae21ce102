/*
 * cpuload.h - whether this machine has a CPU to spare, or is crowded, for the threads that
 * would busy-wait.
 *
 * A spin for a reply or a request pays only while another CPU runs the party it waits for and
 * this CPU would otherwise idle. Where every CPU has a thread to run (more runnable threads than
 * CPUs: several clients busy at once, three daemons on two cores, other programs' load), a
 * spinner takes the CPU from the very thread whose answer it waits for, and sleeping costs only
 * the sleep. The count is the kernel's: the runnable threads of the whole machine, the caller
 * among them (the 4th field of /proc/loadavg, "running/total"). It counts threads that spin
 * too (a client waiting for its reply, a load generator pacing an open loop): a wait whose
 * party is such a client (a worker's for its clients' next request) must not ask it.
 */
#ifndef NESSIE_BASE_CPULOAD_H
#define NESSIE_BASE_CPULOAD_H

#include <stdbool.h>

/*
 * True if the machine's runnable threads (the caller among them), on a short moving average,
 * are no more than its online CPUs (and half a thread), as read at most CPULOAD_FRESH_NS ago by
 * any thread of the process (a read costs ~0.4 us: /proc/loadavg is formatted by the kernel).
 * False if the file cannot be read, or the process may run on one CPU only (no one it waits for
 * runs beside it). Thread-safe; never blocks but on that read.
 */
bool nessie_cpu_spare(void);

/*
 * True if the same count, on the same average, is more than two and a half threads over the
 * online CPUs (CPULOAD_CROWDED_16): not just no CPU to spare, but several threads queued for
 * one. Threads that spin for each other count as much as threads that work, so a spinner asking
 * it must not be one of a pair that alone fills the CPUs (a worker and its spinning client on
 * two CPUs, even beside two CPU burners, stay below the mark); three such pairs on two CPUs, or
 * more, are past it. False where nessie_cpu_spare cannot read the count. Thread-safe.
 */
bool nessie_cpu_crowded(void);

#endif
