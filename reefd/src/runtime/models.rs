//! Loading and unloading models: the path a client names, its schedule,
//! idempotence metadata and code, read and handed to the engine.

use super::*;

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
pub(super) fn name_is_path(name: &str) -> bool {
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
        {
            let mut st = self.lock();
            st.metrics.requests += 1;
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
        }
        // File I/O outside the lock.
        let loaded = match &path {
            Some(p) => reef_model::Model::load(p),
            None => reef_model::load_named(&self.settings.models_dir, &name),
        };
        let model = match loaded {
            Ok(m) => m,
            Err(e) => return Handled::Error(Failure::new(ErrorCode::NotFound, e.to_string())),
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
            Some(p) => match IdempotenceMetadata::load(p) {
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
                Err(e) => return Handled::Error(Failure::new(ErrorCode::BadRequest, e.to_string())),
            },
            None => None,
        };
        let mut info = ModelInfo {
            name: key.clone(),
            path: model.path.clone(),
            kernels: model.kernels.len(),
            buffers: model.buffers.len(),
            standalone_us: None, // known once loaded, below
            idempotence: idem.as_ref().and(idem_path),
            owner_uid: conn.peer.uid,
            device: None,
        };
        let profiled_ns = model.measured_latency_ns();
        let mut st = self.lock();
        if let Some(m) = st.models.get(&key) {
            return Handled::Reply(Reply::ModelLoaded(m.info.clone()));
        }
        match st.engine.add_model_on(
            EngineModel {
                name: key.clone(),
                model: Arc::new(model),
                idempotence: idem,
            },
            device_index,
        ) {
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
                info: info.clone(),
                standalone_ns,
            },
        );
        Handled::Reply(Reply::ModelLoaded(info))
    }
}
