//! Bounds on what the userspace backend remembers per client: ClientIP affinity entries are
//! swept when they expire ([`reap_affinity`]), and UDP sessions are capped per Service
//! ([`SessionBudget`]), with refusals counted for `/metrics`.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use tokio::time::Instant;

use crate::model::PortKey;

/// UDP sessions one Service port may hold at once unless configured
/// (`--udp-sessions-per-service`). A session costs a connected socket (one file descriptor and
/// its kernel buffers) and a task; replies pass through the worker thread's shared buffer, so a
/// session holds no buffer of its own. A full budget is 8192 descriptors, well inside the usual
/// 1,048,576 descriptor limit of a node agent. With the
/// default 30 s idle timeout that serves ~270 new clients per second per Service, continuously;
/// kube-proxy's kernel path is bounded by conntrack instead (32,768 entries per core).
pub const DEFAULT_UDP_SESSIONS_PER_SERVICE: usize = 8192;

/// Live UDP sessions of one Service port against its cap. Shared by the Service's frontends
/// (ClusterIP, NodePorts, load-balancer and external IPs) and every worker.
#[derive(Debug)]
pub struct SessionBudget {
    service: PortKey,
    limit: usize,
    live: AtomicUsize,
    refused: Arc<AtomicU64>,
    /// Set while refusing, so the log says so once per episode instead of once per datagram.
    full: AtomicBool,
}

impl SessionBudget {
    /// A budget of `limit` sessions for `service`; refusals are added to `refused`.
    pub fn new(service: PortKey, limit: usize, refused: Arc<AtomicU64>) -> Self {
        SessionBudget {
            service,
            limit,
            live: AtomicUsize::new(0),
            refused,
            full: AtomicBool::new(false),
        }
    }

    /// A permit for one more session, or `None` (counted as a refusal) when the Service already
    /// holds its limit.
    pub fn acquire(self: &Arc<Self>) -> Option<SessionPermit> {
        let taken = self
            .live
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |live| {
                (live < self.limit).then_some(live + 1)
            });
        match taken {
            Ok(_) => {
                self.full.store(false, Ordering::Relaxed);
                Some(SessionPermit {
                    budget: self.clone(),
                })
            }
            Err(_) => {
                self.refused.fetch_add(1, Ordering::Relaxed);
                if !self.full.swap(true, Ordering::Relaxed) {
                    tracing::warn!(
                        service = %self.service,
                        limit = self.limit,
                        "udp session limit reached; new clients are dropped until sessions idle out"
                    );
                }
                None
            }
        }
    }

    /// Sessions currently open.
    pub fn live(&self) -> usize {
        self.live.load(Ordering::Acquire)
    }
}

/// One UDP session's place in its Service's budget, given back on drop.
#[derive(Debug)]
pub struct SessionPermit {
    budget: Arc<SessionBudget>,
}

impl Drop for SessionPermit {
    fn drop(&mut self) {
        self.budget.live.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Sweeps a pool's expired affinity entries forever: `reap` forgets what expired by the given
/// time and says when to look again. The caller aborts the task with its listener.
pub async fn reap_affinity(mut reap: impl FnMut(Instant) -> Duration + Send) {
    loop {
        let wait = reap(Instant::now());
        tokio::time::sleep(wait).await;
    }
}

/// How often the workers hand heap memory freed meanwhile back to the kernel.
pub const TRIM_INTERVAL: Duration = Duration::from_secs(5);

/// Returns freed heap to the kernel every [`TRIM_INTERVAL`], forever (one task per proxy; it
/// ends with its worker's runtime). Why: glibc's allocator keeps what a burst of clients freed
/// in its per-thread arenas, so after 100,000 clients a proxy would hold its peak resident size
/// for good although every per-client entry is gone. One trim walks the arenas' free lists:
/// microseconds when little was freed.
pub async fn trim_heap_forever() {
    fix_mmap_threshold();
    loop {
        tokio::time::sleep(TRIM_INTERVAL).await;
        trim_heap();
        HEAP_TRIMS.fetch_add(1, Ordering::Relaxed);
    }
}

static HEAP_TRIMS: AtomicU64 = AtomicU64::new(0);

/// Heap trims done by this process so far (tests wait for one before reading its size).
pub fn heap_trims() -> u64 {
    HEAP_TRIMS.load(Ordering::Relaxed)
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[allow(unsafe_code)]
fn trim_heap() {
    // SAFETY: malloc_trim takes no pointer and is thread-safe; it only releases free pages of
    // glibc's arenas.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Keeps glibc's mmap threshold at its default instead of letting it follow the largest block
/// freed: an affinity table that grew for a burst of clients and shrank again would otherwise
/// raise it, and later large blocks would come from (and fragment) the heap instead of being
/// mapped and unmapped as a whole.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[allow(unsafe_code)]
fn fix_mmap_threshold() {
    // SAFETY: mallopt takes two integers and is thread-safe; setting M_MMAP_THRESHOLD only
    // disables the dynamic adjustment.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 128 * 1024);
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn fix_mmap_threshold() {}

/// musl's allocator (the container image) returns freed memory to the kernel by itself.
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn trim_heap() {}

/// Per-client state the userspace backend holds, for tests and diagnostics.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct StateCounts {
    /// ClientIP affinity entries, all frontends together.
    pub affinity_entries: usize,
    /// Room the affinity tables hold without growing.
    pub affinity_capacity: usize,
    /// Open UDP sessions, all Services together.
    pub udp_sessions: usize,
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::model::{Protocol, ServiceKey};

    fn key() -> PortKey {
        PortKey {
            service: ServiceKey {
                namespace: "default".into(),
                name: "dns".into(),
            },
            protocol: Protocol::Udp,
            port: 53,
        }
    }

    #[test]
    fn sessions_beyond_the_limit_are_refused_and_counted_until_one_ends() {
        let refused = Arc::new(AtomicU64::new(0));
        let budget = Arc::new(SessionBudget::new(key(), 2, refused.clone()));
        let first = budget.acquire().unwrap();
        let _second = budget.acquire().unwrap();
        assert!(budget.acquire().is_none());
        assert!(budget.acquire().is_none());
        assert_eq!((budget.live(), refused.load(Ordering::Relaxed)), (2, 2));
        drop(first);
        assert_eq!(budget.live(), 1);
        assert!(budget.acquire().is_some());
    }

    #[tokio::test(start_paused = true)]
    async fn the_reaper_sweeps_at_the_interval_it_is_given() {
        let sweeps = Arc::new(AtomicUsize::new(0));
        let counted = sweeps.clone();
        let task = tokio::spawn(reap_affinity(move |_| {
            counted.fetch_add(1, Ordering::Relaxed);
            Duration::from_secs(1)
        }));
        tokio::time::sleep(Duration::from_millis(3500)).await;
        assert_eq!(sweeps.load(Ordering::Relaxed), 4);
        task.abort();
    }
}
