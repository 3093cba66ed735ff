//! String interning: every kernel, API and range name is stored once.

use std::collections::HashMap;
use std::sync::Arc;

/// Index of an interned string in [`Names`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct NameId(pub u32);

impl NameId {
    /// The empty string, which every [`Names`] table holds at index 0.
    pub const EMPTY: NameId = NameId(0);
}

/// An append-only string table.
#[derive(Debug, Clone)]
pub struct Names {
    strings: Vec<Arc<str>>,
    index: HashMap<Arc<str>, NameId>,
}

impl Default for Names {
    fn default() -> Self {
        let mut names = Names { strings: Vec::new(), index: HashMap::new() };
        names.intern("");
        names
    }
}

impl Names {
    /// Returns the id of `s`, adding it if it is new.
    pub fn intern(&mut self, s: &str) -> NameId {
        if let Some(&id) = self.index.get(s) {
            return id;
        }
        let id = NameId(u32::try_from(self.strings.len()).expect("more than 4 billion distinct names"));
        let shared: Arc<str> = Arc::from(s);
        self.strings.push(shared.clone());
        self.index.insert(shared, id);
        id
    }

    /// The string behind `id`; the empty string for an id this table never gave out.
    pub fn get(&self, id: NameId) -> &str {
        self.strings.get(id.0 as usize).map_or("", |s| s)
    }

    /// The id of `s` if it was interned.
    pub fn lookup(&self, s: &str) -> Option<NameId> {
        self.index.get(s).copied()
    }

    /// Number of distinct strings, the empty one included.
    pub fn len(&self) -> usize {
        self.strings.len()
    }

    /// True when only the empty string is present.
    pub fn is_empty(&self) -> bool {
        self.strings.len() <= 1
    }

    /// All strings in id order.
    pub fn iter(&self) -> impl Iterator<Item = (NameId, &str)> {
        self.strings.iter().enumerate().map(|(i, s)| (NameId(i as u32), &**s))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interning_returns_the_same_id_for_the_same_string() {
        let mut names = Names::default();
        let a = names.intern("ncclDevKernel_AllReduce_Sum_bf16_RING_LL");
        let b = names.intern("gemm");
        assert_ne!(a, b);
        assert_eq!(names.intern("ncclDevKernel_AllReduce_Sum_bf16_RING_LL"), a);
        assert_eq!(names.get(b), "gemm");
        assert_eq!(names.get(NameId::EMPTY), "");
        assert_eq!(names.get(NameId(999)), "");
        assert_eq!(names.len(), 3);
    }
}
