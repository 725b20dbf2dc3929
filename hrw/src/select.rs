//! Choosing the heaviest members without sorting: an arg-max scan for the
//! owner and a top-n insertion pass for the replicas.
//!
//! Candidates are `(rank, index)` pairs. The caller supplies the order, so
//! the same code serves the prepared set (ties go to the lower index, which
//! is the smaller id because the set is sorted by id) and the free functions
//! (ties go to the smaller id, then the smaller address, and duplicate ids
//! collapse).

/// How many replicas a lookup selects in a stack buffer. Asking for more is
/// rare (it is the fan-out of a write), and then the selection uses a heap
/// buffer instead.
pub(crate) const INLINE_REPLICAS: usize = 32;

/// A candidate: its rank (higher wins) and its index in the member list.
pub(crate) type Candidate<R> = (R, usize);

/// The best `capacity` candidates seen so far, best first, with duplicates
/// collapsed; for the free functions.
pub(crate) struct TopN<'b, R> {
    slots: &'b mut [Candidate<R>],
    len: usize,
}

impl<'b, R: Copy> TopN<'b, R> {
    /// An empty selection that keeps at most `slots.len()` candidates.
    pub(crate) fn new(slots: &'b mut [Candidate<R>]) -> Self {
        Self { slots, len: 0 }
    }

    pub(crate) fn is_full(&self) -> bool {
        self.len == self.slots.len()
    }

    /// The worst kept candidate once the selection is full: anything that
    /// does not rank ahead of it cannot enter.
    #[inline]
    pub(crate) fn last(&self) -> Option<&Candidate<R>> {
        if self.is_full() { self.slots.last() } else { None }
    }

    /// The kept candidates, best first.
    pub(crate) fn as_slice(&self) -> &[Candidate<R>] {
        &self.slots[..self.len]
    }

    /// Offers a candidate. `ahead(a, b)` says that `a` ranks ahead of `b`;
    /// `same(i, j)` says that members `i` and `j` are duplicates, of which
    /// only the one ranking ahead is kept.
    #[inline]
    pub(crate) fn offer(
        &mut self,
        candidate: Candidate<R>,
        ahead: impl Fn(&Candidate<R>, &Candidate<R>) -> bool,
        same: impl Fn(usize, usize) -> bool,
    ) {
        let capacity = self.slots.len();
        if capacity == 0 {
            return;
        }
        // Count the kept candidates that rank ahead; they form a prefix.
        // Walking from the back is cheapest because most offers that get
        // this far land near the end.
        let mut at = self.len;
        while at > 0 && !ahead(&self.slots[at - 1], &candidate) {
            at -= 1;
        }
        // Duplicates share a rank and sort next to each other, so only the
        // neighbours can be one.
        if at > 0 && same(self.slots[at - 1].1, candidate.1) {
            return;
        }
        if at < self.len && same(self.slots[at].1, candidate.1) {
            self.slots[at] = candidate;
            return;
        }
        if at >= capacity {
            return;
        }
        let end = if self.len < capacity {
            self.len += 1;
            self.len - 1
        } else {
            capacity - 1
        };
        self.slots.copy_within(at..end, at + 1);
        self.slots[at] = candidate;
    }
}

/// The order of the prepared set: higher rank first, then lower index.
#[inline]
pub(crate) fn ahead_by_index<R: Ord>(a: &Candidate<R>, b: &Candidate<R>) -> bool {
    a.0 > b.0 || (a.0 == b.0 && a.1 < b.1)
}

/// The best `slots.len()` candidates of the prepared set, best first: a
/// lean top-n for sets without duplicates.
pub(crate) struct Best<'b, R> {
    slots: &'b mut [Candidate<R>],
    len: usize,
}

impl<'b, R: Ord + Copy> Best<'b, R> {
    pub(crate) fn new(slots: &'b mut [Candidate<R>]) -> Self {
        Self { slots, len: 0 }
    }

    /// Whether `candidate` would enter.
    #[inline]
    pub(crate) fn admits(&self, candidate: &Candidate<R>) -> bool {
        match self.len.checked_sub(1) {
            Some(last) if self.len == self.slots.len() => ahead_by_index(candidate, &self.slots[last]),
            _ => !self.slots.is_empty(),
        }
    }

    /// The rank a candidate must reach to be considered, once full.
    #[inline]
    pub(crate) fn floor(&self) -> Option<R> {
        if self.len == self.slots.len() { self.slots.last().map(|c| c.0) } else { None }
    }

    /// Offers a candidate; it enters if it ranks ahead of the last kept.
    #[inline]
    pub(crate) fn push(&mut self, candidate: Candidate<R>) {
        if !self.admits(&candidate) {
            return;
        }
        let capacity = self.slots.len();
        let mut at = if self.len < capacity {
            self.len += 1;
            self.len - 1
        } else {
            capacity - 1
        };
        while at > 0 && ahead_by_index(&candidate, &self.slots[at - 1]) {
            self.slots[at] = self.slots[at - 1];
            at -= 1;
        }
        self.slots[at] = candidate;
    }

    /// How many candidates it keeps.
    pub(crate) fn capacity(&self) -> usize {
        self.slots.len()
    }

    /// The kept indices, best first.
    pub(crate) fn indices(&self) -> impl Iterator<Item = usize> + '_ {
        self.slots[..self.len].iter().map(|c| c.1)
    }
}

/// Members are weighed in batches of this many: it lets the SHA-256 path
/// build all blocks of a batch before compressing any, and keeps the
/// per-batch scratch on the stack.
pub(crate) const BATCH: usize = 16;

/// The member with the highest rank; ties go to the lowest index. `fill`
/// writes the ranks of members `start..start + out.len()` into `out`.
#[inline]
pub(crate) fn argmax<R: Ord + Copy + Default>(len: usize, mut fill: impl FnMut(usize, &mut [R])) -> Option<usize> {
    let mut ranks = [R::default(); BATCH];
    let mut best: Option<Candidate<R>> = None;
    for start in (0..len).step_by(BATCH) {
        let batch = &mut ranks[..BATCH.min(len - start)];
        fill(start, batch);
        for (offset, &rank) in batch.iter().enumerate() {
            // Strictly greater: an equal rank at a higher index loses the tie.
            if best.is_none_or(|b| rank > b.0) {
                best = Some((rank, start + offset));
            }
        }
    }
    best.map(|b| b.1)
}

/// Selects the best `n` of `len` members in the prepared set's order and
/// hands their indices, best first, to `emit`. `fill` is as for [`argmax`].
pub(crate) fn top_by_index<R: Ord + Copy + Default>(
    len: usize,
    n: usize,
    mut fill: impl FnMut(usize, &mut [R]),
    mut emit: impl FnMut(usize),
) {
    let n = n.min(len);
    if n == 0 {
        return;
    }
    let mut ranks = [R::default(); BATCH];
    if n <= INLINE_REPLICAS {
        let mut slots = [(R::default(), 0usize); INLINE_REPLICAS];
        let mut best = Best::new(&mut slots[..n]);
        for start in (0..len).step_by(BATCH) {
            let batch = &mut ranks[..BATCH.min(len - start)];
            fill(start, batch);
            for (offset, &rank) in batch.iter().enumerate() {
                best.push((rank, start + offset));
            }
        }
        best.indices().for_each(emit);
    } else {
        // A large fan-out: partition around the n-th candidate, then order
        // only the first n.
        let mut all: Vec<Candidate<R>> = Vec::with_capacity(len);
        for start in (0..len).step_by(BATCH) {
            let batch = &mut ranks[..BATCH.min(len - start)];
            fill(start, batch);
            all.extend(batch.iter().enumerate().map(|(offset, &rank)| (rank, start + offset)));
        }
        let order = |a: &Candidate<R>, b: &Candidate<R>| b.0.cmp(&a.0).then(a.1.cmp(&b.1));
        if n < all.len() {
            all.select_nth_unstable_by(n - 1, order);
            all.truncate(n);
        }
        all.sort_unstable_by(order);
        all.iter().for_each(|&(_, index)| emit(index));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn sorted_reference(ranks: &[u8], n: usize) -> Vec<usize> {
        let mut order: Vec<usize> = (0..ranks.len()).collect();
        order.sort_by(|&a, &b| ranks[b].cmp(&ranks[a]).then(a.cmp(&b)));
        order.truncate(n);
        order
    }

    proptest! {
        #[test]
        fn top_matches_a_full_sort(ranks in proptest::collection::vec(0u8..8, 0..80), n in 0usize..50) {
            // Few distinct ranks force many ties.
            let mut got = Vec::new();
            top_by_index(ranks.len(), n, |start, out: &mut [u8]| out.copy_from_slice(&ranks[start..start + out.len()]), |i| got.push(i));
            prop_assert_eq!(got, sorted_reference(&ranks, n));
        }

        #[test]
        fn argmax_matches_a_full_sort(ranks in proptest::collection::vec(0u8..8, 0..70)) {
            prop_assert_eq!(argmax(ranks.len(), |start, out: &mut [u8]| out.copy_from_slice(&ranks[start..start + out.len()])), sorted_reference(&ranks, 1).first().copied());
        }
    }

    #[test]
    fn duplicates_keep_the_one_ranking_ahead() {
        // Members 0 and 2 are duplicates; 2 ranks ahead on the secondary key.
        let ranks = [(5u8, 1u8), (3, 0), (5, 0)];
        let ahead =
            |a: &Candidate<(u8, u8)>, b: &Candidate<(u8, u8)>| a.0.0 > b.0.0 || (a.0.0 == b.0.0 && a.0.1 < b.0.1);
        let same = |i: usize, j: usize| i.is_multiple_of(2) && j.is_multiple_of(2);
        let mut slots = [((0, 0), 0); 3];
        let mut top = TopN::new(&mut slots);
        for (index, rank) in ranks.iter().enumerate() {
            top.offer((*rank, index), ahead, same);
        }
        let kept: Vec<usize> = top.as_slice().iter().map(|c| c.1).collect();
        assert_eq!(kept, vec![2, 1]);
    }
}
