//! `auth`: the auth file `flo server --auth-file` reads (`AuthTable::parse`), as YAML or as
//! TOML, then a lookup of a token, as every handshake does.
//!
//! Input: one byte choosing the format (even: YAML, odd: TOML), then the file's text (bytes
//! that are not UTF-8 are replaced: the server reads the file as a string).

use super::{Signal, Target};
use flo_engine::auth::{AuthTable, FileFormat};

pub const TARGET: Target = Target {
    name: "auth",
    run,
    seeds,
    dictionary: DICTIONARY,
    len_max: 8 << 10,
};

fn run(data: &[u8]) -> u64 {
    let Some((&format, text)) = data.split_first() else {
        return 0;
    };
    let format = match format % 2 {
        0 => FileFormat::Yaml,
        _ => FileFormat::Toml,
    };
    let text = String::from_utf8_lossy(text);
    let mut signal = Signal::default();
    signal.add(format as u64);
    match AuthTable::parse(&text, format) {
        Ok(table) => {
            signal.add(table.len() as u64);
            for token in ["adm", "cli", "", "x"] {
                if let Some(i) = table.lookup(token) {
                    let p = table.principal(i);
                    signal.add(p.role as u64);
                    signal.add(p.namespaces.allows("payments") as u64);
                }
            }
        }
        Err(e) => signal.add_message(&e.to_string()),
    }
    signal.value()
}

fn seeds() -> Vec<Vec<u8>> {
    let yaml = "tokens:\n  - token: \"adm\"\n    role: admin\n    namespaces: [\"*\"]\n  \
                - token: cli\n    role: client\n    namespaces: [payments, orders]\n    \
                name: app\n  - {token: wrk, role: worker, namespaces: [default]}\n";
    let toml = "[[tokens]]\ntoken = \"adm\"\nrole = \"admin\"\nnamespaces = [\"*\"]\n\n\
                [[tokens]]\ntoken = \"cli\"\nrole = \"client\"\nnamespaces = [\"payments\"]\n\
                name = \"app\"\n";
    let mut seeds = Vec::new();
    for (format, text) in [(0u8, yaml), (1, toml)] {
        let mut seed = vec![format];
        seed.extend_from_slice(text.as_bytes());
        seeds.push(seed);
    }
    seeds
}

const DICTIONARY: &[&[u8]] = &[
    b"tokens:\n",
    b"  - token: ",
    b"role: ",
    b"namespaces: ",
    b"name: ",
    b"admin",
    b"client",
    b"worker",
    b"[\"*\"]",
    b"[[tokens]]\n",
    b"token = ",
    b"role = ",
    b"namespaces = ",
    b"name = ",
    b"\"\"\"",
    b"'''",
    b"[",
    b"]",
    b"{",
    b"}",
    b"&a ",
    b"*a",
    b"<<: *a\n",
    b"!!str ",
    b"---\n",
    b"- ",
    b"\\u0000",
    b"1979-05-27T07:32:00Z",
    b"inf",
    b"nan",
    b"0x1f",
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_seeds_are_valid_auth_files() {
        for seed in seeds() {
            let format = [FileFormat::Yaml, FileFormat::Toml][seed[0] as usize];
            let text = std::str::from_utf8(&seed[1..]).unwrap();
            let table = AuthTable::parse(text, format).unwrap();
            assert!(table.lookup("adm").is_some() && table.lookup("cli").is_some());
        }
    }
}
