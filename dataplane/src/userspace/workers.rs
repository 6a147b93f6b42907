//! The proxy's own threads, each running a single-threaded tokio runtime.
//!
//! Every frontend gets one `SO_REUSEPORT` socket per worker, so the kernel spreads new connections
//! (and UDP clients) over the workers and a connection is accepted, connected and relayed on one
//! thread: no task moves between threads, and no worker wakes another, which on a busy node costs
//! more than the forwarding itself. This is the model of HAProxy's `nbthread` and nginx's workers.

use std::io;
use std::num::NonZeroUsize;

use tokio::runtime::{Builder, Handle};
use tokio::sync::oneshot;

/// Default worker count: one per CPU, at most four. Every frontend holds one socket per worker,
/// so thousands of Services on a large machine stay within file limits.
pub fn default_workers() -> NonZeroUsize {
    std::thread::available_parallelism().map_or(NonZeroUsize::MIN, |n| {
        n.min(NonZeroUsize::MIN.saturating_add(3))
    })
}

/// Running worker threads. Dropping this stops them; their runtimes then drop every task, which
/// closes the sockets those tasks own.
#[derive(Debug)]
pub(crate) struct Workers {
    handles: Vec<Handle>,
    /// Dropping a sender ends its worker's `block_on`.
    _stops: Vec<oneshot::Sender<()>>,
}

impl Workers {
    /// Starts `count` threads named `klb-userspace-<i>`.
    pub(crate) fn start(count: NonZeroUsize) -> io::Result<Workers> {
        let mut handles = Vec::with_capacity(count.get());
        let mut stops = Vec::with_capacity(count.get());
        for i in 0..count.get() {
            let runtime = Builder::new_current_thread().enable_all().build()?;
            let (stop, stopped) = oneshot::channel::<()>();
            handles.push(runtime.handle().clone());
            // On error, the senders pushed so far drop here and stop the started threads.
            std::thread::Builder::new()
                .name(format!("klb-userspace-{i}"))
                .spawn(move || {
                    runtime.block_on(async {
                        if i == 0 {
                            tokio::spawn(super::state::trim_heap_forever());
                        }
                        let _ = stopped.await;
                    });
                })?;
            stops.push(stop);
        }
        Ok(Workers {
            handles,
            _stops: stops,
        })
    }

    /// Every worker's runtime.
    pub(crate) fn all(&self) -> &[Handle] {
        &self.handles
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use std::collections::BTreeSet;

    #[test]
    fn default_is_between_one_and_four() {
        assert!((1..=4).contains(&default_workers().get()));
    }

    #[tokio::test]
    async fn tasks_run_on_the_named_worker_threads_and_stop_with_them() {
        let workers = Workers::start(NonZeroUsize::new(3).unwrap()).unwrap();
        let mut names = BTreeSet::new();
        for handle in workers.all() {
            let name = handle
                .spawn(async { std::thread::current().name().map(str::to_owned) })
                .await
                .unwrap();
            names.insert(name.unwrap());
        }
        assert_eq!(
            names,
            BTreeSet::from(
                ["klb-userspace-0", "klb-userspace-1", "klb-userspace-2"].map(String::from)
            )
        );

        // A task still running when the workers stop is dropped, not leaked.
        let (tx, rx) = oneshot::channel::<()>();
        workers.all()[0].spawn(async move {
            let _keep = tx;
            std::future::pending::<()>().await;
        });
        drop(workers);
        assert!(
            tokio::time::timeout(std::time::Duration::from_secs(10), rx)
                .await
                .expect("worker stopped")
                .is_err(),
            "the sender was dropped with its task"
        );
    }
}
