//! Fake GPU driver devices served over FUSE, for exercising the ioctl
//! wrappers through real `ioctl(2)` system calls where no GPU exists: a
//! stateful fake KFD ([`FakeKfd`]) and a fake nvidiactl ([`FakeNvidiaCtl`]).
//!
//! Paper: REEF §4.5–4.6 (the driver interfaces being faked); DESIGN.md,
//! "Hardware paths without hardware".
//!
//! How it works: each fake is a one-file FUSE filesystem mounted on a fresh
//! temporary directory. A plain FUSE file (unlike CUSE) gets "restricted"
//! ioctls: the kernel copies `_IOC_SIZE(cmd)` bytes in for `_IOW` and out for
//! `_IOR`, which covers the fixed argument structs of KFD and RM. Arguments
//! that are *pointers* inside those structs (the queue-id array of
//! SUSPEND_QUEUES, the parameter block of an RM control, …) are read and
//! written in the calling process with `process_vm_readv`/`process_vm_writev`
//! on the caller's pid, which FUSE passes with every request — the same
//! `copy_from_user`/`copy_to_user` the real drivers do.
//!
//! Mounting needs `/dev/fuse` and the right to mount (root here, or
//! fusermount3). [`fuse_unavailable`] tells tests when to skip.

mod kfd;
mod nv;

pub use kfd::{FakeKfd, FakeKfdGpu, FakeKfdProcess, FakeKfdQueue, KfdState};
pub use nv::{FakeNvidiaCtl, NvObject, NvObjectKind, NvState};

use std::ffi::OsStr;
use std::fs::OpenOptions;
use std::io::{self, IoSlice, IoSliceMut};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use fuser::{
    Errno as FuseErrno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, INodeNo,
    IoctlFlags, MountOption, OpenFlags, ReplyAttr, ReplyDirectory, ReplyEntry, ReplyIoctl,
    ReplyOpen, Request,
};
use nix::errno::Errno;
use nix::sys::uio::{process_vm_readv, process_vm_writev, RemoteIoVec};
use nix::unistd::Pid;

/// Why FUSE cannot be used here, or `None` when `/dev/fuse` opens.
pub fn fuse_unavailable() -> Option<String> {
    match OpenOptions::new().read(true).write(true).open("/dev/fuse") {
        Ok(_) => None,
        Err(e) => Some(format!("/dev/fuse cannot be opened: {e}")),
    }
}

/// Tells the person running the tests that a FUSE test was skipped and why.
/// See [`skip`].
pub fn report_skip(test: &str, why: &str) {
    skip(test, &format!("skipping the FUSE round trip: {why}"));
}

/// A test that cannot run here (no `/dev/fuse`, not root) returns after
/// calling this. Where the prerequisites must exist, a skip is a failure:
/// with `REEF_REQUIRE_HW_FAKES=1` (scripts/test.sh sets it when run as root
/// with `/dev/fuse` present, as in CI) this panics with the reason, so a
/// test that silently checks nothing cannot pass there. Otherwise the reason
/// goes to stderr (which the test harness does not capture) and, when
/// `REEF_SKIP_LOG` names a file, is appended to it as one line, so the test
/// command can print how many tests skipped and why.
pub fn skip(test: &str, why: &str) {
    use std::io::Write;
    if std::env::var_os("REEF_REQUIRE_HW_FAKES").is_some_and(|v| v == "1") {
        panic!("{test}: would skip, but REEF_REQUIRE_HW_FAKES=1 requires it to run: {why}");
    }
    let line = format!("{test}: {why}");
    let _ = writeln!(std::io::stderr(), "{line}");
    if let Some(log) = std::env::var_os("REEF_SKIP_LOG") {
        if let Ok(mut f) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
        {
            let _ = writeln!(f, "{line}");
        }
    }
}

/// The process making a request, as FUSE reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Caller {
    /// The calling thread's id (FUSE reports the thread, not the process).
    pub tid: u32,
    /// Its thread-group id (the process id), from /proc.
    pub tgid: u32,
    pub uid: u32,
}

impl Caller {
    fn from_request(req: &Request) -> Caller {
        let tid = req.pid();
        Caller {
            tid,
            tgid: proc_status_field(tid, "Tgid:").unwrap_or(tid),
            uid: req.uid(),
        }
    }

    /// Reads `len` bytes at `addr` in the caller's memory (EFAULT if the
    /// range is not mapped, as `copy_from_user` would fail).
    pub fn read_mem(&self, addr: u64, len: usize) -> Result<Vec<u8>, Errno> {
        let mut buf = vec![0u8; len];
        if len == 0 {
            return Ok(buf);
        }
        let remote = [RemoteIoVec {
            base: addr as usize,
            len,
        }];
        let n = process_vm_readv(
            Pid::from_raw(self.tid as i32),
            &mut [IoSliceMut::new(&mut buf)],
            &remote,
        )
        .map_err(|_| Errno::EFAULT)?;
        if n != len {
            return Err(Errno::EFAULT);
        }
        Ok(buf)
    }

    /// Writes `data` at `addr` in the caller's memory (EFAULT on failure).
    pub fn write_mem(&self, addr: u64, data: &[u8]) -> Result<(), Errno> {
        if data.is_empty() {
            return Ok(());
        }
        let remote = [RemoteIoVec {
            base: addr as usize,
            len: data.len(),
        }];
        let n = process_vm_writev(
            Pid::from_raw(self.tid as i32),
            &[IoSlice::new(data)],
            &remote,
        )
        .map_err(|_| Errno::EFAULT)?;
        if n != data.len() {
            return Err(Errno::EFAULT);
        }
        Ok(())
    }
}

/// A numeric field of /proc/<pid>/status, e.g. "Tgid:" or "TracerPid:".
pub(crate) fn proc_status_field(pid: u32, field: &str) -> Option<u32> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().parse().ok())
}

/// What a fake device answers to one ioctl.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IoctlReply {
    /// The ioctl's return value (non-negative).
    pub result: i32,
    /// Bytes copied back into the caller's argument (`_IOR` direction).
    pub data: Vec<u8>,
}

/// A device served by [`FakeMount`].
pub trait FakeDevice: Send + Sync + 'static {
    /// Name of the single file in the mount.
    fn file_name(&self) -> &'static str;
    /// The file was opened; `fh` names the open file until `release`.
    fn open(&self, _caller: &Caller, _fh: u64) -> Result<(), Errno> {
        Ok(())
    }
    /// The last reference to open file `fh` was closed.
    fn release(&self, _fh: u64) {}
    /// An ioctl on open file `fh`; `input` holds `_IOC_SIZE(cmd)` bytes when
    /// the request has the write direction.
    fn ioctl(
        &self,
        caller: &Caller,
        fh: u64,
        cmd: u32,
        input: &[u8],
        out_size: u32,
    ) -> Result<IoctlReply, Errno>;
}

const FILE_INO: u64 = 2;
const TTL: Duration = Duration::from_secs(1);

struct DeviceFs<D: FakeDevice> {
    dev: Arc<D>,
    next_fh: AtomicU64,
    open_errno: Arc<AtomicI32>,
}

fn attr(ino: u64, kind: FileType, perm: u16) -> FileAttr {
    FileAttr {
        ino: INodeNo(ino),
        size: 0,
        blocks: 0,
        atime: SystemTime::UNIX_EPOCH,
        mtime: SystemTime::UNIX_EPOCH,
        ctime: SystemTime::UNIX_EPOCH,
        crtime: SystemTime::UNIX_EPOCH,
        kind,
        perm,
        nlink: if kind == FileType::Directory { 2 } else { 1 },
        uid: 0,
        gid: 0,
        rdev: 0,
        blksize: 4096,
        flags: 0,
    }
}

fn fuse_errno(e: Errno) -> FuseErrno {
    FuseErrno::from_i32(e as i32)
}

impl<D: FakeDevice> Filesystem for DeviceFs<D> {
    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        if parent.0 == 1 && name == self.dev.file_name() {
            reply.entry(
                &TTL,
                &attr(FILE_INO, FileType::RegularFile, 0o666),
                fuser::Generation(0),
            );
        } else {
            reply.error(fuse_errno(Errno::ENOENT));
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        match ino.0 {
            1 => reply.attr(&TTL, &attr(1, FileType::Directory, 0o755)),
            FILE_INO => reply.attr(&TTL, &attr(FILE_INO, FileType::RegularFile, 0o666)),
            _ => reply.error(fuse_errno(Errno::ENOENT)),
        }
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        if ino.0 != 1 {
            reply.error(fuse_errno(Errno::ENOTDIR));
            return;
        }
        let entries = [
            (1, FileType::Directory, "."),
            (1, FileType::Directory, ".."),
            (FILE_INO, FileType::RegularFile, self.dev.file_name()),
        ];
        for (i, (ino, kind, name)) in entries.iter().enumerate().skip(offset as usize) {
            if reply.add(INodeNo(*ino), (i + 1) as u64, *kind, name) {
                break;
            }
        }
        reply.ok();
    }

    fn open(&self, req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        if ino.0 != FILE_INO {
            reply.error(fuse_errno(Errno::EISDIR));
            return;
        }
        let denied = self.open_errno.load(Ordering::SeqCst);
        if denied != 0 {
            reply.error(fuse_errno(Errno::from_raw(denied)));
            return;
        }
        let fh = self.next_fh.fetch_add(1, Ordering::SeqCst);
        match self.dev.open(&Caller::from_request(req), fh) {
            Ok(()) => reply.opened(FileHandle(fh), FopenFlags::FOPEN_DIRECT_IO),
            Err(e) => reply.error(fuse_errno(e)),
        }
    }

    fn release(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<fuser::LockOwner>,
        _flush: bool,
        reply: fuser::ReplyEmpty,
    ) {
        self.dev.release(fh.0);
        reply.ok();
    }

    fn ioctl(
        &self,
        req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: IoctlFlags,
        cmd: u32,
        in_data: &[u8],
        out_size: u32,
        reply: ReplyIoctl,
    ) {
        let caller = Caller::from_request(req);
        // A bug in a device model must not leave the caller blocked in
        // ioctl(2) forever: a panic becomes EIO.
        let answer = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            self.dev.ioctl(&caller, fh.0, cmd, in_data, out_size)
        }))
        .unwrap_or(Err(Errno::EIO));
        match answer {
            Ok(r) => {
                let n = r.data.len().min(out_size as usize);
                reply.ioctl(r.result, &r.data[..n]);
            }
            Err(e) => reply.error(fuse_errno(e)),
        }
    }
}

/// A fake device mounted over FUSE. Dropping it unmounts it and removes the
/// temporary directory.
pub struct FakeMount<D: FakeDevice> {
    device: Arc<D>,
    session: Option<fuser::BackgroundSession>,
    dir: PathBuf,
    path: PathBuf,
    open_errno: Arc<AtomicI32>,
}

impl<D: FakeDevice> FakeMount<D> {
    /// Mounts `device` on a new directory under the system's temporary
    /// directory.
    pub fn mount(device: D) -> io::Result<FakeMount<D>> {
        // mkdtemp(3) replaces the six trailing X with a unique suffix: the
        // template it requires, not a placeholder.
        let template = std::env::temp_dir().join("reef-fake-XXXXXX");
        let dir = nix::unistd::mkdtemp(&template).map_err(io::Error::from)?;
        let device = Arc::new(device);
        let open_errno = Arc::new(AtomicI32::new(0));
        let fs = DeviceFs {
            dev: Arc::clone(&device),
            next_fh: AtomicU64::new(1),
            open_errno: Arc::clone(&open_errno),
        };
        let mut config = fuser::Config::default();
        config.mount_options = vec![
            MountOption::FSName(format!("reef-fake-{}", device.file_name())),
            MountOption::Subtype("reef-fake".into()),
        ];
        let session = match fuser::spawn_mount(fs, &dir, &config) {
            Ok(s) => s,
            Err(e) => {
                let _ = std::fs::remove_dir(&dir);
                return Err(io::Error::new(
                    e.kind(),
                    format!(
                        "mounting the fake {} on {}: {e}",
                        device.file_name(),
                        dir.display()
                    ),
                ));
            }
        };
        let path = dir.join(device.file_name());
        Ok(FakeMount {
            device,
            session: Some(session),
            dir,
            path,
            open_errno,
        })
    }

    /// The fake device file to open.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The device model, to seed and inspect its state.
    pub fn device(&self) -> &D {
        &self.device
    }

    /// Makes every later `open` fail with `errno` (e.g. EACCES to model a
    /// missing permission), or succeed again with `None`.
    pub fn fail_open_with(&self, errno: Option<Errno>) {
        self.open_errno
            .store(errno.map_or(0, |e| e as i32), Ordering::SeqCst);
    }
}

impl<D: FakeDevice> Drop for FakeMount<D> {
    fn drop(&mut self) {
        if let Some(s) = self.session.take() {
            if s.umount_and_join().is_err() {
                // Still busy (a descriptor left open): detach the mount so
                // the server thread ends once the last user closes it.
                let _ = nix::mount::umount2(&self.dir, nix::mount::MntFlags::MNT_DETACH);
            }
        }
        let _ = std::fs::remove_dir(&self.dir);
    }
}
