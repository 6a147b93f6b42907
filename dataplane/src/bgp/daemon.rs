//! The FRR daemons, seen from the proxy: configuration handed over through files, state read
//! back through FRR's own VTY sockets.
//!
//! # Applying a configuration
//!
//! FRR runs beside the proxy (a sidecar sharing `/etc/frr` and `/var/run/frr`, or on the host)
//! with `frr-reloader.sh` (`deploy/components/bgp/frr-reloader.sh`). The proxy writes the
//! rendered file to `<conf_dir>/kube-lb.conf` (atomically), then a new generation number to
//! `<conf_dir>/kube-lb.reload`; the reloader applies the file with FRR's `frr-reload.py`, which
//! computes the difference from the running configuration and changes only that (no session
//! reset for a prefix or policy change), keeps it as `frr.conf` for daemon restarts, and
//! writes `<generation> <exit code>` and the tool's last lines to `<conf_dir>/kube-lb.status`.
//! The proxy waits for its generation there. The reloader lives with the daemons because
//! `frr-reload.py` needs their Python and `vtysh`; the proxy's image needs neither.
//!
//! # The dead man's switch
//!
//! A proxy that dies (SIGKILL, OOM) cannot withdraw anything, and FRR in its own container
//! would go on advertising a node whose userspace dataplane is gone, or whose nftables rules
//! nobody keeps fresh. So the proxy writes a counter to `<conf_dir>/kube-lb.heartbeat` every
//! [`HEARTBEAT_INTERVAL`], and with each configuration `<conf_dir>/kube-lb.deadman`: the
//! vtysh commands that withdraw every prefix it may have announced. When the counter stops
//! changing for `FRR_HEARTBEAT_TIMEOUT` (0.5 s), the reloader runs those commands (one
//! `vtysh -f`, ~70 ms): the routers get the withdrawals while sessions and BFD stay up. It
//! then bumps `<conf_dir>/kube-lb.deadman.fired`; a proxy that sees that number change (it was
//! only stalled, or it restarted) hands its configuration over again.
//!
//! # Reading state
//!
//! Each daemon listens on `<vty_dir>/<daemon>.vty`; a command is written NUL-terminated and the
//! answer ends with three NUL bytes and a status byte (0: success). `show bgp neighbors json`
//! and `show bfd peers json` are parsed by the pure [`parse_neighbors`] and [`parse_bfd`].

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Errors talking to FRR.
#[derive(Debug, thiserror::Error)]
pub enum FrrError {
    /// A file under the configuration directory could not be written or read.
    #[error("{path}: {source}")]
    File {
        /// The file.
        path: PathBuf,
        /// What went wrong.
        source: std::io::Error,
    },
    /// The reloader did not report the generation in time (is `frr-reloader.sh` running?).
    #[error(
        "FRR did not apply configuration generation {generation} within {timeout:?}: is \
         frr-reloader.sh running with FRR_CONF_DIR={conf_dir}?"
    )]
    ReloadTimeout {
        /// The generation waited for.
        generation: u64,
        /// How long.
        timeout: Duration,
        /// The configuration directory.
        conf_dir: String,
    },
    /// `frr-reload.py` refused the configuration.
    #[error("frr-reload.py exited {code} for generation {generation}: {output}")]
    ReloadFailed {
        /// The generation.
        generation: u64,
        /// Its exit code.
        code: i32,
        /// Its last lines.
        output: String,
    },
    /// A daemon's VTY socket could not be used.
    #[error("{socket}: {source}")]
    Vty {
        /// The socket path.
        socket: PathBuf,
        /// What went wrong.
        source: std::io::Error,
    },
    /// A daemon answered a command with a failure status.
    #[error("{daemon} refused {command:?} (status {status}): {output}")]
    Command {
        /// The daemon.
        daemon: String,
        /// The command.
        command: String,
        /// The status byte.
        status: u8,
        /// What it said.
        output: String,
    },
    /// A daemon's JSON answer did not parse.
    #[error("{daemon}: {command:?} did not answer JSON: {source}")]
    Json {
        /// The daemon.
        daemon: String,
        /// The command.
        command: String,
        /// The decoder's words.
        source: serde_json::Error,
    },
}

/// Where the proxy and FRR meet.
#[derive(Debug, Clone)]
pub struct Frr {
    /// Directory of `kube-lb.conf`, `kube-lb.reload` and `kube-lb.status` (`/etc/frr`).
    pub conf_dir: PathBuf,
    /// Directory of the daemons' VTY sockets (`/var/run/frr`, or `/var/run/frr/<pathspace>`).
    pub vty_dir: PathBuf,
    /// How long to wait for the reloader to apply a generation.
    pub reload_timeout: Duration,
}

/// The configuration file the proxy writes.
pub const CONFIG_FILE: &str = "kube-lb.conf";
/// The generation file the reloader watches.
pub const RELOAD_FILE: &str = "kube-lb.reload";
/// The reloader's answer.
pub const STATUS_FILE: &str = "kube-lb.status";

/// The proxy's heartbeat counter.
pub const HEARTBEAT_FILE: &str = "kube-lb.heartbeat";
/// The commands the reloader runs when the heartbeat stops.
pub const DEADMAN_FILE: &str = "kube-lb.deadman";
/// How often the reloader ran them.
pub const FIRED_FILE: &str = "kube-lb.deadman.fired";
/// How often the proxy beats.
pub const HEARTBEAT_INTERVAL: Duration = Duration::from_millis(100);

/// A `kube-lb.status` file: the generation applied (or tried), the exit code, the output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReloadStatus {
    /// The generation.
    pub generation: u64,
    /// `frr-reload.py`'s exit code.
    pub code: i32,
    /// Its last lines.
    pub output: String,
}

/// Parses a `kube-lb.status` file; `None` until it holds a complete first line.
pub fn parse_status(text: &str) -> Option<ReloadStatus> {
    let (first, rest) = text.split_once('\n')?;
    let mut words = first.split_whitespace();
    let generation = words.next()?.parse().ok()?;
    let code = words.next()?.parse().ok()?;
    Some(ReloadStatus {
        generation,
        code,
        output: rest.trim().to_owned(),
    })
}

async fn write_atomically(path: &Path, contents: &[u8]) -> Result<(), FrrError> {
    let temporary = path.with_extension("tmp");
    let error = |source| FrrError::File {
        path: path.to_owned(),
        source,
    };
    tokio::fs::write(&temporary, contents)
        .await
        .map_err(error)?;
    // The configuration may hold session passwords: readable by its owner (and FRR's group
    // in a shared volume) only.
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        tokio::fs::set_permissions(&temporary, std::fs::Permissions::from_mode(0o640))
            .await
            .map_err(error)?;
    }
    tokio::fs::rename(&temporary, path).await.map_err(error)
}

impl Frr {
    /// The generation the reloader last reported, if any (the next one must be higher).
    pub async fn last_generation(&self) -> Option<u64> {
        let text = tokio::fs::read_to_string(self.conf_dir.join(STATUS_FILE))
            .await
            .ok()?;
        parse_status(&text).map(|status| status.generation)
    }

    /// Writes heartbeat number `beat`.
    pub async fn beat(&self, beat: u64) -> Result<(), FrrError> {
        write_atomically(
            &self.conf_dir.join(HEARTBEAT_FILE),
            format!("{beat}\n").as_bytes(),
        )
        .await
    }

    /// Writes the commands the reloader runs if the heartbeat stops.
    pub async fn write_deadman(&self, commands: &str) -> Result<(), FrrError> {
        write_atomically(&self.conf_dir.join(DEADMAN_FILE), commands.as_bytes()).await
    }

    /// How many times the dead man's switch fired, as the reloader counts (0: never, or no
    /// file).
    pub async fn deadman_fired(&self) -> u64 {
        tokio::fs::read_to_string(self.conf_dir.join(FIRED_FILE))
            .await
            .ok()
            .and_then(|text| text.trim().parse().ok())
            .unwrap_or(0)
    }

    /// Hands `config` to FRR as `generation` and waits until the reloader applied it.
    pub async fn apply(&self, config: &str, generation: u64) -> Result<(), FrrError> {
        write_atomically(&self.conf_dir.join(CONFIG_FILE), config.as_bytes()).await?;
        write_atomically(
            &self.conf_dir.join(RELOAD_FILE),
            format!("{generation}\n").as_bytes(),
        )
        .await?;
        let status_path = self.conf_dir.join(STATUS_FILE);
        let deadline = tokio::time::Instant::now() + self.reload_timeout;
        loop {
            if let Ok(text) = tokio::fs::read_to_string(&status_path).await
                && let Some(status) = parse_status(&text)
                && status.generation >= generation
            {
                if status.code == 0 {
                    return Ok(());
                }
                return Err(FrrError::ReloadFailed {
                    generation: status.generation,
                    code: status.code,
                    output: status.output,
                });
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(FrrError::ReloadTimeout {
                    generation,
                    timeout: self.reload_timeout,
                    conf_dir: self.conf_dir.display().to_string(),
                });
            }
            // The reloader polls its request file; the answer comes within its poll period
            // plus frr-reload.py's run time (about 0.7 s).
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Runs `command` on `daemon` (`bgpd`, `bfdd`) through its VTY socket.
    pub async fn command(&self, daemon: &str, command: &str) -> Result<String, FrrError> {
        let socket = self.vty_dir.join(format!("{daemon}.vty"));
        let error = |source| FrrError::Vty {
            socket: socket.clone(),
            source,
        };
        let mut stream = tokio::net::UnixStream::connect(&socket)
            .await
            .map_err(error)?;
        let mut request = command.as_bytes().to_vec();
        request.push(0);
        stream.write_all(&request).await.map_err(error)?;
        let mut answer = Vec::new();
        let mut buffer = vec![0u8; 64 * 1024];
        loop {
            let read = stream.read(&mut buffer).await.map_err(error)?;
            if read == 0 {
                return Err(error(std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    "the daemon closed the socket before the end of its answer",
                )));
            }
            answer.extend_from_slice(&buffer[..read]);
            if let Some((output, status)) = split_answer(&answer) {
                let output = String::from_utf8_lossy(output).into_owned();
                if status != 0 {
                    return Err(FrrError::Command {
                        daemon: daemon.to_owned(),
                        command: command.to_owned(),
                        status,
                        output,
                    });
                }
                return Ok(output);
            }
        }
    }

    async fn json(&self, daemon: &str, command: &str) -> Result<Value, FrrError> {
        let text = self.command(daemon, command).await?;
        serde_json::from_str(&text).map_err(|source| FrrError::Json {
            daemon: daemon.to_owned(),
            command: command.to_owned(),
            source,
        })
    }

    /// The BGP sessions as bgpd sees them, with what each was sent.
    pub async fn neighbors(&self) -> Result<BTreeMap<IpAddr, NeighborState>, FrrError> {
        let mut neighbors = parse_neighbors(&self.json("bgpd", "show bgp neighbors json").await?);
        for (address, state) in &mut neighbors {
            if !state.established {
                continue;
            }
            for family in ["ipv4", "ipv6"] {
                let command =
                    format!("show bgp {family} unicast neighbors {address} advertised-routes json");
                if let Ok(answer) = self.json("bgpd", &command).await {
                    state.advertised.extend(parse_advertised(&answer));
                }
            }
        }
        Ok(neighbors)
    }

    /// The BFD sessions as bfdd sees them.
    pub async fn bfd_peers(&self) -> Result<BTreeMap<IpAddr, BfdState>, FrrError> {
        Ok(parse_bfd(&self.json("bfdd", "show bfd peers json").await?))
    }
}

/// The answer's text and status byte, once `answer` ends with the three NUL bytes and the
/// status byte that close a VTY answer.
pub fn split_answer(answer: &[u8]) -> Option<(&[u8], u8)> {
    let length = answer.len();
    if length < 4 || answer[length - 4..length - 1] != [0, 0, 0] {
        return None;
    }
    Some((&answer[..length - 4], answer[length - 1]))
}

/// One BGP session as bgpd reports it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NeighborState {
    /// The description (the peer's name, as rendered).
    pub description: Option<String>,
    /// bgpd's state name (`Idle`, `Connect`, `Active`, `OpenSent`, `Established`, …).
    pub state: String,
    /// Whether the session is established.
    pub established: bool,
    /// Why it last went down, if bgpd says.
    pub last_reset: Option<String>,
    /// The prefixes bgpd has sent on it (filled by [`Frr::neighbors`]).
    pub advertised: Vec<String>,
}

/// Parses `show bgp neighbors json`.
pub fn parse_neighbors(value: &Value) -> BTreeMap<IpAddr, NeighborState> {
    let Some(object) = value.as_object() else {
        return BTreeMap::new();
    };
    object
        .iter()
        .filter_map(|(address, neighbor)| {
            let address: IpAddr = address.parse().ok()?;
            let state = neighbor.get("bgpState")?.as_str()?.to_owned();
            Some((
                address,
                NeighborState {
                    description: neighbor
                        .get("nbrDesc")
                        .and_then(Value::as_str)
                        .map(str::to_owned),
                    established: state == "Established",
                    state,
                    last_reset: neighbor
                        .get("lastResetDueTo")
                        .and_then(Value::as_str)
                        .map(str::to_owned),
                    advertised: Vec::new(),
                },
            ))
        })
        .collect()
}

/// Parses `show bgp <family> unicast neighbors <address> advertised-routes json`: the prefixes.
pub fn parse_advertised(value: &Value) -> Vec<String> {
    value
        .get("advertisedRoutes")
        .and_then(Value::as_object)
        .map(|routes| routes.keys().cloned().collect())
        .unwrap_or_default()
}

/// One BFD session as bfdd reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BfdState {
    /// `up`, `down`, `init`, `shutdown`.
    pub status: String,
}

/// Parses `show bfd peers json`.
pub fn parse_bfd(value: &Value) -> BTreeMap<IpAddr, BfdState> {
    value
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|peer| {
            let address: IpAddr = peer.get("peer")?.as_str()?.parse().ok()?;
            let status = peer.get("status")?.as_str()?.to_owned();
            Some((address, BfdState { status }))
        })
        .collect()
}

#[cfg(test)]
mod tests;
