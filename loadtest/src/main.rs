//! flo-loadtest: runs a workload against a flo server (an existing one, or one it spawns)
//! and reports throughput and latency.

mod args;
mod driver;
#[cfg(test)]
mod fake_server;
mod hgrm;
mod limiter;
mod mix;
mod outcome;
mod pacing;
mod plans;
mod progress;
mod report;
mod schedules;
mod search;
mod server_stats;
mod streams;
mod webhooks;
mod workers;
mod workload;

use args::{Args, DEFAULT_ADDR, DurabilityArg};
use clap::Parser;
use flo_loadtest::spawn;
use std::process::ExitCode;
use std::sync::Arc;
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
            http: args
                .http
                .clone()
                .unwrap_or_else(|| spawn::HTTP_DEFAULT.to_string()),
            pin_shards: args.pin_shards,
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
        ops: args.total_ops(),
        max_duration: Duration::from_secs_f64(args.max_secs),
        progress: true,
        limiter: args
            .max_outstanding
            .map(|max| Arc::new(limiter::Limiter::new(max))),
        pace: args.pace(),
        spread: !args.no_spread,
    };
    match args.workload {
        Workload::KvPut => {}
        Workload::WasmInvoke => {
            workload::register_wasm_action_as(&addr, token, &args.namespace, args.reuse_instances)?
        }
        Workload::Workflow => workload::create_workflow(
            &addr,
            token,
            &args.namespace,
            args.fork,
            args.skip_output_mapping,
            args.reuse_instances,
        )?,
        Workload::WorkflowWorker => {
            workload::create_worker_workflow(&addr, token, &args.namespace, &args.action_name)?
        }
        Workload::Mixed => {
            let reuse = args.reuse_instances;
            workload::create_workflow(&addr, token, &args.namespace, false, false, reuse)?;
            workload::register_user_action(&addr, token, &args.namespace, &args.action_name)?
        }
        Workload::Worker => {
            workload::register_user_action(&addr, token, &args.namespace, &args.action_name)?
        }
        Workload::StreamAppend => streams::prepare(&addr, token, &args.namespace, false)?,
        Workload::StreamConsume => streams::prepare(&addr, token, &args.namespace, true)?,
        Workload::Trigger => streams::prepare_trigger(&addr, token, &args.namespace)?,
        Workload::Schedule => {}
        Workload::Query => search::prepare(&addr, token, &args.namespace, args.plain_workflow)?,
        Workload::Plan => plans::prepare(&addr, token, &args.namespace, args.plain_workflow)?,
        Workload::Webhook => {}
    }
    let receiver = match args.workload {
        Workload::Webhook => {
            let receiver = webhooks::Receiver::start()?;
            webhooks::prepare(&addr, token, &args.namespace, &receiver.url())?;
            Some(receiver)
        }
        _ => None,
    };
    if let Some(receiver) = &receiver {
        let began = Instant::now();
        let started = driver::run(&cfg, || webhooks::WebhookStart::new(&args.namespace));
        let result = webhooks::finish(args, &addr, token, receiver, &started, began);
        let stopped = server.map_or(Ok(()), spawn::Server::stop);
        let ok = result? && stopped.is_ok() && started.errors == 0;
        return Ok(if ok {
            ExitCode::SUCCESS
        } else {
            ExitCode::FAILURE
        });
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
    let sampler = server
        .as_ref()
        .map(|s| server_stats::Sampler::start(s.pid()));
    let (outcome, tasks) = run_workload(args, &cfg);
    let usage = sampler.map(|sampler| {
        let pid = server.as_ref().expect("sampled a spawned server").pid();
        sampler.finish(pid)
    });

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
        requested_ops: args.total_ops(),
        outcome: &outcome,
        tasks: tasks.as_ref().map(|task_outcome| report::Tasks {
            action: &args.action_name,
            workers: args.workers,
            await_batch: args.await_batch,
            outcome: task_outcome,
            invokes_per_s: invokes_per_s(args.workload, &outcome),
        }),
        outstanding: cfg.limiter.as_ref().map(|l| report::Outstanding {
            limit: l.outstanding_max(),
            peak: l.peak(),
        }),
        open_loop: args
            .pace()
            .zip(args.duration)
            .map(|(pace, duration)| report::OpenLoop {
                pace,
                duration,
                scheduled: args.total_ops(),
            }),
        mix: (args.workload == Workload::Mixed).then_some(&args.mix),
        server_usage: usage.as_ref(),
        generator_rss_peak_bytes: server_stats::own_rss_peak_bytes(),
    };
    if args.json {
        println!("{}", report.json());
    } else {
        print!("{}", report.human());
    }
    if let Some(path) = &args.histogram_out {
        hgrm::write(path, &outcome.latency_us)?;
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
                let put = workload::KvPut::new(
                    &args.namespace,
                    args.key_count(),
                    args.value_bytes as usize,
                );
                if args.route_keys { put.routed() } else { put }
            });
            (outcome, None)
        }
        Workload::WasmInvoke => {
            let outcome = driver::run(cfg, || workload::WasmInvoke::new(&args.namespace));
            (outcome, None)
        }
        Workload::Workflow => {
            let outcome = driver::run(cfg, || {
                workload::WorkflowStart::new(&args.namespace).with_input_bytes(args.input_bytes)
            });
            (outcome, None)
        }
        Workload::Plan => {
            let outcome = driver::run(cfg, || {
                workload::WorkflowStart::of(&args.namespace, plans::WORKFLOW)
            });
            (outcome, None)
        }
        Workload::Worker => {
            let worker_cfg = worker_config(args, cfg, cfg.limiter.clone());
            let epoch = worker_cfg.epoch;
            let (outcome, tasks) = workers::run(
                &worker_cfg,
                || {
                    driver::run(cfg, || {
                        workload::UserInvoke::new(&args.namespace, &args.action_name, epoch)
                    })
                },
                driver::Outcome::succeeded,
            );
            (outcome, Some(tasks))
        }
        Workload::WorkflowWorker => {
            // Each start is answered once its run completed: the limiter's permits come
            // back with the replies, not with the tasks.
            let worker_cfg = worker_config(args, cfg, None);
            let (outcome, tasks) = workers::run(
                &worker_cfg,
                || {
                    driver::run(cfg, || {
                        let name = workload::WORKER_WORKFLOW_NAME;
                        workload::WorkflowStart::of(&args.namespace, name)
                            .with_input_bytes(args.input_bytes)
                    })
                },
                |started| started.succeeded() * workload::WORKER_WORKFLOW_STEPS,
            );
            (outcome, Some(tasks))
        }
        Workload::Mixed => run_mixed(args, cfg),
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
        Workload::Schedule | Workload::Query | Workload::Webhook => {
            (driver::Outcome::empty(), None)
        }
    }
}

/// Invokes of the user-hosted action a second: every operation of `worker` (and of the
/// stream workloads, which report appends there), the worker kind's of `mixed`, none of
/// `workflow-worker` (its workflows' steps invoke the action).
fn invokes_per_s(workload: Workload, outcome: &driver::Outcome) -> Option<f64> {
    let secs = outcome.elapsed.as_secs_f64().max(1e-9);
    match workload {
        Workload::WorkflowWorker => None,
        Workload::Mixed => Some(outcome.ops_of(mix::Kind::Worker.name()) as f64 / secs),
        _ => Some(outcome.ops as f64 / secs),
    }
}

/// The workers of `worker`, `workflow-worker` and `mixed`; `limiter` is given the permits
/// of the tasks they complete.
fn worker_config(
    args: &Args,
    cfg: &driver::Config,
    limiter: Option<Arc<limiter::Limiter>>,
) -> workers::Config {
    workers::Config {
        addr: cfg.addr.clone(),
        token: cfg.token.clone(),
        namespace: args.namespace.clone(),
        action: args.action_name.clone(),
        workers: args.workers as usize,
        await_batch: args.await_batch,
        max_duration: cfg.max_duration,
        epoch: Instant::now(),
        progress: cfg.progress,
        limiter,
    }
}

/// `mixed`: the blend, with workers when it holds worker tasks.
fn run_mixed(args: &Args, cfg: &driver::Config) -> (driver::Outcome, Option<workers::TaskOutcome>) {
    let worker_cfg = worker_config(args, cfg, cfg.limiter.clone());
    let mixed_cfg = mix::MixedConfig {
        mix: &args.mix,
        namespace: &args.namespace,
        keys: args.key_count(),
        value_bytes: args.value_bytes as usize,
        action: &args.action_name,
        epoch: worker_cfg.epoch,
    };
    let drive = || driver::run(cfg, || mix::Mixed::new(&mixed_cfg));
    if args.mix.weight(mix::Kind::Worker) == 0 {
        return (drive(), None);
    }
    let worker_kind = mix::Kind::Worker.name();
    let (outcome, tasks) = workers::run(&worker_cfg, drive, |done| done.succeeded_of(worker_kind));
    (outcome, Some(tasks))
}
