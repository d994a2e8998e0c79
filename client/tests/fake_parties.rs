//! The client against fake parties (`pirq_testkit::fake_party`, `FAKE_PARTY.md`): honest ones
//! give correct pages in one round trip; each silent, dribbling, huge or hostile behaviour
//! ends in a clear error within the deadline (+1 s), naming the party and the phase.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use pirq_client::{Client, ClientError, Encoding, Phase, Wait};
use pirq_testkit::fake_party::{fake, kv_key, kv_value, Behaviour, FakeConfig, FakeParty};

const DEADLINE: Duration = Duration::from_secs(2);

/// An honest party A and party B with `behaviour`.
async fn pair(behaviour: Behaviour) -> (FakeParty, FakeParty) {
    (fake(Behaviour::Honest).await, fake(behaviour).await)
}

fn client(a: &FakeParty, b: &FakeParty, wait: Wait) -> Client {
    Client::builder()
        .party_a(&a.url)
        .party_b(&b.url)
        .deadline(DEADLINE)
        .wait(wait)
        .build()
        .expect("client")
}

fn expected_page(index: u64) -> Vec<u8> {
    let defaults = FakeConfig::default();
    let mut page = vec![0u8; defaults.page_size as usize];
    pirq_shared::synthetic::fill_page(defaults.seed, index, &mut page);
    page
}

#[tokio::test]
async fn honest_parties_answer_in_one_round_trip_each() {
    let (a, b) = pair(Behaviour::Honest).await;
    for encoding in [Encoding::Json, Encoding::Bincode] {
        for wait in [
            Wait::Inline,
            Wait::Events,
            Wait::LongPoll,
            Wait::Poll {
                interval: Duration::from_millis(5),
            },
        ] {
            let c = Client::builder()
                .party_a(&a.url)
                .party_b(&b.url)
                .encoding(encoding)
                .wait(wait)
                .build()
                .unwrap();
            let got = c.fetch(&[0, 17, 255]).await.unwrap();
            assert_eq!(got.epoch, 0);
            for (page, index) in got.pages.iter().zip([0, 17, 255]) {
                assert_eq!(
                    page,
                    &expected_page(index),
                    "{encoding:?} {wait:?} page {index}"
                );
            }
        }
    }
    // One client, many lookups: /v1/info once per party, then one request per party a lookup.
    let (a, b) = pair(Behaviour::Honest).await;
    let c = client(&a, &b, Wait::Inline);
    for i in 0..10 {
        assert_eq!(c.fetch(&[i]).await.unwrap().pages[0], expected_page(i));
    }
    for party in [&a, &b] {
        assert_eq!(party.stats.info.load(Ordering::Relaxed), 1);
        assert_eq!(party.stats.submits.load(Ordering::Relaxed), 10);
        assert_eq!(party.stats.results.load(Ordering::Relaxed), 0);
        assert_eq!(party.stats.events.load(Ordering::Relaxed), 0);
    }
    assert_eq!(c.stats().info_requests, 2);
}

#[tokio::test]
async fn info_is_read_again_when_an_answer_shows_a_new_epoch() {
    let (a, b) = pair(Behaviour::Honest).await;
    let c = client(&a, &b, Wait::Inline);
    assert_eq!(c.fetch(&[1]).await.unwrap().epoch, 0);
    let http = reqwest::Client::new();
    for p in [&a, &b] {
        http.post(format!("{}/fake/advance", p.url))
            .send()
            .await
            .unwrap();
    }
    // Answered at the parties' new newest epoch; the kept info is then read again once.
    let got = c.fetch(&[2]).await.unwrap();
    assert_eq!((got.epoch, &got.pages[0]), (1, &expected_page(2)));
    assert_eq!(c.fetch(&[3]).await.unwrap().epoch, 1);
    assert_eq!(c.fetch(&[4]).await.unwrap().epoch, 1);
    assert_eq!(
        c.stats().info_requests,
        4,
        "info once at start, once after the change"
    );

    // Only A moves on: the unpinned answers differ in epoch; the client reads both infos and
    // asks again at the newest epoch both serve.
    http.post(format!("{}/fake/advance", a.url))
        .send()
        .await
        .unwrap();
    let got = c.fetch(&[5]).await.unwrap();
    assert_eq!((got.epoch, &got.pages[0]), (1, &expected_page(5)));
    // B catches up: the next lookup is at the new epoch. Info read while the parties' newest
    // epochs differed is read again after the lookup pinned to the older one, never kept.
    http.post(format!("{}/fake/advance", b.url))
        .send()
        .await
        .unwrap();
    let got = c.fetch(&[6]).await.unwrap();
    assert_eq!((got.epoch, &got.pages[0]), (2, &expected_page(6)));
}

/// Runs a lookup against an honest A and a B with `behaviour`, expecting a timeout in `phase`
/// within the deadline + 1 s.
async fn times_out(behaviour: Behaviour, wait: Wait, phase: Phase) {
    let (a, b) = pair(behaviour).await;
    let c = client(&a, &b, wait);
    let start = Instant::now();
    let e = c.fetch(&[3]).await.unwrap_err();
    let took = start.elapsed();
    assert!(
        took < DEADLINE + Duration::from_secs(1),
        "{behaviour:?}: {took:?}"
    );
    match &e {
        ClientError::Timeout {
            party,
            phase: p,
            after,
        } => {
            assert!(party.starts_with("party B ("), "{behaviour:?}: {e}");
            assert_eq!((*p, *after), (phase, DEADLINE), "{behaviour:?}: {e}");
        }
        other => panic!("{behaviour:?}: not a timeout: {other}"),
    }
    let text = e.to_string();
    assert!(
        text.contains("party B") && text.contains(phase.as_str()) && text.contains("2 s"),
        "{text}"
    );
}

#[tokio::test]
async fn silent_and_dribbling_parties_end_at_the_deadline() {
    times_out(Behaviour::SilentConnect, Wait::Inline, Phase::Info).await;
    times_out(Behaviour::SilentInfo, Wait::Inline, Phase::Info).await;
    times_out(Behaviour::DribbleInfo, Wait::Inline, Phase::Info).await;
    times_out(Behaviour::SilentSubmit, Wait::Inline, Phase::Submit).await;
    times_out(Behaviour::DribbleAnswer, Wait::Inline, Phase::Answer).await;
    times_out(Behaviour::PendingSilent, Wait::Inline, Phase::Events).await;
    times_out(Behaviour::PendingSilent, Wait::LongPoll, Phase::Poll).await;
    times_out(Behaviour::SseKeepalive, Wait::Events, Phase::Events).await;
}

/// A lookup against an honest A and a B with `behaviour` fails fast with "larger than".
async fn too_large(behaviour: Behaviour, wait: Wait, what: &str) {
    let (a, b) = pair(behaviour).await;
    let start = Instant::now();
    let e = client(&a, &b, wait).fetch(&[3]).await.unwrap_err();
    assert!(
        start.elapsed() < DEADLINE,
        "{behaviour:?} took the whole deadline"
    );
    match &e {
        ClientError::TooLarge { party, what: w, .. } => {
            assert!(party.starts_with("party B ("), "{e}");
            assert!(w.contains(what), "{behaviour:?}: {e}");
        }
        other => panic!("{behaviour:?}: {other}"),
    }
    assert!(e.to_string().contains("larger than"), "{e}");
}

#[tokio::test]
async fn huge_bodies_are_refused_at_their_bound() {
    too_large(Behaviour::HugeInfo, Wait::Inline, "/v1/info").await;
    too_large(Behaviour::HugeAnswer, Wait::Inline, "answer").await;
    too_large(Behaviour::HugeAnswerDeclared, Wait::Inline, "answer").await;
    too_large(Behaviour::SseHugeLine, Wait::Events, "event").await;
}

#[tokio::test]
async fn a_hostile_request_id_never_becomes_a_url() {
    let (a, b) = pair(Behaviour::BadId).await;
    let e = client(&a, &b, Wait::Events).fetch(&[3]).await.unwrap_err();
    assert!(
        matches!(&e, ClientError::Protocol { party, detail }
            if party.starts_with("party B") && detail.contains("refused before it is used in a URL")),
        "{e}"
    );
    // Nothing followed the id: no result read, no second info request.
    assert_eq!(b.stats.info.load(Ordering::Relaxed), 1);
    assert_eq!(b.stats.results.load(Ordering::Relaxed), 0);
    assert_eq!(b.stats.events.load(Ordering::Relaxed), 0);
}

#[tokio::test]
async fn a_partys_error_text_is_stripped_and_cut() {
    let (a, b) = pair(Behaviour::HostileError).await;
    let e = client(&a, &b, Wait::Inline).fetch(&[3]).await.unwrap_err();
    let ClientError::Api { status, error, .. } = &e else {
        panic!("{e}");
    };
    assert_eq!(*status, 400);
    assert_eq!(error.code, "bad[0m_code");
    assert!(
        error.message.starts_with("[31mred2JAAA"),
        "{}",
        error.message
    );
    assert_eq!(
        error.message.chars().count(),
        pirq_client::MAX_PARTY_TEXT_CHARS + 1
    );
    let shown = e.to_string();
    assert!(!shown.chars().any(char::is_control), "{shown:?}");
    assert!(shown.len() < 600, "{} characters shown", shown.len());
}

#[tokio::test]
async fn refusals_with_retry_after_are_retried_inside_the_deadline() {
    for (behaviour, status) in [(Behaviour::Retry503, 503), (Behaviour::Retry429, 429)] {
        let (a, b) = pair(behaviour).await;
        let c = Client::builder()
            .party_a(&a.url)
            .party_b(&b.url)
            .deadline(Duration::from_secs(10))
            .build()
            .unwrap();
        let start = Instant::now();
        assert_eq!(c.fetch(&[9]).await.unwrap().pages[0], expected_page(9));
        // Two refusals, each waited out for Retry-After (1 s) and up to half as long again.
        let took = start.elapsed();
        assert!(took >= Duration::from_secs(2), "{took:?}");
        let stats = c.stats();
        let refused = if status == 503 {
            stats.refused_503
        } else {
            stats.refused_429
        };
        assert_eq!((refused, stats.retries), (2, 2), "{stats:?}");
        assert_eq!(b.stats.submits.load(Ordering::Relaxed), 3);
    }
    // A deadline too short for the wait: the refusal itself is the error, at once.
    let (a, b) = pair(Behaviour::Retry503).await;
    let c = Client::builder()
        .party_a(&a.url)
        .party_b(&b.url)
        .deadline(Duration::from_millis(900))
        .build()
        .unwrap();
    let e = c.fetch(&[9]).await.unwrap_err();
    assert!(matches!(&e, ClientError::Api { status: 503, .. }), "{e}");
}

#[tokio::test]
async fn answers_from_other_contents_are_never_combined() {
    let (a, b) = pair(Behaviour::WrongDigest).await;
    let e = client(&a, &b, Wait::Inline).fetch(&[3]).await.unwrap_err();
    assert!(
        matches!(&e, ClientError::Mismatch(why) if why.contains("digest")),
        "{e}"
    );
}

#[tokio::test]
async fn one_party_twice_is_refused() {
    let id = format!("{:032x}", 42u128);
    let config = || FakeConfig {
        party_id: Some(id.clone()),
        ..FakeConfig::default()
    };
    let a = FakeParty::start(config()).await.unwrap();
    let b = FakeParty::start(config()).await.unwrap();
    let e = client(&a, &b, Wait::Inline).fetch(&[3]).await.unwrap_err();
    assert!(matches!(e, ClientError::SameParty { .. }), "{e}");
}

/// Issue 36, item 7: a party whose `/v1/info` has no `party` id (a proxy stripped it) or a
/// malformed one cannot be told from the other: refused unless `allow_same_party`.
#[tokio::test]
async fn a_party_that_does_not_say_who_it_is_is_refused() {
    let with_id = |id: &str| FakeConfig {
        party_id: Some(id.to_string()),
        ..FakeConfig::default()
    };
    let a = fake(Behaviour::Honest).await;
    for said in ["", "same", "0123456789ABCDEF0123456789ABCDEF"] {
        let b = FakeParty::start(with_id(said)).await.unwrap();
        let e = client(&a, &b, Wait::Inline).fetch(&[3]).await.unwrap_err();
        assert!(
            matches!(&e, ClientError::UnknownParty { label: "B", .. }),
            "{said:?}: {e}"
        );
        assert!(e.to_string().contains("--allow-same-party"), "{e}");
        let allowed = Client::builder()
            .party_a(&a.url)
            .party_b(&b.url)
            .deadline(DEADLINE)
            .allow_same_party(true)
            .build()
            .unwrap();
        let pages = allowed.fetch(&[3]).await.unwrap();
        assert_eq!(pages.pages[0], expected_page(3));
    }
}

#[tokio::test]
async fn tokens_are_sent_to_their_own_party_and_never_shown() {
    let with_token = |token: &str| FakeConfig {
        token: Some(token.into()),
        ..FakeConfig::default()
    };
    let a = FakeParty::start(with_token("token-of-a")).await.unwrap();
    let b = FakeParty::start(with_token("token-of-b")).await.unwrap();
    let without = client(&a, &b, Wait::Inline).fetch(&[3]).await.unwrap_err();
    assert!(
        matches!(&without, ClientError::Api { status: 401, error, .. } if error.code == "unauthorized"),
        "{without}"
    );
    let c = Client::builder()
        .party_a(&a.url)
        .party_b(&b.url)
        .token_a("token-of-a")
        .token_b("token-of-b")
        .build()
        .unwrap();
    assert_eq!(c.fetch(&[3]).await.unwrap().pages[0], expected_page(3));
    let debug = format!("{c:?}");
    assert!(!debug.contains("token-of"), "{debug}");
    // Swapped tokens: each party refuses the other's.
    let swapped = Client::builder()
        .party_a(&a.url)
        .party_b(&b.url)
        .token_a("token-of-b")
        .token_b("token-of-a")
        .build()
        .unwrap();
    assert!(swapped.fetch(&[3]).await.is_err());
}

#[tokio::test]
async fn remote_plain_http_is_refused_before_connecting() {
    let e = Client::builder()
        .party_a("http://pir-a.example.invalid:8080")
        .party_b("https://pir-b.example.invalid")
        .build()
        .unwrap_err();
    assert!(matches!(e, ClientError::InsecureHttp { .. }), "{e}");
    assert!(e.to_string().contains("learns the index"), "{e}");
    // Opting out builds the client (nothing is sent until a lookup).
    Client::builder()
        .party_a("http://pir-a.example.invalid:8080")
        .party_b("https://pir-b.example.invalid")
        .insecure_http(true)
        .build()
        .unwrap();
}

#[tokio::test]
async fn key_value_lookups_go_out_as_one_query_per_party() {
    let config = || FakeConfig {
        kv_records: 100,
        ..FakeConfig::default()
    };
    let a = FakeParty::start(config()).await.unwrap();
    let b = FakeParty::start(config()).await.unwrap();
    let c = client(&a, &b, Wait::Inline);
    assert_eq!(c.get(&kv_key(7)).await.unwrap(), Some(kv_value(7)));
    assert_eq!(c.get(b"no such key").await.unwrap(), None);
    let keys: Vec<Vec<u8>> = (0..20).map(kv_key).chain([b"absent".to_vec()]).collect();
    let got = c.get_many(&keys).await.unwrap();
    for (i, v) in got.values.iter().enumerate().take(20) {
        assert_eq!(v.as_deref(), Some(kv_value(i as u64).as_slice()));
    }
    assert_eq!(got.values[20], None);
    // get, get, get_many: three lookups, each one submit per party (21 keys × 2 candidates
    // fit the fake's limit of 64 keys a query).
    assert_eq!(b.stats.submits.load(Ordering::Relaxed), 3);
    // Over the limit (40 lookups = 80 keys): split by whole lookups into two queries.
    let many: Vec<Vec<u8>> = (0..40).map(kv_key).collect();
    let got = c.get_many(&many).await.unwrap();
    assert!(got.values.iter().all(Option::is_some));
    assert_eq!(b.stats.submits.load(Ordering::Relaxed), 5);
}

#[tokio::test]
async fn a_callers_own_http_client_is_used() {
    let (a, b) = pair(Behaviour::Honest).await;
    let own = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .user_agent("the caller's client")
        .build()
        .unwrap();
    let c = Client::builder()
        .party_a(&a.url)
        .party_b(&b.url)
        .http_client(own.clone())
        .build()
        .unwrap();
    assert_eq!(c.fetch(&[8]).await.unwrap().pages[0], expected_page(8));
    // CA roots belong to the caller's client then, not to the builder.
    let e = Client::builder()
        .party_a(&a.url)
        .party_b(&b.url)
        .http_client(own)
        .ca_cert_pem(b"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n")
        .build()
        .unwrap_err();
    assert!(matches!(e, ClientError::Config(_)), "{e}");
}

/// Every fake-party behaviour is tested: here (this file names each one), and in the
/// TypeScript client's scenario table, which Node and Chromium both run
/// (`clients/ts/test/fake-scenarios.ts`, against this same fake party). A behaviour added to
/// the fake party without a test on both sides fails here.
#[test]
fn every_behaviour_is_tested_here_and_in_typescript() {
    let here = include_str!("fake_parties.rs");
    let scenarios = include_str!("../../clients/ts/test/fake-scenarios.ts");
    let shared = include_str!("../../clients/ts/test/shared-fake.ts");
    for (name, behaviour) in Behaviour::ALL {
        // The variant as a whole word (`HugeAnswer` is not `HugeAnswerDeclared`).
        let path = format!("Behaviour::{behaviour:?}");
        let used = here.match_indices(&path).any(|(at, _)| {
            !here[at + path.len()..].starts_with(|c: char| c.is_ascii_alphanumeric() || c == '_')
        });
        assert!(used, "no Rust test here uses {path}");
        assert!(
            scenarios.contains(&format!("behaviour: \"{name}\"")),
            "no TypeScript scenario for the fake party's {name:?}"
        );
        assert!(
            shared.contains(&format!("\"{name}\"")),
            "SHARED_BEHAVIOURS (clients/ts/test/shared-fake.ts) lacks {name:?}"
        );
    }
}

/// Issue 36, item 5: a party that refuses every submit with `Retry-After: 0` is asked again
/// after a back-off of 100 ms doubling (jittered), not in a busy loop: within a 2 s deadline a
/// handful of submits, where the client without a floor sent thousands.
#[tokio::test(flavor = "multi_thread")]
async fn retry_after_zero_is_backed_off_not_spun_on() {
    use std::io::{Read, Write};
    use std::sync::atomic::AtomicUsize;
    use std::sync::Arc;
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let posts = Arc::new(AtomicUsize::new(0));
    let counted = posts.clone();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { return };
            let counted = counted.clone();
            std::thread::spawn(move || {
                let mut head = [0u8; 4096];
                let _ = conn.set_read_timeout(Some(Duration::from_secs(5)));
                if conn.read(&mut head).unwrap_or(0) == 0 {
                    return;
                }
                counted.fetch_add(1, Ordering::SeqCst);
                let body = r#"{"error":{"code":"backlog_full","message":"come back later"}}"#;
                let _ = write!(
                    conn,
                    "HTTP/1.1 429 Too Many Requests\r\nretry-after: 0\r\n\
                     content-type: application/json\r\ncontent-length: {}\r\n\
                     connection: close\r\n\r\n{body}",
                    body.len()
                );
            });
        }
    });
    let party = pirq_client::Party::new(pirq_client::http_client(Vec::new(), None).unwrap(), &url);
    let request = pirq_client::QueryRequest {
        keys: vec![vec![0u8; 32]],
        epoch: None,
    };
    let e = party
        .query(
            &request,
            Encoding::Json,
            Wait::Poll { interval: DEADLINE },
            DEADLINE,
        )
        .await
        .unwrap_err();
    assert!(matches!(e, ClientError::Api { status: 429, .. }), "{e}");
    let posts = posts.load(Ordering::SeqCst);
    // 100 + 200 + 400 + 800 ms (each up to 1.5×) fit in 2 s: at most 5 tries, at least 3.
    assert!((3..=6).contains(&posts), "{posts} submits in 2 s");
}
