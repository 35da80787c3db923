//! What performing the scheduler's actions did: the interpreter's report.

use reef_sched::{ClientId, RequestId};
use std::time::Instant;

/// What performing the scheduler's actions did, in order.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// Kernel `kernel` of `req` entered its device queue; `issued` is the
    /// wall-clock instant it was issued (the end of the control path a live
    /// daemon measures; no decision depends on it).
    Queued {
        req: RequestId,
        kernel: u32,
        issued: Instant,
    },
    /// One launch entered a device queue (a padded or fused launch counts
    /// once, with a [`Outcome::Queued`] per kernel in it).
    Launched(LaunchKind),
    /// Every kernel of `req` completed.
    Done { req: RequestId, client: ClientId },
    /// The policy does not serve `req`.
    Rejected { req: RequestId, client: ClientId },
    /// `req` restarts from kernel `from_kernel` (REEF §4.4).
    Restored { req: RequestId, from_kernel: u32 },
    /// An action the device refused, or one for a request the caller does
    /// not know: the action, and why; `req`: the request whose kernel was
    /// not launched. Such a request still reaches [`Outcome::Done`] (the
    /// scheduler is told the kernel is over, so its stream and client go
    /// on), with outputs that are not its own: the caller fails it.
    Failed {
        action: String,
        error: String,
        req: Option<RequestId>,
    },
}

/// What kind of launch entered a device queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LaunchKind {
    /// One kernel.
    Kernel,
    /// A padded launch (REEF §5.1): real-time kernel `kernel` of `req` with
    /// `be_parts` best-effort parts.
    Padded {
        req: RequestId,
        kernel: u32,
        be_parts: usize,
    },
    /// The rest of a partly padded or split kernel.
    Rest,
    /// An Aker fused launch (an LC kernel with a BE block range).
    Fused,
}
