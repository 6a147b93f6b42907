//! An nftables context kept open across syncs: libnftables (the library behind the `nft`
//! program), loaded at run time.
//!
//! Why not the `nft` program for every transaction: when a netlink socket that committed a
//! transaction deleting anything (an element, a chain) is closed, the kernel flushes the
//! transaction's deferred destruction first, which waits for an RCU grace period
//! (`nft_rcv_nl_event` → `nf_tables_trans_destroy_flush_work`). `nft` exits after each run, so
//! every endpoint change paid 11–16 ms on this machine for the close alone, more than the rest
//! of the run (measured with `strace -T`: `close(3)` of the netlink socket). A context that stays
//! open never closes its socket; the kernel frees the old objects in the background. One
//! replaced endpoint then costs well under a millisecond in the kernel instead of ~18 ms.
//!
//! The library is opened with `dlopen`, so building needs no nftables headers and a node
//! without `libnftables.so.1` falls back to running `nft` (see [`super::NftBackend`]). The
//! candidates in the Rust registry weighed against this (STYLE.md): `nftables` drives the same
//! `nft` program through JSON, so it pays the same close per run; `rustables` speaks netlink
//! itself, but would replace the text renderer and its tests wholesale.

#![allow(unsafe_code)] // FFI to libnftables: five C functions, each use justified below

use std::ffi::{CStr, CString, c_char, c_int, c_uint, c_void};
use std::sync::{Mutex, OnceLock};

/// Held around every call into the library: libnftables keeps some process-wide state (symbol
/// tables, GMP settings) and does not promise that two contexts may be used at once.
static CALLS: Mutex<()> = Mutex::new(());

fn calls() -> std::sync::MutexGuard<'static, ()> {
    // A panic while holding the lock cannot leave the library half-called: the guarded calls
    // do not panic.
    CALLS
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// `struct nft_ctx *nft_ctx_new(uint32_t flags)`.
type CtxNew = unsafe extern "C" fn(c_uint) -> *mut c_void;
/// `void nft_ctx_free(struct nft_ctx *ctx)`.
type CtxFree = unsafe extern "C" fn(*mut c_void);
/// `int nft_ctx_buffer_output(struct nft_ctx *ctx)` and `nft_ctx_buffer_error`.
type CtxBuffer = unsafe extern "C" fn(*mut c_void) -> c_int;
/// `const char *nft_ctx_get_error_buffer(struct nft_ctx *ctx)` and `nft_ctx_get_output_buffer`.
type CtxGetBuffer = unsafe extern "C" fn(*mut c_void) -> *const c_char;
/// `int nft_run_cmd_from_buffer(struct nft_ctx *nft, const char *buf)`.
type RunCmd = unsafe extern "C" fn(*mut c_void, *const c_char) -> c_int;

/// The library's entry points.
#[derive(Debug, Clone, Copy)]
struct Library {
    ctx_new: CtxNew,
    ctx_free: CtxFree,
    buffer_output: CtxBuffer,
    buffer_error: CtxBuffer,
    get_error_buffer: CtxGetBuffer,
    get_output_buffer: CtxGetBuffer,
    run_cmd: RunCmd,
}

/// The library, loaded once per process (`None`: not installed).
fn library() -> Option<Library> {
    static LIBRARY: OnceLock<Option<Library>> = OnceLock::new();
    *LIBRARY.get_or_init(|| {
        let library = load();
        if library.is_none() {
            tracing::info!("libnftables.so.1 not found: running the nft program for each sync");
        }
        library
    })
}

fn load() -> Option<Library> {
    // SAFETY: dlopen is given a valid NUL-terminated name; the handle is never closed, so the
    // symbols below stay valid for the life of the process.
    let handle = unsafe { libc::dlopen(c"libnftables.so.1".as_ptr(), libc::RTLD_NOW) };
    if handle.is_null() {
        return None;
    }
    let symbol = |name: &CStr| {
        // SAFETY: `handle` is a live dlopen handle and `name` is NUL-terminated.
        let address = unsafe { libc::dlsym(handle, name.as_ptr()) };
        (!address.is_null()).then_some(address)
    };
    let ctx_new = symbol(c"nft_ctx_new")?;
    let ctx_free = symbol(c"nft_ctx_free")?;
    let buffer_output = symbol(c"nft_ctx_buffer_output")?;
    let buffer_error = symbol(c"nft_ctx_buffer_error")?;
    let get_error_buffer = symbol(c"nft_ctx_get_error_buffer")?;
    let get_output_buffer = symbol(c"nft_ctx_get_output_buffer")?;
    let run_cmd = symbol(c"nft_run_cmd_from_buffer")?;
    // SAFETY: each address is the named libnftables function, whose C signature (libnftables.h,
    // stable since the library's first release) is the one transmuted to.
    unsafe {
        Some(Library {
            ctx_new: std::mem::transmute::<*mut c_void, CtxNew>(ctx_new),
            ctx_free: std::mem::transmute::<*mut c_void, CtxFree>(ctx_free),
            buffer_output: std::mem::transmute::<*mut c_void, CtxBuffer>(buffer_output),
            buffer_error: std::mem::transmute::<*mut c_void, CtxBuffer>(buffer_error),
            get_error_buffer: std::mem::transmute::<*mut c_void, CtxGetBuffer>(get_error_buffer),
            get_output_buffer: std::mem::transmute::<*mut c_void, CtxGetBuffer>(get_output_buffer),
            run_cmd: std::mem::transmute::<*mut c_void, RunCmd>(run_cmd),
        })
    }
}

/// One libnftables context: its netlink socket lives in the network namespace of the thread
/// that created it, and stays open until the context is dropped.
#[derive(Debug)]
pub(crate) struct Context {
    library: Library,
    ctx: *mut c_void,
}

// SAFETY: a context has no thread affinity (no thread-local state in libnftables); it is only
// reached through `&mut self`, so never from two threads at once.
unsafe impl Send for Context {}
// SAFETY: no method takes `&self`: a shared reference gives no access to the context.
unsafe impl Sync for Context {}

impl Context {
    /// A new context with output and errors buffered; `None` without the library.
    pub(crate) fn new() -> Option<Self> {
        let library = library()?;
        let _calls = calls();
        // SAFETY: `ctx_new` takes flags (0: NFT_CTX_DEFAULT) and returns an owned context or
        // NULL.
        let ctx = unsafe { (library.ctx_new)(0) };
        if ctx.is_null() {
            return None;
        }
        // SAFETY: `ctx` is the live context just created.
        unsafe {
            (library.buffer_output)(ctx);
            (library.buffer_error)(ctx);
        }
        Some(Context { library, ctx })
    }

    /// Runs `text` as one transaction (what `nft -f` does with a file); `Err` carries what nft
    /// reported.
    pub(crate) fn run(&mut self, text: &str) -> Result<(), String> {
        let text = CString::new(text).map_err(|_| "the transaction contains a NUL byte")?;
        let _calls = calls();
        // SAFETY: `self.ctx` is live and `text` is NUL-terminated and outlives the call.
        let status = unsafe { (self.library.run_cmd)(self.ctx, text.as_ptr()) };
        // SAFETY: `self.ctx` is live; the returned buffers (possibly NULL) are owned by the
        // context and read before the next call into it. Taking the output buffer rewinds it,
        // so output (there should be none) does not pile up across runs.
        let errors = unsafe {
            (self.library.get_output_buffer)(self.ctx);
            let buffer = (self.library.get_error_buffer)(self.ctx);
            if buffer.is_null() {
                String::new()
            } else {
                CStr::from_ptr(buffer).to_string_lossy().trim().to_owned()
            }
        };
        if status == 0 {
            Ok(())
        } else if errors.is_empty() {
            Err(format!("libnftables returned {status}"))
        } else {
            Err(errors)
        }
    }
}

impl Drop for Context {
    fn drop(&mut self) {
        let _calls = calls();
        // SAFETY: `self.ctx` is live and not used after this.
        unsafe { (self.library.ctx_free)(self.ctx) }
    }
}
