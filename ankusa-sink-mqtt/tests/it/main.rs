//! The MQTT sink against real brokers: the shared Mosquitto on 127.0.0.1:1883, private
//! `mosquitto` processes for logins, ACLs and limits, and a scripted MQTT 5 broker for the
//! reason codes Mosquitto does not send on demand.

mod classify;
mod common;
mod conformance;
mod poison;
mod tls;
mod wire;
