//! `yaml`: a workflow definition as `workflow create` sends it (`Op::WorkflowCreate`), through
//! what the server does with it (`wf_plan_create`): `parse_workflow` (the YAML read into raw
//! structs, then validated and normalised), the issues formatted into the error reply, and a
//! valid definition logged in its `WorkflowDefined` record — which must decode back to the
//! same definition (replay applies the stored one without validating again).
//!
//! Input: the YAML text (bytes that are not UTF-8 are replaced, as the protocol only carries
//! UTF-8 strings).

use super::{Signal, Target};
use flo_engine::testing::record::Record;
use flo_workflow::parse_workflow;

pub const TARGET: Target = Target {
    name: "yaml",
    run,
    seeds,
    dictionary: DICTIONARY,
    len_max: 16 << 10,
};

/// A definition using most of the format: signals, retries, polls, mappings, terminals.
pub const SAMPLE: &str = r#"kind: Workflow
name: order-processing
version: "1.0.0"
idempotency: required

terminals:
  OrderCompleted:
    status: completed
  OrderRejected:
    status: failed

start:
  run: "@actions/validate-order"
  inputMapping:
    order: "$.input.order"
    total: "$.input.total"
  transitions:
    success: charge
    failure: flo.Failed

steps:
  charge:
    run: "@actions/charge-payment"
    inputMapping: '{"amount": "$.steps._start.output.total"}'
    retry:
      max_attempts: 3
      backoff: exponential
      initial_delay_ms: 1000
      max_delay_ms: 30000
    transitions:
      success: await_approval
      failure: OrderRejected

  await_approval:
    waitForSignal:
      type: approval
      timeoutMs: 3600000
      onTimeout: OrderRejected
    transitions:
      success: ship

  ship:
    run: "@workflow/shipping:2"
    poll:
      initialDelayMs: 100
      maxAttempts: 5
      backoff: linear
      baseDelayMs: 50
    transitions:
      success: OrderCompleted
"#;

fn run(data: &[u8]) -> u64 {
    let yaml = String::from_utf8_lossy(data);
    let mut signal = Signal::default();
    match parse_workflow(&yaml) {
        Ok(validated) => {
            signal.add(1);
            signal.add(validated.def.steps.len() as u64);
            for w in &validated.warnings {
                signal.add_bytes(w.code.as_bytes());
            }
            let record = Record::WorkflowDefined {
                namespace: "default".into(),
                name: validated.def.name.clone(),
                version: validated.def.version.clone(),
                yaml: yaml.to_string(),
                at_ms: 1,
                def: Some(Box::new(validated.def)),
            };
            let mut bytes = Vec::new();
            record.encode(&mut bytes);
            let back = Record::decode(&bytes).expect("a logged definition decodes");
            assert!(back == record, "a logged definition decodes to another one");
        }
        Err(issues) => {
            // As `wf_plan_create` formats them into the reply.
            let lines: Vec<String> = issues
                .iter()
                .map(|i| format!("  {} {}: {}", i.code, i.path, i.message))
                .collect();
            signal.add_len(lines.join("\n").len());
            for i in &issues {
                signal.add_bytes(i.code.as_bytes());
                signal.add_message(&i.message);
            }
        }
    }
    signal.value()
}

fn seeds() -> Vec<Vec<u8>> {
    let minimal = "kind: Workflow\nname: w\nversion: \"1\"\nstart:\n  run: \"@actions/a\"\n  \
                   transitions:\n    success: flo.Completed\n";
    vec![SAMPLE.as_bytes().to_vec(), minimal.as_bytes().to_vec()]
}

const DICTIONARY: &[&[u8]] = &[
    b"kind: Workflow\n",
    b"name: ",
    b"version: ",
    b"idempotency: ",
    b"start:\n",
    b"steps:\n",
    b"terminals:\n",
    b"transitions:\n",
    b"status: ",
    b"run: ",
    b"waitForSignal:",
    b"type: ",
    b"timeoutMs: ",
    b"onTimeout: ",
    b"inputMapping: ",
    b"retry:",
    b"max_attempts: ",
    b"backoff: ",
    b"initial_delay_ms: ",
    b"max_delay_ms: ",
    b"within_ms: ",
    b"poll:",
    b"initialDelayMs: ",
    b"maxAttempts: ",
    b"baseDelayMs: ",
    b"maxDelayMs: ",
    b"plans: ",
    b"schedule: ",
    b"trigger: ",
    b"searchAttributes: ",
    b"success",
    b"failure",
    b"pending",
    b"timeout",
    b"completed",
    b"failed",
    b"cancelled",
    b"timed_out",
    b"exponential",
    b"exponential_jitter",
    b"linear",
    b"constant",
    b"required",
    b"optional",
    b"flo.Completed",
    b"flo.Failed",
    b"flo.Cancelled",
    b"flo.TimedOut",
    b"_start",
    b"\"@actions/",
    b"\"@workflow/",
    b"\"@plan/",
    b":2",
    b"$.input.",
    b"$.steps.",
    b".output",
    b"$..",
    b"[*]",
    b"[?(@.a > 1)]",
    // YAML syntax: anchors, aliases, merges, tags, documents, blocks, flows, quotes.
    b"&a ",
    b"*a",
    b"<<: *a\n",
    b"!!str ",
    b"!!binary ",
    b"!!map ",
    b"!custom ",
    b"---\n",
    b"...\n",
    b"%YAML 1.2\n",
    b"? ",
    b"- ",
    b"|\n",
    b">-\n",
    b"{",
    b"}",
    b"[",
    b"]",
    b", ",
    b"'",
    b"\"",
    b"\\u0000",
    b"# ",
    b"\t",
    b"\r\n",
    b"    ",
    b"~",
    b"null",
    b"true",
    b"\xef\xbb\xbf",
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_seeds_are_valid_definitions() {
        for seed in seeds() {
            let text = String::from_utf8(seed).unwrap();
            if let Err(issues) = parse_workflow(&text) {
                panic!("{issues:#?}\n{text}");
            }
        }
    }
}
