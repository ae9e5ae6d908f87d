//! The dispatch side: check a body in once, before any sink runs, when a sink needs it.

use crate::error::ClaimError;
use crate::store::{ClaimItem, ClaimStore};
use ankusa_message::{BodyMode, body_mode};
use ankusa_sink_core::{Claim, Envelope};
use std::num::NonZeroUsize;

/// Whether a body of `size` bytes is over at least one of `thresholds` (`None`: the sink
/// never uses the claim check). A body of exactly a threshold is inline.
pub fn needs_claim(size: u64, thresholds: impl IntoIterator<Item = Option<NonZeroUsize>>) -> bool {
    thresholds
        .into_iter()
        .any(|t| body_mode(size, t) == BodyMode::Claim)
}

impl ClaimStore {
    /// Check `env`'s body in if it is over at least one of `thresholds` (each sink's
    /// `Capabilities::inline_max_bytes`, read once by the caller); `None` (nothing written)
    /// when every sink takes it inline. The dispatcher calls it once per hook and hands the
    /// claim to every sink and every retry of it (`Ctx::with_claim`): one put per hook.
    pub async fn claim_for(
        &self,
        env: &Envelope,
        thresholds: impl IntoIterator<Item = Option<NonZeroUsize>>,
    ) -> Result<Option<Claim>, ClaimError> {
        if !needs_claim(env.size(), thresholds) {
            return Ok(None);
        }
        self.check_in(ClaimItem::from_envelope(env)).await.map(Some)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thresholds_are_inclusive() {
        let t = NonZeroUsize::new(10);
        assert!(!needs_claim(10, [t]));
        assert!(needs_claim(11, [t]));
        assert!(!needs_claim(1_000_000, [None]));
        assert!(needs_claim(11, [None, t]));
        assert!(!needs_claim(11, []));
    }
}
