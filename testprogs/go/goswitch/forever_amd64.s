// forever: a loop in assembly, which Go's asynchronous preemption cannot
// interrupt (assembly has no safe points), so the goroutine running it
// keeps its P until the process dies.

#include "textflag.h"

TEXT ·forever(SB), NOSPLIT, $0-0
loop:
	PAUSE
	JMP	loop
