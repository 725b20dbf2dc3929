//! The `hoplock` command line.

fn main() {}
