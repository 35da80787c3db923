//! The FUSE harness itself: a device model that fails must answer the
//! caller with an errno, never leave it blocked in ioctl(2).

use std::fs::File;
use std::os::fd::AsRawFd;

use nix::errno::Errno;
use reef_ioctl::fake::{fuse_unavailable, report_skip, Caller, FakeDevice, FakeMount, IoctlReply};

struct Broken;

impl FakeDevice for Broken {
    fn file_name(&self) -> &'static str {
        "broken"
    }

    fn ioctl(
        &self,
        _c: &Caller,
        _fh: u64,
        cmd: u32,
        input: &[u8],
        _out: u32,
    ) -> Result<IoctlReply, Errno> {
        match cmd {
            // Echo the input back, to show data flows both ways.
            c if c == nix::request_code_readwrite!(b'Z', 1, 8) as u32 => Ok(IoctlReply {
                result: 7,
                data: input.iter().rev().copied().collect(),
            }),
            _ => panic!("a bug in a device model"),
        }
    }
}

nix::ioctl_readwrite!(zecho, b'Z', 1, [u8; 8]);
nix::ioctl_none!(zboom, b'Z', 2);

#[test]
fn fuse_device_model_panic_becomes_eio() {
    if let Some(why) = fuse_unavailable() {
        report_skip(module_path!(), &why);
        return;
    }
    let m = FakeMount::mount(Broken).expect("mounting");
    let f = File::options()
        .read(true)
        .write(true)
        .open(m.path())
        .unwrap();
    let mut buf = [1u8, 2, 3, 4, 5, 6, 7, 8];
    // SAFETY: buf is a valid 8-byte buffer.
    let r = unsafe { zecho(f.as_raw_fd(), &mut buf) }.expect("echo ioctl");
    assert_eq!(r, 7);
    assert_eq!(buf, [8, 7, 6, 5, 4, 3, 2, 1]);
    // SAFETY: no argument.
    let err = unsafe { zboom(f.as_raw_fd()) }.unwrap_err();
    assert_eq!(err, Errno::EIO);
}
