//! Placement of long-lived inference clients across a node (issue 16 item
//! 4): reef's own rule, not CASE/MGB's (which places batch tasks and knows
//! no real-time work): each real-time client on the device, among those
//! its model fits, with the fewest real-time clients, as REEF serves one
//! real-time queue per device (REEF §3.1), and best-effort clients then by
//! Algorithm 3 (CASE/MGB §III-B). A child of
//! `place` so that it counts warps as the placer does
//! (`DeviceLimits::warps_per_block`).

use super::{DeviceIdx, DeviceLimits, PlaceError, TaskId, TaskNeeds};

/// Placement of long-lived inference clients (a model loaded for a
/// client, reef's DISB clients) across a node before REEF schedules inside
/// each device (issue 16 item 4; DESIGN.md layer 3, "place first, then
/// schedule inside the device"). CASE/MGB places batch tasks and has no
/// notion of real-time work, so this rule is reef's own:
/// - real-time clients first, each on the device, among those whose free
///   memory covers its model, with the fewest real-time clients placed so
///   far (ties: fewest warps, then lowest index). REEF (§3.1) serves one
///   real-time queue per device and preempts best-effort work for it, so a
///   real-time client alone among real-time clients on its device waits
///   only behind its own requests: that is the device where its latency
///   is protected;
/// - best-effort clients then by Algorithm 3 (memory-safe, fewest warps),
///   which spreads them.
///
/// `clients[i] = (real_time, needs)`; memory is reserved for the client's
/// lifetime. Fails (with the client's index as its task id) when a model
/// fits no device's remaining memory.
pub fn place_inference_clients(
    devices: &[DeviceLimits],
    clients: &[(bool, TaskNeeds)],
) -> Result<Vec<DeviceIdx>, PlaceError> {
    if devices.is_empty() {
        return Err(PlaceError::NoDevices);
    }
    let mut free: Vec<u64> = devices.iter().map(|d| d.memory).collect();
    let mut warps = vec![0u64; devices.len()];
    let mut rt = vec![0u32; devices.len()];
    let mut out = vec![0; clients.len()];
    for pass_rt in [true, false] {
        for (i, &(is_rt, n)) in clients.iter().enumerate() {
            if is_rt != pass_rt {
                continue;
            }
            let key = |d: usize| {
                if is_rt {
                    (rt[d], warps[d])
                } else {
                    (0, warps[d])
                }
            };
            let d = (0..devices.len())
                .filter(|&d| n.memory <= free[d])
                .min_by_key(|&d| (key(d), d))
                .ok_or(PlaceError::NeverFitsMemory {
                    task: TaskId(i as u64),
                    memory: n.memory,
                    largest: free.iter().copied().max().unwrap_or(0),
                })?;
            free[d] -= n.memory;
            warps[d] += devices[d].warps_per_block(n.threads_per_block) as u64 * n.blocks;
            rt[d] += is_rt as u32;
            out[i] = d;
        }
    }
    Ok(out)
}
