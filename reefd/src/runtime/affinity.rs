//! Where the daemon's threads run: the device thread's CPUs and nice value
//! (`daemon.device_cpus`, `daemon.device_nice`) and SCHED_FIFO for the
//! request threads (`daemon.realtime_priority`).

/// Where the thread that runs the device runs (`daemon.device_cpus`,
/// `daemon.device_nice`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Placement {
    /// CPUs it may use; empty: any.
    pub cpus: Vec<usize>,
    /// Its nice value.
    pub nice: i32,
}

impl Placement {
    /// An error naming the first of `cpus` the calling thread may not use
    /// (it does not exist, or a cpuset or `taskset` excludes it).
    pub fn check(&self) -> anyhow::Result<()> {
        let Some(allowed) = Placement::save().cpus else {
            return Ok(());
        };
        let usable: Vec<usize> = (0..libc::CPU_SETSIZE as usize)
            // SAFETY: CPU_ISSET reads the set at an index below CPU_SETSIZE.
            .filter(|&c| unsafe { libc::CPU_ISSET(c, &allowed) })
            .collect();
        if let Some(c) = self.cpus.iter().find(|c| !usable.contains(c)) {
            anyhow::bail!(
                "daemon.device_cpus names CPU {c}, which reefd may not use; it may use CPUs {usable:?}"
            );
        }
        Ok(())
    }

    /// Applies this placement to the calling thread. A CPU that does not
    /// exist is an error; a nice value the daemon may not take (below 0
    /// without CAP_SYS_NICE) is a warning, and the thread keeps its own.
    pub fn apply(&self) -> anyhow::Result<()> {
        if !self.cpus.is_empty() {
            set_cpus(&self.cpus).map_err(|e| {
                anyhow::anyhow!(
                    "cannot run the device thread on CPUs {:?} (daemon.device_cpus): {e}; name CPUs this machine has (see nproc)",
                    self.cpus
                )
            })?;
        }
        if self.nice != 0 {
            // SAFETY: setpriority on the calling thread's id; no pointers.
            let rc = unsafe {
                libc::setpriority(libc::PRIO_PROCESS, libc::gettid() as libc::id_t, self.nice)
            };
            if rc != 0 {
                tracing::warn!(
                    nice = self.nice,
                    error = %std::io::Error::last_os_error(),
                    "cannot set daemon.device_nice (below 0 needs root or CAP_SYS_NICE); the device thread runs at nice 0"
                );
            }
        }
        Ok(())
    }

    /// The calling thread's CPUs and nice value, to give back with
    /// [`SavedPlacement::restore`] to threads started after
    /// [`Placement::apply`] (they would inherit the device thread's
    /// placement and compete with it for its CPUs).
    pub fn save() -> SavedPlacement {
        // SAFETY: sched_getaffinity(0) fills the set of the calling thread;
        // getpriority reads the calling thread's nice value (errno is not
        // needed: -1 is a valid result and is kept as such).
        unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            let ok =
                libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) == 0;
            let nice = libc::getpriority(libc::PRIO_PROCESS, libc::gettid() as libc::id_t);
            SavedPlacement {
                cpus: ok.then_some(set),
                nice,
            }
        }
    }
}

/// A thread's CPUs and nice value as they were ([`Placement::save`]).
#[derive(Clone, Copy)]
pub struct SavedPlacement {
    cpus: Option<libc::cpu_set_t>,
    nice: i32,
}

impl SavedPlacement {
    /// Gives the calling thread these CPUs and this nice value (best effort).
    pub fn restore(&self) {
        // SAFETY: the set came from sched_getaffinity; both calls act on the
        // calling thread only. Raising the nice value needs no privilege.
        unsafe {
            if let Some(set) = &self.cpus {
                libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), set);
            }
            libc::setpriority(libc::PRIO_PROCESS, libc::gettid() as libc::id_t, self.nice);
        }
    }
}

/// Restricts the calling thread to `cpus`.
fn set_cpus(cpus: &[usize]) -> std::io::Result<()> {
    // SAFETY: an all-zero cpu_set_t is the empty set; CPU_SET is given
    // indices below CPU_SETSIZE; sched_setaffinity(0) is the calling thread.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        for &c in cpus {
            if c >= libc::CPU_SETSIZE as usize {
                return Err(std::io::Error::from_raw_os_error(libc::EINVAL));
            }
            libc::CPU_SET(c, &mut set);
        }
        if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Puts the calling thread in SCHED_FIFO at `priority` (0: leave it).
/// Failure (no CAP_SYS_NICE) is logged, not fatal.
pub fn set_realtime_priority(priority: u8) {
    if priority == 0 {
        return;
    }
    let param = libc::sched_param {
        sched_priority: priority as i32,
    };
    // SAFETY: pthread_self() is the calling thread and `param` is a valid
    // sched_param for SCHED_FIFO.
    let rc = unsafe { libc::pthread_setschedparam(libc::pthread_self(), libc::SCHED_FIFO, &param) };
    if rc != 0 {
        tracing::warn!(
            priority,
            error = %std::io::Error::from_raw_os_error(rc),
            "cannot use SCHED_FIFO (daemon.realtime_priority needs root or CAP_SYS_NICE); running at normal priority"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cpus_of_this_thread() -> Vec<usize> {
        let saved = Placement::save();
        let set = saved.cpus.expect("sched_getaffinity works here");
        (0..libc::CPU_SETSIZE as usize)
            // SAFETY: CPU_ISSET reads the set below CPU_SETSIZE.
            .filter(|&c| unsafe { libc::CPU_ISSET(c, &set) })
            .collect()
    }

    /// `daemon.device_cpus` pins the thread that applies it, and the
    /// threads it starts get the saved placement back.
    #[test]
    fn a_placement_pins_its_thread_and_saved_placements_restore() {
        std::thread::spawn(|| {
            let before = cpus_of_this_thread();
            let last = *before.last().unwrap();
            let saved = Placement::save();
            let p = Placement {
                cpus: vec![last],
                nice: 0,
            };
            p.check().unwrap();
            p.apply().unwrap();
            assert_eq!(cpus_of_this_thread(), vec![last]);
            // A thread started now inherits the pin until it restores.
            std::thread::spawn(move || {
                assert_eq!(cpus_of_this_thread(), vec![last]);
                saved.restore();
                assert_eq!(cpus_of_this_thread(), before);
            })
            .join()
            .unwrap();
        })
        .join()
        .unwrap();
    }

    #[test]
    fn a_cpu_reefd_may_not_use_is_refused_with_the_cpus_it_may() {
        let p = Placement {
            cpus: vec![1023],
            nice: 0,
        };
        let e = p.check().unwrap_err().to_string();
        assert!(e.contains("CPU 1023") && e.contains("may use CPUs"), "{e}");
    }
}
