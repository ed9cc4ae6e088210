// SPDX-License-Identifier: MIT
//! Hello's probe thresholds (revision 9): each probe's alert threshold by
//! id, and the wire form of Hello's trailing fields (thresholds, revision
//! 11's certificate), absent when empty.

use serde::ser::SerializeTuple;
use serde::{Deserialize, Serialize, Serializer};

use super::WireCertificate;

/// A probe's alert threshold, in Hello (revision 9).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProbeThreshold {
    pub id: u16,
    pub threshold_ns: u64,
}

/// Hello's fields after `probes` as sent: `thresholds` (revision 9) and
/// `certificate` (revision 11, an Option: tag byte then the fields).
/// Nothing at all when both are empty, so such a Hello keeps its revision
/// 8 bytes; the thresholds alone without a certificate (revision 9
/// bytes); both, the list possibly empty (one `00`), with one. A receiver
/// reads an absent field from the trailing zero pad as empty / None.
pub(crate) struct HelloTail<'a> {
    pub(crate) thresholds: &'a [ProbeThreshold],
    pub(crate) certificate: Option<&'a WireCertificate>,
}

impl Serialize for HelloTail<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match (self.certificate, self.thresholds.is_empty()) {
            (Some(c), _) => {
                let mut t = s.serialize_tuple(2)?;
                t.serialize_element(self.thresholds)?;
                t.serialize_element(&Some(c))?;
                t.end()
            }
            (None, false) => self.thresholds.serialize(s),
            (None, true) => s.serialize_tuple(0)?.end(),
        }
    }
}
