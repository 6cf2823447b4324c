//! What the tests of the load-test binaries share.

use std::path::PathBuf;

/// `flo` of the same build: a test runs as `target/<profile>/deps/NAME-xxxx`.
pub fn flo_bin() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    let profile_dir = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("test executable lives in target/<profile>/deps");
    let flo = profile_dir.join(format!("flo{}", std::env::consts::EXE_SUFFIX));
    assert!(
        flo.is_file(),
        "{} does not exist: run `cargo build` (or `cargo build -p flo`) first",
        flo.display()
    );
    flo
}
