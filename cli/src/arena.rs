//! pedelec-cli's memory allocator: small blocks come from a fixed arena in
//! the program's zero-initialised data, recycled by size class; what does not
//! fit goes to the system allocator.
//!
//! Why: a `tool-call` lives for about a millisecond and allocates a few
//! hundred KiB in total. The shipped CLI is linked against musl, whose
//! allocator maps and unmaps memory for each new size class: ~20 extra
//! `mmap`/`munmap` calls per tool call, and about four per call served by a
//! long-lived `pedelec-cli mcp`, each a system call plus page-table work
//! (docs/decisions.md, "pedelec-cli on musl"). From the arena an allocation
//! is a list pop or a pointer bump under an uncontended lock, and its pages
//! are only touched, never mapped or unmapped.

#![allow(unsafe_code)] // an allocator; each block says why it holds

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::UnsafeCell;
use std::sync::{Mutex, MutexGuard};

/// The arena's size: room for a tool call with its runtime, connection and a
/// result of a few hundred KiB. Untouched pages of it cost nothing.
pub const CLI_ARENA_BYTES: usize = 1 << 20;

/// Block sizes: powers of two from 16 bytes (room for the free list's link)
/// to 64 KiB; anything larger goes to the system allocator.
const MIN_BLOCK_SHIFT: u32 = 4;
const CLASSES: usize = 13;
/// Blocks are aligned to their size up to a page; a stricter alignment goes
/// to the system allocator.
const MAX_BLOCK_ALIGN: usize = 4096;

/// A size-class allocator over `N` bytes in front of [`System`]: each
/// allocation is rounded up to a power of two, taken from that size's free
/// list or else cut from the untouched end of the arena. Freed blocks go back
/// on their list, so a long-lived `pedelec-cli mcp` keeps reusing the arena.
pub struct ArenaFirst<const N: usize> {
    state: Mutex<State>,
    bytes: UnsafeCell<[u8; N]>,
}

struct State {
    /// Offset of the first never-used byte of the arena.
    next: usize,
    /// Per size class, the address of the first free block (0: none); each
    /// free block holds the address of the next in its first word.
    free: [usize; CLASSES],
}

// SAFETY: the bytes are only reached through `alloc`/`dealloc`, which hand
// each block to one owner at a time under the `state` lock.
unsafe impl<const N: usize> Sync for ArenaFirst<N> {}

impl<const N: usize> ArenaFirst<N> {
    /// An empty arena; all zeros, so a `static` of it takes no space in the
    /// executable file.
    pub const fn new() -> Self {
        ArenaFirst {
            state: Mutex::new(State {
                next: 0,
                free: [0; CLASSES],
            }),
            bytes: UnsafeCell::new([0; N]),
        }
    }

    /// Whether `ptr` points into the arena (so it must not be given to
    /// [`System`]).
    pub fn owns(&self, ptr: *const u8) -> bool {
        let start = self.bytes.get() as usize;
        (start..start + N).contains(&(ptr as usize))
    }

    /// Bytes of the arena cut into blocks so far (tests and diagnostics).
    pub fn used(&self) -> usize {
        self.lock().next
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // Nothing under the lock can panic, but an allocator must not either.
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// A block for `layout`, or None when it is too big or the arena is full.
    fn take(&self, layout: Layout) -> Option<*mut u8> {
        let class = class_of(layout)?;
        let size = block_size(class);
        let mut state = self.lock();
        let head = state.free[class];
        if head != 0 {
            // SAFETY: `head` is a free block of this arena, whose first word
            // `give_back` set to the next free block's address.
            state.free[class] = unsafe { (head as *const usize).read() };
            return Some(head as *mut u8);
        }
        let base = self.bytes.get() as *mut u8;
        // Align the address, not the offset: the arena itself is only
        // byte-aligned.
        let align = size.min(MAX_BLOCK_ALIGN);
        let start = (base as usize + state.next).checked_next_multiple_of(align)? - base as usize;
        let end = start.checked_add(size)?;
        if end > N {
            return None;
        }
        state.next = end;
        Some(base.wrapping_add(start))
    }

    /// Puts a block of the arena back on its free list.
    fn give_back(&self, ptr: *mut u8, layout: Layout) {
        let Some(class) = class_of(layout) else {
            return; // never handed out by `take`
        };
        let mut state = self.lock();
        // SAFETY: the block is ours, at least 16 bytes and aligned to 16, and
        // its owner has just given it up.
        unsafe { (ptr as *mut usize).write(state.free[class]) };
        state.free[class] = ptr as usize;
    }
}

/// The size class of `layout`: its size or alignment, whichever is larger,
/// rounded up to a power of two; None when that is beyond the largest class.
fn class_of(layout: Layout) -> Option<usize> {
    if layout.align() > MAX_BLOCK_ALIGN {
        return None;
    }
    let size = layout.size().max(layout.align()).max(1 << MIN_BLOCK_SHIFT);
    let class = (size.next_power_of_two().trailing_zeros() - MIN_BLOCK_SHIFT) as usize;
    (class < CLASSES).then_some(class)
}

fn block_size(class: usize) -> usize {
    1 << (class as u32 + MIN_BLOCK_SHIFT)
}

impl<const N: usize> Default for ArenaFirst<N> {
    fn default() -> Self {
        Self::new()
    }
}

// SAFETY: `alloc` returns either a block of the arena that no live allocation
// overlaps (sized and aligned for the layout by `class_of`), or what `System`
// returned; `dealloc` gives `System` back only pointers that came from it.
// The default `realloc` (alloc, copy, dealloc) keeps both true.
unsafe impl<const N: usize> GlobalAlloc for ArenaFirst<N> {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        match self.take(layout) {
            Some(ptr) => ptr,
            // SAFETY: the caller's layout contract is passed on unchanged.
            None => unsafe { System.alloc(layout) },
        }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if self.owns(ptr) {
            self.give_back(ptr, layout);
        } else {
            // SAFETY: not ours, so `System` allocated it with this layout.
            unsafe { System.dealloc(ptr, layout) }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout(size: usize, align: usize) -> Layout {
        Layout::from_size_align(size, align).unwrap()
    }

    #[test]
    fn allocations_are_aligned_and_disjoint_until_the_arena_is_full() {
        let arena = Box::new(ArenaFirst::<4096>::new());
        let mut ranges = Vec::new();
        for (size, align) in [(1, 1), (24, 8), (3, 1), (100, 64), (7, 2), (512, 256)] {
            let l = layout(size, align);
            // SAFETY: non-zero sizes, valid layouts.
            let p = unsafe { arena.alloc(l) };
            assert!(arena.owns(p), "{size}/{align} should come from the arena");
            assert_eq!(p as usize % align, 0, "{size}/{align} misaligned");
            ranges.push((p as usize, p as usize + size));
        }
        ranges.sort();
        assert!(
            ranges.windows(2).all(|w| w[0].1 <= w[1].0),
            "{ranges:?} overlap"
        );

        // Too big for what is left: the system allocator, usable and freeable.
        let big = layout(4096, 8);
        // SAFETY: valid layout; the block is written within its size, then freed once.
        unsafe {
            let p = arena.alloc(big);
            assert!(!p.is_null() && !arena.owns(p));
            p.write_bytes(0xAB, 4096);
            arena.dealloc(p, big);
        }
    }

    #[test]
    fn a_freed_block_is_reused_by_its_size_class_and_realloc_copies() {
        let arena = Box::new(ArenaFirst::<256>::new());
        // SAFETY: valid layouts; each block is used within its size and freed once.
        unsafe {
            let p = arena.alloc(layout(64, 8));
            p.write_bytes(7, 64);
            arena.dealloc(p, layout(64, 8));
            let used = arena.used();
            // 50 bytes round up to the same 64-byte class: the same block.
            let q = arena.alloc(layout(50, 1));
            assert_eq!(q, p);
            assert_eq!(arena.used(), used, "nothing new cut from the arena");
            // Another class is a new block.
            let small = arena.alloc(layout(16, 16));
            assert!(arena.owns(small) && small != q);

            // Growing past the arena moves the bytes to the system allocator.
            q.write_bytes(9, 50);
            let r = arena.realloc(q, layout(50, 1), 1024);
            assert!(!arena.owns(r));
            assert!(std::slice::from_raw_parts(r, 50).iter().all(|&b| b == 9));
            arena.dealloc(r, layout(1024, 1));
            // The block realloc left is free again.
            assert_eq!(arena.alloc(layout(64, 64)), p);
        }
    }

    #[test]
    fn large_or_overaligned_blocks_go_to_the_system_allocator() {
        let arena = Box::new(ArenaFirst::<4096>::new());
        for l in [layout(64 * 1024 + 1, 8), layout(64, 8192)] {
            // SAFETY: valid layout; written within its size, freed once.
            unsafe {
                let p = arena.alloc(l);
                assert!(!p.is_null() && !arena.owns(p));
                assert_eq!(p as usize % l.align(), 0);
                p.write_bytes(1, l.size());
                arena.dealloc(p, l);
            }
        }
        assert_eq!(arena.used(), 0);
    }

    #[test]
    fn threads_never_get_the_same_bytes() {
        static ARENA: ArenaFirst<{ 64 * 1024 }> = ArenaFirst::new();
        let handles: Vec<_> = (0..4)
            .map(|_| {
                std::thread::spawn(|| {
                    (0..200)
                        // SAFETY: valid layout; the blocks are leaked.
                        .map(|_| unsafe { ARENA.alloc(layout(16, 16)) } as usize)
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        let mut all: Vec<usize> = handles
            .into_iter()
            .flat_map(|h| h.join().unwrap())
            .collect();
        let n = all.len();
        all.sort();
        all.dedup();
        assert_eq!(all.len(), n, "two threads got the same block");
    }
}
