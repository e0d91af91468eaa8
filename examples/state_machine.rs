//! A connection's life cycle as a state machine (M1), on the main loop as
//! in a GTK app: connecting awaits a timer (the dial) and continues to
//! ready; locking always works; unlocking fails on a wrong password and
//! leaves the connection locked; an edge that is not declared is refused.
//!
//! ```sh
//! cargo run --example state_machine
//! ```

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use gdex::glib;
use gdex::{Error, StateMachine};

/// A `GEnum` too: a GObject that owns the machine can expose the state as
/// a property of this type.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, glib::Enum)]
#[enum_type(name = "GdexExampleConnection")]
enum Connection {
    Disconnected,
    Connecting,
    Ready,
    Locked,
}
use Connection::*;

fn main() -> Result<(), Error> {
    let attempts = Arc::new(AtomicUsize::new(0));
    let machine = StateMachine::builder(Disconnected)
        .edge(Disconnected, Connecting, |cx| async move {
            cx.set_state(Connecting);
            println!("connecting: dialing...");
            gdex::sleep(Duration::from_millis(100)).await;
            // The dial answered: on to Ready before any queued request.
            cx.continue_to(Ready).await
        })
        .edge(Connecting, Ready, |_cx| async {
            println!("connecting: handshake done");
            Ok(())
        })
        .edge(Ready, Locked, |_cx| async { Ok(()) })
        .edge(Locked, Ready, move |_cx| {
            let attempt = attempts.fetch_add(1, Ordering::SeqCst);
            async move {
                if attempt == 0 {
                    return Err(glib::Error::new(
                        gdex::gio::IOErrorEnum::PermissionDenied,
                        "wrong password",
                    )
                    .into());
                }
                Ok(())
            }
        })
        .scheduler(&gdex::Scheduler::main())
        .build()?;

    let main_loop = glib::MainLoop::new(None, false);
    let quit = main_loop.clone();
    let outcome = std::rc::Rc::new(std::cell::Cell::new(None));
    let result = outcome.clone();
    gdex::Scheduler::main()
        .spawn_local(async move {
            result.set(Some(drive(&machine).await));
            quit.quit();
        })
        .detach();
    main_loop.run();
    outcome
        .take()
        .expect("the main loop quits once the drive is done")
}

async fn drive(machine: &StateMachine<Connection>) -> Result<(), Error> {
    let nick = |s: Connection| {
        glib::EnumValue::from_value(&glib::Value::from(s))
            .map(|(_, v)| v.nick().to_owned())
            .unwrap_or_default()
    };
    let ready = machine.wait_for_state(Ready);
    let landed = machine.transition(Connecting).await?;
    ready.await?;
    println!("connect: landed in {} ({landed:?})", nick(landed));

    println!("lock: {:?}", machine.transition(Locked).await?);

    match machine.transition(Ready).await {
        Err(err) => println!("unlock: {err}; still {:?}", machine.state()),
        Ok(state) => println!("unlock: {state:?}"),
    }
    println!("unlock again: {:?}", machine.transition(Ready).await?);

    match machine.transition(Disconnected).await {
        Err(Error::InvalidTransition(msg)) => println!("disconnect: refused: {msg}"),
        other => println!("disconnect: {other:?}"),
    }
    println!(
        "state {:?}, requested {:?}",
        machine.state(),
        machine.requested_state()
    );
    Ok(())
}
