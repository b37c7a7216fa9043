//! The choices of `n` > 1 requests that wait for their first member's prompt.
//!
//! Only a group's first member is prefilled; the others are recorded here under it and fork
//! from it (sharing its full tiles) once its prompt is computed. A member that leaves is
//! dropped from its group; the members of a first member that ends before its prompt is
//! computed are handed back to run as requests of their own.

use std::collections::HashMap;

use crate::sequence::SeqId;

/// Waiting choices, by the first member they fork from.
#[derive(Debug, Default)]
pub struct Forks(HashMap<SeqId, Vec<SeqId>>);

impl Forks {
    /// Records that `child` forks from `parent` when its prompt is computed.
    pub fn add(&mut self, parent: SeqId, child: SeqId) {
        self.0.entry(parent).or_default().push(child);
    }

    /// Whether choices wait on `parent`.
    pub fn waits_on(&self, parent: SeqId) -> bool {
        self.0.contains_key(&parent)
    }

    /// The choices waiting on `parent`, no longer waiting (its prompt is computed).
    pub fn take(&mut self, parent: SeqId) -> Vec<SeqId> {
        self.0.remove(&parent).unwrap_or_default()
    }

    /// `id` ends: it leaves any group it waits in, and the choices waiting on it are returned
    /// (to run as requests of their own).
    pub fn leave(&mut self, id: SeqId) -> Vec<SeqId> {
        self.0.values_mut().for_each(|c| c.retain(|&c| c != id));
        self.take(id)
    }

    /// Choices waiting, all groups together.
    pub fn waiting(&self) -> usize {
        self.0.values().map(Vec::len).sum()
    }

    pub fn clear(&mut self) {
        self.0.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_leaving_member_is_dropped_and_its_own_waiters_are_handed_back() {
        let mut f = Forks::default();
        f.add(SeqId(1), SeqId(2));
        f.add(SeqId(1), SeqId(3));
        f.add(SeqId(4), SeqId(5));
        assert_eq!(f.waiting(), 3);
        assert!(f.leave(SeqId(2)).is_empty());
        assert_eq!(f.waiting(), 2);
        assert_eq!(f.leave(SeqId(4)), vec![SeqId(5)]);
        assert!(!f.waits_on(SeqId(4)));
        assert_eq!(f.take(SeqId(1)), vec![SeqId(3)]);
        assert_eq!(f.waiting(), 0);
    }
}
