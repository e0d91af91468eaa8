//! Fiber stacks: guard-paged `mmap`s, pooled per thread (F1), and the
//! `SIGSEGV` handler that turns a run into a guard page into a clear message
//! (F5).
//!
//! A stack is `size` bytes of read-write memory with one `PROT_NONE` page
//! below it. Stacks are created and reused on the thread that runs their
//! fibers: each thread keeps up to [`POOLED`] finished stacks, so a busy
//! program does not `mmap` per fiber.
//!
//! Overflow: Rust probes every page of a large frame, so running off a fiber
//! stack always faults inside its guard page. While a fiber runs, its guard
//! page's range sits in a thread-local that the handler (on the thread's
//! alternate signal stack) compares with the faulting address. A match
//! prints a message and aborts; anything else goes to the handler that was
//! installed before ours (std's own stack-overflow report, or the default).

use std::cell::{Cell, RefCell};
use std::io;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Once, OnceLock};

use corosensei::stack::{Stack, StackPointer};

/// How many finished stacks each thread keeps for reuse.
pub(crate) const POOLED: usize = 16;

static MAPPED: AtomicUsize = AtomicUsize::new(0);

/// How many fiber stacks this process has mapped so far (F1: a pool reuses
/// them, so this grows with the number of fibers alive at once, not with the
/// number spawned).
///
/// ```
/// let before = gdex::fiber::stacks_mapped();
/// let pool = gdex::ThreadPool::builder().workers(1).build().unwrap();
/// for i in 0..100 {
///     let fiber = pool.scheduler().spawn_fiber(move || i);
///     assert_eq!(gdex::block_on(fiber).unwrap(), i);
/// }
/// assert!(gdex::fiber::stacks_mapped() - before <= 2);
/// ```
pub fn stacks_mapped() -> usize {
    MAPPED.load(Ordering::Relaxed)
}

#[inline]
fn page_size() -> usize {
    // A plain load once known (every fiber switch asks): 0 until then.
    static PAGE: AtomicUsize = AtomicUsize::new(0);
    match PAGE.load(Ordering::Relaxed) {
        0 => {
            // SAFETY: sysconf has no preconditions.
            let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as usize;
            PAGE.store(page, Ordering::Relaxed);
            page
        }
        page => page,
    }
}

/// One fiber stack: `[guard page][size bytes]`, growing down from `base`.
pub(crate) struct FiberStack {
    /// Lowest address of the mapping: the guard page starts here.
    map: usize,
    /// Length of the mapping, guard page included.
    len: usize,
    /// Tells valgrind this is a stack (a no-op elsewhere), so that switching
    /// onto it is not taken for stack-pointer garbage.
    _valgrind: corosensei::stack::valgrind::ValgrindStackRegistration,
}

impl FiberStack {
    /// A new mapping of `len` bytes ([`mapping_len`]), its lowest page the
    /// guard page.
    fn new(len: usize) -> io::Result<FiberStack> {
        let page = page_size();
        install_overflow_handler();
        // SAFETY: an anonymous private mapping at an address of the kernel's
        // choosing; no existing memory is touched.
        let map = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE | libc::MAP_STACK,
                -1,
                0,
            )
        };
        if map == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let stack = FiberStack {
            map: map as usize,
            len,
            _valgrind: corosensei::stack::valgrind::ValgrindStackRegistration::new(map.cast(), len),
        };
        // SAFETY: the first page of the mapping we just made.
        if unsafe { libc::mprotect(map, page, libc::PROT_NONE) } != 0 {
            return Err(io::Error::last_os_error());
        }
        MAPPED.fetch_add(1, Ordering::Relaxed);
        Ok(stack)
    }

    /// The guard page's address range.
    /// Where the mapping starts: its guard page.
    pub(crate) fn map(&self) -> usize {
        self.map
    }
}

impl Drop for FiberStack {
    fn drop(&mut self) {
        // SAFETY: exactly the mapping made in `new`, unmapped once.
        unsafe { libc::munmap(self.map as *mut libc::c_void, self.len) };
    }
}

// SAFETY: `base` is the top of a read-write region of `len - page` bytes
// whose lowest page-aligned neighbour below is the PROT_NONE guard page, and
// `limit` is the bottom of that guard page; both are page-aligned, which
// satisfies STACK_ALIGNMENT. The memory stays mapped until the stack drops.
unsafe impl Stack for FiberStack {
    fn base(&self) -> StackPointer {
        StackPointer::new(self.map + self.len).expect("a mapping is never at address 0")
    }

    fn limit(&self) -> StackPointer {
        StackPointer::new(self.map).expect("a mapping is never at address 0")
    }
}

thread_local! {
    static POOL: RefCell<Vec<FiberStack>> = const { RefCell::new(Vec::new()) };
    /// The guard page of the fiber running on this thread; (0, 0) if none.
    /// Read by the signal handler: a const-initialised, drop-free
    /// thread-local is a plain TLS slot, safe to read there.
    static GUARD: Cell<(usize, usize)> = const { Cell::new((0, 0)) };
    static ALTSTACK_READY: Cell<bool> = const { Cell::new(false) };
}

/// A stack of at least `size` usable bytes: a pooled one of that size if
/// this thread has one, a new mapping otherwise.
pub(crate) fn acquire(size: usize) -> io::Result<FiberStack> {
    ensure_altstack();
    let len = mapping_len(size)?;
    let pooled = POOL.with(|pool| {
        let mut pool = pool.borrow_mut();
        // The stack given back last first: its top is the likeliest to be
        // in the cache still (and taking it moves nothing).
        let i = pool.iter().rposition(|s| s.len == len)?;
        Some(pool.swap_remove(i))
    });
    match pooled {
        Some(stack) => Ok(stack),
        None => FiberStack::new(len),
    }
}

/// The length of the mapping of a stack of at least `size` usable bytes:
/// whole pages, and the guard page below them. A size so large that this
/// does not fit in an address is refused as the kernel would refuse it.
#[inline]
fn mapping_len(size: usize) -> io::Result<usize> {
    let page = page_size();
    // A page is a power of two: a mask rounds up where a division would
    // be the costliest instruction of a fiber's start.
    debug_assert!(page.is_power_of_two());
    size.checked_add(2 * page - 1)
        .map(|len| len & !(page - 1))
        .ok_or_else(|| io::Error::from_raw_os_error(libc::ENOMEM))
}

/// Gives a finished fiber's stack back to this thread's pool.
pub(crate) fn release(stack: FiberStack) {
    POOL.with(|pool| {
        let mut pool = pool.borrow_mut();
        if pool.len() < POOLED {
            pool.push(stack);
        }
    });
}

/// Marks the guard page of the stack mapped at `map` as the running
/// fiber's until the returned value is dropped.
#[inline]
pub(crate) fn enter(map: usize) -> impl Drop {
    crate::util::scoped(&GUARD, (map, map + page_size()))
}

/// Overflow is reported on the alternate signal stack, since the fiber's
/// own stack is exhausted. Threads started by std have one; others (a GLib
/// thread running a context) get one here, kept for the thread's life.
fn ensure_altstack() {
    if ALTSTACK_READY.with(Cell::get) {
        return;
    }
    // SAFETY: stack_t is plain data; all-zero is a valid value.
    let mut current: libc::stack_t = unsafe { std::mem::zeroed() };
    // SAFETY: with a null new stack, sigaltstack only reads the current one
    // into `current`.
    let status = unsafe { libc::sigaltstack(std::ptr::null(), &mut current) };
    let enabled = status == 0 && current.ss_flags & libc::SS_DISABLE == 0;
    if !enabled {
        let size = (libc::SIGSTKSZ).max(64 * 1024);
        // SAFETY: a fresh anonymous mapping, handed to the kernel as this
        // thread's signal stack and deliberately never unmapped (the thread
        // may take a signal until it exits).
        unsafe {
            let map = libc::mmap(
                std::ptr::null_mut(),
                size,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            );
            if map != libc::MAP_FAILED {
                let stack = libc::stack_t {
                    ss_sp: map,
                    ss_flags: 0,
                    ss_size: size,
                };
                libc::sigaltstack(&stack, std::ptr::null_mut());
            }
        }
    }
    ALTSTACK_READY.with(|r| r.set(true));
}

/// The handlers that were installed before ours, for chaining.
struct Previous {
    segv: libc::sigaction,
    bus: libc::sigaction,
}

// SAFETY: written once before our handler is installed, read-only after;
// `sigaction` is plain data.
unsafe impl Sync for Previous {}
// SAFETY: as above.
unsafe impl Send for Previous {}

static PREVIOUS: OnceLock<Previous> = OnceLock::new();

fn install_overflow_handler() {
    static INSTALL: Once = Once::new();
    INSTALL.call_once(|| {
        // SAFETY: we fill a zeroed sigaction with a valid SA_SIGINFO handler
        // and an empty mask; the previous actions are saved before ours can
        // run, so the handler always finds them.
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = overflow_handler as *const () as usize;
            action.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK;
            libc::sigemptyset(&mut action.sa_mask);
            let mut segv: libc::sigaction = std::mem::zeroed();
            let mut bus: libc::sigaction = std::mem::zeroed();
            libc::sigaction(libc::SIGSEGV, std::ptr::null(), &mut segv);
            libc::sigaction(libc::SIGBUS, std::ptr::null(), &mut bus);
            let _ = PREVIOUS.set(Previous { segv, bus });
            libc::sigaction(libc::SIGSEGV, &action, std::ptr::null_mut());
            libc::sigaction(libc::SIGBUS, &action, std::ptr::null_mut());
        }
    });
}

const OVERFLOW_MESSAGE: &[u8] =
    b"\ngdex: a gdex fiber overflowed its stack (it ran into the guard \
page below its stack). Give it a bigger stack with gdex::fiber::Builder::stack_size or \
ThreadPoolBuilder::fiber_stack_size, or make the recursion shallower. Aborting.\n";

extern "C" fn overflow_handler(
    signum: libc::c_int,
    info: *mut libc::siginfo_t,
    ucontext: *mut libc::c_void,
) {
    // SAFETY: the kernel passes a valid siginfo for an SA_SIGINFO handler.
    let addr = unsafe { (*info).si_addr() } as usize;
    let (lo, hi) = GUARD.try_with(Cell::get).unwrap_or((0, 0));
    if lo <= addr && addr < hi {
        // SAFETY: write(2) and abort(3) are async-signal-safe.
        unsafe {
            libc::write(2, OVERFLOW_MESSAGE.as_ptr().cast(), OVERFLOW_MESSAGE.len());
            libc::abort();
        }
    }
    // Not ours: hand the signal to whoever had it before.
    let Some(previous) = PREVIOUS.get() else {
        return;
    };
    let previous = if signum == libc::SIGBUS {
        &previous.bus
    } else {
        &previous.segv
    };
    // SAFETY: we call the previous handler the way it asked to be called
    // (with siginfo or without), or restore the default action and return so
    // that the faulting instruction runs again and the default kills us.
    unsafe {
        if previous.sa_sigaction == libc::SIG_DFL || previous.sa_sigaction == libc::SIG_IGN {
            libc::sigaction(signum, previous, std::ptr::null_mut());
        } else if previous.sa_flags & libc::SA_SIGINFO != 0 {
            let handler: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) =
                std::mem::transmute(previous.sa_sigaction);
            handler(signum, info, ucontext);
        } else {
            let handler: extern "C" fn(libc::c_int) = std::mem::transmute(previous.sa_sigaction);
            handler(signum);
        }
    }
}
