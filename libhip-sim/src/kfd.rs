//! The simulated libamdhip64 on a KFD node: HSA queues created through
//! `/dev/kfd` as ROCr creates them, and the link by which the FUSE fake
//! KFD reaches the simulated GPU for REEF's resets. Only when
//! [`KFD_ENV`] names a KFD node (the FUSE fake, reef-ioctl's
//! `fake::FakeKfd`); without it the library opens no device file.
//!
//! - **Queues.** clr (ROCm/clr f9f995c, rocclr/device/rocm/rocdevice.cpp
//!   `Device::acquireQueue` and `getQueueFromPool`) keeps a pool of HSA
//!   queues per priority (low, normal, high) and device: a new stream gets
//!   a new HSA queue (`hsa_queue_create`, which ROCr turns into
//!   AMDKFD_IOC_CREATE_QUEUE through libhsakmt) while the pool holds fewer
//!   than `GPU_MAX_HW_QUEUES` (rocclr/utils/flags.hpp: "The maximum number
//!   of HW queues allocated per device", default 4) and none of it is idle
//!   (refCount 0); once the pool is full, the queue with the fewest
//!   streams. A queue is released to the pool, not destroyed, when its
//!   stream is (`Device::releaseQueue` destroys only CU-masked ones). Since
//!   hip::Stream derives from amd::HostQueue (clr e3633dc8f, Feb 2023) the
//!   queue is acquired when the stream is created (`HostQueue` constructor,
//!   `Thread::Init` → `createVirtualDevice` → `VirtualGPU::create`); before
//!   it (ROCm 5.2's `Stream::asHostQueue`) at the stream's first use. Here:
//!   reef-sim's queue pool per priority (`hw_queues`, set from
//!   `GPU_MAX_HW_QUEUES`; least-used reuse past it) decides which hardware
//!   queue a stream's packets go to, and the first stream on a hardware
//!   queue creates its KFD queue at `hipStreamCreate*`, as current clr
//!   does. Not modelled: reuse of an idle queue of a destroyed stream
//!   (reef-sim keeps the destroyed stream's queue in its pool count), so a
//!   program that destroys and creates streams gets new queues here where
//!   clr would hand it an idle one; reefd keeps its streams for that reason
//!   (reefd/src/device/hip/queues.rs).
//! - **The link.** The REEF patch's WAVE_RESET writes SQ_CMD (a register)
//!   and its CLEAR_QUEUE rewrites the ring (user memory); the fake KFD is
//!   another process, so it reaches this library's GPU through a Unix
//!   socket ([`LINK_ENV`]) instead: `wave_reset PID GPU_ID Q1,Q2` ends the
//!   running work groups of those KFD queues (driver-sim's
//!   `kill_hw_queues`), `clear_queue PID GPU_ID Q` turns the queue's
//!   unfetched kernels into no-ops that still complete (`clear_hw_queue`);
//!   each answered `ok N` after it is applied, so the fake's ioctl returns
//!   after its effect. A request for another process, or a queue this
//!   library did not create, is answered `err …` (the fake then fails the
//!   ioctl with EIO).

use std::collections::HashMap;
use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};

use reef_driver_sim::driver::Driver;
use reef_ioctl::kfd::abi::{KfdIoctlCreateQueueArgs, KFD_IOC_QUEUE_TYPE_COMPUTE_AQL};
use reef_ioctl::Kfd;

/// The KFD node the library opens (ROCr's `/dev/kfd`).
pub const KFD_ENV: &str = "REEF_LIBHIP_SIM_KFD";
/// The KFD topology's nodes directory, for each GPU's `gpu_id`
/// (default `/sys/class/kfd/kfd/topology/nodes`, as libhsakmt reads it).
pub const TOPOLOGY_ENV: &str = "REEF_LIBHIP_SIM_KFD_TOPOLOGY";
/// The Unix socket the fake KFD reaches the simulated GPU through.
pub const LINK_ENV: &str = "REEF_LIBHIP_SIM_KFD_LINK";
/// clr's queue-pool bound per priority and device (module doc).
pub const MAX_HW_QUEUES_ENV: &str = "GPU_MAX_HW_QUEUES";

/// Ring size of each queue in bytes: 1024 AQL packets of 64 bytes.
const RING_BYTES: usize = 1024 * 64;

/// The library's KFD queues.
pub struct KfdQueues {
    kfd: Kfd,
    /// Each device's KFD gpu_id.
    gpu_ids: Vec<u32>,
    /// (device, reef-sim hardware queue) -> KFD queue id, and back.
    queues: HashMap<(usize, u32), u32>,
    by_id: HashMap<u32, (usize, u32)>,
    /// The rings (user memory the KFD was given), kept for the queues' life.
    _rings: Vec<Box<[u8]>>,
}

/// GPU nodes of a KFD topology directory in node order (CPU nodes have
/// gpu_id 0), as libhsakmt enumerates them.
fn gpu_ids(dir: &Path) -> Result<Vec<u32>, String> {
    let mut nodes: Vec<(u32, u32)> = Vec::new();
    let rd = std::fs::read_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    for e in rd.flatten() {
        let Some(n) = e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
            continue;
        };
        let f = e.path().join("gpu_id");
        let id = std::fs::read_to_string(&f)
            .map_err(|e| format!("{}: {e}", f.display()))?
            .trim()
            .parse::<u32>()
            .map_err(|e| format!("{}: {e}", f.display()))?;
        if id != 0 {
            nodes.push((n, id));
        }
    }
    nodes.sort_unstable();
    Ok(nodes.into_iter().map(|(_, id)| id).collect())
}

impl KfdQueues {
    /// Opens the KFD node named by [`KFD_ENV`] (None when unset) and
    /// enables the runtime, as ROCr does at start (AMDKFD_IOC_RUNTIME_ENABLE;
    /// EBUSY: already enabled).
    pub fn open(devices: usize) -> Result<Option<KfdQueues>, String> {
        let Some(path) = std::env::var_os(KFD_ENV) else {
            return Ok(None);
        };
        let kfd = Kfd::open(&path).map_err(|e| e.to_string())?;
        if kfd.version().has_debugger_api() {
            if let Err(e) = kfd.runtime_enable(0, true) {
                if e.errno().map(|n| n as i32) != Some(libc::EBUSY) {
                    return Err(e.to_string());
                }
            }
        }
        let topo = std::env::var_os(TOPOLOGY_ENV)
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from("/sys/class/kfd/kfd/topology/nodes"));
        let ids = gpu_ids(&topo)?;
        if ids.len() < devices {
            return Err(format!(
                "{} lists {} GPU node(s) for {devices} simulated device(s)",
                topo.display(),
                ids.len()
            ));
        }
        Ok(Some(KfdQueues {
            kfd,
            gpu_ids: ids,
            queues: HashMap::new(),
            by_id: HashMap::new(),
            _rings: Vec::new(),
        }))
    }

    /// Stream `h` was created: the first stream on its hardware queue
    /// creates the queue's KFD queue (module doc). Returns its id.
    pub fn stream_created(&mut self, driver: &Driver, h: u64) -> Result<u32, String> {
        let (dev, hwq) = driver.stream_hw_queue(h).map_err(|e| format!("{e:?}"))?;
        if let Some(&q) = self.queues.get(&(dev, hwq)) {
            return Ok(q);
        }
        let ring = vec![0u8; RING_BYTES].into_boxed_slice();
        let mut a = KfdIoctlCreateQueueArgs {
            ring_base_address: ring.as_ptr() as u64,
            ring_size: RING_BYTES as u32,
            gpu_id: self.gpu_ids[dev],
            queue_type: KFD_IOC_QUEUE_TYPE_COMPUTE_AQL,
            queue_percentage: 100,
            // ROCr's default (HSA_AMD_QUEUE_PRIORITY_NORMAL); the fake
            // KFD does not schedule by it.
            queue_priority: 7,
            ..Default::default()
        };
        let q = self.kfd.create_queue(&mut a).map_err(|e| e.to_string())?;
        self._rings.push(ring);
        self.queues.insert((dev, hwq), q);
        self.by_id.insert(q, (dev, hwq));
        Ok(q)
    }

    /// A link request (module doc) applied to `driver`: `ok N` or `err …`.
    pub fn apply(&self, driver: &mut Driver, line: &str) -> String {
        let mut it = line.split_whitespace();
        let (Some(op), Some(pid), Some(gpu), ids) = (it.next(), it.next(), it.next(), it.next())
        else {
            return "err malformed request".into();
        };
        if pid.parse::<u32>().ok() != Some(std::process::id()) {
            return format!("err process {pid} is not this one");
        }
        let Some(dev) = gpu
            .parse::<u32>()
            .ok()
            .and_then(|g| self.gpu_ids.iter().position(|&x| x == g))
        else {
            return format!("err gpu_id {gpu} is not a device of this library");
        };
        let mut hwqs = Vec::new();
        for id in ids.unwrap_or("").split(',').filter(|s| !s.is_empty()) {
            match id.parse::<u32>().ok().and_then(|q| self.by_id.get(&q)) {
                Some(&(d, q)) if d == dev => hwqs.push(q),
                _ => return format!("err queue {id} is not a queue of this library on gpu {gpu}"),
            }
        }
        match op {
            "wave_reset" => format!("ok {}", driver.kill_hw_queues(dev, &hwqs)),
            "clear_queue" if hwqs.len() == 1 => {
                format!("ok {}", driver.clear_hw_queue(dev, hwqs[0]))
            }
            _ => format!("err unknown request {op}"),
        }
    }
}

/// Serves the link on [`LINK_ENV`]'s socket, when set, on a thread of its
/// own; `apply` runs one request on the library's state.
pub fn serve_link(apply: fn(&str) -> String) -> Result<(), String> {
    let Some(path) = std::env::var_os(LINK_ENV) else {
        return Ok(());
    };
    let _ = std::fs::remove_file(&path);
    let l = std::os::unix::net::UnixListener::bind(&path)
        .map_err(|e| format!("{}: {e}", Path::new(&path).display()))?;
    std::thread::Builder::new()
        .name("reef-libhip-sim-kfd-link".into())
        .spawn(move || {
            for c in l.incoming().flatten() {
                let mut line = String::new();
                let mut r = std::io::BufReader::new(&c);
                if r.read_line(&mut line).is_err() {
                    continue;
                }
                let answer = apply(line.trim());
                let _ = writeln!(&c, "{answer}");
            }
        })
        .map_err(|e| e.to_string())?;
    Ok(())
}
