// gocgo — a goroutine blocked in C code called through cgo: its thread runs
// the C function on the M's g0 stack, entered through runtime.asmcgocall
// from runtime.cgocall, while the goroutine waits in its system call state.
// For walking from the C frames into the goroutine that called them.
//
// The C function prints "ready" once it runs, then sleeps in pause() for
// good; main sleeps in a channel receive.
package main

/*
#include <stdio.h>
#include <unistd.h>

static __attribute__((noinline)) void block_in_c(void) {
	printf("ready\n");
	fflush(stdout);
	for (;;)
		pause();
}
*/
import "C"

//go:noinline
func callC() {
	C.block_in_c()
}

func main() {
	go callC()
	<-make(chan int)
}
