//! One check of the doctor's: its name, its status (ok, info, skip, warn, fail), one line of
//! evidence and, when not ok, one line of fix. Every check is made this way, whichever part of
//! the doctor makes it.

use serde::Serialize;

#[derive(Clone, Copy, Debug, Serialize, PartialEq, Eq, PartialOrd, Ord)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    Ok,
    /// A fact, not a problem: something optional is not there (NVML).
    Info,
    /// Could not be checked: it needs something an earlier check found missing (which failed).
    Skip,
    Warn,
    Fail,
}

#[derive(Clone, Debug, Serialize)]
pub struct Check {
    pub name: &'static str,
    pub status: Status,
    pub evidence: String,
    pub fix: Option<String>,
}

pub fn check(name: &'static str, status: Status, evidence: impl Into<String>, fix: Option<&str>) -> Check {
    Check { name, status, evidence: evidence.into(), fix: fix.map(str::to_string) }
}
