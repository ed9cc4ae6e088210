// SPDX-License-Identifier: MIT
//! A real Prometheus server for the tests (Debian's package), and the
//! HTTP helpers to scrape latmon and query the server.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

pub const PROMETHEUS: &str = "/usr/bin/prometheus";

/// A Prometheus server of this test: killed (and its data removed) when
/// dropped.
pub struct Prometheus {
    child: Child,
    pub addr: String,
    dir: PathBuf,
    pub what: &'static str,
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

impl Prometheus {
    pub fn start(what: &'static str, target: &str, native: bool) -> Prometheus {
        let dir = std::env::temp_dir().join(format!("latmon-prom-{what}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("data")).unwrap();
        let cfg = dir.join("prometheus.yml");
        std::fs::write(
            &cfg,
            format!(
                "global:\n  scrape_interval: 1s\n  scrape_timeout: 900ms\n  evaluation_interval: 1s\n\
                 rule_files: ['{}']\n\
                 scrape_configs:\n  - job_name: latmon\n    static_configs:\n      - targets: ['{target}']\n",
                Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/prometheus-rules.yml").display()
            ),
        )
        .unwrap();
        let addr = format!("127.0.0.1:{}", free_port());
        let mut cmd = Command::new(PROMETHEUS);
        cmd.arg(format!("--config.file={}", cfg.display()))
            .arg(format!("--storage.tsdb.path={}", dir.join("data").display()))
            .arg(format!("--web.listen-address={addr}"))
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.join("log")).unwrap());
        if native {
            cmd.arg("--enable-feature=native-histograms");
        }
        let child = cmd.spawn().expect("prometheus (Debian package prometheus; scripts/install-deps.sh)");
        let p = Prometheus { child, addr, dir, what };
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some((200, _)) = http_get(&p.addr, "/-/ready") {
                break;
            }
            assert!(Instant::now() < deadline, "{what} Prometheus not ready: {}", p.log());
            std::thread::sleep(Duration::from_millis(200));
        }
        p
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("log")).unwrap_or_default()
    }

    /// An instant query (at `at`, unix seconds, or now): its result array.
    pub fn query(&self, q: &str, at: Option<f64>) -> Vec<Value> {
        let mut path = format!("/api/v1/query?query={}", urlencode(q));
        if let Some(t) = at {
            path.push_str(&format!("&time={t:.3}"));
        }
        let (status, body) =
            http_get(&self.addr, &path).unwrap_or_else(|| panic!("{} Prometheus: no answer", self.what));
        let v: Value = serde_json::from_str(&body).unwrap_or_else(|e| panic!("{}: {e}: {body}", self.what));
        assert_eq!((status, v["status"].as_str()), (200, Some("success")), "{} {q}: {body}", self.what);
        v["data"]["result"].as_array().unwrap().clone()
    }

    /// A query whose answer is one float sample.
    pub fn scalar(&self, q: &str, at: Option<f64>) -> Option<f64> {
        let r = self.query(q, at);
        let v = r.first()?["value"][1].as_str()?.parse().ok();
        v
    }

    /// Wait until `q` returns `want` (the data has been scraped).
    pub fn wait_for(&self, q: &str, want: f64) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let got = self.scalar(q, None);
            if got == Some(want) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{} Prometheus: {q} = {got:?}, want {want}; log: {}",
                self.what,
                self.log()
            );
            std::thread::sleep(Duration::from_millis(250));
        }
    }
}

pub fn urlencode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// GET over HTTP/1.0 (no chunked answers): (status, body).
pub fn http_get(addr: &str, path: &str) -> Option<(u16, String)> {
    http_get_accept(addr, path, None).map(|(s, _, b)| (s, String::from_utf8_lossy(&b).into_owned()))
}

pub fn http_get_accept(addr: &str, path: &str, accept: Option<&str>) -> Option<(u16, String, Vec<u8>)> {
    let mut c = std::net::TcpStream::connect(addr).ok()?;
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let accept = accept.map(|a| format!("Accept: {a}\r\n")).unwrap_or_default();
    write!(c, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n{accept}\r\n").ok()?;
    let mut resp = Vec::new();
    c.read_to_end(&mut resp).ok()?;
    let at = resp.windows(4).position(|w| w == b"\r\n\r\n")?;
    let head = String::from_utf8_lossy(&resp[..at]).into_owned();
    let status = head.split_whitespace().nth(1)?.parse().ok()?;
    let ctype = head.lines().find_map(|l| l.strip_prefix("Content-Type: ")).unwrap_or("").to_string();
    Some((status, ctype, resp[at + 4..].to_vec()))
}

pub fn prom_addr(stderr: &std::sync::Mutex<Vec<String>>) -> String {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(l) = stderr.lock().unwrap().iter().find(|l| l.contains("serving Prometheus metrics at http://")) {
            let at = l.find("http://").unwrap() + 7;
            return l[at..].trim_end_matches("/metrics").to_string();
        }
        assert!(Instant::now() < deadline, "latmon did not log its Prometheus address");
        std::thread::sleep(Duration::from_millis(100));
    }
}
