//! Raw `AF_PACKET` sockets bound to one interface, on tokio's reactor. The only unsafe code of
//! the responder: five libc calls (`socket`, `bind`, `setsockopt`, `recvfrom`, `send`), each on a
//! descriptor this type owns and with buffers whose lengths are passed alongside.
#![allow(unsafe_code)] // FFI to the packet socket calls; no dependency wraps sockaddr_ll

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use tokio::io::unix::AsyncFd;

/// A classic BPF instruction (`struct sock_filter`).
pub type FilterInstruction = libc::sock_filter;

/// Accepts only ICMPv6 neighbour solicitations without extension headers, so an NDP socket is
/// not handed every IPv6 frame of the interface. Offsets count from the Ethernet header.
pub const NEIGHBOR_SOLICITATION_FILTER: [FilterInstruction; 6] = [
    // A = IPv6 next header
    libc::sock_filter {
        code: 0x30,
        jt: 0,
        jf: 0,
        k: 14 + 6,
    },
    // if A == ICMPv6 continue else drop
    libc::sock_filter {
        code: 0x15,
        jt: 0,
        jf: 3,
        k: 58,
    },
    // A = ICMPv6 type
    libc::sock_filter {
        code: 0x30,
        jt: 0,
        jf: 0,
        k: 14 + 40,
    },
    // if A == neighbour solicitation accept else drop
    libc::sock_filter {
        code: 0x15,
        jt: 0,
        jf: 1,
        k: 135,
    },
    libc::sock_filter {
        code: 0x06,
        jt: 0,
        jf: 0,
        k: 0xffff,
    },
    libc::sock_filter {
        code: 0x06,
        jt: 0,
        jf: 0,
        k: 0,
    },
];

/// A packet socket of one EtherType on one interface.
#[derive(Debug)]
pub struct PacketSocket {
    fd: AsyncFd<OwnedFd>,
}

fn check(result: libc::c_int) -> io::Result<libc::c_int> {
    if result < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(result)
    }
}

fn size_of_as_socklen<T>() -> libc::socklen_t {
    libc::socklen_t::try_from(std::mem::size_of::<T>()).unwrap_or(libc::socklen_t::MAX)
}

impl PacketSocket {
    /// Opens a socket receiving frames of `ethertype` on interface `ifindex`, optionally
    /// narrowed by `filter`; `all_multicast` also receives multicast frames the interface has
    /// not joined (solicited-node groups of the addresses announced).
    pub fn open(
        ifindex: u32,
        ethertype: u16,
        filter: Option<&[FilterInstruction]>,
        all_multicast: bool,
    ) -> io::Result<PacketSocket> {
        let protocol = ethertype.to_be();
        // SAFETY: plain syscall; the result is checked before it becomes an OwnedFd.
        let raw = check(unsafe {
            libc::socket(
                libc::AF_PACKET,
                libc::SOCK_RAW | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
                libc::c_int::from(protocol),
            )
        })?;
        // SAFETY: `raw` is a fresh descriptor nobody else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        let ifindex = libc::c_int::try_from(ifindex)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "interface index"))?;
        if let Some(filter) = filter {
            let program = libc::sock_fprog {
                len: u16::try_from(filter.len())
                    .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "filter length"))?,
                filter: filter.as_ptr().cast_mut(),
            };
            // SAFETY: the kernel copies `program` and the instructions it points to during the
            // call; both outlive it.
            check(unsafe {
                libc::setsockopt(
                    fd.as_raw_fd(),
                    libc::SOL_SOCKET,
                    libc::SO_ATTACH_FILTER,
                    std::ptr::from_ref(&program).cast(),
                    size_of_as_socklen::<libc::sock_fprog>(),
                )
            })?;
        }
        // SAFETY: sockaddr_ll is plain data; all-zero is a valid value.
        let mut address: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        address.sll_family = libc::AF_PACKET as libc::sa_family_t;
        address.sll_protocol = protocol;
        address.sll_ifindex = ifindex;
        // SAFETY: `address` is a valid sockaddr_ll and its size is passed with it.
        check(unsafe {
            libc::bind(
                fd.as_raw_fd(),
                std::ptr::from_ref(&address).cast(),
                size_of_as_socklen::<libc::sockaddr_ll>(),
            )
        })?;
        if all_multicast {
            // SAFETY: packet_mreq is plain data; all-zero is a valid value.
            let mut membership: libc::packet_mreq = unsafe { std::mem::zeroed() };
            membership.mr_ifindex = ifindex;
            membership.mr_type = libc::PACKET_MR_ALLMULTI as libc::c_ushort;
            // SAFETY: `membership` is valid for the duration of the call and its size is passed.
            check(unsafe {
                libc::setsockopt(
                    fd.as_raw_fd(),
                    libc::SOL_PACKET,
                    libc::PACKET_ADD_MEMBERSHIP,
                    std::ptr::from_ref(&membership).cast(),
                    size_of_as_socklen::<libc::packet_mreq>(),
                )
            })?;
        }
        // SAFETY: the OwnedFd moves into the AsyncFd, which alone closes it (on drop).
        let fd = unsafe { AsyncFd::register(fd) }.map_err(|error| error.into_parts().1)?;
        Ok(PacketSocket { fd })
    }

    /// The next frame that arrived on the interface (frames this host sent are skipped).
    pub async fn recv(&self, buffer: &mut [u8]) -> io::Result<usize> {
        loop {
            let mut guard = self.fd.readable().await?;
            let result = guard.try_io(|fd| {
                // SAFETY: see `open`.
                let mut from: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
                let mut from_length = size_of_as_socklen::<libc::sockaddr_ll>();
                // SAFETY: the buffer pointer and length describe `buffer`; `from` and its
                // length describe a sockaddr_ll the kernel fills.
                let read = unsafe {
                    libc::recvfrom(
                        fd.as_raw_fd(),
                        buffer.as_mut_ptr().cast(),
                        buffer.len(),
                        0,
                        std::ptr::from_mut(&mut from).cast(),
                        &mut from_length,
                    )
                };
                if read < 0 {
                    return Err(io::Error::last_os_error());
                }
                Ok((usize::try_from(read).unwrap_or(0), from.sll_pkttype))
            });
            match result {
                Ok(Ok((_, kind))) if kind == libc::PACKET_OUTGOING => continue,
                Ok(Ok((read, _))) => return Ok(read),
                Ok(Err(error)) => return Err(error),
                Err(_would_block) => continue,
            }
        }
    }

    /// Sends one complete Ethernet frame out of the interface.
    pub fn send(&self, frame: &[u8]) -> io::Result<()> {
        // SAFETY: the pointer and length describe `frame`.
        let sent = unsafe {
            libc::send(
                self.fd.get_ref().as_raw_fd(),
                frame.as_ptr().cast(),
                frame.len(),
                0,
            )
        };
        if sent < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }
}
