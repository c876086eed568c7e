//! Result rows, the printed table and the JSON file.

use serde_json::{Value, json};

/// How a figure is judged against its target (docs/benchmarks.md, "Targets").
#[derive(Clone, Copy)]
pub enum Target {
    /// No target (floors, comparisons, breakdowns).
    None,
    /// Latency percentiles must stay at or under these (µs).
    Latency { p50: f64, p99: Option<f64> },
    /// A single value must stay at or under this (same unit as the row).
    AtMost(f64),
    /// A single value must reach at least this.
    AtLeast(f64),
}

#[derive(Clone)]
pub struct Row {
    pub id: &'static str,
    pub what: String,
    /// `us` for latencies, else the unit of `value`.
    pub unit: &'static str,
    pub samples: usize,
    /// Sorted samples (latencies) or empty.
    pub sorted: Vec<f64>,
    /// The figure for non-latency rows.
    pub value: Option<f64>,
    pub target: Target,
    pub target_text: &'static str,
    /// Id of the floor row this figure is compared with.
    pub floor: Option<&'static str>,
    pub note: String,
    /// A figure that ran but broke a condition of its target (e.g. lost
    /// events): reported, and never counted as meeting the target.
    pub broken: Option<String>,
    pub error: Option<String>,
}

impl Row {
    pub fn latency(id: &'static str, what: impl Into<String>, mut samples: Vec<f64>) -> Row {
        samples.sort_by(f64::total_cmp);
        Row {
            id,
            what: what.into(),
            unit: "us",
            samples: samples.len(),
            sorted: samples,
            value: None,
            target: Target::None,
            target_text: "",
            floor: None,
            note: String::new(),
            broken: None,
            error: None,
        }
    }

    pub fn value(
        id: &'static str,
        what: impl Into<String>,
        unit: &'static str,
        value: f64,
        samples: usize,
    ) -> Row {
        Row {
            id,
            what: what.into(),
            unit,
            samples,
            sorted: Vec::new(),
            value: Some(value),
            target: Target::None,
            target_text: "",
            floor: None,
            note: String::new(),
            broken: None,
            error: None,
        }
    }

    pub fn failed(id: &'static str, what: impl Into<String>, error: String) -> Row {
        let mut row = Row::value(id, what, "", f64::NAN, 0);
        row.value = None;
        row.error = Some(error);
        row
    }

    pub fn target(mut self, target: Target, text: &'static str) -> Row {
        self.target = target;
        self.target_text = text;
        self
    }

    pub fn floor(mut self, floor: &'static str) -> Row {
        self.floor = Some(floor);
        self
    }

    pub fn broken_if(mut self, broken: bool, why: String) -> Row {
        if broken {
            self.broken = Some(why);
        }
        self
    }

    pub fn note(mut self, note: impl Into<String>) -> Row {
        self.note = note.into();
        self
    }

    /// Nearest-rank percentile of the samples.
    pub fn pct(&self, p: f64) -> Option<f64> {
        if self.sorted.is_empty() {
            return None;
        }
        let rank = ((p / 100.0) * self.sorted.len() as f64).ceil() as usize;
        Some(self.sorted[rank.clamp(1, self.sorted.len()) - 1])
    }

    /// The number compared with targets and floors: p50, or the value.
    pub fn headline(&self) -> Option<f64> {
        self.pct(50.0).or(self.value)
    }

    pub fn met(&self) -> Option<bool> {
        let h = self.headline()?;
        if self.broken.is_some() && !matches!(self.target, Target::None) {
            return Some(false);
        }
        match self.target {
            Target::None => None,
            Target::Latency { p50, p99 } => {
                Some(h <= p50 && p99.is_none_or(|t| self.pct(99.0).is_some_and(|v| v <= t)))
            }
            Target::AtMost(t) => Some(h <= t),
            Target::AtLeast(t) => Some(h >= t),
        }
    }
}

/// Latencies in µs, shown in the unit that keeps them readable.
pub fn fmt_us(us: f64) -> String {
    if us >= 10_000.0 {
        format!("{:.1} ms", us / 1000.0)
    } else if us >= 1000.0 {
        format!("{:.2} ms", us / 1000.0)
    } else {
        format!("{us:.1} µs")
    }
}

fn fmt_value(v: f64, unit: &str) -> String {
    match unit {
        "us" => fmt_us(v),
        "events/s" => format!("{v:.0} events/s"),
        "MiB" => format!("{v:.1} MiB"),
        "ms" => format!("{v:.1} ms"),
        _ => format!("{v:.2} {unit}"),
    }
}

pub fn floor_of<'a>(rows: &'a [Row], row: &Row) -> Option<&'a Row> {
    let id = row.floor?;
    rows.iter().find(|r| r.id == id && r.error.is_none())
}

/// figure / floor, for latency-like rows; for a rate the floor is a time per
/// event, so the ratio is (1/rate) / floor.
pub fn ratio(rows: &[Row], row: &Row) -> Option<f64> {
    let floor_row = floor_of(rows, row)?;
    let floor = floor_row.headline()?;
    let h = row.headline()?;
    if floor <= 0.0 || h <= 0.0 {
        return None;
    }
    // Always "how many times the floor's cost": for rates, time per event.
    Some(match (row.unit, floor_row.unit) {
        ("events/s", "events/s") => floor / h,
        ("events/s", _) => (1e6 / h) / floor,
        _ => h / floor,
    })
}

pub fn print_table(rows: &[Row]) {
    let header = [
        "id",
        "samples",
        "p50 / value",
        "p90",
        "p99",
        "target",
        "met",
        "floor",
        "ratio",
    ];
    let mut lines: Vec<[String; 9]> = vec![header.map(String::from)];
    for r in rows {
        let (p50, p90, p99) = if let Some(e) = &r.error {
            (format!("FAILED: {e:.60}"), String::new(), String::new())
        } else if r.sorted.is_empty() {
            (
                r.value.map(|v| fmt_value(v, r.unit)).unwrap_or_default(),
                String::new(),
                String::new(),
            )
        } else {
            (
                fmt_us(r.pct(50.0).unwrap()),
                fmt_us(r.pct(90.0).unwrap()),
                fmt_us(r.pct(99.0).unwrap()),
            )
        };
        let met = match r.met() {
            Some(true) => "yes",
            Some(false) => "NO",
            None => "",
        };
        let floor = floor_of(rows, r)
            .and_then(|f| {
                f.headline()
                    .map(|h| format!("{} {}", f.id, fmt_value(h, f.unit)))
            })
            .unwrap_or_default();
        let ratio = ratio(rows, r)
            .map(|x| format!("{x:.1}x"))
            .unwrap_or_default();
        lines.push([
            r.id.to_string(),
            r.samples.to_string(),
            p50,
            p90,
            p99,
            r.target_text.to_string(),
            met.to_string(),
            floor,
            ratio,
        ]);
    }
    let widths: Vec<usize> = (0..9)
        .map(|i| {
            lines
                .iter()
                .map(|l| l[i].chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    for (n, l) in lines.iter().enumerate() {
        let cells: Vec<String> = l
            .iter()
            .zip(&widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect();
        println!("| {} |", cells.join(" | "));
        if n == 0 {
            let rule: Vec<String> = widths.iter().map(|w| "-".repeat(*w)).collect();
            println!("|-{}-|", rule.join("-|-"));
        }
    }
    for r in rows {
        if let Some(b) = &r.broken {
            println!("  {} BROKEN: {b}", r.id);
        }
        if let Some(e) = &r.error {
            println!("  {} FAILED: {e}", r.id);
        }
        if !r.note.is_empty() {
            println!("  {}: {}", r.id, r.note);
        }
    }
}

pub fn to_json(rows: &[Row], meta: Value) -> Value {
    let rows: Vec<Value> = rows
        .iter()
        .map(|r| {
            let floor = floor_of(rows, r);
            json!({
                "id": r.id,
                "what": r.what,
                "unit": r.unit,
                "samples": r.samples,
                "p50": r.pct(50.0),
                "p90": r.pct(90.0),
                "p99": r.pct(99.0),
                "min": r.sorted.first(),
                "max": r.sorted.last(),
                "value": r.value.filter(|v| v.is_finite()),
                "target": r.target_text,
                "target_met": r.met(),
                "floor": floor.map(|f| json!({"id": f.id, "unit": f.unit, "value": f.headline()})),
                "ratio_to_floor": ratio(rows, r),
                "note": r.note,
                "broken": r.broken,
                "error": r.error,
            })
        })
        .collect();
    json!({"meta": meta, "results": rows})
}
