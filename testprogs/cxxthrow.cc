/*
 * cxxthrow — stacks in the middle of C++ exception handling.
 *
 * Main thread: main calls throw_with_local inside a try block;
 * throw_with_local has a local Blocker and throws. Unwinding runs Blocker's
 * destructor from a landing pad in throw_with_local (code reachable only from
 * the unwinder: no normal control flow leads there), and the destructor
 * blocks. Stack: nanosleep <- block_forever <- Blocker::~Blocker <-
 * throw_with_local <- main. Note that libgcc's unwinder is NOT on this stack:
 * phase 2 of _Unwind_RaiseException transfers control to the landing pad by
 * restoring the registers of throw_with_local's frame, discarding its own
 * frames. main's catch handler (in main.cold at -O2) is never reached.
 *
 * Thread "terminate": to get libgcc's unwinder itself onto a stack, an
 * exception is thrown through a noexcept function. Its LSDA has no entry for
 * the call, so the personality routine calls std::terminate from inside
 * _Unwind_RaiseException, and our terminate handler blocks. Stack:
 * nanosleep <- block_forever <- on_terminate <- two libstdc++ frames without
 * exported symbols (terminate internals, __cxa_call_terminate) <-
 * __gxx_personality_v0 <- a libgcc_s frame without a symbol (phase 2 of the
 * unwinder) <- _Unwind_RaiseException <- __cxa_throw (libstdc++) <-
 * throw_plain <- no_throw_allowed <- terminate_thread. libgcc_s is built with its own unusual CFI (it saves every
 * register so it can install a context), a good test of a CFI interpreter.
 *
 * Thread "catcher": blocked inside a catch block, after unwinding finished:
 * nanosleep <- block_forever <- catch_and_block <- catcher_thread.
 */
#include <pthread.h>
#include <stdio.h>
#include <sys/prctl.h>
#include <time.h>

#include <atomic>
#include <exception>
#include <stdexcept>

#define NOINLINE __attribute__((noinline, noclone))

static volatile int sink;
static volatile bool never; /* never set: keeps gcc from treating loops as noreturn */
static std::atomic<int> arrived;

NOINLINE static void block_forever()
{
    const timespec hour = {3600, 0};
    while (!never)
        nanosleep(&hour, nullptr);
}

NOINLINE static void throw_plain(const char *what)
{
    sink++;
    throw std::runtime_error(what);
}

static void on_terminate()
{
    arrived++;
    block_forever();
    sink++; /* not a tail call: on_terminate stays on the stack */
}

NOINLINE static void no_throw_allowed() noexcept
{
    throw_plain("through noexcept");
    sink++;
}

static void *terminate_thread(void *)
{
    no_throw_allowed();
    return nullptr;
}

NOINLINE static void catch_and_block()
{
    try {
        throw_plain("caught");
    } catch (const std::exception &) {
        arrived++;
        block_forever();
    }
}

static void *catcher_thread(void *)
{
    catch_and_block();
    return nullptr;
}

struct Blocker {
    NOINLINE ~Blocker()
    {
        const timespec ms = {0, 1000000};
        while (arrived < 2)
            nanosleep(&ms, nullptr);
        puts("ready");
        fflush(stdout);
        block_forever();
    }
};

NOINLINE static void throw_with_local()
{
    Blocker blocker;
    throw_plain("unwinding");
}

int main()
{
    pthread_t t;
    prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0); /* see tp.h */
    std::set_terminate(on_terminate);
    pthread_create(&t, nullptr, terminate_thread, nullptr);
    pthread_setname_np(t, "terminate");
    pthread_create(&t, nullptr, catcher_thread, nullptr);
    pthread_setname_np(t, "catcher");
    try {
        throw_with_local();
    } catch (...) {
        sink++;
    }
    return 0;
}
