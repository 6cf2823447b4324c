//! What the driver puts around each input: a silent panic hook that remembers where the
//! panic was, an allocator that counts the bytes an input holds (and refuses one
//! allocation that would take more than `ALLOC_BYTES_REFUSED`), a watchdog that saves an
//! input still running after the hard time limit and stops the process, and a SIGABRT
//! handler that saves the input when the process dies anyway (stack overflow, a refused
//! allocation).

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::RefCell;
use std::ffi::CString;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// One allocation this large is refused (the process then aborts, and the SIGABRT handler
/// saves the input): no decoder should ask for it, whatever the input says.
pub const ALLOC_BYTES_REFUSED: usize = 1 << 30;

/// Counts live heap bytes and their peak for the input being run.
pub struct CountingAlloc;

#[global_allocator]
static ALLOCATOR: CountingAlloc = CountingAlloc;

static LIVE_BYTES: AtomicUsize = AtomicUsize::new(0);
static PEAK_BYTES: AtomicUsize = AtomicUsize::new(0);

// SAFETY: forwards to the system allocator; the counters are plain atomics.
unsafe impl GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if layout.size() >= ALLOC_BYTES_REFUSED {
            return std::ptr::null_mut();
        }
        // SAFETY: the caller upholds `GlobalAlloc::alloc`'s contract.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            grew(layout.size());
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if layout.size() >= ALLOC_BYTES_REFUSED {
            return std::ptr::null_mut();
        }
        // SAFETY: as for `alloc`.
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            grew(layout.size());
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `alloc` with this layout.
        unsafe { System.dealloc(ptr, layout) };
        LIVE_BYTES.fetch_sub(layout.size(), Ordering::Relaxed);
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if new_size >= ALLOC_BYTES_REFUSED {
            return std::ptr::null_mut();
        }
        // SAFETY: as for `alloc`; `ptr` came from it with `layout`.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            LIVE_BYTES.fetch_sub(layout.size(), Ordering::Relaxed);
            grew(new_size);
        }
        p
    }
}

fn grew(bytes: usize) {
    let live = LIVE_BYTES.fetch_add(bytes, Ordering::Relaxed) + bytes;
    PEAK_BYTES.fetch_max(live, Ordering::Relaxed);
}

/// Live heap bytes now (with `CountingAlloc` as the global allocator; 0 otherwise).
pub fn live_bytes() -> usize {
    LIVE_BYTES.load(Ordering::Relaxed)
}

/// Starts a new peak from what is live now.
pub fn reset_peak() {
    PEAK_BYTES.store(LIVE_BYTES.load(Ordering::Relaxed), Ordering::Relaxed);
}

pub fn peak_bytes() -> usize {
    PEAK_BYTES.load(Ordering::Relaxed)
}

thread_local! {
    /// The last panic's location and message on this thread, kept by the silent hook (the
    /// hook runs on the panicking thread; campaigns on other threads keep theirs).
    static LAST_PANIC: RefCell<Option<String>> = const { RefCell::new(None) };
}
static HOOK_INSTALLED: AtomicBool = AtomicBool::new(false);

/// Replaces the panic hook with one that prints nothing and remembers the panic.
pub fn install_silent_panic_hook() {
    if HOOK_INSTALLED.swap(true, Ordering::SeqCst) {
        return;
    }
    std::panic::set_hook(Box::new(|info| {
        let message = info
            .payload()
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| info.payload().downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "(a panic without a message)".to_string());
        let at = info.location().map_or_else(String::new, |l| {
            format!("{}:{}:{}", l.file(), l.line(), l.column())
        });
        LAST_PANIC.with(|last| *last.borrow_mut() = Some(format!("{at}: {message}")));
    }));
}

/// The panic the hook saw on this thread since the last call, if any.
pub fn take_panic() -> Option<String> {
    LAST_PANIC.with(|last| last.borrow_mut().take())
}

// The input being run, for the watchdog and the SIGABRT handler: they only read it while
// the thread running it is stuck inside the target (or dying).
static CURRENT_PTR: AtomicPtr<u8> = AtomicPtr::new(std::ptr::null_mut());
static CURRENT_LEN: AtomicUsize = AtomicUsize::new(0);
/// Nanoseconds since `EPOCH` when the current input started; 0 between inputs.
static CURRENT_START_NS: AtomicU64 = AtomicU64::new(0);
/// Where the SIGABRT handler and the watchdog save the input (a C string, leaked).
static CRASH_PATH: AtomicPtr<libc::c_char> = AtomicPtr::new(std::ptr::null_mut());

fn epoch() -> Instant {
    static EPOCH: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

/// Marks `input` as the one running now.
pub fn begin_input(input: &[u8]) {
    CURRENT_PTR.store(input.as_ptr() as *mut u8, Ordering::Relaxed);
    CURRENT_LEN.store(input.len(), Ordering::Relaxed);
    let ns = epoch().elapsed().as_nanos() as u64;
    CURRENT_START_NS.store(ns.max(1), Ordering::Release);
}

pub fn end_input() {
    CURRENT_START_NS.store(0, Ordering::Release);
}

/// Saves the running input to `path` when the process aborts (SIGABRT: a stack overflow,
/// an allocation refused, an explicit abort) or when an input outlives `hard_limit` (then
/// the watchdog stops the process with exit code 3).
pub fn install_crash_guards(path: &std::path::Path, hard_limit: Duration) {
    let c_path = CString::new(path.as_os_str().as_encoded_bytes()).expect("a path without NUL");
    let old = CRASH_PATH.swap(c_path.into_raw(), Ordering::SeqCst);
    if !old.is_null() {
        // SAFETY: the previous value came from `CString::into_raw` above; the handler may
        // race with this only during a crash while guards are being reinstalled.
        drop(unsafe { CString::from_raw(old) });
    }
    static INSTALLED: AtomicBool = AtomicBool::new(false);
    if INSTALLED.swap(true, Ordering::SeqCst) {
        return;
    }
    // SAFETY: installs a handler that only calls async-signal-safe functions.
    unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = on_abort as *const () as usize;
        action.sa_flags = libc::SA_ONSTACK | libc::SA_RESETHAND;
        libc::sigemptyset(&mut action.sa_mask);
        libc::sigaction(libc::SIGABRT, &action, std::ptr::null_mut());
    }
    std::thread::Builder::new()
        .name("flo-fuzz-watchdog".into())
        .spawn(move || watchdog(hard_limit))
        .expect("the watchdog thread starts");
}

extern "C" fn on_abort(_signal: libc::c_int) {
    if !save_current_input() {
        return;
    }
    let path = CRASH_PATH.load(Ordering::SeqCst);
    let note = b"flo-fuzz: the process is aborting; the input it was running is saved to ";
    // SAFETY: write(2) and strlen are async-signal-safe; `path` is a NUL-terminated string
    // we leaked (not null: the input was saved to it).
    unsafe {
        libc::write(2, note.as_ptr().cast(), note.len());
        libc::write(2, path.cast(), libc::strlen(path));
        libc::write(2, b"\n".as_ptr().cast(), 1);
    }
}

/// Writes the running input to the crash path with async-signal-safe calls only; false
/// when there is none (or no path).
fn save_current_input() -> bool {
    let path = CRASH_PATH.load(Ordering::SeqCst);
    let ptr = CURRENT_PTR.load(Ordering::Relaxed);
    let len = CURRENT_LEN.load(Ordering::Relaxed);
    if path.is_null() || ptr.is_null() || CURRENT_START_NS.load(Ordering::Acquire) == 0 {
        return false;
    }
    // SAFETY: `path` is a NUL-terminated string we leaked; `ptr..ptr+len` is the input the
    // stuck (or dying) thread is running, which it does not change while running it.
    unsafe {
        let fd = libc::open(path, libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC, 0o644);
        if fd < 0 {
            return false;
        }
        let written = libc::write(fd, ptr.cast(), len);
        libc::close(fd);
        written == len as isize
    }
}

fn watchdog(hard_limit: Duration) {
    loop {
        std::thread::sleep(Duration::from_millis(100));
        let start = CURRENT_START_NS.load(Ordering::Acquire);
        if start == 0 {
            continue;
        }
        let now = epoch().elapsed().as_nanos() as u64;
        if now.saturating_sub(start) < hard_limit.as_nanos() as u64 {
            continue;
        }
        let saved = save_current_input();
        let path = CRASH_PATH.load(Ordering::SeqCst);
        let shown = match path.is_null() {
            true => String::new(),
            // SAFETY: a NUL-terminated string we leaked.
            false => unsafe { std::ffi::CStr::from_ptr(path) }
                .to_string_lossy()
                .into_owned(),
        };
        let saved = match saved {
            true => format!("saved to {shown}"),
            false => "it could not be saved".to_string(),
        };
        eprintln!(
            "flo-fuzz: an input has run for more than {} s (a hang); {saved}",
            hard_limit.as_secs()
        );
        // SAFETY: ends the process at once, without unwinding the stuck thread.
        unsafe { libc::_exit(3) };
    }
}
