//! `StringIds` lookup: nsys string ids to the strings they stand for.
//!
//! Exports hold many strings no event of ours refers to (mangled names, source paths), and
//! their ids are sparse (a 140-row table can use ids up to 1.4 million). So the table is read
//! once, sorted by id, and each string gets a dense slot number; table readers intern a
//! string only when an event names it, caching the result per slot.

/// The `StringIds` table of one file; shared read-only by the table readers.
#[derive(Default)]
pub(crate) struct StringTable {
    /// nsys string ids, ascending; `values[slot]` belongs to `ids[slot]`.
    ids: Vec<i64>,
    values: Vec<Box<str>>,
    /// For dense id ranges: slot by id (`u32::MAX` for a gap); empty when ids are sparse.
    dense_slots: Vec<u32>,
}

impl StringTable {
    /// Builds the table from `(id, value)` rows in any order; the first of duplicate ids wins.
    pub(crate) fn new(mut rows: Vec<(i64, Box<str>)>) -> StringTable {
        rows.sort_by_key(|(id, _)| *id);
        rows.dedup_by_key(|(id, _)| *id);
        let ids: Vec<i64> = rows.iter().map(|(id, _)| *id).collect();
        let values: Vec<Box<str>> = rows.into_iter().map(|(_, value)| value).collect();
        // A direct index is worth it when it costs at most a few slots per string.
        let mut dense_slots = Vec::new();
        if let (Some(&min), Some(&max)) = (ids.first(), ids.last())
            && min >= 0
            && max < (ids.len() as i64).saturating_mul(4).saturating_add(1024)
        {
            dense_slots = vec![u32::MAX; max as usize + 1];
            for (slot, &id) in ids.iter().enumerate() {
                dense_slots[id as usize] = slot as u32;
            }
        }
        StringTable { ids, values, dense_slots }
    }

    /// Number of strings.
    pub(crate) fn len(&self) -> usize {
        self.ids.len()
    }

    /// The slot (0..len) of an nsys string id, if the table has it.
    #[inline]
    pub(crate) fn slot(&self, id: i64) -> Option<usize> {
        if !self.dense_slots.is_empty() {
            let slot = *self.dense_slots.get(usize::try_from(id).ok()?)?;
            return (slot != u32::MAX).then_some(slot as usize);
        }
        self.ids.binary_search(&id).ok()
    }

    /// The string in a slot.
    pub(crate) fn value(&self, slot: usize) -> &str {
        &self.values[slot]
    }

    /// The string behind an nsys id.
    pub(crate) fn text(&self, id: i64) -> Option<&str> {
        self.slot(id).map(|slot| self.value(slot))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sparse_and_dense_ids_resolve() {
        let rows = |ids: &[i64]| ids.iter().map(|&id| (id, format!("s{id}").into_boxed_str())).collect::<Vec<_>>();
        for ids in [&[3, 1, 2][..], &[7, 1_366_254, 55][..]] {
            let table = StringTable::new(rows(ids));
            assert_eq!(table.len(), 3);
            for &id in ids {
                assert_eq!(table.text(id), Some(format!("s{id}").as_str()));
            }
            assert_eq!(table.text(4), None);
            assert_eq!(table.text(-1), None);
        }
        // Slots follow id order.
        let table = StringTable::new(rows(&[7, 1_366_254, 55]));
        assert_eq!((table.slot(7), table.slot(55), table.slot(1_366_254)), (Some(0), Some(1), Some(2)));
    }
}
