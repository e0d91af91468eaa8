//! B5: a late look of the monitor is a stop of the process only for the
//! part of it the monitor did not spend waiting for a CPU. On a loaded
//! machine (more runnable threads than cores, the monitor's among them)
//! the monitor wakes late because the kernel ran other threads first, and
//! the job it watches may well have been among them: that time is the
//! job's, and a stall clock that skipped it would hide a real stall (a
//! 140 ms poll under a 100 ms threshold went unreported in 2 runs of 10
//! beside 12 busy threads on 2 cores, the monitor waking up to 94 ms
//! late). A stopped process (`SIGSTOP`, a debugger, a frozen container)
//! has its threads off the run queue, where that wait does not grow.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::time::{Duration, Instant};

/// The calling thread's time spent runnable but waiting for a CPU, as the
/// kernel counts it: the second field (`run_delay`, in nanoseconds) of
/// Linux's `/proc/thread-self/schedstat`. Where the kernel does not tell
/// (no such file, or scheduler statistics compiled out: zeros), it reads
/// zero, and a late look counts as a stop as it did before.
///
/// The monitor reads it before it sleeps and, when a look is late, after;
/// the reading before may be up to [`CPU_WAIT_EVERY`] old.
pub(super) struct CpuWait {
    file: Option<File>,
    /// The last reading, and when it was taken.
    read: (Duration, Instant),
}

/// How stale the reading before a sleep may be. A reading costs a few
/// microseconds and the monitor looks every 1 to 5 ms while work runs:
/// read before every sleep, it took the monitor from about 0.6 to 1.0% of
/// a core in the `monitor_cpu` row. A stale reading counts the waits since
/// it as this sleep's: a stop is then excused up to this much less, on the
/// safe side (the stall is reported).
const CPU_WAIT_EVERY: Duration = Duration::from_millis(20);

impl CpuWait {
    /// Opens the calling thread's own statistics (the monitor's: the file
    /// stays that thread's however it is read later).
    pub(super) fn of_this_thread() -> CpuWait {
        let file = File::open("/proc/thread-self/schedstat").ok();
        let total = total(file.as_ref());
        CpuWait {
            file,
            read: (total, Instant::now()),
        }
    }

    /// The monitor is about to sleep: reads its wait so far, unless the last
    /// reading is under [`CPU_WAIT_EVERY`] old.
    pub(super) fn before_sleep(&mut self) {
        if self.read.1.elapsed() >= CPU_WAIT_EVERY {
            self.read = (total(self.file.as_ref()), Instant::now());
        }
    }

    /// After a late look at `now`: the wait since the last reading (which
    /// this one replaces).
    pub(super) fn since_reading(&mut self, now: Instant) -> Duration {
        let total = total(self.file.as_ref());
        let waited = total.saturating_sub(self.read.0);
        self.read = (total, now);
        waited
    }
}

/// The thread's wait for a CPU so far. One `pread`, no allocation.
fn total(file: Option<&File>) -> Duration {
    let Some(file) = file else {
        return Duration::ZERO;
    };
    // Three decimal u64s and their separators.
    let mut buf = [0u8; 80];
    let Ok(n) = file.read_at(&mut buf, 0) else {
        return Duration::ZERO;
    };
    buf[..n]
        .split(u8::is_ascii_whitespace)
        .nth(1)
        .and_then(|field| std::str::from_utf8(field).ok())
        .and_then(|field| field.parse().ok())
        .map_or(Duration::ZERO, Duration::from_nanos)
}
