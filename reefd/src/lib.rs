//! reefd: the REEF daemon, its client protocol and the Rust client API.
//!
//! REEF §3 (Fig. 5) splits the system into an offline part (model
//! preparation, idempotence checking) and an online part that serves
//! inference requests through an RPC interface; this crate is the online
//! part's process: the socket server ([`server`]), the protocol
//! ([`protocol`]), the runtime holding task queues and streams ([`runtime`]),
//! the engine that executes tasks ([`engine`]), metrics ([`metrics`]),
//! configuration ([`config`]), device selection ([`device`]) and the daemon's
//! life cycle ([`daemon`]). Other programs use [`client`] only.

pub mod backend;
pub mod client;
pub mod config;
pub mod daemon;
pub mod device;
pub mod engine;
pub mod metrics;
pub mod protocol;
pub mod runtime;
pub mod server;
