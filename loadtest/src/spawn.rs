//! `--spawn`: a flo server of our own, in a temporary data directory (the process itself:
//! `flo_testkit::server`).

use flo_testkit::server::{ServerCommand, ServerProcess, StartError, StderrMode};
use std::path::PathBuf;
use std::time::Duration;

/// How long the server has to print its `listening` line.
const START_TIMEOUT: Duration = Duration::from_secs(30);
/// How long the server has to exit after SIGTERM before it gets SIGKILL.
const STOP_TIMEOUT: Duration = Duration::from_secs(30);

pub struct SpawnOptions {
    pub flo_bin: PathBuf,
    pub shards: Option<u32>,
    pub durability: &'static str,
    /// The server's `--http`: an address or `off`.
    pub http: String,
    /// The server's `--pin-shards`.
    pub pin_shards: bool,
}

/// The spawned server's HTTP port unless `--http` says otherwise: on, at any free port (so
/// that a server already on the default port does not stop the start).
pub const HTTP_DEFAULT: &str = "127.0.0.1:0";

/// The `flo` executable next to the current one.
pub fn default_flo_bin() -> Result<PathBuf, String> {
    let exe = std::env::current_exe().map_err(|e| format!("cannot locate this executable: {e}"))?;
    let dir = exe
        .parent()
        .ok_or("this executable has no parent directory")?;
    Ok(dir.join(format!("flo{}", std::env::consts::EXE_SUFFIX)))
}

/// A running server. Stopped (SIGTERM, then waited for) by [`Server::stop`] or on drop.
pub struct Server {
    process: Option<ServerProcess>,
    pub addr: String,
    pub shards: u32,
    pub durability: String,
    // Dropped after the server is stopped (fields drop after `Drop::drop` runs).
    _data_dir: tempfile::TempDir,
}

impl Server {
    pub fn start(opts: &SpawnOptions) -> Result<Server, String> {
        let bin = &opts.flo_bin;
        if !bin.is_file() {
            return Err(format!(
                "flo executable not found at {} (build it: `cargo build --release -p flo`, or pass --flo-bin)",
                bin.display()
            ));
        }
        let data_dir = tempfile::Builder::new()
            .prefix("flo-loadtest-")
            .tempdir()
            .map_err(|e| format!("cannot create a temporary data directory: {e}"))?;
        let mut args: Vec<String> = vec![
            "--listen".into(),
            "127.0.0.1:0".into(),
            "--durability".into(),
            opts.durability.into(),
            "--http".into(),
            opts.http.clone(),
        ];
        if let Some(shards) = opts.shards {
            args.extend(["--shards".into(), shards.to_string()]);
        }
        if opts.pin_shards {
            args.push("--pin-shards".into());
        }
        // Its warnings and errors on our stderr, not its start and stop (unless RUST_LOG
        // asks for them).
        if std::env::var_os("RUST_LOG").is_none() {
            args.extend(["--log".into(), "warn".into()]);
        }
        let command = ServerCommand {
            bin: bin.clone(),
            data_dir: data_dir.path().to_path_buf(),
            args,
            env: Vec::new(),
            stderr: StderrMode::Inherit,
        };
        let process = ServerProcess::start(&command, START_TIMEOUT).map_err(|e| match e {
            StartError::TimedOut { timeout, .. } => format!(
                "the flo server printed no `listening` line within {} s",
                timeout.as_secs()
            ),
            e => format!("the flo server did not start: {e}"),
        })?;
        let listening = process.listening.clone();
        Ok(Server {
            process: Some(process),
            addr: listening.addr,
            shards: listening.shards,
            durability: listening.durability,
            _data_dir: data_dir,
        })
    }

    /// The server's process id.
    pub fn pid(&self) -> u32 {
        self.process
            .as_ref()
            .expect("a server not yet stopped")
            .pid()
    }

    /// Sends SIGTERM and waits for the server to exit; `Err` if it fails to exit cleanly.
    pub fn stop(mut self) -> Result<(), String> {
        let process = self.process.take().expect("a server not yet stopped");
        match process.stop(STOP_TIMEOUT).status {
            Some(status) if status.success() => Ok(()),
            Some(status) => Err(format!(
                "the flo server exited badly after SIGTERM ({status})"
            )),
            None => Err(format!(
                "the flo server did not exit within {} s of SIGTERM; killed it",
                STOP_TIMEOUT.as_secs()
            )),
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(process) = self.process.take() {
            process.stop(STOP_TIMEOUT);
        }
    }
}
