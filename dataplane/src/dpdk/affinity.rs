//! The CPUs a thread may run on (the unsafe part: `sched_getaffinity`).

/// The CPUs this thread may run on (its affinity), when it can be read.
pub fn allowed_cpus() -> Option<Vec<u32>> {
    // SAFETY: cpu_set_t is plain data; all-zero is an empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `set` is a cpu_set_t of the size given.
    let got = unsafe { libc::sched_getaffinity(0, std::mem::size_of_val(&set), &mut set) };
    if got != 0 {
        return None;
    }
    let bits = 8 * std::mem::size_of_val(&set);
    // SAFETY: CPU_ISSET reads the set within its size.
    Some(
        (0..bits)
            .filter(|&c| unsafe { libc::CPU_ISSET(c, &set) })
            .map(|c| c as u32)
            .collect(),
    )
}
