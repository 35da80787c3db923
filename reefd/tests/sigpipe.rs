//! The client library must report a daemon that went away as an error, not
//! die of SIGPIPE: reefctl and reef-bench restore SIGPIPE's default
//! disposition (so that `reefctl stats --json | head` ends quietly), and then
//! a plain write(2) to a closed socket would kill them without a message.
//! This test runs in its own process with SIGPIPE at its default, so a write
//! that raised the signal would kill the test binary and fail the run.

use reefd::client::Client;
use reefd::protocol::RequestBody;
use std::os::unix::net::UnixListener;

#[test]
fn sending_to_a_daemon_that_went_away_is_an_error_not_a_sigpipe() {
    // SAFETY: SIG_DFL is always a valid disposition; this binary holds no
    // other test that writes to a closed pipe or socket.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("gone.sock");
    let listener = UnixListener::bind(&path).unwrap();
    let mut client = Client::connect(&path).unwrap();
    // The "daemon" accepts the connection and goes away at once.
    let (peer, _) = listener.accept().unwrap();
    drop(peer);
    drop(listener);
    // The first write may still succeed (the kernel buffers it); later ones
    // hit the closed peer and must come back as errors.
    let mut errors = 0;
    for _ in 0..16 {
        if client.send(RequestBody::Status).is_err() {
            errors += 1;
        }
    }
    assert!(errors > 0, "writes to a closed daemon socket never failed");
}
