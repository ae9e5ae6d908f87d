//! `mqtts://` against a private TLS-only Mosquitto whose certificate a fresh CA signed:
//! trusted through `tls_ca_file`, refused without it, the password never shown.

use crate::common::{Broker, BrokerConfig, Subscriber, deliver, free_port, unique_name};
use ankusa_sink_core::{Check, Class, Secret, Sink};
use ankusa_sink_mqtt::{MqttConfig, MqttSink};

#[tokio::test]
async fn mqtts_with_the_ca_file_delivers_and_without_it_is_refused() {
    ankusa_sink_testkit::require_broker!("Mosquitto", crate::common::shared_addr());
    // A second, plain listener for the subscriber that reads back.
    let plain = free_port();
    let listener = format!("listener {plain} 127.0.0.1");
    let broker = Broker::start(BrokerConfig {
        users: &[("hooks", "tls-pa55")],
        tls: true,
        lines: &[&listener],
        ..BrokerConfig::default()
    })
    .await;
    assert!(broker.url().starts_with("mqtts://"));
    let topic = unique_name("tls");
    let config = MqttConfig::new(&broker.url(), &topic)
        .unwrap()
        .with_credentials("hooks", Secret::new("tls-pa55"))
        .unwrap();
    let sink = MqttSink::new(config.clone().with_tls_ca_file(broker.ca_file()).unwrap()).unwrap();
    assert_eq!(sink.check().await.unwrap(), Check::Reachable);
    let sub = Subscriber::start_as(
        &format!("127.0.0.1:{plain}"),
        &topic,
        Some(("hooks", "tls-pa55")),
    )
    .await
    .unwrap();
    deliver(&sink).await.unwrap();
    let got = sub.wait_for(1).await;
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].content_type.as_deref(), Some("application/json"));
    assert!(got[0].user_properties.iter().any(|(k, _)| k == "ankusa_id"));
    ankusa_message::decode(&got[0].payload).expect("Message v1");

    // The system roots do not know this CA: refused at the handshake (transient: nothing
    // tells a passing failure from a wrong CA), the password never shows.
    let sink = MqttSink::new(config).unwrap();
    let f = deliver(&sink).await.unwrap_err();
    assert_eq!(f.class(), Class::Transient, "{f}");
    assert_eq!(f.may_have_landed(), Some(false));
    assert!(!f.to_string().contains("tls-pa55"), "{f}");
    assert!(!format!("{sink:?}").contains("tls-pa55"));
}
