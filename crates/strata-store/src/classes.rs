//! memcached's slab classes, computed exactly as memcached 1.6.45's
//! `slabs_init` computes them. Strata has no slabs; the table exists so
//! `stats items`, `stats slabs`, `me`'s `cls=` and the dumps report the class
//! memcached would put an item of that size in, for the tools that key on it.
//!
//! ```text
//!  class 1: 48-byte item header + -n (48)  = 96 bytes, aligned to 8
//!  class k: class k-1 x -f (1.25), truncated to an integer, aligned to 8,
//!           while the size stays under slab_chunk_max / -f
//!  last:    slab_chunk_max (512 KiB: half the 1 MiB slab page)
//!  -o slab_sizes=a-b-c: the given sizes (aligned), then slab_chunk_max
//! ```
//!
//! An item larger than `slab_chunk_max` (up to `-I`) is "chunked" by
//! memcached and linked into the largest class, which is where
//! [`SlabClasses::class_of`] puts it. At most 63 classes (memcached's
//! `MAX_NUMBER_OF_SLAB_CLASSES - 1`), so a class id fits in a `u8`.

/// memcached's slab page: chunks are carved from 1 MiB pages, whatever `-I`.
pub const SLAB_PAGE_BYTES: usize = 1 << 20;
/// memcached's `sizeof(item)` on 64-bit Linux.
pub const ITEM_HEADER_BYTES: usize = 48;
const CHUNK_ALIGN_BYTES: usize = 8;
/// Class ids run 1..=63 (`MAX_NUMBER_OF_SLAB_CLASSES` is 64, id 0 is the page pool).
pub const MAX_CLASSES: usize = 63;
/// Items up to this size find their class in one load from a table (one
/// byte per 8 bytes of size: 2 KiB), not a binary search: every hit and
/// store looks its item's class up, and most items are small.
const DIRECT_LOOKUP_BYTES: usize = 16 << 10;

/// The settings that shape the classes (`-f`, `-n`, `-o slab_chunk_max`,
/// `-o slab_sizes`, `-I`), as memcached's command line gives them.
#[derive(Clone, Debug, PartialEq)]
pub struct ClassGeometry {
    /// `-f`, default 1.25.
    pub growth_factor: f64,
    /// `-n`, default 48: room for key, value and flags in the smallest chunk.
    pub min_size_bytes: usize,
    /// `-o slab_chunk_max` in bytes; 0 means memcached's default, half a page.
    pub chunk_max_bytes: usize,
    /// `-o slab_sizes`: explicit chunk sizes instead of the factor.
    pub sizes: Option<Vec<usize>>,
    /// `-I`.
    pub item_size_max_bytes: usize,
}

impl Default for ClassGeometry {
    fn default() -> Self {
        ClassGeometry { growth_factor: 1.25, min_size_bytes: 48, chunk_max_bytes: 0, sizes: None, item_size_max_bytes: 1 << 20 }
    }
}

/// The class table: chunk size of each class, smallest first.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SlabClasses {
    /// `chunk_sizes[k]` is the chunk size of class `k + 1`.
    chunk_sizes: Vec<u32>,
    item_size_max_bytes: usize,
    /// `direct[(size + 7) / 8]`: the class of `size` (chunk sizes are
    /// multiples of 8, so every size in those 8 bytes has the same class).
    direct: Box<[u8]>,
}

impl Default for SlabClasses {
    fn default() -> Self {
        SlabClasses::new(&ClassGeometry::default())
    }
}

impl SlabClasses {
    /// memcached's `slabs_init` for these settings. Settings memcached would
    /// refuse at start (a factor of 1 or less, a chunk larger than `-I`) are
    /// clamped to something that still gives a table.
    pub fn new(g: &ClassGeometry) -> SlabClasses {
        let chunk_max = match g.chunk_max_bytes {
            0 => SLAB_PAGE_BYTES / 2,
            n => n.min(SLAB_PAGE_BYTES),
        }
        .min(g.item_size_max_bytes.max(ITEM_HEADER_BYTES + CHUNK_ALIGN_BYTES)) as u32;
        let factor = if g.growth_factor > 1.0 { g.growth_factor } else { 1.25 };
        let mut chunk_sizes = Vec::new();
        // memcached keeps `size` in an unsigned int and multiplies it by a double.
        let mut size = (ITEM_HEADER_BYTES + g.min_size_bytes).min(u32::MAX as usize) as u32;
        while chunk_sizes.len() < MAX_CLASSES - 1 {
            match &g.sizes {
                Some(explicit) => match explicit.get(chunk_sizes.len()) {
                    Some(&s) if s > 0 => size = s.min(u32::MAX as usize) as u32,
                    _ => break,
                },
                None if f64::from(size) >= f64::from(chunk_max) / factor => break,
                None => {}
            }
            if !(size as usize).is_multiple_of(CHUNK_ALIGN_BYTES) {
                size += (CHUNK_ALIGN_BYTES - size as usize % CHUNK_ALIGN_BYTES) as u32;
            }
            chunk_sizes.push(size);
            if g.sizes.is_none() {
                size = (f64::from(size) * factor) as u32;
            }
        }
        chunk_sizes.push(chunk_max);
        // The direct table in one walk: the sizes rise, so each one's class
        // (the first chunk that holds it) is at or after the last one's.
        let mut class = 0;
        let direct = (0..=DIRECT_LOOKUP_BYTES / CHUNK_ALIGN_BYTES)
            .map(|i| {
                let size = i * CHUNK_ALIGN_BYTES;
                if size == 0 || size > g.item_size_max_bytes {
                    return 0;
                }
                while class + 1 < chunk_sizes.len() && (chunk_sizes[class] as usize) < size {
                    class += 1;
                }
                (class + 1) as u8
            })
            .collect();
        SlabClasses { chunk_sizes, item_size_max_bytes: g.item_size_max_bytes, direct }
    }

    /// [`SlabClasses::class_of`] by binary search.
    fn search(&self, size: usize) -> u8 {
        if size == 0 || size > self.item_size_max_bytes {
            return 0;
        }
        let size = size.min(u32::MAX as usize) as u32;
        let at = self.chunk_sizes.partition_point(|&chunk| chunk < size);
        (at.min(self.chunk_sizes.len() - 1) + 1) as u8
    }

    /// memcached's `slabs_clsid`: the class of an item of `size` bytes
    /// ([`crate::memcached_item_size`]); the largest class for a chunked
    /// item; 0 for a size of 0 or over `-I`.
    #[inline]
    pub fn class_of(&self, size: usize) -> u8 {
        match self.direct.get(size.div_ceil(CHUNK_ALIGN_BYTES)) {
            Some(&class) if size <= self.item_size_max_bytes => class,
            _ => self.search(size),
        }
    }

    /// Number of classes (the largest class id).
    pub fn len(&self) -> usize {
        self.chunk_sizes.len()
    }

    pub fn is_empty(&self) -> bool {
        false
    }

    /// Chunk size of class `id` (1-based); 0 for an id out of range.
    pub fn chunk_size(&self, id: usize) -> usize {
        id.checked_sub(1).and_then(|i| self.chunk_sizes.get(i)).map_or(0, |&s| s as usize)
    }

    /// Chunks of class `id` in one slab page (`chunks_per_page`).
    pub fn chunks_per_page(&self, id: usize) -> usize {
        SLAB_PAGE_BYTES / self.chunk_size(id).max(1)
    }

    /// The largest chunk (`slab_chunk_max`): items above it are chunked.
    pub fn chunk_max(&self) -> usize {
        *self.chunk_sizes.last().expect("at least one class") as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sizes(g: ClassGeometry) -> Vec<usize> {
        let c = SlabClasses::new(&g);
        (1..=c.len()).map(|id| c.chunk_size(id)).collect()
    }

    // Each expectation below is what memcached 1.6.45 prints with -vv.
    #[test]
    fn default_geometry_matches_memcached() {
        let s = sizes(ClassGeometry::default());
        assert_eq!(&s[..4], &[96, 120, 152, 192]);
        assert_eq!(s.len(), 39);
        assert_eq!(s[30], 82792);
        assert_eq!(s[37], 394840);
        assert_eq!(s[38], 524288);
        let c = SlabClasses::default();
        assert_eq!(c.class_of(68), 1);
        assert_eq!(c.class_of(96), 1);
        assert_eq!(c.class_of(97), 2);
        assert_eq!(c.class_of(66622), 31);
        assert_eq!(c.class_of(600_063), 39, "chunked items live in the largest class");
        assert_eq!(c.class_of((1 << 20) + 1), 0);
        assert_eq!(c.class_of(0), 0);
        assert_eq!(c.chunks_per_page(1), 10922);
        assert_eq!(c.chunks_per_page(39), 2);
    }

    #[test]
    fn factor_and_min_size() {
        let s = sizes(ClassGeometry { growth_factor: 2.0, min_size_bytes: 100, ..ClassGeometry::default() });
        assert_eq!(&s[..3], &[152, 304, 608]);
        assert_eq!(*s.last().unwrap(), 524288);
    }

    #[test]
    fn explicit_sizes_are_aligned_and_end_with_chunk_max() {
        let s = sizes(ClassGeometry { sizes: Some(vec![100, 200, 300]), ..ClassGeometry::default() });
        assert_eq!(s, vec![104, 200, 304, 524288]);
    }

    #[test]
    fn chunk_max_and_large_items() {
        let s = sizes(ClassGeometry { chunk_max_bytes: 16 << 10, ..ClassGeometry::default() });
        assert_eq!(s.len(), 23);
        assert_eq!(&s[21..], &[11104, 16384]);
        // -I 2m keeps the 512 KiB chunk (1.6.45), items above it are chunked.
        let big = SlabClasses::new(&ClassGeometry { item_size_max_bytes: 2 << 20, ..ClassGeometry::default() });
        assert_eq!(big.chunk_max(), 524288);
        assert_eq!(big.class_of(2 << 20), 39);
    }

    #[test]
    fn the_direct_table_agrees_with_the_search() {
        for g in [
            ClassGeometry::default(),
            ClassGeometry { growth_factor: 1.07, min_size_bytes: 5, ..ClassGeometry::default() },
            ClassGeometry { sizes: Some(vec![100, 200, 300]), ..ClassGeometry::default() },
            ClassGeometry { item_size_max_bytes: 4096, chunk_max_bytes: 4096, ..ClassGeometry::default() },
        ] {
            let c = SlabClasses::new(&g);
            for size in 0..DIRECT_LOOKUP_BYTES + 100 {
                assert_eq!(c.class_of(size), c.search(size), "{size} with {g:?}");
            }
        }
    }

    #[test]
    fn never_more_than_63_classes() {
        let c = SlabClasses::new(&ClassGeometry { growth_factor: 1.01, min_size_bytes: 1, ..ClassGeometry::default() });
        assert_eq!(c.len(), MAX_CLASSES);
        assert_eq!(c.chunk_size(MAX_CLASSES), 524288);
    }
}
