//! Command-line interface. Conventions for every command: `--addr`/`FLO_ADDR`,
//! `--namespace`/`FLO_NAMESPACE`, human output by default, `--json` for exactly one JSON
//! document on stdout; errors go to stderr with a non-zero exit.

mod action;
mod args;
mod kv;
mod output;
mod server;
mod status;
mod worker;
mod workflow;

pub use args::{Cli, Command};
use clap::Parser;
use flo::{Client, Error};
use output::Output;

/// Parses the command line, runs the command, returns the process exit code.
pub fn run() -> i32 {
    let cli = Cli::parse();
    let out = Output { json: cli.json };
    let result = match &cli.command {
        Command::Server(args) => server::run(args),
        Command::Status => connect(&cli).and_then(|mut c| status::run(&mut c, &out)),
        Command::Kv(cmd) => connect(&cli).and_then(|mut c| kv::run(&mut c, cmd, &out)),
        Command::Action(cmd) => connect(&cli).and_then(|mut c| action::run(&mut c, cmd, &out)),
        Command::Worker(cmd) => worker::check(cmd)
            .and_then(|()| connect(&cli))
            .and_then(|mut c| worker::run(&mut c, cmd, &out)),
        Command::Workflow(cmd) => workflow::check(cmd)
            .and_then(|()| connect(&cli))
            .and_then(|mut c| workflow::run(&mut c, cmd, &out)),
        Command::Validate(cmd) => workflow::validate(cmd, &out),
    };
    match result {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("error: {e}");
            1
        }
    }
}

fn connect(cli: &Cli) -> Result<Client, CliError> {
    let client = Client::connect(cli.addr.as_str()).map_err(|e| CliError::Connect {
        addr: cli.addr.clone(),
        source: e,
    })?;
    Ok(client.with_namespace(cli.namespace.clone()))
}

#[derive(Debug, thiserror::Error)]
pub enum CliError {
    #[error(
        "cannot connect to flo at {addr}: {source} (is the server running? set --addr or FLO_ADDR)"
    )]
    Connect { addr: String, source: Error },
    #[error(transparent)]
    Client(#[from] Error),
    #[error("{0}")]
    Usage(String),
    #[error(transparent)]
    Server(#[from] flo_runtime::ServerError),
}
