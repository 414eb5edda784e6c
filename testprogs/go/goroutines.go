// goroutines — a Go program with busy and parked goroutines, for unwinding
// Go's own stacks: its signal frames, its scheduler stack (g0) and the ends
// of its stacks (runtime.goexit, runtime.mstart, runtime.rt0_go).
//
// Four goroutines spin in main.spin (through main.busy), so threads are
// stopped in Go code at any instant; others park: in a channel receive
// (main.receive), in time.Sleep (main.nap), on a sync.Mutex (main.lock) and
// in a select (main.wait).  With "crash" as the argument a spinning
// goroutine writes through a nil pointer in main.crashHere 100 ms after
// "ready": run with GOTRACEBACK=crash the runtime then stops every thread
// with a signal, prints every goroutine and dies of SIGABRT with a core.
package main

import (
	"fmt"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

const spinners = 4

var (
	arrived int32
	sink    uint64
	crash   int32
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
func crashHere(p *uint64) {
	*p = sink
}

//go:noinline
func busy(id int) {
	atomic.AddInt32(&arrived, 1)
	seed := uint64(id)
	for {
		seed = spin(seed)
		atomic.StoreUint64(&sink, seed)
		if id == 0 && atomic.LoadInt32(&crash) != 0 {
			crashHere(nil)
		}
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
	fmt.Println("ready")
	if len(os.Args) > 1 && os.Args[1] == "crash" {
		time.Sleep(100 * time.Millisecond)
		atomic.StoreInt32(&crash, 1)
	}
	<-never
}
