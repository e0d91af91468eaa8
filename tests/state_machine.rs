//! State machines (M1): declared edges, serialized requests, the requested
//! state, waits for a state, interruption, continuation, and what dropping
//! a request or the machine does. The first tests port libdex 1.2's
//! `testsuite/test-state-machine.c`, one test per case (the libdex name in
//! each doc comment); the rest check what gdex adds or decides.

use crate::common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::watchdog;
use gdex::{Error, StateMachine, TransitionContext};

#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
enum St {
    Initial,
    Prepare,
    Ready,
    Failed,
}
use St::*;

type Visited = Arc<Mutex<Vec<St>>>;

/// A transition function's boxed future.
type Step = std::pin::Pin<Box<dyn std::future::Future<Output = Result<(), Error>> + Send>>;

fn pool() -> gdex::ThreadPool {
    gdex::ThreadPool::builder().workers(2).build().unwrap()
}

fn builder(pool: &gdex::ThreadPool) -> gdex::StateMachineBuilder<St> {
    StateMachine::builder(Initial).scheduler(&pool.scheduler())
}

fn visited() -> Visited {
    Arc::new(Mutex::new(Vec::new()))
}

fn seen(v: &Visited) -> Vec<St> {
    v.lock().unwrap().clone()
}

/// libdex's `transition_basic`: records its edge; the real state is the
/// edge's `from` while it runs.
fn basic(
    v: &Visited,
) -> impl Fn(TransitionContext<St>) -> std::future::Ready<Result<(), Error>> + Send + Sync {
    let v = v.clone();
    move |cx| {
        assert_eq!(cx.state(), cx.from());
        v.lock().unwrap().extend([cx.from(), cx.to()]);
        std::future::ready(Ok(()))
    }
}

fn failed() -> Error {
    Error::Failed(glib::Error::new(
        gio::IOErrorEnum::Failed,
        "Failed transition",
    ))
}

/// libdex's `transition_fail`.
fn fail(_cx: TransitionContext<St>) -> std::future::Ready<Result<(), Error>> {
    std::future::ready(Err(failed()))
}

fn block_on<F: std::future::Future>(f: F) -> F::Output {
    gdex::block_on(f)
}

/// libdex `basic`: a declared edge runs its function, which sees the
/// machine in the edge's `from`, and the target is committed (M1).
#[test]
fn a_declared_edge_runs_its_function_and_commits_its_target() {
    watchdog("sm-basic", 30, || {
        let pool = pool();
        let v = visited();
        let m = builder(&pool)
            .edge(Initial, Ready, basic(&v))
            .build()
            .unwrap();
        assert_eq!(m.state(), Initial);
        assert_eq!(block_on(m.transition(Ready)).unwrap(), Ready);
        assert_eq!(m.state(), Ready);
        assert_eq!(seen(&v), [Initial, Ready]);
    });
}

/// libdex `landing`: a transition that sets the state itself (an
/// intermediate state, a timer, then another) resolves with where it
/// landed, not with the edge's target (M1).
#[test]
fn a_transition_that_sets_the_state_resolves_with_where_it_landed() {
    watchdog("sm-landing", 30, || {
        let pool = pool();
        let v = visited();
        let v2 = v.clone();
        let m = builder(&pool)
            .edge(Initial, Prepare, move |cx| {
                let v = v2.clone();
                async move {
                    assert_eq!(
                        (cx.from(), cx.to(), cx.state()),
                        (Initial, Prepare, Initial)
                    );
                    v.lock().unwrap().extend([cx.from(), cx.to()]);
                    cx.set_state(Prepare);
                    assert_eq!(cx.state(), Prepare);
                    gdex::sleep(Duration::from_millis(1)).await;
                    cx.set_state(Ready);
                    Ok(())
                }
            })
            .build()
            .unwrap();
        assert_eq!(block_on(m.transition(Prepare)).unwrap(), Ready);
        assert_eq!(m.state(), Ready);
        assert_eq!(seen(&v), [Initial, Prepare]);
    });
}

/// libdex `reverse`: edges both ways run one after the other (M1).
#[test]
fn edges_both_ways_take_the_machine_there_and_back() {
    watchdog("sm-reverse", 30, || {
        let pool = pool();
        let v = visited();
        let m = builder(&pool)
            .edge(Initial, Ready, basic(&v))
            .edge(Ready, Initial, basic(&v))
            .build()
            .unwrap();
        assert_eq!(block_on(m.transition(Ready)).unwrap(), Ready);
        assert_eq!(m.state(), Ready);
        assert_eq!(block_on(m.transition(Initial)).unwrap(), Initial);
        assert_eq!(m.state(), Initial);
        assert_eq!(seen(&v), [Initial, Ready, Ready, Initial]);
    });
}

/// libdex `landing-reverse`: a transition may set the state back to where
/// it started; the request resolves there (M1).
#[test]
fn a_transition_may_set_the_state_back_to_where_it_started() {
    watchdog("sm-landing-reverse", 30, || {
        let pool = pool();
        let v = visited();
        let v2 = v.clone();
        let m = builder(&pool)
            .edge(Initial, Prepare, move |cx| {
                v2.lock().unwrap().extend([cx.from(), cx.to()]);
                cx.set_state(Prepare);
                assert_eq!(cx.state(), Prepare);
                cx.set_state(Initial);
                std::future::ready(Ok(()))
            })
            .build()
            .unwrap();
        assert_eq!(block_on(m.transition(Prepare)).unwrap(), Initial);
        assert_eq!(m.state(), Initial);
        assert_eq!(seen(&v), [Initial, Prepare]);
    });
}

/// libdex `invalid`: a request without a declared edge from the current
/// state rejects with `InvalidTransition` (code 8 of gdex's domain, as
/// libdex's `DEX_ERROR_INVALID_TRANSITION`) and changes nothing (M1).
#[test]
fn an_undeclared_edge_is_refused_and_changes_nothing() {
    watchdog("sm-invalid", 30, || {
        let pool = pool();
        let v = visited();
        let m = builder(&pool)
            .edge(Initial, Ready, basic(&v))
            .build()
            .unwrap();
        let err = block_on(m.transition(Failed)).unwrap_err();
        let Error::InvalidTransition(msg) = &err else {
            panic!("an undeclared edge gave {err:?}");
        };
        assert!(msg.contains("Initial") && msg.contains("Failed"), "{msg}");
        let g: glib::Error = err.into();
        assert!(g.matches(gdex::ErrorCode::InvalidTransition));
        assert_eq!(m.state(), Initial);
        assert!(seen(&v).is_empty());
    });
}

/// libdex `failure`: a failing transition rejects with its own error,
/// unchanged, and leaves the state as it was (M1).
#[test]
fn a_failing_transition_leaves_the_state_unchanged() {
    watchdog("sm-failure", 30, || {
        let pool = pool();
        let m = builder(&pool).edge(Initial, Failed, fail).build().unwrap();
        let err = block_on(m.transition(Failed)).unwrap_err();
        assert!(err.matches(gio::IOErrorEnum::Failed), "{err:?}");
        assert_eq!(m.state(), Initial);
    });
}

/// libdex `requested-state`: the requested state is the latest target,
/// set when the request is made, and stays whatever the request's outcome
/// (M1). (libdex's third case, a target outside the enum, cannot be
/// written in Rust.)
#[test]
fn the_requested_state_is_the_latest_target_whatever_its_outcome() {
    watchdog("sm-requested", 30, || {
        let pool = pool();
        let m = builder(&pool).edge(Initial, Failed, fail).build().unwrap();
        assert_eq!(m.requested_state(), Initial);
        let refused = m.transition(Prepare);
        assert_eq!(m.requested_state(), Prepare);
        assert!(matches!(
            block_on(refused),
            Err(Error::InvalidTransition(_))
        ));
        assert_eq!(m.state(), Initial);
        assert_eq!(m.requested_state(), Prepare);
        let failing = m.transition(Failed);
        assert_eq!(m.requested_state(), Failed);
        assert!(block_on(failing)
            .unwrap_err()
            .matches(gio::IOErrorEnum::Failed));
        assert_eq!(m.state(), Initial);
        assert_eq!(m.requested_state(), Failed);
    });
}

/// libdex `wait-for-state-immediate`: a wait for the current state is
/// ready at once (M1).
#[test]
fn a_wait_for_the_current_state_is_ready_at_once() {
    let m = StateMachine::builder(Initial).build().unwrap();
    let mut wait = m.wait_for_state(Initial);
    assert!(matches!(
        common::poll_with(&mut wait, futures::task::noop_waker_ref()),
        std::task::Poll::Ready(Ok(Initial))
    ));
}

/// libdex `wait-for-state-transition`: a wait for a state is pending until
/// a transition reaches it (M1).
#[test]
fn a_wait_for_a_state_resolves_when_a_transition_reaches_it() {
    watchdog("sm-wait-transition", 30, || {
        let pool = pool();
        let v = visited();
        let m = builder(&pool)
            .edge(Initial, Ready, basic(&v))
            .build()
            .unwrap();
        let mut wait = m.wait_for_state(Ready);
        assert!(common::poll_with(&mut wait, futures::task::noop_waker_ref()).is_pending());
        assert_eq!(block_on(m.transition(Ready)).unwrap(), Ready);
        assert_eq!(block_on(wait).unwrap(), Ready);
    });
}

/// libdex `wait-for-state-intermediate`: a state a transition passes
/// through (set, then left) resolves the waits for it (M1).
#[test]
fn a_wait_resolves_on_a_state_the_transition_only_passes_through() {
    watchdog("sm-wait-intermediate", 30, || {
        let pool = pool();
        let m = builder(&pool)
            .edge(Initial, Prepare, |cx| async move {
                cx.set_state(Prepare);
                gdex::sleep(Duration::from_millis(1)).await;
                cx.set_state(Ready);
                Ok(())
            })
            .build()
            .unwrap();
        let wait = m.wait_for_state(Prepare);
        let transition = m.transition(Prepare);
        assert_eq!(block_on(wait).unwrap(), Prepare);
        assert_eq!(block_on(transition).unwrap(), Ready);
    });
}

/// libdex `wait-for-state-finalized`: dropping the machine rejects its
/// pending waits with `Cancelled` (M1). (libdex's `wait-for-state-invalid`,
/// a state outside the enum, cannot be written in Rust.)
#[test]
fn dropping_the_machine_rejects_its_waits_with_cancelled() {
    let m = StateMachine::builder(Initial).build().unwrap();
    let mut wait = m.wait_for_state(Ready);
    assert!(common::poll_with(&mut wait, futures::task::noop_waker_ref()).is_pending());
    drop(m);
    assert!(matches!(gdex::block_on(wait), Err(Error::Cancelled)));
}

/// libdex `interrupt-none`: with no transition running, `interrupt`
/// reaches nothing and says so (M1).
#[test]
fn an_interrupt_with_no_transition_running_returns_false() {
    let m = StateMachine::builder(Initial).build().unwrap();
    assert!(!m.interrupt());
}

/// A transition that shows `Prepare`, waits for an interruption, then
/// lands on `Ready`; `late` first waits a timer (libdex's
/// `transition_interrupt` and `transition_interrupt_late_wait`).
fn interruptible(late: bool) -> impl Fn(TransitionContext<St>) -> Step + Send + Sync {
    move |cx| {
        Box::pin(async move {
            assert_eq!((cx.from(), cx.to()), (Initial, Ready));
            cx.set_state(Prepare);
            if late {
                gdex::sleep(Duration::from_millis(10)).await;
            }
            cx.interrupted().await?;
            cx.set_state(Ready);
            Ok(())
        })
    }
}

/// libdex `interrupt`: an interrupt resolves the running transition's
/// wait for it; the transition decides what follows (M1).
#[test]
fn an_interrupt_resolves_the_running_transitions_wait() {
    watchdog("sm-interrupt", 30, || {
        let pool = pool();
        let m = builder(&pool)
            .edge(Initial, Ready, interruptible(false))
            .build()
            .unwrap();
        let wait = m.wait_for_state(Prepare);
        let mut transition = m.transition(Ready);
        assert_eq!(block_on(wait).unwrap(), Prepare);
        assert!(common::poll_with(&mut transition, futures::task::noop_waker_ref()).is_pending());
        assert!(m.interrupt());
        assert_eq!(block_on(transition).unwrap(), Ready);
        assert_eq!(m.state(), Ready);
    });
}

/// libdex `interrupt-latched`: an interrupt that comes before the
/// transition waits for it is kept, and the wait is ready at once (M1).
#[test]
fn an_interrupt_before_the_wait_for_it_is_kept() {
    watchdog("sm-interrupt-latched", 30, || {
        let pool = pool();
        let m = builder(&pool)
            .edge(Initial, Ready, interruptible(true))
            .build()
            .unwrap();
        let wait = m.wait_for_state(Prepare);
        let transition = m.transition(Ready);
        assert_eq!(block_on(wait).unwrap(), Prepare);
        assert!(m.interrupt());
        assert_eq!(block_on(transition).unwrap(), Ready);
        assert_eq!(m.state(), Ready);
    });
}

/// libdex `interrupt-context-completed`: a transition's interruption
/// future taken and not interrupted rejects with `Cancelled` once the
/// transition ended, and `interrupt` then reaches nothing (M1).
#[test]
fn an_interruption_never_sent_is_cancelled_when_its_transition_ends() {
    watchdog("sm-interrupt-completed", 30, || {
        let pool = pool();
        let kept = Arc::new(Mutex::new(None));
        let k = kept.clone();
        let m = builder(&pool)
            .edge(Initial, Ready, move |cx| {
                assert!(k.lock().unwrap().is_none());
                *k.lock().unwrap() = Some(cx.interrupted());
                std::future::ready(Ok(()))
            })
            .build()
            .unwrap();
        assert_eq!(block_on(m.transition(Ready)).unwrap(), Ready);
        let interrupted = kept.lock().unwrap().take().expect("the transition ran");
        assert!(matches!(block_on(interrupted), Err(Error::Cancelled)));
        assert!(!m.interrupt());
    });
}

/// libdex's `transition_continue_to_ready`/`_failed`: records its edge and
/// continues to `next`.
fn continuing(v: &Visited, next: St) -> impl Fn(TransitionContext<St>) -> Step + Send + Sync {
    let v = v.clone();
    move |cx| {
        let v = v.clone();
        Box::pin(async move {
            assert_eq!(
                (cx.from(), cx.to(), cx.state()),
                (Initial, Prepare, Initial)
            );
            v.lock().unwrap().extend([cx.from(), cx.to()]);
            cx.continue_to(next).await
        })
    }
}

/// libdex `continue-to`: `continue_to` commits the edge's target, runs the
/// next edge, and the request resolves where the chain lands (M1).
#[test]
fn continue_to_runs_the_next_edge_and_resolves_where_it_lands() {
    watchdog("sm-continue", 30, || {
        let pool = pool();
        let v = visited();
        let m = builder(&pool)
            .edge(Initial, Prepare, continuing(&v, Ready))
            .edge(Prepare, Ready, basic(&v))
            .build()
            .unwrap();
        assert_eq!(block_on(m.transition(Prepare)).unwrap(), Ready);
        assert_eq!(m.state(), Ready);
        assert_eq!(seen(&v), [Initial, Prepare, Prepare, Ready]);
    });
}

/// libdex `continue-to-before-queued`: a continuation runs before the
/// requests queued behind its request; the queued one then finds the
/// machine where the chain landed (M1).
#[test]
fn a_continuation_runs_before_the_queued_requests() {
    watchdog("sm-continue-queued", 30, || {
        let pool = pool();
        let v = visited();
        let m = builder(&pool)
            .edge(Initial, Prepare, continuing(&v, Ready))
            .edge(Prepare, Ready, basic(&v))
            .build()
            .unwrap();
        let first = m.transition(Prepare);
        let second = m.transition(Ready);
        assert_eq!(block_on(first).unwrap(), Ready);
        assert_eq!(m.state(), Ready);
        assert!(matches!(block_on(second), Err(Error::InvalidTransition(_))));
        assert_eq!(m.state(), Ready);
        assert_eq!(seen(&v).len(), 4);
    });
}

/// libdex `continue-to-invalid`: a continuation along an undeclared edge
/// is refused before the current edge is committed: nothing changes (M1).
#[test]
fn a_continuation_along_an_undeclared_edge_commits_nothing() {
    watchdog("sm-continue-invalid", 30, || {
        let pool = pool();
        let v = visited();
        let m = builder(&pool)
            .edge(Initial, Prepare, continuing(&v, Failed))
            .build()
            .unwrap();
        assert!(matches!(
            block_on(m.transition(Prepare)),
            Err(Error::InvalidTransition(_))
        ));
        assert_eq!(m.state(), Initial);
        assert_eq!(seen(&v), [Initial, Prepare]);
    });
}

/// libdex `continue-to-failure`: when the continued edge fails, the first
/// edge stays committed and the request rejects with the failure (M1).
#[test]
fn a_failing_continuation_keeps_the_first_edge_committed() {
    watchdog("sm-continue-failure", 30, || {
        let pool = pool();
        let v = visited();
        let m = builder(&pool)
            .edge(Initial, Prepare, continuing(&v, Failed))
            .edge(Prepare, Failed, fail)
            .build()
            .unwrap();
        let err = block_on(m.transition(Prepare)).unwrap_err();
        assert!(err.matches(gio::IOErrorEnum::Failed), "{err:?}");
        assert_eq!(m.state(), Prepare);
        assert_eq!(seen(&v), [Initial, Prepare]);
    });
}

/// libdex `scheduler`: transitions run on the scheduler the machine was
/// given (M1, S2).
#[test]
fn transitions_run_on_the_machines_scheduler() {
    watchdog("sm-scheduler", 30, || {
        let pool = pool();
        let on_pool = Arc::new(AtomicUsize::new(0));
        let seen_pool = on_pool.clone();
        let m = builder(&pool)
            .edge(Initial, Ready, move |_cx| {
                let here = gdex::Scheduler::thread_default().expect("a transition has a scheduler");
                if here.is_pool() {
                    seen_pool.fetch_add(1, Ordering::SeqCst);
                }
                std::future::ready(Ok(()))
            })
            .build()
            .unwrap();
        assert!(m.scheduler().is_pool());
        assert_eq!(block_on(m.transition(Ready)).unwrap(), Ready);
        assert_eq!(on_pool.load(Ordering::SeqCst), 1);
    });
}

/// libdex `duplicate`: an edge declared twice is refused when the machine
/// is built, with a message that names it (M1).
#[test]
fn an_edge_declared_twice_is_refused_at_build() {
    let v = visited();
    let err = StateMachine::builder(Initial)
        .edge(Initial, Ready, basic(&v))
        .edge(Initial, Ready, basic(&v))
        .build()
        .unwrap_err();
    let Error::InvalidTransition(msg) = err else {
        panic!("a duplicate edge gave {err:?}");
    };
    assert!(
        msg.contains("Initial -> Ready") && msg.contains("twice"),
        "{msg}"
    );
}

/// A transition that waits at a gate the test opens, counting its runs.
struct Gate {
    open: Arc<(Mutex<bool>, std::sync::Condvar)>,
    runs: Arc<AtomicUsize>,
}

impl Gate {
    fn new() -> Gate {
        Gate {
            open: Arc::new((Mutex::new(false), std::sync::Condvar::new())),
            runs: Arc::new(AtomicUsize::new(0)),
        }
    }

    /// An edge function that counts its run, then waits (on the blocking
    /// lane, not holding its worker) until the gate opens.
    fn edge(&self) -> impl Fn(TransitionContext<St>) -> Step + Send + Sync {
        let open = self.open.clone();
        let runs = self.runs.clone();
        move |_cx| {
            runs.fetch_add(1, Ordering::SeqCst);
            let open = open.clone();
            Box::pin(async move {
                gdex::spawn_blocking(move || {
                    let (lock, cv) = &*open;
                    let mut o = lock.lock().unwrap();
                    while !*o {
                        o = cv.wait(o).unwrap();
                    }
                })
                .await?;
                Ok(())
            })
        }
    }

    fn open(&self) {
        *self.open.0.lock().unwrap() = true;
        self.open.1.notify_all();
    }

    fn runs(&self) -> usize {
        self.runs.load(Ordering::SeqCst)
    }
}

/// Requests from several threads run one at a time, each in its turn, in
/// the order they were made (M1).
#[test]
fn requests_run_one_at_a_time_in_request_order() {
    watchdog("sm-serial", 60, || {
        let pool = pool();
        let inside = Arc::new(AtomicUsize::new(0));
        let order = Arc::new(Mutex::new(Vec::new()));
        let edge = |inside: &Arc<AtomicUsize>, order: &Arc<Mutex<Vec<(St, St)>>>| {
            let inside = inside.clone();
            let order = order.clone();
            move |cx: TransitionContext<St>| {
                let inside = inside.clone();
                let order = order.clone();
                async move {
                    assert_eq!(
                        inside.fetch_add(1, Ordering::SeqCst),
                        0,
                        "two transitions at once"
                    );
                    gdex::yield_now().await;
                    order.lock().unwrap().push((cx.from(), cx.to()));
                    inside.fetch_sub(1, Ordering::SeqCst);
                    Ok(())
                }
            }
        };
        let m = builder(&pool)
            .edge(Initial, Ready, edge(&inside, &order))
            .edge(Ready, Initial, edge(&inside, &order))
            .build()
            .unwrap();
        // Made in one order from one thread, awaited from others.
        let n = common::stress(40);
        let requests: Vec<_> = (0..n)
            .map(|i| m.transition(if i % 2 == 0 { Ready } else { Initial }))
            .collect();
        let handles: Vec<_> = requests
            .into_iter()
            .map(|r| std::thread::spawn(move || gdex::block_on(r)))
            .collect();
        for (i, h) in handles.into_iter().enumerate() {
            let want = if i % 2 == 0 { Ready } else { Initial };
            assert_eq!(h.join().unwrap().unwrap(), want);
        }
        let order = order.lock().unwrap();
        assert_eq!(order.len(), n);
        for (i, edge) in order.iter().enumerate() {
            let want = if i % 2 == 0 {
                (Initial, Ready)
            } else {
                (Ready, Initial)
            };
            assert_eq!(*edge, want, "transition {i} ran out of turn");
        }
    });
}

/// A request dropped before its turn is withdrawn: its function never
/// runs, and the requests behind it run as if it had not been made (M1).
#[test]
fn a_request_dropped_before_its_turn_is_withdrawn() {
    watchdog("sm-withdrawn", 30, || {
        let pool = pool();
        let gate = Gate::new();
        let v = visited();
        let m = builder(&pool)
            .edge(Initial, Prepare, gate.edge())
            .edge(Prepare, Ready, basic(&v))
            .edge(Prepare, Failed, basic(&v))
            .build()
            .unwrap();
        let first = m.transition(Prepare);
        common::wait_until(|| gate.runs() == 1);
        drop(m.transition(Failed));
        let third = m.transition(Ready);
        gate.open();
        assert_eq!(block_on(first).unwrap(), Prepare);
        assert_eq!(block_on(third).unwrap(), Ready);
        assert_eq!(seen(&v), [Prepare, Ready], "the withdrawn request ran");
    });
}

/// A request dropped while its transition runs is not torn in half: the
/// transition runs to its end and commits (M1).
#[test]
fn a_request_dropped_mid_transition_runs_to_its_end() {
    watchdog("sm-dropped-running", 30, || {
        let pool = pool();
        let gate = Gate::new();
        let m = builder(&pool)
            .edge(Initial, Prepare, gate.edge())
            .build()
            .unwrap();
        let reached = m.wait_for_state(Prepare);
        drop({
            let r = m.transition(Prepare);
            common::wait_until(|| gate.runs() == 1);
            r
        });
        gate.open();
        assert_eq!(block_on(reached).unwrap(), Prepare);
        assert_eq!(m.state(), Prepare);
    });
}

/// A detached request runs in its turn with nobody awaiting it (M1).
#[test]
fn a_detached_request_runs_in_its_turn() {
    watchdog("sm-detached", 30, || {
        let pool = pool();
        let gate = Gate::new();
        let v = visited();
        let m = builder(&pool)
            .edge(Initial, Prepare, gate.edge())
            .edge(Prepare, Ready, basic(&v))
            .build()
            .unwrap();
        let first = m.transition(Prepare);
        common::wait_until(|| gate.runs() == 1);
        m.transition(Ready).detach();
        let reached = m.wait_for_state(Ready);
        gate.open();
        assert_eq!(block_on(first).unwrap(), Prepare);
        assert_eq!(block_on(reached).unwrap(), Ready);
        assert_eq!(seen(&v), [Prepare, Ready]);
    });
}

/// Dropping the last handle rejects the queued requests with `Cancelled`
/// (their functions never run) and interrupts the running transition,
/// which runs to its end (M1).
#[test]
fn dropping_the_machine_cancels_the_queued_and_interrupts_the_running() {
    watchdog("sm-drop-machine", 30, || {
        let pool = pool();
        let v = visited();
        let started = Arc::new(AtomicUsize::new(0));
        let s = started.clone();
        let m = builder(&pool)
            .edge(Initial, Prepare, move |cx| {
                s.fetch_add(1, Ordering::SeqCst);
                async move {
                    cx.interrupted().await?;
                    cx.set_state(Prepare);
                    Ok(())
                }
            })
            .edge(Prepare, Ready, basic(&v))
            .build()
            .unwrap();
        let running = m.transition(Prepare);
        let queued = m.transition(Ready);
        common::wait_until(|| started.load(Ordering::SeqCst) == 1);
        drop(m);
        assert!(matches!(block_on(queued), Err(Error::Cancelled)));
        assert_eq!(block_on(running).unwrap(), Prepare);
        assert!(
            seen(&v).is_empty(),
            "a queued request ran after the machine was dropped"
        );
    });
}

/// A panic in a transition function rejects its request with `Panicked`,
/// leaves the state as it was, and the machine takes the next request
/// (M1, X5).
#[test]
fn a_panicking_transition_rejects_its_request_and_the_machine_goes_on() {
    watchdog("sm-panic", 30, || {
        let pool = pool();
        let v = visited();
        let m = builder(&pool)
            .edge(
                Initial,
                Failed,
                |_cx| -> std::future::Ready<Result<(), Error>> {
                    panic!("a transition that panics, on purpose")
                },
            )
            .edge(Initial, Ready, basic(&v))
            .build()
            .unwrap();
        let panicked = m.transition(Failed);
        let next = m.transition(Ready);
        match block_on(panicked) {
            Err(Error::Panicked(msg)) => assert!(msg.contains("on purpose"), "{msg}"),
            other => panic!("a panicking transition gave {other:?}"),
        }
        assert_eq!(block_on(next).unwrap(), Ready);
    });
}

/// A fiber edge runs in a fiber and waits with `fiber::wait`; it can
/// continue through another edge with `fiber::wait(cx.continue_to(..))`
/// (M1, F1).
#[test]
fn a_fiber_edge_waits_and_continues_from_its_fiber() {
    watchdog("sm-fiber", 30, || {
        let pool = pool();
        let v = visited();
        let m = builder(&pool)
            .fiber_edge(Initial, Prepare, |cx| {
                assert!(gdex::fiber::in_fiber());
                gdex::fiber::wait(gdex::sleep(Duration::from_millis(1)))?;
                gdex::fiber::wait(cx.continue_to(Ready))
            })
            .edge(Prepare, Ready, basic(&v))
            .build()
            .unwrap();
        assert_eq!(block_on(m.transition(Prepare)).unwrap(), Ready);
        assert_eq!(seen(&v), [Prepare, Ready]);
    });
}

/// When the machine's pool shuts down, the running and queued requests
/// reject with `Cancelled`, and a request made afterwards too: none hangs
/// (M1, S9).
#[test]
fn a_scheduler_that_shuts_down_cancels_the_machines_requests() {
    watchdog("sm-shutdown", 30, || {
        let pool = pool();
        let started = Arc::new(AtomicUsize::new(0));
        let s = started.clone();
        let m = builder(&pool)
            .edge(Initial, Prepare, move |_cx| {
                s.fetch_add(1, Ordering::SeqCst);
                std::future::pending()
            })
            .edge(Prepare, Ready, |_cx| std::future::ready(Ok(())))
            .build()
            .unwrap();
        let running = m.transition(Prepare);
        let queued = m.transition(Ready);
        common::wait_until(|| started.load(Ordering::SeqCst) == 1);
        pool.shutdown();
        assert!(matches!(block_on(running), Err(Error::Cancelled)));
        assert!(matches!(block_on(queued), Err(Error::Cancelled)));
        assert!(matches!(
            block_on(m.transition(Prepare)),
            Err(Error::Cancelled)
        ));
        assert_eq!(m.state(), Initial);
    });
}

/// A context kept past its transition's end cannot change the state: the
/// call panics with a message that says why (M1).
#[test]
fn setting_the_state_after_the_transition_ended_panics() {
    watchdog("sm-late-set", 30, || {
        let pool = pool();
        let kept = Arc::new(Mutex::new(None));
        let k = kept.clone();
        let m = builder(&pool)
            .edge(Initial, Ready, move |cx| {
                *k.lock().unwrap() = Some(cx);
                std::future::ready(Ok(()))
            })
            .build()
            .unwrap();
        assert_eq!(block_on(m.transition(Ready)).unwrap(), Ready);
        let cx = kept.lock().unwrap().take().unwrap();
        let err = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| cx.set_state(Failed)))
            .unwrap_err();
        let msg = err.downcast_ref::<String>().cloned().unwrap_or_default();
        assert!(msg.contains("after its transition ended"), "{msg}");
        assert_eq!(m.state(), Ready);
    });
}

/// The machine and its futures cross threads (M1).
#[test]
fn the_machine_and_its_futures_are_send_and_sync() {
    fn send_sync<T: Send + Sync>() {}
    fn send<T: Send>() {}
    send_sync::<StateMachine<St>>();
    send_sync::<TransitionContext<St>>();
    send::<gdex::TransitionRequest<St>>();
    send::<gdex::WaitForState<St>>();
    send::<gdex::Interrupted>();
}

/// A clone is another handle to the same machine: dropping one of two
/// closes nothing (M1).
#[test]
fn a_clone_keeps_the_machine_open() {
    watchdog("sm-clone", 30, || {
        let pool = pool();
        let v = visited();
        let m = builder(&pool)
            .edge(Initial, Ready, basic(&v))
            .build()
            .unwrap();
        let wait = m.wait_for_state(Ready);
        let other = m.clone();
        drop(m);
        assert_eq!(block_on(other.transition(Ready)).unwrap(), Ready);
        assert_eq!(block_on(wait).unwrap(), Ready);
    });
}

/// `examples/state_machine.rs` runs on the main loop and prints the life
/// cycle the README shows: a timer then a continuation, a failing unlock
/// that leaves the state, a refused edge (M1).
#[test]
fn the_connection_example_walks_its_life_cycle() {
    let exe = common::example_exe("state_machine");
    let out = watchdog("sm-example", 60, || {
        std::process::Command::new(&exe).output().unwrap()
    });
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}\n{stdout}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(
        lines,
        [
            "connecting: dialing...",
            "connecting: handshake done",
            "connect: landed in ready (Ready)",
            "lock: Locked",
            "unlock: wrong password; still Locked",
            "unlock again: Ready",
            "disconnect: refused: no transition from Ready to Disconnected is declared: the state \
             machine's edges are fixed when it is built (StateMachineBuilder::edge)",
            "state Ready, requested Disconnected",
        ]
    );
}

/// A waker that runs a closure when woken: what a task awaiting a
/// [`gdex::WaitForState`] does next, run at the very moment of the wake-up.
struct OnWake(Box<dyn Fn() + Send + Sync>);

impl std::task::Wake for OnWake {
    fn wake(self: Arc<Self>) {
        (self.0)()
    }
    fn wake_by_ref(self: &Arc<Self>) {
        (self.0)()
    }
}

/// Registers a wait for `state` whose wake-up interrupts `m` at once (as
/// a task that waits for the state, then interrupts, would), and keeps
/// what `interrupt` returned.
fn interrupt_on_reaching(
    m: &StateMachine<St>,
    state: St,
) -> (gdex::WaitForState<St>, Arc<Mutex<Option<bool>>>) {
    let said = Arc::new(Mutex::new(None));
    let (m2, s2) = (m.clone(), said.clone());
    let waker = std::task::Waker::from(Arc::new(OnWake(Box::new(move || {
        *s2.lock().unwrap() = Some(m2.interrupt());
    }))));
    let mut wait = m.wait_for_state(state);
    assert!(common::poll_with(&mut wait, &waker).is_pending());
    (wait, said)
}

/// Ok if the transition was interrupted before this call, an error that
/// says so otherwise.
fn latched(cx: &TransitionContext<St>) -> Result<(), Error> {
    use futures::FutureExt;
    match cx.interrupted().now_or_never() {
        Some(Ok(())) => Ok(()),
        other => Err(Error::Failed(glib::Error::new(
            gio::IOErrorEnum::Failed,
            &format!(
                "the interrupt sent on reaching {:?} did not reach {:?} -> {:?}: {other:?}",
                cx.state(),
                cx.from(),
                cx.to()
            ),
        ))),
    }
}

/// An interrupt sent by whoever sees `continue_to` commit its edge's
/// target reaches the continued transition, which runs from then on, not
/// the function waiting for it (M1): the commit and the continuation's
/// start are one step.
#[test]
fn an_interrupt_sent_as_continue_to_commits_reaches_the_continued_edge() {
    watchdog("sm-interrupt-continue-start", 30, || {
        let pool = pool();
        let m = builder(&pool)
            .edge(
                Initial,
                Prepare,
                |cx| async move { cx.continue_to(Ready).await },
            )
            .edge(Prepare, Ready, |cx| std::future::ready(latched(&cx)))
            .build()
            .unwrap();
        let (wait, said) = interrupt_on_reaching(&m, Prepare);
        assert_eq!(block_on(m.transition(Prepare)).unwrap(), Ready);
        assert_eq!(*said.lock().unwrap(), Some(true));
        drop(wait);
    });
}

/// An interrupt sent by whoever sees a continued edge commit its target
/// reaches the transition that continued into it, which still runs, not
/// the finished one (M1; libdex ends a context before committing its
/// target).
#[test]
fn an_interrupt_sent_as_a_continued_edge_commits_reaches_the_transition_still_running() {
    watchdog("sm-interrupt-continue-end", 30, || {
        let pool = pool();
        let m = builder(&pool)
            .edge(Initial, Prepare, |cx| async move {
                cx.continue_to(Ready).await?;
                latched(&cx)
            })
            .edge(Prepare, Ready, |_cx| std::future::ready(Ok(())))
            .build()
            .unwrap();
        let (wait, said) = interrupt_on_reaching(&m, Ready);
        assert_eq!(block_on(m.transition(Prepare)).unwrap(), Ready);
        assert_eq!(*said.lock().unwrap(), Some(true));
        drop(wait);
    });
}

/// An `interrupted()` future dropped before its transition ends lets go of
/// its waker then, not when the transition ends: a long transition that
/// keeps asking (a loop of helper tasks, each waiting for the
/// interruption) does not pile up the wakers of tasks long gone (M1).
#[test]
fn a_dropped_interruption_wait_lets_go_of_its_waker() {
    watchdog("sm-interrupted-waker", 30, || {
        let pool = pool();
        let m = builder(&pool)
            .edge(Initial, Ready, |cx| async move {
                let wakers: Vec<_> = (0..3).map(|_| Arc::new(OnWake(Box::new(|| {})))).collect();
                for w in &wakers {
                    let waker = std::task::Waker::from(w.clone());
                    let mut wait = cx.interrupted();
                    assert!(common::poll_with(&mut wait, &waker).is_pending());
                    // Polled again with the same waker: still one entry.
                    assert!(common::poll_with(&mut wait, &waker).is_pending());
                }
                let kept = wakers.iter().filter(|w| Arc::strong_count(w) > 1).count();
                if kept == 0 {
                    Ok(())
                } else {
                    Err(Error::Failed(glib::Error::new(
                        gio::IOErrorEnum::Failed,
                        &format!("{kept} dropped interruption waits still hold their wakers"),
                    )))
                }
            })
            .build()
            .unwrap();
        assert_eq!(block_on(m.transition(Ready)).unwrap(), Ready);
    });
}

/// A continuation asked for once the machine's pool has shut down gives
/// `Cancelled`, as the machine's requests do, not the refused spawn's
/// `ShutDown` (M1, S9).
#[test]
fn a_continuation_after_the_scheduler_shut_down_gives_cancelled() {
    watchdog("sm-shutdown-continue", 30, || {
        let pool = pool();
        let seen = Arc::new(Mutex::new(None));
        let (p, s) = (pool.clone(), seen.clone());
        let m = builder(&pool)
            .edge(Initial, Prepare, move |cx| {
                let (pool, seen) = (p.clone(), s.clone());
                async move {
                    // From a worker of its own: returns at once.
                    pool.shutdown();
                    let continued = cx.continue_to(Ready).await;
                    *seen.lock().unwrap() = Some(format!("{continued:?}"));
                    continued
                }
            })
            .edge(Prepare, Ready, |_cx| std::future::ready(Ok(())))
            .build()
            .unwrap();
        let r = block_on(m.transition(Prepare));
        assert!(matches!(r, Err(Error::Cancelled)), "{r:?}");
        // The request may be cancelled (its runner dropped by the other
        // worker as it exits) while the function is still in `shutdown`.
        common::wait_until(|| seen.lock().unwrap().is_some());
        assert_eq!(
            seen.lock().unwrap().as_deref(),
            Some("Err(Cancelled)"),
            "what continue_to gave"
        );
    });
}

/// However a pool's shutdown falls among a machine's requests (its runner
/// between two of them, or polled once more while the pool closes), every
/// request that does not finish gives `Cancelled`: none gives the refused
/// spawn's `ShutDown`, nor runs (or is refused as `InvalidTransition`)
/// after one was cancelled (M1, S9).
#[test]
fn requests_cut_off_by_a_shutdown_give_cancelled_wherever_it_falls() {
    watchdog("sm-shutdown-anywhere", 120, || {
        let mut seen = std::collections::BTreeMap::new();
        for _ in 0..common::stress(1000) {
            let pool = gdex::ThreadPool::builder().workers(2).build().unwrap();
            let started = Arc::new(AtomicUsize::new(0));
            let s = started.clone();
            let m = builder(&pool)
                .edge(Initial, Ready, move |_cx| {
                    s.fetch_add(1, Ordering::SeqCst);
                    std::future::ready(Ok(()))
                })
                .edge(Ready, Initial, |_cx| std::future::ready(Ok(())))
                .build()
                .unwrap();
            let requests: Vec<_> = (0..16)
                .map(|i| m.transition(if i % 2 == 0 { Ready } else { Initial }))
                .collect();
            common::wait_until(|| started.load(Ordering::SeqCst) >= 1);
            pool.shutdown();
            let mut cancelled = false;
            for (i, r) in requests.into_iter().enumerate() {
                let outcome = block_on(r);
                let kind = match &outcome {
                    Ok(_) => "Ok",
                    Err(Error::Cancelled) => "Cancelled",
                    Err(Error::ShutDown) => "ShutDown",
                    Err(Error::InvalidTransition(_)) => "InvalidTransition",
                    Err(_) => "other",
                };
                *seen.entry(kind).or_insert(0) += 1;
                assert!(
                    !cancelled || matches!(outcome, Err(Error::Cancelled)),
                    "request {i} gave {outcome:?} after an earlier one was cancelled ({seen:?})"
                );
                assert!(
                    matches!(outcome, Ok(_) | Err(Error::Cancelled)),
                    "request {i} gave {outcome:?} ({seen:?})"
                );
                cancelled |= outcome.is_err();
            }
        }
    });
}

/// Formatting a machine writes to its formatter with the machine's lock
/// released: a sink that uses the machine (a log that reads its state)
/// does not deadlock (M1: no user code runs under the machine's lock).
#[test]
fn formatting_the_machine_writes_with_its_lock_released() {
    struct Log<'a>(&'a StateMachine<St>, String);
    impl std::fmt::Write for Log<'_> {
        fn write_str(&mut self, s: &str) -> std::fmt::Result {
            let _ = self.0.state();
            self.1.push_str(s);
            Ok(())
        }
    }
    watchdog("sm-debug-unlocked", 10, || {
        let m = StateMachine::builder(Initial).build().unwrap();
        let mut log = Log(&m, String::new());
        std::fmt::Write::write_fmt(&mut log, format_args!("{m:?}")).unwrap();
        assert!(log.1.contains("state: Initial"), "{}", log.1);
    });
}

/// A transition continues through one edge at a time: a second
/// `continue_to` while one of its continuations runs (both awaited
/// together) panics with a message that says so, instead of running two
/// edges at once; the second edge never runs (M1).
#[test]
fn a_second_continuation_while_one_runs_panics() {
    watchdog("sm-two-continuations", 30, || {
        let pool = pool();
        let v = visited();
        let m = builder(&pool)
            .edge(Initial, Prepare, |cx| async move {
                let (a, b) = futures::join!(cx.continue_to(Ready), cx.continue_to(Failed));
                a.and(b)
            })
            .edge(Prepare, Ready, |_cx| async {
                for _ in 0..3 {
                    gdex::yield_now().await;
                }
                Ok(())
            })
            .edge(Prepare, Failed, basic(&v))
            .build()
            .unwrap();
        match block_on(m.transition(Prepare)) {
            Err(Error::Panicked(msg)) => assert!(
                msg.contains("continue_to") && msg.contains("one edge at a time"),
                "{msg}"
            ),
            other => panic!(
                "two continuations at once gave {other:?} ({:?} ran)",
                seen(&v)
            ),
        }
        assert!(seen(&v).is_empty(), "the second continuation ran");
    });
}

/// Setting the state while one of the transition's own continuations runs
/// panics with a message that says so: the machine is the continued
/// edge's until it returns (M1).
#[test]
fn setting_the_state_while_a_continuation_runs_panics() {
    watchdog("sm-set-while-continuing", 30, || {
        let pool = pool();
        // The continued edge runs until the set_state has been tried.
        let tried = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let t = tried.clone();
        let m = builder(&pool)
            .edge(Initial, Prepare, move |cx| {
                let tried = t.clone();
                async move {
                    let set = async {
                        gdex::yield_now().await;
                        let _tried = common::SetOnDrop(tried);
                        cx.set_state(Failed);
                        Ok(())
                    };
                    let (a, b) = futures::join!(cx.continue_to(Ready), set);
                    a.and(b)
                }
            })
            .edge(Prepare, Ready, move |_cx| {
                let tried = tried.clone();
                async move {
                    while !tried.load(Ordering::SeqCst) {
                        gdex::yield_now().await;
                    }
                    Ok(())
                }
            })
            .build()
            .unwrap();
        match block_on(m.transition(Prepare)) {
            Err(Error::Panicked(msg)) => assert!(
                msg.contains("set_state") && msg.contains("continue_to"),
                "{msg}"
            ),
            other => panic!("a set_state during a continuation gave {other:?}"),
        }
        assert_ne!(m.state(), Failed);
    });
}

/// A machine on the scheduler of a pool worker's own context, whose loop
/// stops when the pool shuts down: its running, queued and later requests
/// give `Cancelled`, a detached and a withdrawn one leave nothing behind,
/// and none hangs (M1, S9).
#[test]
fn a_machine_on_a_worker_context_that_ends_cancels_its_requests() {
    watchdog("sm-worker-context", 30, || {
        let pool = pool();
        let scheduler = block_on(pool.scheduler().spawn(async {
            gdex::Scheduler::for_context(&glib::MainContext::thread_default().unwrap())
        }))
        .unwrap();
        let started = Arc::new(AtomicUsize::new(0));
        let s = started.clone();
        let v = visited();
        let m = StateMachine::builder(Initial)
            .scheduler(&scheduler)
            .edge(Initial, Prepare, move |_cx| {
                s.fetch_add(1, Ordering::SeqCst);
                std::future::pending()
            })
            .edge(Prepare, Ready, basic(&v))
            .build()
            .unwrap();
        let running = m.transition(Prepare);
        let queued = m.transition(Ready);
        m.transition(Ready).detach();
        drop(m.transition(Ready));
        common::wait_until(|| started.load(Ordering::SeqCst) == 1);
        pool.shutdown();
        assert!(matches!(block_on(running), Err(Error::Cancelled)));
        assert!(matches!(block_on(queued), Err(Error::Cancelled)));
        for _ in 0..2 {
            assert!(matches!(
                block_on(m.transition(Prepare)),
                Err(Error::Cancelled)
            ));
        }
        assert_eq!(m.state(), Initial);
        assert!(seen(&v).is_empty());
        assert!(format!("{m:?}").contains("queued: 0"), "{m:?}");
    });
}

/// A continued edge cancelled in the middle of a poll of its function
/// (the `continue_to` that runs it dropped by the function that called
/// it, here on reaching a point the edge signals, as a timeout would)
/// finds its context cancelled for the rest of that poll: its `set_state`
/// changes nothing and its `continue_to` gives `Cancelled`, with no panic
/// (and no report of one) for a context its function never kept past its
/// end (M1).
#[test]
fn a_transition_cancelled_in_the_middle_of_a_poll_changes_nothing_and_does_not_panic() {
    watchdog("sm-cancelled-mid-poll", 60, || {
        let pool = pool();
        let (inside_tx, inside_rx) = futures::channel::oneshot::channel::<()>();
        let inside_tx = Arc::new(Mutex::new(Some(inside_tx)));
        let inside_rx = Arc::new(Mutex::new(Some(inside_rx)));
        let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
        let go_tx = Arc::new(Mutex::new(Some(go_tx)));
        let go_rx = Arc::new(Mutex::new(Some(go_rx)));
        let log = Arc::new(Mutex::new(Vec::<String>::new()));
        let l = log.clone();
        let m = builder(&pool)
            .edge(Initial, Prepare, move |cx| {
                let inside = inside_rx.lock().unwrap().take().unwrap();
                let go = go_tx.lock().unwrap().take().unwrap();
                async move {
                    let continued = Box::pin(cx.continue_to(Ready));
                    match futures::future::select(continued, inside).await {
                        futures::future::Either::Right((_, continued)) => drop(continued),
                        futures::future::Either::Left((r, _)) => {
                            panic!("the continuation ended: {r:?}")
                        }
                    }
                    go.send(()).unwrap();
                    Ok(())
                }
            })
            .edge(Prepare, Ready, move |cx| {
                let inside = inside_tx.lock().unwrap().take().unwrap();
                let go = go_rx.lock().unwrap().take().unwrap();
                let log = l.clone();
                // All in the function's first poll: signal, block this
                // worker until the continuation is dropped, then use the
                // context.
                inside.send(()).unwrap();
                let released = go.recv_timeout(Duration::from_secs(20)).is_ok();
                let set =
                    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| cx.set_state(Failed)));
                let next = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    use futures::FutureExt;
                    cx.continue_to(Initial).now_or_never()
                }));
                log.lock().unwrap().push(format!(
                    "released {released}, set_state {:?}, continue_to {:?}",
                    set.map_err(|_| "panicked"),
                    next.map_err(|_| "panicked")
                ));
                std::future::ready(Ok(()))
            })
            .edge(Ready, Initial, |_cx| std::future::ready(Ok(())))
            .build()
            .unwrap();
        assert_eq!(block_on(m.transition(Prepare)).unwrap(), Prepare);
        common::wait_until(|| !log.lock().unwrap().is_empty());
        assert_eq!(
            log.lock().unwrap()[0],
            "released true, set_state Ok(()), continue_to Ok(Some(Err(Cancelled)))"
        );
        assert_eq!(m.state(), Prepare);
    });
}

/// A wait for a state on a machine whose scheduler shut down under a
/// transition gives `Cancelled` (no state will be set again), and so does
/// one made afterwards, instead of waiting until the machine is dropped
/// (M1, S9).
#[test]
fn waits_on_a_machine_whose_scheduler_shut_down_give_cancelled() {
    watchdog("sm-wait-gone", 30, || {
        let pool = pool();
        let started = Arc::new(AtomicUsize::new(0));
        let s = started.clone();
        let m = builder(&pool)
            .edge(Initial, Ready, move |_cx| {
                s.fetch_add(1, Ordering::SeqCst);
                std::future::pending()
            })
            .build()
            .unwrap();
        let waiting = m.wait_for_state(Ready);
        let running = m.transition(Ready);
        common::wait_until(|| started.load(Ordering::SeqCst) == 1);
        pool.shutdown();
        assert!(matches!(block_on(running), Err(Error::Cancelled)));
        assert!(matches!(block_on(waiting), Err(Error::Cancelled)));
        assert!(matches!(
            block_on(m.wait_for_state(Ready)),
            Err(Error::Cancelled)
        ));
        // The state it is in still answers at once.
        assert_eq!(block_on(m.wait_for_state(Initial)).unwrap(), Initial);
    });
}

/// The wakers a request or a wait for a state lets go of (replaced by the
/// waker of a later poll, or dropped with the future) are dropped with the
/// machine's lock released: a waker's drop is user code (the last
/// reference to another executor's task), which may use the machine (M1).
#[test]
fn wakers_a_machine_lets_go_of_are_dropped_with_its_lock_released() {
    watchdog("sm-waker-drops-unlocked", 30, || {
        let pool = pool();
        let (release, released) = gdex::Promise::<()>::new();
        let released = Mutex::new(Some(released));
        let m = builder(&pool)
            .edge(Initial, Prepare, move |_cx| {
                let released = released.lock().unwrap().take();
                async move {
                    if let Some(released) = released {
                        let _ = released.await;
                    }
                    Ok(())
                }
            })
            .build()
            .unwrap();
        let running = m.transition(Prepare);
        let ran = Arc::new(AtomicUsize::new(0));
        let probe = || {
            let (m, ran) = (m.clone(), ran.clone());
            common::waker_running_on_drop(move || {
                let _ = m.state();
                ran.fetch_add(1, Ordering::SeqCst);
            })
        };
        let ran_now = || ran.load(Ordering::SeqCst);

        // Queued behind the running one: pending.
        let mut queued = m.transition(Ready);
        assert!(common::poll_with(&mut queued, &probe()).is_pending());
        assert!(common::poll_with(&mut queued, &probe()).is_pending());
        assert_eq!(ran_now(), 1, "a request's replaced waker");
        drop(queued);
        assert_eq!(ran_now(), 2, "a withdrawn request's waker");

        let mut wait = m.wait_for_state(Failed);
        assert!(common::poll_with(&mut wait, &probe()).is_pending());
        assert!(common::poll_with(&mut wait, &probe()).is_pending());
        assert_eq!(ran_now(), 3, "a wait's replaced waker");
        drop(wait);
        assert_eq!(ran_now(), 4, "a dropped wait's waker");

        release.resolve(());
        assert_eq!(block_on(running).unwrap(), Prepare);
    });
}
