//! Talking to S3-compatible object stores.
//!
//! For now this holds only [`sigv4`], the AWS Signature Version 4 signer and
//! verifier. The S3 backend built on it lands here later.

pub mod sigv4;
