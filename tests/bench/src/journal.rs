//! SessionService's record write alone (`breakdown.journal_write`).

use std::time::Instant;

use crate::Config;
use crate::measure::us;
use crate::report::Row;

/// The session journal's write (`RecyclingWriter`, no fsync) of a
/// record-sized file in place of the previous one, on the filesystem of the temp
/// dirs: SessionService does this on every state change. Next to it, fewer
/// samples of the plain replace-by-rename, which makes and deletes an inode
/// each time (kept short: the deletions slow inode creation on this disk for
/// a while, and the phases after this one create sessions).
pub(crate) async fn journal_write(cfg: &Config) -> Result<Vec<Row>, String> {
    let n = cfg.n(2000, 200);
    let dir = tempfile::Builder::new()
        .prefix("pdlj")
        .tempdir_in("/tmp")
        .map_err(|e| e.to_string())?;
    let name = "thr_0123456789abcdef.json";
    let file = dir.path().join(name);
    let record = vec![b'x'; 1536];
    let writer = pedelec_common::recycle::RecyclingWriter::new(dir.path().into(), 0o600);
    let mut recycled = Vec::with_capacity(n);
    for i in 0..n + 20 {
        let t = Instant::now();
        writer
            .replace(name, &record)
            .map_err(|e| format!("RecyclingWriter::replace: {e}"))?;
        if i >= 20 {
            recycled.push(us(t.elapsed()));
        }
    }
    let mut fresh = Vec::with_capacity(n / 10);
    for i in 0..n / 10 + 20 {
        let t = Instant::now();
        pedelec_common::paths::replace_file(&file, &record, 0o600, false)
            .map_err(|e| format!("replace_file: {e}"))?;
        if i >= 20 {
            fresh.push(us(t.elapsed()));
        }
    }
    Ok(vec![
        Row::latency(
            "breakdown.journal_write",
            "breakdown: the journal's write of 1.5 KB (a recycled temp file, its name swapped with the old one's, no fsync)",
            recycled,
        ),
        Row::latency(
            "breakdown.journal_write.fresh_inode",
            "breakdown: the same with a new temp file each time (replace_file), the inode created and the old one deleted",
            fresh,
        ),
    ])
}
