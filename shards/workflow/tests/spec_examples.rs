//! The workflow definitions of `testdata/workflows/` — the reference's complete examples
//! (copied from the spec) and the definitions several tests share — are all accepted.

use flo_workflow::parse_workflow;
use std::fs;
use std::path::Path;

#[test]
fn the_spec_examples_are_accepted() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/workflows");
    let mut files: Vec<_> = fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| entry.expect("a directory entry").path())
        .filter(|path| path.extension().is_some_and(|x| x == "yaml"))
        .collect();
    files.sort();
    let mut accepted = Vec::new();
    for path in files {
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let yaml = fs::read_to_string(&path).expect("a readable example");
        if let Err(issues) = parse_workflow(&yaml) {
            panic!("{name} is refused: {issues:#?}");
        }
        accepted.push(name);
    }
    assert_eq!(
        accepted,
        [
            "approval-two-waits.yaml",      // shared by tests
            "order-processing.yaml",        // the reference's
            "order-processor.yaml",         // the reference's (a stream trigger)
            "payment-processing.yaml",      // the reference's (an inline plan)
            "process-order-data-flow.yaml", // shared by tests
            "process-order.yaml",           // the reference's
            "reconcile-accounts.yaml",      // the reference's (a schedule)
        ]
    );
}
