//! Reader for DISB workload files (the DNN Inference Serving Benchmark of
//! REEF §6.2, Table 2; files from SJTU-IPADS/disb, read unchanged).
//!
//! A workload has a run length `time` (seconds) and tasks, each a `load`
//! (`continuous`, `periodic`, `poisson`, `trace`, `dependent`) and a `client`
//! whose `model_name` maps to a measured MI50 model directory as
//! ../shared/models/README.md says (`reef_model::disb_to_dir`).
//!
//! Real-time tasks: periodic, poisson and trace loads with priority 0 (DISB's
//! default when the field is absent), and any task whose id or client name
//! ends in `_rt` (workload B's closed-loop real-time VGG client). Every other
//! task is best-effort.

use serde_json::Value;
use std::path::{Path, PathBuf};

/// Load pattern of one task (DISB `load.type`).
#[derive(Debug, Clone, PartialEq)]
pub enum Load {
    /// Closed loop: the next request is issued when the previous returns.
    Continuous,
    /// `frequency` requests/s on a uniform grid, offset by `priority`-0
    /// coordination; a launch already late for the next slot is dropped.
    Periodic { priority: i64, frequency: f64 },
    /// Exponential inter-arrival times with mean `1/frequency` s.
    Poisson { priority: i64, frequency: f64 },
    /// Launch offsets in milliseconds from the start.
    Trace { priority: i64, offsets_ms: Vec<i64> },
    /// Issued when all `prev` tasks have returned a result of one serial number.
    Dependent { prev: Vec<String> },
}

impl Load {
    pub fn type_name(&self) -> &'static str {
        match self {
            Load::Continuous => "continuous",
            Load::Periodic { .. } => "periodic",
            Load::Poisson { .. } => "poisson",
            Load::Trace { .. } => "trace",
            Load::Dependent { .. } => "dependent",
        }
    }
}

/// One DISB task.
#[derive(Debug, Clone, PartialEq)]
pub struct Task {
    pub id: String,
    pub load: Load,
    /// `client.name` (defaults to the id).
    pub client_name: String,
    /// `client.model_name` as written in the file.
    pub model_name: String,
    /// The measured model directory it maps to (`vgg`, `resnet152`, ...).
    pub model_dir: String,
    pub real_time: bool,
}

/// A DISB workload file.
#[derive(Debug, Clone, PartialEq)]
pub struct Workload {
    /// Short name: `A` for `.../A.json`.
    pub name: String,
    pub path: PathBuf,
    /// Run length in seconds.
    pub time: f64,
    pub tasks: Vec<Task>,
}

/// Why a workload could not be used. Every variant names the file.
#[derive(Debug, thiserror::Error)]
pub enum WorkloadError {
    // The cause is part of the message, not a `source`, so `{:#}` chains
    // do not print it twice.
    #[error("{path}: cannot read DISB workload: {err}")]
    Io { path: PathBuf, err: std::io::Error },
    #[error("{path}: not valid JSON: {err}")]
    Json {
        path: PathBuf,
        err: serde_json::Error,
    },
    #[error("{path}: {item}: {problem}")]
    Invalid {
        path: PathBuf,
        item: String,
        problem: String,
    },
}

fn invalid(path: &Path, item: impl Into<String>, problem: impl Into<String>) -> WorkloadError {
    WorkloadError::Invalid {
        path: path.to_path_buf(),
        item: item.into(),
        problem: problem.into(),
    }
}

/// Highest accepted request frequency (requests/s): far above any DNN
/// inference rate, and it keeps arrival generation bounded.
pub const MAX_FREQUENCY: f64 = 1e6;

/// The official workload names, in order.
pub const WORKLOADS: &[&str] = &["A", "B", "C", "D", "E"];

/// Resolves a command-line workload argument: `A`..`E` (from
/// `<shared>/disb/workloads`), `all` (all five), or a path to a JSON file.
pub fn resolve(arg: &str, shared: &Path) -> Vec<PathBuf> {
    let dir = shared.join("disb").join("workloads");
    if arg.eq_ignore_ascii_case("all") {
        return WORKLOADS
            .iter()
            .map(|w| dir.join(format!("{w}.json")))
            .collect();
    }
    if let Some(w) = WORKLOADS.iter().find(|w| w.eq_ignore_ascii_case(arg)) {
        return vec![dir.join(format!("{w}.json"))];
    }
    vec![PathBuf::from(arg)]
}

impl Workload {
    /// Reads and validates a workload file.
    pub fn load(path: &Path) -> Result<Self, WorkloadError> {
        let text = std::fs::read_to_string(path).map_err(|err| WorkloadError::Io {
            path: path.to_path_buf(),
            err,
        })?;
        Self::parse(path, &text)
    }

    /// Parses workload text; `path` names it in errors.
    pub fn parse(path: &Path, text: &str) -> Result<Self, WorkloadError> {
        let v: Value = serde_json::from_str(text).map_err(|err| WorkloadError::Json {
            path: path.to_path_buf(),
            err,
        })?;
        let time = v.get("time").and_then(Value::as_f64).ok_or_else(|| {
            invalid(
                path,
                "time",
                "missing or not a number (run length in seconds)",
            )
        })?;
        if !(time.is_finite() && time > 0.0) {
            return Err(invalid(
                path,
                "time",
                format!("must be positive, got {time}"),
            ));
        }
        let tasks_v = v
            .get("tasks")
            .and_then(Value::as_array)
            .ok_or_else(|| invalid(path, "tasks", "missing or not an array"))?;
        if tasks_v.is_empty() {
            return Err(invalid(path, "tasks", "no tasks"));
        }
        let mut tasks = Vec::new();
        for (i, t) in tasks_v.iter().enumerate() {
            tasks.push(parse_task(path, i, t)?);
        }
        for (i, t) in tasks.iter().enumerate() {
            if tasks[..i].iter().any(|u| u.id == t.id) {
                return Err(invalid(
                    path,
                    format!("task {:?}", t.id),
                    "duplicate task id",
                ));
            }
            if let Load::Dependent { prev } = &t.load {
                for p in prev {
                    if !tasks.iter().any(|u| &u.id == p) {
                        return Err(invalid(
                            path,
                            format!("task {:?}", t.id),
                            format!(
                                "prev_task_ids names {p:?}, which is not a task of this workload"
                            ),
                        ));
                    }
                    if p == &t.id {
                        return Err(invalid(
                            path,
                            format!("task {:?}", t.id),
                            "depends on itself",
                        ));
                    }
                }
            }
        }
        let name = path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| "workload".into());
        Ok(Self {
            name,
            path: path.to_path_buf(),
            time,
            tasks,
        })
    }
}

fn parse_task(path: &Path, i: usize, t: &Value) -> Result<Task, WorkloadError> {
    let id = t
        .get("id")
        .and_then(Value::as_str)
        .ok_or_else(|| invalid(path, format!("tasks[{i}]"), "missing string field \"id\""))?
        .to_string();
    let item = format!("task {id:?}");
    let load_v = t
        .get("load")
        .ok_or_else(|| invalid(path, &item, "missing \"load\""))?;
    let ty = load_v
        .get("type")
        .and_then(Value::as_str)
        .ok_or_else(|| invalid(path, &item, "load has no string \"type\""))?;
    let priority = match load_v.get("priority") {
        None | Some(Value::Null) => 0,
        Some(p) => p
            .as_i64()
            .ok_or_else(|| invalid(path, &item, format!("load.priority {p} is not an integer")))?,
    };
    let frequency = || -> Result<f64, WorkloadError> {
        let f = load_v
            .get("frequency")
            .and_then(Value::as_f64)
            .ok_or_else(|| {
                invalid(
                    path,
                    &item,
                    format!("{ty} load needs a numeric \"frequency\""),
                )
            })?;
        if !(f.is_finite() && f > 0.0 && f <= MAX_FREQUENCY) {
            return Err(invalid(
                path,
                &item,
                format!("frequency must be in (0, {MAX_FREQUENCY}] requests/s, got {f}"),
            ));
        }
        Ok(f)
    };
    let load = match ty {
        "continuous" => Load::Continuous,
        "periodic" => Load::Periodic {
            priority,
            frequency: frequency()?,
        },
        "poisson" => Load::Poisson {
            priority,
            frequency: frequency()?,
        },
        "trace" => {
            let arr = load_v
                .get("trace")
                .and_then(Value::as_array)
                .ok_or_else(|| invalid(path, &item, "trace load needs an array \"trace\" of launch offsets in ms"))?;
            let mut offsets_ms = arr
                .iter()
                .map(|x| {
                    x.as_i64().filter(|&v| v >= 0).ok_or_else(|| {
                        invalid(path, &item, format!("trace entry {x} is not a non-negative integer (ms)"))
                    })
                })
                .collect::<Result<Vec<_>, _>>()?;
            offsets_ms.sort_unstable();
            Load::Trace {
                priority,
                offsets_ms,
            }
        }
        "dependent" => {
            let arr = load_v
                .get("prev_task_ids")
                .and_then(Value::as_array)
                .ok_or_else(|| invalid(path, &item, "dependent load needs an array \"prev_task_ids\""))?;
            let prev = arr
                .iter()
                .map(|x| {
                    x.as_str().map(str::to_string).ok_or_else(|| {
                        invalid(path, &item, format!("prev_task_ids entry {x} is not a string"))
                    })
                })
                .collect::<Result<Vec<_>, _>>()?;
            if prev.is_empty() {
                return Err(invalid(path, &item, "prev_task_ids is empty"));
            }
            Load::Dependent { prev }
        }
        other => {
            return Err(invalid(
                path,
                &item,
                format!(
                    "unknown load type {other:?}: DISB load types are continuous, periodic, poisson, trace, dependent"
                ),
            ))
        }
    };
    let client = t
        .get("client")
        .ok_or_else(|| invalid(path, &item, "missing \"client\""))?;
    let model_name = client
        .get("model_name")
        .and_then(Value::as_str)
        .ok_or_else(|| invalid(path, &item, "client has no string \"model_name\""))?
        .to_string();
    // A DISB model name maps to its measured schedule's directory; any other
    // name is a model directory of the models directory the run uses (e.g.
    // one written by reef-compile, docs/compile.md), checked when the models
    // are loaded.
    let model_dir = match reef_model::disb_to_dir(&model_name) {
        Some(d) => d.to_string(),
        None if !model_name.is_empty()
            && model_name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "_-.".contains(c))
            && !model_name.starts_with('.') =>
        {
            model_name.clone()
        }
        None => {
            let known: Vec<&str> = reef_model::DISB_MODELS.iter().map(|(d, _)| *d).collect();
            return Err(invalid(
                path,
                &item,
                format!(
                    "model {model_name:?} is neither a DISB model ({}) nor a model directory name",
                    known.join(", ")
                ),
            ));
        }
    };
    if let Some(b) = client.get("batch_size").and_then(Value::as_i64) {
        if b != 1 {
            return Err(invalid(
                path,
                &item,
                format!("batch_size {b}: the measured schedules are for batch size 1"),
            ));
        }
    }
    let client_name = client
        .get("name")
        .and_then(Value::as_str)
        .unwrap_or(&id)
        .to_string();
    let rt_suffix = id.ends_with("_rt") || client_name.ends_with("_rt");
    let real_time = rt_suffix
        || match &load {
            Load::Periodic { priority, .. }
            | Load::Poisson { priority, .. }
            | Load::Trace { priority, .. } => *priority == 0,
            Load::Continuous | Load::Dependent { .. } => false,
        };
    Ok(Task {
        id,
        load,
        client_name,
        model_name,
        model_dir,
        real_time,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shared() -> PathBuf {
        reef_model::shared_dir()
    }

    #[test]
    fn reads_the_five_official_workloads() {
        let all = resolve("all", &shared());
        assert_eq!(all.len(), 5);
        let ws: Vec<Workload> = all.iter().map(|p| Workload::load(p).unwrap()).collect();
        let summary: Vec<(String, usize, usize)> = ws
            .iter()
            .map(|w| {
                let rt = w.tasks.iter().filter(|t| t.real_time).count();
                (w.name.clone(), rt, w.tasks.len() - rt)
            })
            .collect();
        // Table 2 of the paper: RT/BE clients per workload.
        assert_eq!(
            summary,
            vec![
                ("A".into(), 1, 1),
                ("B".into(), 1, 1),
                ("C".into(), 1, 5),
                ("D".into(), 5, 5),
                ("E".into(), 5, 5)
            ]
        );
        assert_eq!(ws[0].time, 60.0);
        assert_eq!(ws[0].tasks[0].model_dir, "vgg");
        assert_eq!(
            ws[0].tasks[0].load,
            Load::Periodic {
                priority: 0,
                frequency: 100.0
            }
        );
        assert_eq!(ws[1].tasks[0].load, Load::Continuous);
        assert!(matches!(ws[4].tasks[0].load, Load::Poisson { .. }));
    }

    fn parse(text: &str) -> Result<Workload, WorkloadError> {
        Workload::parse(Path::new("/x/w.json"), text)
    }

    fn task(load: &str, model: &str) -> String {
        format!(
            r#"{{"time": 1, "tasks": [{{"id": "t", "load": {load}, "client": {{"model_name": "{model}"}}}}]}}"#
        )
    }

    #[test]
    fn reads_trace_and_dependent_loads() {
        let w = parse(
            r#"{"time": 2, "tasks": [
              {"id": "a_rt", "load": {"type": "trace", "trace": [30, 10, 20]}, "client": {"model_name": "distilbert"}},
              {"id": "b", "load": {"type": "dependent", "prev_task_ids": ["a_rt"]}, "client": {"model_name": "vgg"}}
            ]}"#
        )
        .unwrap();
        assert_eq!(
            w.tasks[0].load,
            Load::Trace {
                priority: 0,
                offsets_ms: vec![10, 20, 30]
            }
        );
        assert!(w.tasks[0].real_time);
        assert_eq!(w.tasks[0].model_dir, "bert");
        assert_eq!(
            w.tasks[1].load,
            Load::Dependent {
                prev: vec!["a_rt".into()]
            }
        );
        assert!(!w.tasks[1].real_time);
    }

    #[test]
    fn bad_input_is_a_clear_error() {
        let e = parse(&task(r#"{"type": "bursty"}"#, "vgg19-imagenet"))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("/x/w.json") && e.contains("\"bursty\"") && e.contains("poisson"),
            "{e}"
        );
        // Not a DISB name: a model directory of the run's models directory
        // (a compiled model, docs/compile.md), checked when models load.
        let w = parse(&task(r#"{"type": "continuous"}"#, "yolov3")).unwrap();
        assert_eq!(w.tasks[0].model_dir, "yolov3");
        let e = parse(&task(r#"{"type": "continuous"}"#, "../yolov3"))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("\"../yolov3\"") && e.contains("vgg19-imagenet"),
            "{e}"
        );
        let e = parse(&task(r#"{"type": "periodic"}"#, "vgg"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("frequency"), "{e}");
        let e = parse(&task(r#"{"type": "poisson", "frequency": 1e12}"#, "vgg"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("frequency must be in"), "{e}");
        let e = parse("{").unwrap_err().to_string();
        assert!(e.contains("not valid JSON"), "{e}");
        let e = Workload::load(Path::new("/nonexistent/Z.json"))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("/nonexistent/Z.json") && e.contains("cannot read"),
            "{e}"
        );
        let e = parse(
            r#"{"time": 1, "tasks": [{"id": "d", "load": {"type": "dependent", "prev_task_ids": ["nope"]}, "client": {"model_name": "vgg"}}]}"#,
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("\"nope\""), "{e}");
    }

    #[test]
    fn resolves_names_and_paths() {
        let s = Path::new("/s");
        assert_eq!(
            resolve("b", s),
            vec![PathBuf::from("/s/disb/workloads/B.json")]
        );
        assert_eq!(resolve("my.json", s), vec![PathBuf::from("my.json")]);
    }
}
