//! X9 in real windows: the GTK apps of `examples/`, each driven under a
//! private Xvfb (feature `gtk`). One binary for both, since each runs its
//! app as a child process.

mod common;

mod gtk_demo;
mod search;
