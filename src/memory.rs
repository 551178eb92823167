//! Giving freed heap memory back to the operating system after a large transient allocation.
//!
//! A full flow sync of a large rule set builds every flow_mod and the encoded bundle at once
//! (about 200 MB for 150,000 flows), and frees them once the bundle commits. glibc keeps freed
//! memory in its arenas (only the top of the main heap goes back on its own), so without a trim
//! the agent would keep a large part of that peak resident for the rest of its life. This is the
//! crate's only unsafe code: one call into the C library.
#![allow(unsafe_code)]

/// The number of flow_mods in one bundle from which the flow installer trims afterwards:
/// smaller bundles leave little behind, and a trim walks every arena.
pub const LARGE_BUNDLE_FLOW_MODS: usize = 10_000;

/// Returns the allocator's free pages to the kernel; whether any memory was released.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
pub fn release_free_memory() -> bool {
    // SAFETY: malloc_trim takes no pointers and only works on the allocator's own free lists;
    // it is thread-safe (it locks each arena in turn), and 0 is a valid padding argument.
    unsafe { libc::malloc_trim(0) == 1 }
}

/// Other C libraries have no such call; their allocators return memory on their own terms.
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub fn release_free_memory() -> bool {
    false
}
