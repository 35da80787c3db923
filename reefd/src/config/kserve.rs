//! The `[kserve]` section: the Open Inference Protocol fronts (KServe v2
//! over HTTP/REST and gRPC, docs/kserve.md) and their access rules: loopback
//! unless `allow_remote`, a bearer token (read from a file only its owner
//! can read) or mutual TLS for any other address.

use super::*;

/// The Open Inference Protocol fronts (docs/kserve.md). Both are off unless
/// an address is given.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct KserveConfig {
    /// HTTP/REST address, e.g. "127.0.0.1:8000"; empty: off.
    pub http: String,
    /// gRPC address, e.g. "127.0.0.1:8001"; empty: off.
    pub grpc: String,
    /// Allow a non-loopback address. It also needs `token`.
    pub allow_remote: bool,
    /// Bearer token: required from non-loopback clients, and for model load
    /// and unload from any client. Prefer `token_file`.
    pub token: String,
    /// A file holding the token (first line), readable by the daemon only.
    pub token_file: String,
    pub max_body_bytes: usize,
    pub max_connections: usize,
    pub max_in_flight: usize,
    /// The class of a request whose `priority` is 0 or absent: rt, be or a
    /// level 0-9.
    pub default_priority: String,
    /// Users whose shared memory objects may be registered, besides the
    /// daemon's own.
    pub shm_uids: Vec<u32>,
    /// HTTP: close a connection whose request header is not complete
    /// this many milliseconds after it began.
    pub header_read_timeout_ms: u64,
    /// HTTP: answer 408 to a request whose body is not complete this many
    /// milliseconds after its header.
    pub body_read_timeout_ms: u64,
    /// gRPC: send GOAWAY to a connection this many milliseconds old; 0:
    /// never (an idle connection then holds its slot for as long as its
    /// client keeps it).
    pub grpc_max_connection_age_ms: u64,
    /// gRPC: close a connection this many milliseconds after its GOAWAY.
    pub grpc_max_connection_age_grace_ms: u64,
    /// PEM certificate chain of the server: both fronts speak TLS only.
    pub tls_cert: String,
    /// PEM private key of `tls_cert`.
    pub tls_key: String,
    /// PEM CA certificates: clients must present a certificate they issued
    /// (mutual TLS), which then stands for the token except for load and
    /// unload.
    pub tls_client_ca: String,
}

impl Default for KserveConfig {
    fn default() -> Self {
        let d = crate::kserve::KserveOptions::default();
        KserveConfig {
            http: String::new(),
            grpc: String::new(),
            allow_remote: false,
            token: String::new(),
            token_file: String::new(),
            max_body_bytes: d.max_body_bytes,
            max_connections: d.max_connections,
            max_in_flight: d.max_in_flight,
            default_priority: "be".into(),
            shm_uids: Vec::new(),
            header_read_timeout_ms: d.header_read_timeout.as_millis() as u64,
            body_read_timeout_ms: d.body_read_timeout.as_millis() as u64,
            grpc_max_connection_age_ms: d
                .grpc_max_connection_age
                .map_or(0, |a| a.as_millis() as u64),
            grpc_max_connection_age_grace_ms: d.grpc_max_connection_age_grace.as_millis() as u64,
            tls_cert: String::new(),
            tls_key: String::new(),
            tls_client_ca: String::new(),
        }
    }
}

impl Config {
    /// The v2 fronts' options, checked: addresses parse, a non-loopback one
    /// is allowed explicitly and has a token or mutual TLS; the TLS files
    /// are read and make a usable server config.
    pub fn kserve(&self) -> Result<crate::kserve::KserveOptions, ConfigError> {
        let k = &self.kserve;
        let tls = match (k.tls_cert.is_empty(), k.tls_key.is_empty()) {
            (true, true) if k.tls_client_ca.is_empty() => None,
            (true, true) => {
                return Err(ConfigError::Invalid(
                    "kserve.tls_client_ca needs kserve.tls_cert and kserve.tls_key: mutual TLS is TLS first"
                        .into(),
                ))
            }
            (false, false) => Some(
                crate::kserve::tls::load(
                    Path::new(&k.tls_cert),
                    Path::new(&k.tls_key),
                    (!k.tls_client_ca.is_empty()).then(|| Path::new(&k.tls_client_ca)),
                )
                .map_err(ConfigError::Invalid)?,
            ),
            _ => {
                return Err(ConfigError::Invalid(
                    "kserve.tls_cert and kserve.tls_key go together: set both or neither".into(),
                ))
            }
        };
        let mutual = tls.as_ref().is_some_and(|t| t.client_auth);
        let token = if !k.token_file.is_empty() {
            let t = read_token_file(Path::new(&k.token_file)).map_err(|e| {
                ConfigError::Invalid(format!("kserve.token_file = {:?}: {e}", k.token_file))
            })?;
            Some(t)
        } else if !k.token.is_empty() {
            Some(k.token.clone())
        } else {
            None
        };
        if token.as_ref().is_some_and(|t| t.len() < 16) {
            return Err(ConfigError::Invalid(
                "kserve.token must be at least 16 characters (e.g. `openssl rand -hex 32`)".into(),
            ));
        }
        let addr = |key: &str, v: &str| -> Result<Option<SocketAddr>, ConfigError> {
            if v.is_empty() {
                return Ok(None);
            }
            let a: SocketAddr = v.parse().map_err(|_| {
                ConfigError::Invalid(format!(
                    "kserve.{key} = {v:?} is not an address such as \"127.0.0.1:8000\""
                ))
            })?;
            if !a.ip().is_loopback() {
                if !k.allow_remote {
                    return Err(ConfigError::Invalid(format!(
                        "kserve.{key} = {v:?} is not a loopback address: set kserve.allow_remote = true (and a token or mutual TLS) to serve other machines"
                    )));
                }
                if token.is_none() && !mutual {
                    return Err(ConfigError::Invalid(format!(
                        "kserve.{key} = {v:?} serves other machines and needs kserve.token (or token_file), or mutual TLS (kserve.tls_cert, tls_key and tls_client_ca)"
                    )));
                }
            }
            Ok(Some(a))
        };
        let default_priority = k
            .default_priority
            .parse()
            .map_err(|e| ConfigError::Invalid(format!("kserve.default_priority: {e}")))?;
        if k.max_body_bytes == 0 || k.max_connections == 0 || k.max_in_flight == 0 {
            return Err(ConfigError::Invalid(
                "kserve.max_body_bytes, max_connections and max_in_flight must be at least 1"
                    .into(),
            ));
        }
        if k.header_read_timeout_ms == 0
            || k.body_read_timeout_ms == 0
            || k.grpc_max_connection_age_grace_ms == 0
        {
            return Err(ConfigError::Invalid(
                "kserve.header_read_timeout_ms, body_read_timeout_ms and \
                 grpc_max_connection_age_grace_ms must be at least 1 (a slow client would \
                 otherwise hold a connection slot for ever)"
                    .into(),
            ));
        }
        Ok(crate::kserve::KserveOptions {
            http: addr("http", &k.http)?,
            grpc: addr("grpc", &k.grpc)?,
            access: crate::kserve::Access { token },
            max_body_bytes: k.max_body_bytes,
            max_connections: k.max_connections,
            max_in_flight: k.max_in_flight,
            default_priority,
            be_streams: self.scheduler.be_streams_per_model.max(1),
            shm_uids: k.shm_uids.clone(),
            header_read_timeout: std::time::Duration::from_millis(k.header_read_timeout_ms),
            body_read_timeout: std::time::Duration::from_millis(k.body_read_timeout_ms),
            grpc_max_connection_age: (k.grpc_max_connection_age_ms > 0)
                .then(|| std::time::Duration::from_millis(k.grpc_max_connection_age_ms)),
            grpc_max_connection_age_grace: std::time::Duration::from_millis(
                k.grpc_max_connection_age_grace_ms,
            ),
            tls,
        })
    }
}

/// The longest token file read: a token is one line of at most a few
/// hundred characters; a path naming a device or a huge file is refused
/// instead of read to its end.
const TOKEN_FILE_MAX: u64 = 4096;

/// Reads `kserve.token_file`: a regular file of at most
/// [`TOKEN_FILE_MAX`] bytes, readable by its owner only (it is the
/// daemon's admin credential over the network, as an ssh private key is
/// refused when others can read it), whose first line is the token.
fn read_token_file(path: &Path) -> Result<String, String> {
    use std::io::Read;
    use std::os::unix::fs::PermissionsExt;
    let f = std::fs::File::open(path).map_err(|e| e.to_string())?;
    let meta = f.metadata().map_err(|e| e.to_string())?;
    if !meta.is_file() {
        return Err("not a regular file".into());
    }
    if meta.len() > TOKEN_FILE_MAX {
        return Err(format!(
            "{} bytes; a token file holds one line of at most {TOKEN_FILE_MAX} bytes",
            meta.len()
        ));
    }
    let mode = meta.permissions().mode();
    if mode & 0o077 != 0 {
        return Err(format!(
            "mode {:o} lets other users read the token; run `chmod 600` on it",
            mode & 0o777
        ));
    }
    let mut text = String::new();
    f.take(TOKEN_FILE_MAX)
        .read_to_string(&mut text)
        .map_err(|e| e.to_string())?;
    Ok(text.lines().next().unwrap_or("").trim().to_string())
}
