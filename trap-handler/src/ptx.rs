//! REEF's code transformer for kernels we can compile (REEF §4.2 "lazy
//! eviction" and §4.4 "kernel execution index"; Fig. 8 lines 1–4).
//!
//! Every `.entry` of a PTX module gets, at the top of its body, the
//! preemptor of Fig. 8:
//!
//! ```text
//! if (*flag) exit;                      // lines 1-2: evicted from the DQ
//! *global_idx = curr_idx;               // line 3: record the execution index
//! ```
//!
//! The preempt flag and the global execution index are module-scope `.global
//! .u32` variables (`reef_preempt_flag`, `reef_exec_index` unless renamed),
//! which the runtime finds with `cuModuleGetGlobal` and sets or reads; an
//! existing `.global` declaration of the same name is reused. The kernel's
//! own execution index (Fig. 8 line 8, assigned at launch) arrives in one
//! added trailing parameter `.param .u32 __reef_exec_idx`, so the launcher
//! appends one 32-bit argument to every launch of an injected kernel.
//!
//! The transformer works on the token level of the PTX grammar (comments,
//! string literals, nested braces, parameter lists with attributes) rather
//! than on line patterns, so real `nvcc -ptx` output with several kernels,
//! existing parameters and performance directives (`.maxntid` …) passes
//! through unchanged apart from the insertions. Malformed input is reported
//! with its file and line.

use crate::Error;

/// Names used by the injected code.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InjectOptions {
    /// Module-scope `.global .u32` preempt flag (non-zero = preempted).
    pub flag_symbol: String,
    /// Module-scope `.global .u32` the last started kernel's index is stored in.
    pub index_symbol: String,
    /// Name of the added trailing kernel parameter carrying the index.
    pub index_param: String,
}

impl Default for InjectOptions {
    fn default() -> Self {
        InjectOptions {
            flag_symbol: "reef_preempt_flag".into(),
            index_symbol: "reef_exec_index".into(),
            index_param: "__reef_exec_idx".into(),
        }
    }
}

/// The transformed module.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Injected {
    /// The new PTX text.
    pub ptx: String,
    /// The kernels that received the preemptor, in file order.
    pub entries: Vec<String>,
    /// The target named by the module's `.target` directive (e.g. `sm_80`).
    pub target: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Kind {
    Word,
    Punct(char),
}

#[derive(Debug, Clone)]
struct Tok {
    kind: Kind,
    start: usize,
    end: usize,
    line: usize,
}

fn is_word_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'_' | b'$' | b'%' | b'.' | b':')
}

fn tokenize(src: &str, file: &str) -> Result<Vec<Tok>, Error> {
    let err = |line: usize, msg: String| Error::Ptx {
        file: file.to_string(),
        line,
        msg,
    };
    let b = src.as_bytes();
    let (mut i, mut line) = (0, 1);
    let mut toks = Vec::new();
    while i < b.len() {
        let c = b[i];
        if c == b'\n' {
            line += 1;
            i += 1;
        } else if c.is_ascii_whitespace() {
            i += 1;
        } else if c == b'/' && b.get(i + 1) == Some(&b'/') {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
        } else if c == b'/' && b.get(i + 1) == Some(&b'*') {
            let open = line;
            i += 2;
            loop {
                if i + 1 >= b.len() {
                    return Err(err(open, "unterminated /* comment".into()));
                }
                if b[i] == b'*' && b[i + 1] == b'/' {
                    i += 2;
                    break;
                }
                if b[i] == b'\n' {
                    line += 1;
                }
                i += 1;
            }
        } else if c == b'"' {
            let open = line;
            i += 1;
            loop {
                match b.get(i) {
                    None | Some(b'\n') => {
                        return Err(err(open, "unterminated string literal".into()))
                    }
                    Some(b'\\') => i += 2,
                    Some(b'"') => {
                        i += 1;
                        break;
                    }
                    Some(_) => i += 1,
                }
            }
        } else if is_word_byte(c) {
            let start = i;
            while i < b.len() && is_word_byte(b[i]) {
                i += 1;
            }
            toks.push(Tok {
                kind: Kind::Word,
                start,
                end: i,
                line,
            });
        } else {
            // Multi-byte UTF-8 outside comments and strings is not PTX.
            if !c.is_ascii() {
                return Err(err(line, "non-ASCII character outside a comment".into()));
            }
            toks.push(Tok {
                kind: Kind::Punct(c as char),
                start: i,
                end: i + 1,
                line,
            });
            i += 1;
        }
    }
    Ok(toks)
}

/// Inserts the preemptor into every `.entry` of the PTX module `src` (read
/// from `file`, which only names it in errors).
pub fn inject(src: &str, file: &str, opts: &InjectOptions) -> Result<Injected, Error> {
    let err = |line: usize, msg: String| Error::Ptx {
        file: file.to_string(),
        line,
        msg,
    };
    for (what, name) in [
        ("--flag-symbol", &opts.flag_symbol),
        ("--index-symbol", &opts.index_symbol),
        ("index parameter", &opts.index_param),
    ] {
        let ok = name
            .bytes()
            .next()
            .is_some_and(|b| b.is_ascii_alphabetic() || b == b'_' || b == b'$')
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'$');
        if !ok {
            return Err(Error::BadOption(format!(
                "{what} `{name}` is not a PTX identifier (letters, digits, `_`, `$`; not starting with a digit)"
            )));
        }
    }
    let toks = tokenize(src, file)?;
    let text = |t: &Tok| &src[t.start..t.end];
    let is = |t: &Tok, w: &str| t.kind == Kind::Word && text(t) == w;

    // Header: `.version`, then `.target`, as nvcc and every PTX producer write.
    let first = toks.first().ok_or_else(|| {
        err(
            1,
            "empty file: expected PTX starting with `.version` (as `nvcc -ptx` writes)".into(),
        )
    })?;
    if !is(first, ".version") {
        return Err(err(
            first.line,
            format!(
                "expected `.version` as the first directive, found `{}`: is this PTX? (`nvcc -ptx` output starts with `.version`)",
                text(first)
            ),
        ));
    }
    let target_idx = toks
        .iter()
        .position(|t| is(t, ".target"))
        .ok_or_else(|| err(first.line, "no `.target` directive after `.version`".into()))?;
    let target = toks
        .get(target_idx + 1)
        .filter(|t| t.kind == Kind::Word && text(t).starts_with("sm_"))
        .map(|t| text(t).to_string())
        .ok_or_else(|| {
            err(
                toks[target_idx].line,
                "`.target` must name an sm_XX architecture".into(),
            )
        })?;
    // Module-scope declarations go after `.address_size` (or `.target ...`).
    let header_end = {
        let anchor = toks
            .iter()
            .position(|t| is(t, ".address_size"))
            .map(|i| i + 1)
            .unwrap_or(target_idx + 1);
        let mut i = anchor;
        // Skip the rest of the directive's operands (`, texmode_independent`).
        while i + 1 < toks.len()
            && (toks[i + 1].kind == Kind::Punct(',')
                || (toks[i].kind == Kind::Punct(',') && toks[i + 1].kind == Kind::Word))
        {
            i += 1;
        }
        toks[i.min(toks.len() - 1)].end
    };

    let mut inserts: Vec<(usize, String)> = Vec::new();
    let mut entries = Vec::new();
    let mut flag_declared = false;
    let mut index_declared = false;
    let mut depth = 0usize;
    let mut stmt_start = 0usize; // token index where the current top-level statement starts
    let mut i = 0usize;
    while i < toks.len() {
        let t = &toks[i];
        match t.kind {
            Kind::Punct('{') => depth += 1,
            Kind::Punct('}') => {
                if depth == 0 {
                    return Err(err(t.line, "`}` without a matching `{`".into()));
                }
                depth -= 1;
                if depth == 0 {
                    stmt_start = i + 1;
                }
            }
            Kind::Punct(';') if depth == 0 => {
                // A finished module-scope statement: does it declare our symbols?
                let stmt = &toks[stmt_start..i];
                for (sym, declared) in [
                    (&opts.flag_symbol, &mut flag_declared),
                    (&opts.index_symbol, &mut index_declared),
                ] {
                    if stmt.iter().any(|s| is(s, sym)) {
                        if !stmt.iter().any(|s| is(s, ".global")) {
                            return Err(err(
                                t.line,
                                format!("`{sym}` is declared outside the .global state space; the preemptor needs a .global .u32 (pick another name with --flag-symbol/--index-symbol)"),
                            ));
                        }
                        if !stmt
                            .iter()
                            .any(|s| matches!(text(s), ".u32" | ".b32" | ".s32"))
                            || stmt.iter().any(|s| s.kind == Kind::Punct('['))
                        {
                            return Err(err(
                                t.line,
                                format!("`{sym}` is declared here but not as a scalar 32-bit word (.u32/.b32/.s32); the preemptor loads and stores 32 bits"),
                            ));
                        }
                        *declared = true;
                    }
                }
                stmt_start = i + 1;
            }
            Kind::Word if depth == 0 && text(t) == ".entry" => {
                let (entry, next) = parse_entry(src, &toks, i, file, opts)?;
                if let Some(entry) = entry {
                    inserts.push((entry.param_pos, entry.param_text));
                    inserts.push((entry.body_pos, preamble(opts)));
                    entries.push(entry.name);
                }
                i = next;
                stmt_start = next;
                continue;
            }
            _ => {}
        }
        i += 1;
    }
    if depth != 0 {
        let line = toks.last().map_or(1, |t| t.line);
        return Err(err(
            line,
            format!("{depth} unclosed `{{` at end of file (truncated PTX?)"),
        ));
    }
    if entries.is_empty() {
        return Err(err(
            toks.last().map_or(1, |t| t.line),
            "no `.entry` with a body: nothing to inject (is this a module of device functions only?)".into(),
        ));
    }
    let mut decls = String::new();
    for (sym, declared) in [
        (&opts.flag_symbol, flag_declared),
        (&opts.index_symbol, index_declared),
    ] {
        if !declared {
            decls.push_str(&format!("\n.visible .global .align 4 .u32 {sym};"));
        }
    }
    if !decls.is_empty() {
        decls.insert_str(
            0,
            "\n// reef: preempt flag and execution index (REEF Fig. 8)",
        );
        inserts.push((header_end, decls));
    }
    inserts.sort_by_key(|(pos, _)| *pos);
    let mut out = String::with_capacity(src.len() + inserts.len() * 400);
    let mut last = 0;
    for (pos, s) in inserts {
        out.push_str(&src[last..pos]);
        out.push_str(&s);
        last = pos;
    }
    out.push_str(&src[last..]);
    Ok(Injected {
        ptx: out,
        entries,
        target,
    })
}

struct Entry {
    name: String,
    param_pos: usize,
    param_text: String,
    body_pos: usize,
}

/// Parses `.entry NAME ( params ) directives { body }` starting at token `at`
/// (the `.entry`). Returns the insertion points (None for a declaration
/// without a body) and the token index after the entry.
fn parse_entry(
    src: &str,
    toks: &[Tok],
    at: usize,
    file: &str,
    opts: &InjectOptions,
) -> Result<(Option<Entry>, usize), Error> {
    let err = |line: usize, msg: String| Error::Ptx {
        file: file.to_string(),
        line,
        msg,
    };
    let text = |t: &Tok| &src[t.start..t.end];
    let line = toks[at].line;
    let name_tok = toks
        .get(at + 1)
        .filter(|t| t.kind == Kind::Word && !text(t).starts_with('.'))
        .ok_or_else(|| err(line, "`.entry` without a kernel name".into()))?;
    let name = text(name_tok).to_string();
    let param = format!(".param .u32 {}", opts.index_param);
    let mut i = at + 2;
    let (param_pos, param_text);
    if toks.get(i).map(|t| &t.kind) == Some(&Kind::Punct('(')) {
        let open = i;
        let mut close = None;
        let mut j = open + 1;
        while let Some(t) = toks.get(j) {
            match t.kind {
                Kind::Punct(')') => {
                    close = Some(j);
                    break;
                }
                Kind::Punct('{') | Kind::Punct('}') | Kind::Punct(';') => break,
                Kind::Word if text(t) == opts.index_param => {
                    return Err(err(
                        t.line,
                        format!(
                            "kernel `{name}` already has a parameter `{}`: this PTX was already injected",
                            opts.index_param
                        ),
                    ))
                }
                Kind::Word if text(t) == ".entry" => break,
                _ => {}
            }
            j += 1;
        }
        let close = close.ok_or_else(|| {
            err(
                toks[open].line,
                format!("parameter list of kernel `{name}` is not closed by `)`"),
            )
        })?;
        (param_pos, param_text) = if close == open + 1 {
            (toks[close].start, format!("\n\t{param}\n"))
        } else {
            (toks[close - 1].end, format!(",\n\t{param}"))
        };
        i = close + 1;
    } else {
        param_pos = name_tok.end;
        param_text = format!("(\n\t{param}\n)");
    }
    // Performance-tuning directives (.maxntid 256, 1, 1 …) up to the body.
    while let Some(t) = toks.get(i) {
        match t.kind {
            Kind::Punct('{') => break,
            Kind::Punct(';') => return Ok((None, i + 1)), // prototype only
            Kind::Word if matches!(text(t), ".entry" | ".func" | ".global" | ".const") => {
                return Err(err(
                    t.line,
                    format!(
                        "kernel `{name}` (line {line}) has no body before this `{}`",
                        text(t)
                    ),
                ))
            }
            _ => i += 1,
        }
    }
    let open = toks.get(i).ok_or_else(|| {
        err(
            line,
            format!("kernel `{name}` has no body: the file ends before its `{{`"),
        )
    })?;
    Ok((
        Some(Entry {
            name,
            param_pos,
            param_text,
            body_pos: open.end,
        }),
        // The body itself is scanned by the caller, which tracks braces.
        i,
    ))
}

/// The preemptor of Fig. 8 (lines 1–3) in PTX, in a nested scope so its
/// registers cannot clash with the kernel's.
fn preamble(opts: &InjectOptions) -> String {
    format!(
        "\n\t// reef: preemptor (REEF Fig. 8 lines 1-4): evicted kernels exit at once\n\
         \t{{\n\
         \t.reg .pred \t%reef_p;\n\
         \t.reg .b32 \t%reef_r<2>;\n\
         \tld.volatile.global.u32 \t%reef_r0, [{flag}];\n\
         \tsetp.ne.u32 \t%reef_p, %reef_r0, 0;\n\
         \t@%reef_p exit;\n\
         \tld.param.u32 \t%reef_r1, [{param}];\n\
         \tst.volatile.global.u32 \t[{index}], %reef_r1;\n\
         \t}}\n",
        flag = opts.flag_symbol,
        index = opts.index_symbol,
        param = opts.index_param,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const TWO: &str = r#"//
// Generated by NVIDIA NVVM Compiler
.version 8.0
.target sm_80
.address_size 64

	// .globl	_Z3addPfS_i
.visible .entry _Z3addPfS_i(
	.param .u64 _Z3addPfS_i_param_0,
	.param .u32 _Z3addPfS_i_param_2
)
.maxntid 256, 1, 1
{
	.reg .b32 	%r<2>;
	{ /* nested } brace in comment */ }
	ret;
}
.visible .entry _Z4noopv()
{
	ret;
}
"#;

    fn inj(src: &str) -> Result<Injected, Error> {
        inject(src, "t.ptx", &InjectOptions::default())
    }

    #[test]
    fn injects_every_entry_and_declares_symbols() {
        let out = inj(TWO).unwrap();
        assert_eq!(out.entries, ["_Z3addPfS_i", "_Z4noopv"]);
        assert_eq!(out.target, "sm_80");
        assert_eq!(out.ptx.matches("@%reef_p exit;").count(), 2);
        assert!(out
            .ptx
            .contains("\t.param .u32 _Z3addPfS_i_param_2,\n\t.param .u32 __reef_exec_idx\n)"));
        assert!(out
            .ptx
            .contains("_Z4noopv(\n\t.param .u32 __reef_exec_idx\n)"));
        let decl = out
            .ptx
            .find(".visible .global .align 4 .u32 reef_preempt_flag;")
            .unwrap();
        assert!(decl > out.ptx.find(".address_size 64").unwrap());
        assert!(decl < out.ptx.find(".entry").unwrap());
        // The preemptor sits right after each body's opening brace.
        let body = out.ptx.find(".maxntid 256, 1, 1\n{").unwrap();
        let check = out.ptx[body..].find("ld.volatile.global.u32").unwrap();
        assert!(check < out.ptx[body..].find(".reg .b32 \t%r<2>").unwrap());
    }

    #[test]
    fn reuses_an_existing_declaration() {
        let src = TWO.replace(
            ".address_size 64\n",
            ".address_size 64\n.extern .global .align 4 .u32 reef_preempt_flag;\n",
        );
        let out = inj(&src).unwrap();
        assert_eq!(out.ptx.matches(".u32 reef_preempt_flag;").count(), 1);
        assert_eq!(out.ptx.matches(".u32 reef_exec_index;").count(), 1);
    }

    #[test]
    fn entry_without_parens_and_prototypes() {
        let src = ".version 8.0\n.target sm_75\n.address_size 64\n.entry k\n{\nret;\n}\n.extern .entry proto(.param .u64 a);\n";
        let out = inj(src).unwrap();
        assert_eq!(out.entries, ["k"]);
        assert!(out
            .ptx
            .contains(".entry k(\n\t.param .u32 __reef_exec_idx\n)"));
        assert!(out.ptx.contains(".extern .entry proto(.param .u64 a);"));
    }

    fn line_of(e: Error) -> (usize, String) {
        match e {
            Error::Ptx { line, msg, file } => {
                assert_eq!(file, "t.ptx");
                (line, msg)
            }
            other => panic!("unexpected error {other}"),
        }
    }

    #[test]
    fn malformed_ptx_is_reported_with_its_line() {
        let (l, m) = line_of(inj("hello world").unwrap_err());
        assert_eq!(l, 1);
        assert!(m.contains(".version"), "{m}");
        let (_, m) = line_of(inj("").unwrap_err());
        assert!(m.contains("empty"), "{m}");
        let (l, m) = line_of(
            inj(".version 8.0\n.target sm_80\n.entry k(\n.param .u64 a\n{\nret;\n}\n").unwrap_err(),
        );
        assert_eq!(l, 3);
        assert!(m.contains("not closed"), "{m}");
        let (l, m) =
            line_of(inj(".version 8.0\n.target sm_80\n.entry k()\n{\nret;\n").unwrap_err());
        assert_eq!(l, 5);
        assert!(m.contains("unclosed"), "{m}");
        let (l, m) = line_of(inj(".version 8.0\n.target sm_80\n/* open\n\n").unwrap_err());
        assert_eq!(l, 3);
        assert!(m.contains("comment"), "{m}");
        let (_, m) =
            line_of(inj(".version 8.0\n.target sm_80\n.func f()\n{\nret;\n}\n").unwrap_err());
        assert!(m.contains("no `.entry`"), "{m}");
        let (l, m) = line_of(inj(".version 8.0\n.target sm_80\n}\n").unwrap_err());
        assert_eq!(l, 3);
        assert!(m.contains("without a matching"), "{m}");
        let (_, m) = line_of(inj(".version 8.0\n.target compute_80\n").unwrap_err());
        assert!(m.contains("sm_XX"), "{m}");
        let (_, m) = line_of(
            inj(".version 8.0\n.target sm_80\n.const .u32 reef_preempt_flag;\n.entry k(){ret;}\n")
                .unwrap_err(),
        );
        assert!(m.contains("state space"), "{m}");
    }

    #[test]
    fn existing_symbol_of_the_wrong_type_is_an_error() {
        for decl in [
            ".global .u64 reef_preempt_flag;",
            ".global .u32 reef_preempt_flag[4];",
        ] {
            let src = TWO.replace(".address_size 64\n", &format!(".address_size 64\n{decl}\n"));
            let (l, m) = line_of(inj(&src).unwrap_err());
            assert_eq!(l, 6, "{decl}");
            assert!(m.contains("32-bit word"), "{decl}: {m}");
        }
    }

    #[test]
    fn refuses_to_inject_twice() {
        let once = inj(TWO).unwrap().ptx;
        let (_, m) = line_of(inj(&once).unwrap_err());
        assert!(m.contains("already injected"), "{m}");
    }

    #[test]
    fn rejects_bad_symbol_names() {
        let opts = InjectOptions {
            flag_symbol: "9flag".into(),
            ..InjectOptions::default()
        };
        let e = inject(TWO, "t.ptx", &opts).unwrap_err();
        assert!(
            matches!(&e, Error::BadOption(m) if m.contains("--flag-symbol")),
            "{e}"
        );
        let opts = InjectOptions {
            flag_symbol: "my_flag".into(),
            ..InjectOptions::default()
        };
        let out = inject(TWO, "t.ptx", &opts).unwrap();
        assert!(out.ptx.contains("[my_flag]"));
        assert!(!out.ptx.contains("reef_preempt_flag"));
    }
}
