//! Checks that a compiled module follows the flo action ABI, with messages that name what is
//! wrong.

use wasmtime::{ExternType, FuncType, Module, ModuleExport, ValType};

use super::WasmError;

/// Lookup indices of the ABI exports, resolved once per module. The entrypoint (`handle`
/// unless an action names another) is looked up per call: one module may serve actions of
/// different entrypoints.
pub(crate) struct Exports {
    pub memory: ModuleExport,
    pub alloc: ModuleExport,
    pub init: Option<ModuleExport>,
    pub describe: Option<ModuleExport>,
    pub dealloc: Option<ModuleExport>,
    /// The module exports [`REUSE_EXPORT`]: its instances may serve several executions.
    pub reuse: bool,
}

/// The export by which a module opts in to instance reuse (a function taking and returning
/// nothing; never called).
pub const REUSE_EXPORT: &str = "flo_reuse_instance";

#[derive(Clone, Copy, PartialEq)]
enum Ty {
    I32,
    I64,
}

impl Ty {
    fn name(self) -> &'static str {
        match self {
            Ty::I32 => "i32",
            Ty::I64 => "i64",
        }
    }

    fn of(v: &ValType) -> Option<Ty> {
        match v {
            ValType::I32 => Some(Ty::I32),
            ValType::I64 => Some(Ty::I64),
            _ => None,
        }
    }
}

struct Sig(&'static [Ty], &'static [Ty]);

impl Sig {
    fn matches(&self, f: &FuncType) -> bool {
        let same = |want: &[Ty], got: &mut dyn ExactSizeIterator<Item = ValType>| {
            got.len() == want.len() && got.zip(want).all(|(g, w)| Ty::of(&g) == Some(*w))
        };
        same(self.0, &mut f.params()) && same(self.1, &mut f.results())
    }
}

impl std::fmt::Display for Sig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let params: Vec<_> = self.0.iter().map(|t| t.name()).collect();
        write!(f, "func({})", params.join(", "))?;
        match self.1 {
            [] => Ok(()),
            [r] => write!(f, " -> {}", r.name()),
            rs => {
                let rs: Vec<_> = rs.iter().map(|t| t.name()).collect();
                write!(f, " -> ({})", rs.join(", "))
            }
        }
    }
}

fn describe_func(f: &FuncType) -> String {
    let params: Vec<_> = f.params().map(|t| t.to_string()).collect();
    let results: Vec<_> = f.results().map(|t| t.to_string()).collect();
    match results.len() {
        0 => format!("func({})", params.join(", ")),
        1 => format!("func({}) -> {}", params.join(", "), results[0]),
        _ => format!("func({}) -> ({})", params.join(", "), results.join(", ")),
    }
}

fn kind(t: &ExternType) -> &'static str {
    match t {
        ExternType::Func(_) => "function",
        ExternType::Global(_) => "global",
        ExternType::Table(_) => "table",
        ExternType::Memory(_) => "memory",
        _ => "item",
    }
}

use Ty::{I32, I64};

/// The host functions of module `flo`.
const FLO_IMPORTS: &[(&str, Sig)] = &[
    ("log", Sig(&[I32, I32, I32], &[])),
    ("kv_get", Sig(&[I32, I32, I32, I32], &[I32])),
    ("kv_set", Sig(&[I32, I32, I32, I32], &[I32])),
    ("kv_delete", Sig(&[I32, I32], &[I32])),
    ("outcome", Sig(&[I32, I32], &[])),
    ("state_get", Sig(&[I32, I32], &[I32])),
    ("state_set", Sig(&[I32, I32], &[I32])),
];

const HANDLE: Sig = Sig(&[I32, I32], &[I64]);
const ALLOC: Sig = Sig(&[I32], &[I32]);
const DEALLOC: Sig = Sig(&[I32, I32], &[]);
const INIT: Sig = Sig(&[], &[I32]);
const DESCRIBE: Sig = Sig(&[], &[I64]);
const REUSE: Sig = Sig(&[], &[]);

/// Checks imports and exports (and the export `entrypoint`, when given); collects every
/// problem into one message.
pub(crate) fn check(
    module: &Module,
    memory_limit_max: u64,
    entrypoint: Option<&str>,
) -> Result<Exports, WasmError> {
    let mut problems = Vec::new();

    for import in module.imports() {
        let (m, name, ty) = (import.module(), import.name(), import.ty());
        match m {
            "flo" => match (FLO_IMPORTS.iter().find(|(n, _)| *n == name), &ty) {
                (Some((_, sig)), ExternType::Func(f)) if sig.matches(f) => {}
                (Some((_, sig)), ExternType::Func(f)) => problems.push(format!(
                    "import `flo.{name}` has type {}, expected {sig}",
                    describe_func(f)
                )),
                (Some((_, sig)), other) => problems.push(format!(
                    "import `flo.{name}` is a {}, expected a function {sig}",
                    kind(other)
                )),
                (None, _) => problems.push(format!(
                    "imports `flo.{name}`, which does not exist (flo provides {})",
                    FLO_IMPORTS
                        .iter()
                        .map(|(n, _)| *n)
                        .collect::<Vec<_>>()
                        .join(", ")
                )),
            },
            "wasi_snapshot_preview1" => {
                if !matches!(ty, ExternType::Func(_)) {
                    problems.push(format!(
                        "imports the {} `wasi_snapshot_preview1.{name}`; only WASI functions exist",
                        kind(&ty)
                    ));
                }
            }
            _ => problems.push(format!(
                "imports the {} `{m}.{name}`; only the `flo` host functions and \
                 `wasi_snapshot_preview1` may be imported{}",
                kind(&ty),
                if matches!(ty, ExternType::Memory(_)) {
                    " (the module must define and export its own memory)"
                } else {
                    ""
                }
            )),
        }
    }

    let export = |name: &str| {
        module
            .get_export(name)
            .map(|ty| (ty, module.get_export_index(name)))
    };
    let mut func = |name: &str, sig: &Sig, required: bool| -> Option<ModuleExport> {
        match export(name) {
            Some((ExternType::Func(f), Some(index))) if sig.matches(&f) => Some(index),
            Some((ExternType::Func(f), _)) => {
                problems.push(format!(
                    "export `{name}` has type {}, expected {sig}",
                    describe_func(&f)
                ));
                None
            }
            Some((other, _)) => {
                problems.push(format!(
                    "export `{name}` is a {}, expected a function {sig}",
                    kind(&other)
                ));
                None
            }
            None => {
                if required {
                    problems.push(format!("missing export `{name}` ({sig})"));
                }
                None
            }
        }
    };
    if let Some(entrypoint) = entrypoint {
        func(entrypoint, &HANDLE, true);
    }
    let alloc = func("alloc", &ALLOC, true);
    let dealloc = func("dealloc", &DEALLOC, false);
    let init = func("init", &INIT, false);
    let describe = func("describe", &DESCRIBE, false);
    let reuse = func(REUSE_EXPORT, &REUSE, false).is_some();

    let memory = match export("memory") {
        Some((ExternType::Memory(mt), Some(index))) => {
            if mt.is_64() {
                problems
                    .push("exported `memory` is a 64-bit memory; flo uses 32-bit pointers".into());
            }
            if mt.is_shared() {
                problems
                    .push("exported `memory` is shared; shared memories are not supported".into());
            }
            let min_bytes = mt.minimum().saturating_mul(mt.page_size());
            if min_bytes > memory_limit_max {
                problems.push(format!(
                    "memory starts at {} which is above the largest memory limit ({})",
                    super::human_bytes(min_bytes),
                    super::human_bytes(memory_limit_max)
                ));
            }
            Some(index)
        }
        Some((other, _)) => {
            problems.push(format!(
                "export `memory` is a {}, expected a memory",
                kind(&other)
            ));
            None
        }
        None => {
            problems.push("missing export `memory` (the guest's linear memory)".into());
            None
        }
    };

    match (memory, alloc) {
        (Some(memory), Some(alloc)) if problems.is_empty() => Ok(Exports {
            memory,
            alloc,
            init,
            describe,
            dealloc,
            reuse,
        }),
        _ => Err(WasmError::Invalid(problems.join("; "))),
    }
}

/// Checks that the module exports `entrypoint` as a function `func(i32, i32) -> i64`.
pub(crate) fn check_entrypoint(module: &Module, entrypoint: &str) -> Result<(), WasmError> {
    match module.get_export(entrypoint) {
        Some(ExternType::Func(f)) if HANDLE.matches(&f) => Ok(()),
        Some(ExternType::Func(f)) => Err(WasmError::Invalid(format!(
            "export `{entrypoint}` has type {}, expected {HANDLE}",
            describe_func(&f)
        ))),
        Some(other) => Err(WasmError::Invalid(format!(
            "export `{entrypoint}` is a {}, expected a function {HANDLE}",
            kind(&other)
        ))),
        None => Err(WasmError::Invalid(format!(
            "missing export `{entrypoint}` ({HANDLE})"
        ))),
    }
}
