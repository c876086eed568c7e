//! The record-write micro-benchmark of `recycle.rs`: a 1.5 KB record written
//! with [`RecyclingWriter`] against the plain path (`paths::replace_file`
//! without fsync), in a folder of the filesystem to measure.
//!
//!     cargo run -p pedelec-common --example record_write -- DIR MODE N
//!
//! MODE: `replace-recycled` / `replace-plain` (one record replaced N times)
//! or `threads-recycled` / `threads-plain` (N records, each written new and
//! replaced three times, as SessionService writes a thread's; the spares are
//! refilled after each, which SessionService does off the request path, so
//! the refill is timed apart). Prints the median and p90 of one write.
//! Makes and empties `DIR/MODE`.

use std::path::{Path, PathBuf};
use std::time::Instant;

use pedelec_common::paths::replace_file;
use pedelec_common::recycle::RecyclingWriter;

const RECORD_BYTES: usize = 1536;

fn summary(mut us: Vec<f64>) -> String {
    us.sort_by(f64::total_cmp);
    format!(
        "median {:.1} us, p90 {:.1} us",
        us[us.len() / 2],
        us[us.len() * 9 / 10]
    )
}

fn empty_dir(dir: &Path) -> PathBuf {
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir).expect("make the folder");
    dir.to_path_buf()
}

fn timed(samples: &mut Vec<f64>, write: impl FnOnce() -> std::io::Result<()>) {
    let t = Instant::now();
    write().expect("write");
    samples.push(t.elapsed().as_secs_f64() * 1e6);
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [dir, mode, n] = args.as_slice() else {
        eprintln!("usage: record_write DIR MODE N");
        std::process::exit(2);
    };
    let n: usize = n.parse().expect("N is a count");
    let dir = empty_dir(&Path::new(dir).join(mode));
    let record = vec![b'x'; RECORD_BYTES];
    let mut writes = Vec::new();
    let mut refills = Vec::new();
    match mode.as_str() {
        "replace-recycled" => {
            let writer = RecyclingWriter::new(dir.clone(), 0o600);
            writer.replace("thr.json", &record).expect("first write");
            for _ in 0..n {
                timed(&mut writes, || writer.replace("thr.json", &record));
            }
        }
        "replace-plain" => {
            let path = dir.join("thr.json");
            replace_file(&path, &record, 0o600, false).expect("first write");
            for _ in 0..n {
                timed(&mut writes, || replace_file(&path, &record, 0o600, false));
            }
        }
        "threads-recycled" => {
            let writer = RecyclingWriter::new(dir.clone(), 0o600);
            for i in 0..n {
                let name = format!("thr_{i}.json");
                for _ in 0..4 {
                    timed(&mut writes, || writer.replace(&name, &record));
                }
                timed(&mut refills, || writer.refill());
            }
        }
        "threads-plain" => {
            for i in 0..n {
                let path = dir.join(format!("thr_{i}.json"));
                for _ in 0..4 {
                    timed(&mut writes, || replace_file(&path, &record, 0o600, false));
                }
            }
        }
        other => {
            eprintln!("unknown mode {other:?}");
            std::process::exit(2);
        }
    }
    println!("{mode}, {n}: a write {}", summary(writes));
    if !refills.is_empty() {
        println!("{mode}, {n}: a refill {}", summary(refills));
    }
    let _ = std::fs::remove_dir_all(&dir);
}
