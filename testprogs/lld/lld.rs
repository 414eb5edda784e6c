//! lld-rust — Rust threads linked with lld, as Rust >= 1.90 links by default.
//!
//! lld packs segments without page alignment in the file; gcore leaves the
//! code mappings out of the core, so their permissions must come from the
//! program header whose address range holds them.
//!
//! Threads: "receiver" blocks in a channel's recv; "deep" sleeps at the
//! bottom of a 300-deep recursion; "parked" in std::thread::park.  The main
//! thread prints "ready" once every thread is about to block, then joins.

use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::thread;
use std::time::Duration;

static ARRIVED: AtomicUsize = AtomicUsize::new(0);
/// Written after each recursive call, so that no call becomes a jump or a loop.
static SINK: AtomicU32 = AtomicU32::new(0);

fn arrive() {
    ARRIVED.fetch_add(1, Ordering::SeqCst);
}

#[inline(never)]
fn recurse(depth: u32) -> u32 {
    if depth == 0 {
        arrive();
        loop {
            thread::sleep(Duration::from_secs(3600));
        }
    }
    let below = recurse(depth - 1);
    SINK.fetch_add(below, Ordering::Relaxed);
    below + 1
}

#[inline(never)]
fn receive(receiver: mpsc::Receiver<u32>) {
    arrive();
    while receiver.recv().is_ok() {}
}

fn main() {
    let (sender, receiver) = mpsc::channel::<u32>();
    let spawn = |name: &str| thread::Builder::new().name(name.to_string());
    let handle = spawn("receiver").spawn(move || receive(receiver)).unwrap();
    spawn("deep")
        .spawn(|| recurse(300 + SINK.load(Ordering::Relaxed)))
        .unwrap();
    spawn("parked")
        .spawn(|| {
            arrive();
            loop {
                thread::park();
            }
        })
        .unwrap();
    while ARRIVED.load(Ordering::SeqCst) < 3 {
        thread::sleep(Duration::from_millis(1));
    }
    println!("ready");
    handle.join().unwrap();
    drop(sender);
}
