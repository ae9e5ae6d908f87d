//! The scheduler's state and its loop: the one task that owns every (hook, sink) job.

use super::IdMap;
use super::desk::Desk;
use super::sink::SinkState;
use super::tasks::Tasks;
use super::types::{Delivery, DispatchConfig, Hook, HookSettle, Unfinished};
use super::waiting::RetryQueue;
use ankusa_claimcheck::ClaimStore;
use ankusa_message::TraceContext;
use ankusa_sink_core::{Claim, Ctx, Envelope, Failure, Reason};
use std::num::{NonZeroU32, NonZeroUsize};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::sync::OwnedSemaphorePermit;
use tokio::sync::mpsc;
use tokio::sync::oneshot;
use tokio::time::Instant;
/// What the `Dispatcher` handles send.
pub(super) enum In {
    Submit {
        hook: Box<Hook>,
        sinks: Arc<[usize]>,
        /// Each sink's intake permit, in the order of `sinks`.
        permits: Vec<Permit>,
    },
    Shutdown {
        grace: Duration,
        reply: oneshot::Sender<Vec<Unfinished>>,
    },
}

/// What the scheduler's own tasks report.
pub(super) enum Report {
    Done {
        attempt: u64,
        result: Result<(), Failure>,
        took: Duration,
    },
    Claimed {
        hook: u64,
        result: Result<Option<Claim>, Failure>,
    },
    /// The dead letter `id` was stored, or why it could not be.
    DeadLettered { id: u64, result: Result<(), String> },
    /// The park `id` was written, or why it could not be.
    Parked { id: u64, result: Result<(), String> },
}

/// Where a hook's claim stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum ClaimPhase {
    /// Every sink takes the body inline, or the claim is in the context.
    Ready,
    /// A check-in is needed before any sink runs.
    Needed,
    /// A check-in is running; the hook's jobs are parked.
    Pending,
}

pub(super) struct HookState {
    pub(super) env: Arc<Envelope>,
    pub(super) ctx: Ctx,
    /// The hook's stored trace context: each attempt is a child of it.
    pub(super) parent: Option<TraceContext>,
    pub(super) claim: ClaimPhase,
    /// The inline thresholds of every sink of the hook: a check-in retried for one job
    /// must still claim the body for the others. Empty without a claim store.
    pub(super) thresholds: Vec<Option<NonZeroUsize>>,
    /// Jobs waiting for the check-in.
    pub(super) parked: Vec<Job>,
    /// Jobs not yet finished.
    pub(super) jobs_left: usize,
    /// Unix ms of the submit.
    pub(super) submitted_ms: i64,
    /// `ctx.attempt` of the first attempt.
    pub(super) first_attempt: u32,
    /// The source acknowledgement, if the hook came from a durable source.
    pub(super) settle: Option<Arc<HookSettle>>,
    /// A sink panicked on this hook and it was logged at ERROR: later panics of the hook
    /// are logged at DEBUG (the metric counts every one).
    pub(super) panic_logged: bool,
}

pub(super) struct Job {
    pub(super) hook: u64,
    pub(super) sink: usize,
    /// The hook's tenant, hashed: its queue in the sink's [`Ready`](super::fair::Ready).
    pub(super) tenant: u64,
    pub(super) attempts: u32,
    pub(super) first_ms: Option<i64>,
    pub(super) last_ms: i64,
    pub(super) last_failure: Option<Failure>,
    /// The pause decided for `last_failure` when it was a throttle, in ms (saturating; it
    /// sits in `attempts`' padding, so a waiting job is no larger for it).
    pub(super) last_pause_ms: Option<NonZeroU32>,
    /// Body bytes an attempt charges to its sink's window: the body when it goes inline,
    /// nothing when a claim goes instead (saturating).
    pub(super) weight: u32,
    /// Attempts of this pair that panicked in the sink (saturating): at
    /// [`MAX_SINK_PANICS`] the pair is given up on. In the padding after `weight`.
    pub(super) panics: u8,
    pub(super) permit: Option<Permit>,
}

/// A job's place in its sink's intake: its slot and its hook's bytes there.
pub(super) struct Permit {
    pub(super) _job: OwnedSemaphorePermit,
    pub(super) _bytes: OwnedSemaphorePermit,
}

/// Unix ms on the runtime's monotonic clock, anchored to the wall clock once, when the
/// dispatcher starts: the horizon and the retry times then agree with the timer queue (and
/// with `tokio::time::pause`), and a wall-clock step neither shortens nor stretches a
/// hook's horizon.
#[derive(Debug, Clone, Copy)]
pub(super) struct Clock {
    pub(super) start: Instant,
    pub(super) start_ms: i64,
}

impl Clock {
    pub(super) fn new() -> Self {
        let start_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
            .unwrap_or(0);
        Clock {
            start: Instant::now(),
            start_ms,
        }
    }

    pub(super) fn now_ms(&self) -> i64 {
        let since = i64::try_from(Instant::now().duration_since(self.start).as_millis())
            .unwrap_or(i64::MAX);
        self.start_ms.saturating_add(since)
    }
}

/// How often an open breaker's held jobs are checked against the horizon.
pub(super) const HELD_SCAN: Duration = Duration::from_secs(1);

/// The intake's default bound on body bytes.
pub(super) const DEFAULT_INTAKE_BYTES: usize = 64 << 20;
/// The most a semaphore holds (tokio's `Semaphore::MAX_PERMITS`).
pub(super) const MAX_INTAKE_BYTES: usize = usize::MAX >> 3;

/// The default intake admits every slot's job plus this many more, per sink: the hooks
/// round robin over tenants can reach. A tenant's backlog further ahead in the input than
/// this delays the hooks of everyone behind it; 4,096 lets a tenant sending 1 hook in 50
/// have ~80 of them within reach. Bounded by bytes as well ([`DEFAULT_INTAKE_BYTES`]): at
/// 1 KiB bodies, about 4 MiB of bodies and 3 MiB of state per sink.
pub(super) const READ_AHEAD: usize = 4096;

/// Panics of one (hook, sink) pair's attempts after which dispatch gives up on the pair
/// (permanent, "sink panicked"): a panic is a bug, not a network blip, yet one may come
/// from a rare race inside a client library, so the pair gets two more tries, no more.
pub(super) const MAX_SINK_PANICS: u8 = 3;

/// A hook with this id panics the scheduler task (tests only).
#[cfg(test)]
pub(crate) const PANIC_HOOK: &str = "ankusa-dispatch-test-scheduler-panic";

/// At most this many messages are taken between two pumps.
pub(super) const BURST: usize = 256;

pub(super) struct Scheduler {
    pub(super) sinks: Vec<SinkState>,
    pub(super) config: DispatchConfig,
    pub(super) claim_store: Option<ClaimStore>,
    pub(super) tx: mpsc::UnboundedSender<Report>,
    pub(super) out: mpsc::UnboundedSender<Delivery>,
    pub(super) clock: Clock,
    pub(super) hooks: IdMap<u64, HookState>,
    pub(super) next_hook: u64,
    /// Hashes tenant ids into [`Job::tenant`] (keyed per process: an id cannot be chosen
    /// to collide with another).
    pub(super) tenant_keys: foldhash::fast::RandomState,
    /// Attempts in flight over the sinks that share `concurrency`.
    pub(super) in_flight_shared: usize,
    pub(super) running: IdMap<u64, Job>,
    pub(super) tasks: Tasks,
    pub(super) waiting: RetryQueue,
    /// The sink `pump` serves first (round robin).
    pub(super) next_sink: usize,
    pub(super) desk: Desk,
    pub(super) stopping: Option<Stopping>,
    /// Whether a `Dispatcher` handle may still send.
    pub(super) intake_open: bool,
}

pub(super) struct Stopping {
    pub(super) deadline: Instant,
    pub(super) reply: oneshot::Sender<Vec<Unfinished>>,
    /// Later `shutdown` calls: answered (empty) when the first one is.
    pub(super) more_replies: Vec<oneshot::Sender<Vec<Unfinished>>>,
    pub(super) unfinished: Vec<Unfinished>,
}

impl Scheduler {
    pub(super) async fn run(
        mut self,
        mut rx: mpsc::UnboundedReceiver<In>,
        mut reports: mpsc::UnboundedReceiver<Report>,
    ) {
        loop {
            if self.stopping.is_none() {
                self.wake_due(Instant::now());
                self.wake_dead_letters(Instant::now());
                self.pump(Instant::now());
                self.report_waiting();
            }
            if let Some(s) = &self.stopping {
                if (self.running.is_empty() && self.desk.is_idle()) || Instant::now() >= s.deadline
                {
                    self.finish_shutdown(&mut rx, &mut reports);
                    return;
                }
            } else if !self.intake_open && self.hooks.is_empty() && self.desk.is_idle() {
                // Every handle was dropped and every hook is finished: end the stream.
                return;
            }
            let wake = self.next_wake();
            tokio::select! {
                msg = rx.recv(), if self.intake_open => match msg {
                    Some(msg) => self.take(msg),
                    // Every handle dropped without a shutdown: nobody could be handed back
                    // what is left, so finish every hook held (retries included), then end.
                    None => self.intake_open = false,
                },
                Some(report) = reports.recv() => self.handle(report),
                () = sleep_until(wake) => {}
                Some(joined) = self.tasks.join_next(), if !self.tasks.is_empty() => {
                    self.joined(joined);
                }
            }
            // Take what else is already waiting before the next pump: one pass of the loop
            // per burst of messages, not per message.
            for _ in 0..BURST {
                let mut any = false;
                if let Ok(report) = reports.try_recv() {
                    self.handle(report);
                    any = true;
                }
                if self.intake_open
                    && let Ok(msg) = rx.try_recv()
                {
                    self.take(msg);
                    any = true;
                }
                if let Some(joined) = self.tasks.try_join_next() {
                    self.joined(joined);
                    any = true;
                }
                if !any {
                    break;
                }
            }
        }
    }

    pub(super) fn next_wake(&self) -> Option<Instant> {
        let mut wake = self.waiting.next_at();
        let mut earliest = |t: Instant| wake = Some(wake.map_or(t, |w| w.min(t)));
        let now = Instant::now();
        for sink in &self.sinks {
            if let Some(at) = sink.wake_at(now) {
                earliest(at);
            }
        }
        if let Some(at) = self.desk.wake_at() {
            earliest(at);
        }
        if let Some(s) = &self.stopping {
            earliest(s.deadline);
        }
        wake
    }

    pub(super) fn take(&mut self, msg: In) {
        match msg {
            In::Submit {
                hook,
                sinks,
                permits,
            } => {
                // The tests of a dead scheduler kill it with this hook.
                #[cfg(test)]
                if hook.envelope.id() == PANIC_HOOK {
                    panic!("injected scheduler panic");
                }
                self.submit(*hook, &sinks, permits)
            }
            In::Shutdown { grace, reply } => self.begin_shutdown(grace, reply),
        }
    }

    pub(super) fn handle(&mut self, report: Report) {
        match report {
            Report::Done {
                attempt,
                result,
                took,
            } => self.done(attempt, result, took),
            Report::Claimed { hook, result } => self.claimed(hook, result),
            Report::DeadLettered { id, result } => self.dead_lettered(id, result),
            Report::Parked { id, result } => self.parked(id, result),
        }
    }
}

/// A copy of `f` for another job: same class and landing, the reason as text.
pub(super) fn copy(f: &Failure) -> Failure {
    Failure::new(f.class(), Reason(f.reason_chain())).with_may_have_landed(f.may_have_landed())
}

pub(super) async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}
