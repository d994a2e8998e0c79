//! Slots inside one page (KV §4): slot `j` is bytes `j·slot_size .. (j+1)·slot_size`, a tag
//! then a value; an all-zero tag marks an empty slot. Slots may sit in any order and empty
//! slots anywhere: a reader checks every slot.

use super::hash::{Tag, TAG_LEN};

/// Slots that fit in `page`.
pub fn slots(page: &[u8], slot_size: usize) -> usize {
    page.len() / slot_size
}

/// The tag bytes of slot `slot`.
pub fn tag_at(page: &[u8], slot_size: usize, slot: usize) -> &[u8] {
    &page[slot * slot_size..slot * slot_size + TAG_LEN]
}

/// The value bytes of slot `slot`.
pub fn value(page: &[u8], slot_size: usize, slot: usize) -> &[u8] {
    &page[slot * slot_size + TAG_LEN..(slot + 1) * slot_size]
}

/// Whether slot `slot` is empty (all-zero tag).
pub fn is_empty(page: &[u8], slot_size: usize, slot: usize) -> bool {
    tag_at(page, slot_size, slot).iter().all(|b| *b == 0)
}

/// The slot holding `tag`, if any.
pub fn find(page: &[u8], slot_size: usize, tag: &Tag) -> Option<usize> {
    (0..slots(page, slot_size)).find(|&s| tag_at(page, slot_size, s) == tag)
}

/// The first empty slot, if any.
pub fn first_empty(page: &[u8], slot_size: usize) -> Option<usize> {
    (0..slots(page, slot_size)).find(|&s| is_empty(page, slot_size, s))
}

/// Slots in use.
pub fn occupied(page: &[u8], slot_size: usize) -> usize {
    (0..slots(page, slot_size))
        .filter(|&s| !is_empty(page, slot_size, s))
        .count()
}

/// Writes `tag || value` into slot `slot`.
pub fn write(page: &mut [u8], slot_size: usize, slot: usize, tag: &Tag, value: &[u8]) {
    debug_assert_eq!(value.len(), slot_size - TAG_LEN);
    let s = &mut page[slot * slot_size..(slot + 1) * slot_size];
    s[..TAG_LEN].copy_from_slice(tag);
    s[TAG_LEN..].copy_from_slice(value);
}

/// Zeroes slot `slot`.
pub fn clear(page: &mut [u8], slot_size: usize, slot: usize) {
    page[slot * slot_size..(slot + 1) * slot_size].fill(0);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_write_find_clear() {
        // 256-byte page, 16-byte values: 8 slots of 32 bytes.
        let mut page = vec![0u8; 256];
        assert_eq!(slots(&page, 32), 8);
        assert_eq!(first_empty(&page, 32), Some(0));
        let t1 = [1u8; 16];
        let t2 = [2u8; 16];
        write(&mut page, 32, 0, &t1, &[0xaa; 16]);
        write(&mut page, 32, 5, &t2, &[0xbb; 16]);
        assert_eq!(&page[..16], &t1);
        assert_eq!(&page[16..32], &[0xaa; 16]);
        assert_eq!(&page[160..176], &t2);
        assert_eq!(find(&page, 32, &t2), Some(5));
        assert_eq!(value(&page, 32, 5), &[0xbb; 16]);
        assert_eq!(find(&page, 32, &[3u8; 16]), None);
        assert_eq!(first_empty(&page, 32), Some(1));
        assert_eq!(occupied(&page, 32), 2);
        clear(&mut page, 32, 0);
        assert_eq!(first_empty(&page, 32), Some(0));
        assert_eq!(occupied(&page, 32), 1);
        // The zero tag never matches an empty slot by accident of the search: callers never
        // look it up (tags are never zero), and `find` would report slot 0 if they did.
        assert_eq!(find(&page, 32, &[0u8; 16]), Some(0));
    }

    #[test]
    fn trailing_bytes_are_not_a_slot() {
        // 48-byte slots in 4096 bytes: 85 slots, 16 bytes left over.
        let page = vec![0u8; 4096];
        assert_eq!(slots(&page, 48), 85);
        assert_eq!(first_empty(&page[..47], 48), None);
    }
}
