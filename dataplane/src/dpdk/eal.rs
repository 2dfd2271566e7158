//! EAL initialisation, lcores and the TSC clock.

use std::ffi::{c_int, c_void, CString};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use super::{check, DpdkError};

/// A DPDK logical core id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LcoreId(pub u32);

static EAL_UP: AtomicBool = AtomicBool::new(false);

/// The initialised EAL. DPDK allows one initialisation per process; dropping
/// this runs `rte_eal_cleanup`.
#[derive(Debug)]
pub struct Eal {
    _private: (),
}

impl Eal {
    /// Initialises DPDK with `args` (without the program name).
    ///
    /// # Errors
    /// When the EAL was already initialised in this process, or
    /// `rte_eal_init` fails (bad arguments, no memory, a device that cannot be
    /// probed); the error carries the arguments.
    pub fn init(args: &[String]) -> Result<Self, DpdkError> {
        if EAL_UP.swap(true, Ordering::SeqCst) {
            return Err(DpdkError::new("rte_eal_init", libc::EALREADY)
                .context("DPDK's EAL can be initialised once per process"));
        }
        let mut owned: Vec<CString> = Vec::with_capacity(args.len() + 1);
        owned.push(CString::new("dpd").expect("no NUL"));
        for a in args {
            match CString::new(a.as_str()) {
                Ok(c) => owned.push(c),
                Err(_) => {
                    EAL_UP.store(false, Ordering::SeqCst);
                    return Err(DpdkError::new("rte_eal_init", libc::EINVAL)
                        .context(format!("NUL byte in EAL argument {a:?}")));
                }
            }
        }
        // rte_eal_init may permute argv; hand it a private array of pointers
        // into `owned`, which outlives the call.
        let mut argv: Vec<*mut libc::c_char> =
            owned.iter().map(|c| c.as_ptr().cast_mut()).collect();
        argv.push(std::ptr::null_mut());
        let argc = c_int::try_from(owned.len()).expect("few arguments");
        // SAFETY: argv holds argc valid NUL-terminated strings followed by a
        // null, all alive until after the call; DPDK copies what it keeps.
        let rc = unsafe { dpdk_sys::rte_eal_init(argc, argv.as_mut_ptr()) };
        if rc < 0 {
            // A failed rte_eal_init cannot be retried in this process.
            return Err(DpdkError::from_rte_errno("rte_eal_init").context(args.join(" ")));
        }
        let hz = tsc_hz_from_eal();
        if hz > 0 {
            TSC_HZ.store(hz, Ordering::Relaxed);
        }
        Ok(Self { _private: () })
    }

    /// The main lcore (the thread that called `init`).
    pub fn main_lcore(&self) -> LcoreId {
        // SAFETY: EAL is initialised (self exists).
        LcoreId(unsafe { dpdk_sys::rte_get_main_lcore() })
    }

    /// The NUMA socket of an lcore.
    pub fn lcore_socket(&self, lcore: LcoreId) -> u32 {
        // SAFETY: EAL is initialised; an unknown lcore yields a defined value.
        unsafe { dpdk_sys::rte_lcore_to_socket_id(lcore.0) }
    }

    /// Runs `f` on the worker lcore `lcore` (which must be idle). Join it
    /// with [`LaunchedLcore::wait`].
    ///
    /// # Errors
    /// When the lcore is not an enabled worker or is busy.
    pub fn launch<F>(&self, lcore: LcoreId, f: F) -> Result<LaunchedLcore, DpdkError>
    where
        F: FnOnce() -> i32 + Send + 'static,
    {
        extern "C" fn trampoline(arg: *mut c_void) -> c_int {
            // SAFETY: `arg` is the Box<Box<dyn FnOnce>> leaked by `launch`
            // below, handed to exactly one trampoline call.
            let f = unsafe { Box::from_raw(arg.cast::<Box<dyn FnOnce() -> i32 + Send>>()) };
            f()
        }
        let boxed: Box<Box<dyn FnOnce() -> i32 + Send>> = Box::new(Box::new(f));
        let arg = Box::into_raw(boxed).cast::<c_void>();
        // SAFETY: trampoline has the C signature DPDK expects and takes
        // ownership of `arg` exactly once when the launch succeeds.
        let rc = unsafe { dpdk_sys::rte_eal_remote_launch(Some(trampoline), arg, lcore.0) };
        if rc < 0 {
            // SAFETY: the launch failed, so the trampoline never ran; take the
            // closure back to free it.
            drop(unsafe { Box::from_raw(arg.cast::<Box<dyn FnOnce() -> i32 + Send>>()) });
            return Err(
                DpdkError::new("rte_eal_remote_launch", rc).context(format!("lcore {}", lcore.0))
            );
        }
        Ok(LaunchedLcore { lcore })
    }
}

impl Drop for Eal {
    fn drop(&mut self) {
        // SAFETY: all lcores have been waited for by their LaunchedLcore
        // owners (or were never launched); cleanup releases EAL resources.
        unsafe {
            dpdk_sys::rte_eal_mp_wait_lcore();
            dpdk_sys::rte_eal_cleanup();
        }
    }
}

/// A function running on a worker lcore.
#[derive(Debug)]
#[must_use = "a launched lcore must be waited for"]
pub struct LaunchedLcore {
    pub lcore: LcoreId,
}

impl LaunchedLcore {
    /// Waits for the lcore's function to return and gives its return value.
    pub fn wait(self) -> i32 {
        // SAFETY: called from the main lcore on a lcore we launched.
        unsafe { dpdk_sys::rte_eal_wait_lcore(self.lcore.0) }
    }
}

/// Registers the calling (non-EAL) thread with DPDK so that it gets an lcore
/// id and may use mempool caches and other per-lcore state.
///
/// # Errors
/// When the EAL is not initialised or no lcore id is free.
pub fn register_thread() -> Result<LcoreId, DpdkError> {
    // SAFETY: rte_thread_register only touches the calling thread's state.
    check("rte_thread_register", unsafe {
        dpdk_sys::rte_thread_register()
    })
    .map_err(|_| DpdkError::from_rte_errno("rte_thread_register"))?;
    // SAFETY: reads the calling thread's lcore id.
    Ok(LcoreId(unsafe { dpdk_sys::tlsdp_lcore_id() }))
}

static TSC_HZ: AtomicU64 = AtomicU64::new(0);

fn tsc_hz_from_eal() -> u64 {
    // SAFETY: only called after rte_eal_init succeeded.
    unsafe { dpdk_sys::rte_get_tsc_hz() }
}

/// The time stamp counter. Safe to read with or without the EAL.
#[inline]
pub fn tsc_now() -> u64 {
    // SAFETY: rte_rdtsc reads the TSC register; no memory is touched.
    unsafe { dpdk_sys::tlsdp_rdtsc() }
}

/// TSC ticks per second: DPDK's value once the EAL is up, otherwise measured
/// once against the monotonic clock (10 ms).
pub fn tsc_hz() -> u64 {
    let hz = TSC_HZ.load(Ordering::Relaxed);
    if hz != 0 {
        return hz;
    }
    let (t0, c0) = (Instant::now(), tsc_now());
    std::thread::sleep(Duration::from_millis(10));
    let (dt, dc) = (t0.elapsed(), tsc_now() - c0);
    let hz = (dc as f64 / dt.as_secs_f64()) as u64;
    TSC_HZ.store(hz.max(1), Ordering::Relaxed);
    hz.max(1)
}
