mod election;
mod hrw;
mod keyed;
mod s3;
mod sigv4;
