// goswitch — Go threads that sit on their scheduler stack (g0) for good,
// for walking from g0 into the goroutine that switched to it.
//
//   - main.locked locks its thread (runtime.LockOSThread) and parks in a
//     channel receive: the thread sleeps in runtime.futex under
//     runtime.stoplockedm, runtime.schedule, runtime.park_m and
//     runtime.mcall, its M's lockedg the parked goroutine.
//   - main.spin runs forever in assembly, which cannot be preempted, so a
//     stop of the world never completes.
//   - main.collect calls runtime.GC once the program is ready: the stop of
//     the world waits for main.spin's P for good, in runtime.notetsleep
//     under runtime.stopTheWorldWithSema on g0, entered through
//     runtime.systemstack from runtime.gcStart; the M's curg is main.collect's
//     goroutine.
//   - the other threads are idle Ms (runtime.stopm, m.curg nil) and sysmon.
//
// The program prints "locked TID" and "ready"; once ready, nothing it does
// can print again (the world is stopping), so a test tells it is there by
// its threads.  SIGQUIT under GOTRACEBACK=crash prints every goroutine,
// each M's own included, and dumps core.
package main

import (
	"fmt"
	"runtime"
	"sync/atomic"
	"syscall"
)

var (
	arrived   int32
	lockedTid int32
)

// forever never returns (forever_*.s).
func forever()

//go:noinline
func spin() {
	atomic.AddInt32(&arrived, 1)
	forever()
}

//go:noinline
func locked(never chan int) {
	runtime.LockOSThread()
	atomic.StoreInt32(&lockedTid, int32(syscall.Gettid()))
	atomic.AddInt32(&arrived, 1)
	<-never
}

//go:noinline
func collect() {
	runtime.GC()
}

func main() {
	runtime.GOMAXPROCS(4)
	never := make(chan int)
	go locked(never)
	go spin()
	for atomic.LoadInt32(&arrived) < 2 {
		runtime.Gosched()
	}
	fmt.Println("locked", atomic.LoadInt32(&lockedTid))
	fmt.Println("ready")
	go collect()
	<-never
}
