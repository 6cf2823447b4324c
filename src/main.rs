//! `flo`: the server (`flo server`) and the command-line client for everything else.

mod cli;

fn main() {
    std::process::exit(cli::run());
}
