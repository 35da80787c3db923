//! A request's tensors on the client side: inputs inline or in a
//! registered region, and the shared-memory region itself (a sealed memfd
//! sent with SCM_RIGHTS).

use super::send_all;
use std::os::unix::net::UnixStream;

/// An input of [`super::Client::infer_tensors`].
#[derive(Debug, Clone, Copy)]
pub enum Input<'a> {
    /// Bytes sent in the request's frame.
    Inline {
        name: &'a str,
        dtype: &'a str,
        shape: &'a [u64],
        data: &'a [u8],
    },
    /// Bytes already in a registered region.
    Shm {
        name: &'a str,
        dtype: &'a str,
        shape: &'a [u64],
        region: u64,
        offset: u64,
        bytes: u64,
    },
}

/// Sends `frame` with descriptor `fd` as SCM_RIGHTS ancillary data (on its
/// first byte), then the rest of it.
pub(super) fn send_with_fd(
    sock: &UnixStream,
    frame: &[u8],
    fd: std::os::fd::RawFd,
) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    let mut iov = libc::iovec {
        iov_base: frame.as_ptr() as *mut libc::c_void,
        iov_len: frame.len(),
    };
    // SAFETY: CMSG_SPACE is a pure computation.
    let space = unsafe { libc::CMSG_SPACE(std::mem::size_of::<libc::c_int>() as u32) } as usize;
    let mut cbuf = vec![0u8; space];
    // SAFETY: a zeroed msghdr filled below with pointers to buffers that
    // outlive the call; the control message is built with the CMSG macros
    // inside `cbuf`.
    let n = unsafe {
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = cbuf.as_mut_ptr().cast();
        msg.msg_controllen = space as _;
        let c = libc::CMSG_FIRSTHDR(&msg);
        (*c).cmsg_level = libc::SOL_SOCKET;
        (*c).cmsg_type = libc::SCM_RIGHTS;
        (*c).cmsg_len = libc::CMSG_LEN(std::mem::size_of::<libc::c_int>() as u32) as _;
        std::ptr::write_unaligned(libc::CMSG_DATA(c).cast::<libc::c_int>(), fd);
        libc::sendmsg(sock.as_raw_fd(), &msg, libc::MSG_NOSIGNAL)
    };
    if n < 0 {
        return Err(std::io::Error::last_os_error());
    }
    send_all(sock, &frame[n as usize..])
}

/// A shared-memory region of the client: a memfd sealed against shrinking
/// and growing (what the daemon requires, so that it can never read past
/// the end of the file), mapped here read-write. Register it with
/// [`super::Client::register_region`]; write inputs into [`ShmRegion::as_mut_slice`]
/// and read outputs from [`ShmRegion::as_slice`] once the answer came.
pub struct ShmRegion {
    fd: std::os::fd::OwnedFd,
    ptr: *mut u8,
    len: usize,
}

// The mapping is plain memory owned by this value.
unsafe impl Send for ShmRegion {}

impl ShmRegion {
    /// A new region of `len` bytes (zeroed).
    pub fn new(len: usize) -> std::io::Result<ShmRegion> {
        use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
        if len == 0 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "a region has at least one byte",
            ));
        }
        // SAFETY: a static NUL-terminated name and flags.
        let raw = unsafe {
            libc::memfd_create(
                c"reef-tensors".as_ptr(),
                libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING,
            )
        };
        if raw < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: memfd_create returned a new descriptor we own.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        // SAFETY: plain calls on our descriptor.
        unsafe {
            if libc::ftruncate(fd.as_raw_fd(), len as libc::off_t) != 0
                || libc::fcntl(
                    fd.as_raw_fd(),
                    libc::F_ADD_SEALS,
                    libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL,
                ) != 0
            {
                return Err(std::io::Error::last_os_error());
            }
        }
        // SAFETY: a new shared mapping of the whole file.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        Ok(ShmRegion {
            fd,
            ptr: ptr.cast(),
            len,
        })
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The memfd (sent to the daemon by [`super::Client::register_region`]).
    pub fn fd(&self) -> std::os::fd::RawFd {
        use std::os::fd::AsRawFd;
        self.fd.as_raw_fd()
    }

    /// The region's bytes. The daemon writes outputs into it while a
    /// request runs: read them once its answer came.
    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: our mapping of `len` bytes, alive as long as `self`.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }

    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as above, borrowed mutably through `self`.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

impl Drop for ShmRegion {
    fn drop(&mut self) {
        // SAFETY: our mapping, unmapped once.
        unsafe {
            libc::munmap(self.ptr.cast(), self.len);
        }
    }
}
