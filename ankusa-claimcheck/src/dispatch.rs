//! The dispatch side: check a body in once, before any sink runs, when a sink needs it.

use crate::error::ClaimError;
use crate::store::{ClaimItem, ClaimStore};
use ankusa_message::{BodyMode, body_mode};
use ankusa_sink_core::{Capabilities, Claim, Ctx, Envelope, Sink, safe_capabilities};
use std::num::NonZeroUsize;

/// The inline thresholds of `sinks`, as dispatch uses them.
///
/// A sink whose capabilities cannot be read (its `capabilities` panicked) counts as
/// [`Capabilities::unknown`], threshold 1, so a body it might need by reference is checked
/// in and every other sink still gets its claim; the fault is logged.
pub fn sink_thresholds<S: Sink>(sinks: &[S]) -> Vec<Option<NonZeroUsize>> {
    sinks
        .iter()
        .map(|s| {
            safe_capabilities(s)
                .unwrap_or_else(|e| {
                    tracing::warn!(
                        target: "ankusa_claimcheck",
                        sink = ?s,
                        error = %e,
                        "capabilities() failed; checking the body in for this sink"
                    );
                    Capabilities::unknown()
                })
                .inline_max_bytes
        })
        .collect()
}

/// Whether a body of `size` bytes is over at least one of `thresholds` (`None`: the sink
/// never uses the claim check). A body of exactly a threshold is inline.
pub fn needs_claim(size: u64, thresholds: impl IntoIterator<Item = Option<NonZeroUsize>>) -> bool {
    thresholds
        .into_iter()
        .any(|t| body_mode(size, t) == BodyMode::Claim)
}

impl ClaimStore {
    /// The claim every sink of `env` and every retry uses, checking the body in at most
    /// once.
    ///
    /// # Behavior
    /// - `ctx.claim` already set (a retry, or a claim stored with the hook): returned as
    ///   is, nothing written.
    /// - The body is over at least one sink's `inline_max_bytes`: checked in as a
    ///   one-claim pack ([`ClaimItem::from_envelope`]); the put has completed when this
    ///   returns. Hand the returned `Ctx` to every sink and keep its claim for retries.
    /// - Every sink takes the body inline: `ctx` unchanged, nothing written.
    /// - Reads each sink's `capabilities()` on every call: a caller preparing many hooks for
    ///   the same sinks resolves [`sink_thresholds`] once and calls
    ///   [`prepare_with_thresholds`](Self::prepare_with_thresholds), as the dispatcher does.
    pub async fn prepare<S: Sink>(
        &self,
        env: &Envelope,
        ctx: Ctx,
        sinks: &[S],
    ) -> Result<Ctx, ClaimError> {
        self.prepare_with_thresholds(env, ctx, sink_thresholds(sinks))
            .await
    }

    /// [`prepare`](Self::prepare) with the sinks' thresholds already resolved (see
    /// [`sink_thresholds`]).
    pub async fn prepare_with_thresholds(
        &self,
        env: &Envelope,
        ctx: Ctx,
        thresholds: impl IntoIterator<Item = Option<NonZeroUsize>>,
    ) -> Result<Ctx, ClaimError> {
        if ctx.claim.is_some() {
            return Ok(ctx);
        }
        match self.claim_for(env, thresholds).await? {
            Some(claim) => Ok(ctx.with_claim(claim)),
            None => Ok(ctx),
        }
    }

    /// Check `env`'s body in if it is over at least one of `thresholds`; `None` (nothing
    /// written) when every sink takes it inline.
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

/// One hook of a dispatch scan: its envelope, its attempt's context and its sinks'
/// thresholds (see [`sink_thresholds`]).
pub type Job<'a> = (&'a Envelope, Ctx, Vec<Option<NonZeroUsize>>);

impl ClaimStore {
    /// [`prepare`](Self::prepare) a whole dispatch scan at once: the bodies that need a
    /// claim are checked in with [`check_in_batch`](Self::check_in_batch) (packed per
    /// tenant, one put per pack). One result per job, in order; a job fails only with its
    /// own pack.
    pub async fn prepare_batch(&self, jobs: Vec<Job<'_>>) -> Vec<Result<Ctx, ClaimError>> {
        let mut wanted = Vec::new();
        let mut items = Vec::new();
        for (i, (env, ctx, thresholds)) in jobs.iter().enumerate() {
            if ctx.claim.is_none() && needs_claim(env.size(), thresholds.iter().copied()) {
                wanted.push(i);
                items.push(ClaimItem::from_envelope(env));
            }
        }
        let mut claims = vec![None; jobs.len()];
        for (i, claim) in wanted.into_iter().zip(self.check_in_batch(items).await) {
            claims[i] = Some(claim);
        }
        jobs.into_iter()
            .zip(claims)
            .map(|((_, ctx, _), claim)| match claim {
                None => Ok(ctx),
                Some(claim) => claim.map(|c| ctx.with_claim(c)),
            })
            .collect()
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
