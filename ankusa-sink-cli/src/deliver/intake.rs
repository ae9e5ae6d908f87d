//! Where hooks come from (one hook, input lines, a durable source) and how each is
//! submitted to the dispatcher.

use super::*;

/// What the reader reports to the run.
pub(super) enum Read {
    /// A hook was taken for this many (hook, sink) pairs; from this input line, when it
    /// came from one.
    Submitted { pairs: usize, line: Option<InputAt> },
    /// An input line that is not a valid envelope.
    Invalid(u64, String),
    /// A dead-letter line naming a sink this run does not have (its envelope, when the
    /// reader still has it, goes to `--dead-letter` again).
    NoSuchSink {
        id: String,
        sink: String,
        env: Option<Arc<Envelope>>,
        line: Option<u64>,
    },
    /// A hook read but not taken: the run was stopping.
    NotTaken {
        id: String,
        sinks: Vec<String>,
        line: Option<u64>,
    },
    /// The input could not be read further.
    InputError(String),
    /// A source record that is not a hook: reported here; the forward dead-letters and
    /// acknowledges it.
    InvalidRecord { position: String, reason: String },
    /// A record or line a redrive's filters left in place.
    Left,
}

/// Where the hooks come from.
pub(super) enum Input {
    One(Box<Hook>),
    /// Parsed lines from the reader thread; lines over `max_line` bytes were skipped.
    Lines {
        lines: mpsc::Receiver<Vec<Parsed>>,
        max_line: usize,
        /// Dead-letter lines the filters do not match (and, with a filter, plain
        /// envelopes) are skipped.
        filter: RecordFilter,
        rate: Option<f64>,
    },
    /// A durable source; bodies of claimed Message v1 records are redeemed from the store;
    /// records over `max_line` bytes are invalid.
    Source {
        source: crate::from_source::Opened,
        claims: Option<ClaimStore>,
        max_line: usize,
        /// `--redrive`: the source holds dead letters.
        redrive: Option<ankusa_dispatch::forward::Redrive>,
        rate: Option<f64>,
    },
}

/// An input line's number and its hook's envelope (by address: the dispatcher hands the
/// same `Arc` back in each of its deliveries).
#[derive(Debug, Clone, Copy)]
pub(super) struct InputAt {
    pub(super) number: u64,
    pub(super) envelope: usize,
}

/// The address that identifies a hook's envelope while the run holds it.
pub(super) fn envelope_key(env: &Envelope) -> usize {
    std::ptr::from_ref(env) as usize
}

/// Submits one hook (read from input line `line`, if any); says on `tx` how many (hook,
/// sink) pairs it took, or why not.
pub(super) async fn submit_one(
    d: &Dispatcher,
    hook: Hook,
    names: &[String],
    tx: &mpsc::UnboundedSender<Read>,
    line: Option<u64>,
) {
    let pairs = match hook_sink(&hook) {
        Some(_) => 1,
        None => names.len(),
    };
    let id = hook.envelope().id().to_owned();
    let key = envelope_key(hook.envelope());
    match d.submit(hook).await {
        Ok(()) => {
            let line = line.map(|number| InputAt {
                number,
                envelope: key,
            });
            let _ = tx.send(Read::Submitted { pairs, line });
        }
        Err(SubmitError::ShuttingDown(hook)) => {
            let sinks = match hook_sink(&hook) {
                Some(s) => vec![s],
                None => names.to_vec(),
            };
            let _ = tx.send(Read::NotTaken { id, sinks, line });
        }
        Err(SubmitError::UnknownSink(sink)) => {
            let _ = tx.send(Read::NoSuchSink {
                id,
                sink,
                env: None,
                line,
            });
        }
        Err(e) => {
            let _ = tx.send(Read::InputError(e.to_string()));
        }
    }
}

/// Read the input, submit each hook, report what happened to each line. Stops at the end
/// of the input, at a read error (which would repeat forever) or when the run stops; a
/// durable source is stopped and handed back, to be closed once the dispatcher is done.
pub(super) async fn read_and_submit(
    input: Input,
    dispatcher: Dispatcher,
    names: Vec<String>,
    dead_letter: Option<DeadLetter>,
    mut stop: watch::Receiver<Option<Stop>>,
    tx: mpsc::UnboundedSender<Read>,
) -> Option<Box<dyn ankusa_source::Source>> {
    let submit = |hook: Hook, line: Option<u64>| submit_one(&dispatcher, hook, &names, &tx, line);
    match input {
        Input::One(hook) => submit(*hook, None).await,
        Input::Source {
            source,
            claims,
            max_line,
            redrive,
            rate,
        } => {
            let mut forward = match source.main {
                crate::from_source::Main::Shared(source) => {
                    Forward::new(source, dispatcher.clone())
                }
                crate::from_source::Main::PerSink(sources) => {
                    Forward::per_sink(sources, dispatcher.clone())
                }
            };
            for (sink, park) in source.parks {
                forward = forward.park_source(sink, park);
            }
            forward = forward
                .max_record_bytes(max_line, "--max-line-bytes")
                .envelope_parser(ankusa_sinks::from_json_value::<Envelope>);
            if let Some(store) = claims {
                forward = forward.claim_store(store);
            }
            if let Some(dl) = dead_letter {
                forward = forward.dead_letter(dl);
            }
            if let Some(r) = redrive {
                forward = forward.redrive(r);
            }
            if let Some(r) = rate {
                forward = forward.rate(r);
            }
            let stopper = forward.stopper();
            if stop.borrow().is_some() {
                stopper.stop();
            }
            // Lives on after the intake: a stop still releases an undecodable record whose
            // dead letter is being written again.
            tokio::spawn(async move {
                if stop.wait_for(Option::is_some).await.is_ok() {
                    stopper.stop();
                }
            });
            let source = forward
                .read(|e| {
                    let read = match e {
                        ForwardEvent::Submitted { pairs, .. } => {
                            Read::Submitted { pairs, line: None }
                        }
                        ForwardEvent::NotTaken { hook, .. } => Read::NotTaken {
                            id: hook.envelope().id().to_owned(),
                            sinks: match hook_sink(&hook) {
                                Some(s) => vec![s],
                                None => names.clone(),
                            },
                            line: None,
                        },
                        ForwardEvent::Invalid { position, reason } => {
                            Read::InvalidRecord { position, reason }
                        }
                        ForwardEvent::Failed(e) => Read::InputError(e.to_string()),
                        ForwardEvent::Left { position, reason } => {
                            tracing::debug!(position = %position, "left in place: {reason}");
                            Read::Left
                        }
                        // A future event this run does not report.
                        _ => return,
                    };
                    let _ = tx.send(read);
                })
                .await;
            return Some(source);
        }
        Input::Lines {
            mut lines,
            max_line,
            filter,
            rate,
        } => {
            // One replay job per run: every dead-letter line it replays carries its id.
            let replay_id = ulid::Ulid::new().to_string();
            let pacer = rate.and_then(ankusa_dispatch::forward::Pacer::per_second);
            loop {
                let batch = tokio::select! {
                    biased;
                    _ = stop.wait_for(Option::is_some) => return None,
                    b = lines.recv() => match b {
                        Some(b) => b,
                        None => return None,
                    },
                };
                for parsed in batch {
                    if stop.borrow().is_some() {
                        return None;
                    }
                    match parsed {
                        Parsed::Failed(n, e) => {
                            let _ = tx.send(Read::InputError(format!(
                                "reading the input failed after line {n}: {e}"
                            )));
                            return None;
                        }
                        Parsed::TooLong(n) => {
                            let _ = tx.send(Read::Invalid(
                                n,
                                format!("longer than --max-line-bytes ({max_line} bytes)"),
                            ));
                        }
                        Parsed::Invalid(n, reason) => {
                            let _ = tx.send(Read::Invalid(n, reason));
                        }
                        Parsed::Hook(n, env, info) => {
                            let keep = match &info {
                                Some(i) => filter.matches(&env, i),
                                None => filter.is_empty(),
                            };
                            if !keep {
                                let _ = tx.send(Read::Left);
                                continue;
                            }
                            if let Some(p) = &pacer {
                                tokio::select! {
                                    biased;
                                    _ = stop.wait_for(Option::is_some) => return None,
                                    () = p.turn() => {}
                                }
                            }
                            let Some(sink) = info.map(|i| i.sink) else {
                                submit(hook_of(env), Some(n)).await;
                                continue;
                            };
                            if names.contains(&sink) {
                                let hook =
                                    hook_of(env).only_sink(sink).replay_id(replay_id.clone());
                                submit(hook, Some(n)).await;
                            } else {
                                let _ = tx.send(Read::NoSuchSink {
                                    id: env.id().to_owned(),
                                    sink,
                                    env: Some(env),
                                    line: Some(n),
                                });
                            }
                        }
                    }
                }
            }
        }
    }
    None
}

/// The one sink a hook is bound to (a dead-letter replay), if any.
pub(super) fn hook_sink(hook: &Hook) -> Option<String> {
    hook.sink_name().map(str::to_owned)
}

/// Parse one input line: an envelope, or a dead-letter record (an envelope plus where and
/// why it died). The error never quotes the input: envelopes carry secrets.
pub(crate) fn parse_line(bytes: &[u8]) -> Result<(Envelope, Option<Box<DeadLetterInfo>>), String> {
    let text = std::str::from_utf8(bytes)
        .map_err(|e| format!("not UTF-8 (invalid byte at offset {})", e.valid_up_to()))?;
    if !text.contains("\"dead_letter\"")
        && let Ok(env) = serde_json::from_str::<Envelope>(text)
    {
        return Ok((env, None));
    }
    // Slow path: a dead-letter record, or an error (serde's own messages quote values).
    let value: serde_json::Value = serde_json::from_str(text).map_err(|e| {
        format!(
            "not JSON ({:?} error at column {})",
            e.classify(),
            e.column()
        )
    })?;
    let (value, dead) = split_record(value)?;
    let env =
        ankusa_sinks::from_json_value(value).map_err(|e| format!("not a valid envelope: {e}"))?;
    Ok((env, dead.map(Box::new)))
}

/// Where a run reading input lines stands: the point an operator resumes from after a
/// stop (`--skip-lines`).
#[derive(Debug, Default)]
pub(super) struct Lines {
    /// Hooks with pairs not finished yet, by envelope address: (line, pairs left).
    pub(super) open: HashMap<usize, (u64, usize)>,
    /// The first line whose hook was read and not taken (the run was stopping).
    pub(super) not_taken: Option<u64>,
    /// The last line read.
    pub(super) last: u64,
}

impl Lines {
    pub(super) fn read(&mut self, line: u64) {
        self.last = self.last.max(line);
    }

    pub(super) fn submitted(&mut self, line: InputAt, pairs: usize) {
        self.read(line.number);
        self.open.insert(line.envelope, (line.number, pairs));
    }

    pub(super) fn not_taken(&mut self, line: u64) {
        self.read(line);
        self.not_taken = Some(self.not_taken.map_or(line, |n| n.min(line)));
    }

    /// A pair of the hook of `env` got its final outcome.
    pub(super) fn finished(&mut self, env: &Envelope) {
        let key = envelope_key(env);
        if let Some((_, left)) = self.open.get_mut(&key) {
            *left -= 1;
            if *left == 0 {
                self.open.remove(&key);
            }
        }
    }

    /// Every line up to this one has its final outcome: `--skip-lines` resumes here and
    /// loses nothing (a later line may be finished too: resumed, it is delivered again).
    pub(super) fn resume_after(&self) -> u64 {
        let first_open = self.open.values().map(|&(line, _)| line).min();
        match (first_open, self.not_taken) {
            (None, None) => self.last,
            (a, b) => a.into_iter().chain(b).min().unwrap_or(1) - 1,
        }
    }
}
