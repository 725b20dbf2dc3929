//! Rendezvous (highest-random-weight) ownership. Being written.
