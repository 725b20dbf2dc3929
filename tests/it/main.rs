#[cfg(any(feature = "gcs", feature = "azure"))]
#[macro_use]
mod stores;
#[cfg(feature = "azure")]
mod azure;
mod election;
#[cfg(feature = "gcs")]
mod gcs;
mod hrw;
mod keyed;
mod s3;
mod sigv4;
