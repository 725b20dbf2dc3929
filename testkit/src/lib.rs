//! Test equipment for hoplock and for users' own tests, free of any
//! simulator:
//!
//! - [`fake_s3`]: a faithful fake S3 (SigV4, conditional writes, S3's
//!   answers) that can be made to misbehave the ways real providers do, and
//!   a hyper server for it over any listener;
//! - [`linearizability`]: a checker that decides whether a recorded history
//!   of operations on one key could have come from an atomic
//!   compare-and-swap register;
//! - [`fenced_downstream`]: a fenced resource on a loopback port that
//!   leader-only jobs write to with their fencing token, recording what it
//!   accepted and refused;
//! - [`fault_proxy`]: a TCP proxy for HTTP/1.1 that sits between a real
//!   S3 client and a real S3 server, adds latency, stalls, dropped replies,
//!   partitions, hang-ups and resets, and records every exchange it
//!   forwarded, for chaos tests of the real binary;
//! - [`acting`]: a log that keyed writers' work keeps of when it acted for
//!   which key, and the single-writer check over it.
//!
//! The simulator runs the fake over its simulated network and audits it
//! with the checker; `hoplock check-s3` serves the fake on loopback when no
//! endpoint is given and judges real providers with the same checker.

pub mod acting;
pub mod fake_s3;
pub mod fault_proxy;
pub mod fenced_downstream;
pub mod linearizability;
