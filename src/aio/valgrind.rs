//! What valgrind's memcheck cannot see for itself: bytes the kernel wrote
//! into a buffer outside a system call it knows. An io_uring read is one:
//! the kernel fills the buffer while it completes the request, and memcheck,
//! which only knows `io_uring_enter` as a call that takes no buffer, still
//! counts those bytes uninitialised, so every comparison of what was read
//! (`assert_eq!` on the buffer) is reported ("Conditional jump or move
//! depends on uninitialised value(s)"). [`kernel_wrote`] tells it, by
//! memcheck's `VALGRIND_MAKE_MEM_DEFINED` client request.
//!
//! A client request is a special sequence of instructions (valgrind.h's
//! `VALGRIND_DO_CLIENT_REQUEST_EXPR`) that valgrind recognises as it
//! translates the code, and that does nothing on a real CPU: no branch, no
//! call, a handful of register operations; so it costs a completion nothing
//! to make it whether or not valgrind runs. Written here (as corosensei
//! writes its own, for its stacks) for the two architectures gdex is tested
//! on; on others it is nothing at all. The crates that wrap client requests
//! generate their bindings from valgrind's headers with bindgen, which
//! needs libclang to build: a dependency of every build of gdex for a debug
//! aid.

/// `VG_USERREQ__MAKE_MEM_DEFINED` (memcheck.h): `VG_USERREQ_TOOL_BASE('M',
/// 'C')`, the first of memcheck's requests, plus 2.
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
const MAKE_MEM_DEFINED: usize = (((b'M' as usize) << 24) | ((b'C' as usize) << 16)) + 2;

/// Tells memcheck (when the process runs under it; nothing otherwise) that
/// the `len` bytes at `at` are initialised: the kernel wrote them. Only the
/// bytes the kernel reports written may be named, or memcheck would miss a
/// read of bytes nobody wrote.
#[inline(always)]
pub(super) fn kernel_wrote(at: *const u8, len: usize) {
    #[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
    client_request([MAKE_MEM_DEFINED, at as usize, len, 0, 0, 0]);
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    let _ = (at, len);
}

/// Makes the client request `args` (the request, then its five
/// arguments); the answer, which memcheck's requests used here do not
/// need, is dropped.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn client_request(args: [usize; 6]) {
    // SAFETY: valgrind.h's amd64 sequence. On a CPU, the four rotations of
    // rdi add up to 128 bits, two whole turns, so rdi ends as it began, and
    // `xchg rbx, rbx` changes nothing: only the flags change, which `asm!`
    // assumes anyway (no `preserves_flags`); rdx is declared written. Under
    // valgrind, the request reads the six words `args` points to (kept
    // alive, in memory, for the asm's duration: the default options let it
    // read memory) and writes its answer to rdx; MAKE_MEM_DEFINED changes
    // only valgrind's own records of the bytes it names, never the bytes.
    // Nothing is pushed on the stack.
    unsafe {
        std::arch::asm!(
            "rol rdi, 3",
            "rol rdi, 13",
            "rol rdi, 61",
            "rol rdi, 51",
            "xchg rbx, rbx",
            inout("rdx") 0usize => _,
            in("rax") args.as_ptr(),
            options(nostack),
        );
    }
}

/// Makes the client request `args` (see the x86_64 one).
#[cfg(target_arch = "aarch64")]
#[inline(always)]
fn client_request(args: [usize; 6]) {
    // SAFETY: valgrind.h's arm64 sequence. On a CPU, the four rotations of
    // x12 add up to 128 bits, so x12 ends as it began, and `orr x10, x10,
    // x10` changes nothing; x3 is declared written. Under valgrind, the
    // request reads the six words x4 points to (`args`, kept alive in
    // memory for the asm's duration) and writes its answer to x3;
    // MAKE_MEM_DEFINED changes only valgrind's own records of the bytes it
    // names. Nothing is pushed on the stack.
    unsafe {
        std::arch::asm!(
            "ror x12, x12, #3",
            "ror x12, x12, #13",
            "ror x12, x12, #51",
            "ror x12, x12, #61",
            "orr x10, x10, x10",
            inout("x3") 0usize => _,
            in("x4") args.as_ptr(),
            options(nostack),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Outside valgrind the request is nothing: it runs on the CPU and
    /// leaves the bytes it names as they were.
    #[test]
    fn outside_valgrind_a_request_changes_nothing() {
        let bytes = vec![7u8; 16];
        kernel_wrote(bytes.as_ptr(), bytes.len());
        kernel_wrote(bytes.as_ptr(), 0);
        assert_eq!(bytes, [7u8; 16]);
    }
}
