//! The dispatcher through the binary, against scripted HTTP servers on 127.0.0.1: dead letters,
//! the horizon, retries that hold no slot, the breaker, metrics and replays.
