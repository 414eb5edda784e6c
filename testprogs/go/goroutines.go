// goroutines — a Go program with busy and parked goroutines, for unwinding
// Go's own stacks: its signal frames, its scheduler stack (g0) and the ends
// of its stacks (runtime.goexit, runtime.mstart, runtime.rt0_go).
//
// Four goroutines spin in main.spin (through main.busy), so threads are
// stopped in Go code at any instant; others park: in a channel receive
// (main.receive), in time.Sleep (main.nap), on a sync.Mutex (main.lock) and
// in a select (main.wait).  Spinner 0 keeps its thread, whose id the
// program prints ("spinner TID") before "ready".  With "crash" as the
// argument, 100 ms after "ready" the program sends SIGQUIT to that thread:
// run with GOTRACEBACK=crash the runtime then stops every thread with a
// signal, prints every goroutine and dies of SIGABRT with a core, every
// thread inside a signal handler on its signal stack.
package main

import (
	"fmt"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

const spinners = 4

var (
	arrived int32
	sink    uint64
	spinner int32
	mutex   sync.Mutex
)

//go:noinline
func spin(seed uint64) uint64 {
	for i := 0; i < 1000; i++ {
		seed = seed*6364136223846793005 + 1442695040888963407
	}
	return seed
}

//go:noinline
func busy(id int) {
	if id == 0 {
		runtime.LockOSThread()
		atomic.StoreInt32(&spinner, int32(syscall.Gettid()))
	}
	atomic.AddInt32(&arrived, 1)
	seed := uint64(id)
	for {
		seed = spin(seed)
		atomic.StoreUint64(&sink, seed)
	}
}

//go:noinline
func receive(never chan int) {
	atomic.AddInt32(&arrived, 1)
	<-never
}

//go:noinline
func nap() {
	atomic.AddInt32(&arrived, 1)
	for {
		time.Sleep(time.Hour)
	}
}

//go:noinline
func lock() {
	atomic.AddInt32(&arrived, 1)
	mutex.Lock()
}

//go:noinline
func wait(a, b chan int) {
	atomic.AddInt32(&arrived, 1)
	select {
	case <-a:
	case <-b:
	}
}

func main() {
	runtime.GOMAXPROCS(spinners + 2)
	never := make(chan int)
	mutex.Lock()
	for id := 0; id < spinners; id++ {
		go busy(id)
	}
	go receive(never)
	go nap()
	go lock()
	go wait(never, make(chan int))
	for atomic.LoadInt32(&arrived) < spinners+4 {
		time.Sleep(time.Millisecond)
	}
	fmt.Println("spinner", atomic.LoadInt32(&spinner))
	fmt.Println("ready")
	if len(os.Args) > 1 && os.Args[1] == "crash" {
		time.Sleep(100 * time.Millisecond)
		tid := int(atomic.LoadInt32(&spinner))
		if err := syscall.Tgkill(os.Getpid(), tid, syscall.SIGQUIT); err != nil {
			panic(err)
		}
	}
	<-never
}
