//! [`WriteBehind`]: a buffer's write, going on after short writes, as a
//! future the cursor can hold (and hand on when it is dropped), which
//! gives the buffer back or says how far the data got.

use std::future::Future;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use super::super::op::WriteAt;
use super::super::File;

/// A buffer's write to `start..`, going on after short writes (from where
/// each stopped), that gives the buffer back (emptied) or says how far it
/// got: [`File::write_all_at`] as a nameable future.
pub(super) struct WriteBehind {
    file: File,
    /// `None` once it failed at its first poll (the error waits in `failed`).
    op: Option<WriteAt>,
    start: u64,
    /// Bytes of the buffer written before `op`'s.
    done: usize,
    failed: Option<WriteFailed>,
}

pub(super) struct WriteFailed {
    pub(super) error: crate::Error,
    /// Where the data written ends: `start` plus what was written.
    pub(super) written_to: u64,
}

impl WriteBehind {
    pub(super) fn new(file: &File, buf: Vec<u8>, start: u64) -> WriteBehind {
        WriteBehind {
            file: file.clone(),
            op: Some(file.write_from(buf, 0, start)),
            start,
            done: 0,
            failed: None,
        }
    }

    /// A write that failed already: gives `failed` at its first poll.
    pub(super) fn failed(file: &File, failed: WriteFailed) -> WriteBehind {
        WriteBehind {
            file: file.clone(),
            op: None,
            start: failed.written_to,
            done: 0,
            failed: Some(failed),
        }
    }
}

impl Future for WriteBehind {
    type Output = Result<Vec<u8>, WriteFailed>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        loop {
            let Some(op) = &mut this.op else {
                return Poll::Ready(Err(this
                    .failed
                    .take()
                    .expect("a WriteBehind is polled after it finished")));
            };
            let fail = |this: &mut WriteBehind, error| {
                this.op = None;
                Poll::Ready(Err(WriteFailed {
                    error,
                    written_to: this.start + this.done as u64,
                }))
            };
            match ready!(Pin::new(op).poll(cx)) {
                Err(error) => return fail(this, error),
                Ok((0, _)) => {
                    let error = this.file.error(
                        libc::EIO,
                        "writing to",
                        "the system wrote nothing (0 bytes)",
                    );
                    return fail(this, error);
                }
                Ok((written, mut buf)) => {
                    this.done += written;
                    if this.done == buf.len() {
                        this.op = None;
                        buf.clear();
                        return Poll::Ready(Ok(buf));
                    }
                    let at = this.start + this.done as u64;
                    this.op = Some(this.file.write_from(buf, this.done, at));
                }
            }
        }
    }
}
