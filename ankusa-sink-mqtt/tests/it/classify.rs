//! The classification table of `error.rs`, row by row, provoked for real: the shared
//! Mosquitto for a topic nobody subscribes to, private `mosquitto` processes for logins,
//! ACLs, limits and a stopped broker; a scripted MQTT 5 broker (real packets, parsed by the
//! sink's client) only for the reason codes Mosquitto does not send on demand.

use crate::common::{
    Broker, BrokerConfig, Reply, Script, Scripted, Subscriber, clear_retained, deliver, free_port,
    shared_addr, shared_url, unique_name,
};
use ankusa_message::MessageOptions;
use ankusa_sink_core::{Check, Class, Ctx, Envelope, Failure, Secret, Sink};
use ankusa_sink_mqtt::{MqttConfig, MqttSink, NoSubscriber};
use rumqttc::v5::mqttbytes::v5::{ConnectReturnCode, DisconnectReasonCode, PubAckReason};
use std::num::NonZeroUsize;
use std::time::Duration;

fn sink(config: MqttConfig) -> MqttSink {
    MqttSink::new(config.with_timeout(Duration::from_secs(3))).unwrap()
}

fn fixed(url: &str, topic: &str) -> MqttSink {
    sink(MqttConfig::new(url, topic).unwrap())
}

async fn failure(sink: &MqttSink) -> Failure {
    deliver(sink).await.expect_err("the delivery must fail")
}

/// `(class, may_have_landed)` of one failed delivery.
async fn outcome(sink: &MqttSink) -> (Class, Option<bool>) {
    let f = failure(sink).await;
    (f.class(), f.may_have_landed())
}

#[tokio::test]
async fn no_matching_subscribers_is_config_by_default_transient_or_ok_as_configured() {
    ankusa_sink_testkit::require_broker!("Mosquitto", crate::common::shared_addr());
    let topic = unique_name("nobody");
    let cfg = MqttConfig::new(&shared_url(), &topic).unwrap();
    let s = sink(cfg.clone());
    let f = failure(&s).await;
    assert_eq!(f.class(), Class::Config, "{f}");
    assert_eq!(f.may_have_landed(), Some(false));
    assert!(f.to_string().contains("0x10"), "{f}");
    // check() cannot know about subscribers: it says the broker took the login.
    assert_eq!(s.check().await.unwrap(), Check::Reachable);
    let s = sink(cfg.clone().with_no_subscriber(NoSubscriber::Transient));
    assert_eq!(outcome(&s).await, (Class::Transient, Some(false)));
    deliver(&sink(cfg.clone().with_no_subscriber(NoSubscriber::Ok)))
        .await
        .unwrap();
    // A retained message is kept even when nobody subscribes: it may have landed, and a
    // subscriber that comes later gets it.
    let s = sink(cfg.with_retain(true));
    assert_eq!(outcome(&s).await, (Class::Config, Some(true)));
    let later = Subscriber::start(&shared_addr(), &topic).await.unwrap();
    let got = later.wait_for(1).await;
    assert!(got.len() == 1 && got[0].retain, "{got:?}");
    clear_retained(&shared_addr(), &topic).await.unwrap();
}

#[tokio::test]
async fn a_subscriber_makes_it_ok() {
    ankusa_sink_testkit::require_broker!("Mosquitto", crate::common::shared_addr());
    let topic = unique_name("someone");
    let sub = Subscriber::start(&shared_addr(), &topic).await.unwrap();
    let s = fixed(&shared_url(), &topic);
    assert_eq!(s.check().await.unwrap(), Check::Reachable);
    deliver(&s).await.unwrap();
    assert_eq!(sub.wait_for(1).await.len(), 1);
}

#[tokio::test]
async fn an_acl_that_denies_the_topic_is_config() {
    ankusa_sink_testkit::require_broker!("Mosquitto", crate::common::shared_addr());
    let broker = Broker::start(BrokerConfig {
        users: &[("hooks", "hooks-pa55")],
        acl: &["user hooks", "topic readwrite allowed/#"],
        ..BrokerConfig::default()
    })
    .await;
    let login = |topic: &str| {
        sink(
            MqttConfig::new(&broker.url(), topic)
                .unwrap()
                .with_credentials("hooks", Secret::new("hooks-pa55"))
                .unwrap(),
        )
    };
    let sub = Subscriber::start_as(&broker.addr(), "allowed/#", Some(("hooks", "hooks-pa55")))
        .await
        .unwrap();
    deliver(&login("allowed/x")).await.unwrap();
    assert_eq!(sub.wait_for(1).await.len(), 1);
    let f = failure(&login("denied/x")).await;
    assert_eq!(f.class(), Class::Config, "{f}");
    assert_eq!(f.may_have_landed(), Some(false));
    assert!(f.to_string().contains("0x87"), "{f}");
}

/// Mosquitto answers a wrong password, an unknown user and a missing login alike: CONNACK
/// 0x87 Not authorized. `check()` says so too, and the password never shows.
#[tokio::test]
async fn refused_logins_are_config() {
    ankusa_sink_testkit::require_broker!("Mosquitto", crate::common::shared_addr());
    let broker = Broker::start(BrokerConfig {
        users: &[("hooks", "hooks-pa55")],
        ..BrokerConfig::default()
    })
    .await;
    let topic = "t";
    for cfg in [
        MqttConfig::new(&broker.url(), topic)
            .unwrap()
            .with_credentials("hooks", Secret::new("wrong-pa55"))
            .unwrap(),
        MqttConfig::new(&broker.url(), topic)
            .unwrap()
            .with_credentials("nobody", Secret::new("wrong-pa55"))
            .unwrap(),
        MqttConfig::new(&broker.url(), topic).unwrap(),
    ] {
        let s = sink(cfg);
        let f = failure(&s).await;
        assert_eq!(f.class(), Class::Config, "{f}");
        assert_eq!(f.may_have_landed(), Some(false));
        assert!(f.to_string().contains("CONNACK 0x87"), "{f}");
        assert!(!f.to_string().contains("wrong-pa55"), "{f}");
        assert_eq!(s.check().await.unwrap_err().class(), Class::Config);
    }
    let ok = sink(
        MqttConfig::new(&broker.url(), topic)
            .unwrap()
            .with_credentials("hooks", Secret::new("hooks-pa55"))
            .unwrap()
            .with_no_subscriber(NoSubscriber::Ok),
    );
    assert_eq!(ok.check().await.unwrap(), Check::Reachable);
    deliver(&ok).await.unwrap();
}

/// CONNACK codes Mosquitto does not send on demand, from the scripted broker.
#[tokio::test]
async fn connack_codes_by_the_table() {
    for (code, want) in [
        (ConnectReturnCode::BadUserNamePassword, Class::Config),
        (ConnectReturnCode::Banned, Class::Config),
        (ConnectReturnCode::ServerMoved, Class::Config),
        (ConnectReturnCode::ServerBusy, Class::Throttled),
        (ConnectReturnCode::QuotaExceeded, Class::Throttled),
        (ConnectReturnCode::ConnectionRateExceeded, Class::Throttled),
        (ConnectReturnCode::ServerUnavailable, Class::Transient),
        (ConnectReturnCode::UnspecifiedError, Class::Transient),
    ] {
        let s = Scripted::start(Script::refuse(code)).await.unwrap();
        let sink = fixed(&s.url(), "t");
        let f = failure(&sink).await;
        assert_eq!(f.class(), want, "{code:?}: {f}");
        assert_eq!(f.may_have_landed(), Some(false), "{code:?}");
        assert_eq!(sink.check().await.unwrap_err().class(), want, "{code:?}");
    }
}

/// PUBACK codes Mosquitto does not send on demand (0x10 and 0x87 are real above).
#[tokio::test]
async fn puback_codes_by_the_table() {
    for (reason, want) in [
        (PubAckReason::QuotaExceeded, Class::Throttled),
        (PubAckReason::TopicNameInvalid, Class::Permanent),
        (PubAckReason::PayloadFormatInvalid, Class::Permanent),
        (PubAckReason::NotAuthorized, Class::Config),
        (PubAckReason::UnspecifiedError, Class::Transient),
        (PubAckReason::ImplementationSpecificError, Class::Transient),
        (PubAckReason::PacketIdentifierInUse, Class::Transient),
    ] {
        let s = Scripted::start(Script::always(Reply::Ack(reason)))
            .await
            .unwrap();
        let sink = fixed(&s.url(), "t");
        let f = failure(&sink).await;
        assert_eq!(f.class(), want, "{reason:?}: {f}");
        assert_eq!(f.may_have_landed(), Some(false), "{reason:?}");
        // The connection stays: the next publish is answered the same way.
        assert_eq!(failure(&sink).await.class(), want, "{reason:?}");
    }
    let s = Scripted::start(Script::always(Reply::Ack(PubAckReason::Success)))
        .await
        .unwrap();
    deliver(&fixed(&s.url(), "t")).await.unwrap();
}

/// A DISCONNECT fails every publish waiting on the connection, with the class of its
/// reason code; they had been sent. The next delivery connects again.
#[tokio::test]
async fn a_disconnect_fails_every_waiter_by_its_reason_code() {
    for (reason, want) in [
        (DisconnectReasonCode::ServerBusy, Class::Throttled),
        (DisconnectReasonCode::QuotaExceeded, Class::Throttled),
        (DisconnectReasonCode::MessageRateTooHigh, Class::Throttled),
        (DisconnectReasonCode::NotAuthorized, Class::Config),
        (DisconnectReasonCode::ServerMoved, Class::Config),
        (DisconnectReasonCode::ServerShuttingDown, Class::Transient),
        (DisconnectReasonCode::SessionTakenOver, Class::Transient),
        (DisconnectReasonCode::PacketTooLarge, Class::Transient),
    ] {
        let s = Scripted::start(Script {
            connack: ConnectReturnCode::Success,
            before: Reply::Silent,
            after: Reply::Disconnect(reason),
        })
        .await
        .unwrap();
        let sink = std::sync::Arc::new(fixed(&s.url(), "t"));
        // Five publishes the broker takes and never acknowledges...
        let waiting: Vec<_> = (0..5)
            .map(|_| {
                let sink = std::sync::Arc::clone(&sink);
                tokio::spawn(async move { deliver(&*sink).await })
            })
            .collect();
        // ...then one it answers with the DISCONNECT. Each is still waiting: the broker
        // answers nothing before the switch, and the PUBACK timeout is 3 s.
        s.wait_for_publishes(5).await;
        s.switch();
        let last = failure(&sink).await;
        assert_eq!(last.class(), want, "{reason:?}: {last}");
        for w in waiting {
            let f = w.await.unwrap().expect_err("failed by the disconnect");
            assert_eq!(f.class(), want, "{reason:?}: {f}");
            assert_eq!(f.may_have_landed(), Some(true), "{reason:?}: {f}");
        }
        // A new connection, a new publish: it meets the switched script again.
        assert_eq!(failure(&sink).await.class(), want, "{reason:?}");
    }
}

#[tokio::test]
async fn over_the_connacks_maximum_packet_size_is_permanent_and_nothing_is_sent() {
    ankusa_sink_testkit::require_broker!("Mosquitto", crate::common::shared_addr());
    let broker = Broker::start(BrokerConfig {
        lines: &["max_packet_size 8192"],
        ..BrokerConfig::default()
    })
    .await;
    let topic = unique_name("too-large");
    let sub = Subscriber::start(&broker.addr(), &topic).await.unwrap();
    let s = fixed(&broker.url(), &topic);
    let big = Envelope::builder(unique_name("h"), "src", vec![b'x'; 7000])
        .build()
        .unwrap();
    for _ in 0..2 {
        let f = s.deliver(&big, &Ctx::for_envelope(&big)).await.unwrap_err();
        assert_eq!(f.class(), Class::Permanent, "{f}");
        assert_eq!(f.may_have_landed(), Some(false));
        assert!(f.to_string().contains("Maximum Packet Size of 8192"), "{f}");
    }
    // The connection is untouched: a small hook goes through, and only it arrived.
    deliver(&s).await.unwrap();
    let got = sub.wait_for(1).await;
    assert_eq!(got.len(), 1);
    assert!(got[0].payload.len() < 8192);
}

/// Mosquitto's older `message_size_limit` answers an oversized publish with PUBACK 0x95,
/// which MQTT 5 does not allow in a PUBACK: the client cannot parse it and the connection
/// ends. Transient (may have landed), as the table says of a lost connection.
#[tokio::test]
async fn a_puback_the_client_cannot_parse_is_a_lost_connection() {
    ankusa_sink_testkit::require_broker!("Mosquitto", crate::common::shared_addr());
    let broker = Broker::start(BrokerConfig {
        lines: &["message_size_limit 1000"],
        ..BrokerConfig::default()
    })
    .await;
    let s = sink(MqttConfig::new(&broker.url(), "t").unwrap().with_message(
        MessageOptions::new().with_inline_max_bytes(NonZeroUsize::new(1 << 20).unwrap()),
    ));
    let big = Envelope::builder(unique_name("h"), "src", vec![b'x'; 4000])
        .build()
        .unwrap();
    let f = s.deliver(&big, &Ctx::for_envelope(&big)).await.unwrap_err();
    assert_eq!(f.class(), Class::Transient, "{f}");
    assert_eq!(f.may_have_landed(), Some(true));
}

#[tokio::test]
async fn a_broker_without_qos1_or_retain_is_config() {
    ankusa_sink_testkit::require_broker!("Mosquitto", crate::common::shared_addr());
    let broker = Broker::start(BrokerConfig {
        lines: &["max_qos 0", "retain_available false"],
        ..BrokerConfig::default()
    })
    .await;
    let f = failure(&fixed(&broker.url(), "t")).await;
    assert_eq!(f.class(), Class::Config, "{f}");
    assert!(f.to_string().contains("Maximum QoS 0"), "{f}");
    let broker = Broker::start(BrokerConfig {
        lines: &["retain_available false"],
        ..BrokerConfig::default()
    })
    .await;
    let retained = sink(
        MqttConfig::new(&broker.url(), "t")
            .unwrap()
            .with_retain(true),
    );
    let f = failure(&retained).await;
    assert_eq!(f.class(), Class::Config, "{f}");
    assert!(f.to_string().contains("Retain Available 0"), "{f}");
    let plain = sink(
        MqttConfig::new(&broker.url(), "t")
            .unwrap()
            .with_no_subscriber(NoSubscriber::Ok),
    );
    deliver(&plain).await.unwrap();
}

#[tokio::test]
async fn a_rendered_topic_with_a_wildcard_or_dollar_is_permanent_and_nothing_is_sent() {
    ankusa_sink_testkit::require_broker!("Mosquitto", crate::common::shared_addr());
    let topic = unique_name("tpl");
    let sub = Subscriber::start(&shared_addr(), &format!("{topic}/#"))
        .await
        .unwrap();
    let s =
        sink(MqttConfig::with_template(&shared_url(), &format!("{topic}/{{dedupe_key}}")).unwrap());
    // (A NUL cannot come from a hook: the envelope refuses control characters.)
    for key in ["a+b", "a#"] {
        let e = Envelope::builder(unique_name("h"), "src", &b"{}"[..])
            .dedupe_key(key)
            .build()
            .unwrap();
        let f = s.deliver(&e, &Ctx::for_envelope(&e)).await.unwrap_err();
        assert_eq!(f.class(), Class::Permanent, "{key:?}: {f}");
        assert_eq!(f.may_have_landed(), Some(false));
    }
    let dollar = sink(MqttConfig::with_template(&shared_url(), "{dedupe_key}/x").unwrap());
    let e = Envelope::builder(unique_name("h"), "src", &b"{}"[..])
        .dedupe_key("$SYS")
        .build()
        .unwrap();
    let f = dollar
        .deliver(&e, &Ctx::for_envelope(&e))
        .await
        .unwrap_err();
    assert_eq!(f.class(), Class::Permanent, "{f}");
    // A fine key goes through; nothing else arrived.
    let e = Envelope::builder(unique_name("h"), "src", &b"{}"[..])
        .dedupe_key("evt_1")
        .build()
        .unwrap();
    s.deliver(&e, &Ctx::for_envelope(&e)).await.unwrap();
    let got = sub.wait_for(1).await;
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].topic, format!("{topic}/evt_1"));
}

#[tokio::test]
async fn a_slash_in_an_inserted_value_is_permanent_unless_the_config_allows_levels() {
    ankusa_sink_testkit::require_broker!("Mosquitto", crate::common::shared_addr());
    let topic = unique_name("lvl");
    let sub = Subscriber::start(&shared_addr(), &format!("{topic}/#"))
        .await
        .unwrap();
    let template = format!("{topic}/{{tenant_id}}/{{dedupe_key}}");
    let strict = sink(MqttConfig::with_template(&shared_url(), &template).unwrap());
    let e = Envelope::builder(unique_name("h"), "src", &b"{}"[..])
        .tenant_id("acme")
        .dedupe_key("evt/other")
        .build()
        .unwrap();
    let f = strict
        .deliver(&e, &Ctx::for_envelope(&e))
        .await
        .unwrap_err();
    assert_eq!(f.class(), Class::Permanent, "{f}");
    assert_eq!(f.may_have_landed(), Some(false));
    assert!(f.to_string().contains("dedupe_key"), "{f}");
    assert!(!f.to_string().contains("evt/other"), "{f}");
    // Said otherwise in the config, the value adds its level.
    let loose = sink(
        MqttConfig::with_template(&shared_url(), &template)
            .unwrap()
            .with_topic_values_may_add_levels(true),
    );
    loose.deliver(&e, &Ctx::for_envelope(&e)).await.unwrap();
    let got = sub.wait_for(1).await;
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].topic, format!("{topic}/acme/evt/other"));
}

#[tokio::test]
async fn connection_refused_is_transient_and_nothing_landed() {
    let s = fixed(&format!("mqtt://127.0.0.1:{}", free_port()), "t");
    assert_eq!(outcome(&s).await, (Class::Transient, Some(false)));
    assert_eq!(s.check().await.unwrap_err().class(), Class::Transient);
}

#[tokio::test]
async fn no_puback_in_time_is_transient_and_may_have_landed() {
    let s = Scripted::start(Script::always(Reply::Silent))
        .await
        .unwrap();
    let sink = MqttSink::new(
        MqttConfig::new(&s.url(), "t")
            .unwrap()
            .with_timeout(Duration::from_millis(300)),
    )
    .unwrap();
    for _ in 0..2 {
        let f = failure(&sink).await;
        assert_eq!(
            (f.class(), f.may_have_landed()),
            (Class::Transient, Some(true)),
            "{f}"
        );
    }
}

#[tokio::test]
async fn a_lost_connection_is_transient_and_the_sink_reconnects() {
    ankusa_sink_testkit::require_broker!("Mosquitto", crate::common::shared_addr());
    let mut broker = Broker::start(BrokerConfig::default()).await;
    let topic = unique_name("reconnect");
    let s = sink(
        MqttConfig::new(&broker.url(), &topic)
            .unwrap()
            .with_no_subscriber(NoSubscriber::Ok),
    );
    deliver(&s).await.unwrap();
    broker.stop().await;
    assert_eq!(failure(&s).await.class(), Class::Transient);
    broker.restart().await;
    let sub = Subscriber::start(&broker.addr(), &topic).await.unwrap();
    // The same sink delivers again once it has reconnected.
    ankusa_sink_testkit::support::delivers_again(|| deliver(&s)).await;
    assert_eq!(sub.wait_for(1).await.len(), 1);
}
