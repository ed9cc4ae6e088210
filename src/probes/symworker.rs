// SPDX-License-Identifier: MIT
//! Lock names off the agent's interval (issue 40: naming a lock in a
//! process with 100 large libraries read them all on the agent thread: one
//! interval took 31.6 s, during which no summary, alert, Modbus or
//! Prometheus update went out). A worker thread owns the symbol cache
//! (src/probes/elfsyms.rs); the agent hands it (slot, pid, address)
//! through a bounded queue it never waits on, and takes the names that
//! have arrived each interval. A request that finds the queue full is
//! asked again the next interval.

use std::sync::mpsc::{self, Receiver, SyncSender};

use super::elfsyms::SymbolNames;

/// Requests waiting for the worker at most (one per lock series: the
/// lock family has LOCK_SERIES - 1 named slots).
pub(crate) const QUEUE: usize = 64;

/// A name the worker found (or None: no symbol there, or not readable).
pub(crate) struct Named {
    pub slot: usize,
    pub name: Option<String>,
}

/// The agent's end.
pub(crate) struct SymbolWorker {
    tx: SyncSender<(usize, u32, u64)>,
    rx: Receiver<Named>,
}

impl SymbolWorker {
    /// Start the worker with `lookup` (SymbolNames::name live; a stand-in
    /// in tests).
    pub(crate) fn start(mut lookup: impl FnMut(u32, u64) -> Option<String> + Send + 'static) -> std::io::Result<Self> {
        let (tx, requests) = mpsc::sync_channel::<(usize, u32, u64)>(QUEUE);
        // As many answers as requests can be outstanding (the queue and
        // the one in hand): the worker never blocks on the agent either.
        let (answers, rx) = mpsc::sync_channel(QUEUE + 1);
        // Detached: closing the queue ends it after the lookup in hand
        // (bounded: elfsyms::MAX_LOOKUP_BYTES), and a slow disk never
        // holds up the agent's exit.
        std::thread::Builder::new().name("latmon-syms".into()).spawn(move || {
            for (slot, pid, addr) in requests {
                if answers.send(Named { slot, name: lookup(pid, addr) }).is_err() {
                    return;
                }
            }
        })?;
        Ok(SymbolWorker { tx, rx })
    }

    /// The live worker: the symbols of the mapped files.
    pub(crate) fn symbols() -> std::io::Result<Self> {
        let mut names = SymbolNames::default();
        Self::start(move |pid, addr| names.name(pid, addr))
    }

    /// Ask for slot `slot`'s name; false when the queue is full (ask
    /// again later). Never waits.
    pub(crate) fn request(&self, slot: usize, pid: u32, addr: u64) -> bool {
        self.tx.try_send((slot, pid, addr)).is_ok()
    }

    /// The names that have arrived. Never waits.
    pub(crate) fn arrived(&self) -> impl Iterator<Item = Named> + '_ {
        self.rx.try_iter()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    /// A lookup that takes 2 s never holds up the asker; the queue is
    /// bounded and its overflow is asked again.
    #[test]
    fn a_slow_lookup_never_waits_the_agent_and_the_queue_is_bounded() {
        let (gate_tx, gate) = mpsc::channel::<()>();
        let w = SymbolWorker::start(move |pid, addr| {
            let _ = gate.recv_timeout(Duration::from_secs(10));
            Some(format!("sym{pid}_{addr}"))
        })
        .unwrap();
        let t0 = Instant::now();
        let sent = (0..QUEUE + 10).filter(|&s| w.request(s, 1, s as u64)).count();
        assert!(arrived_none(&w) && t0.elapsed() < Duration::from_millis(500), "never waits");
        // The worker holds one in hand: QUEUE queued behind it at most.
        assert!((QUEUE..=QUEUE + 1).contains(&sent), "{sent} taken");
        for _ in 0..sent {
            gate_tx.send(()).unwrap();
        }
        let mut got = Vec::new();
        let until = Instant::now() + Duration::from_secs(10);
        while got.len() < sent && Instant::now() < until {
            got.extend(w.arrived().map(|n| (n.slot, n.name)));
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(got.len(), sent);
        assert_eq!(got[3], (3, Some("sym1_3".into())));
        assert!(w.request(99, 1, 99), "room again");
    }

    fn arrived_none(w: &SymbolWorker) -> bool {
        w.arrived().next().is_none()
    }
}
