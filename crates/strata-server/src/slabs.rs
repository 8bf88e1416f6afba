//! memcached's slab classes, computed the way `slabs_init` computes them
//! (48-byte header + 48-byte minimum chunk, growth factor 1.25, 8-byte
//! alignment, largest chunk half a slab page). Strata has no slabs; the table
//! exists so `me` and `stats slabs`/`stats items` report the class memcached
//! would put an item of that size in, for tools that key on it.

const CHUNK_ALIGN_BYTES: usize = 8;
const GROWTH_FACTOR: f64 = 1.25;
const SMALLEST_CHUNK: usize = 96;

/// Chunk sizes of classes 1..=N.
pub fn class_sizes(item_size_max: usize) -> Vec<usize> {
    let slab_page_size = item_size_max.max(1 << 20);
    let chunk_max = slab_page_size / 2;
    let mut sizes = Vec::new();
    let mut size = SMALLEST_CHUNK;
    while sizes.len() < 62 {
        if size as f64 >= chunk_max as f64 / GROWTH_FACTOR {
            break;
        }
        if size % CHUNK_ALIGN_BYTES != 0 {
            size += CHUNK_ALIGN_BYTES - size % CHUNK_ALIGN_BYTES;
        }
        sizes.push(size);
        size = (size as f64 * GROWTH_FACTOR) as usize;
    }
    sizes.push(chunk_max);
    sizes
}

/// The class id (1-based) of an item of `size` bytes.
pub fn class_of(size: usize, item_size_max: usize) -> usize {
    let sizes = class_sizes(item_size_max);
    sizes.iter().position(|&s| size <= s).map_or(sizes.len(), |i| i + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_memcached_defaults() {
        let sizes = class_sizes(1 << 20);
        assert_eq!(&sizes[..4], &[96, 120, 152, 192]);
        assert_eq!(*sizes.last().unwrap(), 524288);
        assert_eq!(class_of(68, 1 << 20), 1);
        assert_eq!(class_of(97, 1 << 20), 2);
    }
}
