//! Change notifications for the backend's tables: a child `nft monitor` whose events are
//! attributed to their writer, so only someone else's change to the tables triggers a check
//! ([`super::verify`]) at once; the periodic check stays the fallback.
//!
//! Why a child `nft monitor` rather than a netlink socket subscribed to NFNLGRP_NFTABLES: the
//! backend already runs `nft` through a command prefix (`ip netns exec …` in tests and with
//! `--netns`), and the child inherits that namespace without this process entering it; and
//! decoding the kernel's event messages (tables, chains, rules, set elements of every type)
//! is what `nft` already does. The cost is one idle process, plus formatting the backend's own
//! writes: a full sync of 200,000 elements is 200,000 event lines the monitor prints and this
//! task reads and drops (about a second of CPU, once per full sync; incremental syncs print a
//! few lines).
//!
//! Attribution: `nft monitor` ends each transaction's events with `# new generation N by process
//! PID (NAME)`, the PID of the task that committed it. The backend's own transactions are
//! committed by the `nft` children it started (their PIDs are recorded in [`Writers`] before they
//! are given any input) or in-process by libnftables (a thread of this process). A PID that is
//! neither is someone else. Where PIDs cannot be matched (this process in a PID namespace of its
//! own sees other numbers than the kernel reports), every write looks foreign: each then costs a
//! check that finds the table intact, never a wrong repair.

use std::collections::VecDeque;
use std::process::Stdio;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Command;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

/// The PIDs of the backend's recent `nft` children.
#[derive(Debug, Clone, Default)]
pub(crate) struct Writers(Arc<Mutex<VecDeque<u32>>>);

/// Children remembered: more than can commit between two events the monitor reads.
const REMEMBERED_WRITERS: usize = 64;

impl Writers {
    /// Records a child before it commits anything.
    pub(crate) fn record(&self, pid: u32) {
        let mut pids = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if pids.len() == REMEMBERED_WRITERS {
            pids.pop_front();
        }
        pids.push_back(pid);
    }

    /// True if `pid` is one of the backend's children or a thread of this process.
    fn own(&self, pid: u32) -> bool {
        let pids = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        pids.contains(&pid) || std::path::Path::new(&format!("/proc/self/task/{pid}")).exists()
    }
}

/// A change someone else made to the backend's tables (or a gap in the events, after which
/// anything may have changed).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ForeignChange {
    /// The first event line of the transaction, or why events may have been missed.
    pub event: String,
    /// The PID that committed it, when known.
    pub pid: Option<u32>,
}

/// A running `nft monitor`, restarted when it exits; dropped, it stops.
#[derive(Debug)]
pub struct ChangeMonitor {
    changes: mpsc::Receiver<ForeignChange>,
    task: JoinHandle<()>,
}

impl Drop for ChangeMonitor {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl ChangeMonitor {
    /// Starts `nft monitor` (`nft`: the command prefix that runs nft) for `tables` (family,
    /// name).
    pub(crate) fn start(
        nft: Vec<String>,
        tables: Vec<(&'static str, String)>,
        writers: Writers,
    ) -> Self {
        let (send, changes) = mpsc::channel(16);
        let task = tokio::spawn(run(nft, tables, writers, send));
        ChangeMonitor { changes, task }
    }

    /// The next foreign change; several that arrive before this is called come as one (each
    /// only asks for a check). `None` once the monitor task ended.
    pub async fn next(&mut self) -> Option<ForeignChange> {
        let change = self.changes.recv().await?;
        while self.changes.try_recv().is_ok() {}
        Some(change)
    }
}

/// Longest wait for a transaction's generation line after its first event: an `nft` too old
/// to print one must not hold an event back for ever.
const GENERATION_WAIT: Duration = Duration::from_millis(200);

/// Restarts of a failing monitor back off up to this.
const MAX_BACKOFF: Duration = Duration::from_secs(30);

/// The tables watched: (family, name).
type Tables = [(&'static str, String)];

async fn run(
    nft: Vec<String>,
    tables: Vec<(&'static str, String)>,
    writers: Writers,
    send: mpsc::Sender<ForeignChange>,
) {
    let mut backoff = Duration::from_millis(500);
    loop {
        let outcome = watch_once(&nft, &tables, &writers, &send).await;
        if send.is_closed() {
            return;
        }
        tracing::warn!(
            error = %outcome,
            retry_in = ?backoff,
            "nft monitor stopped: changes to the rules are noticed at the next periodic check"
        );
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(MAX_BACKOFF);
        // Events were missed while it was down.
        let gap = ForeignChange {
            event: "nft monitor restarted".into(),
            pid: None,
        };
        if send.send(gap).await.is_err() {
            return;
        }
    }
}

/// Runs one `nft monitor` until it exits; returns why it did.
async fn watch_once(
    nft: &[String],
    tables: &Tables,
    writers: &Writers,
    send: &mpsc::Sender<ForeignChange>,
) -> String {
    let (program, prefix) = match nft.split_first() {
        Some((program, prefix)) => (program.as_str(), prefix),
        None => ("nft", &[][..]),
    };
    let child = Command::new(program)
        .args(prefix)
        .arg("monitor")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn();
    let mut child = match child {
        Ok(child) => child,
        Err(error) => return format!("running {program}: {error}"),
    };
    let Some(stdout) = child.stdout.take() else {
        return "no output pipe".into();
    };
    let mut lines = BufReader::new(stdout).lines();
    let mut transaction = Transaction::default();
    loop {
        let line = if transaction.first.is_some() {
            match tokio::time::timeout(GENERATION_WAIT, lines.next_line()).await {
                Ok(line) => line,
                Err(_) => {
                    // No generation line: take it as foreign (at worst one check too many).
                    if let Some(change) = transaction.end(None, writers)
                        && send.send(change).await.is_err()
                    {
                        return "stopped".into();
                    }
                    continue;
                }
            }
        } else {
            lines.next_line().await
        };
        let line = match line {
            Ok(Some(line)) => line,
            Ok(None) => return "exited".into(),
            Err(error) => return format!("reading its output: {error}"),
        };
        if let Some(pid) = generation_pid(&line) {
            if let Some(change) = transaction.end(Some(pid), writers)
                && send.send(change).await.is_err()
            {
                return "stopped".into();
            }
        } else if touches(&line, tables) && transaction.first.is_none() {
            transaction.first = Some(line.chars().take(200).collect());
        }
    }
}

/// The events of one transaction read so far.
#[derive(Debug, Default)]
struct Transaction {
    /// Its first event on one of the backend's tables.
    first: Option<String>,
}

impl Transaction {
    /// The transaction ended, committed by `pid`: a foreign change if it touched the tables and
    /// was not the backend's own.
    fn end(&mut self, pid: Option<u32>, writers: &Writers) -> Option<ForeignChange> {
        let event = self.first.take()?;
        if pid.is_some_and(|pid| writers.own(pid)) {
            return None;
        }
        Some(ForeignChange { event, pid })
    }
}

/// `# new generation 5 by process 1234 (nft)` → 1234.
fn generation_pid(line: &str) -> Option<u32> {
    let rest = line.strip_prefix("# new generation ")?;
    let (_, rest) = rest.split_once(" by process ")?;
    rest.split_whitespace().next()?.parse().ok()
}

/// True if an event line is about one of `tables`, e.g.
/// `delete element ip kube-lb service-groups { … }` or `delete table ip6 kube-lb`.
fn touches(line: &str, tables: &Tables) -> bool {
    let mut words = line.split_whitespace();
    let (Some(_verb), Some(_object), Some(family), Some(name)) =
        (words.next(), words.next(), words.next(), words.next())
    else {
        return false;
    };
    tables
        .iter()
        .any(|(watched, table)| *watched == family && table == name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_are_matched_to_the_table_and_their_writer() {
        let tables = [("ip", "kube-lb".to_owned()), ("ip6", "kube-lb".to_owned())];
        assert!(touches("delete table ip kube-lb", &tables));
        assert!(touches(
            "delete element ip6 kube-lb service-groups { fd00::1 . tcp . 80 : 0x00001000 }",
            &tables
        ));
        assert!(touches(
            "delete rule ip kube-lb nat-prerouting handle 4",
            &tables
        ));
        assert!(!touches("delete table ip kube-lb-userspace", &tables));
        assert!(!touches("delete table inet kube-lb", &tables));
        assert!(!touches("# new generation 4 by process 12 (nft)", &tables));
        assert_eq!(
            generation_pid("# new generation 4 by process 12989 (nft)"),
            Some(12989)
        );
        assert_eq!(generation_pid("delete table ip kube-lb"), None);

        let writers = Writers::default();
        writers.record(4_194_400);
        let mut transaction = Transaction {
            first: Some("delete table ip kube-lb".into()),
        };
        assert_eq!(
            transaction.end(Some(4_194_400), &writers),
            None,
            "own child"
        );
        transaction.first = Some("delete table ip kube-lb".into());
        assert_eq!(
            transaction.end(Some(std::process::id()), &writers),
            None,
            "this process"
        );
        transaction.first = Some("delete table ip kube-lb".into());
        assert_eq!(
            transaction.end(Some(4_194_401), &writers),
            Some(ForeignChange {
                event: "delete table ip kube-lb".into(),
                pid: Some(4_194_401)
            })
        );
        assert_eq!(
            transaction.end(Some(4_194_401), &writers),
            None,
            "nothing touched"
        );
    }
}
