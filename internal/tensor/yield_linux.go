package tensor

import "syscall"

// osYield gives the CPU to another runnable thread, if any (sched_yield).
// A spinning worker uses it so that, on a machine with more runnable
// threads than cores, it does not take time from the thread it waits for.
func osYield() { syscall.RawSyscall(syscall.SYS_SCHED_YIELD, 0, 0, 0) }
