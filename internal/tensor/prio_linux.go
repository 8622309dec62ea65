package tensor

import (
	"fmt"
	"syscall"
	"unsafe"
)

// schedIdle is Linux's SCHED_IDLE scheduling policy.
const schedIdle = 5

// lowerThreadPriority lowers the calling OS thread's priority: nice 1..19
// adds that much to its nice value (capped at 19); 20 or more moves it to
// the SCHED_IDLE policy, under which any normal thread that wakes preempts
// it at once (with a nice value alone, Linux's EEVDF scheduler may let it
// finish its slice, milliseconds, first). On Linux these calls with a
// thread id change only that thread. The caller must have locked its
// goroutine to the thread.
func lowerThreadPriority(nice int) error {
	tid := syscall.Gettid()
	if nice >= 20 {
		var param struct{ priority int32 }
		if _, _, errno := syscall.RawSyscall(syscall.SYS_SCHED_SETSCHEDULER, uintptr(tid), schedIdle, uintptr(unsafe.Pointer(&param))); errno != 0 {
			return fmt.Errorf("tensor: set thread policy SCHED_IDLE: %w", errno)
		}
		return nil
	}
	cur, err := syscall.Getpriority(syscall.PRIO_PROCESS, tid)
	if err != nil {
		return fmt.Errorf("tensor: thread priority: %w", err)
	}
	// The raw syscall returns 20 - nice.
	n := min(20-cur+nice, 19)
	if err := syscall.Setpriority(syscall.PRIO_PROCESS, tid, n); err != nil {
		return fmt.Errorf("tensor: lower thread priority to nice %d: %w", n, err)
	}
	return nil
}
