// SPDX-License-Identifier: MIT
//! The live view's I/O edge: the source's reader thread, the terminal
//! (raw mode, alternate screen, restored by a guard), keys and redraws.

use std::io;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::Result;
use crossterm::event::{self, Event as TermEvent};
use crossterm::{execute, terminal};
use latmon_core::receiver::{ByteSource, Got};
use latmon_core::wire::{FrameDecoder, LinkStats, Tracker};

use super::ui::draw;
use super::{Action, Live};

/// What the reader thread sends.
enum Chunk {
    Data(Vec<u8>),
    Restart,
    End,
    Problem(String),
}

/// The full-screen loop. Restores the terminal on every way out.
pub fn run(mut src: crate::source::Source, duration: Option<Duration>) -> Result<()> {
    let name = src.name().to_string();
    let (tx, rx) = mpsc::sync_channel::<Chunk>(64);
    std::thread::spawn(move || {
        let mut buf = vec![0u8; 8192];
        let mut said = String::new();
        loop {
            let msg = match src.read(&mut buf) {
                Got::Data(n) => Chunk::Data(buf[..n].to_vec()),
                Got::Restart => Chunk::Restart,
                Got::End => Chunk::End,
                Got::Idle if src.problem() != said => {
                    said = src.problem().to_string();
                    Chunk::Problem(said.clone())
                }
                Got::Idle => continue,
            };
            let end = matches!(msg, Chunk::End);
            if tx.send(msg).is_err() || end {
                break;
            }
        }
    });
    let _screen = Screen::enter()?;
    ui_loop(&name, &rx, duration)
}

/// The terminal in raw mode on the alternate screen while it lives: its
/// `Drop` restores the technician's shell on every way out, an error
/// included; a panic hook does it too, first, since the release profile
/// aborts on panic (no unwinding, no Drop) and the message must land on
/// the shell's screen, not the alternate one.
struct Screen;

impl Screen {
    fn enter() -> Result<Screen> {
        let before = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            restore();
            before(info);
        }));
        terminal::enable_raw_mode()?;
        // From here on, Drop undoes what was done.
        let s = Screen;
        execute!(io::stdout(), terminal::EnterAlternateScreen)?;
        Ok(s)
    }
}

impl Drop for Screen {
    fn drop(&mut self) {
        restore();
    }
}

/// The shell's terminal back: cooked mode, main screen, cursor shown.
fn restore() {
    let _ = terminal::disable_raw_mode();
    let _ = execute!(io::stdout(), terminal::LeaveAlternateScreen, crossterm::cursor::Show);
}

fn ui_loop(name: &str, rx: &mpsc::Receiver<Chunk>, duration: Option<Duration>) -> Result<()> {
    let mut term = ratatui::Terminal::new(ratatui::backend::CrosstermBackend::new(io::stdout()))?;
    term.clear()?;
    let started = Instant::now();
    let deadline = duration.map(|d| started + d);
    let mut dec = FrameDecoder::new();
    let mut tracker = Tracker::new();
    let mut live = Live::new(name);
    let mut last_frame: Option<Instant> = None;
    let mut problem = String::new();
    let mut ended = false;
    let mut dirty = true;
    let mut last_draw = Instant::now() - Duration::from_secs(10);
    loop {
        if deadline.is_some_and(|d| Instant::now() >= d) {
            return Ok(());
        }
        // Bytes first (never more than what arrived), then keys.
        while let Ok(c) = rx.try_recv() {
            match c {
                Chunk::Data(b) => dec.feed(&b, &mut |r| {
                    if let Ok(f) = r {
                        last_frame = Some(Instant::now());
                        let ev = tracker.on_frame(f);
                        live.on_event(&ev, &tracker, &LinkStats::default());
                    }
                }),
                Chunk::Restart => dec.restart(),
                Chunk::End => ended = true,
                Chunk::Problem(p) => problem = p,
            }
            live.header.link = dec.stats;
            if let Some(p) = &mut live.paused {
                p.header.link = dec.stats;
            }
            dirty = true;
        }
        if last_frame.is_some_and(|t| t.elapsed() < Duration::from_secs(1)) {
            problem.clear();
        }
        if event::poll(Duration::from_millis(50))? {
            match event::read()? {
                TermEvent::Key(k) => {
                    if live.on_key(k) == Action::Quit {
                        return Ok(());
                    }
                    dirty = true;
                }
                TermEvent::Resize(..) => {
                    term.autoresize()?;
                    dirty = true;
                }
                _ => {}
            }
        }
        let gap = last_draw.elapsed();
        if (dirty && gap >= Duration::from_millis(100)) || gap >= Duration::from_secs(1) {
            let since = last_frame.map(|t| t.elapsed());
            let shown_problem = if ended { "source ended" } else { problem.as_str() };
            term.draw(|f| draw(f, &live, since, started, shown_problem))?;
            last_draw = Instant::now();
            dirty = false;
        }
    }
}
