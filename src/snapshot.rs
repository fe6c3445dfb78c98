//! `cublasguard snapshot`: asks running guarded processes to write their traces now, without
//! stopping them (a job that looks stuck, or a healthy one). Each guarded process of this user
//! listens on an abstract Unix socket named after its pid (`config::snapshot_socket_name`); the
//! guard's thread there writes the trace and answers with its path.

use std::io::{BufRead, BufReader};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixStream};
use std::time::Duration;

use cublasguard_format::config::{snapshot_socket_name, SNAPSHOT_SOCKET_PREFIX};

use crate::output::CliError;

/// How long a process may take to write its trace (a large one, on a slow disk).
const ANSWER_WITHIN: Duration = Duration::from_secs(30);

/// Asks each of `pids` (every guarded process of this user on this host: `all`) for its trace;
/// prints where each went. Exit status 1 when any could not be asked or did not write it.
pub fn run(pids: &[u32], all: bool) -> Result<i32, CliError> {
    // SAFETY: geteuid has no preconditions and cannot fail.
    let uid = unsafe { libc::geteuid() };
    let mut asked: Vec<u32> = pids.to_vec();
    if all {
        let table = std::fs::read_to_string("/proc/net/unix").map_err(|e| CliError::usage(format!("reading /proc/net/unix: {e}")))?;
        asked.extend(listening_pids(&table, uid));
        asked.sort_unstable();
        asked.dedup();
        if asked.is_empty() {
            println!("no guarded process of this user is running on this host (or none started with a cublasguard that answers snapshots)");
            return Ok(1);
        }
    }
    if asked.is_empty() {
        return Err(CliError::usage("name the processes (PID ...) or give --all"));
    }
    let mut failed = false;
    for pid in asked {
        match ask(uid, pid) {
            Ok(path) => println!("pid {pid}: trace written to {path}"),
            Err(why) => {
                failed = true;
                println!("pid {pid}: {why}");
            }
        }
    }
    Ok(i32::from(failed))
}

/// The pids whose snapshot sockets of user `uid` `/proc/net/unix` lists (`@name` in its last
/// column).
fn listening_pids(table: &str, uid: u32) -> Vec<u32> {
    let prefix = format!("@{SNAPSHOT_SOCKET_PREFIX}{uid}-");
    table.lines().filter_map(|line| line.split_whitespace().last()?.strip_prefix(prefix.as_str())?.parse().ok()).collect()
}

/// The path process `pid` wrote its trace to, or why it did not.
fn ask(uid: u32, pid: u32) -> Result<String, String> {
    let addr = SocketAddr::from_abstract_name(snapshot_socket_name(uid, pid)).map_err(|e| format!("cannot name its socket: {e}"))?;
    let stream = UnixStream::connect_addr(&addr)
        .map_err(|_| "no guarded process of this user with this pid answers snapshots (not guarded, exited, another user's, a child forked without exec, or a cublasguard before 0.5)".to_string())?;
    stream.set_read_timeout(Some(ANSWER_WITHIN)).map_err(|e| e.to_string())?;
    let mut line = String::new();
    BufReader::new(stream).read_line(&mut line).map_err(|e| format!("no answer within {}s: {e}", ANSWER_WITHIN.as_secs()))?;
    let line = line.trim_end();
    match line.strip_prefix("written ") {
        Some(path) => Ok(path.to_string()),
        None if line.is_empty() => Err("the process closed the request without writing its trace".into()),
        None => Err(line.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_snapshot_sockets_of_this_user_are_read_from_the_kernels_table() {
        let table = "Num       RefCount Protocol Flags    Type St Inode Path\n\
                     0000000000000000: 00000002 00000000 00010000 0001 01 1234 @cublasguard-snapshot-1000-4242\n\
                     0000000000000000: 00000002 00000000 00010000 0001 01 1235 @cublasguard-snapshot-1001-77\n\
                     0000000000000000: 00000002 00000000 00010000 0001 01 1236 @cublasguard-trace-1000-00ff\n\
                     0000000000000000: 00000003 00000000 00000000 0001 03 1237\n\
                     0000000000000000: 00000002 00000000 00010000 0001 01 1238 /run/other.sock\n";
        assert_eq!(listening_pids(table, 1000), [4242]);
        assert_eq!(listening_pids(table, 1001), [77]);
    }
}
