//! `docs/openapi.yaml` against the gateway: every route the gateway serves is in the document
//! and nothing else, and live gateways (real Redis, workers) answer each route, error cases
//! included, with a status, headers, content type and body that the document describes: every
//! documented status of every route, every error code listed for it, and `/v1/info` of page,
//! key-value, signed and sharded databases.
//!
//! A schema is checked as JSON Schema 2020-12 (what OpenAPI 3.1 uses) by `jsonschema`, with the
//! whole document as the root so that its `$ref`s resolve. The document's objects say
//! `additionalProperties: false`, so a field the gateway adds or drops fails here until the
//! document says so too. The binary twin is decoded with `pirq-shared` and checked as its JSON;
//! event streams are checked event by event against `x-events`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use base64::Engine as _;
use pirq_e2e::cli::{pirq_ok, publisher_keygen};
use pirq_e2e::{Party, PartyOptions, TestDb};
use pirq_gateway::{Route, Routes};
use pirq_shared::dpf::generate;
use pirq_shared::error::ErrorCode;
use pirq_shared::signing::{Manifest, PageSigner, SecretKey};
use pirq_shared::wire::{Job, QueryRequest, QueryResult};
use reqwest::header::{HeaderMap, CONTENT_TYPE};
use serde_json::{json, Value};

const PAGES: u64 = 1000; // domain bits 10
const PAGE_SIZE: usize = 256;
const N: u8 = 10;
const TOKEN: &str = "openapi-admin-token";
const METHODS: [&str; 8] = [
    "get", "put", "post", "delete", "options", "head", "patch", "trace",
];
/// The headers of the API itself: one the gateway sends must be documented for that answer.
const API_HEADERS: [&str; 5] = [
    "www-authenticate",
    "location",
    "retry-after",
    "preference-applied",
    "server-timing",
];

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

fn key(index: u64) -> Vec<u8> {
    generate(N, index, &mut rand::rng()).unwrap().0.to_bytes()
}

/// `~` and `/` escaped for a JSON pointer token.
fn token(s: &str) -> String {
    s.replace('~', "~0").replace('/', "~1")
}

/// One answer, read whole.
pub(crate) struct Reply {
    pub(crate) status: u16,
    pub(crate) headers: HeaderMap,
    pub(crate) body: Vec<u8>,
}

impl Reply {
    pub(crate) fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or(Value::Null)
    }

    pub(crate) fn code(&self) -> String {
        self.json()["error"]["code"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    }
}

pub(crate) async fn send(req: reqwest::RequestBuilder) -> Reply {
    let (client, req) = req.build_split();
    let req = req.expect("a request");
    let what = format!("{} {}", req.method(), req.url().path());
    let resp = client
        .execute(req)
        .await
        .unwrap_or_else(|e| panic!("{what}: no answer: {e}"));
    Reply {
        status: resp.status().as_u16(),
        headers: resp.headers().clone(),
        body: resp.bytes().await.expect("a whole body").to_vec(),
    }
}

/// A documented answer: path, method, status.
type Answer = (String, String, String);
/// A documented error body: path, method, status and error code.
type ErrorAnswer = (String, String, String, String);

/// Sends `request` as it is on a new connection to `base` (`http://HOST:PORT`) and reads the
/// answer until the connection closes or its `Content-Length` is in: for what an HTTP client
/// library would not send.
async fn raw(base: &str, request: &str) -> Reply {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let addr = base.trim_start_matches("http://");
    let mut tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    tcp.write_all(request.as_bytes()).await.unwrap();
    let mut bytes = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let n = tokio::time::timeout(Duration::from_secs(10), tcp.read(&mut chunk))
            .await
            .expect("an answer within 10 s")
            .unwrap_or(0);
        bytes.extend_from_slice(&chunk[..n]);
        if let Some(reply) = parse_reply(&bytes) {
            return reply;
        }
        assert!(
            n > 0,
            "closed before a whole answer: {:?}",
            String::from_utf8_lossy(&bytes)
        );
    }
}

/// An HTTP/1.1 answer in `bytes` once its head and `Content-Length` bytes of body are there.
fn parse_reply(bytes: &[u8]) -> Option<Reply> {
    let end = bytes.windows(4).position(|w| w == b"\r\n\r\n")?;
    let head = std::str::from_utf8(&bytes[..end]).expect("an ASCII head");
    let mut lines = head.split("\r\n");
    let status = lines.next()?.split(' ').nth(1)?.parse().ok()?;
    let mut headers = HeaderMap::new();
    for line in lines {
        let (name, value) = line.split_once(':')?;
        headers.append(
            reqwest::header::HeaderName::from_bytes(name.trim().as_bytes()).ok()?,
            value.trim().parse().ok()?,
        );
    }
    let length: usize = headers.get("content-length")?.to_str().ok()?.parse().ok()?;
    let body = bytes.get(end + 4..end + 4 + length)?.to_vec();
    Some(Reply {
        status,
        headers,
        body,
    })
}

/// The document, and which documented answers (and error codes) the live gateways gave.
pub(crate) struct Api {
    root: Value,
    seen: Mutex<BTreeSet<Answer>>,
    codes: Mutex<BTreeSet<ErrorAnswer>>,
}

impl Api {
    pub(crate) fn load() -> Api {
        let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../docs/openapi.yaml");
        let text = std::fs::read_to_string(&path).expect("docs/openapi.yaml");
        let root: Value = serde_norway::from_str(&text).expect("docs/openapi.yaml is YAML");
        assert_eq!(root["openapi"], "3.1.0", "an OpenAPI 3.1 document");
        Api {
            root,
            seen: Mutex::new(BTreeSet::new()),
            codes: Mutex::new(BTreeSet::new()),
        }
    }

    fn at(&self, pointer: &str) -> &Value {
        self.root
            .pointer(pointer.trim_start_matches('#'))
            .unwrap_or_else(|| panic!("docs/openapi.yaml has nothing at {pointer}"))
    }

    /// The pointer and value at `pointer`, following a `$ref` there (one level, as OpenAPI's
    /// responses and headers use them).
    fn follow(&self, pointer: String) -> (String, &Value) {
        let value = self.at(&pointer);
        match value.get("$ref").and_then(Value::as_str) {
            Some(target) => (target.to_string(), self.at(target)),
            None => (pointer, value),
        }
    }

    /// Every error of `instance` against the schema at `pointer` (none: it conforms).
    fn errors(&self, pointer: &str, instance: &Value) -> Vec<String> {
        let mut root = self.root.clone();
        // A URI fragment: the braces of a path template are percent-encoded (RFC 6901 §6).
        let fragment = pointer.replace('{', "%7B").replace('}', "%7D");
        root["$ref"] = Value::String(fragment);
        let validator = jsonschema::draft202012::options()
            .build(&root)
            .unwrap_or_else(|e| panic!("the schema at {pointer} does not compile: {e}"));
        validator
            .iter_errors(instance)
            .map(|e| format!("{} at {}", e, e.instance_path()))
            .collect()
    }

    fn conforms(&self, pointer: &str, instance: &Value, what: &str) {
        let errors = self.errors(pointer, instance);
        assert!(
            errors.is_empty(),
            "{what}: {instance} does not match {pointer}:\n{}",
            errors.join("\n")
        );
    }

    /// A request body the document must accept (and so describe).
    fn accepts_request(&self, path: &str, method: &str, body: &Value) {
        let pointer = format!(
            "#/paths/{}/{method}/requestBody/content/application~1json/schema",
            token(path)
        );
        self.conforms(&pointer, body, &format!("{method} {path} request"));
    }

    /// Holds `reply` to the document's answer `status` of `method path`: the status is listed;
    /// its required headers are there and every API header present is documented and matches
    /// its schema; the content type is one it lists (no body where it lists none); the body
    /// matches that content's schema. Returns the events of an event stream.
    pub(crate) fn check(&self, method: &str, path: &str, reply: &Reply) -> Vec<(String, Value)> {
        let what = format!("{} {path} → {}", method.to_uppercase(), reply.status);
        let op = format!("#/paths/{}/{method}", token(path));
        self.at(&op);
        let status = reply.status.to_string();
        let listed = format!("{op}/responses/{status}");
        assert!(
            self.root.pointer(&listed[1..]).is_some(),
            "{what}: the document lists no {status} for this route (body {})",
            String::from_utf8_lossy(&reply.body)
        );
        if let Some(code) = reply.json()["error"]["code"].as_str() {
            self.codes.lock().unwrap().insert((
                path.to_string(),
                method.to_string(),
                status.clone(),
                code.to_string(),
            ));
        }
        self.seen
            .lock()
            .unwrap()
            .insert((path.to_string(), method.to_string(), status));
        let (response, doc) = self.follow(listed);
        self.check_headers(&what, &response, doc, &reply.headers);
        self.check_content(&what, &response, doc, reply)
    }

    /// Like [`Api::check`] for answers no route gives: the fallback's 404 and 405.
    fn check_fallback(&self, component: &str, reply: &Reply) {
        let pointer = format!("#/components/responses/{component}");
        let doc = self.at(&pointer);
        self.check_headers(component, &pointer, doc, &reply.headers);
        self.check_content(component, &pointer, doc, reply);
    }

    fn check_headers(&self, what: &str, response: &str, doc: &Value, headers: &HeaderMap) {
        let documented: BTreeMap<String, String> = doc
            .get("headers")
            .and_then(Value::as_object)
            .map(|h| {
                h.keys()
                    .map(|name| {
                        (
                            name.to_ascii_lowercase(),
                            format!("{response}/headers/{}", token(name)),
                        )
                    })
                    .collect()
            })
            .unwrap_or_default();
        for (name, pointer) in &documented {
            let (pointer, header) = self.follow(pointer.clone());
            let value = headers.get(name.as_str()).map(|v| v.to_str().unwrap());
            let Some(value) = value else {
                assert!(
                    header["required"] != true,
                    "{what}: required header {name} is missing"
                );
                continue;
            };
            let schema = format!("{pointer}/schema");
            let instance = if self.at(&schema)["type"] == "integer" {
                value
                    .parse::<i64>()
                    .map(Value::from)
                    .unwrap_or_else(|_| Value::String(value.to_string()))
            } else {
                Value::String(value.to_string())
            };
            self.conforms(&schema, &instance, &format!("{what}: header {name}"));
        }
        for name in API_HEADERS {
            assert!(
                !headers.contains_key(name) || documented.contains_key(name),
                "{what}: header {name} is sent but not documented for this answer"
            );
        }
    }

    fn check_content(
        &self,
        what: &str,
        response: &str,
        doc: &Value,
        reply: &Reply,
    ) -> Vec<(String, Value)> {
        let Some(content) = doc.get("content").and_then(Value::as_object) else {
            assert!(
                reply.body.is_empty(),
                "{what}: a body where none is documented"
            );
            return Vec::new();
        };
        let media = reply
            .headers
            .get(CONTENT_TYPE)
            .map(|v| v.to_str().unwrap())
            .unwrap_or("")
            .split(';')
            .next()
            .unwrap()
            .trim()
            .to_ascii_lowercase();
        assert!(
            content.contains_key(&media),
            "{what}: content type {media:?} is not one of {:?}",
            content.keys().collect::<Vec<_>>()
        );
        let base = format!("{response}/content/{}", token(&media));
        let body = || {
            serde_json::from_slice::<Value>(&reply.body).unwrap_or_else(|e| {
                panic!(
                    "{what}: not JSON ({e}): {}",
                    String::from_utf8_lossy(&reply.body)
                )
            })
        };
        match media.as_str() {
            "application/json" => self.conforms(&format!("{base}/schema"), &body(), what),
            "application/x-bincode" => {
                let of = content[&media]["x-bincode-of"]
                    .as_str()
                    .unwrap_or_else(|| panic!("{what}: no x-bincode-of"));
                let result = QueryResult::from_bincode(&reply.body)
                    .unwrap_or_else(|e| panic!("{what}: not a bincode QueryResult: {e}"));
                let json: Value = serde_json::from_slice(&result.to_json()).unwrap();
                self.conforms(of, &json, &format!("{what} (bincode)"));
            }
            "text/event-stream" => {
                let events = parse_events(&reply.body);
                assert!(!events.is_empty(), "{what}: an empty event stream");
                for (name, data) in &events {
                    let pointer = format!("{base}/x-events/{name}");
                    assert!(
                        self.root.pointer(&pointer[1..]).is_some(),
                        "{what}: event {name:?} is not in x-events"
                    );
                    let (pointer, _) = self.follow(pointer);
                    self.conforms(&pointer, data, &format!("{what}: event {name}"));
                }
                return events;
            }
            "text/plain" => {
                std::str::from_utf8(&reply.body).expect("text is UTF-8");
            }
            other => panic!("{what}: the test does not know how to read {other}"),
        }
        Vec::new()
    }
}

/// `event:`/`data:` pairs of an SSE body (comment lines skipped).
fn parse_events(body: &[u8]) -> Vec<(String, Value)> {
    let text = std::str::from_utf8(body).expect("an event stream is UTF-8");
    text.split("\n\n")
        .filter_map(|block| {
            let mut name = None;
            let mut data = String::new();
            for line in block.lines() {
                if let Some(v) = line.strip_prefix("event:") {
                    name = Some(v.trim().to_string());
                } else if let Some(v) = line.strip_prefix("data:") {
                    data.push_str(v.trim_start());
                }
            }
            let name = name?;
            let data = serde_json::from_str(&data)
                .unwrap_or_else(|e| panic!("event {name}: data is not JSON ({e}): {data}"));
            Some((name, data))
        })
        .collect()
}

/// The methods and paths the document describes.
fn documented_operations(api: &Api) -> BTreeSet<(String, String)> {
    let paths = api.root["paths"].as_object().expect("paths");
    paths
        .iter()
        .flat_map(|(path, item)| {
            METHODS
                .iter()
                .filter(|m| item.get(**m).is_some())
                .map(|m| (m.to_uppercase(), path.clone()))
        })
        .collect()
}

#[test]
fn the_document_lists_every_route_the_gateway_serves_and_no_other() {
    let api = Api::load();
    let served: BTreeSet<(String, String)> = Route::ALL
        .iter()
        .map(|r| (r.method().to_string(), r.path().to_string()))
        .collect();
    let documented = documented_operations(&api);
    assert_eq!(
        served, documented,
        "gateway routes (left) vs docs/openapi.yaml (right)"
    );
    for route in Route::ALL {
        let listener = match (
            route.served_on(Routes::Public),
            route.served_on(Routes::Admin),
        ) {
            (true, true) => "both",
            (true, false) => "public",
            (false, true) => "admin",
            (false, false) => panic!("{route:?} is served nowhere"),
        };
        assert_eq!(
            api.root["paths"][route.path()]["x-listener"],
            listener,
            "x-listener of {}",
            route.path()
        );
    }
}

#[test]
fn the_document_has_every_error_code_each_with_its_status() {
    let api = Api::load();
    let documented: BTreeSet<&str> = api.root["components"]["schemas"]["ErrorCode"]["enum"]
        .as_array()
        .expect("ErrorCode enum")
        .iter()
        .map(|c| c.as_str().unwrap())
        .collect();
    let codes: BTreeSet<&str> = ErrorCode::ALL.iter().map(|c| c.as_str()).collect();
    assert_eq!(codes, documented, "ErrorCode::ALL (left) vs the document");
    // Each answer that names its codes gives each one the status the gateway answers it with.
    let mut checked = 0;
    for (path, method, status, code) in listed_codes(&api) {
        let parsed = ErrorCode::parse(&code)
            .unwrap_or_else(|| panic!("{method} {path} {status}: unknown {code}"));
        assert_eq!(
            parsed.http_status().to_string(),
            status,
            "{method} {path}: {code} is listed under {status}"
        );
        checked += 1;
    }
    assert!(checked > 50, "only {checked} codes checked");
}

/// Every error code each route's documented answers list, as (path, method, status, code).
fn listed_codes(api: &Api) -> Vec<ErrorAnswer> {
    let mut listed = Vec::new();
    for (path, item) in api.root["paths"].as_object().unwrap() {
        for method in METHODS.iter().filter(|m| item.get(**m).is_some()) {
            let responses = item[*method]["responses"].as_object().unwrap();
            for status in responses.keys() {
                let pointer = format!("#/paths/{}/{method}/responses/{status}", token(path));
                let (_, response) = api.follow(pointer);
                let Some(parts) = response
                    .pointer("/content/application~1json/schema/allOf")
                    .and_then(Value::as_array)
                else {
                    continue;
                };
                let codes = parts
                    .iter()
                    .find_map(|p| p.pointer("/properties/error/properties/code/enum"))
                    .and_then(Value::as_array)
                    .unwrap_or_else(|| panic!("{method} {path} {status}: no codes listed"));
                for code in codes {
                    listed.push((
                        path.clone(),
                        method.to_string(),
                        status.clone(),
                        code.as_str().unwrap().to_string(),
                    ));
                }
            }
        }
    }
    listed
}

/// The answers no live run here gives, each for a reason; every other documented status of
/// every route is produced and checked below.
const NOT_PRODUCED: &[(&str, &str, &str, &str)] = &[
    ("*", "*", "500", "a bug"),
    (
        "*",
        "*",
        "408",
        "a body slower than --body-timeout-ms: errors.rs",
    ),
    (
        "/healthz",
        "get",
        "503",
        "every connection busy: slow_clients.rs",
    ),
    (
        "/metrics",
        "get",
        "503",
        "every connection busy: slow_clients.rs",
    ),
    (
        "/v1/queries",
        "post",
        "404",
        "an idempotent replay after the result expired",
    ),
    // A table's routes run the handlers of the routes without a table name (checked above) with
    // the table's state; tables.rs checks their answers (200, 202, 404 unknown_table, the
    // events, /v1/tables) against this document.
    ("/v1/tables", "get", "*", "tables.rs"),
    ("/v1/tables/{name}/queries", "post", "*", "tables.rs"),
    ("/v1/tables/{name}/queries/{id}", "get", "*", "tables.rs"),
    (
        "/v1/tables/{name}/queries/{id}/events",
        "get",
        "*",
        "tables.rs",
    ),
    ("/v1/tables/{name}/info", "get", "*", "tables.rs"),
    ("/v1/tables/{name}/manifests", "get", "*", "tables.rs"),
    ("/v1/admin/tables/{name}/epochs", "post", "*", "tables.rs"),
];

fn produced_elsewhere(path: &str, method: &str, status: &str) -> bool {
    NOT_PRODUCED.iter().any(|(p, m, s, _)| {
        (*p == "*" || *p == path) && (*m == "*" || *m == method) && (*s == "*" || *s == status)
    })
}

/// The error codes listed in produced answers that no route here gives, each for a reason:
/// (path, method, code, why). Every other code a documented answer lists is produced and its
/// body checked below.
const CODES_NOT_PRODUCED: &[(&str, &str, &str, &str)] = &[(
    "*",
    "*",
    "too_many_connections",
    "answered as a connection is accepted, before a request is read: checked as `Busy`",
)];

fn code_produced_elsewhere((path, method, status, code): &ErrorAnswer) -> bool {
    produced_elsewhere(path, method, status)
        || CODES_NOT_PRODUCED
            .iter()
            .any(|(p, m, c, _)| (*p == "*" || p == path) && (*m == "*" || m == method) && c == code)
}

/// `GET url/readyz` until it answers 200 (15 s at most), checked against the document.
async fn wait_ready(api: &Api, http: &reqwest::Client, url: &str) {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let r = send(http.get(format!("{url}/readyz"))).await;
        api.check("get", "/readyz", &r);
        if r.status == 200 {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{url} not ready: {}",
            String::from_utf8_lossy(&r.body)
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// What the main parties do not reach: `/v1/info`'s `kv`, `signing` and `shards` from a signed
/// key-value database served by a party sharded in two (`shard_unavailable` while one shard is
/// missing), `kv.value_kind` from a table of variable-size values, and the error bodies of a
/// party whose Redis is full (`storage_full`) and then gone (`redis_unavailable`).
async fn kv_signed_sharded_and_failing_parties(api: &Api, http: &reqwest::Client) {
    let dir = tempfile::tempdir().unwrap();
    let file = |name: &str| dir.path().join(name).display().to_string();
    let (secret, public) = publisher_keygen(dir.path(), "publisher");
    let (secret, public) = (secret.display().to_string(), public.display().to_string());
    let (fixed, signed_kv) = (file("fixed.jsonl"), file("signed-kv.pirdb"));
    let (varied, variable_kv) = (file("varied.jsonl"), file("variable-kv.pirdb"));
    for (records, values, seed) in [
        (&fixed, "--value-size", "3"),
        (&varied, "--max-value-size", "4"),
    ] {
        let gen = [
            "kv",
            "gen",
            "--records",
            "200",
            "--key-size",
            "20",
            values,
            "40",
        ];
        pirq_ok(&[&gen[..], &["--seed", seed, "--out", records]].concat());
    }
    let build = |records: &str, values: &str, out: &str| {
        let mut args = vec![
            "kv",
            "build",
            "--key-encoding",
            "hex",
            "--value-encoding",
            "hex",
            "--records",
            records,
            values,
            "40",
        ];
        args.extend(["--key-size", "20", "--page-size", "512", "--seed", "9"]);
        args.extend(["--out", out]);
        args.into_iter().map(String::from).collect::<Vec<_>>()
    };
    let mut signed_build = build(&fixed, "--value-size", &signed_kv);
    // Shards are whole 256-page blocks: two need more than 256 pages.
    signed_build.extend(["--pages", "600", "--sign-key", &secret].map(String::from));
    pirq_ok(&signed_build.iter().map(String::as_str).collect::<Vec<_>>());
    let variable_build = build(&varied, "--max-value-size", &variable_kv);
    pirq_ok(
        &variable_build
            .iter()
            .map(String::as_str)
            .collect::<Vec<_>>(),
    );

    eprintln!("openapi: a signed kv database, sharded");
    let options = PartyOptions {
        no_worker: true,
        gateway_args: pirq_e2e::strings(&["--admin-token", TOKEN]),
        ..Default::default()
    };
    let mut sharded = Party::start(Path::new(&signed_kv), "oashard", options)
        .await
        .unwrap();
    sharded
        .start_worker_with(&["--shard", "0/2"])
        .await
        .unwrap();
    let s = sharded.url.clone();
    let r = send(http.get(format!("{s}/readyz"))).await;
    assert_eq!((r.status, r.code().as_str()), (503, "shard_unavailable"));
    api.check("get", "/readyz", &r);
    let r = send(http.get(format!("{s}/v1/info"))).await;
    assert_eq!(r.status, 200);
    api.check("get", "/v1/info", &r);
    let ready: Vec<Value> = r.json()["shards"]
        .as_array()
        .expect("a sharded party lists its shards")
        .iter()
        .map(|shard| shard["ready"].clone())
        .collect();
    assert_eq!(ready, [json!(true), json!(false)], "{}", r.json());
    sharded
        .start_worker_with(&["--shard", "1/2"])
        .await
        .unwrap();
    wait_ready(api, http, &s).await;
    let r = send(http.get(format!("{s}/v1/info"))).await;
    assert_eq!(r.status, 200);
    api.check("get", "/v1/info", &r);
    let info = r.json();
    assert_eq!(info["kv"]["version"], 1, "{info}");
    assert_eq!(info["kv"]["value_size"], 40, "{info}");
    assert_eq!(info["signing"]["scheme"], "ed25519", "{info}");
    assert_eq!(info["signing"]["tail_len"], 72, "{info}");
    let published = std::fs::read_to_string(&public).unwrap();
    let key = info["signing"]["publisher_key"].as_str().unwrap();
    assert!(
        published.contains(key),
        "{key} is not the key in {published}"
    );
    assert!(info["shards"]
        .as_array()
        .unwrap()
        .iter()
        .all(|shard| shard["ready"] == true));
    // A query both shards answer.
    let bits = info["domain_bits"].as_u64().unwrap() as u8;
    let k = generate(bits, 1, &mut rand::rng()).unwrap().0.to_bytes();
    let r = send(
        http.post(format!("{s}/v1/queries"))
            .header("prefer", "wait=20")
            .json(&json!({"keys": [b64(&k)]})),
    )
    .await;
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    api.check("post", "/v1/queries", &r);
    // An update without the publisher's signatures is refused by a signed database.
    let page_size = info["page_size"].as_u64().unwrap() as usize;
    let unsigned = json!({"epoch": 1, "pages": [{"index": 0, "page": b64(&vec![7u8; page_size])}]});
    let r = send(
        http.post(format!("{s}/v1/admin/epochs"))
            .bearer_auth(TOKEN)
            .json(&unsigned),
    )
    .await;
    assert_eq!(
        (r.status, r.code().as_str()),
        (422, "unsigned_update"),
        "{}",
        String::from_utf8_lossy(&r.body)
    );
    api.check("post", "/v1/admin/epochs", &r);
    drop(sharded);

    eprintln!("openapi: every connection busy");
    let options = PartyOptions {
        gateway_args: ["--max-connections", "1"].map(String::from).to_vec(),
        no_worker: true,
        ..Default::default()
    };
    let busy = Party::start(Path::new(&signed_kv), "oabusy", options)
        .await
        .unwrap();
    // The one connection allowed, inside a request whose body never comes.
    let mut held = tokio::net::TcpStream::connect(busy.url.trim_start_matches("http://"))
        .await
        .unwrap();
    tokio::io::AsyncWriteExt::write_all(
        &mut held,
        b"POST /v1/queries HTTP/1.1\r\nhost: x\r\ncontent-length: 1000\r\n\r\n",
    )
    .await
    .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    // The gateway answers a connection past the cap as it accepts it, before reading a request.
    let r = raw(&busy.url, "").await;
    assert_eq!((r.status, r.code().as_str()), (503, "too_many_connections"));
    api.check_fallback("Busy", &r);
    drop((held, busy));

    eprintln!("openapi: variable-size values, a full Redis, one that stops fsyncing, then none");
    let options = PartyOptions {
        gateway_args: [
            "--admin-token",
            TOKEN,
            "--max-redis-memory",
            "1",
            "--durability",
            "fsync",
        ]
        .map(String::from)
        .to_vec(),
        redis_aof: true,
        ..Default::default()
    };
    let mut failing = Party::start(Path::new(&variable_kv), "oafail", options)
        .await
        .unwrap();
    let f = failing.url.clone();
    let r = send(http.get(format!("{f}/v1/info"))).await;
    assert_eq!(r.status, 200);
    api.check("get", "/v1/info", &r);
    let info = r.json();
    assert_eq!(
        (
            info["kv"]["version"].clone(),
            info["kv"]["value_kind"].clone()
        ),
        (json!(2), json!("variable")),
        "{info}"
    );
    assert!(
        info.get("signing").is_none() && info.get("shards").is_none(),
        "{info}"
    );
    // Redis is past a cap of one byte as soon as the gateway has sampled it (every second).
    let bits = info["domain_bits"].as_u64().unwrap() as u8;
    let request =
        json!({"keys": [b64(&generate(bits, 1, &mut rand::rng()).unwrap().0.to_bytes())]});
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let r = send(http.post(format!("{f}/v1/queries")).json(&request)).await;
        api.check("post", "/v1/queries", &r);
        if r.status == 429 {
            assert_eq!(r.code(), "storage_full");
            break;
        }
        assert_eq!(r.status, 202, "{}", String::from_utf8_lossy(&r.body));
        assert!(Instant::now() < deadline, "never storage_full");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // The job no longer certain to be on disk: Redis told to stop fsyncing every write (and,
    // where the gateway asks WAITAOF, to stop its append-only file).
    let mut conn = failing.redis().await.unwrap();
    for (name, value) in [("appendfsync", "everysec"), ("appendonly", "no")] {
        let () = redis::cmd("CONFIG")
            .arg("SET")
            .arg(name)
            .arg(value)
            .query_async(&mut conn)
            .await
            .unwrap();
    }
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let r = send(http.post(format!("{f}/v1/queries")).json(&request)).await;
        api.check("post", "/v1/queries", &r);
        if r.code() == "not_durable" {
            assert_eq!(r.status, 503);
            break;
        }
        assert_eq!(
            r.code(),
            "storage_full",
            "{}",
            String::from_utf8_lossy(&r.body)
        );
        assert!(Instant::now() < deadline, "never not_durable");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // A body that cannot be read (a broken chunked encoding) on the admin route.
    let r = raw(
        &f,
        "POST /v1/admin/epochs HTTP/1.1\r\nhost: x\r\nauthorization: Bearer openapi-admin-token\r\n\
         content-type: application/json\r\ntransfer-encoding: chunked\r\n\r\nZZ\r\nxx\r\n0\r\n\r\n",
    )
    .await;
    assert_eq!((r.status, r.code().as_str()), (400, "invalid_json"));
    api.check("post", "/v1/admin/epochs", &r);

    failing.redis.proc.kill();
    tokio::time::sleep(Duration::from_millis(200)).await;
    let id = format!("{:032x}", rand::random::<u128>());
    let update = json!({"epoch": 1, "pages": []});
    let probes = [
        ("get", "/readyz", http.get(format!("{f}/readyz"))),
        ("get", "/v1/info", http.get(format!("{f}/v1/info"))),
        (
            "post",
            "/v1/queries",
            http.post(format!("{f}/v1/queries")).json(&request),
        ),
        (
            "get",
            "/v1/queries/{id}",
            http.get(format!("{f}/v1/queries/{id}")),
        ),
        (
            "get",
            "/v1/queries/{id}",
            http.get(format!("{f}/v1/queries/{id}?wait=1")),
        ),
        (
            "get",
            "/v1/queries/{id}/events",
            http.get(format!("{f}/v1/queries/{id}/events")),
        ),
        (
            "post",
            "/v1/admin/epochs",
            http.post(format!("{f}/v1/admin/epochs"))
                .bearer_auth(TOKEN)
                .json(&update),
        ),
    ];
    for (method, path, req) in probes {
        let r = send(req).await;
        let what = format!("{method} {path} with Redis gone");
        assert_eq!(
            (r.status, r.code().as_str()),
            (503, "redis_unavailable"),
            "{what}"
        );
        api.check(method, path, &r);
    }
}

/// Four parties: `live` (a worker, an admin token, small limits), `stalled` (its worker
/// stopped once the database was registered: queries stay queued; one waiter, a backlog of
/// one), `empty` (no worker ever: no database), `guarded` (`--query-tokens`, one submit a
/// second); then the parties of [`kv_signed_sharded_and_failing_parties`]. At the end, every
/// documented answer and every error code it lists must have been produced and checked.
#[tokio::test]
async fn live_gateways_answer_every_route_as_documented() {
    let api = Api::load();
    let db = TestDb::create(PAGES, PAGE_SIZE as u32, 5).unwrap();
    let args = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    // The publisher's manifests `live` serves at /v1/manifests (signed.md §4.2).
    let manifests_dir = tempfile::tempdir().unwrap();
    let manifests = manifests_dir.path().join("manifests.json");
    let signer = PageSigner::new(SecretKey::generate());
    let list = [signer.manifest(1, pirq_shared::digest::Digest([3; 32]), vec![0, 2])];
    std::fs::write(&manifests, Manifest::list_to_json(&list)).unwrap();
    let manifests = manifests.display().to_string();
    let live = Party::start(
        &db.path,
        "oalive",
        PartyOptions {
            gateway_args: args(&[
                "--admin-token",
                TOKEN,
                "--body-limit",
                "8192",
                "--max-keys-per-query",
                "4",
                "--max-update-bytes",
                "4096",
                "--manifests",
                &manifests,
            ]),
            worker_args: args(&["--max-deliveries", "1"]),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    let mut stalled = Party::start(
        &db.path,
        "oastall",
        PartyOptions {
            gateway_args: args(&["--max-backlog", "1", "--max-waiters", "1"]),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    stalled.stop_workers();
    let empty = Party::start(
        &db.path,
        "oaempty",
        PartyOptions {
            gateway_args: args(&["--admin-token", TOKEN]),
            no_worker: true,
            ..Default::default()
        },
    )
    .await
    .unwrap();
    // Every answer within 40 s (the longest wait asked for is 20 s): a hang is a failure.
    let tokens = tempfile::tempdir().unwrap();
    let token_file = tokens.path().join("tokens");
    std::fs::write(&token_file, "openapi-query-token\n").unwrap();
    let guarded = Party::start(
        &db.path,
        "oaguard",
        PartyOptions {
            gateway_args: vec![
                "--query-tokens".into(),
                token_file.display().to_string(),
                "--token-rate".into(),
                "1".into(),
            ],
            ..Default::default()
        },
    )
    .await
    .unwrap();
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(40))
        .build()
        .unwrap();
    let url = live.url.as_str();

    eprintln!("openapi: probes");
    // Probes.
    let deadline = Instant::now() + Duration::from_secs(15);
    let ready = loop {
        let r = send(http.get(format!("{url}/readyz"))).await;
        if r.status == 200 || Instant::now() > deadline {
            break r;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(
        ready.status,
        200,
        "{}",
        String::from_utf8_lossy(&ready.body)
    );
    api.check("get", "/readyz", &ready);
    let r = send(http.get(format!("{url}/healthz"))).await;
    assert_eq!(r.status, 200);
    api.check("get", "/healthz", &r);
    let r = send(http.get(format!("{url}/metrics"))).await;
    assert_eq!(r.status, 200);
    api.check("get", "/metrics", &r);
    let r = send(http.get(format!("{}/readyz", stalled.url))).await;
    assert_eq!((r.status, r.code().as_str()), (503, "no_workers"));
    api.check("get", "/readyz", &r);
    let r = send(http.get(format!("{}/readyz", empty.url))).await;
    assert_eq!((r.status, r.code().as_str()), (503, "no_database"));
    api.check("get", "/readyz", &r);

    eprintln!("openapi: info");
    // Info.
    let r = send(http.get(format!("{url}/v1/info"))).await;
    assert_eq!(r.status, 200);
    api.check("get", "/v1/info", &r);
    assert!(r.json()["digest"].is_string() && r.json()["party"].is_string());
    let r = send(http.get(format!("{}/v1/info", empty.url))).await;
    assert_eq!((r.status, r.code().as_str()), (503, "no_database"));
    api.check("get", "/v1/info", &r);

    eprintln!("openapi: manifests");
    let r = send(http.get(format!("{url}/v1/manifests"))).await;
    assert_eq!(r.status, 200);
    api.check("get", "/v1/manifests", &r);
    assert_eq!(Manifest::parse_list(&r.body).unwrap(), list);
    let r = send(http.get(format!("{}/v1/manifests", empty.url))).await;
    assert_eq!((r.status, r.code().as_str()), (404, "no_manifests"));
    api.check("get", "/v1/manifests", &r);

    eprintln!("openapi: queries");
    // Queries: accepted (JSON and bincode answers), answered inline, read, streamed.
    let request = json!({"keys": [b64(&key(3))]});
    api.accepts_request("/v1/queries", "post", &request);
    api.accepts_request(
        "/v1/queries",
        "post",
        &json!({"keys": [b64(&key(3))], "epoch": 0}),
    );
    let post = || http.post(format!("{url}/v1/queries"));
    let r = send(post().json(&request)).await;
    assert_eq!(r.status, 202);
    api.check("post", "/v1/queries", &r);
    let first = r.json()["id"].as_str().unwrap().to_string();
    let bincode = QueryRequest {
        keys: vec![key(4)],
        epoch: None,
    }
    .to_bincode();
    let r = send(
        post()
            .header(CONTENT_TYPE, "application/x-bincode")
            .header("accept", "application/x-bincode")
            .body(bincode),
    )
    .await;
    assert_eq!(r.status, 202);
    api.check("post", "/v1/queries", &r);
    let r = send(post().header("prefer", "wait=20").json(&request)).await;
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(r.headers["preference-applied"], "wait");
    api.check("post", "/v1/queries", &r);
    let r = send(
        post()
            .header("prefer", "wait=20")
            .header("accept", "application/x-bincode")
            .json(&request),
    )
    .await;
    assert_eq!(r.status, 200);
    api.check("post", "/v1/queries", &r);

    let status_url = |base: &str, id: &str| format!("{base}/v1/queries/{id}");
    let r = send(http.get(status_url(url, &first) + "?wait=20")).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.json()["status"], "done");
    api.check("get", "/v1/queries/{id}", &r);
    let r = send(
        http.get(status_url(url, &first))
            .header("accept", "application/x-bincode"),
    )
    .await;
    assert_eq!(r.status, 200);
    api.check("get", "/v1/queries/{id}", &r);
    let r = send(http.get(status_url(url, &first) + "/events")).await;
    assert_eq!(r.status, 200);
    let events = api.check("get", "/v1/queries/{id}/events", &r);
    assert_eq!(events.last().unwrap().0, "result");

    eprintln!("openapi: a job no gateway");
    // A job no gateway would accept, answered `failed` by the worker.
    let mut conn = live.redis().await.unwrap();
    let mut poison = key(5);
    poison[0] = 9;
    let poison_job = Job {
        keys: vec![poison],
        epoch: None,
        accepted_ms: 0,
        reply: Default::default(),
    }
    .to_bincode();
    let failed = format!("{:032x}", rand::random::<u128>());
    pirq_testkit::jobs::enqueue(&mut conn, &live.layout(), &failed, &poison_job)
        .await
        .unwrap();
    let r = send(http.get(status_url(url, &failed) + "?wait=20")).await;
    assert_eq!(
        (r.status, r.json()["status"].as_str()),
        (200, Some("failed"))
    );
    api.check("get", "/v1/queries/{id}", &r);

    eprintln!("openapi: pending");
    // Pending: the stalled party queues and never answers.
    let s = stalled.url.as_str();
    let r = send(http.post(format!("{s}/v1/queries")).json(&request)).await;
    assert_eq!(r.status, 202);
    api.check("post", "/v1/queries", &r);
    let pending = r.json()["id"].as_str().unwrap().to_string();
    for req in [
        http.get(status_url(s, &pending)),
        http.get(status_url(s, &pending) + "?wait=0.2"),
        http.get(status_url(s, &pending))
            .header("accept", "application/x-bincode"),
    ] {
        let r = send(req).await;
        assert_eq!(r.status, 202);
        api.check("get", "/v1/queries/{id}", &r);
    }
    // The backlog holds one job: the next query is refused.
    let r = send(http.post(format!("{s}/v1/queries")).json(&request)).await;
    assert_eq!((r.status, r.code().as_str()), (429, "backlog_full"));
    api.check("post", "/v1/queries", &r);
    // One event stream open takes the one waiter slot: its first event, then a second
    // stream is refused.
    let mut stream = http
        .get(status_url(s, &pending) + "/events")
        .send()
        .await
        .unwrap();
    assert_eq!(stream.status(), 200);
    let headers = stream.headers().clone();
    let mut head = Vec::new();
    while !String::from_utf8_lossy(&head).contains("\n\n") {
        let chunk = tokio::time::timeout(Duration::from_secs(10), stream.chunk())
            .await
            .expect("the first event within 10 s")
            .unwrap()
            .expect("the stream stays open");
        head.extend_from_slice(&chunk);
    }
    let first_event = Reply {
        status: 200,
        headers,
        body: head,
    };
    let events = api.check("get", "/v1/queries/{id}/events", &first_event);
    assert_eq!(events[0].0, "status");
    let r = send(http.get(status_url(s, &pending) + "/events")).await;
    assert_eq!((r.status, r.code().as_str()), (503, "too_many_waiters"));
    api.check("get", "/v1/queries/{id}/events", &r);
    let r = send(http.get(status_url(s, &pending) + "?wait=1")).await;
    assert_eq!((r.status, r.code().as_str()), (503, "too_many_waiters"));
    api.check("get", "/v1/queries/{id}", &r);
    drop(stream);

    eprintln!("openapi: idempotency");
    // Idempotency: a replay of a final query, a key reused, a malformed key.
    let r = send(post().header("idempotency-key", "\"oa-1\"").json(&request)).await;
    assert_eq!(r.status, 202);
    let replayed = r.json()["id"].as_str().unwrap().to_string();
    let r = send(http.get(status_url(url, &replayed) + "?wait=20")).await;
    assert_eq!(r.status, 200);
    let r = send(post().header("idempotency-key", "\"oa-1\"").json(&request)).await;
    assert_eq!(
        (r.status, r.json()["id"].as_str()),
        (200, Some(replayed.as_str()))
    );
    api.check("post", "/v1/queries", &r);
    let other = json!({"keys": [b64(&key(6))]});
    let r = send(post().header("idempotency-key", "\"oa-1\"").json(&other)).await;
    assert_eq!(
        (r.status, r.code().as_str()),
        (422, "idempotency_key_reused")
    );
    api.check("post", "/v1/queries", &r);

    eprintln!("openapi: every request error");
    // Every request error of POST /v1/queries.
    let mut bad_version = key(1);
    bad_version[0] = 2;
    let mut bad_party = key(1);
    bad_party[1] = 2;
    let mut bad_bits = key(1);
    bad_bits[2] = 0;
    let mut bad_control = key(1);
    bad_control[19 + 16] = 0b100;
    let wrong_domain = generate(N + 1, 1, &mut rand::rng()).unwrap().0.to_bytes();
    let json_cases: Vec<(Value, u16, &str)> = vec![
        (json!({"keys": "AQID"}), 400, "invalid_json"),
        (
            json!({"keys": [b64(&key(1))], "extra": 1}),
            400,
            "invalid_json",
        ),
        (json!({"keys": ["not base64!"]}), 400, "invalid_base64"),
        (json!({"keys": []}), 400, "no_keys"),
        (
            json!({"keys": (0..5).map(|i| b64(&key(i))).collect::<Vec<_>>()}),
            400,
            "too_many_keys",
        ),
        (json!({"keys": [b64(&[1, 0])]}), 400, "key_too_short"),
        (json!({"keys": [b64(&bad_version)]}), 400, "key_version"),
        (json!({"keys": [b64(&bad_party)]}), 400, "key_party"),
        (json!({"keys": [b64(&bad_bits)]}), 400, "key_domain_bits"),
        (json!({"keys": [b64(&key(1)[..40])]}), 400, "key_length"),
        (
            json!({"keys": [b64(&bad_control)]}),
            400,
            "key_control_byte",
        ),
        (
            json!({"keys": [b64(&wrong_domain)]}),
            400,
            "key_domain_mismatch",
        ),
        (
            json!({"keys": [b64(&key(1))], "epoch": 99}),
            410,
            "epoch_unavailable",
        ),
    ];
    for (body, status, code) in &json_cases {
        let r = send(post().json(body)).await;
        assert_eq!((r.status, r.code().as_str()), (*status, *code), "{body}");
        api.check("post", "/v1/queries", &r);
        if *code == "epoch_unavailable" {
            // A well-formed request the document accepts, refused by the party's state.
            api.accepts_request("/v1/queries", "post", body);
        } else if ["invalid_json", "invalid_base64", "no_keys"].contains(code) {
            // The document's own schema refuses what the gateway refuses for its shape (the
            // key count's bound is the party's, in /v1/info; key bytes are SPEC §1.3's).
            assert!(
                !api.errors("#/components/schemas/QueryRequest", body)
                    .is_empty(),
                "the document accepts {body}, which the gateway refuses with {code}"
            );
        }
    }
    let raw_cases: Vec<(reqwest::RequestBuilder, u16, &str)> = vec![
        (
            post()
                .header(CONTENT_TYPE, "application/json")
                .body("{not json"),
            400,
            "invalid_json",
        ),
        (
            post()
                .header(CONTENT_TYPE, "application/x-bincode")
                .body(vec![0xff, 0xff, 0xff]),
            400,
            "invalid_bincode",
        ),
        (
            post().header(CONTENT_TYPE, "text/plain").body("hi"),
            415,
            "unsupported_media_type",
        ),
        (
            post()
                .header(CONTENT_TYPE, "application/json")
                .body("x".repeat(9000)),
            413,
            "body_too_large",
        ),
        (
            post().header("idempotency-key", "").json(&request),
            400,
            "invalid_idempotency_key",
        ),
    ];
    for (req, status, code) in raw_cases {
        let r = send(req).await;
        assert_eq!((r.status, r.code().as_str()), (status, code));
        api.check("post", "/v1/queries", &r);
    }
    let r = send(
        http.post(format!("{}/v1/queries", empty.url))
            .json(&request),
    )
    .await;
    assert_eq!((r.status, r.code().as_str()), (503, "no_database"));
    api.check("post", "/v1/queries", &r);

    eprintln!("openapi: query tokens");
    // Query tokens: none or a wrong one is 401 on the query routes; submits past the rate, 429.
    let g = guarded.url.as_str();
    let r = send(http.get(format!("{g}/v1/info"))).await;
    assert_eq!(r.status, 200, "/v1/info needs no token");
    let r = send(http.post(format!("{g}/v1/queries")).json(&request)).await;
    assert_eq!((r.status, r.code().as_str()), (401, "unauthorized"));
    api.check("post", "/v1/queries", &r);
    let submit = || {
        http.post(format!("{g}/v1/queries"))
            .bearer_auth("openapi-query-token")
            .json(&request)
    };
    let r = send(submit()).await;
    assert_eq!(r.status, 202);
    api.check("post", "/v1/queries", &r);
    let id = r.json()["id"].as_str().unwrap().to_string();
    for (suffix, path) in [
        ("", "/v1/queries/{id}"),
        ("/events", "/v1/queries/{id}/events"),
    ] {
        let target = status_url(g, &id) + suffix;
        let r = send(http.get(&target).bearer_auth("wrong-token")).await;
        assert_eq!((r.status, r.code().as_str()), (401, "unauthorized"));
        api.check("get", path, &r);
    }
    // Bursts of up to two a second: the third at once is refused.
    let mut limited = None;
    for _ in 0..4 {
        let r = send(submit()).await;
        if r.status == 429 {
            limited = Some(r);
            break;
        }
    }
    let r = limited.expect("a submit past --token-rate is refused");
    assert_eq!(r.code(), "rate_limited");
    api.check("post", "/v1/queries", &r);

    eprintln!("openapi: errors of the id routes");
    // Errors of the id routes.
    for suffix in ["", "/events"] {
        let path = format!("/v1/queries/{{id}}{suffix}");
        let r = send(http.get(format!("{url}/v1/queries/NOT-AN-ID{suffix}"))).await;
        assert_eq!((r.status, r.code().as_str()), (400, "invalid_id"));
        api.check("get", &path, &r);
        let unknown = format!("{:032x}", rand::random::<u128>());
        let r = send(http.get(format!("{url}/v1/queries/{unknown}{suffix}"))).await;
        assert_eq!((r.status, r.code().as_str()), (404, "not_found"));
        api.check("get", &path, &r);
    }
    let r = send(http.get(status_url(url, &first) + "?wait=soon")).await;
    assert_eq!((r.status, r.code().as_str()), (400, "invalid_parameter"));
    api.check("get", "/v1/queries/{id}", &r);

    eprintln!("openapi: admin");
    // Admin: an epoch appended, then every refusal.
    let admin = |base: &str| http.post(format!("{base}/v1/admin/epochs"));
    let update = json!({"epoch": 1, "pages": [{"index": 3, "page": b64(&[7u8; PAGE_SIZE])}]});
    api.accepts_request("/v1/admin/epochs", "post", &update);
    let r = send(admin(url).bearer_auth(TOKEN).json(&update)).await;
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    api.check("post", "/v1/admin/epochs", &r);
    let short_page = json!({"epoch": 2, "pages": [{"index": 3, "page": b64(&[7u8; 10])}]});
    let admin_cases: Vec<(reqwest::RequestBuilder, u16, &str)> = vec![
        (
            admin(url).bearer_auth(TOKEN).json(&update),
            409,
            "epoch_not_next",
        ),
        (
            admin(url).bearer_auth(TOKEN).json(&short_page),
            400,
            "invalid_update",
        ),
        (
            admin(url).bearer_auth("wrong").json(&update),
            401,
            "unauthorized",
        ),
        (admin(url).json(&update), 401, "unauthorized"),
        (
            admin(url)
                .bearer_auth(TOKEN)
                .header(CONTENT_TYPE, "text/plain")
                .body("x"),
            415,
            "unsupported_media_type",
        ),
        (
            admin(url)
                .bearer_auth(TOKEN)
                .header(CONTENT_TYPE, "application/json")
                .body("x".repeat(5000)),
            413,
            "body_too_large",
        ),
        (
            admin(s).bearer_auth(TOKEN).json(&update),
            403,
            "admin_disabled",
        ),
        (
            admin(&empty.url).bearer_auth(TOKEN).json(&update),
            503,
            "no_database",
        ),
    ];
    for (req, status, code) in admin_cases {
        let r = send(req).await;
        assert_eq!((r.status, r.code().as_str()), (status, code));
        api.check("post", "/v1/admin/epochs", &r);
    }

    eprintln!("openapi: limits of the request head");
    // Limits of the request head, on every route; the fallback's 404 and 405.
    for route in Route::ALL {
        let path = route.path().replace("{id}", &first);
        let target = format!("{url}{path}?pad={}", "a".repeat(9000));
        let r = send(http.request(route.method(), target)).await;
        assert_eq!((r.status, r.code().as_str()), (414, "uri_too_long"));
        api.check(&route.method().as_str().to_lowercase(), route.path(), &r);
        let r = send(
            http.request(route.method(), format!("{url}{path}"))
                .header("x-pad", "a".repeat(40_000)),
        )
        .await;
        assert_eq!((r.status, r.code().as_str()), (431, "headers_too_large"));
        api.check(&route.method().as_str().to_lowercase(), route.path(), &r);
    }
    let r = send(http.get(format!("{url}/v2/nothing"))).await;
    assert_eq!((r.status, r.code().as_str()), (404, "not_found"));
    api.check_fallback("NotFound", &r);
    let r = send(http.delete(format!("{url}/v1/info"))).await;
    assert_eq!((r.status, r.code().as_str()), (405, "method_not_allowed"));
    api.check_fallback("MethodNotAllowed", &r);

    kv_signed_sharded_and_failing_parties(&api, &http).await;

    // Every documented answer was produced and checked, but the few listed with a reason.
    let seen = api.seen.lock().unwrap().clone();
    let mut missing = Vec::new();
    for (path, item) in api.root["paths"].as_object().unwrap() {
        for method in METHODS.iter().filter(|m| item.get(**m).is_some()) {
            for status in item[*method]["responses"].as_object().unwrap().keys() {
                let key = (path.clone(), method.to_string(), status.clone());
                if !seen.contains(&key) && !produced_elsewhere(path, method, status) {
                    missing.push(format!("{method} {path} {status}"));
                }
            }
        }
    }
    assert!(
        missing.is_empty(),
        "documented but never produced here: {missing:?}"
    );
    // And every error code those answers list, each body checked against its answer.
    let codes = api.codes.lock().unwrap().clone();
    let missing: Vec<String> = listed_codes(&api)
        .into_iter()
        .filter(|answer| !codes.contains(answer) && !code_produced_elsewhere(answer))
        .map(|(path, method, status, code)| format!("{method} {path} {status} {code}"))
        .collect();
    assert!(
        missing.is_empty(),
        "documented error bodies never produced here: {missing:?}"
    );
}
