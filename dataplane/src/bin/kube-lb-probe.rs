//! `kube-lb-probe`: the backend "pod" server and the client used by the dataplane's
//! network-namespace tests and benchmarks (std only, runs under `ip netns exec`).
//!
//! - `serve NAME PORT`: TCP and UDP on `0.0.0.0:PORT` and, where the namespace has IPv6, on
//!   `[::]:PORT` (IPv6 only, so IPv4 peers keep their plain addresses); every line or datagram is
//!   answered with `NAME PEER`, so a client learns which endpoint answered and what source it saw.
//! - `tcp ADDR COUNT TIMEOUT_MS`: COUNT fresh connections; prints `ok <reply>` or `err <kind>`.
//! - `udp ADDR COUNT TIMEOUT_MS [SRC_PORT]`: COUNT datagrams from one socket.
//! - `time ADDR COUNT`: COUNT TCP connects (handshake only); prints the median and p90 connect
//!   time in microseconds, for the benchmarks.
//! - `hold ADDR TIMEOUT_MS`: one connection; for each stdin line sends a request and prints the
//!   reply (`ok …`/`err …`), to test that established connections survive rule changes.

use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs, UdpSocket};
use std::process::ExitCode;
use std::time::Duration;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.iter().map(String::as_str).collect::<Vec<_>>().as_slice() {
        ["serve", name, port] => serve(name, port),
        ["tcp", addr, count, timeout] => tcp(addr, count, timeout),
        ["udp", addr, count, timeout] => udp(addr, count, timeout, None),
        ["udp", addr, count, timeout, source] => udp(addr, count, timeout, Some(source)),
        ["hold", addr, timeout] => hold(addr, timeout),
        ["time", addr, count] => connect_time(addr, count),
        _ => Err("usage: kube-lb-probe serve NAME PORT | tcp ADDR N MS | udp ADDR N MS [SRC] | hold ADDR MS".into()),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("kube-lb-probe: {error}");
            ExitCode::from(2)
        }
    }
}

type Result<T> = std::result::Result<T, String>;

fn parse<T: std::str::FromStr>(value: &str, what: &str) -> Result<T> {
    value
        .parse()
        .map_err(|_| format!("invalid {what}: {value:?}"))
}

fn resolve(addr: &str) -> Result<SocketAddr> {
    addr.to_socket_addrs()
        .map_err(|error| format!("{addr}: {error}"))?
        .next()
        .ok_or_else(|| format!("{addr}: no address"))
}

fn serve(name: &str, port: &str) -> Result<()> {
    let port: u16 = parse(port, "port")?;
    let tcp = TcpListener::bind(("0.0.0.0", port)).map_err(|e| format!("tcp bind: {e}"))?;
    let udp = UdpSocket::bind(("0.0.0.0", port)).map_err(|e| format!("udp bind: {e}"))?;
    let mut udp_sockets = vec![udp];
    // A namespace without IPv6 (disabled by sysctl) serves IPv4 alone.
    if let Ok((tcp6, udp6)) = ipv6_only_sockets(port) {
        serve_tcp(tcp6, name.to_owned());
        udp_sockets.push(udp6);
    }
    for udp in udp_sockets {
        let udp_name = name.to_owned();
        std::thread::spawn(move || {
            let mut buffer = [0u8; 2048];
            while let Ok((_, peer)) = udp.recv_from(&mut buffer) {
                let _ = udp.send_to(format!("{udp_name} {peer}\n").as_bytes(), peer);
            }
        });
    }
    println!("ready");
    let _ = std::io::stdout().flush();
    answer_tcp(&tcp, name);
    Ok(())
}

/// TCP and UDP sockets on `[::]:port` that take IPv6 peers only.
fn ipv6_only_sockets(port: u16) -> std::io::Result<(TcpListener, UdpSocket)> {
    use socket2::{Domain, Protocol, Socket, Type};
    let any: SocketAddr = (std::net::Ipv6Addr::UNSPECIFIED, port).into();
    let tcp = Socket::new(Domain::IPV6, Type::STREAM, Some(Protocol::TCP))?;
    tcp.set_only_v6(true)?;
    tcp.set_reuse_address(true)?;
    tcp.bind(&any.into())?;
    tcp.listen(128)?;
    let udp = Socket::new(Domain::IPV6, Type::DGRAM, Some(Protocol::UDP))?;
    udp.set_only_v6(true)?;
    udp.bind(&any.into())?;
    Ok((tcp.into(), udp.into()))
}

/// Answers `listener`'s connections on a thread of its own.
fn serve_tcp(listener: TcpListener, name: String) {
    std::thread::spawn(move || answer_tcp(&listener, &name));
}

/// Answers every line of every connection with `NAME PEER`.
fn answer_tcp(listener: &TcpListener, name: &str) {
    for stream in listener.incoming() {
        let Ok(stream) = stream else { continue };
        let name = name.to_owned();
        std::thread::spawn(move || {
            let Ok(peer) = stream.peer_addr() else { return };
            let Ok(read_half) = stream.try_clone() else {
                return;
            };
            let mut reader = BufReader::new(read_half);
            let mut writer = stream;
            let mut line = String::new();
            while matches!(reader.read_line(&mut line), Ok(n) if n > 0) {
                if writer
                    .write_all(format!("{name} {peer}\n").as_bytes())
                    .is_err()
                {
                    break;
                }
                line.clear();
            }
        });
    }
}

fn error_kind(error: &std::io::Error) -> String {
    match error.kind() {
        std::io::ErrorKind::ConnectionRefused => "refused".into(),
        std::io::ErrorKind::TimedOut | std::io::ErrorKind::WouldBlock => "timeout".into(),
        std::io::ErrorKind::ConnectionReset => "reset".into(),
        _ => format!("other:{error}"),
    }
}

fn request(stream: &mut TcpStream, reader: &mut BufReader<TcpStream>) -> std::io::Result<String> {
    stream.write_all(b"hello\n")?;
    let mut line = String::new();
    if reader.read_line(&mut line)? == 0 {
        return Err(std::io::Error::new(
            std::io::ErrorKind::ConnectionReset,
            "closed",
        ));
    }
    Ok(line.trim().to_owned())
}

fn connect(
    addr: SocketAddr,
    timeout: Duration,
) -> std::io::Result<(TcpStream, BufReader<TcpStream>)> {
    let stream = TcpStream::connect_timeout(&addr, timeout)?;
    stream.set_read_timeout(Some(timeout))?;
    let reader = BufReader::new(stream.try_clone()?);
    Ok((stream, reader))
}

fn tcp(addr: &str, count: &str, timeout: &str) -> Result<()> {
    let addr = resolve(addr)?;
    let count: usize = parse(count, "count")?;
    let timeout = Duration::from_millis(parse(timeout, "timeout")?);
    for _ in 0..count {
        let outcome = connect(addr, timeout)
            .and_then(|(mut stream, mut reader)| request(&mut stream, &mut reader));
        match outcome {
            Ok(reply) => println!("ok {reply}"),
            Err(error) => println!("err {}", error_kind(&error)),
        }
    }
    Ok(())
}

fn udp(addr: &str, count: &str, timeout: &str, source: Option<&&str>) -> Result<()> {
    let addr = resolve(addr)?;
    let count: usize = parse(count, "count")?;
    let timeout = Duration::from_millis(parse(timeout, "timeout")?);
    let source_port: u16 = source
        .map(|s| parse(s, "source port"))
        .transpose()?
        .unwrap_or(0);
    let local: SocketAddr = if addr.is_ipv6() {
        (std::net::Ipv6Addr::UNSPECIFIED, source_port).into()
    } else {
        (std::net::Ipv4Addr::UNSPECIFIED, source_port).into()
    };
    let socket = UdpSocket::bind(local).map_err(|e| format!("udp bind: {e}"))?;
    socket
        .set_read_timeout(Some(timeout))
        .map_err(|e| e.to_string())?;
    socket.connect(addr).map_err(|e| e.to_string())?;
    let mut buffer = [0u8; 2048];
    for _ in 0..count {
        let outcome = socket
            .send(b"hello\n")
            .and_then(|_| socket.recv(&mut buffer));
        match outcome {
            Ok(n) => println!("ok {}", String::from_utf8_lossy(&buffer[..n]).trim()),
            Err(error) => println!("err {}", error_kind(&error)),
        }
    }
    Ok(())
}

fn connect_time(addr: &str, count: &str) -> Result<()> {
    let addr = resolve(addr)?;
    let count: usize = parse(count, "count")?;
    let mut samples = Vec::with_capacity(count);
    for _ in 0..count {
        let started = std::time::Instant::now();
        let stream = TcpStream::connect_timeout(&addr, Duration::from_secs(2))
            .map_err(|e| format!("connect: {e}"))?;
        samples.push(started.elapsed().as_micros());
        drop(stream);
    }
    samples.sort_unstable();
    let at = |q: f64| {
        samples
            .get(((samples.len() as f64 - 1.0) * q) as usize)
            .copied()
            .unwrap_or(0)
    };
    println!("{} {}", at(0.5), at(0.9));
    Ok(())
}

fn hold(addr: &str, timeout: &str) -> Result<()> {
    let addr = resolve(addr)?;
    let timeout = Duration::from_millis(parse(timeout, "timeout")?);
    let mut connection = connect(addr, timeout).map_err(|e| format!("err {}", error_kind(&e)))?;
    let stdin = std::io::stdin();
    for line in stdin.lock().lines() {
        if line.is_err() {
            break;
        }
        match request(&mut connection.0, &mut connection.1) {
            Ok(reply) => println!("ok {reply}"),
            Err(error) => println!("err {}", error_kind(&error)),
        }
        let _ = std::io::stdout().flush();
    }
    Ok(())
}
