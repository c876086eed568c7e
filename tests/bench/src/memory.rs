//! Memory of the launcher, the four services and the native host: VmRSS and
//! PSS summed, idle, loaded and after a burst.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::env::{BenchEnv, memory_kib};
use crate::report::{Row, Target};

/// (process name, VmRSS KiB, PSS KiB if readable).
pub(crate) type MemSample = (String, u64, Option<u64>);

pub(crate) struct Procs {
    pub(crate) list: Vec<(String, u32)>,
}

impl Procs {
    pub(crate) async fn of(env: &BenchEnv, launcher: u32, host: u32) -> Result<Procs, String> {
        let status = env.status().await?;
        let mut list = vec![("pedelecd".to_string(), launcher)];
        list.extend(status.services.iter().map(|s| (s.name.clone(), s.pid)));
        // pedelecd's other children: the fork server, when the services are
        // forked from it (it is part of what Pedelec costs).
        for (name, pid) in children_of(launcher) {
            if !list.iter().any(|(_, p)| *p == pid) {
                list.push((name, pid));
            }
        }
        list.push(("pedelec-native-host".into(), host));
        Ok(Procs { list })
    }

    pub(crate) fn sample(&self) -> Vec<MemSample> {
        self.list
            .iter()
            .map(|(n, p)| {
                let (rss, pss) = memory_kib(*p);
                (n.clone(), rss, pss)
            })
            .collect()
    }
}

/// The live children of `parent`: their `comm` names and pids.
fn children_of(parent: u32) -> Vec<(String, u32)> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|entry| {
            let pid: u32 = entry.file_name().to_str()?.parse().ok()?;
            let stat = std::fs::read_to_string(entry.path().join("stat")).ok()?;
            // pid (comm) state ppid …; comm may hold spaces and parentheses.
            let open = stat.find('(')?;
            let close = stat.rfind(')')?;
            let mut rest = stat[close + 1..].split_whitespace();
            let state = rest.next()?;
            let ppid: u32 = rest.next()?.parse().ok()?;
            (ppid == parent && state != "Z").then(|| (stat[open + 1..close].to_string(), pid))
        })
        .collect()
}

pub(crate) fn memory_rows(kind: &'static str, sample: &[MemSample], n: usize) -> Vec<Row> {
    let (rss_id, pss_id) = match kind {
        "idle" => ("rss.idle", "pss.idle"),
        "after burst" => ("rss.after_burst", "pss.after_burst"),
        _ => ("rss.loaded", "pss.loaded"),
    };
    let rss: u64 = sample.iter().map(|s| s.1).sum();
    let detail =
        |f: &dyn Fn(&MemSample) -> String| sample.iter().map(f).collect::<Vec<_>>().join(", ");
    let mut rows = vec![{
        let row = Row::value(
            rss_id,
            format!("VmRSS summed over launcher, four services, native host ({kind})"),
            "MiB",
            rss as f64 / 1024.0,
            n,
        )
        .note(detail(&|s| format!("{} {:.1}", s.0, s.1 as f64 / 1024.0)));
        if kind == "idle" {
            row.target(Target::AtMost(28.0), "≤ 28 MiB")
        } else {
            row
        }
    }];
    if sample.iter().all(|s| s.2.is_some()) {
        let pss: u64 = sample.iter().filter_map(|s| s.2).sum();
        rows.push(
            Row::value(
                pss_id,
                format!("PSS summed (smaps_rollup, {kind})"),
                "MiB",
                pss as f64 / 1024.0,
                n,
            )
            .target(
                Target::AtMost(if kind == "idle" { 16.0 } else { 40.0 }),
                if kind == "idle" {
                    "≤ 16 MiB"
                } else {
                    "≤ 40 MiB"
                },
            )
            .note(detail(&|s| {
                format!("{} {:.1}", s.0, s.2.unwrap_or(0) as f64 / 1024.0)
            })),
        );
    }
    rows
}

/// Each process's peak (VmRSS, Pss) in KiB while a burst runs, sampled every
/// 50 ms until [`PeakSampler::stop`]; Pss is 0 where it is not read.
pub struct PeakSampler {
    peaks: Arc<Mutex<HashMap<u32, (u64, u64)>>>,
    task: tokio::task::JoinHandle<()>,
}

impl PeakSampler {
    /// Samples `list`'s processes; with `pss`, their Pss too (a smaps_rollup
    /// read each, more work for the kernel while the burst runs).
    pub fn start(list: &[(String, u32)], pss: bool) -> PeakSampler {
        let peaks: Arc<Mutex<HashMap<u32, (u64, u64)>>> = Default::default();
        let task = {
            let peaks = peaks.clone();
            let pids: Vec<u32> = list.iter().map(|(_, pid)| *pid).collect();
            tokio::spawn(async move {
                loop {
                    for pid in &pids {
                        let (rss, p) = if pss {
                            memory_kib(*pid)
                        } else {
                            (pedelec_tests::rss_kib(*pid), None)
                        };
                        let mut peaks = peaks.lock().unwrap();
                        let e = peaks.entry(*pid).or_default();
                        e.0 = e.0.max(rss);
                        e.1 = e.1.max(p.unwrap_or(0));
                    }
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                }
            })
        };
        PeakSampler { peaks, task }
    }

    /// Stops sampling; the peaks by pid.
    pub fn stop(self) -> HashMap<u32, (u64, u64)> {
        self.task.abort();
        std::mem::take(&mut *self.peaks.lock().unwrap())
    }
}
