mod election;
mod hrw;
mod sigv4;
