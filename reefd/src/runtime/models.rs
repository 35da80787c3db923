//! Loading and unloading models: the path a client names, its schedule,
//! idempotence metadata and code, read and handed to the engine.
//!
//! A client-named path is read with the client's rights, not the daemon's
//! (issue 25, D2): [`as_peer`] runs the reads on a thread whose file-system
//! identity (fsuid, fsgid, supplementary groups) is the peer's, so the
//! kernel's own permission checks apply, and a member of the socket's group
//! cannot load, or learn anything of, a file they could not read
//! themselves. The reads are bounded and typed (reef-model's `files`).

use super::*;
use reef_model::idempotence::MetadataError;

pub(super) fn canonical_model(st: &State, name: &str) -> String {
    if st.models.contains_key(name) {
        return name.to_string();
    }
    reef_model::disb_to_dir(name).unwrap_or(name).to_string()
}

pub(super) fn same_model_path(a: &Path, b: &Path) -> bool {
    let a = std::fs::canonicalize(a).unwrap_or_else(|_| a.to_path_buf());
    let b = std::fs::canonicalize(b).unwrap_or_else(|_| b.to_path_buf());
    a == b || b.parent() == Some(a.as_path())
}

pub(super) fn not_loaded(st: &State, name: &str) -> Failure {
    let loaded: Vec<&str> = st.models.keys().map(String::as_str).collect();
    Failure::new(
        ErrorCode::NotFound,
        format!(
            "model {name} is not loaded (loaded: {}); load it with `reefctl models load {name}`",
            if loaded.is_empty() {
                "none".to_string()
            } else {
                loaded.join(", ")
            }
        ),
    )
}

/// Whether a `models load` NAME is a path rather than a name in the models
/// directory: it has a path separator or starts with `.`.
pub fn name_is_path(name: &str) -> bool {
    name.contains('/') || name.starts_with('.')
}

/// The name a model loaded from `path` is registered under: its directory's
/// name, or a schedule file's stem (`/x/vgg/vgg.json` and `/x/vgg` are both
/// `vgg`; `/x/vgg.json` is `vgg`).
pub(super) fn model_name_of_path(path: &Path) -> Option<String> {
    let file = path.file_name()?.to_str()?;
    let name = match file.strip_suffix(".json") {
        Some(stem) => stem,
        None => file,
    };
    (!name.is_empty() && name != "." && name != "..").then(|| name.to_string())
}

impl Runtime {
    /// Unloads a model (its owner or root; refused while it has work).
    pub(super) fn unload_model(&self, st: &mut State, peer: Peer, name: String) -> Handled {
        use Handled::{Error as Err_, Reply as Ok_};
        let name = canonical_model(st, &name);
        let Some(m) = st.models.get(&name) else {
            return Err_(not_loaded(st, &name));
        };
        if m.info.owner_uid != peer.uid && !peer.is_root() {
            return Err_(Failure::new(
                ErrorCode::PermissionDenied,
                format!(
                    "model {name} was loaded by uid {}; only that user or root may unload it",
                    m.info.owner_uid
                ),
            ));
        }
        let users = st.tasks.values().filter(|t| t.model == name).count();
        if users > 0 {
            return Err_(Failure::new(
                ErrorCode::Busy,
                format!("model {name} has {users} inference(s) in flight; retry when they finish"),
            ));
        }
        st.models.remove(&name);
        st.engine.remove_model(&name);
        tracing::info!(model = %name, uid = peer.uid, "model unloaded");
        Ok_(Reply::ModelUnloaded { name })
    }

    pub(super) fn load_model(
        &self,
        conn: &Conn,
        name: String,
        path: Option<PathBuf>,
        idempotence: Option<PathBuf>,
        device_index: Option<usize>,
    ) -> Handled {
        // A name that is a path (`models load /some/dir/vgg`) loads that
        // model under its directory's name, the name every other command
        // takes; a plain name is looked up in the models directory.
        let (name, path) = match path {
            Some(p) => (name, Some(p)),
            None if name_is_path(&name) => match model_name_of_path(Path::new(&name)) {
                Some(n) => (n, Some(PathBuf::from(&name))),
                None => {
                    return Handled::Error(Failure::new(
                        ErrorCode::BadRequest,
                        format!(
                            "cannot take a model name from the path {name:?}; pass one with --name"
                        ),
                    ))
                }
            },
            None => (name, None),
        };
        let reader = {
            let mut st = self.lock();
            st.metrics.requests += 1;
            if st.shutting_down {
                return Handled::Error(shutting_down());
            }
            let canon = canonical_model(&st, &name);
            if let Some(m) = st.models.get(&canon) {
                // Loading is idempotent: the same model again is a no-op.
                if path
                    .as_ref()
                    .is_none_or(|p| same_model_path(p, &m.info.path))
                {
                    return Handled::Reply(Reply::ModelLoaded(m.info.clone()));
                }
                return Handled::Error(Failure::new(
                    ErrorCode::Busy,
                    format!(
                        "a model named {canon} is already loaded from {}; unload it first or choose another name",
                        m.info.path.display()
                    ),
                ));
            }
            st.engine.code_reader()
        };
        // File I/O outside the lock, with the client's rights.
        let models_dir = self.settings.models_dir.clone();
        let peer = conn.peer;
        let loaded = as_peer(peer, || {
            let m = match &path {
                Some(p) => reef_model::Model::load(p),
                None => reef_model::load_named(&models_dir, &name),
            }?;
            // A model with code (a GPU's package) is read here, once, when
            // the device wants it so; otherwise every file the device will
            // read must be one the client may open.
            let mut package = None;
            if let Some(dir) = m
                .path
                .parent()
                .filter(|d| m.compiled.is_some() || d.join("model.toml").exists())
            {
                let as_load_error = |e: reef_model::package::PackageError| match e {
                    reef_model::package::PackageError::File(f) => reef_model::LoadError::File(f),
                    e => reef_model::LoadError::Invalid {
                        path: dir.to_path_buf(),
                        item: "package".into(),
                        problem: e.to_string(),
                    },
                };
                match &reader {
                    Some(r) => {
                        let p = reef_model::package::Package::read(dir, &*r.choose_arch, &r.limits)
                            .map_err(as_load_error)?;
                        package = Some(Arc::new(p));
                    }
                    None => {
                        for f in reef_model::package::Package::files(dir).map_err(as_load_error)? {
                            reef_model::files::open(&f, "model file", u64::MAX)?;
                        }
                    }
                }
            }
            // The storages' roles of a hand-written package (its inputs
            // and outputs), when no package was read for the device.
            let roles = match &package {
                Some(p) => Some(
                    p.storages
                        .iter()
                        .map(|s| {
                            let role = match s.role {
                                reef_model::package::Role::Input => "input",
                                reef_model::package::Role::Output => "output",
                                reef_model::package::Role::Weight => "weight",
                                reef_model::package::Role::Activation => "activation",
                            };
                            (s.name.clone(), s.bytes, role.to_string())
                        })
                        .collect(),
                ),
                None => m.path.parent().and_then(toml_roles),
            };
            Ok::<_, reef_model::LoadError>((m, package, roles))
        });
        let (model, package, roles) = match loaded {
            Ok(Ok(m)) => m,
            Ok(Err(e)) => return Handled::Error(load_failure(e)),
            Err(e) => return Handled::Error(Failure::new(ErrorCode::Internal, e)),
        };
        let key = if path.is_some() {
            name.clone()
        } else {
            reef_model::disb_to_dir(&name).unwrap_or(&name).to_string()
        };
        let idem_path = idempotence.clone().or_else(|| {
            let p = model
                .path
                .with_file_name(format!("{}.idem.json", model.name));
            p.is_file().then_some(p)
        });
        let idem = match &idem_path {
            Some(p) => match as_peer(peer, || IdempotenceMetadata::load(p))
                .unwrap_or_else(|e| Err(MetadataError::Invalid { path: p.display().to_string(), what: e }))
            {
                Ok(m) if m.kernels.len() == model.kernels.len() => Some(Arc::new(m)),
                Ok(m) => {
                    return Handled::Error(Failure::new(
                        ErrorCode::BadRequest,
                        format!(
                            "idempotence metadata {} has {} kernels but model {} has {}; regenerate it with reef-check-idem",
                            p.display(),
                            m.kernels.len(),
                            model.name,
                            model.kernels.len()
                        ),
                    ))
                }
                Err(MetadataError::File(f)) if f.is_permission_denied() => {
                    return Handled::Error(Failure::new(ErrorCode::PermissionDenied, f.to_string()))
                }
                Err(e) => return Handled::Error(Failure::new(ErrorCode::BadRequest, e.to_string())),
            },
            None => None,
        };
        let io = Arc::new(crate::tensors::ModelIo::of(&model, roles.as_deref()));
        let mut info = ModelInfo {
            name: key.clone(),
            path: model.path.clone(),
            kernels: model.kernels.len(),
            buffers: model.buffers.len(),
            standalone_us: None, // known once loaded, below
            idempotence: idem.as_ref().and(idem_path),
            owner_uid: conn.peer.uid,
            device: None,
            inputs: super::tensors::specs(&io.inputs),
            outputs: super::tensors::specs(&io.outputs),
        };
        let profiled_ns = model.measured_latency_ns();
        let em = EngineModel {
            name: key.clone(),
            model: Arc::new(model),
            idempotence: idem,
            package,
        };
        // Under the lock: the engine's checks and reservations. Outside
        // it: the device's long work (a GPU's uploads and reference runs),
        // so that every other request is served meanwhile (issue 25
        // item 2). Under it again: the model installed, unless shutdown
        // began or the name was taken meanwhile.
        let mut ticket = {
            let mut st = self.lock();
            if st.shutting_down {
                return Handled::Error(shutting_down());
            }
            if let Some(m) = st.models.get(&key) {
                return Handled::Reply(Reply::ModelLoaded(m.info.clone()));
            }
            match st.engine.begin_load(&em, device_index) {
                Ok(t) => t,
                Err(e) => return Handled::Error(engine_failure(e)),
            }
        };
        let part = match ticket.work.take() {
            Some(work) => match work(&self.load_cancel) {
                Ok(p) => Some(p),
                Err(e) => {
                    let mut st = self.lock();
                    st.engine.abort_load(ticket);
                    if st.shutting_down {
                        return Handled::Error(shutting_down());
                    }
                    return Handled::Error(engine_failure(e));
                }
            },
            None => None,
        };
        let mut st = self.lock();
        if st.shutting_down {
            st.engine.abort_load(ticket);
            return Handled::Error(shutting_down());
        }
        if let Some(m) = st.models.get(&key).map(|m| m.info.clone()) {
            // Another load of the name finished first.
            st.engine.abort_load(ticket);
            return if same_model_path(&info.path, &m.path) {
                Handled::Reply(Reply::ModelLoaded(m))
            } else {
                Handled::Error(Failure::new(
                    ErrorCode::Busy,
                    format!(
                        "a model named {key} was loaded from {} meanwhile; unload it first or choose another name",
                        m.path.display()
                    ),
                ))
            };
        }
        match st.engine.finish_load(em, ticket, part) {
            Ok(d) => info.device = d,
            Err(e) => return Handled::Error(engine_failure(e)),
        }
        // A stand-alone latency the device measured at load is this
        // device's; a profile's may be another GPU's (the MI50's).
        let standalone_ns = st.engine.standalone_ns(&key).or(profiled_ns);
        info.standalone_us = standalone_ns.map(|n| n as f64 / 1e3);
        tracing::info!(model = %key, uid = conn.peer.uid, kernels = info.kernels, "model loaded");
        st.models.insert(
            key,
            LoadedModel {
                io,
                info: info.clone(),
                standalone_ns,
            },
        );
        Handled::Reply(Reply::ModelLoaded(info))
    }
}

/// The failure of a model's files: `permission_denied` when the client may
/// not open one, else `not_found` with what was wrong.
fn load_failure(e: reef_model::LoadError) -> Failure {
    match e {
        reef_model::LoadError::File(f) if f.is_permission_denied() => {
            Failure::new(ErrorCode::PermissionDenied, f.to_string())
        }
        e => Failure::new(ErrorCode::NotFound, e.to_string()),
    }
}

/// Runs `f` with `peer`'s file-system identity when the daemon is root and
/// the peer is not: on a thread of its own whose fsuid, fsgid and
/// supplementary groups are the peer's (Linux keeps them per thread:
/// setfsuid(2), setgroups(2) through the raw system call, which glibc's
/// wrapper would broadcast to every thread). Leaving fsuid 0 drops the
/// thread's file capabilities (CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH), so
/// opens are checked as for the peer. The thread ends with `f`. An error
/// names what could not be set up.
pub(super) fn as_peer<T: Send>(peer: Peer, f: impl FnOnce() -> T + Send) -> Result<T, String> {
    if peer.is_root() || !nix::unistd::geteuid().is_root() {
        return Ok(f());
    }
    let groups = peer_groups(peer);
    std::thread::scope(|s| {
        s.spawn(|| {
            // SAFETY: plain system calls on this thread's credentials; the
            // group list outlives the call.
            unsafe {
                if libc::syscall(libc::SYS_setgroups, groups.len(), groups.as_ptr()) != 0 {
                    return Err(format!(
                        "cannot take uid {}'s groups to read the model: {}",
                        peer.uid,
                        std::io::Error::last_os_error()
                    ));
                }
                libc::syscall(libc::SYS_setfsgid, peer.gid);
                libc::syscall(libc::SYS_setfsuid, peer.uid);
                // setfsuid returns the previous value; an invalid one
                // (u32::MAX) changes nothing and reports the current.
                let now = libc::syscall(libc::SYS_setfsuid, u32::MAX) as u32;
                if now != peer.uid {
                    return Err(format!(
                        "cannot take uid {}'s file-system identity to read the model",
                        peer.uid
                    ));
                }
            }
            Ok(f())
        })
        .join()
        .map_err(|_| "the model reader panicked".to_string())?
    })
}

/// The peer's supplementary groups (from /proc/PID/status, "Groups:"),
/// with its gid; its gid alone when they cannot be read.
fn peer_groups(peer: Peer) -> Vec<libc::gid_t> {
    let mut g = vec![peer.gid];
    if let Some(pid) = peer.pid {
        if let Ok(text) = std::fs::read_to_string(format!("/proc/{pid}/status")) {
            if let Some(line) = text.lines().find(|l| l.starts_with("Groups:")) {
                g.extend(
                    line["Groups:".len()..]
                        .split_whitespace()
                        .filter_map(|x| x.parse::<libc::gid_t>().ok()),
                );
            }
        }
    }
    g.sort();
    g.dedup();
    g
}

/// The storages' names, sizes and roles in a model directory's
/// `model.toml` (hand-written packages), if it has one that reads.
fn toml_roles(dir: &Path) -> Option<Vec<(String, u64, String)>> {
    #[derive(serde::Deserialize)]
    struct Raw {
        #[serde(default)]
        storage: Vec<RawStorage>,
    }
    #[derive(serde::Deserialize)]
    struct RawStorage {
        name: String,
        bytes: u64,
        role: String,
    }
    let f = dir.join("model.toml");
    if !f.is_file() {
        return None;
    }
    let text =
        reef_model::files::read_text(&f, "model.toml", reef_model::files::MAX_TEXT_BYTES).ok()?;
    let raw: Raw = toml::from_str(&text).ok()?;
    Some(
        raw.storage
            .into_iter()
            .map(|s| (s.name, s.bytes, s.role))
            .collect(),
    )
}
