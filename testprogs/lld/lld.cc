/*
 * lld-cxx — C++ threads linked with lld (-fuse-ld=lld).
 *
 * lld lays the read-only, code and data segments out back to back in the
 * file, without page alignment; gcore leaves the code mappings out of the
 * core, so an unwinder reading such a core must take their permissions from
 * the program header whose *address* range holds them.
 *
 * Threads: "waiter" blocks in std::condition_variable::wait under three
 * frames of templates and a lambda; "sleeper" in std::this_thread::sleep_for
 * at the bottom of a 200-deep recursion; "reader" in read(2) on a pipe,
 * called through a virtual function.  The main thread joins.
 */
#include "../tp.h"

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <unistd.h>

static std::mutex mutex;
static std::condition_variable never;
static int pipe_fds[2];

template <int N> struct Layer {
    TP_NOINLINE static void down()
    {
        Layer<N - 1>::down();
        tp_sink = N;
    }
};

template <> struct Layer<0> {
    TP_NOINLINE static void down()
    {
        std::unique_lock<std::mutex> lock(mutex);
        tp_arrive();
        never.wait(lock, [] { return false; });
    }
};

TP_NOINLINE static void recurse(int depth)
{
    if (depth == 0) {
        tp_arrive();
        while (tp_sink != -1) /* always: a loop the compiler cannot prove endless */
            std::this_thread::sleep_for(std::chrono::hours(1));
        return;
    }
    recurse(depth - 1);
    tp_sink = depth;
}

struct Source {
    virtual ~Source() = default;
    virtual void drain() = 0;
};

struct PipeSource : Source {
    TP_NOINLINE void drain() override
    {
        char c;
        tp_arrive();
        for (;;)
            if (read(pipe_fds[0], &c, 1) < 0)
                tp_die("read");
    }
};

int main()
{
    tp_allow_tracing();
    if (pipe(pipe_fds) != 0)
        tp_die("pipe");
    std::thread waiter([] { Layer<3>::down(); });
    std::thread sleeper([] { recurse(200); });
    std::thread reader([] {
        PipeSource source;
        Source &any = source;
        any.drain();
    });
    pthread_setname_np(waiter.native_handle(), "waiter");
    pthread_setname_np(sleeper.native_handle(), "sleeper");
    pthread_setname_np(reader.native_handle(), "reader");
    tp_announce(3);
    waiter.join();
    return 0;
}
