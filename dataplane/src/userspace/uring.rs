//! The io_uring engine for TCP frontends: one ring per worker thread, and no epoll at all.
//!
//! Why: on a short connection the proxy's own cost is mostly system calls around the kernel's
//! TCP work. Through tokio a connection costs an `accept4`, two `epoll_ctl(ADD)`, two
//! `epoll_ctl(DEL)`, the reads and writes of the relay, a `shutdown`, two `close` and a share of
//! the `epoll_wait` round trips. Here every one of those is a submission queue entry, and a worker
//! submits all its entries and collects all its completions with one `io_uring_enter(2)` per loop
//! turn, however many connections moved in that turn. What stays a system call of its own is
//! what must happen at once, before the endpoint is dialled: the client's first bytes
//! (`recv(MSG_DONTWAIT)`), the endpoint socket, its options, `connect(2)` and the send of those
//! first bytes with the handshake's last ACK (see `dial` in the parent module).
//!
//! Per worker:
//! - every listening socket has [`ACCEPTS_PER_LISTENER`] accept requests in flight, each with
//!   its own address buffer, so the client's address comes with the new socket;
//! - a relayed direction has one request in flight at a time: a receive that takes a buffer from
//!   the worker's provided-buffer group only when bytes arrive (an idle keep-alive connection
//!   holds none), then the send of that buffer, then the next receive. A writer that cannot take
//!   more stops its reader, as in the tokio relay;
//! - a connect that does not complete inside `connect(2)` waits in a `POLL_ADD` linked to a
//!   `LINK_TIMEOUT` of the attempt's timeout; a refused or timed-out attempt goes on to the next
//!   endpoint with the client's bytes read so far, as the tokio path does;
//! - a direction that has moved [`SPLICE_AFTER`] bytes (a bulk stream) switches to
//!   `splice(2)` through a pipe of its own, as the tokio relay does: the splices are system
//!   calls of this thread (io_uring's own splice always runs on a kernel worker thread), and
//!   the waits for readiness between them are `POLL_ADD` requests;
//! - the end of one direction is passed on with a plain `shutdown(2)`, not `IORING_OP_SHUTDOWN`
//!   (io_uring always runs that on a kernel worker thread: two thread switches per connection);
//! - sockets are closed with `IORING_OP_CLOSE` once no request of their connection is left.
//!
//! Endpoint choice, affinity, PROXY protocol headers and capture (the listening address) are
//! those of the tokio path: the same pool, the same header, the same `dial`.

#![allow(unsafe_code)] // io_uring: the kernel reads and writes memory the entries point to

use std::collections::VecDeque;
use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, IntoRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use io_uring::types::{CancelBuilder, Fd, Timespec};
use io_uring::{IoUring, cqueue, opcode, squeue};
use rustix::pipe::{PipeFlags, SpliceFlags};
use tokio::time::Instant;

use super::relay::SPLICE_AFTER;
use super::{Dial, Shared, UserspaceConfig, client_part, dial, proxy_protocol};
use crate::model::EndpointAddr;

/// Accept requests in flight per listening socket: a burst of connections is taken in one turn.
pub const ACCEPTS_PER_LISTENER: usize = 4;
/// Size of one provided buffer: the most one receive moves (HAProxy's default `bufsize`).
pub const BUFFER_SIZE: usize = 16 * 1024;
/// Provided buffers per worker. Only directions in the middle of a send hold one, so this caps
/// the bytes in flight through a worker (4 MiB), not its connections. The memory is touched once
/// at start, so the proxy's resident size does not creep up as buffers come into use.
pub const BUFFERS: u16 = 256;
/// Submission queue entries per ring (the completion queue is sized 4× by the kernel default).
const RING_ENTRIES: u32 = 1024;
const BUFFER_GROUP: u16 = 0;
/// The most one `splice(2)` moves: a default pipe's capacity.
const SPLICE_CHUNK: usize = 64 * 1024;
/// Chunks a splicing direction moves per loop turn before it lets the other connections go.
const SPLICE_ROUNDS: usize = 16;
/// Back-off after a failed accept (typically out of file descriptors), as the tokio path does.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

/// Checks that io_uring can be used here with every operation this engine submits; the error
/// says why not (a kernel without it, `kernel.io_uring_disabled`, a seccomp filter, an old
/// kernel missing an operation).
pub fn probe() -> Result<(), String> {
    let ring = IoUring::new(8).map_err(|error| format!("io_uring_setup: {error}"))?;
    let mut probe = io_uring::Probe::new();
    ring.submitter()
        .register_probe(&mut probe)
        .map_err(|error| format!("IORING_REGISTER_PROBE: {error}"))?;
    let needed = [
        ("ACCEPT", opcode::Accept::CODE),
        ("RECV", opcode::Recv::CODE),
        ("SEND", opcode::Send::CODE),
        ("READ", opcode::Read::CODE),
        ("POLL_ADD", opcode::PollAdd::CODE),
        ("LINK_TIMEOUT", opcode::LinkTimeout::CODE),
        ("TIMEOUT", opcode::Timeout::CODE),
        ("PROVIDE_BUFFERS", opcode::ProvideBuffers::CODE),
        ("CLOSE", opcode::Close::CODE),
        ("ASYNC_CANCEL", opcode::AsyncCancel::CODE),
    ];
    for (name, code) in needed {
        if !probe.is_supported(code) {
            return Err(format!("io_uring has no {name} operation"));
        }
    }
    // Cancel by file descriptor (5.19) has no opcode of its own: try it.
    let mut ring = ring;
    let entry = opcode::AsyncCancel2::new(CancelBuilder::fd(Fd(0)).all()).build();
    // SAFETY: the entry points to no memory.
    unsafe { ring.submission().push(&entry) }.map_err(|_| "submission queue full".to_owned())?;
    ring.submit_and_wait(1)
        .map_err(|error| format!("io_uring_enter: {error}"))?;
    let result = ring.completion().next().map_or(0, |cqe| cqe.result());
    if result == -libc::EINVAL {
        return Err("io_uring cannot cancel by file descriptor (kernel older than 5.19)".into());
    }
    Ok(())
}

/// What a worker is asked to do by the control side.
enum Command {
    Listen {
        id: u64,
        socket: Arc<OwnedFd>,
        route: Arc<Route>,
    },
    Unlisten {
        id: u64,
    },
    Stop,
}

/// Commands for one worker, and the eventfd that wakes it.
struct Inbox {
    commands: Mutex<Vec<Command>>,
    wake: OwnedFd,
}

impl Inbox {
    fn send(&self, command: Command) {
        self.commands
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(command);
        let one = 1u64.to_ne_bytes();
        // A full counter (never, in practice) still wakes the worker.
        let _ = rustix::io::write(&self.wake, &one);
    }
}

/// Where a listening socket's connections go.
pub(super) struct Route {
    pub(super) frontend: SocketAddr,
    pub(super) shared: Arc<Shared>,
    pub(super) config: Arc<UserspaceConfig>,
}

/// The io_uring worker threads; dropping this stops them, which closes every connection they
/// relay.
pub(super) struct Engines {
    inboxes: Vec<Arc<Inbox>>,
}

impl std::fmt::Debug for Engines {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engines")
            .field("workers", &self.inboxes.len())
            .finish()
    }
}

impl Engines {
    /// Starts `count` threads named `klb-uring-<i>`, each with its ring.
    pub(super) fn start(count: usize) -> io::Result<Engines> {
        // Dropped on error: stops the workers started so far.
        let mut engines = Engines {
            inboxes: Vec::with_capacity(count),
        };
        for i in 0..count {
            // Blocking: a read request on a non-blocking file would complete at once with EAGAIN.
            // SAFETY: eventfd(2) takes no pointer; a non-negative result is a new descriptor.
            let wake = match unsafe { libc::eventfd(0, libc::EFD_CLOEXEC) } {
                fd if fd >= 0 => unsafe { OwnedFd::from_raw_fd(fd) },
                _ => return Err(io::Error::last_os_error()),
            };
            let inbox = Arc::new(Inbox {
                commands: Mutex::new(Vec::new()),
                wake,
            });
            // The ring is built on its own thread (single issuer), but failures show here.
            let (ready, built) = std::sync::mpsc::channel::<io::Result<()>>();
            let worker_inbox = inbox.clone();
            std::thread::Builder::new()
                .name(format!("klb-uring-{i}"))
                .spawn(move || match Worker::new(worker_inbox) {
                    Ok(mut worker) => {
                        let _ = ready.send(Ok(()));
                        worker.run();
                    }
                    Err(error) => {
                        let _ = ready.send(Err(error));
                    }
                })?;
            built
                .recv()
                .map_err(|_| io::Error::other("io_uring worker died at start"))??;
            engines.inboxes.push(inbox);
        }
        Ok(engines)
    }

    /// Workers, to spread listening sockets over.
    pub(super) fn len(&self) -> usize {
        self.inboxes.len()
    }

    /// Hands `socket` (listening) to worker `index`; its connections go by `route`.
    pub(super) fn listen(&self, index: usize, socket: OwnedFd, route: Arc<Route>) -> UringListener {
        static NEXT_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
        let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        let socket = Arc::new(socket);
        let inbox = self.inboxes[index % self.inboxes.len()].clone();
        inbox.send(Command::Listen {
            id,
            socket: socket.clone(),
            route,
        });
        UringListener {
            id,
            socket,
            inbox,
            closed: AtomicBool::new(false),
        }
    }
}

impl Drop for Engines {
    fn drop(&mut self) {
        for inbox in &self.inboxes {
            inbox.send(Command::Stop);
        }
    }
}

/// One listening socket served by a worker. Closing (or dropping) it stops the socket listening
/// at once, before the worker has even seen the request, so the next client is refused.
pub(super) struct UringListener {
    id: u64,
    socket: Arc<OwnedFd>,
    inbox: Arc<Inbox>,
    closed: AtomicBool,
}

impl std::fmt::Debug for UringListener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UringListener")
            .field("id", &self.id)
            .field("socket", &self.socket.as_raw_fd())
            .finish()
    }
}

impl UringListener {
    fn close(&self) {
        if self.closed.swap(true, Ordering::AcqRel) {
            return;
        }
        // shutdown(2) of a listening TCP socket stops it listening (and resets what waits in its
        // accept queue); the worker then sees its accepts fail and lets go of the socket.
        let _ = socket2::SockRef::from(&*self.socket).shutdown(std::net::Shutdown::Both);
        self.inbox.send(Command::Unlisten { id: self.id });
    }
}

impl Drop for UringListener {
    fn drop(&mut self) {
        self.close();
    }
}

/// What a completion is for: the kind in the low byte, then a slot, then a sub-index.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Wake,
    Accept {
        listener: u32,
        sub: u8,
    },
    AcceptBackoff {
        listener: u32,
        sub: u8,
    },
    Connect {
        conn: u32,
    },
    ConnectTimeout {
        conn: u32,
    },
    Recv {
        conn: u32,
        dir: u8,
    },
    Send {
        conn: u32,
        dir: u8,
    },
    Cancel {
        conn: u32,
    },
    SplicePoll {
        conn: u32,
        dir: u8,
    },
    /// Untracked by any connection: closes, buffer returns, listener cancels.
    Detached,
}

impl Op {
    fn encode(self) -> u64 {
        let (kind, slot, sub) = match self {
            Op::Wake => (0u8, 0u32, 0u8),
            Op::Accept { listener, sub } => (1, listener, sub),
            Op::AcceptBackoff { listener, sub } => (2, listener, sub),
            Op::Connect { conn } => (3, conn, 0),
            Op::ConnectTimeout { conn } => (4, conn, 0),
            Op::Recv { conn, dir } => (5, conn, dir),
            Op::Send { conn, dir } => (6, conn, dir),
            Op::Cancel { conn } => (8, conn, 0),
            Op::Detached => (9, 0, 0),
            Op::SplicePoll { conn, dir } => (10, conn, dir),
        };
        u64::from(kind) | (u64::from(sub) << 8) | (u64::from(slot) << 16)
    }

    fn decode(data: u64) -> Op {
        let slot = (data >> 16) as u32;
        let sub = (data >> 8) as u8;
        match data as u8 {
            0 => Op::Wake,
            1 => Op::Accept {
                listener: slot,
                sub,
            },
            2 => Op::AcceptBackoff {
                listener: slot,
                sub,
            },
            3 => Op::Connect { conn: slot },
            4 => Op::ConnectTimeout { conn: slot },
            5 => Op::Recv {
                conn: slot,
                dir: sub,
            },
            6 => Op::Send {
                conn: slot,
                dir: sub,
            },
            8 => Op::Cancel { conn: slot },
            10 => Op::SplicePoll {
                conn: slot,
                dir: sub,
            },
            _ => Op::Detached,
        }
    }
}

/// One `recv(2)` that does not wait.
fn recv_now(socket: &OwnedFd, buffer: &mut [u8]) -> io::Result<usize> {
    // SAFETY: `buffer` is valid for writes of its length for the duration of the call.
    let read = unsafe {
        libc::recv(
            socket.as_raw_fd(),
            buffer.as_mut_ptr().cast(),
            buffer.len(),
            libc::MSG_DONTWAIT,
        )
    };
    usize::try_from(read).map_err(|_| io::Error::last_os_error())
}

/// One listening socket on this worker.
struct ListenerState {
    id: u64,
    socket: Arc<OwnedFd>,
    route: Arc<Route>,
    /// Peer address buffers of the accept requests (boxed: the kernel writes there).
    addrs: Box<[AcceptAddr; ACCEPTS_PER_LISTENER]>,
    /// Accept requests (or their back-off timers) in flight.
    inflight: usize,
    closing: bool,
}

#[derive(Clone, Copy)]
struct AcceptAddr {
    storage: libc::sockaddr_storage,
    len: libc::socklen_t,
}

impl AcceptAddr {
    fn empty() -> AcceptAddr {
        // SAFETY: sockaddr_storage is plain old data; all zeroes is a valid (unspecified) value.
        let storage = unsafe { std::mem::zeroed::<libc::sockaddr_storage>() };
        AcceptAddr {
            storage,
            len: std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t,
        }
    }

    fn peer(&self) -> Option<SocketAddr> {
        // SAFETY: the kernel wrote a socket address of `len` bytes into `storage`.
        let addr =
            unsafe { socket2::SockAddr::new(std::mem::transmute_copy(&self.storage), self.len) };
        addr.as_socket()
    }
}

/// Where a direction's bytes in flight are.
enum Held {
    /// A provided buffer of the worker, by id.
    Pool(u16),
    /// Bytes of the connection's own (the header and first bytes an early send could not take).
    Owned(Vec<u8>),
}

#[derive(Default)]
enum Flow {
    /// Needs a receive (none in flight).
    #[default]
    Idle,
    Receiving,
    /// Waiting for a provided buffer to come back.
    Starved,
    Sending {
        held: Held,
        offset: usize,
        len: usize,
        /// The direction's next receive is linked behind this send (and already submitted).
        linked: bool,
    },
    /// A bulk direction, moving its bytes with `splice(2)` through a pipe of its own.
    Splicing(Box<Pipe>),
    Done,
}

/// A splicing direction's pipe, and how many bytes wait in it.
struct Pipe {
    read: OwnedFd,
    write: OwnedFd,
    buffered: usize,
}

/// A client connection: being dialled, or relayed.
struct Conn {
    client: OwnedFd,
    peer: SocketAddr,
    route: Arc<Route>,
    endpoint: Option<(EndpointAddr, OwnedFd)>,
    /// Counted in the pool's active connections (given back when the connection ends).
    counted: bool,
    /// Connect attempts made, endpoints that failed, the client's bytes read so far.
    attempts: usize,
    failed: Vec<EndpointAddr>,
    carried: Vec<u8>,
    /// Header and client bytes to send once the pending handshake is over.
    unsent: Vec<u8>,
    /// The running connect attempt's timeout (the kernel reads it at submission).
    timeout: Timespec,
    /// [client → endpoint, endpoint → client].
    flows: [Flow; 2],
    /// Bytes each direction has sent so far (a bulk one switches to `splice(2)`).
    moved: [u64; 2],
    /// Requests of this connection in flight; its slot is freed only at zero.
    inflight: u32,
    closing: bool,
}

impl Conn {
    fn fds(&self, dir: u8) -> (RawFd, RawFd) {
        let client = self.client.as_raw_fd();
        let endpoint = self.endpoint.as_ref().map_or(-1, |(_, fd)| fd.as_raw_fd());
        if dir == 0 {
            (client, endpoint)
        } else {
            (endpoint, client)
        }
    }
}

/// A growable table whose entries keep their slot number (and their boxed contents their
/// address) for life.
struct Slab<T> {
    entries: Vec<Option<Box<T>>>,
    free: Vec<u32>,
}

impl<T> Slab<T> {
    fn new() -> Self {
        Slab {
            entries: Vec::new(),
            free: Vec::new(),
        }
    }

    fn insert(&mut self, value: T) -> u32 {
        let value = Some(Box::new(value));
        match self.free.pop() {
            Some(slot) => {
                self.entries[slot as usize] = value;
                slot
            }
            None => {
                self.entries.push(value);
                (self.entries.len() - 1) as u32
            }
        }
    }

    fn get(&mut self, slot: u32) -> Option<&mut T> {
        self.entries.get_mut(slot as usize)?.as_deref_mut()
    }

    fn remove(&mut self, slot: u32) -> Option<T> {
        let value = self.entries.get_mut(slot as usize)?.take()?;
        self.free.push(slot);
        Some(*value)
    }

    fn slots(&self) -> Vec<u32> {
        (0..self.entries.len() as u32)
            .filter(|slot| self.entries[*slot as usize].is_some())
            .collect()
    }
}

/// One worker thread's engine.
struct Worker {
    ring: IoUring,
    inbox: Arc<Inbox>,
    /// The eventfd counter the wake read lands in.
    wake_buffer: Box<u64>,
    listeners: Slab<ListenerState>,
    conns: Slab<Conn>,
    /// The provided buffers, [`BUFFERS`] × [`BUFFER_SIZE`] bytes.
    buffers: Box<[u8]>,
    /// The ring buffers are handed back through (5.19+); without it, one `PROVIDE_BUFFERS`
    /// request per buffer.
    buf_ring: Option<BufRing>,
    /// Directions waiting for a buffer, oldest first.
    starved: VecDeque<(u32, u8)>,
    /// Client bytes read before the endpoint is dialled, header first.
    scratch: Vec<u8>,
    backoff: Box<Timespec>,
    /// Requests submitted and not completed yet, all kinds.
    inflight: usize,
    stopping: bool,
}

impl Worker {
    fn new(inbox: Arc<Inbox>) -> io::Result<Worker> {
        // One thread submits, and completions are processed when it asks for them: the kernel
        // does no work for this ring from interrupts or other threads (6.1+; plain otherwise).
        let ring = IoUring::builder()
            .setup_single_issuer()
            .setup_defer_taskrun()
            .build(RING_ENTRIES)
            .or_else(|_| IoUring::builder().setup_coop_taskrun().build(RING_ENTRIES))
            .or_else(|_| IoUring::new(RING_ENTRIES))?;
        let mut buffers = vec![0u8; usize::from(BUFFERS) * BUFFER_SIZE].into_boxed_slice();
        // Touch every page now: the resident size is the same before and after traffic.
        for page in buffers.chunks_mut(4096) {
            page[0] = 1;
        }
        let mut worker = Worker {
            ring,
            inbox,
            wake_buffer: Box::new(0),
            listeners: Slab::new(),
            conns: Slab::new(),
            buffers,
            starved: VecDeque::new(),
            scratch: vec![0; super::relay::SCRATCH_BUFFER],
            backoff: Box::new(Timespec::from(ACCEPT_BACKOFF)),
            inflight: 0,
            stopping: false,
            buf_ring: None,
        };
        worker.buf_ring = BufRing::register(&worker.ring);
        if worker.buf_ring.is_some() {
            for id in 0..BUFFERS {
                worker.hand_back(id);
            }
        } else {
            let provide = opcode::ProvideBuffers::new(
                worker.buffers.as_mut_ptr(),
                BUFFER_SIZE as i32,
                BUFFERS,
                BUFFER_GROUP,
                0,
            )
            .build();
            worker.push(provide, Op::Detached);
        }
        worker.arm_wake();
        worker.ring.submit()?;
        Ok(worker)
    }

    /// Queues `entry`, submitting what is queued first when the queue is full.
    fn push(&mut self, entry: squeue::Entry, op: Op) {
        let entry = entry.user_data(op.encode());
        loop {
            // SAFETY: every entry points only to memory that outlives its request: boxed slab
            // entries and the worker's buffers, freed only once no request is in flight.
            let pushed = unsafe { self.ring.submission().push(&entry) };
            if pushed.is_ok() {
                self.inflight += 1;
                return;
            }
            if let Err(error) = self.ring.submit() {
                tracing::warn!(%error, "io_uring submit failed");
            }
        }
    }

    /// Makes room for `entries` consecutive entries in the submission queue.
    fn reserve(&mut self, entries: usize) {
        let free = {
            let queue = self.ring.submission();
            queue.capacity() - queue.len()
        };
        if free < entries
            && let Err(error) = self.ring.submit()
        {
            tracing::warn!(%error, "io_uring submit failed");
        }
    }

    fn arm_wake(&mut self) {
        let entry = opcode::Read::new(
            Fd(self.inbox.wake.as_raw_fd()),
            (&raw mut *self.wake_buffer).cast::<u8>(),
            8,
        )
        .build();
        self.push(entry, Op::Wake);
    }

    fn run(&mut self) {
        let mut completions = Vec::with_capacity(RING_ENTRIES as usize);
        loop {
            if self.stopping && self.inflight == 0 {
                return;
            }
            match self.ring.submit_and_wait(1) {
                Ok(_) => {}
                Err(error) if error.raw_os_error() == Some(libc::EINTR) => {}
                // The completion queue is full: reap it below, then submit again.
                Err(error) if error.raw_os_error() == Some(libc::EBUSY) => {}
                Err(error) => {
                    tracing::error!(%error, "io_uring_enter failed; this worker stops");
                    return;
                }
            }
            completions.clear();
            completions.extend(
                self.ring
                    .completion()
                    .map(|cqe| (cqe.user_data(), cqe.result(), cqe.flags())),
            );
            for &(data, result, flags) in &completions {
                self.inflight -= 1;
                self.complete(Op::decode(data), result, flags);
            }
        }
    }

    fn complete(&mut self, op: Op, result: i32, flags: u32) {
        match op {
            Op::Wake => self.on_wake(),
            Op::Accept { listener, sub } => self.on_accept(listener, sub, result),
            Op::AcceptBackoff { listener, sub } => {
                if let Some(state) = self.listeners.get(listener) {
                    state.inflight -= 1;
                }
                self.arm_accept(listener, sub);
            }
            Op::Connect { conn } => self.on_connect(conn, result),
            Op::ConnectTimeout { conn } | Op::Cancel { conn } => self.settle(conn),
            Op::Recv { conn, dir } => self.on_recv(conn, dir, result, flags),
            Op::Send { conn, dir } => self.on_send(conn, dir, result),
            Op::SplicePoll { conn, dir } => self.on_splice_poll(conn, dir, result),
            Op::Detached => {
                if result < 0 && result != -libc::ENOENT && result != -libc::EALREADY {
                    tracing::trace!(error = %io::Error::from_raw_os_error(-result), "io_uring request failed");
                }
            }
        }
    }

    fn on_wake(&mut self) {
        let commands = std::mem::take(
            &mut *self
                .inbox
                .commands
                .lock()
                .unwrap_or_else(PoisonError::into_inner),
        );
        for command in commands {
            match command {
                Command::Listen { id, socket, route } => {
                    let slot = self.listeners.insert(ListenerState {
                        id,
                        socket,
                        route,
                        addrs: Box::new([AcceptAddr::empty(); ACCEPTS_PER_LISTENER]),
                        inflight: 0,
                        closing: false,
                    });
                    for sub in 0..ACCEPTS_PER_LISTENER as u8 {
                        self.arm_accept(slot, sub);
                    }
                }
                Command::Unlisten { id } => {
                    for slot in self.listeners.slots() {
                        if self.listeners.get(slot).is_some_and(|state| state.id == id) {
                            self.unlisten(slot);
                        }
                    }
                }
                Command::Stop => self.stop(),
            }
        }
        if !self.stopping {
            self.arm_wake();
        }
    }

    /// Stops accepting on `slot`; its state goes once no accept is in flight.
    fn unlisten(&mut self, slot: u32) {
        let Some(state) = self.listeners.get(slot) else {
            return;
        };
        state.closing = true;
        let fd = state.socket.as_raw_fd();
        let inflight = state.inflight;
        if inflight == 0 {
            self.listeners.remove(slot);
            return;
        }
        let cancel = opcode::AsyncCancel2::new(CancelBuilder::fd(Fd(fd)).all()).build();
        self.push(cancel, Op::Detached);
    }

    fn stop(&mut self) {
        self.stopping = true;
        for slot in self.listeners.slots() {
            self.unlisten(slot);
        }
        for conn in self.conns.slots() {
            self.abort(conn);
        }
    }

    fn arm_accept(&mut self, listener: u32, sub: u8) {
        let stopping = self.stopping;
        let Some(state) = self.listeners.get(listener) else {
            return;
        };
        if state.closing || stopping {
            if state.inflight == 0 {
                self.listeners.remove(listener);
            }
            return;
        }
        let addr = &mut state.addrs[usize::from(sub)];
        addr.len = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
        let entry = opcode::Accept::new(
            Fd(state.socket.as_raw_fd()),
            (&raw mut addr.storage).cast::<libc::sockaddr>(),
            &raw mut addr.len,
        )
        .flags(libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK)
        .build();
        state.inflight += 1;
        self.push(entry, Op::Accept { listener, sub });
    }

    fn on_accept(&mut self, listener: u32, sub: u8, result: i32) {
        let Some(state) = self.listeners.get(listener) else {
            if result >= 0 {
                // SAFETY: a socket the kernel just gave us and nobody else knows.
                drop(unsafe { OwnedFd::from_raw_fd(result) });
            }
            return;
        };
        state.inflight -= 1;
        if result < 0 {
            if !state.closing && !self.stopping {
                let error = io::Error::from_raw_os_error(-result);
                tracing::warn!(frontend = %state.route.frontend, %error, "accept failed");
                state.inflight += 1;
                let entry = opcode::Timeout::new(&raw const *self.backoff).build();
                self.push(entry, Op::AcceptBackoff { listener, sub });
            } else {
                self.arm_accept(listener, sub);
            }
            return;
        }
        // SAFETY: a socket the kernel just gave us and nobody else knows.
        let client = unsafe { OwnedFd::from_raw_fd(result) };
        let peer = state.addrs[usize::from(sub)].peer();
        let route = state.route.clone();
        self.arm_accept(listener, sub);
        if self.stopping {
            return;
        }
        let Some(peer) = peer else {
            return;
        };
        let conn = self.conns.insert(Conn {
            client,
            peer,
            route,
            endpoint: None,
            counted: false,
            attempts: 0,
            failed: Vec::new(),
            carried: Vec::new(),
            unsent: Vec::new(),
            timeout: Timespec::new(),
            flows: [Flow::Idle, Flow::Idle],
            moved: [0; 2],
            inflight: 0,
            closing: false,
        });
        self.dial_next(conn, true);
    }

    /// Dials the next endpoint for `conn`, reading the client's first bytes when `first`.
    fn dial_next(&mut self, slot: u32, mut first: bool) {
        let Some(conn) = self.conns.get(slot) else {
            return;
        };
        let config = conn.route.config.clone();
        while let Some(timeout) = config.connect_timeouts.get(conn.attempts) {
            let Some(endpoint) =
                conn.route
                    .shared
                    .pool()
                    .pick(conn.peer, &conn.failed, Instant::now())
            else {
                break;
            };
            conn.attempts += 1;
            let header = conn
                .route
                .shared
                .proxy_protocol()
                .map(|version| proxy_protocol::header(version, conn.peer, conn.route.frontend))
                .unwrap_or_default();
            // Header, then the client's bytes: read now (without waiting) on the first attempt
            // or while nothing was read, else those read before a refusal.
            let scratch = &mut self.scratch;
            let mut len = header.len();
            if len + conn.carried.len() > scratch.len() {
                scratch.resize(len + conn.carried.len(), 0);
            }
            scratch[..len].copy_from_slice(&header);
            let read_now = first || conn.carried.is_empty();
            first = false;
            if read_now {
                match recv_now(&conn.client, &mut scratch[len..]) {
                    Ok(read) => len += read,
                    Err(error)
                        if matches!(
                            error.kind(),
                            io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
                        ) => {}
                    Err(error) => {
                        tracing::trace!(frontend = %conn.route.frontend, client = %conn.peer, %error, "client connection failed before dialling");
                        self.give_up(slot);
                        return;
                    }
                }
            } else {
                scratch[len..len + conn.carried.len()].copy_from_slice(&conn.carried);
                len += conn.carried.len();
            }
            let bytes = &scratch[..len];
            match dial(endpoint.socket_addr(), bytes) {
                Ok(Dial::Established(stream, sent)) => {
                    let unsent = bytes[sent..].to_vec();
                    conn.endpoint = Some((endpoint, OwnedFd::from(stream)));
                    self.established(slot, unsent);
                    return;
                }
                Ok(Dial::Connecting(socket)) => {
                    conn.unsent = bytes.to_vec();
                    conn.carried = client_part(bytes, header.len());
                    conn.timeout = Timespec::from(*timeout);
                    let fd = socket.as_raw_fd();
                    conn.endpoint = Some((endpoint, OwnedFd::from(socket)));
                    conn.inflight += 2;
                    let poll = opcode::PollAdd::new(Fd(fd), libc::POLLOUT as u32)
                        .build()
                        .flags(squeue::Flags::IO_LINK);
                    let limit = opcode::LinkTimeout::new(&raw const conn.timeout).build();
                    // The two entries of a link go in one submission.
                    self.reserve(2);
                    self.push(poll, Op::Connect { conn: slot });
                    self.push(limit, Op::ConnectTimeout { conn: slot });
                    return;
                }
                Err(error) => {
                    tracing::debug!(frontend = %conn.route.frontend, %endpoint, %error, "connect failed, trying another endpoint");
                    conn.carried = client_part(bytes, header.len());
                    conn.failed.push(endpoint);
                }
            }
        }
        tracing::warn!(frontend = %conn.route.frontend, client = %conn.peer, "no endpoint accepted the connection");
        self.give_up(slot);
    }

    /// Ends `slot` without an endpoint; its slot goes once nothing of it is in flight.
    fn give_up(&mut self, slot: u32) {
        if let Some(conn) = self.conns.get(slot) {
            conn.closing = true;
            // A reset, as the epoll engine does: no end of stream that passes for an empty answer.
            super::reset_on_close(&conn.client);
        }
        self.maybe_finish(slot);
    }

    fn on_connect(&mut self, slot: u32, result: i32) {
        let Some(conn) = self.conns.get(slot) else {
            return;
        };
        conn.inflight -= 1;
        if conn.closing {
            self.maybe_finish(slot);
            return;
        }
        let outcome = match (result, &conn.endpoint) {
            (events, Some((_, fd))) if events > 0 => {
                match socket2::SockRef::from(fd).take_error() {
                    Ok(None) => Ok(()),
                    Ok(Some(error)) | Err(error) => Err(error),
                }
            }
            (cancelled, _) if cancelled == -libc::ECANCELED => Err(io::ErrorKind::TimedOut.into()),
            (error, _) => Err(io::Error::from_raw_os_error(-error)),
        };
        match outcome {
            Ok(()) => {
                let unsent = std::mem::take(&mut conn.unsent);
                self.established(slot, unsent);
            }
            Err(error) => {
                let Some((endpoint, socket)) = conn.endpoint.take() else {
                    return;
                };
                tracing::debug!(frontend = %conn.route.frontend, %endpoint, %error, "connect failed, trying another endpoint");
                conn.failed.push(endpoint);
                conn.unsent.clear();
                // The link timeout's completion may still come: close through the ring after it.
                self.close(socket);
                self.dial_next(slot, false);
            }
        }
    }

    /// The endpoint connection is up: count it, send what is left of the first bytes, relay.
    fn established(&mut self, slot: u32, unsent: Vec<u8>) {
        let Some(conn) = self.conns.get(slot) else {
            return;
        };
        if let Some((endpoint, _)) = &conn.endpoint {
            conn.route.shared.pool().connected(*endpoint);
            conn.counted = true;
        }
        conn.carried = Vec::new();
        if unsent.is_empty() {
            self.receive(slot, 0);
        } else {
            let len = unsent.len();
            conn.flows[0] = Flow::Sending {
                held: Held::Owned(unsent),
                offset: 0,
                len,
                linked: false,
            };
            self.send(slot, 0);
        }
        self.receive(slot, 1);
    }

    fn receive(&mut self, slot: u32, dir: u8) {
        let Some(conn) = self.conns.get(slot) else {
            return;
        };
        if conn.closing {
            return;
        }
        let (from, _) = conn.fds(dir);
        conn.flows[usize::from(dir)] = Flow::Receiving;
        conn.inflight += 1;
        let entry = opcode::Recv::new(Fd(from), std::ptr::null_mut(), BUFFER_SIZE as u32)
            .buf_group(BUFFER_GROUP)
            .build()
            .flags(squeue::Flags::BUFFER_SELECT);
        self.push(entry, Op::Recv { conn: slot, dir });
    }

    /// Sends what direction `dir` holds. A whole buffer that does not take the direction past
    /// the splice switch is sent with `MSG_WAITALL` and the next receive linked behind it, so
    /// both go in one submission instead of one loop turn each.
    fn send(&mut self, slot: u32, dir: u8) {
        let buffers = self.buffers.as_ptr();
        let Some(conn) = self.conns.get(slot) else {
            return;
        };
        let (from, to) = conn.fds(dir);
        let moved = conn.moved[usize::from(dir)];
        let Flow::Sending {
            held,
            offset,
            len,
            linked,
        } = &mut conn.flows[usize::from(dir)]
        else {
            return;
        };
        let start = match held {
            // SAFETY: in bounds: buffer `id` of the group, `offset < len <= BUFFER_SIZE`.
            Held::Pool(id) => unsafe { buffers.add(usize::from(*id) * BUFFER_SIZE + *offset) },
            // SAFETY: `offset < len == bytes.len()`; the Vec lives in the boxed connection.
            Held::Owned(bytes) => unsafe { bytes.as_ptr().add(*offset) },
        };
        let remaining = (*len - *offset) as u32;
        *linked = *offset == 0 && moved + u64::from(remaining) < SPLICE_AFTER;
        let link = *linked;
        let mut entry = opcode::Send::new(Fd(to), start, remaining)
            .flags(libc::MSG_NOSIGNAL | if link { libc::MSG_WAITALL } else { 0 })
            .build();
        if !link {
            conn.inflight += 1;
            self.push(entry, Op::Send { conn: slot, dir });
            return;
        }
        conn.inflight += 2;
        entry = entry.flags(squeue::Flags::IO_LINK);
        let receive = opcode::Recv::new(Fd(from), std::ptr::null_mut(), BUFFER_SIZE as u32)
            .buf_group(BUFFER_GROUP)
            .build()
            .flags(squeue::Flags::BUFFER_SELECT);
        self.reserve(2);
        self.push(entry, Op::Send { conn: slot, dir });
        self.push(receive, Op::Recv { conn: slot, dir });
    }

    fn on_recv(&mut self, slot: u32, dir: u8, result: i32, flags: u32) {
        /// What a receive's completion leads to.
        enum Next {
            Send,
            EndOfStream,
            Starved,
            Fail(i32),
            Closing,
        }
        let buffer = cqueue::buffer_select(flags);
        let Some(conn) = self.conns.get(slot) else {
            if let Some(id) = buffer {
                self.give_back(id);
            }
            return;
        };
        conn.inflight -= 1;
        let flow = &mut conn.flows[usize::from(dir)];
        let next = match (result, buffer) {
            _ if conn.closing => Next::Closing,
            (read, Some(id)) if read > 0 => {
                *flow = Flow::Sending {
                    held: Held::Pool(id),
                    offset: 0,
                    len: read as usize,
                    linked: false,
                };
                Next::Send
            }
            (0, _) => Next::EndOfStream,
            (error, None) if error == -libc::ENOBUFS => {
                *flow = Flow::Starved;
                Next::Starved
            }
            (error, _) => Next::Fail(error),
        };
        if !matches!(next, Next::Send)
            && let Some(id) = buffer
        {
            self.give_back(id);
        }
        match next {
            Next::Send => self.send(slot, dir),
            Next::EndOfStream => self.end_of_stream(slot, dir),
            Next::Starved => self.starved.push_back((slot, dir)),
            Next::Fail(error) => {
                if error < 0 {
                    tracing::trace!(error = %io::Error::from_raw_os_error(-error), "connection ended with an error");
                }
                self.abort(slot);
            }
            Next::Closing => self.maybe_finish(slot),
        }
    }

    /// The reader of `dir` reached end of stream: pass the half-close on, unless the other
    /// direction has already ended, in which case the close that follows sends the FIN (see the
    /// relay module).
    fn end_of_stream(&mut self, slot: u32, dir: u8) {
        let Some(conn) = self.conns.get(slot) else {
            return;
        };
        let other_ended = matches!(conn.flows[usize::from(1 - dir)], Flow::Done);
        conn.flows[usize::from(dir)] = Flow::Done;
        if other_ended {
            self.maybe_finish(slot);
            return;
        }
        // shutdown(2) directly, not through the ring: io_uring always hands a shutdown to a
        // kernel worker thread (it may block in general), which costs two thread switches per
        // connection; on a TCP socket it only queues a FIN and returns.
        let (_, to) = conn.fds(dir);
        // SAFETY: `to` is a socket this connection owns, open until `finish_now`.
        if unsafe { libc::shutdown(to, libc::SHUT_WR) } < 0 {
            let error = io::Error::last_os_error();
            tracing::trace!(frontend = %conn.route.frontend, client = %conn.peer, %error, "shutdown failed");
            self.abort(slot);
        }
    }

    fn on_send(&mut self, slot: u32, dir: u8, result: i32) {
        let Some(conn) = self.conns.get(slot) else {
            return;
        };
        conn.inflight -= 1;
        let closing = conn.closing;
        let flow = &mut conn.flows[usize::from(dir)];
        let Flow::Sending {
            held: _,
            offset,
            len,
            linked,
        } = flow
        else {
            return;
        };
        let linked = *linked;
        // MSG_WAITALL came back short (a signal, say) while the linked receive already runs:
        // the order of the bytes cannot be kept, so the connection ends.
        let mut cut_short = false;
        if result > 0 && !closing {
            conn.moved[usize::from(dir)] += result as u64;
            *offset += result as usize;
            if *offset < *len {
                if !linked {
                    self.send(slot, dir);
                    return;
                }
                cut_short = true;
            }
        }
        let pool = match std::mem::take(flow) {
            Flow::Sending {
                held: Held::Pool(id),
                ..
            } => Some(id),
            _ => None,
        };
        if let Some(id) = pool {
            self.give_back(id);
        }
        if closing {
            self.maybe_finish(slot);
        } else if result <= 0 || cut_short {
            if result < 0 {
                tracing::trace!(error = %io::Error::from_raw_os_error(-result), "connection ended with an error");
            }
            self.abort(slot);
        } else if linked {
            if let Some(conn) = self.conns.get(slot) {
                conn.flows[usize::from(dir)] = Flow::Receiving;
            }
        } else if self
            .conns
            .get(slot)
            .is_some_and(|conn| conn.moved[usize::from(dir)] >= SPLICE_AFTER)
        {
            self.start_splicing(slot, dir);
        } else {
            self.receive(slot, dir);
        }
    }

    /// Moves direction `dir` to `splice(2)`; it keeps copying when no pipe can be had.
    fn start_splicing(&mut self, slot: u32, dir: u8) {
        let Some(conn) = self.conns.get(slot) else {
            return;
        };
        match rustix::pipe::pipe_with(PipeFlags::CLOEXEC | PipeFlags::NONBLOCK) {
            Ok((read, write)) => {
                conn.flows[usize::from(dir)] = Flow::Splicing(Box::new(Pipe {
                    read,
                    write,
                    buffered: 0,
                }));
                self.splice_some(slot, dir);
            }
            Err(error) => {
                // Out of descriptors, say: copying still works.
                tracing::debug!(%error, "no pipe for splice(2); copying instead");
                conn.moved[usize::from(dir)] = 0;
                self.receive(slot, dir);
            }
        }
    }

    /// Splices what can move now, then waits (through the ring) for the side that blocked; at
    /// most [`SPLICE_ROUNDS`] chunks per turn, so one fast stream does not starve the rest.
    fn splice_some(&mut self, slot: u32, dir: u8) {
        /// What a splicing direction waits for next.
        enum Next {
            Readable(RawFd),
            Writable(RawFd),
            EndOfStream,
            Fail(io::Error),
        }
        let Some(conn) = self.conns.get(slot) else {
            return;
        };
        let (from, to) = conn.fds(dir);
        let Flow::Splicing(pipe) = &mut conn.flows[usize::from(dir)] else {
            return;
        };
        let flags = SpliceFlags::MOVE | SpliceFlags::NONBLOCK;
        let mut next = None;
        for _ in 0..SPLICE_ROUNDS {
            if pipe.buffered > 0 {
                // SAFETY: `to` is the connection's open socket, borrowed for this call only.
                let writer = unsafe { BorrowedFd::borrow_raw(to) };
                match rustix::pipe::splice(&pipe.read, None, writer, None, pipe.buffered, flags) {
                    Ok(0) => {
                        next = Some(Next::Fail(io::ErrorKind::WriteZero.into()));
                        break;
                    }
                    Ok(moved) => pipe.buffered -= moved,
                    Err(rustix::io::Errno::AGAIN) => {
                        next = Some(Next::Writable(to));
                        break;
                    }
                    Err(rustix::io::Errno::INTR) => {}
                    Err(error) => {
                        next = Some(Next::Fail(error.into()));
                        break;
                    }
                }
                continue;
            }
            // SAFETY: `from` is the connection's open socket, borrowed for this call only.
            let reader = unsafe { BorrowedFd::borrow_raw(from) };
            match rustix::pipe::splice(reader, None, &pipe.write, None, SPLICE_CHUNK, flags) {
                Ok(0) => {
                    next = Some(Next::EndOfStream);
                    break;
                }
                Ok(moved) => pipe.buffered = moved,
                Err(rustix::io::Errno::AGAIN) => {
                    next = Some(Next::Readable(from));
                    break;
                }
                Err(rustix::io::Errno::INTR) => {}
                Err(error) => {
                    next = Some(Next::Fail(error.into()));
                    break;
                }
            }
        }
        // Out of rounds: yield to the other connections, resuming on the side with work
        // (a poll that is already satisfied completes in the next turn).
        let next = next.unwrap_or(if pipe.buffered > 0 {
            Next::Writable(to)
        } else {
            Next::Readable(from)
        });
        let (fd, events) = match next {
            Next::Readable(fd) => (fd, libc::POLLIN),
            Next::Writable(fd) => (fd, libc::POLLOUT),
            Next::EndOfStream => return self.end_of_stream(slot, dir),
            Next::Fail(error) => {
                tracing::trace!(%error, "connection ended with an error");
                return self.abort(slot);
            }
        };
        conn.inflight += 1;
        let entry = opcode::PollAdd::new(Fd(fd), events as u32).build();
        self.push(entry, Op::SplicePoll { conn: slot, dir });
    }

    fn on_splice_poll(&mut self, slot: u32, dir: u8, result: i32) {
        let Some(conn) = self.conns.get(slot) else {
            return;
        };
        conn.inflight -= 1;
        if conn.closing {
            self.maybe_finish(slot);
        } else if result < 0 {
            self.abort(slot);
        } else {
            // Readiness, or an error the next splice reports.
            self.splice_some(slot, dir);
        }
    }

    /// Returns buffer `id` to the group, and wakes a direction that waited for one.
    fn give_back(&mut self, id: u16) {
        self.hand_back(id);
        while let Some((slot, dir)) = self.starved.pop_front() {
            let waiting = self.conns.get(slot).is_some_and(|conn| {
                !conn.closing && matches!(conn.flows[usize::from(dir)], Flow::Starved)
            });
            if waiting {
                self.receive(slot, dir);
                break;
            }
        }
    }

    /// Makes buffer `id` available to receives again.
    fn hand_back(&mut self, id: u16) {
        // SAFETY: buffer `id` is inside the provided memory.
        let addr = unsafe { self.buffers.as_mut_ptr().add(usize::from(id) * BUFFER_SIZE) };
        if let Some(ring) = &mut self.buf_ring {
            ring.push(addr, id);
            return;
        }
        let entry =
            opcode::ProvideBuffers::new(addr, BUFFER_SIZE as i32, 1, BUFFER_GROUP, id).build();
        self.push(entry, Op::Detached);
    }

    /// Ends `slot` after an error: cancels what is in flight; the sockets close once nothing is.
    fn abort(&mut self, slot: u32) {
        let Some(conn) = self.conns.get(slot) else {
            return;
        };
        if conn.closing {
            return;
        }
        conn.closing = true;
        // Aborted relays lost bytes: both peers see a reset, not an end of stream.
        super::reset_on_close(&conn.client);
        if let Some((_, endpoint)) = &conn.endpoint {
            super::reset_on_close(endpoint);
        }
        if conn.inflight > 0 {
            let mut fds = vec![conn.client.as_raw_fd()];
            if let Some((_, fd)) = &conn.endpoint {
                fds.push(fd.as_raw_fd());
            }
            conn.inflight += fds.len() as u32;
            for fd in fds {
                let entry = opcode::AsyncCancel2::new(CancelBuilder::fd(Fd(fd)).all()).build();
                self.push(entry, Op::Cancel { conn: slot });
            }
        }
        self.maybe_finish(slot);
    }

    /// A cancel or link timeout of `slot` completed.
    fn settle(&mut self, slot: u32) {
        if let Some(conn) = self.conns.get(slot) {
            conn.inflight -= 1;
        }
        self.maybe_finish(slot);
    }

    /// Frees `slot` when both directions are over (or it was aborted) and nothing is in flight.
    fn maybe_finish(&mut self, slot: u32) {
        let Some(conn) = self.conns.get(slot) else {
            return;
        };
        let over = conn.closing || conn.flows.iter().all(|flow| matches!(flow, Flow::Done));
        if over && conn.inflight == 0 {
            self.finish_now(slot);
        }
    }

    fn finish_now(&mut self, slot: u32) {
        let Some(conn) = self.conns.remove(slot) else {
            return;
        };
        if let Some((endpoint, socket)) = conn.endpoint {
            if conn.counted {
                conn.route.shared.pool().disconnected(endpoint);
            }
            self.close(socket);
        }
        self.close(conn.client);
    }

    fn close(&mut self, socket: OwnedFd) {
        let fd = socket.into_raw_fd();
        self.push(opcode::Close::new(Fd(fd)).build(), Op::Detached);
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        // Only reached once nothing is in flight (or the ring failed, when the kernel tears the
        // requests down with the ring before the buffers below are freed... it does not wait:
        // keep the buffers alive rather than let a late receive write into freed memory).
        if self.inflight > 0 {
            std::mem::forget(std::mem::take(&mut self.buffers));
            std::mem::forget(self.buf_ring.take());
        } else if self.buf_ring.is_some() {
            // Synchronous, unlike the ring's own teardown: the kernel lets go of the ring
            // memory before it is freed.
            let _ = self.ring.submitter().unregister_buf_ring(BUFFER_GROUP);
        }
    }
}

/// A provided-buffer ring: entries the kernel takes buffers from, in memory shared with it.
struct BufRing {
    entries: std::ptr::NonNull<io_uring::types::BufRingEntry>,
    /// Entries published so far (wrapping); the kernel's head follows it.
    tail: u16,
}

impl BufRing {
    fn layout() -> std::alloc::Layout {
        let size = usize::from(BUFFERS) * std::mem::size_of::<io_uring::types::BufRingEntry>();
        // Page-aligned, as the kernel requires of ring memory it pins.
        std::alloc::Layout::from_size_align(size.max(4096), 4096).unwrap_or_else(|_| unreachable!())
    }

    /// Registers a ring of [`BUFFERS`] entries as group [`BUFFER_GROUP`], or `None` when the
    /// kernel has none (older than 5.19).
    fn register(ring: &IoUring) -> Option<BufRing> {
        // SAFETY: the layout has a non-zero size.
        let memory = unsafe { std::alloc::alloc_zeroed(Self::layout()) };
        let entries = std::ptr::NonNull::new(memory.cast::<io_uring::types::BufRingEntry>())?;
        let this = BufRing { entries, tail: 0 };
        // SAFETY: the memory is page-aligned, holds BUFFERS entries, and lives until this ring
        // is dropped, after the io_uring it is registered with (see Worker's fields).
        let registered = unsafe {
            ring.submitter()
                .register_buf_ring_with_flags(memory as u64, BUFFERS, BUFFER_GROUP, 0)
        };
        registered.ok().map(|()| this)
    }

    /// Publishes buffer `id` at `addr`.
    fn push(&mut self, addr: *mut u8, id: u16) {
        let mask = BUFFERS - 1;
        // SAFETY: the index is masked to the ring's size; the kernel reads an entry only once
        // the tail below covers it.
        unsafe {
            let entry = &mut *self.entries.as_ptr().add(usize::from(self.tail & mask));
            entry.set_addr(addr as u64);
            entry.set_len(BUFFER_SIZE as u32);
            entry.set_bid(id);
        }
        self.tail = self.tail.wrapping_add(1);
        // SAFETY: the tail field lies in the ring's first entry; the kernel reads it
        // concurrently, hence the atomic release store.
        let tail = unsafe {
            &*io_uring::types::BufRingEntry::tail(self.entries.as_ptr())
                .cast::<std::sync::atomic::AtomicU16>()
        };
        tail.store(self.tail, Ordering::Release);
    }
}

impl Drop for BufRing {
    fn drop(&mut self) {
        // SAFETY: allocated in `register` with this layout.
        unsafe { std::alloc::dealloc(self.entries.as_ptr().cast(), Self::layout()) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn completion_tags_round_trip() {
        let ops = [
            Op::Wake,
            Op::Accept {
                listener: 7,
                sub: 3,
            },
            Op::AcceptBackoff {
                listener: u32::MAX,
                sub: 1,
            },
            Op::Connect { conn: 12 },
            Op::ConnectTimeout { conn: 12 },
            Op::Recv {
                conn: 1 << 30,
                dir: 1,
            },
            Op::Send { conn: 0, dir: 0 },
            Op::Cancel { conn: 9 },
            Op::SplicePoll { conn: 3, dir: 1 },
            Op::Detached,
        ];
        for op in ops {
            assert_eq!(Op::decode(op.encode()), op);
        }
    }

    #[test]
    fn this_kernel_has_what_the_engine_needs() {
        // The machines this project runs its tests on have io_uring (kernel 6.x, not disabled).
        if let Err(why) = probe() {
            assert!(
                std::env::var_os("CI").is_none(),
                "io_uring unavailable under CI: {why}"
            );
            eprintln!("SKIPPED: io_uring unavailable: {why}");
        }
    }
}
