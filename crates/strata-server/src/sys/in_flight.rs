//! The buffers an io_uring holds while the kernel uses them: a slot table
//! of (buffer, owner), the slot being the operation's user data.
//!
//! ```text
//!  slots: [Some((buf, owner)) | None | Some(..) ...]   free: [1, ...]
//!  insert -> a free slot (or a new one); take(slot) -> its (buf, owner)
//! ```
//!
//! A buffer given to the kernel must neither move nor be freed until its
//! completion: the ring puts it here before it submits the operation and
//! takes it back when the completion names the slot. Slots are reused, so
//! the table is as long as the most operations ever in flight at once.

pub struct InFlight<T, O> {
    slots: Vec<Option<(T, O)>>,
    free: Vec<usize>,
    count: usize,
}

impl<T, O> Default for InFlight<T, O> {
    fn default() -> Self {
        InFlight { slots: Vec::new(), free: Vec::new(), count: 0 }
    }
}

impl<T, O> InFlight<T, O> {
    /// Hold `buf` for `owner` until [`InFlight::take`] of the slot returned.
    pub fn insert(&mut self, buf: T, owner: O) -> usize {
        self.count += 1;
        match self.free.pop() {
            Some(slot) => {
                self.slots[slot] = Some((buf, owner));
                slot
            }
            None => {
                self.slots.push(Some((buf, owner)));
                self.slots.len() - 1
            }
        }
    }

    /// The buffer and owner of `slot`, which becomes free; None if it holds
    /// nothing (a slot never given out, or taken already).
    pub fn take(&mut self, slot: usize) -> Option<(T, O)> {
        let held = self.slots.get_mut(slot)?.take()?;
        self.free.push(slot);
        self.count -= 1;
        Some(held)
    }

    /// Operations in flight.
    pub fn len(&self) -> usize {
        self.count
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Every buffer still held, leaving the table empty.
    pub fn drain(&mut self) -> impl Iterator<Item = T> + '_ {
        self.free.clear();
        self.count = 0;
        self.slots.drain(..).flatten().map(|(buf, _)| buf)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_are_reused_and_taken_once() {
        let mut t = InFlight::default();
        let a = t.insert("a", 1u64);
        let b = t.insert("b", 2);
        assert_ne!(a, b);
        assert_eq!(t.len(), 2);
        assert_eq!(t.take(a), Some(("a", 1)));
        assert_eq!(t.take(a), None, "taken once");
        assert_eq!(t.take(99), None, "never given out");
        assert_eq!(t.insert("c", 3), a, "a freed slot is reused");
        assert_eq!(t.len(), 2);
        let mut rest: Vec<_> = t.drain().collect();
        rest.sort();
        assert_eq!(rest, ["b", "c"]);
        assert!(t.is_empty());
        assert_eq!(t.insert("d", 4), 0, "empty after drain");
    }
}
