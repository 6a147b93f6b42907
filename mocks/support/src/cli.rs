//! The standalone mock binaries' command line: `--listen ADDR`, a flag naming where to write
//! a cloud config pointing at the mock, the mock's own value flags, `-h`/`--help`,
//! `-V`/`--version`; and the tail every binary shares (write the config, print the URL line,
//! serve until Ctrl-C).

use std::io::Write as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// What a mock binary accepts.
#[derive(Debug, Clone)]
pub struct CliSpec {
    /// The binary's name, prefixed to error messages.
    pub program: &'static str,
    /// Its version, printed by `-V`/`--version` (the mock crate's `CARGO_PKG_VERSION`).
    pub version: &'static str,
    /// The usage line printed by `--help` and after an error.
    pub usage: &'static str,
    /// `--listen` when not given.
    pub default_listen: SocketAddr,
    /// The flag naming the config file to write (`--config-out`, `--write-config`).
    pub config_flag: &'static str,
    /// The mock's own flags, each taking one value (repeatable; all values are kept).
    pub value_flags: &'static [&'static str],
}

/// A parsed command line.
#[derive(Debug, Clone, PartialEq)]
pub struct CliArgs {
    /// Where to listen.
    pub listen: SocketAddr,
    /// Where to write the cloud config, if asked.
    pub config_out: Option<PathBuf>,
    values: Vec<(&'static str, String)>,
}

/// What the command line asks for.
#[derive(Debug, Clone, PartialEq)]
pub enum Parsed {
    /// Run the mock.
    Run(CliArgs),
    /// Print the usage and exit successfully.
    Help,
    /// Print the program's name and version and exit successfully.
    Version,
}

impl CliSpec {
    /// Parses `args` (without the program name). `--flag value` and `--flag=value` are both
    /// accepted; an unknown flag, a missing value or a malformed address is an error naming it.
    pub fn parse(&self, args: impl IntoIterator<Item = String>) -> Result<Parsed, String> {
        let mut parsed = CliArgs {
            listen: self.default_listen,
            config_out: None,
            values: Vec::new(),
        };
        let mut args = args.into_iter();
        while let Some(arg) = args.next() {
            match arg.as_str() {
                "-h" | "--help" => return Ok(Parsed::Help),
                "-V" | "--version" => return Ok(Parsed::Version),
                _ => {}
            }
            let (flag, inline) = match arg.split_once('=') {
                Some((flag, value)) if flag.starts_with("--") => (flag, Some(value.to_string())),
                _ => (arg.as_str(), None),
            };
            let known = ["--listen", self.config_flag]
                .into_iter()
                .chain(self.value_flags.iter().copied())
                .find(|known| *known == flag)
                .ok_or_else(|| format!("unknown argument {arg}"))?;
            let value = match inline {
                Some(value) => value,
                None => args
                    .next()
                    .ok_or_else(|| format!("{known} needs a value"))?,
            };
            if known == "--listen" {
                parsed.listen = value
                    .parse()
                    .map_err(|e| format!("--listen {value}: {e}"))?;
            } else if known == self.config_flag {
                parsed.config_out = Some(value.into());
            } else {
                parsed.values.push((known, value));
            }
        }
        Ok(Parsed::Run(parsed))
    }

    /// Parses the process's arguments; prints the usage and exits 0 on `--help`, prints the
    /// error and the usage to stderr and exits 2 on a bad command line.
    pub fn parse_or_exit(&self) -> CliArgs {
        match self.parse(std::env::args().skip(1)) {
            Ok(Parsed::Run(args)) => args,
            Ok(Parsed::Help) => {
                println!("usage: {}", self.usage);
                std::process::exit(0);
            }
            Ok(Parsed::Version) => {
                println!("{} {}", self.program, self.version);
                std::process::exit(0);
            }
            Err(message) => self.exit_with(&message),
        }
    }

    /// Prints `message` and the usage to stderr and exits 2 (a bad command line).
    pub fn exit_with(&self, message: &str) -> ! {
        eprintln!("{}: {message}\nusage: {}", self.program, self.usage);
        std::process::exit(2)
    }
}

impl CliArgs {
    /// The last value given to `flag`.
    pub fn value(&self, flag: &str) -> Option<&str> {
        self.values
            .iter()
            .rev()
            .find(|(name, _)| *name == flag)
            .map(|(_, value)| value.as_str())
    }

    /// Every value given to `flag`, in order.
    pub fn values<'a>(&'a self, flag: &'a str) -> impl Iterator<Item = &'a str> {
        self.values
            .iter()
            .filter(move |(name, _)| *name == flag)
            .map(|(_, value)| value.as_str())
    }

    /// The value of `flag` parsed as `T`, `default` when absent.
    pub fn parsed<T: std::str::FromStr>(&self, flag: &str, default: T) -> Result<T, String>
    where
        T::Err: std::fmt::Display,
    {
        self.value(flag).map_or(Ok(default), |value| {
            value.parse().map_err(|e| format!("{flag} {value}: {e}"))
        })
    }

    /// The value of `flag` as whole milliseconds (`--task-delay-ms 200`), zero when absent.
    pub fn millis(&self, flag: &str) -> Result<Duration, String> {
        self.parsed(flag, 0u64).map(Duration::from_millis)
    }

    /// The value of `flag` as a human duration (`2s`, `500ms`), `None` when absent.
    pub fn duration(&self, flag: &str) -> Result<Option<Duration>, String> {
        self.value(flag)
            .map(|value| {
                humantime::parse_duration(value).map_err(|e| format!("{flag} {value}: {e}"))
            })
            .transpose()
    }
}

/// Logs to stderr (stdout is for the URL line), at `RUST_LOG` or `info`.
pub fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .try_init();
}

/// The end of every mock binary: writes the cloud config (when asked) before printing
/// anything, so a caller that read the first stdout line finds the file complete; prints
/// `lines` (the first one carries the URL) and serves until interrupted.
pub async fn announce_and_wait(
    config: Option<(&Path, String)>,
    lines: &[String],
) -> std::io::Result<()> {
    if let Some((path, contents)) = config {
        std::fs::write(path, contents).map_err(|e| {
            std::io::Error::new(e.kind(), format!("writing {}: {e}", path.display()))
        })?;
    }
    let mut stdout = std::io::stdout();
    for line in lines {
        writeln!(stdout, "{line}")?;
    }
    stdout.flush()?;
    tokio::signal::ctrl_c().await
}

#[cfg(test)]
mod tests {
    use super::*;

    const SPEC: CliSpec = CliSpec {
        program: "mock",
        version: "0.0.1",
        usage: "mock [--listen ADDR] [--config-out FILE] [--delay-ms N] [--node NAME]...",
        default_listen: SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST), 0),
        config_flag: "--config-out",
        value_flags: &["--delay-ms", "--node"],
    };

    fn parse(args: &[&str]) -> Result<Parsed, String> {
        SPEC.parse(args.iter().map(|a| a.to_string()))
    }

    fn run(args: &[&str]) -> CliArgs {
        match parse(args) {
            Ok(Parsed::Run(args)) => args,
            other => panic!("{args:?}: {other:?}"),
        }
    }

    #[test]
    fn command_lines() {
        let defaults = run(&[]);
        assert_eq!(defaults.listen, SPEC.default_listen);
        assert_eq!(defaults.config_out, None);

        let full = run(&[
            "--listen",
            "127.0.0.1:8080",
            "--config-out=/tmp/c.json",
            "--node",
            "a",
            "--node=b",
            "--delay-ms",
            "250",
        ]);
        assert_eq!(full.listen.port(), 8080);
        assert_eq!(full.config_out, Some(PathBuf::from("/tmp/c.json")));
        assert_eq!(full.values("--node").collect::<Vec<_>>(), ["a", "b"]);
        assert_eq!(full.millis("--delay-ms"), Ok(Duration::from_millis(250)));
        assert_eq!(full.millis("--absent"), Ok(Duration::ZERO));
        assert_eq!(full.duration("--absent"), Ok(None));

        assert_eq!(parse(&["-h"]), Ok(Parsed::Help));
        assert_eq!(parse(&["--version"]), Ok(Parsed::Version));
        assert_eq!(
            parse(&["--listen", "127.0.0.1:1", "--help"]),
            Ok(Parsed::Help)
        );
    }

    #[test]
    fn bad_command_lines_name_the_argument() {
        let cases: [(&[&str], &str); 4] = [
            (&["--bogus"], "unknown argument --bogus"),
            (&["--listen"], "--listen needs a value"),
            (&["--listen", "nowhere"], "--listen nowhere: "),
            (&["--config-out"], "--config-out needs a value"),
        ];
        for (args, want) in cases {
            match parse(args) {
                Err(message) => assert!(message.starts_with(want), "{args:?}: {message}"),
                other => panic!("{args:?} parsed: {other:?}"),
            }
        }
        assert!(
            run(&["--delay-ms", "soon"])
                .millis("--delay-ms")
                .is_err_and(|e| e.starts_with("--delay-ms soon: "))
        );
    }
}
