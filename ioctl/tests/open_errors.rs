//! A wrong path, a directory, or a file that is not the driver's device gives
//! an error naming the file and what to do (no FUSE needed).

use std::path::PathBuf;

use nix::errno::Errno;
use reef_ioctl::{Error, Kfd, NvRm};

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("reef-ioctl-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn wrong_path_names_the_file_and_the_driver() {
    let err = Kfd::open("/nonexistent/kfd").unwrap_err();
    assert_eq!(err.errno(), Some(Errno::ENOENT));
    let msg = err.to_string();
    assert!(
        msg.contains("/nonexistent/kfd") && msg.contains("amdgpu driver is not loaded"),
        "{msg}"
    );

    let err = NvRm::open("/nonexistent/nvidiactl").unwrap_err();
    assert_eq!(err.errno(), Some(Errno::ENOENT));
    assert!(err.to_string().contains("nvidia kernel module"), "{err}");
}

#[test]
fn a_regular_file_is_not_a_device() {
    let dir = scratch("regular");
    let file = dir.join("kfd");
    std::fs::write(&file, b"not a device").unwrap();

    let err = Kfd::open(&file).unwrap_err();
    assert!(matches!(err, Error::NotADevice { .. }), "{err}");
    assert!(
        err.to_string()
            .contains("does not answer AMDKFD_IOC_GET_VERSION"),
        "{err}"
    );

    // RM has no probe at open; the first call tells.
    let rm = NvRm::open(&file).unwrap();
    let err = rm.alloc_client().unwrap_err();
    assert!(matches!(err, Error::NotADevice { .. }), "{err}");
    assert!(err.to_string().contains("/dev/nvidiactl"), "{err}");
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn another_drivers_device_is_not_a_kfd() {
    // /dev/null answers every ioctl with ENOTTY, like any foreign device.
    let err = Kfd::open("/dev/null").unwrap_err();
    assert!(matches!(err, Error::NotADevice { .. }), "{err}");
}

#[test]
fn a_directory_is_refused() {
    let dir = scratch("dir");
    let err = Kfd::open(&dir).unwrap_err();
    assert_eq!(err.errno(), Some(Errno::EISDIR));
    assert!(err.to_string().contains("directory"), "{err}");
    std::fs::remove_dir_all(dir).unwrap();
}
