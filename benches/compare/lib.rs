//! Empty: the package is its bench, `main.rs` (cargo wants a library or a
//! binary beside it).
