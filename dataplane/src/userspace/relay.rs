//! Byte relay between a client and its endpoint: both directions at once, a half-close passed on
//! to the other side, and per-direction buffers that start small and grow only for bulk traffic.
//!
//! Differences from `tokio::io::copy_bidirectional` that matter per connection:
//! - a direction starts with [`INITIAL_BUFFER`] bytes and doubles up to [`MAX_BUFFER`] only after
//!   a read filled its buffer, so short request/response connections do not pay for zeroing two
//!   64 KiB buffers, while bulk transfers still move 64 KiB per system call;
//! - the direction that finishes last does not shut its writer down: both peers have sent their
//!   FIN by then, and closing the sockets (which the caller does next) sends ours, so one
//!   `shutdown(2)` per connection is saved.

use std::future::poll_fn;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// First buffer size of each direction.
pub const INITIAL_BUFFER: usize = 8 * 1024;

/// Largest buffer a direction grows to.
pub const MAX_BUFFER: usize = 64 * 1024;

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
    let mut upstream = Direction::new();
    let mut downstream = Direction::new();
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

/// One direction's state: bytes in `buffer[start..end]` are read and not yet written.
#[derive(Debug)]
struct Direction {
    buffer: Vec<u8>,
    start: usize,
    end: usize,
    /// The last read filled the whole buffer: use a bigger one once it is drained.
    grow: bool,
    /// Written since the last flush.
    unflushed: bool,
    /// The reader reached end of stream.
    eof: bool,
    /// End of stream reached and everything written: nothing more to do.
    done: bool,
    transferred: u64,
}

impl Direction {
    fn new() -> Self {
        Direction {
            buffer: vec![0; INITIAL_BUFFER],
            start: 0,
            end: 0,
            grow: false,
            unflushed: false,
            eof: false,
            done: false,
            transferred: 0,
        }
    }

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
            if self.start == self.end && !self.eof {
                let mut read = ReadBuf::new(&mut self.buffer);
                match Pin::new(&mut *reader).poll_read(cx, &mut read) {
                    Poll::Ready(result) => result?,
                    Poll::Pending => {
                        // Nothing to read now: make sure what was written goes out meanwhile.
                        if self.unflushed {
                            ready!(Pin::new(&mut *writer).poll_flush(cx))?;
                            self.unflushed = false;
                        }
                        return Poll::Pending;
                    }
                }
                let filled = read.filled().len();
                if filled == 0 {
                    self.eof = true;
                } else {
                    self.grow = filled == self.buffer.len() && self.buffer.len() < MAX_BUFFER;
                    self.start = 0;
                    self.end = filled;
                }
            }
            while self.start < self.end {
                let written = ready!(
                    Pin::new(&mut *writer).poll_write(cx, &self.buffer[self.start..self.end])
                )?;
                if written == 0 {
                    return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
                }
                self.start += written;
                self.transferred += written as u64;
                self.unflushed = true;
            }
            if self.grow {
                self.buffer = vec![0; (self.buffer.len() * 2).min(MAX_BUFFER)];
                self.grow = false;
            }
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
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use tokio::io::{AsyncReadExt, AsyncWriteExt, duplex};
    use tokio::net::{TcpListener, TcpStream};

    /// A writer that records what it is asked to do.
    #[derive(Debug, Default)]
    struct Recorder {
        bytes: Vec<u8>,
        shutdowns: usize,
        largest_write: usize,
    }

    impl AsyncWrite for Recorder {
        fn poll_write(
            mut self: Pin<&mut Self>,
            _: &mut Context<'_>,
            buf: &[u8],
        ) -> Poll<io::Result<usize>> {
            self.largest_write = self.largest_write.max(buf.len());
            self.bytes.extend_from_slice(buf);
            Poll::Ready(Ok(buf.len()))
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

    fn drive(direction: &mut Direction, reader: &mut &[u8], writer: &mut Recorder, other: bool) {
        let waker = std::task::Waker::noop();
        let mut cx = Context::from_waker(waker);
        // A byte slice and the recorder never return Pending.
        assert!(direction.poll(&mut cx, reader, writer, other).is_ready());
    }

    #[test]
    fn buffers_grow_only_under_bulk_traffic_and_keep_byte_order() {
        let cases = [
            // (bytes sent, largest single write expected)
            (100, 100),
            (INITIAL_BUFFER, INITIAL_BUFFER),
            (INITIAL_BUFFER + 1, INITIAL_BUFFER),
            (3 * INITIAL_BUFFER, 2 * INITIAL_BUFFER),
            (1 << 20, MAX_BUFFER),
        ];
        for (len, largest) in cases {
            let data = pattern(len);
            let mut direction = Direction::new();
            let mut writer = Recorder::default();
            drive(&mut direction, &mut data.as_slice(), &mut writer, false);
            assert_eq!(writer.bytes, data, "{len} bytes");
            assert_eq!(writer.largest_write, largest, "{len} bytes");
            assert_eq!(direction.transferred, len as u64);
            assert!(direction.buffer.len() <= MAX_BUFFER);
        }
    }

    #[test]
    fn only_the_first_direction_to_finish_shuts_its_writer_down() {
        for (other_done, shutdowns) in [(false, 1), (true, 0)] {
            let mut direction = Direction::new();
            let mut writer = Recorder::default();
            drive(&mut direction, &mut &b"bye"[..], &mut writer, other_done);
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
}
