// SPDX-License-Identifier: MIT
//! The bounded hand-over between the agent loop and an output's writer
//! thread. The agent never waits for I/O: a record (a frame, a text
//! summary) that does not fit is dropped and counted. Memory is fixed:
//! `heapless` rings of [`MAX_QUEUE_BYTES`] bytes and [`MAX_RECORDS`]
//! record lengths, allocated once; an output's own capacity (from its line
//! rate: a serial line queues about 2 s of it) is a limit within them.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// What `pop` found.
#[derive(Debug, PartialEq, Eq)]
pub enum Pop {
    /// Records were moved out.
    Data,
    /// Nothing arrived within the timeout.
    Empty,
    /// Closed and drained: the writer should finish.
    Closed,
}

/// The largest capacity of any output's queue (bytes).
pub const MAX_QUEUE_BYTES: usize = super::link::QUEUE_BYTES;
/// Records a queue holds at most (a record is at least 16 bytes on average).
pub const MAX_RECORDS: usize = MAX_QUEUE_BYTES / 16;

struct Inner {
    data: Box<heapless::Deque<u8, MAX_QUEUE_BYTES>>,
    lens: Box<heapless::Deque<usize, MAX_RECORDS>>,
    closed: bool,
    /// When closing, until when the writer may keep flushing.
    deadline: Option<Instant>,
    dropped_records: u64,
    dropped_bytes: u64,
    /// The latest Hello frames, for clients that connect later.
    hello: Vec<u8>,
}

pub struct Queue {
    inner: Mutex<Inner>,
    cv: Condvar,
    cap_bytes: usize,
    max_records: usize,
    /// Connected clients (socket outputs), for Status.
    pub clients: AtomicU32,
    /// The writer (re)opened the link or a receiver asked: the renderer
    /// sends the whole table and keyframes next.
    resync: AtomicBool,
}

impl Queue {
    /// A queue of at most `cap_bytes` (clamped to [`MAX_QUEUE_BYTES`]).
    pub fn new(cap_bytes: usize) -> Self {
        let cap_bytes = cap_bytes.min(MAX_QUEUE_BYTES);
        let max_records = (cap_bytes / 16).clamp(16, MAX_RECORDS);
        Queue {
            inner: Mutex::new(Inner {
                data: Box::default(),
                lens: Box::default(),
                closed: false,
                deadline: None,
                dropped_records: 0,
                dropped_bytes: 0,
                hello: Vec::new(),
            }),
            cv: Condvar::new(),
            cap_bytes,
            max_records,
            clients: AtomicU32::new(0),
            resync: AtomicBool::new(false),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A writer thread that panicked must not take the agent with it.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Queue the records `buf[..]` split by `lens`, all or none. Returns
    /// false (and counts them dropped) when they do not fit.
    ///
    /// A group larger than this output's capacity (one interval of a
    /// config with many series and full histograms) could never fit: it is
    /// taken alone, into an empty queue, instead of being dropped every
    /// interval and silencing the output for good. The queue then holds
    /// one interval's output at most (itself bounded: `wire::MAX_PROBES`
    /// probes and series). Past the rings' own size ([`MAX_QUEUE_BYTES`],
    /// [`MAX_RECORDS`]: a JSON interval carrying hundreds of alert records)
    /// it is dropped and counted like any other: a record is never cut.
    pub fn push_group(&self, buf: &[u8], lens: &[usize]) -> bool {
        let mut g = self.lock();
        let fits = g.data.len() + buf.len() <= self.cap_bytes && g.lens.len() + lens.len() <= self.max_records;
        let alone = g.data.is_empty()
            && (buf.len() > self.cap_bytes || lens.len() > self.max_records)
            && buf.len() <= MAX_QUEUE_BYTES
            && lens.len() <= MAX_RECORDS;
        if g.closed || !(fits || alone) {
            g.dropped_records += lens.len() as u64;
            g.dropped_bytes += buf.len() as u64;
            return false;
        }
        // Room was checked above: these pushes cannot fail.
        for &b in buf {
            let _ = g.data.push_back(b);
        }
        for &l in lens {
            let _ = g.lens.push_back(l);
        }
        drop(g);
        self.cv.notify_one();
        true
    }

    pub fn push(&self, record: &[u8]) -> bool {
        self.push_group(record, &[record.len()])
    }

    /// Move every queued record into `out` (lengths into `lens`), waiting
    /// up to `timeout` for one to arrive.
    pub fn pop(&self, out: &mut Vec<u8>, lens: &mut Vec<usize>, timeout: Duration) -> Pop {
        out.clear();
        lens.clear();
        let mut g = self.lock();
        if g.data.is_empty() && !g.closed {
            g = self.cv.wait_timeout(g, timeout).map(|(g, _)| g).unwrap_or_else(|e| e.into_inner().0);
        }
        if g.data.is_empty() {
            return if g.closed { Pop::Closed } else { Pop::Empty };
        }
        let (a, b) = g.data.as_slices();
        out.extend_from_slice(a);
        out.extend_from_slice(b);
        g.data.clear();
        let (a, b) = g.lens.as_slices();
        lens.extend_from_slice(a);
        lens.extend_from_slice(b);
        g.lens.clear();
        Pop::Data
    }

    /// Bytes queued now.
    pub fn queued_bytes(&self) -> usize {
        self.lock().data.len()
    }

    /// This queue's capacity in bytes.
    pub fn capacity(&self) -> usize {
        self.cap_bytes
    }

    /// Records the writer had to discard (link down, write failed).
    pub fn note_dropped(&self, records: usize, bytes: usize) {
        let mut g = self.lock();
        g.dropped_records += records as u64;
        g.dropped_bytes += bytes as u64;
    }

    /// (records, bytes) dropped since start.
    pub fn dropped(&self) -> (u64, u64) {
        let g = self.lock();
        (g.dropped_records, g.dropped_bytes)
    }

    pub fn set_hello(&self, frames: &[u8]) {
        let mut g = self.lock();
        g.hello.clear();
        g.hello.extend_from_slice(frames);
    }

    pub fn hello(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.lock().hello);
    }

    /// No more records: the writer drains what is queued, flushing until
    /// `deadline` at most, and stops.
    pub fn close(&self, deadline: Instant) {
        let mut g = self.lock();
        g.closed = true;
        g.deadline = Some(deadline);
        drop(g);
        self.cv.notify_all();
    }

    /// The flush deadline once closed.
    pub fn deadline(&self) -> Option<Instant> {
        self.lock().deadline
    }

    /// Ask the renderer for the whole table and keyframes (link reopened,
    /// a receiver's Request).
    pub fn request_resync(&self) {
        self.resync.store(true, Ordering::Relaxed);
    }

    /// Whether a resync was asked for since the last call.
    pub fn take_resync(&self) -> bool {
        self.resync.swap(false, Ordering::Relaxed)
    }

    pub fn clients(&self) -> u32 {
        self.clients.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounded_all_or_nothing_and_counted() {
        let q = Queue::new(100);
        assert!(q.push(&[1; 60]));
        assert!(!q.push_group(&[2; 50], &[25, 25]));
        assert_eq!(q.dropped(), (2, 50));
        assert!(q.push(&[3; 40]));
        let (mut out, mut lens) = (Vec::new(), Vec::new());
        assert_eq!(q.pop(&mut out, &mut lens, Duration::ZERO), Pop::Data);
        assert_eq!((out.len(), &lens[..]), (100, &[60, 40][..]));
        assert_eq!(q.pop(&mut out, &mut lens, Duration::from_millis(1)), Pop::Empty);
        q.push(&[4]);
        q.close(Instant::now());
        assert!(!q.push(&[5]), "closed queues take nothing");
        assert_eq!(q.pop(&mut out, &mut lens, Duration::ZERO), Pop::Data);
        assert_eq!(q.pop(&mut out, &mut lens, Duration::ZERO), Pop::Closed);
    }

    /// A group larger than the queue is taken when the queue is empty (it
    /// was dropped every time: the output went silent for good).
    #[test]
    fn a_group_larger_than_the_queue_goes_alone() {
        let q = Queue::new(100);
        assert!(q.push_group(&[7; 150], &[50, 50, 50]), "alone into an empty queue");
        assert!(!q.push(&[1]), "then the queue is full");
        assert_eq!(q.dropped(), (1, 1));
        let (mut out, mut lens) = (Vec::new(), Vec::new());
        assert_eq!(q.pop(&mut out, &mut lens, Duration::ZERO), Pop::Data);
        assert_eq!((out.len(), &lens[..]), (150, &[50, 50, 50][..]));
        assert!(q.push(&[1; 10]));
        assert!(!q.push_group(&[7; 150], &[150]), "not behind other records");
        q.close(Instant::now());
    }

    /// CI saw a JSON interval of 660 alerts cut at exactly 256 KiB (the
    /// ring's size) and printed as an invalid line: past the rings, the
    /// group is dropped whole and counted, never cut.
    #[test]
    fn a_group_larger_than_the_rings_is_dropped_whole_not_cut() {
        let q = Queue::new(MAX_QUEUE_BYTES);
        let big = vec![b'x'; MAX_QUEUE_BYTES + 1];
        assert!(!q.push_group(&big, &[big.len()]), "larger than the ring");
        assert_eq!(q.dropped(), (1, big.len() as u64));
        assert_eq!(q.queued_bytes(), 0, "nothing of it queued");
        let many = vec![1usize; MAX_RECORDS + 1];
        assert!(!q.push_group(&vec![b'y'; many.len()], &many), "more records than the ring of lengths");
        assert!(q.push(&big[..MAX_QUEUE_BYTES]), "the ring's size exactly still goes alone");
        let (mut out, mut lens) = (Vec::new(), Vec::new());
        assert_eq!(q.pop(&mut out, &mut lens, Duration::ZERO), Pop::Data);
        assert_eq!((out.len(), &lens[..]), (MAX_QUEUE_BYTES, &[MAX_QUEUE_BYTES][..]));
        q.close(Instant::now());
    }

    #[test]
    fn pop_wakes_on_push() {
        let q = std::sync::Arc::new(Queue::new(1000));
        let q2 = q.clone();
        let t = std::thread::spawn(move || {
            let (mut out, mut lens) = (Vec::new(), Vec::new());
            let start = std::time::Instant::now();
            let r = q2.pop(&mut out, &mut lens, Duration::from_secs(10));
            (r, start.elapsed())
        });
        std::thread::sleep(Duration::from_millis(50));
        q.push(b"x");
        let (r, waited) = t.join().unwrap();
        assert_eq!(r, Pop::Data);
        assert!(waited < Duration::from_secs(5));
    }
}
