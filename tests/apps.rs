//! X9 in real windows: the GTK apps of `examples/` (the demo, the search
//! app, the gtk-rs book's main-loop scenarios), each driven under a
//! private Xvfb (feature `gtk`), and a window's frames beside glib-rs's
//! executor (X3, S11). One binary for all, since each runs its app or
//! window as a child process.

mod common;

mod frames;
mod gtk_demo;
mod main_loop;
mod search;
