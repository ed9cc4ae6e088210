// SPDX-License-Identifier: MIT
//! Hello's probe thresholds (revision 9): each probe's alert threshold by
//! id, and their wire form, absent when empty.

use serde::ser::SerializeTuple;
use serde::{Deserialize, Serialize, Serializer};

/// A probe's alert threshold, in Hello (revision 9).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProbeThreshold {
    pub id: u16,
    pub threshold_ns: u64,
}

/// Hello's `thresholds` as sent: nothing at all when empty, so a Hello
/// without thresholds keeps its revision 8 bytes (a receiver reads the
/// absent field from the trailing zero pad as empty).
pub(crate) struct TrailingThresholds<'a>(pub(crate) &'a [ProbeThreshold]);

impl Serialize for TrailingThresholds<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        if self.0.is_empty() {
            s.serialize_tuple(0)?.end()
        } else {
            self.0.serialize(s)
        }
    }
}
