//! What the simulated driver reads from a PTX module at `cuModuleLoadData`:
//! the `.entry` kernels with their parameter lists (count and byte size of
//! each, so a launch's `kernelParams` is read the way the driver reads it),
//! the module-scope `.global` variables (`cuModuleGetGlobal`), and the
//! `// reef-sim:` annotations that carry a kernel's recorded work.
//!
//! PTX grammar: PTX ISA 8.x, §5.1 (comments), §5.4.1 (`.entry` and its
//! `.param` list), §5.4.2 (`.global` state space). A real driver JIT-compiles
//! the whole module; this parser checks only what the launch path needs and
//! refuses a module without `.version`/`.target` or with an unbalanced
//! parameter list or body (CUDA_ERROR_INVALID_PTX).
//!
//! Annotation format (one comment line per kernel; a real driver ignores it
//! as a comment):
//!
//! ```text
//! // reef-sim: kernel=NAME block_ns=N [regs=R] [shared=B] [reads=i,j] [writes=k]
//! // reef-sim: kernel=NAME flops=F bytes=B [regs=R] [shared=B] [reads=i,j] [writes=k]
//! ```
//!
//! `block_ns`: one block's run time alone on an SM (a stated duration, as
//! the hand-written two-kernel model gives); or `flops`/`bytes`: the
//! kernel's recorded work as reef-compile records it (`flops`, `bytes_read +
//! bytes_written` of the schedule, docs/compile.md), from which the driver
//! takes the block durations with reef-sim's cost model of compiled
//! kernels (sim/src/costmodel.rs) for the launch's grid, block and
//! resources, as the virtual-time simulator does; `regs`: registers per thread; `shared`:
//! static shared memory per block in bytes; `reads`/`writes`: indices of
//! the pointer parameters the kernel reads and writes (its read/write sets).

use std::collections::BTreeMap;

/// One kernel parameter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Param {
    pub name: String,
    /// Bytes the launch copies from `kernelParams[i]`.
    pub size: usize,
}

/// The recorded work of a kernel (its `reef-sim:` annotation).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Work {
    /// A stated block duration (0 when `flops` is given).
    pub block_ns: u64,
    /// Recorded work (floating-point operations, bytes read plus written):
    /// durations from the cost model.
    pub flops: Option<u64>,
    pub bytes: u64,
    pub regs_per_thread: u32,
    pub shared_bytes: u32,
    pub reads: Vec<usize>,
    pub writes: Vec<usize>,
}

/// One `.entry`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub name: String,
    pub params: Vec<Param>,
    /// `None`: the module carries no annotation for this kernel.
    pub work: Option<Work>,
}

/// One module-scope `.global`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Global {
    pub name: String,
    pub size: usize,
}

/// A parsed module.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Module {
    pub entries: Vec<Entry>,
    pub globals: Vec<Global>,
}

fn scalar_size(ty: &str) -> Option<usize> {
    Some(match ty {
        ".u8" | ".s8" | ".b8" | ".pred" => 1,
        ".u16" | ".s16" | ".b16" | ".f16" | ".bf16" => 2,
        ".u32" | ".s32" | ".b32" | ".f32" | ".f16x2" | ".bf16x2" => 4,
        ".u64" | ".s64" | ".b64" | ".f64" => 8,
        _ => return None,
    })
}

/// Size of a declaration's words (`.param .align 8 .b8 p[16]`, `.global .u32 x`):
/// the scalar type times the array length, if any; `None` when a size
/// cannot be read or overflows.
fn decl_size(words: &[&str]) -> Option<(String, usize)> {
    let mut ty = None;
    let mut i = 0;
    while i < words.len() {
        let w = words[i];
        if w == ".align" {
            i += 2;
            continue;
        }
        if let Some(s) = scalar_size(w) {
            ty = Some(s);
        }
        i += 1;
    }
    let last = *words.last()?;
    let (name, count) = match last.find('[') {
        Some(b) => {
            let inner = last[b + 1..].trim_end_matches(']');
            (last[..b].to_string(), inner.parse::<usize>().ok()?)
        }
        None => (last.to_string(), 1),
    };
    Some((name, ty?.checked_mul(count)?))
}

fn strip_comments(src: &str) -> String {
    let mut out = String::with_capacity(src.len());
    let b = src.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'/' && b.get(i + 1) == Some(&b'/') {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
        } else if b[i] == b'/' && b.get(i + 1) == Some(&b'*') {
            i += 2;
            while i + 1 < b.len() && !(b[i] == b'*' && b[i + 1] == b'/') {
                if b[i] == b'\n' {
                    out.push('\n');
                }
                i += 1;
            }
            i += 2;
        } else {
            out.push(b[i] as char);
            i += 1;
        }
    }
    out
}

fn parse_list(v: &str) -> Result<Vec<usize>, String> {
    if v.is_empty() {
        return Ok(Vec::new());
    }
    v.split(',')
        .map(|s| s.parse().map_err(|_| format!("bad index list {v:?}")))
        .collect()
}

/// The `// reef-sim:` lines of `src` by kernel name (also the host entry of
/// an AMDGPU offload bundle, libhip-sim).
pub fn annotations(src: &str) -> Result<BTreeMap<String, Work>, String> {
    let mut out = BTreeMap::new();
    for line in src.lines() {
        let Some(rest) = line.trim().strip_prefix("// reef-sim:") else {
            continue;
        };
        let mut name = None;
        let mut w = Work::default();
        for kv in rest.split_whitespace() {
            let (k, v) = kv
                .split_once('=')
                .ok_or_else(|| format!("reef-sim annotation: {kv:?} is not key=value"))?;
            let num = |v: &str| {
                v.parse::<u64>()
                    .map_err(|_| format!("reef-sim annotation: {k}={v} is not a number"))
            };
            match k {
                "kernel" => name = Some(v.to_string()),
                "block_ns" => w.block_ns = num(v)?,
                "flops" => w.flops = Some(num(v)?),
                "bytes" => w.bytes = num(v)?,
                "regs" => w.regs_per_thread = num(v)? as u32,
                "shared" => w.shared_bytes = num(v)? as u32,
                "reads" => w.reads = parse_list(v)?,
                "writes" => w.writes = parse_list(v)?,
                _ => return Err(format!("reef-sim annotation: unknown key {k:?}")),
            }
        }
        let name = name.ok_or("reef-sim annotation without kernel=")?;
        if w.block_ns == 0 && w.flops.is_none() {
            return Err(format!(
                "reef-sim annotation of {name}: neither block_ns (> 0) nor flops"
            ));
        }
        out.insert(name, w);
    }
    Ok(out)
}

/// Parses a PTX module. `Err` carries what is wrong (the driver answers
/// CUDA_ERROR_INVALID_PTX).
pub fn parse(src: &str) -> Result<Module, String> {
    let work = annotations(src)?;
    let text = strip_comments(src);
    if !text.contains(".version") || !text.contains(".target") {
        return Err("not a PTX module: no .version/.target directive".into());
    }
    let b = text.as_bytes();
    let mut m = Module::default();
    let mut depth = 0usize;
    let mut stmt_start = 0usize;
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'{' if depth == 0 && text[stmt_start..i].contains('=') => {
                // An initialiser (`.global .u32 t[2] = {0, 1};`): part of
                // the statement, not a body.
                i += text[i..].find('}').ok_or("unterminated initialiser")?;
            }
            b'{' => {
                depth += 1;
                stmt_start = i + 1;
            }
            b'}' => {
                depth = depth.checked_sub(1).ok_or("unbalanced '}' in the module")?;
                stmt_start = i + 1;
            }
            b';' if depth == 0 => {
                let stmt = &text[stmt_start..i];
                // Drop an initialiser: everything from '=' on. A `.global`
                // after the '=' declares nothing (and its position in the
                // whole statement is not one in the declaration).
                let decl = stmt.split('=').next().unwrap_or(stmt);
                let dw: Vec<&str> = decl.split_whitespace().collect();
                if let Some(g) = dw.iter().position(|w| *w == ".global") {
                    let (name, size) = decl_size(&dw[g..])
                        .ok_or_else(|| format!("cannot size .global declaration {stmt:?}"))?;
                    m.globals.push(Global { name, size });
                }
                stmt_start = i + 1;
            }
            b'(' if depth == 0 => {
                let head = &text[stmt_start..i];
                let hw: Vec<&str> = head.split_whitespace().collect();
                let close = text[i..]
                    .find(')')
                    .map(|c| c + i)
                    .ok_or("unterminated parameter list")?;
                if let Some(e) = hw.iter().position(|w| *w == ".entry") {
                    let name = hw.get(e + 1).ok_or(".entry without a name")?.to_string();
                    let mut params = Vec::new();
                    for p in text[i + 1..close].split(',') {
                        let pw: Vec<&str> = p.split_whitespace().collect();
                        if pw.is_empty() {
                            continue;
                        }
                        let (pname, size) = decl_size(&pw)
                            .ok_or_else(|| format!("kernel {name}: cannot size parameter {p:?}"))?;
                        params.push(Param { name: pname, size });
                    }
                    m.entries.push(Entry {
                        work: work.get(&name).cloned(),
                        name,
                        params,
                    });
                }
                i = close;
            }
            _ => {}
        }
        i += 1;
    }
    if depth != 0 {
        return Err("unbalanced '{' in the module".into());
    }
    for name in work.keys() {
        if !m.entries.iter().any(|e| &e.name == name) {
            return Err(format!("reef-sim annotation names no .entry: {name}"));
        }
    }
    for e in &m.entries {
        if let Some(w) = &e.work {
            if let Some(bad) = w
                .reads
                .iter()
                .chain(&w.writes)
                .find(|&&p| p >= e.params.len())
            {
                return Err(format!(
                    "reef-sim annotation of {}: parameter {bad} does not exist ({} parameters)",
                    e.name,
                    e.params.len()
                ));
            }
        }
    }
    Ok(m)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SRC: &str = r#"
.version 8.0
.target sm_70
.address_size 64
// reef-sim: kernel=k1 block_ns=5000 regs=32 reads=0 writes=1
.visible .global .align 4 .u32 reef_preempt_flag;
.global .align 4 .b8 table[16] = {0};
.visible .entry k1(
    .param .u64 k1_param_0,
    .param .u64 k1_param_1, /* comment, with a comma */
    .param .align 8 .b8 k1_param_2[12],
    .param .u32 __reef_exec_idx
)
.maxntid 256, 1, 1
{
    .reg .b32 %r<2>;
    ret;
}
.entry k2()
{
    ret;
}
"#;

    #[test]
    fn recorded_work_instead_of_a_duration() {
        let src = SRC.replace("block_ns=5000", "flops=1081344 bytes=12160");
        let w = parse(&src).unwrap().entries[0].work.clone().unwrap();
        assert_eq!((w.flops, w.bytes, w.block_ns), (Some(1081344), 12160, 0));
        let none = SRC.replace("block_ns=5000 ", "");
        assert!(parse(&none).unwrap_err().contains("neither block_ns"));
    }

    #[test]
    fn entries_params_globals_and_work() {
        let m = parse(SRC).unwrap();
        assert_eq!(m.entries.len(), 2);
        let k1 = &m.entries[0];
        assert_eq!(k1.name, "k1");
        let sizes: Vec<usize> = k1.params.iter().map(|p| p.size).collect();
        assert_eq!(sizes, vec![8, 8, 12, 4]);
        assert_eq!(k1.params[3].name, "__reef_exec_idx");
        let w = k1.work.as_ref().unwrap();
        assert_eq!((w.block_ns, w.regs_per_thread), (5000, 32));
        assert_eq!((w.reads.clone(), w.writes.clone()), (vec![0], vec![1]));
        assert_eq!(m.entries[1].params.len(), 0);
        assert!(m.entries[1].work.is_none());
        assert_eq!(
            m.globals,
            vec![
                Global {
                    name: "reef_preempt_flag".into(),
                    size: 4
                },
                Global {
                    name: "table".into(),
                    size: 16
                },
            ]
        );
    }

    #[test]
    fn malformed_modules_are_refused() {
        assert!(parse("hello").unwrap_err().contains("not a PTX module"));
        let unbalanced = ".version 8.0\n.target sm_70\n.entry k() { ret;";
        assert!(parse(unbalanced).unwrap_err().contains("unbalanced"));
        let bad_ann =
            ".version 8.0\n.target sm_70\n// reef-sim: kernel=x block_ns=1\n.entry k() {}";
        assert!(parse(bad_ann).unwrap_err().contains("names no .entry"));
        let bad_idx =
            ".version 8.0\n.target sm_70\n// reef-sim: kernel=k block_ns=1 writes=3\n.entry k(.param .u64 a) {}";
        assert!(parse(bad_idx).unwrap_err().contains("does not exist"));
    }

    /// Found by reading the code the sim_ptx fuzz target reaches (its 60 s
    /// and 180 s runs did not): an array length whose byte size overflows
    /// usize panicked in debug builds and wrapped in release ones.
    #[test]
    fn array_size_overflow_is_an_error() {
        let src = ".version 8.0\n.target sm_70\n.global .b64 t[2305843009213693952];";
        let e = parse(src).unwrap_err();
        assert!(e.contains("cannot size .global"), "{e}");
        let src = ".version 8.0\n.target sm_70\n.entry k(.param .b64 p[2305843009213693952]) {}";
        let e = parse(src).unwrap_err();
        assert!(e.contains("cannot size parameter"), "{e}");
    }

    /// Found by the sim_ptx fuzz target (fuzz/, docs/fuzzing.md): a
    /// `.global` after an '=' was looked up in the declaration before the
    /// '=', past its end (index out of range).
    #[test]
    fn global_after_an_initialiser_sign_is_no_declaration() {
        let m = parse(".version.target=v .global;").unwrap();
        assert!(m.globals.is_empty() && m.entries.is_empty());
        let m = parse(".version 8.0\n.target sm_70\n.global .u32 x = .global;").unwrap();
        assert_eq!(
            m.globals,
            vec![Global {
                name: "x".into(),
                size: 4
            }]
        );
    }
}
