//! Answers delivered off the lock, on their own threads (RT apart from
//! the rest).

use super::*;

/// An outcome to tell a client once the lock is released.
pub(super) struct Delivery {
    pub(super) task: u64,
    pub(super) waiter: Waiter,
    pub(super) result: Result<TaskResult, Failure>,
    /// Outputs still to read from the device ([`tensors::resolve_outputs`]).
    pub(super) later: Vec<tensors::PendingOutput>,
    /// The stream's count of answers being read, released once delivered.
    pub(super) answering: Option<Arc<std::sync::atomic::AtomicUsize>>,
    /// An RT request's: read on the RT answers thread.
    pub(super) rt: bool,
}

/// Delivers outcomes whose outputs must first be read from the device: the
/// simulated device's CPU build may still be computing them, and neither
/// the lock nor the pacer (which advances the device) waits for it. Two
/// threads, one for RT answers and one for the others ([`Runtime`]'s
/// `answers`): an RT answer never waits in line behind a best-effort one
/// whose outputs a slow CPU build is still computing (reef-sim computes
/// each stream's values on its own worker, sim/src/realvalues.rs).
pub(super) fn spawn_answers(
    pending: Arc<std::sync::atomic::AtomicUsize>,
    name: &str,
) -> std::sync::mpsc::Sender<Delivery> {
    let (tx, rx) = std::sync::mpsc::channel::<Delivery>();
    std::thread::Builder::new()
        .name(name.into())
        .spawn(move || {
            for mut d in rx {
                if let Ok(r) = &mut d.result {
                    tensors::resolve_outputs(r, std::mem::take(&mut d.later));
                }
                deliver(d.task, d.waiter, d.result);
                if let Some(a) = &d.answering {
                    a.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
                }
                pending.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
            }
        })
        .expect("spawn the answers thread");
    tx
}

pub(super) fn deliver(task: u64, w: Waiter, r: Result<TaskResult, Failure>) {
    match w {
        Waiter::Reply(to) => {
            let id = to.id;
            to.send(match r {
                Ok(t) => ServerMessage::Reply {
                    id,
                    result: Reply::InferDone(t),
                },
                Err(f) => ServerMessage::Error {
                    id: Some(id),
                    code: f.code,
                    message: f.message,
                },
            });
        }
        Waiter::Event(out) => {
            let event = match r {
                Ok(t) => Event::TaskDone(t),
                Err(f) => Event::TaskFailed {
                    task,
                    code: f.code,
                    message: f.message,
                },
            };
            out.send(ServerMessage::Event { event });
        }
    }
}
