//! `cargo xtask bench-hrw`: runs `benches/hrw.rs` and prints one table.

pub fn run(_args: &[String]) -> Result<(), String> {
    Err("not written yet".into())
}
