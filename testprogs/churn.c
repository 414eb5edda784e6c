/*
 * churn — threads that come and go all the time.
 *
 * argv[1] (default 4) "spawner" threads each create short-lived threads in
 * a loop: one joined, one detached, each of which does a little work and
 * exits.  At any instant some threads are being created and some are
 * exiting, so an attach meets threads that vanish between being listed
 * and being seized, or that are already on their way out.  The main
 * thread prints "ready" once every spawner runs, then blocks in pause().
 */
#include "tp.h"

#include <unistd.h>

static void *short_life(void *unused)
{
    (void)unused;
    for (int i = 0; i < 1000; i++)
        tp_sink++;
    return NULL;
}

static void *spawner(void *unused)
{
    (void)unused;
    pthread_attr_t detached;
    pthread_attr_init(&detached);
    pthread_attr_setdetachstate(&detached, PTHREAD_CREATE_DETACHED);
    tp_arrive();
    for (;;) {
        pthread_t joined, other;
        if (pthread_create(&joined, NULL, short_life, NULL) == 0)
            pthread_join(joined, NULL);
        pthread_create(&other, &detached, short_life, NULL);
    }
    return NULL;
}

int main(int argc, char **argv)
{
    int spawners = argc > 1 ? atoi(argv[1]) : 4;
    tp_allow_tracing();
    for (int i = 0; i < spawners; i++)
        tp_spawn("spawner", spawner, NULL);
    tp_announce(spawners);
    for (;;)
        pause();
}
