mod election;
mod hrw;
mod s3;
mod sigv4;
