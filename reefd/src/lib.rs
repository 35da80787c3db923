//! reefd: the REEF daemon, its client protocol and the Rust client API.
//!
//! REEF §3 (Fig. 5) splits the system into an offline part (model
//! preparation, idempotence checking) and an online part that serves
//! inference requests through an RPC interface; this crate is the online
//! part's process: the socket server ([`server`]), the protocol
//! ([`protocol`]), the runtime holding task queues and streams ([`runtime`]),
//! the engine that executes tasks ([`engine`]), metrics ([`metrics`]),
//! configuration ([`config`]), device selection ([`device`]) and the daemon's
//! life cycle ([`daemon`]). Other programs use [`client`] only, and can
//! depend on this crate with `default-features = false` to get just the
//! protocol and the client.

pub mod client;
#[cfg(feature = "daemon")]
pub mod config;
#[cfg(feature = "daemon")]
pub mod daemon;
#[cfg(feature = "daemon")]
pub mod device;
#[cfg(feature = "daemon")]
pub mod engine;
#[cfg(feature = "daemon")]
pub mod kserve;
pub mod lazy;
#[cfg(feature = "daemon")]
pub mod metrics;
#[cfg(feature = "daemon")]
pub mod npz;
pub mod protocol;
#[cfg(feature = "daemon")]
pub mod runtime;
#[cfg(feature = "daemon")]
pub mod server;
#[cfg(feature = "daemon")]
pub mod tensors;
