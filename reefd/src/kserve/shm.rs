//! Triton's system shared memory extension: a client creates a POSIX
//! shared-memory object (`shm_open(key)`, i.e. the file `/dev/shm/KEY`),
//! registers a region of it by name, key, offset and size, and then names
//! that region instead of sending tensor bytes (parameters
//! `shared_memory_region`, `shared_memory_offset`, `shared_memory_byte_size`
//! on an input or a requested output).
//!
//! The daemon keeps the object's descriptor, not a mapping: it copies with
//! `pread`/`pwrite` at the region's offsets. A mapping would turn a client
//! that truncates its object mid-request into a SIGBUS in the daemon; a
//! read past the end of a truncated file is a short read, answered as an
//! error. The copy count is the same (one copy, region to request buffer).
//!
//! Who may register what: over TCP the daemon does not know the client's
//! user, so it opens only objects owned by its own user or by a uid listed
//! in `kserve.shm_uids`; anything else would let a network client read
//! another user's shared memory through the daemon.

use super::{Kind, V2Error};
use std::collections::BTreeMap;
use std::fs::File;
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt};
use std::sync::Mutex;

/// Most regions registered at once (each holds one descriptor).
pub const MAX_REGIONS: usize = 256;

/// One registered region.
#[derive(Debug)]
pub struct Region {
    pub key: String,
    pub offset: u64,
    pub byte_size: u64,
    file: File,
}

/// The registered regions of the fronts.
#[derive(Debug, Default)]
pub struct Regions {
    map: Mutex<BTreeMap<String, Region>>,
    /// Users whose objects may be registered besides the daemon's own.
    pub allowed_uids: Vec<u32>,
}

/// Where `/dev/shm` is (POSIX shm_open's objects on Linux).
const SHM_DIR: &str = "/dev/shm";

fn check_key(key: &str) -> Result<&str, V2Error> {
    let name = key.strip_prefix('/').unwrap_or(key);
    let ok = !name.is_empty()
        && name.len() <= 255
        && name != "."
        && name != ".."
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b));
    if ok {
        Ok(name)
    } else {
        Err(V2Error::bad(
            "shared memory key must be a POSIX shm name such as \"/reef_input0\" (letters, digits, '.', '_', '-'; at most 255)",
        ))
    }
}

impl Regions {
    pub fn with_uids(allowed_uids: Vec<u32>) -> Self {
        Regions {
            map: Mutex::new(BTreeMap::new()),
            allowed_uids,
        }
    }

    /// Registers `name` as `byte_size` bytes at `offset` of the object `key`.
    pub fn register(
        &self,
        name: &str,
        key: &str,
        offset: u64,
        byte_size: u64,
    ) -> Result<(), V2Error> {
        if name.is_empty() || name.len() > 255 {
            return Err(V2Error::bad(
                "a shared memory region needs a name of 1-255 bytes",
            ));
        }
        let file_name = check_key(key)?;
        let path = std::path::Path::new(SHM_DIR).join(file_name);
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY | libc::O_CLOEXEC)
            .open(&path)
            .map_err(|e| {
                V2Error::bad(format!(
                    "cannot open shared memory key {key:?} ({e}); create it with shm_open before registering"
                ))
            })?;
        let meta = file.metadata().map_err(|e| {
            V2Error::new(
                Kind::Internal,
                format!("cannot stat shared memory {key:?}: {e}"),
            )
        })?;
        if !meta.file_type().is_file() {
            return Err(V2Error::bad(format!(
                "shared memory key {key:?} is not a shared memory object"
            )));
        }
        let me = nix::unistd::Uid::effective().as_raw();
        if meta.uid() != me && !self.allowed_uids.contains(&meta.uid()) {
            return Err(V2Error::new(
                Kind::Unauthenticated,
                format!(
                    "shared memory key {key:?} belongs to uid {}; the daemon registers objects of its own user or of kserve.shm_uids only",
                    meta.uid()
                ),
            ));
        }
        let end = offset
            .checked_add(byte_size)
            .ok_or_else(|| V2Error::bad("offset + byte_size overflows"))?;
        if byte_size == 0 || end > meta.len() {
            return Err(V2Error::bad(format!(
                "region {name:?}: offset {offset} + byte_size {byte_size} does not fit shared memory {key:?} of {} bytes",
                meta.len()
            )));
        }
        let mut map = self.map.lock().unwrap();
        if map.contains_key(name) {
            return Err(V2Error::bad(format!(
                "a shared memory region named {name:?} is already registered; unregister it first"
            )));
        }
        if map.len() >= MAX_REGIONS {
            return Err(V2Error::new(
                Kind::Exhausted,
                format!("at most {MAX_REGIONS} shared memory regions may be registered; unregister some"),
            ));
        }
        map.insert(
            name.to_string(),
            Region {
                key: key.to_string(),
                offset,
                byte_size,
                file,
            },
        );
        Ok(())
    }

    /// Unregisters `name`, or every region when `None`. Unknown names are
    /// not an error (Triton answers success too).
    pub fn unregister(&self, name: Option<&str>) {
        let mut map = self.map.lock().unwrap();
        match name {
            Some(n) => {
                map.remove(n);
            }
            None => map.clear(),
        }
    }

    /// Status of `name`, or of every region: (name, key, offset, size).
    pub fn status(&self, name: Option<&str>) -> Result<Vec<(String, String, u64, u64)>, V2Error> {
        let map = self.map.lock().unwrap();
        if let Some(n) = name.filter(|n| !n.is_empty()) {
            let r = map.get(n).ok_or_else(|| {
                V2Error::new(
                    Kind::NotFound,
                    format!("no shared memory region named {n:?} is registered"),
                )
            })?;
            return Ok(vec![(n.to_string(), r.key.clone(), r.offset, r.byte_size)]);
        }
        Ok(map
            .iter()
            .map(|(n, r)| (n.clone(), r.key.clone(), r.offset, r.byte_size))
            .collect())
    }

    fn span(r: &Region, name: &str, offset: u64, size: u64) -> Result<u64, V2Error> {
        match offset.checked_add(size) {
            Some(end) if end <= r.byte_size => Ok(r.offset + offset),
            _ => Err(V2Error::bad(format!(
                "shared memory region {name:?} has {} bytes; offset {offset} + {size} bytes is past its end",
                r.byte_size
            ))),
        }
    }

    /// Reads `size` bytes at `offset` of region `name`.
    pub fn read(&self, name: &str, offset: u64, size: u64) -> Result<Vec<u8>, V2Error> {
        let map = self.map.lock().unwrap();
        let r = map.get(name).ok_or_else(|| unknown(name))?;
        let at = Self::span(r, name, offset, size)?;
        let mut buf = vec![0u8; size as usize];
        r.file.read_exact_at(&mut buf, at).map_err(|e| {
            V2Error::bad(format!(
                "cannot read {size} bytes of shared memory region {name:?} ({e}): was its object truncated?"
            ))
        })?;
        Ok(buf)
    }

    /// Writes `bytes` at `offset` of region `name`.
    pub fn write(&self, name: &str, offset: u64, bytes: &[u8]) -> Result<(), V2Error> {
        let map = self.map.lock().unwrap();
        let r = map.get(name).ok_or_else(|| unknown(name))?;
        let at = Self::span(r, name, offset, bytes.len() as u64)?;
        r.file.write_all_at(bytes, at).map_err(|e| {
            V2Error::bad(format!(
                "cannot write {} bytes to shared memory region {name:?} ({e})",
                bytes.len()
            ))
        })
    }

    /// Regions registered now.
    pub fn len(&self) -> usize {
        self.map.lock().unwrap().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A tensor's shared memory reference from its parameters, shared by the
/// HTTP and gRPC fronts, which each read their own parameter types:
/// `region` is the `shared_memory_region` parameter (`None`: absent, so
/// the tensor is not in shared memory; `Some(None)`: not a string), and
/// `size` and `offset` read `shared_memory_byte_size` and
/// `shared_memory_offset` (only once a region is named; `Ok(None)`:
/// absent). `what` names the tensor in errors ("input \"x\"").
pub fn reference(
    what: &str,
    region: Option<Option<&str>>,
    size: impl FnOnce() -> Result<Option<i128>, V2Error>,
    offset: impl FnOnce() -> Result<Option<i128>, V2Error>,
) -> Result<Option<super::ShmRef>, V2Error> {
    let Some(region) = region else {
        return Ok(None);
    };
    let region = region
        .ok_or_else(|| V2Error::bad(format!("{what}: shared_memory_region must be a string")))?;
    let size = size()?.ok_or_else(|| {
        V2Error::bad(format!(
            "{what}: shared_memory_region needs shared_memory_byte_size"
        ))
    })?;
    let offset = offset()?.unwrap_or(0);
    let (Ok(size), Ok(offset)) = (u64::try_from(size), u64::try_from(offset)) else {
        return Err(V2Error::bad(format!(
            "{what}: shared memory offset and size must not be negative"
        )));
    };
    Ok(Some((region.to_string(), offset, size)))
}

impl Regions {
    /// The bytes of input `what` of `datatype` and `shape` (`size` bytes)
    /// from the region `r` names; its `shared_memory_byte_size` must be
    /// the tensor's size.
    pub fn read_input(
        &self,
        what: &str,
        r: &super::ShmRef,
        size: usize,
        datatype: &str,
        shape: &[i64],
    ) -> Result<Vec<u8>, V2Error> {
        let (region, offset, n) = r;
        if *n as usize != size {
            return Err(V2Error::bad(format!(
                "{what}: shared_memory_byte_size {n} but {datatype} {shape:?} is {size} bytes"
            )));
        }
        self.read(region, *offset, *n)
    }

    /// Writes output `name`'s `bytes` into the region `r` names, which
    /// must give at least that many.
    pub fn write_output(&self, name: &str, r: &super::ShmRef, bytes: &[u8]) -> Result<(), V2Error> {
        let (region, offset, n) = r;
        if (*n as usize) < bytes.len() {
            return Err(V2Error::bad(format!(
                "output {name:?} is {} bytes but its shared memory region gives {n}",
                bytes.len()
            )));
        }
        self.write(region, *offset, bytes)
    }
}

fn unknown(name: &str) -> V2Error {
    V2Error::bad(format!(
        "no shared memory region named {name:?} is registered; register it first (system shared memory extension)"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Obj(std::path::PathBuf);
    impl Drop for Obj {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0);
        }
    }
    fn object(tag: &str, len: usize) -> (String, Obj) {
        let key = format!("/reef_test_{}_{tag}", std::process::id());
        let path = std::path::Path::new(SHM_DIR).join(&key[1..]);
        std::fs::write(&path, vec![7u8; len]).unwrap();
        (key, Obj(path))
    }

    #[test]
    fn a_region_is_read_and_written_within_its_bounds_only() {
        let (key, _o) = object("rw", 64);
        let r = Regions::default();
        r.register("in", &key, 16, 32).unwrap();
        assert_eq!(r.read("in", 0, 4).unwrap(), vec![7; 4]);
        r.write("in", 28, &[1, 2, 3, 4]).unwrap();
        assert_eq!(r.read("in", 28, 4).unwrap(), vec![1, 2, 3, 4]);
        let past = r.read("in", 30, 4).unwrap_err();
        assert!(past.message.contains("past its end"), "{past}");
        assert!(r
            .read("nope", 0, 1)
            .unwrap_err()
            .message
            .contains("register it first"));
        // The region's offset is into the object: byte 16+28 of the file.
        let file = std::fs::read(_o.0.clone()).unwrap();
        assert_eq!(&file[44..48], &[1, 2, 3, 4]);
    }

    #[test]
    fn registration_refuses_bad_keys_and_regions_past_the_object() {
        let (key, _o) = object("bad", 64);
        let r = Regions::default();
        assert!(r.register("a", "/../etc/passwd", 0, 1).is_err());
        assert!(r.register("a", "/dev/shm/x", 0, 1).is_err());
        let e = r.register("a", &key, 32, 33).unwrap_err();
        assert!(e.message.contains("does not fit"), "{e}");
        assert!(r.register("a", "/reef_no_such_object", 0, 1).is_err());
        r.register("a", &key, 0, 64).unwrap();
        assert!(r
            .register("a", &key, 0, 64)
            .unwrap_err()
            .message
            .contains("already"));
        assert_eq!(r.status(None).unwrap().len(), 1);
        r.unregister(Some("a"));
        assert!(r.is_empty());
    }

    #[test]
    fn references_and_their_checks_are_the_same_for_both_fronts() {
        let ok = |n: i128| move || Ok(Some(n));
        let none = || Ok(None);
        assert_eq!(reference("input \"x\"", None, none, none).unwrap(), None);
        let e = reference("input \"x\"", Some(None), ok(4), none).unwrap_err();
        assert_eq!(
            e.message,
            "input \"x\": shared_memory_region must be a string"
        );
        let e = reference("input \"x\"", Some(Some("r")), none, none).unwrap_err();
        assert!(e.message.ends_with("needs shared_memory_byte_size"), "{e}");
        let e = reference("input \"x\"", Some(Some("r")), ok(4), ok(-1)).unwrap_err();
        assert!(e.message.ends_with("must not be negative"), "{e}");
        assert_eq!(
            reference("o", Some(Some("r")), ok(16), ok(8)).unwrap(),
            Some(("r".to_string(), 8, 16))
        );
        // The tensor's size decides, then the region's bounds.
        let (key, _o) = object("ref", 64);
        let r = Regions::default();
        r.register("in", &key, 0, 64).unwrap();
        let at = ("in".to_string(), 60, 8);
        let e = r
            .read_input("input \"x\"", &at, 4, "FP32", &[1])
            .unwrap_err();
        assert_eq!(
            e.message,
            "input \"x\": shared_memory_byte_size 8 but FP32 [1] is 4 bytes"
        );
        assert!(r
            .read_input("input \"x\"", &at, 8, "FP32", &[2])
            .unwrap_err()
            .message
            .contains("past its end"));
        let e = r
            .write_output("y", &("in".to_string(), 0, 2), &[0; 4])
            .unwrap_err();
        assert_eq!(
            e.message,
            "output \"y\" is 4 bytes but its shared memory region gives 2"
        );
        r.write_output("y", &("in".to_string(), 4, 4), &[9; 4])
            .unwrap();
        assert_eq!(r.read("in", 4, 4).unwrap(), vec![9; 4]);
    }

    #[test]
    fn a_truncated_object_is_an_error_not_a_crash() {
        let (key, o) = object("trunc", 4096);
        let r = Regions::default();
        r.register("t", &key, 0, 4096).unwrap();
        std::fs::OpenOptions::new()
            .write(true)
            .open(&o.0)
            .unwrap()
            .set_len(10)
            .unwrap();
        let e = r.read("t", 0, 4096).unwrap_err();
        assert!(e.message.contains("truncated"), "{e}");
    }
}
