//! PROXY protocol headers (HAProxy's spec) written to endpoints before the client's bytes, so
//! endpoints learn the real client address through the userspace proxy.

use std::net::{IpAddr, SocketAddr};

use crate::model::ProxyProtocol;

/// The 12-byte signature that starts every v2 header.
pub const V2_SIGNATURE: [u8; 12] = [
    0x0D, 0x0A, 0x0D, 0x0A, 0x00, 0x0D, 0x0A, 0x51, 0x55, 0x49, 0x54, 0x0A,
];

/// The header for a TCP connection from `client` to `frontend` (the address the client dialled).
/// Mixed families (an IPv4 client on an IPv6 frontend) are expressed in the client's family with
/// the frontend address mapped; v1 falls back to `PROXY UNKNOWN` when that is impossible.
pub fn header(version: ProxyProtocol, client: SocketAddr, frontend: SocketAddr) -> Vec<u8> {
    let frontend_ip = same_family(client.ip(), frontend.ip());
    match version {
        ProxyProtocol::V1 => match (client.ip(), frontend_ip) {
            (IpAddr::V4(src), Some(IpAddr::V4(dst))) => format!(
                "PROXY TCP4 {src} {dst} {} {}\r\n",
                client.port(),
                frontend.port()
            )
            .into_bytes(),
            (IpAddr::V6(src), Some(IpAddr::V6(dst))) => format!(
                "PROXY TCP6 {src} {dst} {} {}\r\n",
                client.port(),
                frontend.port()
            )
            .into_bytes(),
            _ => b"PROXY UNKNOWN\r\n".to_vec(),
        },
        ProxyProtocol::V2 => {
            let mut out = V2_SIGNATURE.to_vec();
            // Version 2, command PROXY.
            out.push(0x21);
            match (client.ip(), frontend_ip) {
                (IpAddr::V4(src), Some(IpAddr::V4(dst))) => {
                    out.push(0x11); // AF_INET, STREAM
                    out.extend_from_slice(&12u16.to_be_bytes());
                    out.extend_from_slice(&src.octets());
                    out.extend_from_slice(&dst.octets());
                }
                (IpAddr::V6(src), Some(IpAddr::V6(dst))) => {
                    out.push(0x21); // AF_INET6, STREAM
                    out.extend_from_slice(&36u16.to_be_bytes());
                    out.extend_from_slice(&src.octets());
                    out.extend_from_slice(&dst.octets());
                }
                _ => {
                    out.push(0x00); // AF_UNSPEC: the receiver uses the connection's addresses
                    out.extend_from_slice(&0u16.to_be_bytes());
                    return out;
                }
            }
            out.extend_from_slice(&client.port().to_be_bytes());
            out.extend_from_slice(&frontend.port().to_be_bytes());
            out
        }
    }
}

fn same_family(client: IpAddr, frontend: IpAddr) -> Option<IpAddr> {
    match (client, frontend) {
        (IpAddr::V4(_), IpAddr::V4(_)) | (IpAddr::V6(_), IpAddr::V6(_)) => Some(frontend),
        (IpAddr::V6(_), IpAddr::V4(v4)) => Some(IpAddr::V6(v4.to_ipv6_mapped())),
        (IpAddr::V4(_), IpAddr::V6(v6)) => v6.to_ipv4_mapped().map(IpAddr::V4),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(text: &str) -> SocketAddr {
        text.parse().unwrap()
    }

    #[test]
    fn v1_is_the_seed_text_line() {
        let cases = [
            (
                "192.0.2.1:56324",
                "10.96.0.1:443",
                "PROXY TCP4 192.0.2.1 10.96.0.1 56324 443\r\n",
            ),
            (
                "[2001:db8::1]:1000",
                "[2001:db8::2]:80",
                "PROXY TCP6 2001:db8::1 2001:db8::2 1000 80\r\n",
            ),
            (
                "[2001:db8::1]:1000",
                "10.0.0.1:80",
                "PROXY TCP6 2001:db8::1 ::ffff:10.0.0.1 1000 80\r\n",
            ),
            ("10.0.0.2:1000", "[2001:db8::2]:80", "PROXY UNKNOWN\r\n"),
        ];
        for (client, frontend, expected) in cases {
            assert_eq!(
                String::from_utf8(header(ProxyProtocol::V1, addr(client), addr(frontend))).unwrap(),
                expected
            );
        }
    }

    #[test]
    fn v2_binary_layout() {
        let bytes = header(
            ProxyProtocol::V2,
            addr("192.0.2.1:56324"),
            addr("10.96.0.1:443"),
        );
        let mut expected = V2_SIGNATURE.to_vec();
        expected.extend_from_slice(&[0x21, 0x11, 0x00, 0x0C, 192, 0, 2, 1, 10, 96, 0, 1]);
        expected.extend_from_slice(&56324u16.to_be_bytes());
        expected.extend_from_slice(&443u16.to_be_bytes());
        assert_eq!(bytes, expected);
        let v6 = header(
            ProxyProtocol::V2,
            addr("[2001:db8::1]:1"),
            addr("[2001:db8::2]:2"),
        );
        assert_eq!(v6.len(), 16 + 36);
        assert_eq!(&v6[12..16], &[0x21, 0x21, 0x00, 0x24]);
    }
}
