// goclock — a goroutine that reads the clock without end: time.Now calls
// time.now (amd64) or runtime.walltime and runtime.nanotime1, which call the
// vDSO's clock_gettime on the M's g0 stack, their caller kept in m.vdsoPC
// and m.vdsoSP meanwhile.  For walking out of the vDSO through that record.
package main

import (
	"fmt"
	"time"
)

var sink int64

//go:noinline
func clockloop() {
	for {
		sink += time.Now().UnixNano()
	}
}

func main() {
	fmt.Println("ready")
	clockloop()
}
