//! The poll function of a worker's context ([`poll_fds`], P8): a busy
//! worker's zero-timeout polls skip the `poll(2)` call while a recent real
//! poll covers every fd.

use std::cell::Cell;

use super::SLICE_TIME;

/// How often a busy worker's loop turn asks the kernel about its context's
/// file descriptors (P8): the turns in between skip the `poll(2)` call (see
/// [`poll_fds`]).
pub(super) const FD_POLL_EVERY: std::time::Duration = SLICE_TIME;

/// How many of the fds of the last real poll [`FdPoll`] remembers. GLib
/// hands the poll function its fds by priority, highest first, so a turn
/// restricted to high-priority sources asks about a prefix of a full
/// turn's fds; a worker's context has a handful.
pub(super) const FD_POLL_KEPT: usize = 8;

/// The worker's record of its last real poll (see [`poll_fds`]).
#[derive(Clone, Copy)]
pub(super) struct FdPoll {
    /// When it ran, in clock ticks.
    pub(super) last: u64,
    /// `FD_POLL_EVERY` in clock ticks; 0 (never skip) until the worker
    /// sets it, so another thread iterating a worker's context always polls.
    pub(super) every: u64,
    /// How many entries of `polled` are valid.
    pub(super) kept: usize,
    /// The fds it asked about, with their events.
    pub(super) polled: [(std::os::raw::c_int, u16); FD_POLL_KEPT],
}

impl FdPoll {
    /// Was `fd` asked about (for at least these events) in the last poll?
    fn covers(&self, fd: &glib_sys::GPollFD) -> bool {
        self.polled[..self.kept]
            .iter()
            .any(|&(polled, events)| polled == fd.fd && events & fd.events == fd.events)
    }
}

thread_local! {
    /// This worker's last real poll of its context's fds.
    pub(super) static FD_POLL: Cell<FdPoll> = const {
        Cell::new(FdPoll {
            last: 0,
            every: 0,
            kept: 0,
            polled: [(0, 0); FD_POLL_KEPT],
        })
    };
}

/// The poll function of a worker's context (`g_main_context_set_poll_func`).
///
/// A busy worker hands its loop to GLib after every slice (P8), and GLib
/// then polls the context's fds with a zero timeout: one syscall per 32
/// jobs, about a fifth of a yield's cost (the `yield_many` profile).
/// Everything P8 is for needs no syscall: GLib finds due timeouts, idle
/// sources and sources attached from other threads (GIO's async results)
/// in its prepare and check, and the AIO ring's source reads its
/// completion queue from shared memory. Only fd readiness (sockets, pipes,
/// `gdex::unix_fd`) needs the kernel, so a zero-timeout poll is skipped
/// (reporting no fd ready) if a real one asked about every one of its fds
/// less than [`FD_POLL_EVERY`] ago. A turn that may block (the worker
/// parks, or waits for a timer) always polls.
///
/// Every fd, not just the time: on a turn where a source above the default
/// priority is ready (the AIO ring's, with completions) GLib asks only
/// about that priority's fds. Were that poll to count for the next turn's,
/// a task that computes for more than `FD_POLL_EVERY` between AIO reads
/// would make each real poll such a turn, and the default-priority fds
/// would never be polled while it ran
/// (`tests/timers.rs::an_fd_is_found_on_a_worker_whose_long_slices_end_in_aio_completions`).
///
/// # Safety
///
/// GLib calls it as `g_poll`, with `nfds` entries at `fds`.
pub(super) unsafe extern "C" fn poll_fds(
    fds: *mut glib_sys::GPollFD,
    nfds: std::os::raw::c_uint,
    timeout: std::os::raw::c_int,
) -> std::os::raw::c_int {
    // P10: a parked worker marks the poll it may block in, and takes the
    // mark off when the poll returns (a busy worker's polls have a zero
    // timeout: one comparison here).
    let (in_poll, timeout) = if timeout == 0 {
        (false, 0)
    } else {
        super::with_current(|core| core.map_or((false, timeout), |core| core.before_poll(timeout)))
    };
    // SAFETY: GLib's arguments, passed on (the timeout perhaps cut to 0).
    let polled = unsafe { poll(fds, nfds, timeout) };
    if in_poll {
        super::with_current(|core| core.map(super::Core::after_poll));
    }
    polled
}

/// [`poll_fds`] inside its parking mark.
///
/// # Safety
///
/// As [`poll_fds`]: `nfds` valid entries at `fds`.
unsafe fn poll(
    fds: *mut glib_sys::GPollFD,
    nfds: std::os::raw::c_uint,
    timeout: std::os::raw::c_int,
) -> std::os::raw::c_int {
    let entries: &mut [glib_sys::GPollFD] = if fds.is_null() || nfds == 0 {
        &mut []
    } else {
        // SAFETY: GLib passes `nfds` valid entries at `fds`, which it does
        // not touch until we return.
        unsafe { std::slice::from_raw_parts_mut(fds, nfds as usize) }
    };
    let mut state = FD_POLL.get();
    let now = crate::util::clock::now();
    if timeout == 0
        && state.every != 0
        && now
            .checked_sub(state.last)
            .is_some_and(|since| since < state.every)
        && entries.iter().all(|fd| state.covers(fd))
    {
        // GLib zeroes `revents` before each poll (`g_main_context_query`);
        // zeroed again here, so this turn never sees a stale one.
        for fd in entries.iter_mut() {
            fd.revents = 0;
        }
        return 0;
    }
    state.last = now;
    state.kept = entries.len().min(FD_POLL_KEPT);
    for (kept, fd) in state.polled.iter_mut().zip(entries.iter()) {
        *kept = (fd.fd, fd.events);
    }
    FD_POLL.set(state);
    // SAFETY: the caller's arguments, as g_poll takes them.
    unsafe { glib_sys::g_poll(fds, nfds, timeout) }
}
