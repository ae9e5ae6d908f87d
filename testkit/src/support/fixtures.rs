//! Fixtures several adapters' tests share: the interop venv's Python, the two hooks a
//! wire test delivers, waiting for a broker process a test started, and the warm
//! unacknowledged fault through a proxy, and delivering again after a restart.

use super::TcpProxy;
use crate::{Setup, WarmFault};
use ankusa_sink_core::{Class, Ctx, Envelope, Failure};
use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// The interop venv's Python (`scripts/services/interop.sh`): `$ANKUSA_INTEROP_VENV/bin/python`,
/// else `~/.cache/ankusa-sinks/interop/venv/bin/python`.
///
/// # Panics
/// When neither `ANKUSA_INTEROP_VENV` nor `HOME` is set, or the Python is missing.
#[must_use]
pub fn interop_python() -> PathBuf {
    let venv = std::env::var_os("ANKUSA_INTEROP_VENV")
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME")
                .map(|h| PathBuf::from(h).join(".cache/ankusa-sinks/interop/venv"))
        })
        .expect("ANKUSA_INTEROP_VENV or HOME is set");
    let python = venv.join("bin/python");
    assert!(
        python.exists(),
        "{} is missing: run scripts/services/interop.sh",
        python.display()
    );
    python
}

/// The two hooks from `source` a wire test delivers, each with its context, in order: a
/// tenantless hook with body `{}`, then a replay (`rp-1`) of tenant `acme`'s hook with body
/// `{"a":1}`, dedupe key `evt_1` and a `User-Agent` header. Ids are [`unique_name`]s.
///
/// [`unique_name`]: super::unique_name
///
/// # Panics
/// Never for a valid `source` id.
#[must_use]
pub fn wire_hooks(source: &str) -> [(Envelope, Ctx); 2] {
    let tenantless = Envelope::builder(super::unique_name("h"), source, &b"{}"[..])
        .build()
        .unwrap();
    let replay = Envelope::builder(super::unique_name("h"), source, &b"{\"a\":1}"[..])
        .tenant_id("acme")
        .dedupe_key("evt_1")
        .header("User-Agent", "Stripe/1.0")
        .build()
        .unwrap();
    let (tenantless_ctx, replay_ctx) = (
        Ctx::for_envelope(&tenantless),
        Ctx::for_envelope(&replay).with_replay_id("rp-1"),
    );
    [(tenantless, tenantless_ctx), (replay, replay_ctx)]
}

/// Waits for a broker process a test started: asks `ready` every 25 ms, 200 times at most.
///
/// # Panics
/// With `what` (e.g. `"mosquitto on port 1883 did not listen"`) when `ready` never answers
/// true.
pub async fn wait_ready<F, Fut>(what: &str, mut ready: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    for _ in 0..200 {
        if ready().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("{what}");
}

/// The warm [`Fault::Unacknowledged`](crate::Fault::Unacknowledged) of a sink that reaches
/// its destination through `proxy`: `setup` works for the warm-up, then `proxy`
/// [blackholes](TcpProxy::blackhole) the sink's open connections (the write is taken, no
/// answer comes). The setup reads what the silence took ([`Setup::with_heard`] from
/// [`TcpProxy::heard`]), so a sink that met the silence before sending anything of the
/// hook may say truthfully that nothing landed.
pub fn silent_after_warm_up<S>(setup: Setup<S>, proxy: Arc<TcpProxy>) -> WarmFault<S> {
    let tap = Arc::clone(&proxy);
    let setup = setup.with_heard(move || tap.heard());
    WarmFault::new(setup, move || async move {
        proxy.blackhole();
        Ok(())
    })
}

/// Delivers with `deliver` until one succeeds, every 50 ms, 100 times at most, every
/// failure in between transient: the same sink reconnects on its own once its destination
/// is back.
///
/// # Panics
/// On a failure that is not transient, or when none of the 100 succeeded ("the sink never
/// reconnected").
pub async fn delivers_again<F, Fut>(mut deliver: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<(), Failure>>,
{
    let mut delivered = false;
    for _ in 0..100 {
        match deliver().await {
            Ok(()) => {
                delivered = true;
                break;
            }
            Err(f) => {
                assert_eq!(f.class(), Class::Transient, "{f}");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
    assert!(delivered, "the sink never reconnected");
}
