//! Walking two sequences sorted by the same key together: what a diff of two sorted views (the
//! store's maps, the compiler's held rules against a new view, a flow group before and after)
//! needs, in one pass instead of a lookup per item.

use std::cmp::Ordering;
use std::iter::Peekable;

/// One step of a [`merge_join`]: an item only the old sequence has, only the new one has, or
/// both (equal keys).
#[derive(Debug, PartialEq, Eq)]
pub enum Joined<A, B> {
    Old(A),
    New(B),
    Both(A, B),
}

/// The items of `old` and `new`, both sorted by the key `order` compares, in key order: equal
/// keys come out as one [`Joined::Both`].
pub fn merge_join<I, J, F>(old: I, new: J, order: F) -> MergeJoin<I::IntoIter, J::IntoIter, F>
where
    I: IntoIterator,
    J: IntoIterator,
    F: FnMut(&I::Item, &J::Item) -> Ordering,
{
    MergeJoin {
        old: old.into_iter().peekable(),
        new: new.into_iter().peekable(),
        order,
    }
}

/// The iterator [`merge_join`] returns.
pub struct MergeJoin<I: Iterator, J: Iterator, F> {
    old: Peekable<I>,
    new: Peekable<J>,
    order: F,
}

impl<I, J, F> Iterator for MergeJoin<I, J, F>
where
    I: Iterator,
    J: Iterator,
    F: FnMut(&I::Item, &J::Item) -> Ordering,
{
    type Item = Joined<I::Item, J::Item>;

    fn next(&mut self) -> Option<Self::Item> {
        let order = match (self.old.peek(), self.new.peek()) {
            (None, None) => return None,
            (Some(_), None) => Ordering::Less,
            (None, Some(_)) => Ordering::Greater,
            (Some(a), Some(b)) => (self.order)(a, b),
        };
        match order {
            Ordering::Less => self.old.next().map(Joined::Old),
            Ordering::Greater => self.new.next().map(Joined::New),
            Ordering::Equal => match (self.old.next(), self.new.next()) {
                (Some(a), Some(b)) => Some(Joined::Both(a, b)),
                _ => None,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_sides_come_out_in_key_order_with_equal_keys_joined() {
        let old = [(1, 'a'), (3, 'b'), (4, 'c'), (9, 'd')];
        let new = [2, 3, 9, 10, 11];
        let joined: Vec<_> = merge_join(old, new, |(k, _), n| k.cmp(n)).collect();
        assert_eq!(
            joined,
            [
                Joined::Old((1, 'a')),
                Joined::New(2),
                Joined::Both((3, 'b'), 3),
                Joined::Old((4, 'c')),
                Joined::Both((9, 'd'), 9),
                Joined::New(10),
                Joined::New(11),
            ]
        );
        assert_eq!(merge_join(Vec::<u8>::new(), Vec::<u8>::new(), u8::cmp).count(), 0);
    }
}
