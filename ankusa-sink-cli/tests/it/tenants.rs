//! One noisy tenant costs only itself, at the defaults: 1,500 hooks of tenant a with one of
//! tenant b every 51 positions, to an endpoint answering in 50 ms; b's hooks must arrive
//! well ahead of their input order, from input lines and from one Kafka partition.

use super::from_kafka::Topic;
use super::from_source::Forwarder;
use super::{bin, temp_file};
use ankusa_sink_testkit::support::unique_name;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// An HTTP endpoint that answers every request after 50 ms, many at once, and records the
/// order hook ids (`x-ankusa-id`) arrive in.
struct Slow {
    url: String,
    order: Arc<Mutex<Vec<String>>>,
}

impl Slow {
    fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}/hooks", listener.local_addr().unwrap());
        let order: Arc<Mutex<Vec<String>>> = Arc::default();
        let o = order.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { continue };
                let o = o.clone();
                std::thread::spawn(move || {
                    let Ok(mut out) = stream.try_clone() else {
                        return;
                    };
                    let mut r = BufReader::new(stream);
                    loop {
                        let mut line = String::new();
                        if r.read_line(&mut line).unwrap_or(0) == 0 {
                            return;
                        }
                        let (mut len, mut id) = (0usize, None);
                        loop {
                            let mut h = String::new();
                            if r.read_line(&mut h).unwrap_or(0) == 0 {
                                return;
                            }
                            let h = h.trim_end();
                            if h.is_empty() {
                                break;
                            }
                            if let Some((n, v)) = h.split_once(':') {
                                match n.trim().to_ascii_lowercase().as_str() {
                                    "content-length" => len = v.trim().parse().unwrap_or(0),
                                    "x-ankusa-id" => id = Some(v.trim().to_owned()),
                                    _ => {}
                                }
                            }
                        }
                        let mut body = vec![0; len];
                        if r.read_exact(&mut body).is_err() {
                            return;
                        }
                        if let Some(id) = id {
                            o.lock().unwrap().push(id);
                        }
                        std::thread::sleep(Duration::from_millis(50));
                        let ok = "HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n";
                        if out.write_all(ok.as_bytes()).is_err() {
                            return;
                        }
                    }
                });
            }
        });
        Slow { url, order }
    }

    fn sink_file(&self) -> std::path::PathBuf {
        temp_file(
            "slow.toml",
            &format!(
                "type = \"http\"\nurl = \"{}\"\ntimeout_ms = 10000\n",
                self.url
            ),
        )
    }

    /// b's median lead: input position less arrival position, over b's hooks.
    fn median_lead(&self, input: &[String]) -> i64 {
        let order = self.order.lock().unwrap().clone();
        let mut lead: Vec<i64> = input
            .iter()
            .enumerate()
            .filter(|(_, id)| id.contains("-b-"))
            .map(|(at, id)| {
                let arrived = order.iter().position(|x| x == id).expect("b arrived");
                at as i64 - arrived as i64
            })
            .collect();
        lead.sort_unstable();
        lead[lead.len() / 2]
    }
}

/// 1,500 hooks of tenant a with one of tenant b every 51 positions: (ids, JSON lines).
fn interleaved() -> (Vec<String>, Vec<Vec<u8>>) {
    let run = unique_name("ten");
    let (mut a, mut b) = (0, 0);
    (0..1_530)
        .map(|i| {
            let (tenant, n) = if i % 51 == 50 {
                b += 1;
                ("b", b)
            } else {
                a += 1;
                ("a", a)
            };
            let id = format!("{run}-{tenant}-{n}");
            let env = ankusa_sink_core::Envelope::builder(id.clone(), "src", "{}")
                .tenant_id(tenant)
                .build()
                .unwrap();
            (id, serde_json::to_vec(&env).unwrap())
        })
        .unzip()
}

#[test]
fn from_input_lines_a_quiet_tenant_passes_a_noisy_ones_backlog() {
    let slow = Slow::start();
    let (ids, lines) = interleaved();
    let mut text = Vec::new();
    for l in &lines {
        text.extend_from_slice(l);
        text.push(b'\n');
    }
    let input = temp_file("hooks.jsonl", std::str::from_utf8(&text).unwrap());
    let out = bin()
        .args(["forward", "--sink"])
        .arg(slow.sink_file())
        .arg("--input")
        .arg(&input)
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", super::text(&out.stderr));
    let lead = slow.median_lead(&ids);
    eprintln!("input lines: b's median arrival {lead} positions ahead of its input order");
    assert!(lead >= 100, "{lead}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn from_one_kafka_partition_a_quiet_tenant_passes_a_noisy_ones_backlog() {
    needs!("Kafka");
    let topic = Topic::create(1).await;
    let (ids, records) = interleaved();
    topic.produce(&records, 1).await;
    let slow = Slow::start();
    let (src, sink) = (topic.source_file(), slow.sink_file());
    tokio::task::block_in_place(|| {
        let f = Forwarder::spawn(&src, &sink, None, &[]);
        super::from_source::wait_until(Duration::from_secs(120), "every hook arrived", || {
            slow.order.lock().unwrap().len() >= 1_530
        });
        let err = f.stderr();
        assert_eq!(f.stop(Duration::from_secs(30)), Some(143), "{err}");
    });
    let lead = slow.median_lead(&ids);
    eprintln!("one Kafka partition: b's median arrival {lead} positions ahead of its input order");
    assert!(lead >= 100, "{lead}");
    topic.delete().await;
}
