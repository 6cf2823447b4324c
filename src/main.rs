//! `flo`: the server (`flo server`) and the command-line client for everything else.

mod cli;

/// The server allocates and frees many small objects per run across four shard threads;
/// glibc's arenas spent up to a quarter of the time faulting in memory they had returned.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Returns the calling thread's freed memory to the system (the server calls it on each
/// shard after start-up and after each snapshot: their large transient buffers would
/// otherwise stay resident).
pub fn release_memory() {
    // SAFETY: a plain call into the allocator in use.
    unsafe { libmimalloc_sys::mi_collect(true) }
}

fn main() {
    std::process::exit(cli::run());
}
