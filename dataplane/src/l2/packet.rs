//! Ethernet frames of the responder, built and parsed without I/O: ARP (RFC 826, gratuitous ARP
//! as RFC 5227 §3 describes its announcements) and the two NDP messages (RFC 4861 §4.3, §4.4).

use std::net::{Ipv4Addr, Ipv6Addr};

/// An Ethernet (MAC) address.
pub type Mac = [u8; 6];

/// The Ethernet broadcast address.
pub const BROADCAST: Mac = [0xff; 6];
/// EtherType of ARP.
pub const ETHERTYPE_ARP: u16 = 0x0806;
/// EtherType of IPv6.
pub const ETHERTYPE_IPV6: u16 = 0x86dd;

const ETHERNET_HEADER: usize = 14;
const ARP_LENGTH: usize = 28;
const IPV6_HEADER: usize = 40;
const ICMPV6: u8 = 58;
const NEIGHBOR_SOLICITATION: u8 = 135;
const NEIGHBOR_ADVERTISEMENT: u8 = 136;
const OPTION_SOURCE_LINK_ADDRESS: u8 = 1;
const OPTION_TARGET_LINK_ADDRESS: u8 = 2;
/// NA flags (RFC 4861 §4.4): Solicited and Override.
const FLAG_SOLICITED: u8 = 0x40;
const FLAG_OVERRIDE: u8 = 0x20;
/// All-nodes multicast: where unsolicited advertisements go.
const ALL_NODES: Ipv6Addr = Ipv6Addr::new(0xff02, 0, 0, 0, 0, 0, 0, 1);

/// An ARP request for an IPv4 address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ArpRequest {
    /// Who asks (where the reply goes).
    pub sender_mac: Mac,
    /// The asker's address (0.0.0.0 for an RFC 5227 probe).
    pub sender_ip: Ipv4Addr,
    /// The address asked for.
    pub target_ip: Ipv4Addr,
}

/// An IPv6 neighbour solicitation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NeighborSolicitation {
    /// The solicitor's link address (its source link-layer option, else the frame's source).
    pub source_mac: Mac,
    /// The solicitor's address (`::` during duplicate address detection).
    pub source_ip: Ipv6Addr,
    /// The address asked for.
    pub target: Ipv6Addr,
}

fn ethernet(destination: Mac, source: Mac, ethertype: u16, capacity: usize) -> Vec<u8> {
    let mut frame = Vec::with_capacity(ETHERNET_HEADER + capacity);
    frame.extend_from_slice(&destination);
    frame.extend_from_slice(&source);
    frame.extend_from_slice(&ethertype.to_be_bytes());
    frame
}

fn mac_at(bytes: &[u8], at: usize) -> Option<Mac> {
    bytes.get(at..at + 6)?.try_into().ok()
}

fn u16_at(bytes: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_be_bytes(bytes.get(at..at + 2)?.try_into().ok()?))
}

fn ipv4_at(bytes: &[u8], at: usize) -> Option<Ipv4Addr> {
    let octets: [u8; 4] = bytes.get(at..at + 4)?.try_into().ok()?;
    Some(Ipv4Addr::from(octets))
}

fn ipv6_at(bytes: &[u8], at: usize) -> Option<Ipv6Addr> {
    let octets: [u8; 16] = bytes.get(at..at + 16)?.try_into().ok()?;
    Some(Ipv6Addr::from(octets))
}

/// The ARP request in `frame`, if it is one for Ethernet/IPv4 that asks for someone's address.
/// Gratuitous announcements (sender address = target address) ask nothing and give `None`.
pub fn parse_arp_request(frame: &[u8]) -> Option<ArpRequest> {
    if u16_at(frame, 12)? != ETHERTYPE_ARP {
        return None;
    }
    let arp = frame.get(ETHERNET_HEADER..ETHERNET_HEADER + ARP_LENGTH)?;
    // htype Ethernet, ptype IPv4, hlen 6, plen 4, operation request.
    if arp[..8] != [0, 1, 0x08, 0x00, 6, 4, 0, 1] {
        return None;
    }
    let request = ArpRequest {
        sender_mac: mac_at(arp, 8)?,
        sender_ip: ipv4_at(arp, 14)?,
        target_ip: ipv4_at(arp, 24)?,
    };
    (request.sender_ip != request.target_ip).then_some(request)
}

fn arp_frame(
    destination: Mac,
    operation: u16,
    our_mac: Mac,
    our_ip: Ipv4Addr,
    target_mac: Mac,
    target_ip: Ipv4Addr,
) -> Vec<u8> {
    let mut frame = ethernet(destination, our_mac, ETHERTYPE_ARP, ARP_LENGTH);
    frame.extend_from_slice(&[0, 1, 0x08, 0x00, 6, 4]);
    frame.extend_from_slice(&operation.to_be_bytes());
    frame.extend_from_slice(&our_mac);
    frame.extend_from_slice(&our_ip.octets());
    frame.extend_from_slice(&target_mac);
    frame.extend_from_slice(&target_ip.octets());
    frame
}

/// The reply saying `request.target_ip` is at `our_mac`, sent to the asker only.
pub fn arp_reply(our_mac: Mac, request: &ArpRequest) -> Vec<u8> {
    arp_frame(
        request.sender_mac,
        2,
        our_mac,
        request.target_ip,
        request.sender_mac,
        request.sender_ip,
    )
}

/// A gratuitous ARP (a broadcast request for `ip` from `ip`): every host on the segment that has
/// `ip` in its cache moves it to `our_mac` (Linux does so even inside its `locktime`).
pub fn gratuitous_arp(our_mac: Mac, ip: Ipv4Addr) -> Vec<u8> {
    arp_frame(BROADCAST, 1, our_mac, ip, [0; 6], ip)
}

/// The neighbour solicitation in `frame`, if it is a well-formed one (hop limit 255, ICMPv6 code
/// 0, as RFC 4861 §7.1.1 requires of what a node accepts).
pub fn parse_neighbor_solicitation(frame: &[u8]) -> Option<NeighborSolicitation> {
    if u16_at(frame, 12)? != ETHERTYPE_IPV6 {
        return None;
    }
    let ip = frame.get(ETHERNET_HEADER..)?;
    if ip.len() < IPV6_HEADER || ip[0] >> 4 != 6 || ip[6] != ICMPV6 || ip[7] != 255 {
        return None;
    }
    let payload_length = usize::from(u16_at(ip, 4)?);
    let icmp = ip.get(IPV6_HEADER..IPV6_HEADER + payload_length)?;
    if icmp.len() < 24 || icmp[0] != NEIGHBOR_SOLICITATION || icmp[1] != 0 {
        return None;
    }
    let source_ip = ipv6_at(ip, 8)?;
    let target = ipv6_at(icmp, 8)?;
    let mut source_mac = mac_at(frame, 6)?;
    let mut options = &icmp[24..];
    while options.len() >= 8 {
        let length = usize::from(options[1]) * 8;
        if length == 0 || length > options.len() {
            return None;
        }
        if options[0] == OPTION_SOURCE_LINK_ADDRESS {
            source_mac = mac_at(options, 2)?;
        }
        options = &options[length..];
    }
    Some(NeighborSolicitation {
        source_mac,
        source_ip,
        target,
    })
}

/// The ICMPv6 checksum (RFC 4443 §2.3) over the IPv6 pseudo-header and `message`.
pub fn icmpv6_checksum(source: Ipv6Addr, destination: Ipv6Addr, message: &[u8]) -> u16 {
    let length = u32::try_from(message.len()).unwrap_or(u32::MAX);
    let mut sum: u32 = 0;
    let mut add = |bytes: &[u8]| {
        for pair in bytes.chunks(2) {
            let word = u16::from_be_bytes([pair[0], pair.get(1).copied().unwrap_or(0)]);
            sum += u32::from(word);
        }
    };
    add(&source.octets());
    add(&destination.octets());
    add(&length.to_be_bytes());
    add(&[0, 0, 0, ICMPV6]);
    add(message);
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(u16::try_from(sum).unwrap_or(0xffff))
}

fn advertisement(
    destination_mac: Mac,
    destination_ip: Ipv6Addr,
    our_mac: Mac,
    target: Ipv6Addr,
    flags: u8,
) -> Vec<u8> {
    let mut icmp = vec![NEIGHBOR_ADVERTISEMENT, 0, 0, 0, flags, 0, 0, 0];
    icmp.extend_from_slice(&target.octets());
    icmp.extend_from_slice(&[OPTION_TARGET_LINK_ADDRESS, 1]);
    icmp.extend_from_slice(&our_mac);
    let checksum = icmpv6_checksum(target, destination_ip, &icmp);
    icmp[2..4].copy_from_slice(&checksum.to_be_bytes());
    let mut frame = ethernet(
        destination_mac,
        our_mac,
        ETHERTYPE_IPV6,
        IPV6_HEADER + icmp.len(),
    );
    frame.extend_from_slice(&[0x60, 0, 0, 0]);
    frame.extend_from_slice(&u16::try_from(icmp.len()).unwrap_or(0).to_be_bytes());
    frame.extend_from_slice(&[ICMPV6, 255]);
    frame.extend_from_slice(&target.octets());
    frame.extend_from_slice(&destination_ip.octets());
    frame.extend_from_slice(&icmp);
    frame
}

/// Ethernet address of an IPv6 multicast group (RFC 2464 §7).
pub fn multicast_mac(group: Ipv6Addr) -> Mac {
    let octets = group.octets();
    [0x33, 0x33, octets[12], octets[13], octets[14], octets[15]]
}

/// The advertisement answering `solicitation`: unicast to the solicitor, or to all nodes when it
/// is doing duplicate address detection (source `::`, RFC 4861 §7.2.4).
pub fn neighbor_advertisement(our_mac: Mac, solicitation: &NeighborSolicitation) -> Vec<u8> {
    if solicitation.source_ip.is_unspecified() {
        advertisement(
            multicast_mac(ALL_NODES),
            ALL_NODES,
            our_mac,
            solicitation.target,
            FLAG_OVERRIDE,
        )
    } else {
        advertisement(
            solicitation.source_mac,
            solicitation.source_ip,
            our_mac,
            solicitation.target,
            FLAG_SOLICITED | FLAG_OVERRIDE,
        )
    }
}

/// An unsolicited advertisement with the override flag to all nodes: neighbours that cache `ip`
/// move it to `our_mac` (RFC 4861 §7.2.6).
pub fn unsolicited_advertisement(our_mac: Mac, ip: Ipv6Addr) -> Vec<u8> {
    advertisement(
        multicast_mac(ALL_NODES),
        ALL_NODES,
        our_mac,
        ip,
        FLAG_OVERRIDE,
    )
}

/// Parses `aa:bb:cc:dd:ee:ff`.
pub fn parse_mac(text: &str) -> Option<Mac> {
    let mut mac = [0u8; 6];
    let mut parts = text.trim().split(':');
    for byte in &mut mac {
        *byte = u8::from_str_radix(parts.next()?, 16).ok()?;
    }
    parts.next().is_none().then_some(mac)
}

#[cfg(test)]
mod tests {
    use super::*;

    const CLIENT: Mac = [0x02, 0, 0, 0, 0, 0x64];
    const NODE: Mac = [0x02, 0, 0, 0, 0, 0x0b];

    fn v4(text: &str) -> Ipv4Addr {
        text.parse().expect("test address")
    }

    fn v6(text: &str) -> Ipv6Addr {
        text.parse().expect("test address")
    }

    /// A request as Linux sends it (broadcast, target MAC zero).
    fn request(sender: &str, target: &str) -> Vec<u8> {
        let mut frame = arp_frame(BROADCAST, 1, CLIENT, v4(sender), [0; 6], v4(target));
        frame.resize(60, 0); // Ethernet padding must not matter
        frame
    }

    #[test]
    fn arp_requests_are_recognised_and_everything_else_is_not() {
        let mut reply = request("10.0.0.100", "10.0.0.50");
        reply[21] = 2;
        let mut ipv6 = request("10.0.0.100", "10.0.0.50");
        ipv6[12..14].copy_from_slice(&ETHERTYPE_IPV6.to_be_bytes());
        let cases: [(&str, Vec<u8>, Option<ArpRequest>); 6] = [
            (
                "request",
                request("10.0.0.100", "10.0.0.50"),
                Some(ArpRequest {
                    sender_mac: CLIENT,
                    sender_ip: v4("10.0.0.100"),
                    target_ip: v4("10.0.0.50"),
                }),
            ),
            (
                "RFC 5227 probe",
                request("0.0.0.0", "10.0.0.50"),
                Some(ArpRequest {
                    sender_mac: CLIENT,
                    sender_ip: v4("0.0.0.0"),
                    target_ip: v4("10.0.0.50"),
                }),
            ),
            (
                "gratuitous announcement",
                request("10.0.0.50", "10.0.0.50"),
                None,
            ),
            ("reply", reply, None),
            ("not ARP", ipv6, None),
            (
                "truncated",
                request("10.0.0.100", "10.0.0.50")[..30].to_vec(),
                None,
            ),
        ];
        for (what, frame, want) in cases {
            assert_eq!(parse_arp_request(&frame), want, "{what}");
        }
    }

    #[test]
    fn an_arp_reply_tells_the_asker_only_where_the_address_is() {
        let asked = parse_arp_request(&request("10.0.0.100", "10.0.0.50")).expect("request");
        let reply = arp_reply(NODE, &asked);
        assert_eq!(reply.len(), 42);
        assert_eq!(&reply[0..6], &CLIENT, "unicast to the asker");
        assert_eq!(&reply[6..12], &NODE);
        assert_eq!(&reply[20..22], &[0, 2], "operation reply");
        assert_eq!(&reply[22..28], &NODE, "sender hardware address: ours");
        assert_eq!(
            &reply[28..32],
            &[10, 0, 0, 50],
            "sender protocol address: the VIP"
        );
        assert_eq!(&reply[32..38], &CLIENT);
        assert_eq!(&reply[38..42], &[10, 0, 0, 100]);
    }

    #[test]
    fn gratuitous_arp_is_a_broadcast_request_for_itself() {
        let frame = gratuitous_arp(NODE, v4("10.0.0.50"));
        assert_eq!(&frame[0..6], &BROADCAST);
        assert_eq!(&frame[20..22], &[0, 1]);
        assert_eq!(
            &frame[28..32],
            &frame[38..42],
            "sender address = target address"
        );
        // Our own parser (and so every responder) does not mistake it for a question.
        assert_eq!(parse_arp_request(&frame), None);
    }

    /// A solicitation as Linux sends it: to the solicited-node group, with a source option.
    fn solicitation(source: Ipv6Addr, target: Ipv6Addr, with_option: bool) -> Vec<u8> {
        let group = Ipv6Addr::from({
            let mut octets = v6("ff02::1:ff00:0").octets();
            octets[13..].copy_from_slice(&target.octets()[13..]);
            octets
        });
        let mut icmp = vec![NEIGHBOR_SOLICITATION, 0, 0, 0, 0, 0, 0, 0];
        icmp.extend_from_slice(&target.octets());
        if with_option {
            icmp.extend_from_slice(&[OPTION_SOURCE_LINK_ADDRESS, 1]);
            icmp.extend_from_slice(&CLIENT);
        }
        let checksum = icmpv6_checksum(source, group, &icmp);
        icmp[2..4].copy_from_slice(&checksum.to_be_bytes());
        let mut frame = ethernet(
            multicast_mac(group),
            [0x02, 0, 0, 0, 0, 0x99],
            ETHERTYPE_IPV6,
            0,
        );
        frame.extend_from_slice(&[0x60, 0, 0, 0]);
        frame.extend_from_slice(&u16::try_from(icmp.len()).expect("short").to_be_bytes());
        frame.extend_from_slice(&[ICMPV6, 255]);
        frame.extend_from_slice(&source.octets());
        frame.extend_from_slice(&group.octets());
        frame.extend_from_slice(&icmp);
        frame
    }

    #[test]
    fn neighbor_solicitations_are_recognised() {
        let mut low_hop = solicitation(v6("fd00::100"), v6("fd00::50"), true);
        low_hop[ETHERNET_HEADER + 7] = 64;
        let mut advert = solicitation(v6("fd00::100"), v6("fd00::50"), true);
        advert[ETHERNET_HEADER + IPV6_HEADER] = NEIGHBOR_ADVERTISEMENT;
        let cases: [(&str, Vec<u8>, Option<NeighborSolicitation>); 5] = [
            (
                "with source option",
                solicitation(v6("fd00::100"), v6("fd00::50"), true),
                Some(NeighborSolicitation {
                    source_mac: CLIENT,
                    source_ip: v6("fd00::100"),
                    target: v6("fd00::50"),
                }),
            ),
            (
                "duplicate address detection: no option, frame source used",
                solicitation(Ipv6Addr::UNSPECIFIED, v6("fd00::50"), false),
                Some(NeighborSolicitation {
                    source_mac: [0x02, 0, 0, 0, 0, 0x99],
                    source_ip: Ipv6Addr::UNSPECIFIED,
                    target: v6("fd00::50"),
                }),
            ),
            ("hop limit below 255 (routed: forged)", low_hop, None),
            ("an advertisement", advert, None),
            (
                "truncated",
                solicitation(v6("fd00::100"), v6("fd00::50"), true)[..70].to_vec(),
                None,
            ),
        ];
        for (what, frame, want) in cases {
            assert_eq!(parse_neighbor_solicitation(&frame), want, "{what}");
        }
    }

    #[test]
    fn advertisements_carry_a_valid_checksum_and_the_right_flags() {
        let asked =
            parse_neighbor_solicitation(&solicitation(v6("fd00::100"), v6("fd00::50"), true))
                .expect("solicitation");
        let dad = NeighborSolicitation {
            source_ip: Ipv6Addr::UNSPECIFIED,
            ..asked
        };
        let cases = [
            (
                "solicited",
                neighbor_advertisement(NODE, &asked),
                CLIENT,
                v6("fd00::100"),
                0x60,
            ),
            (
                "answer to DAD",
                neighbor_advertisement(NODE, &dad),
                [0x33, 0x33, 0, 0, 0, 1],
                ALL_NODES,
                0x20,
            ),
            (
                "unsolicited",
                unsolicited_advertisement(NODE, v6("fd00::50")),
                [0x33, 0x33, 0, 0, 0, 1],
                ALL_NODES,
                0x20,
            ),
        ];
        for (what, frame, mac, destination, flags) in cases {
            assert_eq!(&frame[0..6], &mac, "{what}");
            let ip = &frame[ETHERNET_HEADER..];
            assert_eq!(ip[7], 255, "{what}: hop limit");
            assert_eq!(ipv6_at(ip, 8), Some(v6("fd00::50")), "{what}: from the VIP");
            assert_eq!(ipv6_at(ip, 24), Some(destination), "{what}");
            let icmp = &ip[IPV6_HEADER..];
            assert_eq!(icmp[0], NEIGHBOR_ADVERTISEMENT, "{what}");
            assert_eq!(icmp[4], flags, "{what}: flags");
            assert_eq!(ipv6_at(icmp, 8), Some(v6("fd00::50")), "{what}: target");
            assert_eq!(&icmp[24..26], &[OPTION_TARGET_LINK_ADDRESS, 1], "{what}");
            assert_eq!(&icmp[26..32], &NODE, "{what}");
            // A checksum over a message with its checksum in place is zero.
            assert_eq!(
                icmpv6_checksum(v6("fd00::50"), destination, icmp),
                0,
                "{what}"
            );
        }
    }

    #[test]
    fn macs_parse_as_sysfs_prints_them() {
        assert_eq!(parse_mac("02:00:00:00:00:0b\n"), Some(NODE));
        assert_eq!(parse_mac("02:00:00:00:00"), None);
        assert_eq!(parse_mac("02:00:00:00:00:0b:01"), None);
        assert_eq!(parse_mac("zz:00:00:00:00:0b"), None);
    }
}
