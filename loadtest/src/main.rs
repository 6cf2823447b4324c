//! flo-loadtest: runs a workload against a flo server (an existing one, or one it spawns)
//! and reports throughput and latency.

mod args;
mod driver;
mod plans;
mod report;
mod schedules;
mod search;
mod streams;
mod workers;
mod workload;

use args::{Args, DEFAULT_ADDR, DurabilityArg};
use clap::Parser;
use flo_loadtest::spawn;
use std::process::ExitCode;
use std::time::{Duration, Instant};
use workload::Workload;

fn main() -> ExitCode {
    let args = Args::parse();
    match run(&args) {
        Ok(code) => code,
        Err(message) => {
            eprintln!("flo-loadtest: {message}");
            ExitCode::from(2)
        }
    }
}

fn run(args: &Args) -> Result<ExitCode, String> {
    args.check()?;
    let server = if args.spawn {
        let opts = spawn::SpawnOptions {
            flo_bin: match &args.flo_bin {
                Some(path) => path.clone(),
                None => spawn::default_flo_bin()?,
            },
            shards: args.shards,
            durability: args.durability.unwrap_or(DurabilityArg::Sync).as_str(),
        };
        Some(spawn::Server::start(&opts)?)
    } else {
        None
    };
    let addr = match (&server, &args.addr) {
        (Some(server), _) => server.addr.clone(),
        (None, Some(addr)) => addr.clone(),
        (None, None) => DEFAULT_ADDR.to_string(),
    };
    let token = args.token.as_deref();
    if args.workload == Workload::Schedule {
        let result = schedules::run(args, &addr, token);
        let stopped = server.map_or(Ok(()), spawn::Server::stop);
        let ok = result? && stopped.is_ok();
        if let Err(message) = stopped {
            eprintln!("flo-loadtest: {message}");
        }
        return Ok(if ok {
            ExitCode::SUCCESS
        } else {
            ExitCode::FAILURE
        });
    }
    let cfg = driver::Config {
        addr: addr.clone(),
        token: args.token.clone(),
        connections: args.connections as usize,
        pipeline: args.pipeline as usize,
        ops: args.ops,
        max_duration: Duration::from_secs_f64(args.max_secs),
        progress: true,
    };
    match args.workload {
        Workload::KvPut => {}
        Workload::WasmInvoke => workload::register_wasm_action(&addr, token, &args.namespace)?,
        Workload::Workflow => workload::create_workflow(&addr, token, &args.namespace)?,
        Workload::Worker => {
            workload::register_user_action(&addr, token, &args.namespace, &args.action_name)?
        }
        Workload::StreamAppend => streams::prepare(&addr, token, &args.namespace, false)?,
        Workload::StreamConsume => streams::prepare(&addr, token, &args.namespace, true)?,
        Workload::Trigger => streams::prepare_trigger(&addr, token, &args.namespace)?,
        Workload::Schedule => {}
        Workload::Query => search::prepare(&addr, token, &args.namespace, args.plain_workflow)?,
        Workload::Plan => plans::prepare(&addr, token, &args.namespace, args.plain_workflow)?,
    }
    if args.workload == Workload::Query {
        let fill = driver::run(&cfg, || search::SearchStart::new(&args.namespace));
        let result = search::run_queries(args, &addr, token, &fill);
        let stopped = server.map_or(Ok(()), spawn::Server::stop);
        let ok = result? && stopped.is_ok();
        return Ok(if ok {
            ExitCode::SUCCESS
        } else {
            ExitCode::FAILURE
        });
    }
    let (outcome, tasks) = run_workload(args, &cfg);

    let spawned = server.as_ref().map(|s| report::Spawned {
        shards: s.shards,
        durability: s.durability.clone(),
    });
    let stopped = server.map_or(Ok(()), spawn::Server::stop);
    let report = report::Report {
        workload: args.workload.name(),
        addr: &addr,
        spawned,
        connections: args.connections,
        pipeline: args.pipeline,
        value_bytes: args.value_bytes,
        keys: args.key_count(),
        requested_ops: args.ops,
        outcome: &outcome,
        tasks: tasks.as_ref().map(|outcome| report::Tasks {
            action: &args.action_name,
            workers: args.workers,
            await_batch: args.await_batch,
            outcome,
        }),
    };
    if args.json {
        println!("{}", report.json());
    } else {
        print!("{}", report.human());
    }
    let mut ok = outcome.errors == 0
        && outcome.failures.is_empty()
        && tasks.as_ref().is_none_or(workers::TaskOutcome::ok);
    if let Err(message) = stopped {
        eprintln!("flo-loadtest: {message}");
        ok = false;
    }
    Ok(if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// Runs the chosen workload; new workloads get a line here. The `worker` workload also
/// returns what its workers did.
fn run_workload(
    args: &Args,
    cfg: &driver::Config,
) -> (driver::Outcome, Option<workers::TaskOutcome>) {
    match args.workload {
        Workload::KvPut => {
            let outcome = driver::run(cfg, || {
                workload::KvPut::new(&args.namespace, args.key_count(), args.value_bytes as usize)
            });
            (outcome, None)
        }
        Workload::WasmInvoke => {
            let outcome = driver::run(cfg, || workload::WasmInvoke::new(&args.namespace));
            (outcome, None)
        }
        Workload::Workflow => {
            let outcome = driver::run(cfg, || workload::WorkflowStart::new(&args.namespace));
            (outcome, None)
        }
        Workload::Plan => {
            let outcome = driver::run(cfg, || {
                workload::WorkflowStart::of(&args.namespace, plans::WORKFLOW)
            });
            (outcome, None)
        }
        Workload::Worker => {
            let epoch = Instant::now();
            let worker_cfg = workers::Config {
                addr: cfg.addr.clone(),
                token: cfg.token.clone(),
                namespace: args.namespace.clone(),
                action: args.action_name.clone(),
                workers: args.workers as usize,
                await_batch: args.await_batch,
                max_duration: cfg.max_duration,
                epoch,
                progress: cfg.progress,
            };
            let (outcome, tasks) = workers::run(&worker_cfg, || {
                driver::run(cfg, || {
                    workload::UserInvoke::new(&args.namespace, &args.action_name, epoch)
                })
            });
            (outcome, Some(tasks))
        }
        Workload::StreamAppend => {
            let outcome = driver::run(cfg, || {
                let value = args.value_bytes as usize;
                streams::StreamAppend::new(&args.namespace, args.keys, args.batch, value, None)
            });
            (outcome, None)
        }
        Workload::StreamConsume => {
            let epoch = Instant::now();
            let consume_cfg = streams::ConsumeConfig {
                addr: cfg.addr.clone(),
                token: cfg.token.clone(),
                namespace: args.namespace.clone(),
                consumers: args.workers as usize,
                read_batch: args.await_batch,
                batch: args.batch,
                max_duration: cfg.max_duration,
                epoch,
            };
            let (outcome, acked) = streams::run(&consume_cfg, || {
                driver::run(cfg, || {
                    let ns = &args.namespace;
                    streams::StreamAppend::new(ns, args.keys, args.batch, 0, Some(epoch))
                })
            });
            (outcome, Some(acked))
        }
        Workload::Trigger => {
            let trigger_cfg = streams::ConsumeConfig {
                addr: cfg.addr.clone(),
                token: cfg.token.clone(),
                namespace: args.namespace.clone(),
                consumers: 0,
                read_batch: 0,
                batch: args.batch,
                max_duration: cfg.max_duration,
                epoch: Instant::now(),
            };
            let (outcome, runs) = streams::run_trigger(&trigger_cfg, || {
                driver::run(cfg, || {
                    let value = args.value_bytes as usize;
                    streams::StreamAppend::new(&args.namespace, args.keys, args.batch, value, None)
                })
            });
            (outcome, Some(runs))
        }
        // Run apart (`schedules::run`): no requests to drive.
        Workload::Schedule | Workload::Query => (driver::Outcome::empty(), None),
    }
}
