//! The `process_*` families every Prometheus client library exports (CPU, memory, file
//! descriptors, start time), read from `/proc/self` at each scrape. The kubernetes-mixin
//! proxy dashboard graphs `process_resident_memory_bytes` and `process_cpu_seconds_total`.

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;

/// What `/proc/self/stat` says about this process, in the units the metrics use.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ProcessStat {
    /// User plus system CPU time, in seconds.
    pub cpu_seconds: f64,
    /// Virtual memory size, in bytes.
    pub virtual_bytes: u64,
    /// Resident set size, in bytes.
    pub resident_bytes: u64,
    /// When the process started, in seconds after boot.
    pub started_after_boot_seconds: f64,
}

/// Reads the fields of a `/proc/<pid>/stat` line (proc(5)). `ticks_per_second` is
/// `_SC_CLK_TCK`, `page_size` the size of the pages `rss` counts. `None` when the line does
/// not have the fields. The command name may hold spaces and parentheses, so fields are
/// counted from its last `)`.
pub fn parse_stat(line: &str, ticks_per_second: u64, page_size: u64) -> Option<ProcessStat> {
    let (_, after_name) = line.rsplit_once(')')?;
    // `fields[0]` is field 3 of proc(5), `state`.
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    let field = |number: usize| -> Option<u64> { fields.get(number - 3)?.parse().ok() };
    let ticks = ticks_per_second.max(1) as f64;
    Some(ProcessStat {
        cpu_seconds: (field(14)? + field(15)?) as f64 / ticks,
        started_after_boot_seconds: field(22)? as f64 / ticks,
        virtual_bytes: field(23)?,
        resident_bytes: field(24)?.saturating_mul(page_size),
    })
}

/// The boot time (`btime`, Unix seconds) from `/proc/stat`.
pub fn parse_boot_time(proc_stat: &str) -> Option<u64> {
    proc_stat
        .lines()
        .find_map(|line| line.strip_prefix("btime "))
        .and_then(|value| value.trim().parse().ok())
}

/// Exports the `process_*` families on each scrape; register it with
/// `Registry::register_collector`. A file that cannot be read leaves its families out of
/// that scrape rather than reporting zeros.
#[derive(Debug, Default, Clone, Copy)]
pub struct ProcessCollector;

impl ProcessCollector {
    fn stat() -> Option<ProcessStat> {
        let line = std::fs::read_to_string("/proc/self/stat").ok()?;
        parse_stat(
            &line,
            rustix::param::clock_ticks_per_second(),
            rustix::param::page_size() as u64,
        )
    }

    fn start_time(stat: &ProcessStat) -> Option<f64> {
        let boot = parse_boot_time(&std::fs::read_to_string("/proc/stat").ok()?)?;
        Some(boot as f64 + stat.started_after_boot_seconds)
    }

    fn open_fds() -> Option<u64> {
        Some(std::fs::read_dir("/proc/self/fd").ok()?.count() as u64)
    }

    fn max_fds() -> Option<u64> {
        rustix::process::getrlimit(rustix::process::Resource::Nofile).current
    }
}

fn gauge(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    value: f64,
) -> Result<(), std::fmt::Error> {
    let metric = encoder.encode_descriptor(name, help, None, MetricType::Gauge)?;
    ConstGauge::new(value).encode(metric)
}

impl Collector for ProcessCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        if let Some(stat) = Self::stat() {
            let metric = encoder.encode_descriptor(
                "process_cpu_seconds",
                "Total user and system CPU time spent in seconds.",
                None,
                MetricType::Counter,
            )?;
            ConstCounter::new(stat.cpu_seconds).encode(metric)?;
            gauge(
                &mut encoder,
                "process_resident_memory_bytes",
                "Resident memory size in bytes.",
                stat.resident_bytes as f64,
            )?;
            gauge(
                &mut encoder,
                "process_virtual_memory_bytes",
                "Virtual memory size in bytes.",
                stat.virtual_bytes as f64,
            )?;
            if let Some(start) = Self::start_time(&stat) {
                gauge(
                    &mut encoder,
                    "process_start_time_seconds",
                    "Start time of the process since unix epoch in seconds.",
                    start,
                )?;
            }
        }
        if let Some(open) = Self::open_fds() {
            gauge(
                &mut encoder,
                "process_open_fds",
                "Number of open file descriptors.",
                open as f64,
            )?;
        }
        if let Some(max) = Self::max_fds() {
            gauge(
                &mut encoder,
                "process_max_fds",
                "Maximum number of open file descriptors.",
                max as f64,
            )?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_fields_are_counted_from_the_last_parenthesis() {
        // A command name with a space and a ')' of its own; utime 250, stime 50 ticks,
        // starttime 1000 ticks, vsize 8 MiB, rss 300 pages.
        let line = "4242 (kube (lb) x) S 1 4242 4242 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 \
                    4 0 1000 8388608 300 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0";
        let stat = parse_stat(line, 100, 4096).expect("parses");
        assert_eq!(
            stat,
            ProcessStat {
                cpu_seconds: 3.0,
                virtual_bytes: 8_388_608,
                resident_bytes: 300 * 4096,
                started_after_boot_seconds: 10.0,
            }
        );
    }

    #[test]
    fn a_short_or_garbled_stat_line_is_none() {
        for line in ["", "4242 (x) S 1 2 3", "no parenthesis at all 1 2 3"] {
            assert_eq!(parse_stat(line, 100, 4096), None, "{line:?}");
        }
    }

    #[test]
    fn boot_time_is_the_btime_line() {
        let text = "cpu  1 2 3\nintr 5\nbtime 1764806400\nprocesses 9\n";
        assert_eq!(parse_boot_time(text), Some(1_764_806_400));
        assert_eq!(parse_boot_time("cpu 1 2 3\n"), None);
    }

    #[test]
    fn this_process_reports_memory_and_descriptors() {
        let mut registry = prometheus_client::registry::Registry::default();
        registry.register_collector(Box::new(ProcessCollector));
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        let value = |name: &str| -> f64 {
            text.lines()
                .find_map(|l| l.strip_prefix(&format!("{name} ")))
                .unwrap_or_else(|| panic!("{name} missing in {text}"))
                .parse()
                .unwrap()
        };
        assert!(value("process_resident_memory_bytes") > 0.0);
        assert!(value("process_virtual_memory_bytes") >= value("process_resident_memory_bytes"));
        assert!(value("process_open_fds") >= 3.0);
        // An unlimited RLIMIT_NOFILE has no number to report.
        match rustix::process::getrlimit(rustix::process::Resource::Nofile).current {
            Some(_) => assert!(value("process_max_fds") >= value("process_open_fds")),
            None => assert!(!text.contains("process_max_fds "), "{text}"),
        }
        assert!(value("process_cpu_seconds_total") >= 0.0);
        // Started after 2020 and not in the future.
        let start = value("process_start_time_seconds");
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs_f64();
        assert!(start > 1_577_836_800.0 && start <= now + 1.0, "{start}");
    }
}
