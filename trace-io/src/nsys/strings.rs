//! `StringIds` lookup: nsys ids to interned [`NameId`]s, each string interned on first use.
//!
//! Exports hold many strings no event of ours refers to (mangled names, source paths), and
//! their ids are sparse (a 140-row table can use ids up to 1.4 million). So strings are read
//! once into a table sorted by id, and interned into [`Names`] only when an event names them.

use shardscope_model::{NameId, Names};

/// Marks a string that has not been interned yet.
const NOT_INTERNED: u32 = u32::MAX;

/// The `StringIds` table of one file.
#[derive(Default)]
pub(crate) struct StringTable {
    /// nsys string ids, ascending; `values[i]` belongs to `ids[i]`.
    ids: Vec<i64>,
    values: Vec<Box<str>>,
    /// The interned id of `values[i]`, or [`NOT_INTERNED`].
    interned: Vec<u32>,
    /// For dense id ranges: slot by id (`u32::MAX` for a gap); empty when ids are sparse.
    dense_slots: Vec<u32>,
}

impl StringTable {
    /// Builds the table from `(id, value)` rows in any order.
    pub(crate) fn new(mut rows: Vec<(i64, Box<str>)>) -> StringTable {
        rows.sort_unstable_by_key(|(id, _)| *id);
        rows.dedup_by_key(|(id, _)| *id);
        let ids: Vec<i64> = rows.iter().map(|(id, _)| *id).collect();
        let values: Vec<Box<str>> = rows.into_iter().map(|(_, value)| value).collect();
        let interned = vec![NOT_INTERNED; ids.len()];
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
        StringTable { ids, values, interned, dense_slots }
    }

    fn slot(&self, id: i64) -> Option<usize> {
        if !self.dense_slots.is_empty() {
            let slot = *self.dense_slots.get(usize::try_from(id).ok()?)?;
            return (slot != u32::MAX).then_some(slot as usize);
        }
        self.ids.binary_search(&id).ok()
    }

    /// The string behind an nsys id, without interning it.
    pub(crate) fn text(&self, id: i64) -> Option<&str> {
        self.slot(id).map(|slot| &*self.values[slot])
    }

    /// The interned name of an nsys id; `None` when the id is not in `StringIds`.
    #[inline]
    pub(crate) fn name(&mut self, id: i64, names: &mut Names) -> Option<NameId> {
        let slot = self.slot(id)?;
        let cached = self.interned[slot];
        if cached != NOT_INTERNED {
            return Some(NameId(cached));
        }
        let name = names.intern(&self.values[slot]);
        self.interned[slot] = name.0;
        Some(name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sparse_and_dense_ids_resolve_and_intern_once() {
        let rows = |ids: &[i64]| ids.iter().map(|&id| (id, format!("s{id}").into_boxed_str())).collect::<Vec<_>>();
        for ids in [&[3, 1, 2][..], &[7, 1_366_254, 55][..]] {
            let mut names = Names::default();
            let mut table = StringTable::new(rows(ids));
            for &id in ids {
                let name = table.name(id, &mut names).unwrap();
                assert_eq!(names.get(name), format!("s{id}"));
                assert_eq!(table.name(id, &mut names), Some(name));
            }
            assert_eq!(names.len(), ids.len() + 1);
            assert_eq!(table.name(4, &mut names), None);
            assert_eq!(table.name(-1, &mut names), None);
        }
    }
}
