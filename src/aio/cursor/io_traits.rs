//! The traits a [`FileCursor`] implements: futures-io's `AsyncRead`,
//! `AsyncBufRead`, `AsyncWrite` and `AsyncSeek`, and tokio's behind the
//! `tokio` feature, each a thin layer over the cursor's own state machine
//! (`mod.rs`).

use std::io::{self, SeekFrom};
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use super::FileCursor;

impl futures::io::AsyncRead for FileCursor {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut [u8],
    ) -> Poll<io::Result<usize>> {
        self.get_mut().poll_read_into(cx, buf)
    }
}

impl futures::io::AsyncBufRead for FileCursor {
    /// Once per line under `lines()`: what the buffer holds is given
    /// without a call when it holds something.
    #[inline]
    fn poll_fill_buf(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<&[u8]>> {
        let this = self.get_mut();
        if !this.holds_read_data() {
            ready!(this.poll_fill(cx))?;
        }
        Poll::Ready(Ok(this.buffered()))
    }

    #[inline]
    fn consume(self: Pin<&mut Self>, amt: usize) {
        self.get_mut().consume_buffered(amt);
    }
}

impl futures::io::AsyncWrite for FileCursor {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.get_mut().poll_write_from(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.get_mut().poll_flush_writes(cx)
    }

    /// Flushes. The descriptor stays open (the [`File`](crate::aio::File)
    /// is shared): it is closed when the last clone and operation are
    /// gone.
    fn poll_close(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.get_mut().poll_flush_writes(cx)
    }
}

impl futures::io::AsyncSeek for FileCursor {
    fn poll_seek(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        pos: SeekFrom,
    ) -> Poll<io::Result<u64>> {
        let this = self.get_mut();
        ready!(this.poll_started_seek(cx))?;
        this.poll_seek_to(cx, pos)
    }
}

#[cfg(feature = "tokio")]
#[cfg_attr(docsrs, doc(cfg(feature = "tokio")))]
impl tokio::io::AsyncRead for FileCursor {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if buf.remaining() == 0 {
            return this.poll_read_nothing(cx);
        }
        ready!(this.poll_fill(cx))?;
        let have = this.buffered();
        let n = have.len().min(buf.remaining());
        buf.put_slice(&have[..n]);
        this.consume_buffered(n);
        Poll::Ready(Ok(()))
    }
}

#[cfg(feature = "tokio")]
#[cfg_attr(docsrs, doc(cfg(feature = "tokio")))]
impl tokio::io::AsyncBufRead for FileCursor {
    fn poll_fill_buf(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<&[u8]>> {
        futures::io::AsyncBufRead::poll_fill_buf(self, cx)
    }

    fn consume(self: Pin<&mut Self>, amt: usize) {
        self.get_mut().consume_buffered(amt);
    }
}

#[cfg(feature = "tokio")]
#[cfg_attr(docsrs, doc(cfg(feature = "tokio")))]
impl tokio::io::AsyncWrite for FileCursor {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.get_mut().poll_write_from(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.get_mut().poll_flush_writes(cx)
    }

    /// Flushes, as `tokio::fs::File`'s does.
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.get_mut().poll_flush_writes(cx)
    }
}

#[cfg(feature = "tokio")]
#[cfg_attr(docsrs, doc(cfg(feature = "tokio")))]
impl tokio::io::AsyncSeek for FileCursor {
    /// Records the seek; `poll_complete` (or any other call) does it. A
    /// second `start_seek` before the first completed is refused, as
    /// `tokio::fs::File` refuses it.
    fn start_seek(self: Pin<&mut Self>, position: SeekFrom) -> io::Result<()> {
        let this = self.get_mut();
        if this.started_seek.is_some() {
            return Err(io::Error::other(
                "gdex::aio::FileCursor: a seek was started and not completed; poll \
                 `poll_complete` until it is ready before starting another",
            ));
        }
        this.started_seek = Some(position);
        Ok(())
    }

    /// Waits for the writes, then does the seek started (if any) and gives
    /// the position.
    fn poll_complete(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<u64>> {
        let this = self.get_mut();
        match this.started_seek {
            Some(to) => {
                let done = ready!(this.poll_seek_to(cx, to));
                this.started_seek = None;
                Poll::Ready(done)
            }
            None => {
                ready!(this.poll_settle_writes(cx))?;
                Poll::Ready(Ok(this.pos))
            }
        }
    }
}
