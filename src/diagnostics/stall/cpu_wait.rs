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
use std::time::Duration;

/// The calling thread's time spent runnable but waiting for a CPU, as the
/// kernel counts it: the second field (`run_delay`, in nanoseconds) of
/// Linux's `/proc/thread-self/schedstat`. Where the kernel does not tell
/// (no such file, or scheduler statistics compiled out: zeros), it reads
/// zero, and a late look counts as a stop as it did before.
pub(super) struct CpuWait(Option<File>);

impl CpuWait {
    /// Opens the calling thread's own statistics (the monitor's: the file
    /// stays that thread's however it is read later).
    pub(super) fn of_this_thread() -> CpuWait {
        CpuWait(File::open("/proc/thread-self/schedstat").ok())
    }

    /// The thread's wait for a CPU so far. One `pread`, no allocation.
    pub(super) fn total(&self) -> Duration {
        let Some(file) = &self.0 else {
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
}
