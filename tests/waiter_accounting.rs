//! Cancel-safe waits keep their books: seeded random programs of sends,
//! receives, acquires, drops (parked, woken or never polled), spurious
//! polls, `try_*` calls and closes, polled by hand. After every step, once
//! each woken future has run: nothing is lost or made up (items, permits),
//! and no future sleeps while what it waits for is there (no lost wake-up,
//! whichever waiters went away before).

use super::common;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};

struct Count(AtomicUsize);
impl Wake for Count {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

enum Fut<'a> {
    Send(Pin<Box<gdex::SendFuture<'a, u64>>>),
    Recv(Pin<Box<gdex::RecvFuture<'a, u64>>>),
    All(Pin<Box<gdex::RecvAllFuture<'a, u64>>>),
}

struct Slot<'a> {
    fut: Fut<'a>,
    count: Arc<Count>,
    seen: usize,
}

#[test]
fn a_channel_s_waiters_lose_no_item_and_no_wake_up() {
    for seed in 1..common::stress(3000) as u64 {
        let mut rng = Rng(seed.wrapping_mul(0x9E3779B97F4A7C15) | 1);
        let cap = 1 + rng.below(3) as usize;
        let (tx, rx) = gdex::channel::<u64>(cap);
        let mut sent = 0u64;
        let mut received = 0u64;
        let mut next = 1u64;
        let mut slots: Vec<Slot> = Vec::new();
        let mut log = Vec::new();
        let poll =
            |s: &mut Slot, sent: &mut u64, received: &mut u64, log: &mut Vec<String>| -> bool {
                let waker = Waker::from(s.count.clone());
                let mut cx = Context::from_waker(&waker);
                s.seen = s.count.0.load(Ordering::SeqCst);
                match &mut s.fut {
                    Fut::Send(f) => match f.as_mut().poll(&mut cx) {
                        Poll::Ready(Ok(())) => {
                            *sent += 1;
                            true
                        }
                        Poll::Ready(Err(_)) => true,
                        Poll::Pending => false,
                    },
                    Fut::Recv(f) => match f.as_mut().poll(&mut cx) {
                        Poll::Ready(Ok(_)) => {
                            *received += 1;
                            true
                        }
                        Poll::Ready(Err(_)) => true,
                        Poll::Pending => false,
                    },
                    Fut::All(f) => match f.as_mut().poll(&mut cx) {
                        Poll::Ready(Ok(v)) => {
                            log.push(format!("all {}", v.len()));
                            *received += v.len() as u64;
                            true
                        }
                        Poll::Ready(Err(_)) => true,
                        Poll::Pending => false,
                    },
                }
            };
        let mut closed = false;
        for _step in 0..120 {
            match rng.below(10) {
                step @ 0..=3 => {
                    let (fut, what) = if step < 2 {
                        next += 1;
                        (Fut::Send(Box::pin(tx.send(next - 1))), "send")
                    } else if rng.below(3) == 0 {
                        (Fut::All(Box::pin(rx.recv_all())), "recv")
                    } else {
                        (Fut::Recv(Box::pin(rx.recv())), "recv")
                    };
                    slots.push(Slot {
                        fut,
                        count: Arc::new(Count(AtomicUsize::new(0))),
                        seen: 0,
                    });
                    let i = slots.len() - 1;
                    log.push(format!("new {what} {i}"));
                    if poll(&mut slots[i], &mut sent, &mut received, &mut log) {
                        slots.remove(i);
                    }
                }
                4 => {
                    if !slots.is_empty() {
                        let i = rng.below(slots.len() as u64) as usize;
                        log.push(format!("drop {i}"));
                        drop(slots.remove(i));
                    }
                }
                5 => {
                    if tx.try_send(next).is_ok() {
                        sent += 1;
                    }
                    next += 1;
                    log.push("try_send".into());
                }
                6 => {
                    if rx.try_recv().is_some() {
                        received += 1;
                    }
                    log.push("try_recv".into());
                }
                7 => {
                    // poll a woken one
                    if let Some(i) = slots
                        .iter()
                        .position(|s| s.count.0.load(Ordering::SeqCst) != s.seen)
                    {
                        log.push(format!("poll woken {i}"));
                        if poll(&mut slots[i], &mut sent, &mut received, &mut log) {
                            slots.remove(i);
                        }
                    }
                }
                8 => {
                    if rng.below(8) == 0 && !closed {
                        closed = true;
                        if rng.below(2) == 0 {
                            tx.close();
                            log.push("close tx".into());
                        } else {
                            let left = rx.close();
                            received += left.len() as u64;
                            log.push("close rx".into());
                        }
                    }
                }
                _ => {
                    // poll a random one spuriously
                    if !slots.is_empty() {
                        let i = rng.below(slots.len() as u64) as usize;
                        log.push(format!("spurious {i}"));
                        if poll(&mut slots[i], &mut sent, &mut received, &mut log) {
                            slots.remove(i);
                        }
                    }
                }
            }
            // Every woken future runs before the books are read.
            while let Some(i) = slots
                .iter()
                .position(|s| s.count.0.load(Ordering::SeqCst) != s.seen)
            {
                if poll(&mut slots[i], &mut sent, &mut received, &mut log) {
                    slots.remove(i);
                }
            }
            let len = tx.len();
            assert_eq!(
                sent,
                received + len as u64,
                "seed {seed} conservation {log:?}"
            );
            let recv_pending = slots
                .iter()
                .any(|s| matches!(s.fut, Fut::Recv(_) | Fut::All(_)));
            let send_pending = slots.iter().any(|s| matches!(s.fut, Fut::Send(_)));
            if len > 0 {
                assert!(
                    !recv_pending,
                    "seed {seed}: items queued and a receive sleeps {log:?}"
                );
            }
            if len < cap {
                assert!(!send_pending, "seed {seed}: room and a send sleeps {log:?}");
            }
            if closed {
                assert!(
                    slots.is_empty(),
                    "seed {seed}: closed and a future sleeps {log:?}"
                );
            }
        }
    }
}

#[test]
fn a_semaphore_s_waiters_lose_no_permit_and_no_wake_up() {
    for seed in 1..common::stress(3000) as u64 {
        let mut rng = Rng(seed.wrapping_mul(0x9E3779B97F4A7C15) | 1);
        let total = rng.below(3) as usize;
        let sem = gdex::Semaphore::new(total);
        let mut total = total;
        let mut held = Vec::new();
        let mut waits: Vec<(Pin<Box<gdex::Acquire>>, Arc<Count>, usize)> = Vec::new();
        let mut closed = false;
        for _ in 0..60 {
            match rng.below(7) {
                0 | 1 => {
                    let c = Arc::new(Count(AtomicUsize::new(0)));
                    waits.push((Box::pin(sem.acquire()), c, usize::MAX));
                }
                2 => {
                    if !waits.is_empty() {
                        let i = rng.below(waits.len() as u64) as usize;
                        drop(waits.remove(i));
                    }
                }
                3 => {
                    if !held.is_empty() {
                        let i = rng.below(held.len() as u64) as usize;
                        drop(held.remove(i));
                    }
                }
                4 => {
                    if let Some(p) = sem.try_acquire() {
                        held.push(p);
                    }
                }
                5 => {
                    sem.add_permits(1);
                    total += 1;
                }
                _ => {
                    if rng.below(10) == 0 {
                        sem.close();
                        closed = true;
                    }
                }
            }
            while let Some(i) = waits
                .iter()
                .position(|w| w.1 .0.load(Ordering::SeqCst) != w.2)
            {
                let w = &mut waits[i];
                w.2 = w.1 .0.load(Ordering::SeqCst);
                let waker = Waker::from(w.1.clone());
                match w.0.as_mut().poll(&mut Context::from_waker(&waker)) {
                    Poll::Ready(Ok(p)) => {
                        held.push(p);
                        drop(waits.remove(i));
                    }
                    Poll::Ready(Err(_)) => drop(waits.remove(i)),
                    Poll::Pending => {}
                }
            }
            let free = sem.available_permits();
            assert_eq!(free + held.len(), total, "seed {seed}: conservation");
            if free > 0 && !closed {
                assert!(
                    waits.is_empty(),
                    "seed {seed}: a permit free and a waiter sleeps"
                );
            }
            if closed {
                assert!(waits.is_empty(), "seed {seed}: closed and a waiter sleeps");
            }
        }
    }
}
