// SPDX-License-Identifier: MIT
//! The `lock` family's counts (pure model, no I/O): per lock series and
//! for the family line, the waits whose owner was followed and those a
//! priority inversion lengthened, per interval and since start. They
//! count every wait, with or without `threshold=` (a record goes out only
//! above it). The kernel half is bpf/lock.bpf.c (`lock_tally`);
//! docs/probes.md "lock".

/// One series' cumulative tally as the kernel keeps it
/// (struct latmon_lock_tally), or several summed (the family line).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LockTally {
    /// Waits whose owner was followed.
    pub followed: u64,
    /// Of those, waits with inversion time.
    pub inversions: u64,
    pub inversion_ns: u64,
    /// The owners' own time on a CPU during those waits.
    pub owner_run_ns: u64,
}

impl LockTally {
    pub fn add(&mut self, o: &LockTally) {
        self.followed = self.followed.wrapping_add(o.followed);
        self.inversions = self.inversions.wrapping_add(o.inversions);
        self.inversion_ns = self.inversion_ns.wrapping_add(o.inversion_ns);
        self.owner_run_ns = self.owner_run_ns.wrapping_add(o.owner_run_ns);
    }
}

/// A lock line's counts: the interval's and since start.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct LockCounts {
    /// Waits whose owner was followed (named from the PI word or glibc's
    /// mutex, alive in the waiter's process).
    pub owned: u64,
    pub total_owned: u64,
    /// Waits in which a task of a priority between the owner's and the
    /// waiter's held the owner off, and that time.
    pub inversions: u64,
    pub total_inversions: u64,
    pub inversion_ns: u64,
    pub total_inversion_ns: u64,
    /// The family line only: owners named at a wait's start but not
    /// followed (not alive in the waiter's process, beyond the thread-group
    /// walk, or followed for another waiter), since start.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub total_owners_refused: Option<u64>,
}

impl LockCounts {
    /// The counts of an interval that took the tally from `prev` to `now`
    /// (cumulative; a tally that went back, a reloaded object, counts from
    /// zero rather than wrapping).
    pub fn between(prev: &LockTally, now: &LockTally) -> Self {
        let d = |a: u64, b: u64| if b >= a { b - a } else { b };
        LockCounts {
            owned: d(prev.followed, now.followed),
            total_owned: now.followed,
            inversions: d(prev.inversions, now.inversions),
            total_inversions: now.inversions,
            inversion_ns: d(prev.inversion_ns, now.inversion_ns),
            total_inversion_ns: now.inversion_ns,
            total_owners_refused: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_interval_counts_what_the_tally_gained_and_keeps_the_totals() {
        let prev = LockTally { followed: 10, inversions: 2, inversion_ns: 3_000_000, owner_run_ns: 1 };
        let now = LockTally { followed: 13, inversions: 3, inversion_ns: 4_500_000, owner_run_ns: 2 };
        let c = LockCounts::between(&prev, &now);
        assert_eq!((c.owned, c.total_owned), (3, 13));
        assert_eq!((c.inversions, c.total_inversions), (1, 3));
        assert_eq!((c.inversion_ns, c.total_inversion_ns), (1_500_000, 4_500_000));
        let json = serde_json::to_value(&c).unwrap();
        assert_eq!(json["total_inversions"], 3);
        assert!(json.get("total_owners_refused").is_none(), "a series line has no refusals: {json}");
    }

    #[test]
    fn a_tally_that_went_back_counts_from_zero() {
        let prev = LockTally { followed: 10, inversions: 5, inversion_ns: 9, owner_run_ns: 0 };
        let now = LockTally { followed: 2, inversions: 1, inversion_ns: 4, owner_run_ns: 0 };
        let c = LockCounts::between(&prev, &now);
        assert_eq!((c.owned, c.inversions, c.inversion_ns), (2, 1, 4));
    }

    #[test]
    fn a_family_sums_its_series() {
        let mut f = LockTally::default();
        f.add(&LockTally { followed: 1, inversions: 1, inversion_ns: 5, owner_run_ns: 7 });
        f.add(&LockTally { followed: 2, inversions: 0, inversion_ns: 0, owner_run_ns: 1 });
        assert_eq!(f, LockTally { followed: 3, inversions: 1, inversion_ns: 5, owner_run_ns: 8 });
    }
}
