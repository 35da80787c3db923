//! What the simulated libamdhip64 reads from the image given to
//! `hipModuleLoadData`: a clang offload bundle or a bare AMDGPU code object.
//!
//! - **Offload bundle** (clang's `clang-offload-bundler` format, which HIP's
//!   `hipModuleLoadData` accepts as well as a bare code object: clr
//!   hipamd/src/hip_fatbin.cpp, `FatBinaryInfo::ExtractFatBinary`): the
//!   magic `__CLANG_OFFLOAD_BUNDLE__`, a little-endian u64 count of entries,
//!   then per entry u64 offset, u64 size, u64 length of the target id and
//!   the target id (`hipv4-amdgcn-amd-amdhsa--gfx906` for code object v4,
//!   `host-x86_64-unknown-linux-gnu` for the host entry). The runtime takes
//!   the entry whose target id matches the device's ISA and ignores the
//!   host entry; none matching is `hipErrorNoBinaryForGpu`. reefd puts the
//!   recorded work of a compiled model (`// reef-sim:` lines, and the CPU
//!   build's `// reef-cpu:` lines; the PTX comments' format,
//!   reef-driver-sim's ptx.rs and cpu.rs) in the host entry, which a real
//!   runtime never reads.
//! - **Code object** (LLVM AMDGPU usage, "Code Object V4 Metadata"): an
//!   ELF64 with `e_machine` EM_AMDGPU (224) whose `e_flags` low byte is the
//!   processor (`EF_AMDGPU_MACH_AMDGCN_GFX906` = 0x2f, GFX90A = 0x3f); a
//!   code object for another processor does not load
//!   (`hipErrorNoBinaryForGpu`). The kernels and their arguments come from
//!   the `NT_AMDGPU_METADATA` note (type 32, name "AMDGPU", a msgpack map):
//!   `amdhsa.kernels[i]` `.name`, `.args[j].size`, `.vgpr_count`,
//!   `.group_segment_fixed_size`, as the runtime's loader takes them. The
//!   module's globals are its defined `STT_OBJECT` symbols other than the
//!   kernel descriptors (`NAME.kd`), with their sizes (`hipModuleGetGlobal`).
//!
//! Nothing of the amdgcn code runs: a kernel's duration comes from its
//! recorded work through reef-sim's cost model, its outputs from its CPU
//! build (reef-driver-sim).

use object::read::elf::{ElfFile64, FileHeader, SectionHeader};
use object::{LittleEndian as LE, Object, ObjectSymbol, SymbolKind};
use reef_driver_sim::ptx::{Entry, Global, Module, Param, Work};

pub const BUNDLE_MAGIC: &[u8] = b"__CLANG_OFFLOAD_BUNDLE__";
/// LLVM AMDGPU usage, "ELF Header": e_machine.
pub const EM_AMDGPU: u16 = 224;
/// `EF_AMDGPU_MACH` is the low byte of e_flags.
pub const EF_AMDGPU_MACH: u32 = 0xff;
/// LLVM AMDGPU usage, "Note Records": the code object V3+ metadata note.
pub const NT_AMDGPU_METADATA: u32 = 32;

/// Why an image does not load, as the runtime says it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LoadError {
    /// Not an offload bundle nor an AMDGPU ELF, or unreadable metadata:
    /// hipErrorInvalidImage.
    Invalid(String),
    /// No code object for this device's processor: hipErrorNoBinaryForGpu.
    NoBinary(String),
}

/// The processor's `EF_AMDGPU_MACH` value (LLVM AMDGPU usage, table
/// "AMDGPU ELF Header e_flags").
pub fn mach(processor: &str) -> Option<u32> {
    Some(match processor {
        "gfx900" => 0x2c,
        "gfx906" => 0x2f,
        "gfx908" => 0x30,
        "gfx90a" => 0x3f,
        _ => return None,
    })
}

/// The image split into the device's code object and the host entry's
/// annotation text (empty for a bare code object).
pub fn unbundle<'a>(image: &'a [u8], processor: &str) -> Result<(&'a [u8], String), LoadError> {
    if !image.starts_with(BUNDLE_MAGIC) {
        return Ok((image, String::new()));
    }
    let bad = |w: &str| LoadError::Invalid(format!("offload bundle: {w}"));
    let u64_at = |at: usize| -> Result<u64, LoadError> {
        image
            .get(at..at + 8)
            .map(|b| u64::from_le_bytes(b.try_into().unwrap()))
            .ok_or_else(|| bad("truncated header"))
    };
    let n = u64_at(24)?;
    if n > 1024 {
        return Err(bad("too many entries"));
    }
    let mut at = 32usize;
    let (mut code, mut host) = (None, String::new());
    let mut ids = Vec::new();
    for _ in 0..n {
        let (off, size, idlen) = (u64_at(at)?, u64_at(at + 8)?, u64_at(at + 16)?);
        at += 24;
        let id = image
            .get(at..at.saturating_add(idlen as usize))
            .ok_or_else(|| bad("truncated target id"))?;
        at += idlen as usize;
        let id = std::str::from_utf8(id).map_err(|_| bad("target id is not text"))?;
        let body = image
            .get(off as usize..(off as usize).saturating_add(size as usize))
            .ok_or_else(|| bad("entry past the end"))?;
        ids.push(id.to_string());
        if id.starts_with("host-") {
            host = String::from_utf8_lossy(body).into_owned();
        } else if target_processor(id) == Some(processor) {
            code = Some(body);
        }
    }
    match code {
        Some(c) => Ok((c, host)),
        None => Err(LoadError::NoBinary(format!(
            "no code object for {processor} among {ids:?}"
        ))),
    }
}

/// `hipv4-amdgcn-amd-amdhsa--gfx906:xnack-` → `gfx906` (clang's offload
/// target id: kind-triple-processor[:features]).
fn target_processor(id: &str) -> Option<&str> {
    let rest = id
        .strip_prefix("hipv4-amdgcn-amd-amdhsa--")
        .or_else(|| id.strip_prefix("hip-amdgcn-amd-amdhsa--"))?;
    rest.split(':').next()
}

/// A code object's kernels and globals (work is added from the
/// annotations by [`annotate`]), and each kernel's
/// `.max_flat_workgroup_size` (the launch bound a launch may not exceed).
pub struct CodeObject {
    pub module: Module,
    pub max_threads: std::collections::HashMap<String, u32>,
}

/// Reads a code object for `processor`.
pub fn read(code: &[u8], processor: &str) -> Result<CodeObject, LoadError> {
    let inv = |w: String| LoadError::Invalid(w);
    let elf = ElfFile64::<LE>::parse(code).map_err(|e| inv(format!("not an ELF64: {e}")))?;
    let hdr = elf.elf_header();
    if hdr.e_machine(LE) != EM_AMDGPU {
        return Err(inv(format!(
            "e_machine {} is not EM_AMDGPU",
            hdr.e_machine(LE)
        )));
    }
    let want = mach(processor).ok_or_else(|| LoadError::NoBinary(format!("{processor}?")))?;
    let got = hdr.e_flags(LE) & EF_AMDGPU_MACH;
    if got != want {
        return Err(LoadError::NoBinary(format!(
            "the code object is for EF_AMDGPU_MACH {got:#x}, this device is {processor} ({want:#x})"
        )));
    }
    let mut meta = None;
    for s in elf.elf_section_table().iter() {
        let Some(mut notes) = s.notes(LE, code).map_err(|e| inv(format!("notes: {e}")))? else {
            continue;
        };
        while let Some(n) = notes.next().map_err(|e| inv(format!("notes: {e}")))? {
            if n.name() == b"AMDGPU" && n.n_type(LE) == NT_AMDGPU_METADATA {
                meta = Some(n.desc().to_vec());
            }
        }
    }
    let meta = meta.ok_or_else(|| inv("no NT_AMDGPU_METADATA note".into()))?;
    let (v, _) = msgpack(&meta, 0, 0).map_err(|e| inv(format!("metadata: {e}")))?;
    let kernels = v
        .get("amdhsa.kernels")
        .and_then(Msg::array)
        .ok_or_else(|| inv("metadata has no amdhsa.kernels".into()))?;
    let mut m = Module::default();
    let mut max_threads = std::collections::HashMap::new();
    for k in kernels {
        let name = k
            .get(".name")
            .and_then(Msg::str)
            .ok_or_else(|| inv("a kernel without .name".into()))?;
        let mut params = Vec::new();
        for (i, a) in k
            .get(".args")
            .and_then(Msg::array)
            .unwrap_or(&[])
            .iter()
            .enumerate()
        {
            let size = a
                .get(".size")
                .and_then(Msg::int)
                .ok_or_else(|| inv(format!("{name}: argument {i} without .size")))?;
            let kind = a.get(".value_kind").and_then(Msg::str).unwrap_or("");
            if kind.starts_with("hidden_") {
                // The runtime fills hidden arguments itself; reef-compile
                // refuses kernels that have any (compile/reef_compile/amd.py).
                continue;
            }
            params.push(Param {
                name: a.get(".name").and_then(Msg::str).unwrap_or("").to_string(),
                size: size as usize,
            });
        }
        // LLVM AMDGPU usage: ".max_flat_workgroup_size" is required.
        let max = k
            .get(".max_flat_workgroup_size")
            .and_then(Msg::int)
            .ok_or_else(|| inv(format!("{name}: no .max_flat_workgroup_size")))?;
        max_threads.insert(name.to_string(), max as u32);
        let regs = k.get(".vgpr_count").and_then(Msg::int).unwrap_or(0) as u32;
        let lds = k
            .get(".group_segment_fixed_size")
            .and_then(Msg::int)
            .unwrap_or(0) as u32;
        m.entries.push(Entry {
            name: name.to_string(),
            params,
            // Resources from the code object; the work from the annotations.
            work: Some(Work {
                regs_per_thread: regs,
                shared_bytes: lds,
                ..Work::default()
            }),
        });
    }
    for s in elf.symbols() {
        let Ok(name) = s.name() else { continue };
        if s.kind() == SymbolKind::Data && s.is_definition() && !name.ends_with(".kd") {
            m.globals.push(Global {
                name: name.to_string(),
                size: s.size() as usize,
            });
        }
    }
    Ok(CodeObject {
        module: m,
        max_threads,
    })
}

/// The `// reef-sim:` lines of the host entry, parsed as the PTX comments
/// are (reef-driver-sim's ptx.rs), over the code object's kernels: each
/// kernel's recorded work replaces the code object's resources only where
/// the annotation states them.
pub fn annotate(m: &mut Module, text: &str) -> Result<(), LoadError> {
    let ann = reef_driver_sim::ptx::annotations(text).map_err(LoadError::Invalid)?;
    for e in &mut m.entries {
        if let Some(w) = ann.get(&e.name) {
            let old = e.work.take().unwrap_or_default();
            let mut w = w.clone();
            if w.regs_per_thread == 0 {
                w.regs_per_thread = old.regs_per_thread;
            }
            if w.shared_bytes == 0 {
                w.shared_bytes = old.shared_bytes;
            }
            e.work = Some(w);
        } else if e
            .work
            .as_ref()
            .is_some_and(|w| w.flops.is_none() && w.block_ns == 0)
        {
            // No recorded work: the driver's default duration, as for an
            // unannotated PTX entry.
            e.work = None;
        }
    }
    Ok(())
}

/// A msgpack value (the subset code object metadata uses: msgpack spec,
/// "Formats").
#[derive(Debug, Clone, PartialEq)]
pub enum Msg {
    Nil,
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(String),
    Bin(Vec<u8>),
    Array(Vec<Msg>),
    Map(Vec<(Msg, Msg)>),
}

impl Msg {
    pub fn get(&self, key: &str) -> Option<&Msg> {
        match self {
            Msg::Map(kv) => kv
                .iter()
                .find(|(k, _)| matches!(k, Msg::Str(s) if s == key))
                .map(|(_, v)| v),
            _ => None,
        }
    }
    pub fn array(&self) -> Option<&[Msg]> {
        match self {
            Msg::Array(a) => Some(a),
            _ => None,
        }
    }
    pub fn str(&self) -> Option<&str> {
        match self {
            Msg::Str(s) => Some(s),
            _ => None,
        }
    }
    pub fn int(&self) -> Option<i64> {
        match self {
            Msg::Int(i) => Some(*i),
            _ => None,
        }
    }
}

/// Decodes one msgpack value at `at`; returns it and the offset after it.
pub fn msgpack(b: &[u8], at: usize, depth: u32) -> Result<(Msg, usize), String> {
    if depth > 32 {
        return Err("nested too deep".into());
    }
    let byte = |i: usize| b.get(i).copied().ok_or("truncated");
    let be = |i: usize, n: usize| -> Result<u64, String> {
        let s = b.get(i..i + n).ok_or("truncated")?;
        Ok(s.iter().fold(0u64, |a, &x| (a << 8) | x as u64))
    };
    let t = byte(at)?;
    let bytes = |i: usize, n: usize| -> Result<(Vec<u8>, usize), String> {
        let s = b
            .get(i..i.checked_add(n).ok_or("length")?)
            .ok_or("truncated")?;
        Ok((s.to_vec(), i + n))
    };
    let string = |i: usize, n: usize| -> Result<(Msg, usize), String> {
        let (s, e) = bytes(i, n)?;
        Ok((
            Msg::Str(String::from_utf8(s).map_err(|_| "a string is not UTF-8")?),
            e,
        ))
    };
    let seq = |mut i: usize, n: usize, map: bool| -> Result<(Msg, usize), String> {
        if n > b.len() {
            return Err("length past the end".into());
        }
        let (mut a, mut kv) = (Vec::new(), Vec::new());
        for _ in 0..n {
            let (k, e) = msgpack(b, i, depth + 1)?;
            i = e;
            if map {
                let (v, e) = msgpack(b, i, depth + 1)?;
                i = e;
                kv.push((k, v));
            } else {
                a.push(k);
            }
        }
        Ok((if map { Msg::Map(kv) } else { Msg::Array(a) }, i))
    };
    Ok(match t {
        0x00..=0x7f => (Msg::Int(t as i64), at + 1),
        0x80..=0x8f => seq(at + 1, (t & 0x0f) as usize, true)?,
        0x90..=0x9f => seq(at + 1, (t & 0x0f) as usize, false)?,
        0xa0..=0xbf => string(at + 1, (t & 0x1f) as usize)?,
        0xc0 => (Msg::Nil, at + 1),
        0xc2 => (Msg::Bool(false), at + 1),
        0xc3 => (Msg::Bool(true), at + 1),
        0xc4..=0xc6 => {
            let w = 1 << (t - 0xc4);
            let (v, e) = bytes(at + 1 + w, be(at + 1, w)? as usize)?;
            (Msg::Bin(v), e)
        }
        0xca => (
            Msg::Float(f32::from_bits(be(at + 1, 4)? as u32) as f64),
            at + 5,
        ),
        0xcb => (Msg::Float(f64::from_bits(be(at + 1, 8)?)), at + 9),
        0xcc..=0xcf => {
            let w = 1 << (t - 0xcc);
            (Msg::Int(be(at + 1, w)? as i64), at + 1 + w)
        }
        0xd0..=0xd3 => {
            let w = 1 << (t - 0xd0);
            let v = be(at + 1, w)?;
            let shift = 64 - 8 * w as u32;
            (Msg::Int(((v << shift) as i64) >> shift), at + 1 + w)
        }
        0xd9..=0xdb => {
            let w = 1 << (t - 0xd9);
            string(at + 1 + w, be(at + 1, w)? as usize)?
        }
        0xdc | 0xdd => {
            let w = if t == 0xdc { 2 } else { 4 };
            seq(at + 1 + w, be(at + 1, w)? as usize, false)?
        }
        0xde | 0xdf => {
            let w = if t == 0xde { 2 } else { 4 };
            seq(at + 1 + w, be(at + 1, w)? as usize, true)?
        }
        0xe0..=0xff => (Msg::Int(t as i8 as i64), at + 1),
        _ => {
            return Err(format!(
                "msgpack type {t:#x} is not used by code object metadata"
            ))
        }
    })
}

/// A bundle of `entries` (target id, contents) in clang-offload-bundler's
/// layout (the module doc's), for tests and tools.
pub fn bundle(entries: &[(&str, &[u8])]) -> Vec<u8> {
    let mut head = BUNDLE_MAGIC.to_vec();
    head.extend((entries.len() as u64).to_le_bytes());
    let hdr_len: usize = head.len() + entries.iter().map(|(id, _)| 24 + id.len()).sum::<usize>();
    let mut off = hdr_len as u64;
    for (id, body) in entries {
        head.extend(off.to_le_bytes());
        head.extend((body.len() as u64).to_le_bytes());
        head.extend((id.len() as u64).to_le_bytes());
        head.extend(id.as_bytes());
        off += body.len() as u64;
    }
    for (_, body) in entries {
        head.extend(*body);
    }
    head
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn msgpack_reads_maps_arrays_strings_ints() {
        // {"a": [1, -1, 300], "bb": "x"}
        let b = [
            0x82, 0xa1, b'a', 0x93, 0x01, 0xff, 0xcd, 0x01, 0x2c, 0xa2, b'b', b'b', 0xa1, b'x',
        ];
        let (v, end) = msgpack(&b, 0, 0).unwrap();
        assert_eq!(end, b.len());
        assert_eq!(
            v.get("a").unwrap().array().unwrap(),
            &[Msg::Int(1), Msg::Int(-1), Msg::Int(300)]
        );
        assert_eq!(v.get("bb").and_then(Msg::str), Some("x"));
        assert!(msgpack(&b[..5], 0, 0).is_err());
    }

    #[test]
    fn bundle_entries_are_chosen_by_processor() {
        assert_eq!(
            target_processor("hipv4-amdgcn-amd-amdhsa--gfx906:xnack-"),
            Some("gfx906")
        );
        assert_eq!(target_processor("host-x86_64-unknown-linux-gnu"), None);
        let bundle = bundle(&[
            ("host-x86_64-unknown-linux-gnu", b"hi"),
            ("hipv4-amdgcn-amd-amdhsa--gfx90a", b"co"),
        ]);
        assert!(matches!(
            unbundle(&bundle, "gfx906"),
            Err(LoadError::NoBinary(_))
        ));
        let (code, host) = unbundle(&bundle, "gfx90a").unwrap();
        assert_eq!((code, host.as_str()), (&b"co"[..], "hi"));
    }
}
