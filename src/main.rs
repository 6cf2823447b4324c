//! `flo`: the server (`flo server`) and the command-line client for everything else.

mod cli;

/// The server allocates and frees many small objects per run across four shard threads;
/// glibc's arenas spent up to a quarter of the time faulting in memory they had returned.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    std::process::exit(cli::run());
}
