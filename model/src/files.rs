//! Bounded, typed reads of the files a model names.
//!
//! A model path may come from a client of the daemon (issue 25, D1/D2): it
//! can name `/dev/zero`, a FIFO, a file under `/proc`, or a 2^40-byte sparse
//! file. Every read of a model's files therefore goes through [`read`],
//! which
//! - opens without blocking (`O_NONBLOCK`: opening a FIFO with no writer
//!   would wait forever) and without becoming the caller's terminal
//!   (`O_NOCTTY`);
//! - accepts regular files only, and none on procfs or sysfs (their files
//!   say they are regular and 0 bytes long, and read as anything);
//! - checks the size against a limit before reading, and reads at most the
//!   limit even if the file grows;
//! - reports errors naming the file, what it was for and what was wrong,
//!   never its contents.
//!
//! Whose rights a read uses is the caller's concern: the daemon reads a
//! client-named path with the client's file-system identity (reefd
//! `runtime::models`).

use std::fs::File;
use std::io::Read;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// Largest schedule, profile, manifest or metadata file read (64 MiB; the
/// largest measured schedule, densenet's, is 0.4 MiB).
pub const MAX_TEXT_BYTES: u64 = 64 << 20;
/// Largest code file (PTX or a code object) read (256 MiB).
pub const MAX_CODE_BYTES: u64 = 256 << 20;

/// procfs and sysfs (statfs(2) `f_type`, linux/magic.h).
const PROC_SUPER_MAGIC: i64 = 0x9fa0;
const SYSFS_MAGIC: i64 = 0x6265_6572;

/// Why a file could not be read. The texts name the file and its purpose.
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    #[error("{path}: cannot open the {what}: {cause}")]
    Open {
        path: PathBuf,
        what: &'static str,
        cause: std::io::Error,
    },
    #[error("{path}: the {what} is {kind}, not a regular file; name a regular file")]
    NotRegular {
        path: PathBuf,
        what: &'static str,
        kind: &'static str,
    },
    #[error("{path}: the {what} has {size} B, more than the {limit} B allowed")]
    TooLarge {
        path: PathBuf,
        what: &'static str,
        size: u64,
        limit: u64,
    },
    #[error("{path}: cannot read the {what}: {cause}")]
    Read {
        path: PathBuf,
        what: &'static str,
        cause: std::io::Error,
    },
    #[error("{path}: the {what} is not UTF-8 text")]
    NotText { path: PathBuf, what: &'static str },
}

impl FileError {
    /// Whether the file exists but the reader may not open it.
    pub fn is_permission_denied(&self) -> bool {
        matches!(self, FileError::Open { cause, .. }
            if cause.kind() == std::io::ErrorKind::PermissionDenied)
    }
}

/// Opens `path` for reading as a regular file of at most `limit` bytes;
/// returns the file and its size.
pub fn open(path: &Path, what: &'static str, limit: u64) -> Result<(File, u64), FileError> {
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY | libc::O_CLOEXEC)
        .open(path)
        .map_err(|cause| FileError::Open {
            path: path.to_path_buf(),
            what,
            cause,
        })?;
    let meta = f.metadata().map_err(|cause| FileError::Read {
        path: path.to_path_buf(),
        what,
        cause,
    })?;
    let ft = meta.file_type();
    if !ft.is_file() {
        let kind = if ft.is_dir() {
            "a directory"
        } else if ft.is_fifo() {
            "a FIFO"
        } else if ft.is_char_device() {
            "a character device"
        } else if ft.is_block_device() {
            "a block device"
        } else if ft.is_socket() {
            "a socket"
        } else {
            "not a regular file"
        };
        return Err(FileError::NotRegular {
            path: path.to_path_buf(),
            what,
            kind,
        });
    }
    if on_pseudo_fs(&f) {
        return Err(FileError::NotRegular {
            path: path.to_path_buf(),
            what,
            kind: "a file of procfs or sysfs",
        });
    }
    let size = meta.len();
    if size > limit {
        return Err(FileError::TooLarge {
            path: path.to_path_buf(),
            what,
            size,
            limit,
        });
    }
    Ok((f, size))
}

/// Whether `f` lives on procfs or sysfs.
fn on_pseudo_fs(f: &File) -> bool {
    use std::os::fd::AsRawFd;
    let mut s: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: `f` is an open descriptor for the duration of the call and `s`
    // is a valid, writable statfs.
    let r = unsafe { libc::fstatfs(f.as_raw_fd(), &mut s) };
    r == 0 && matches!(s.f_type as i64, PROC_SUPER_MAGIC | SYSFS_MAGIC)
}

/// Reads all of `path` (a regular file of at most `limit` bytes).
pub fn read(path: &Path, what: &'static str, limit: u64) -> Result<Vec<u8>, FileError> {
    let (f, size) = open(path, what, limit)?;
    let mut out = Vec::with_capacity(size as usize);
    // Read one byte past the limit: a file that grew since fstat is refused.
    f.take(limit + 1)
        .read_to_end(&mut out)
        .map_err(|cause| FileError::Read {
            path: path.to_path_buf(),
            what,
            cause,
        })?;
    if out.len() as u64 > limit {
        return Err(FileError::TooLarge {
            path: path.to_path_buf(),
            what,
            size: out.len() as u64,
            limit,
        });
    }
    Ok(out)
}

/// Reads `path` as UTF-8 text (at most `limit` bytes).
pub fn read_text(path: &Path, what: &'static str, limit: u64) -> Result<String, FileError> {
    String::from_utf8(read(path, what, limit)?).map_err(|_| FileError::NotText {
        path: path.to_path_buf(),
        what,
    })
}

/// Reads `ranges` (offset, bytes) of `path`, which must be at least as long
/// as the furthest range ends; nothing else of the file is read.
pub fn read_ranges(
    path: &Path,
    what: &'static str,
    ranges: &[(u64, u64)],
) -> Result<Vec<Vec<u8>>, FileError> {
    use std::os::unix::fs::FileExt;
    let end = ranges
        .iter()
        .map(|&(o, n)| o.saturating_add(n))
        .max()
        .unwrap_or(0);
    let (f, size) = open(path, what, u64::MAX)?;
    if size < end {
        return Err(FileError::Read {
            path: path.to_path_buf(),
            what,
            cause: std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                format!("it has {size} B and the model's entries reach {end} B"),
            ),
        });
    }
    ranges
        .iter()
        .map(|&(o, n)| {
            let mut b = vec![0u8; n as usize];
            f.read_exact_at(&mut b, o)
                .map_err(|cause| FileError::Read {
                    path: path.to_path_buf(),
                    what,
                    cause,
                })?;
            Ok(b)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_device_a_fifo_a_proc_file_and_a_directory_are_refused_without_reading() {
        let e = read(Path::new("/dev/zero"), "schedule", 1 << 20).unwrap_err();
        assert!(e.to_string().contains("character device"), "{e}");
        let d = tempfile::tempdir().unwrap();
        let fifo = d.path().join("fifo");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let t = std::time::Instant::now();
        let e = read(&fifo, "schedule", 1 << 20).unwrap_err();
        assert!(e.to_string().contains("FIFO"), "{e}");
        assert!(t.elapsed() < std::time::Duration::from_secs(1));
        let e = read(Path::new("/proc/self/environ"), "schedule", 1 << 20).unwrap_err();
        assert!(e.to_string().contains("procfs"), "{e}");
        let e = read(d.path(), "schedule", 1 << 20).unwrap_err();
        assert!(e.to_string().contains("directory"), "{e}");
    }

    #[test]
    fn a_file_over_the_limit_is_refused_by_its_size_and_contents_never_appear() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("big");
        let f = File::create(&p).unwrap();
        // Sparse: 2^40 bytes, none written.
        f.set_len(1 << 40).unwrap();
        let t = std::time::Instant::now();
        let e = read(&p, "schedule", MAX_TEXT_BYTES).unwrap_err();
        assert!(t.elapsed() < std::time::Duration::from_secs(1));
        assert!(
            matches!(e, FileError::TooLarge { size, .. } if size == 1 << 40),
            "{e}"
        );
        std::fs::write(&p, "secret-token\u{0}\u{ff}").unwrap();
        let e = read(&p, "schedule", 4).unwrap_err();
        assert!(!e.to_string().contains("secret"), "{e}");
        assert_eq!(read(&p, "schedule", 64).unwrap().len(), 15);
    }

    #[test]
    fn ranges_are_read_where_they_lie_and_a_short_file_is_refused() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("w");
        std::fs::write(&p, b"0123456789").unwrap();
        let r = read_ranges(&p, "weights", &[(2, 3), (8, 2)]).unwrap();
        assert_eq!(r, vec![b"234".to_vec(), b"89".to_vec()]);
        let e = read_ranges(&p, "weights", &[(8, 3)]).unwrap_err();
        assert!(e.to_string().contains("reach 11 B"), "{e}");
    }
}
