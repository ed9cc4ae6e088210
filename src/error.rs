// SPDX-License-Identifier: MIT
//! The agent's top-level errors, for a person to read: what failed and
//! where it was met (`reading config /etc/latmon.toml: No such file or
//! directory (os error 2)`). A message, not a type to branch on: callers
//! that branch have their own enums (ProbeError, LoadError, ConfigError).
//! In place of anyhow, whose backtrace capture and vtables cost the
//! aarch64 static binary (a 1.5 MiB limit) more than this file does.

use std::fmt;

/// A message with its context, outermost first.
#[derive(Debug)]
pub struct Error(String);

impl Error {
    pub fn msg(m: impl fmt::Display) -> Error {
        Error(m.to_string())
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Any error converts (`?`) into its message. Error itself is not a
/// std::error::Error, as anyhow's is not: that would overlap this.
impl<E: std::error::Error> From<E> for Error {
    fn from(e: E) -> Error {
        Error(e.to_string())
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// `what: the error` on the error path.
pub trait Context<T> {
    fn context(self, what: impl fmt::Display) -> Result<T>;
    fn with_context<D: fmt::Display>(self, what: impl FnOnce() -> D) -> Result<T>;
}

impl<T, E: fmt::Display> Context<T> for std::result::Result<T, E> {
    fn context(self, what: impl fmt::Display) -> Result<T> {
        self.map_err(|e| Error(format!("{what}: {e}")))
    }

    fn with_context<D: fmt::Display>(self, what: impl FnOnce() -> D) -> Result<T> {
        self.map_err(|e| Error(format!("{}: {e}", what())))
    }
}

/// Return an [`Error`] made as `format!` makes a String.
#[macro_export]
macro_rules! bail {
    ($($arg:tt)*) => {
        return Err($crate::error::Error::msg(format!($($arg)*)))
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    fn open(p: &str) -> Result<std::fs::File> {
        std::fs::File::open(p).with_context(|| format!("reading config {p}"))
    }

    #[test]
    fn context_comes_first_and_the_cause_follows() {
        let e = open("/nonexistent/latmon.toml").unwrap_err().to_string();
        assert!(e.starts_with("reading config /nonexistent/latmon.toml: No such file"), "{e}");
        let r: Result<()> = (|| bail!("--measure {}: at most {}", "2h", "1h"))();
        assert_eq!(r.unwrap_err().to_string(), "--measure 2h: at most 1h");
        let io: Result<()> = Err(std::io::Error::other("gone").into());
        assert_eq!(io.context("writing").unwrap_err().to_string(), "writing: gone");
    }
}
