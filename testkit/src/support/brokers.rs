//! The `ANKUSA_TEST_BROKERS` switch: whether a test that needs a broker runs.

use std::collections::HashMap;
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

/// The environment variable that says whether broker tests run: `1` (the default, and what
/// `scripts/test.sh` and CI set) runs them and fails one whose broker cannot be reached;
/// `0` skips them, each with a `SKIP` line naming the broker it would have used.
pub const TEST_BROKERS_VAR: &str = "ANKUSA_TEST_BROKERS";

/// Whether the calling test may use `broker` at `addr` (`host:port`). Use it through
/// [`require_broker!`](crate::require_broker), which returns from the test when not.
///
/// - `ANKUSA_TEST_BROKERS=0`: prints `SKIP <test>: <broker> at <addr> not used
///   (ANKUSA_TEST_BROKERS=0)` and answers false.
/// - `ANKUSA_TEST_BROKERS=1` or unset: answers true when a TCP connection to `addr`
///   opens within 2 s (tried once per address and test binary); panics otherwise, naming
///   the broker: a broker test never passes without its broker.
///
/// # Panics
/// As above, and when the variable holds anything but `0` or `1`.
pub fn broker_enabled(broker: &str, addr: &str) -> bool {
    let test = std::thread::current()
        .name()
        .unwrap_or("<unnamed test>")
        .to_owned();
    match std::env::var(TEST_BROKERS_VAR).as_deref() {
        Ok("0") => {
            println!("SKIP {test}: {broker} at {addr} not used ({TEST_BROKERS_VAR}=0)");
            false
        }
        Ok("1") | Err(std::env::VarError::NotPresent) => {
            if let Err(e) = reachable(addr) {
                panic!(
                    "{test}: {broker} at {addr} is not reachable ({e}): start it \
                     (scripts/services/), or set {TEST_BROKERS_VAR}=0 to skip broker tests"
                );
            }
            true
        }
        Ok(other) => panic!("{TEST_BROKERS_VAR} must be 0 or 1, not {other:?}"),
        Err(e) => panic!("{TEST_BROKERS_VAR}: {e}"),
    }
}

/// Whether a TCP connection to `addr` opens; probed once per address per process.
fn reachable(addr: &str) -> Result<(), String> {
    static PROBED: Mutex<Option<HashMap<String, Result<(), String>>>> = Mutex::new(None);
    let mut probed = PROBED.lock().unwrap_or_else(PoisonError::into_inner);
    probed
        .get_or_insert_with(HashMap::new)
        .entry(addr.to_owned())
        .or_insert_with(|| probe(addr))
        .clone()
}

fn probe(addr: &str) -> Result<(), String> {
    let addrs: Vec<SocketAddr> = addr
        .to_socket_addrs()
        .map_err(|e| format!("cannot resolve: {e}"))?
        .collect();
    let mut last = "no address".to_owned();
    for a in addrs {
        match TcpStream::connect_timeout(&a, Duration::from_secs(2)) {
            Ok(_) => return Ok(()),
            Err(e) => last = e.to_string(),
        }
    }
    Err(last)
}

/// Return from the calling test unless it may use the broker: `require_broker!("RabbitMQ",
/// "127.0.0.1:5672")`. See [`broker_enabled`](crate::support::broker_enabled) for what
/// `ANKUSA_TEST_BROKERS` does.
#[macro_export]
macro_rules! require_broker {
    ($broker:expr, $addr:expr) => {
        if !$crate::support::broker_enabled($broker, &$addr) {
            return;
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unreachable_address_is_named() {
        let port = crate::support::free_port();
        let e = reachable(&format!("127.0.0.1:{port}")).unwrap_err();
        assert!(!e.is_empty());
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        assert_eq!(reachable(&addr), Ok(()));
    }
}
