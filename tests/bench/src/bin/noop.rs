//! The spawn floor's fallback: a process that starts and exits.
fn main() {}
