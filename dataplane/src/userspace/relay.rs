//! Byte relay between a client and its endpoint: both directions at once, a half-close passed on
//! to the other side, and no buffer per connection unless a peer is slow.
//!
//! Differences from `tokio::io::copy_bidirectional` that matter per connection:
//! - reads go into one [`SCRATCH_BUFFER`]-sized buffer per thread and are written on at once;
//!   only bytes a writer cannot take right now are copied into a buffer of the connection. On a
//!   fast network that never happens, so a short connection allocates and zeroes nothing, an
//!   idle keep-alive connection holds no buffer, and every read can take 64 KiB;
//! - the direction that finishes last does not shut its writer down: both peers have sent their
//!   FIN by then, and closing the sockets (which the caller does next) sends ours, so one
//!   `shutdown(2)` per connection is saved;
//! - between two TCP sockets ([`relay_tcp`]), a direction that has moved [`SPLICE_AFTER`] bytes
//!   (a bulk stream, not a request) switches to `splice(2)` through a pipe of its own: the bytes
//!   go from one socket to the other inside the kernel instead of being copied out to this
//!   process and back in. Short connections never pay for the pipe.

use std::cell::RefCell;
use std::future::poll_fn;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use std::os::fd::OwnedFd;

use rustix::pipe::{PipeFlags, SpliceFlags};
use tokio::io::{AsyncRead, AsyncWrite, Interest, ReadBuf};
use tokio::net::TcpStream;

/// Size of the per-thread read buffer: the most one read moves.
pub const SCRATCH_BUFFER: usize = 64 * 1024;

/// Bytes a direction of [`relay_tcp`] copies before it moves the rest with `splice(2)`: four
/// full reads, past any request or response header, so only bulk transfers open a pipe.
pub const SPLICE_AFTER: u64 = 4 * SCRATCH_BUFFER as u64;

/// The most one `splice(2)` moves: a default pipe's capacity (16 pages).
const SPLICE_CHUNK: usize = 64 * 1024;

thread_local! {
    /// Borrowed only inside one synchronous poll, never across an await, so every connection
    /// relayed by this thread can use it.
    static SCRATCH: RefCell<Box<[u8]>> = RefCell::new(vec![0; SCRATCH_BUFFER].into_boxed_slice());
}

/// Runs `f` with this thread's scratch buffer (it must not await: the buffer is shared by
/// every task of the thread).
pub fn with_scratch<T>(f: impl FnOnce(&mut [u8]) -> T) -> T {
    SCRATCH.with_borrow_mut(|scratch| f(scratch))
}

/// Bytes moved by [`relay`], per direction.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Transferred {
    /// From the client to the endpoint.
    pub to_endpoint: u64,
    /// From the endpoint to the client.
    pub to_client: u64,
}

/// Copies `client` → `endpoint` and `endpoint` → `client` until both have reached end of stream,
/// or until either fails. When one side half-closes while the other still sends, the half-close is
/// passed on with a write shutdown. The caller closes both streams afterwards.
pub async fn relay<C, E>(client: &mut C, endpoint: &mut E) -> io::Result<Transferred>
where
    C: AsyncRead + AsyncWrite + Unpin + ?Sized,
    E: AsyncRead + AsyncWrite + Unpin + ?Sized,
{
    let mut upstream = Direction::default();
    let mut downstream = Direction::default();
    poll_fn(|cx| {
        let up = upstream.poll(cx, &mut *client, &mut *endpoint, downstream.done)?;
        let down = downstream.poll(cx, &mut *endpoint, &mut *client, upstream.done)?;
        if up.is_ready() && down.is_ready() {
            Poll::Ready(Ok(Transferred {
                to_endpoint: upstream.transferred,
                to_client: downstream.transferred,
            }))
        } else {
            Poll::Pending
        }
    })
    .await
}

/// [`relay`] between two TCP sockets, with `splice(2)` for bulk directions (see the module docs).
pub async fn relay_tcp(
    client: &mut TcpStream,
    endpoint: &mut TcpStream,
) -> io::Result<Transferred> {
    let mut upstream = Direction::default();
    let mut downstream = Direction::default();
    poll_fn(|cx| {
        let up = upstream.poll_tcp(cx, &mut *client, &mut *endpoint, downstream.done)?;
        let down = downstream.poll_tcp(cx, &mut *endpoint, &mut *client, upstream.done)?;
        if up.is_ready() && down.is_ready() {
            Poll::Ready(Ok(Transferred {
                to_endpoint: upstream.transferred,
                to_client: downstream.transferred,
            }))
        } else {
            Poll::Pending
        }
    })
    .await
}

/// Puts `prefix` (a PROXY protocol header, or nothing) at the start of `scratch` and what `client`
/// has already sent after it, with at most one read that does not wait, and returns how many bytes
/// that is (`None` when `prefix` does not fit, which no PROXY header does).
///
/// The read goes through the runtime, which takes a just-accepted socket for readable and clears
/// that on a short read or `EAGAIN`, so the relay's first poll does not read again for nothing.
/// A client that has sent nothing yet (the read only registers interest, which the relay renews)
/// or has already half-closed contributes nothing here and is left to [`relay_tcp`].
pub fn first_bytes<C>(
    cx: &mut Context<'_>,
    client: &mut C,
    prefix: &[u8],
    scratch: &mut [u8],
) -> io::Result<Option<usize>>
where
    C: AsyncRead + Unpin + ?Sized,
{
    let Some((head, tail)) = scratch.split_at_mut_checked(prefix.len()) else {
        return Ok(None);
    };
    head.copy_from_slice(prefix);
    let mut read = ReadBuf::new(tail);
    if let Poll::Ready(result) = Pin::new(&mut *client).poll_read(cx, &mut read) {
        result?;
    }
    Ok(Some(prefix.len() + read.filled().len()))
}

/// [`first_bytes`] from a client TCP socket, asking the socket itself when the runtime read
/// nothing.
///
/// The runtime registers a socket accepted moments ago as not readable, whatever it already
/// holds, and its read then does not even try until its event loop has run. Under load the
/// client's first bytes are usually there by the time the connection is handled, so one
/// non-blocking read of the socket lets them leave with the endpoint handshake's last ACK
/// instead of a round later: per such connection a segment, a wakeup of the endpoint and three
/// system calls fewer (`getpeername`, and the later read and write). A client that has sent
/// nothing yet costs one `EAGAIN` read more.
pub fn first_bytes_tcp(
    cx: &mut Context<'_>,
    client: &mut TcpStream,
    prefix: &[u8],
    scratch: &mut [u8],
) -> io::Result<Option<usize>> {
    let Some(len) = first_bytes(cx, client, prefix, scratch)? else {
        return Ok(None);
    };
    if len > prefix.len() {
        return Ok(Some(len));
    }
    let Some(room) = scratch.get_mut(len..) else {
        return Ok(Some(len));
    };
    let socket = socket2::SockRef::from(&*client);
    match io::Read::read(&mut &*socket, room) {
        Ok(read) => Ok(Some(len + read)),
        Err(error)
            if matches!(
                error.kind(),
                io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
            ) =>
        {
            Ok(Some(len))
        }
        Err(error) => Err(error),
    }
}

/// One direction's state.
#[derive(Debug, Default)]
struct Direction {
    /// Bytes read but refused by the writer so far; `pending[written..]` still has to go out.
    pending: Vec<u8>,
    written: usize,
    /// Written since the last flush.
    unflushed: bool,
    /// The reader reached end of stream.
    eof: bool,
    /// End of stream reached and everything written: nothing more to do.
    done: bool,
    transferred: u64,
    /// Set once the direction moves its bytes with `splice(2)`.
    splice: Option<Splice>,
    /// Opening a pipe failed (out of file descriptors, say): this direction keeps copying.
    no_splice: bool,
}

/// A direction's pipe, and how many bytes wait in it.
#[derive(Debug)]
struct Splice {
    read: OwnedFd,
    write: OwnedFd,
    buffered: usize,
}

impl Splice {
    fn open() -> io::Result<Splice> {
        let (read, write) = rustix::pipe::pipe_with(PipeFlags::CLOEXEC | PipeFlags::NONBLOCK)?;
        Ok(Splice {
            read,
            write,
            buffered: 0,
        })
    }
}

/// One non-blocking `splice(2)` from `from` to `to` (one of them a pipe).
fn splice(
    from: &impl std::os::fd::AsFd,
    to: &impl std::os::fd::AsFd,
    len: usize,
) -> io::Result<usize> {
    Ok(rustix::pipe::splice(
        from,
        None,
        to,
        None,
        len,
        SpliceFlags::MOVE | SpliceFlags::NONBLOCK,
    )?)
}

impl Direction {
    /// Moves bytes until the reader ends (`Ready(Ok)`), an I/O error, or nothing can move now.
    /// `other_done` tells whether the opposite direction has already finished, in which case the
    /// writer is not shut down (see the module docs).
    fn poll<R, W>(
        &mut self,
        cx: &mut Context<'_>,
        reader: &mut R,
        writer: &mut W,
        other_done: bool,
    ) -> Poll<io::Result<()>>
    where
        R: AsyncRead + Unpin + ?Sized,
        W: AsyncWrite + Unpin + ?Sized,
    {
        if self.done {
            return Poll::Ready(Ok(()));
        }
        loop {
            // What an earlier write refused goes first, so the byte order holds.
            while self.written < self.pending.len() {
                let written =
                    ready!(Pin::new(&mut *writer).poll_write(cx, &self.pending[self.written..]))?;
                self.wrote(written)?;
                self.written += written;
            }
            self.pending.clear();
            self.written = 0;
            if self.eof {
                if self.unflushed {
                    ready!(Pin::new(&mut *writer).poll_flush(cx))?;
                    self.unflushed = false;
                }
                if !other_done {
                    ready!(Pin::new(&mut *writer).poll_shutdown(cx))?;
                }
                self.done = true;
                return Poll::Ready(Ok(()));
            }
            ready!(SCRATCH.with_borrow_mut(|scratch| self.pass_on(cx, reader, writer, scratch)))?;
        }
    }

    /// One read into `scratch`, written on at once; what the writer refuses is kept in `pending`.
    /// `Ready(Ok)` means: read and written (or end of stream seen), go on.
    fn pass_on<R, W>(
        &mut self,
        cx: &mut Context<'_>,
        reader: &mut R,
        writer: &mut W,
        scratch: &mut [u8],
    ) -> Poll<io::Result<()>>
    where
        R: AsyncRead + Unpin + ?Sized,
        W: AsyncWrite + Unpin + ?Sized,
    {
        let mut read = ReadBuf::new(scratch);
        if Pin::new(&mut *reader)
            .poll_read(cx, &mut read)?
            .is_pending()
        {
            // Nothing to read now: make sure what was written goes out meanwhile.
            if self.unflushed {
                ready!(Pin::new(&mut *writer).poll_flush(cx))?;
                self.unflushed = false;
            }
            return Poll::Pending;
        }
        let filled = read.filled().len();
        if filled == 0 {
            self.eof = true;
            return Poll::Ready(Ok(()));
        }
        let mut offset = 0;
        while offset < filled {
            match Pin::new(&mut *writer).poll_write(cx, &scratch[offset..filled]) {
                Poll::Ready(result) => {
                    let written = result?;
                    self.wrote(written)?;
                    offset += written;
                }
                Poll::Pending => {
                    // `pending` is empty here: an exact reservation keeps it at most one read.
                    self.pending.reserve_exact(filled - offset);
                    self.pending.extend_from_slice(&scratch[offset..filled]);
                    return Poll::Pending;
                }
            }
        }
        Poll::Ready(Ok(()))
    }

    /// [`Direction::poll`] between TCP sockets, switching to `splice(2)` once [`SPLICE_AFTER`]
    /// bytes have been copied and nothing copied is still waiting for the writer.
    fn poll_tcp(
        &mut self,
        cx: &mut Context<'_>,
        reader: &mut TcpStream,
        writer: &mut TcpStream,
        other_done: bool,
    ) -> Poll<io::Result<()>> {
        if self.splice.is_none()
            && !self.no_splice
            && !self.done
            && !self.eof
            && self.transferred >= SPLICE_AFTER
            && self.written == self.pending.len()
        {
            match Splice::open() {
                Ok(pipe) => {
                    // No buffer is needed any more: bytes stay in the kernel from now on.
                    self.pending = Vec::new();
                    self.written = 0;
                    self.splice = Some(pipe);
                }
                Err(error) => {
                    tracing::debug!(%error, "no pipe for splice(2); copying on");
                    self.no_splice = true;
                }
            }
        }
        if self.splice.is_some() {
            self.poll_splice(cx, reader, writer, other_done)
        } else {
            self.poll(cx, reader, writer, other_done)
        }
    }

    /// Moves bytes reader → pipe → writer until the reader ends, an error, or nothing can move.
    fn poll_splice(
        &mut self,
        cx: &mut Context<'_>,
        reader: &mut TcpStream,
        writer: &mut TcpStream,
        other_done: bool,
    ) -> Poll<io::Result<()>> {
        if self.done {
            return Poll::Ready(Ok(()));
        }
        let Some(pipe) = self.splice.as_mut() else {
            return Poll::Ready(Err(io::ErrorKind::InvalidInput.into()));
        };
        loop {
            // What is in the pipe goes first.
            while pipe.buffered > 0 {
                ready!(writer.poll_write_ready(cx))?;
                match writer.try_io(Interest::WRITABLE, || {
                    splice(&pipe.read, &*writer, pipe.buffered)
                }) {
                    Ok(0) => return Poll::Ready(Err(io::ErrorKind::WriteZero.into())),
                    Ok(moved) => {
                        pipe.buffered -= moved;
                        self.transferred += moved as u64;
                    }
                    // try_io cleared the readiness: the next poll_write_ready waits for it.
                    Err(error) if error.kind() == io::ErrorKind::WouldBlock => {}
                    Err(error) => return Poll::Ready(Err(error)),
                }
            }
            if self.eof {
                if !other_done {
                    ready!(Pin::new(&mut *writer).poll_shutdown(cx))?;
                }
                self.done = true;
                return Poll::Ready(Ok(()));
            }
            ready!(reader.poll_read_ready(cx))?;
            // The pipe is empty here, so WouldBlock can only mean the socket has nothing.
            match reader.try_io(Interest::READABLE, || {
                splice(&*reader, &pipe.write, SPLICE_CHUNK)
            }) {
                Ok(0) => self.eof = true,
                Ok(moved) => pipe.buffered = moved,
                Err(error) if error.kind() == io::ErrorKind::WouldBlock => {}
                Err(error) => return Poll::Ready(Err(error)),
            }
        }
    }

    fn wrote(&mut self, written: usize) -> io::Result<()> {
        if written == 0 {
            return Err(io::ErrorKind::WriteZero.into());
        }
        self.transferred += written as u64;
        self.unflushed = true;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use tokio::io::{AsyncReadExt, AsyncWriteExt, duplex};
    use tokio::net::{TcpListener, TcpStream};

    /// A writer that records what it is asked to do. With `limit` set, it takes at most that many
    /// bytes per call and refuses every other call, like a socket whose send buffer is full.
    #[derive(Debug, Default)]
    struct Recorder {
        bytes: Vec<u8>,
        shutdowns: usize,
        largest_write: usize,
        limit: Option<usize>,
        calls: usize,
    }

    impl AsyncWrite for Recorder {
        fn poll_write(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
            buf: &[u8],
        ) -> Poll<io::Result<usize>> {
            self.calls += 1;
            let take = match self.limit {
                Some(_) if self.calls.is_multiple_of(2) => {
                    cx.waker().wake_by_ref();
                    return Poll::Pending;
                }
                Some(limit) => buf.len().min(limit),
                None => buf.len(),
            };
            self.largest_write = self.largest_write.max(take);
            self.bytes.extend_from_slice(&buf[..take]);
            Poll::Ready(Ok(take))
        }

        fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }

        fn poll_shutdown(mut self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            self.shutdowns += 1;
            Poll::Ready(Ok(()))
        }
    }

    fn pattern(len: usize) -> Vec<u8> {
        (0..len).map(|i| (i % 251) as u8).collect()
    }

    /// Polls one direction until it finishes; a byte slice reader is never pending, so only the
    /// writer's refusals make it return early.
    fn drive(direction: &mut Direction, mut reader: &[u8], writer: &mut Recorder, other: bool) {
        let mut cx = Context::from_waker(std::task::Waker::noop());
        for _ in 0..1_000_000 {
            if let Poll::Ready(result) = direction.poll(&mut cx, &mut reader, writer, other) {
                return result.unwrap();
            }
        }
        panic!("the direction never finished");
    }

    #[test]
    fn bytes_arrive_in_order_and_a_buffer_is_kept_only_for_refused_writes() {
        let cases = [
            // (bytes sent, writer limit, largest single write expected)
            (100, None, 100),
            (SCRATCH_BUFFER, None, SCRATCH_BUFFER),
            (SCRATCH_BUFFER + 1, None, SCRATCH_BUFFER),
            (1 << 20, None, SCRATCH_BUFFER),
            (100, Some(7), 7),
            (1 << 20, Some(10_000), 10_000),
        ];
        for (len, limit, largest) in cases {
            let data = pattern(len);
            let mut direction = Direction::default();
            let mut writer = Recorder {
                limit,
                ..Recorder::default()
            };
            drive(&mut direction, &data, &mut writer, false);
            assert_eq!(writer.bytes, data, "{len} bytes, limit {limit:?}");
            assert_eq!(
                writer.largest_write, largest,
                "{len} bytes, limit {limit:?}"
            );
            assert_eq!(direction.transferred, len as u64);
            assert!(direction.done);
            let kept = direction.pending.capacity();
            if limit.is_none() {
                assert_eq!(kept, 0, "nothing refused, nothing allocated");
            } else {
                assert!(kept > 0 && kept <= SCRATCH_BUFFER, "{kept}");
            }
        }
    }

    #[test]
    fn only_the_first_direction_to_finish_shuts_its_writer_down() {
        for (other_done, shutdowns) in [(false, 1), (true, 0)] {
            let mut direction = Direction::default();
            let mut writer = Recorder::default();
            drive(&mut direction, b"bye", &mut writer, other_done);
            assert!(direction.done);
            assert_eq!(writer.shutdowns, shutdowns, "other done: {other_done}");
        }
    }

    #[tokio::test]
    async fn both_directions_flow_and_half_close_is_passed_on() {
        let (mut client, mut client_side) = duplex(1024);
        let (mut endpoint, mut endpoint_side) = duplex(1024);
        let relay = tokio::spawn(async move { relay(&mut client_side, &mut endpoint_side).await });

        // The client sends a request larger than the duplex capacity, then half-closes.
        let request = pattern(100_000);
        let sent = request.clone();
        let writer = tokio::spawn(async move {
            client.write_all(&sent).await.unwrap();
            client.shutdown().await.unwrap();
            client
        });
        let mut received = Vec::new();
        endpoint.read_to_end(&mut received).await.unwrap();
        assert_eq!(received, request, "the endpoint saw the request, then EOF");

        // The endpoint still answers after the client's half-close.
        let mut client = writer.await.unwrap();
        endpoint.write_all(b"response").await.unwrap();
        drop(endpoint);
        let mut answer = Vec::new();
        client.read_to_end(&mut answer).await.unwrap();
        assert_eq!(answer, b"response");
        assert_eq!(
            relay.await.unwrap().unwrap(),
            Transferred {
                to_endpoint: 100_000,
                to_client: 8,
            }
        );
    }

    #[tokio::test]
    async fn a_reset_endpoint_ends_the_relay_with_an_error() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let mut endpoint_side = TcpStream::connect(addr).await.unwrap();
        let (endpoint, _) = listener.accept().await.unwrap();
        let (_client, mut client_side) = duplex(1024);
        // Zero linger: closing sends RST instead of FIN.
        endpoint.set_zero_linger().unwrap();
        drop(endpoint);
        let error = relay(&mut client_side, &mut endpoint_side)
            .await
            .unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::ConnectionReset);
    }

    /// A connected pair of tokio TCP streams.
    async fn tcp_pair() -> (TcpStream, TcpStream) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let connecting = TcpStream::connect(listener.local_addr().unwrap());
        let (accepted, connected) = tokio::join!(listener.accept(), connecting);
        (connected.unwrap(), accepted.unwrap().0)
    }

    #[tokio::test]
    async fn tcp_relay_splices_bulk_directions_and_keeps_every_byte_in_order() {
        // (client → endpoint bytes, endpoint → client bytes): below, at and far above the switch.
        let cases = [
            (10, 20),
            (SPLICE_AFTER as usize, 3),
            (3 << 20, 5 << 20),
            (1, 7 << 20),
        ];
        for (up, down) in cases {
            let (mut client, mut client_side) = tcp_pair().await;
            let (mut endpoint_side, mut endpoint) = tcp_pair().await;
            let relay =
                tokio::spawn(async move { relay_tcp(&mut client_side, &mut endpoint_side).await });
            let request = pattern(up);
            let sent = request.clone();
            let writer = tokio::spawn(async move {
                client.write_all(&sent).await.unwrap();
                client.shutdown().await.unwrap();
                client
            });
            let mut received = Vec::new();
            endpoint.read_to_end(&mut received).await.unwrap();
            assert!(
                received == request,
                "{up} bytes up arrived intact, then EOF"
            );
            let response = pattern(down);
            endpoint.write_all(&response).await.unwrap();
            drop(endpoint);
            let mut client = writer.await.unwrap();
            let mut answer = Vec::new();
            client.read_to_end(&mut answer).await.unwrap();
            assert!(answer == response, "{down} bytes down arrived intact");
            assert_eq!(
                relay.await.unwrap().unwrap(),
                Transferred {
                    to_endpoint: up as u64,
                    to_client: down as u64,
                }
            );
        }
    }

    #[tokio::test]
    async fn only_a_direction_past_the_threshold_opens_a_pipe() {
        for (len, spliced) in [(SPLICE_AFTER as usize - 1, false), (2 << 20, true)] {
            let (mut client, mut reader) = tcp_pair().await;
            let (mut writer, mut endpoint) = tcp_pair().await;
            let data = pattern(len);
            let sent = data.clone();
            let sender = tokio::spawn(async move {
                client.write_all(&sent).await.unwrap();
                client.shutdown().await.unwrap();
            });
            let receiver = tokio::spawn(async move {
                let mut out = Vec::new();
                endpoint.read_to_end(&mut out).await.unwrap();
                out
            });
            let mut direction = Direction::default();
            let mut opened = false;
            poll_fn(|cx| {
                let poll = direction.poll_tcp(cx, &mut reader, &mut writer, true);
                opened |= direction.splice.is_some();
                poll
            })
            .await
            .unwrap();
            drop(writer);
            sender.await.unwrap();
            assert!(receiver.await.unwrap() == data, "{len} bytes in order");
            assert_eq!(opened, spliced, "{len} bytes");
            assert_eq!(direction.transferred, len as u64);
        }
    }

    /// [`first_bytes`] in one poll, as the proxy calls it.
    async fn first_bytes_now<C: AsyncRead + Unpin>(
        client: &mut C,
        prefix: &[u8],
        scratch: &mut [u8],
    ) -> io::Result<Option<usize>> {
        poll_fn(|cx| Poll::Ready(first_bytes(cx, client, prefix, scratch))).await
    }

    #[tokio::test]
    async fn first_bytes_are_the_prefix_then_what_the_client_already_sent() {
        let cases: [(&[u8], &[u8]); 4] = [
            (
                b"PROXY TCP4 1.2.3.4 5.6.7.8 1 2\r\n",
                b"GET / HTTP/1.1\r\n\r\n",
            ),
            (b"", b"hello\n"),
            // The client has not spoken yet: only the prefix.
            (b"PROXY UNKNOWN\r\n", b""),
            (b"", b""),
        ];
        for (prefix, request) in cases {
            let (mut client, mut client_side) = duplex(1024);
            client.write_all(request).await.unwrap();
            let mut scratch = vec![0; SCRATCH_BUFFER];
            let len = first_bytes_now(&mut client_side, prefix, &mut scratch)
                .await
                .unwrap()
                .unwrap();
            assert_eq!(scratch[..len], [prefix, request].concat());
        }
    }

    #[tokio::test]
    async fn a_request_queued_before_the_accept_is_read_in_the_first_poll() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let mut client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        io::Write::write_all(&mut client, b"ping\n").unwrap();
        // As under load: the request is there before the accept, and the accepted socket has
        // never been through the runtime's event loop.
        let (mut accepted, _) = listener.accept().await.unwrap();
        let mut scratch = vec![0; SCRATCH_BUFFER];
        let len = first_bytes_now(&mut accepted, b"H", &mut scratch)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(&scratch[..len], b"Hping\n");
    }

    #[tokio::test]
    async fn a_just_registered_socket_gives_its_queued_bytes_in_the_same_poll() {
        // (bytes the client sent before the accept, bytes expected after the prefix)
        let cases: [(&[u8], &[u8]); 2] = [
            (b"GET / HTTP/1.1\r\n\r\n", b"GET / HTTP/1.1\r\n\r\n"),
            (b"", b""),
        ];
        for (sent, expected) in cases {
            let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            let mut client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
            io::Write::write_all(&mut client, sent).unwrap();
            let (accepted, _) = listener.accept().unwrap();
            accepted.set_nonblocking(true).unwrap();
            // Registered now, and polled before the runtime's event loop has seen it.
            let mut accepted = TcpStream::from_std(accepted).unwrap();
            let mut scratch = vec![0; SCRATCH_BUFFER];
            let len =
                poll_fn(|cx| Poll::Ready(first_bytes_tcp(cx, &mut accepted, b"P:", &mut scratch)))
                    .await
                    .unwrap()
                    .unwrap();
            assert_eq!(scratch[..len], [&b"P:"[..], expected].concat());
        }
    }

    #[tokio::test]
    async fn a_prefix_longer_than_the_buffer_is_refused() {
        let (_client, mut client_side) = duplex(64);
        let fits = first_bytes_now(&mut client_side, &[1, 2, 3], &mut [0; 2])
            .await
            .unwrap();
        assert_eq!(fits, None);
    }
}
